"""Two of TraceWeaver's baselines (SIGCOMM'24, section 6), our own implementations from their papers'
descriptions, as `infer(messages, **params)` over call pairs (callpairs.py):

- **FCFS** (`fcfs`): a service serves its requests first come, first served, per callee: its calls to
  a callee, in the order they leave, go to its incoming calls in the order they arrived, one each
  (the i-th call to D to the i-th incoming call, as TraceWeaver's artifact's FCFS pairs them,
  fcfs.py there), among the incoming calls enclosing the call: the earliest-arrived one that has
  made the fewest calls to D so far. (Until issue 43's fifth pass an outgoing call went to the
  earliest-arrived enclosing incoming call, whatever it had made: a slow request took every call
  while it was open; media 150 10.2% against 30.6% now, node 97.8-99.1% now.)
- **vPath** (`vpath`, Tak et al., USENIX ATC'09): a request is served by one thread from its arrival
  to its reply, so an outgoing call belongs to the incoming call the same thread received (the
  latest-started such enclosing one). Where the trace has no thread ids (span exports) or a pair's
  thread is unknown, the latest-started enclosing incoming call is taken (nesting's tie rule), as
  the warning says.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.paths.callpairs import call_pairs, candidates, pick, result, threads
from analysis.paths.model import PathsResult

DEFAULTS: dict[str, object] = {"max_parents": 64}   # candidate incoming calls looked at per call


def _check(name: str, params: dict) -> dict:
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"{name}: unknown parameters {sorted(unknown)} (known: {sorted(DEFAULTS)})")
    return {**DEFAULTS, **params}


def fcfs(messages: pd.DataFrame, **params) -> PathsResult:
    p = _check("fcfs", params)
    cp = call_pairs(messages)
    child, parent, _ = candidates(cp, int(p["max_parents"]))
    chosen = np.full(cp.n, -1, dtype=np.int64)
    if child.size:
        o = np.lexsort((parent, cp.in_start[parent], child))      # each call's candidates by arrival
        child, parent = child[o], parent[o]
        lo = np.searchsorted(child, np.arange(cp.n)).tolist()
        hi = np.searchsorted(child, np.arange(cp.n), "right").tolist()
        kids = np.unique(child)
        kids = kids[np.lexsort((kids, cp.out_start[kids]))].tolist()   # the calls in the order they left
        nn, callee, par = cp.nodes.n, cp.callee.tolist(), parent.tolist()
        made: dict[int, int] = {}                     # calls made so far per (incoming call, callee)
        for c in kids:                                # sequential: each choice counts for the next
            d, best, least = callee[c], -1, -1
            for q in par[lo[c]:hi[c]]:
                k = made.get(q * nn + d, 0)
                if least < 0 or k < least:
                    best, least = q, k
                    if not k:
                        break
            chosen[c] = best
            made[best * nn + d] = least + 1
    return result("fcfs", cp, chosen, p)


def vpath(messages: pd.DataFrame, **params) -> PathsResult:
    p = _check("vpath", params)
    cp = call_pairs(messages)
    child, parent, rank = candidates(cp, int(p["max_parents"]))
    warnings = []
    th = threads(cp)
    if th is None:
        warnings.append("no thread ids in the trace: each call taken by the latest-started enclosing "
                        "incoming call (vPath needs threads)")
        key = rank.astype(np.float64)
    else:
        got, sent = th
        known = sent[child] >= 0
        same = known & (got[parent] == sent[child])
        # the same thread first; a call whose thread is unknown falls back to the latest-started
        key = np.where(same | ~known, 0.0, 1e6) + rank
        hopeless = np.bincount(child[known & ~same], minlength=cp.n) == np.bincount(child, minlength=cp.n)
        hopeless &= np.bincount(child, minlength=cp.n) > 0
        if hopeless.any():
            warnings.append(f"{int(hopeless.sum())} calls sent by a thread that received no enclosing call "
                            "(work handed between threads): taken by the latest-started enclosing call")
    return result("vpath", cp, pick(child, parent, key, cp.n), p, warnings)


fcfs.DEFAULTS = DEFAULTS
vpath.DEFAULTS = DEFAULTS
