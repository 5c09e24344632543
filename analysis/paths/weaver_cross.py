"""TraceWeaver's whole-request consistency, as a cross-service term for weaver.py's mapping (issue
43, fourth pass; our own design after the paper's iteration between per-service mappings and
end-to-end consistency: its exact form could not be sourced here).

A mapping of the services upstream of X already ties X's incoming calls into requests: following
each incoming call's chosen parent up to its root groups the calls one request makes to X (in the
media traces, the five uploads compose-review-service receives per review, from five callers). A
service that *joins* them makes its outgoing calls from one of them once the others are done: in
media 25, under the truth, compose-review-service's calls leave 0.6-4.0 ms (5-95%) after the latest
reply among the request's other uploads, where its own upload's arrival is 1.5-7.5 ms before. Nothing
local knows that; a candidate whose request still has another upload in progress (the gap below 0)
or done long before cannot be the one making the call.

Per candidate edge (outgoing call c, enclosing incoming call p at X): the *join gap*, from the
latest reply among the other incoming calls of p's inferred request at X to c's departure, its
density per (X, callee) learned from the current mapping's chosen edges (log-spaced bins as
weaver.py's, smoothed alike; a gap <= 0 its own bin; a request that reaches X once another), and
the cost -log density against the key's likeliest bin: where requests reach X once, every candidate
is in that bin and the term is 0 for all. Only the inferred mapping and the timing are read, never a
parent link. weaver.py then runs the joint choice again (weaver_joint.refine, one round, on the
components where the term tells some call's candidates apart) for `cross_rounds` rounds.

Tried and left out (media 25 and the dev sets overlaid with shifted copies of themselves): two
categorical facts in place of the gap (all the request's calls at X arrived before c left; p
replied last of them): 92.5-92.7% on media 25 against 92.8% without; the per-callee assignment run
again with the term before the joint choice: within 0.5 points of this (92.9 against 93.1% on media
25; 89.6 / 84.8 against 89.3 / 84.3% on it overlaid twice / three times) at 1.35 times the CPU.
"""

from __future__ import annotations

import numpy as np

from analysis.paths.callpairs import roots
from analysis.paths.weaver_joint import FLOOR, HI, LO, density_table, log_bins


def join_costs(cp, child: np.ndarray, parent: np.ndarray, chosen: np.ndarray, per_decade: int,
               kernel: float) -> tuple[np.ndarray, bool]:
    """Per candidate edge (child c, parent p), -log the learned density of the *join gap*: from the
    latest reply among the other calls p's inferred request made to p's service to c's departure
    (log-spaced bins; a gap <= 0, others still in progress, its own bin; a request that came once,
    another), per (service, callee) from the current mapping's chosen edges, against the key's
    likeliest bin. And whether any chosen edge has company (else the term is flat: nothing joins)."""
    nn = cp.nodes.n
    root = roots(chosen)
    # each incoming pair's group: its inferred request at its service; the latest and second
    # latest reply in the group (p's "others" exclude p itself)
    group = root * nn + cp.callee
    o = np.lexsort((cp.in_end, group))
    gs, es = group[o], cp.in_end[o]
    last = np.r_[gs[1:] != gs[:-1], True]
    gid = np.cumsum(np.r_[True, gs[1:] != gs[:-1]]) - 1
    top = es[last]                                  # per group, its latest reply
    n_g = np.bincount(gid)
    second = np.full(len(top), -np.inf)
    has2 = n_g >= 2
    end_idx = np.flatnonzero(last)
    second[has2] = es[end_idx[has2] - 1]
    g_of = np.empty(cp.n, dtype=np.int64)
    g_of[o] = gid
    is_top = np.zeros(cp.n, dtype=bool)
    is_top[o[end_idx]] = True
    others = np.where(is_top, second[g_of], top[g_of])  # the latest reply of the others
    alone = n_g[g_of] < 2
    gap = cp.out_start[child] - np.where(alone, 0.0, others)[parent]
    n_bins = int((HI - LO) * per_decade) + 1
    b = np.where(alone[parent], 0, np.where(gap > 0, log_bins(np.maximum(gap, FLOOR), per_decade) + 2, 1))
    key = cp.callee[parent] * nn + cp.callee[child]
    kuniq, kcode = np.unique(key, return_inverse=True)
    mine = chosen[child] == parent
    table = density_table(kcode[mine], b[mine], len(kuniq), n_bins + 2, kernel)
    cost = table[kcode].max(axis=1) - table[kcode, b]
    return cost, bool((b[mine] > 0).any())
