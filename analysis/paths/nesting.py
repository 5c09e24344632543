"""Project5's nesting algorithm (blackbox-debugging-slides.txt, slides 12-16) for RPC-style traces:
messages tagged call or return, a call paired with its return by the message id.

The slides' four procedures, in linear time over numpy arrays (sorted sweeps instead of the
pseudo-code's per-entry loops, no pairwise comparison of all calls):

1. **FindCallPairs**: a call A>B with id `msg` pairs with the next return B>A with the same id (a
   stable sort by time on the caller's clock, then radix passes by id, then adjacent rows). Calls without a return and returns without a
   call are counted and left out.
2. **Parents**: the candidate parents of a call pair B>C (sent by B at t2, its return received at t3)
   are the call pairs X>B that *enclose* it on B's side: X's call reached B before t2 and B returned to
   X after t3. Found by sorting the incoming calls' starts per node and looking each outgoing call's
   start up in its node's run (binary search), then a short walk back over the incoming calls that started earlier, stopped once
   none can still be open (they started longer ago than the longest incoming call lasted) or after
   `max_parents` candidates.
3. **ScoreNestings / FindNestedPairs**: every (parent, child) candidate adds `1/len(child.parents)` to
   `scoreboard[A, B, C, delay]`, where the delay `t2 - t1` (the child call's send minus the parent
   call's arrival) is taken in bins of `bin` seconds: the slides' "histograms keep track of possible
   latencies". Each child then takes the candidate with the highest `scoreboard[...] * penalty`; ties
   go to the latest-started candidate. A pair with no candidate is a path root.
4. **FindCallPaths**: each root's call tree, turned into the model's message-causality tree (a
   message a node sends is caused by the latest message that node received within the same parent
   call pair before sending it: the first nested call by the parent call, a sequential call by the
   previous call's return, parallel calls all by the parent call, the return by the last nested
   return), then aggregated into patterns by `assemble`.

Choices where the slides are unclear (written down here because they change results):

- `timestamps`: the slides' trace has one timestamp per message; `"send"` uses the sender's time for
  both sides of every comparison (the slides' algorithm, sensitive to clock offsets as WAP5 5.3
  notes); `"local"` (default) compares times on one node's own clock (a call's arrival and a nested
  call's departure are both B's clock), which WAP5's reconciled traces allow and which makes nesting
  immune to clock offsets. Node delays are always measured on the node's own clock where the trace
  has both timestamps.
- `penalty`: the pseudo-code multiplies the score by an unspecified penalty; here it is
  `penalty ** (rank of the candidate by start, 0 = latest-started)`, default 1.0 (no penalty).
- `orphans`: the slides make every call pair without a parent the root of a path. A call pair whose
  caller is itself called by others (a server) and that has no parent is usually a fragment: its
  parent's call or return was dropped from the trace, or it is noise between servers. `"drop"`
  leaves such trees out of the patterns (counted in the warnings); `"keep"` (default) is the slides'.
- `score`: `"pre"` (default) is the slides' scoreboard of `t2 - t1`; `"pre+post"` multiplies in a
  second scoreboard of the delay after the child's return (`t4 - t3`), which tells parallel parents
  apart better (our addition, not the slides'). `rounds` > 1 rebuilds the scoreboard from the
  previous round's choices only (the slides score once).
- The pseudo-code's `parents` test `t3 < t2` is read as "the parent call started before the child
  call and is still open when the child returns" (enclosure).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.paths.assemble import (
    Forest,
    clocks,
    ensure_messages,
    int_order,
    kind_codes,
    node_codes,
    order_by,
    positions_in_runs,
    result_from_forest,
)
from analysis.paths.model import PathsResult

DEFAULTS: dict[str, object] = {
    "bin": 0.001,            # s, width of the scoreboard's delay bins
    "penalty": 1.0,          # score factor per rank of a candidate parent (1: none)
    "max_parents": 64,       # candidate parents considered per call pair
    "timestamps": "local",   # "local" (each node's own clock) or "send" (the sender's time only)
    "score": "pre",          # "pre": the slides' t2-t1 scoreboard; "pre+post": also t4-t3
    "rounds": 1,             # scoring rounds; later rounds count only the previous round's choices
    "orphans": "keep",       # "keep": every parentless call pair roots a path (the slides);
                             # "drop": only those whose caller is never called (see docstring)
}


def pair_calls(kind: np.ndarray, msg: np.ndarray, caller: np.ndarray, callee: np.ndarray,
               t_caller: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(call rows, return rows, unpaired calls, unpaired returns): FindCallPairs. `caller`/`callee`
    and `t_caller` are per message, already turned round for returns (a return's caller is its
    receiver; its time is when the caller got it)."""
    cand = np.flatnonzero(((kind == 1) | (kind == 2)) & (msg >= 0))
    # by id, then by time on the caller's clock (a call's send, a return's receipt: one clock, so
    # a call comes before its return whatever the callee's clock says, also where an id repeats)
    rows = cand[int_order(msg[cand], np.argsort(t_caller[cand], kind="stable"))]
    r = (kind[rows] == 2).astype(np.int8)
    same = ((msg[rows][:-1] == msg[rows][1:]) & (caller[rows][:-1] == caller[rows][1:])
            & (callee[rows][:-1] == callee[rows][1:]))
    ok = (r[:-1] == 0) & (r[1:] == 1) & same
    calls, rets = rows[:-1][ok], rows[1:][ok]
    return calls, rets, int((kind[cand] == 1).sum()) - len(calls), int((kind[cand] == 2).sum()) - len(rets)


def candidate_parents(node_in: np.ndarray, in_start: np.ndarray, in_end: np.ndarray,
                      node_out: np.ndarray, out_start: np.ndarray, out_end: np.ndarray,
                      max_parents: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(child, parent, rank) for every pair `parent` whose incoming interval at node_in encloses
    pair `child`'s outgoing interval at the same node (node_out[child] == node_in[parent]);
    rank 0 is the latest-started candidate."""
    n = len(node_in)
    # incoming starts in (node, time) order; each outgoing start is looked up in its node's run
    inc = order_by(node_in, in_start)
    # per query, how many of its node's incoming calls started by its start (incoming first at
    # equal times), and where its node's run begins
    qpos, group_start = positions_in_runs(node_in[inc], in_start[inc], node_out, out_start)
    longest = np.zeros(int(max(node_in.max(initial=-1), node_out.max(initial=-1))) + 1)
    np.maximum.at(longest, node_in, in_end - in_start)

    child, parent, rank = [], [], []
    q = np.arange(n)
    j = qpos - 1                                         # latest incoming start not after the query
    found = np.zeros(n, dtype=np.int64)
    for _ in range(8 * max_parents):
        live = (j >= group_start[q]) & (found < max_parents)
        q, j, found = q[live], j[live], found[live]
        if q.size == 0:
            break
        p = inc[j]
        live = in_start[p] >= out_start[q] - longest[node_out[q]]
        q, j, found, p = q[live], j[live], found[live], p[live]
        hit = (in_end[p] >= out_end[q]) & (p != q)
        child.append(q[hit])
        parent.append(p[hit])
        rank.append(found[hit])
        found = found + hit
        j = j - 1
    def cat(parts):
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    return cat(child), cat(parent), cat(rank)


def _board_scores(keys: list[np.ndarray], weight: np.ndarray) -> np.ndarray:
    """Per candidate, the product over the key sets of the scoreboard entry its key falls in."""
    score = np.ones(len(weight))
    for key in keys:
        score *= np.bincount(key, weights=weight)[key]
    return score


def _first_per_child(child: np.ndarray, rank: np.ndarray, score: np.ndarray,
                     by_child: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Positions of each child's best candidate (highest score, ties to the lowest rank).
    by_child: the candidates in (child, rank) order; starts: where each child's run begins."""
    sc = score[by_child]
    top = np.maximum.reduceat(sc, starts)
    run = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(sc))))
    hit = np.flatnonzero(sc == top[run])
    first = np.ones(hit.size, dtype=bool)
    first[1:] = run[hit][1:] != run[hit][:-1]
    return by_child[hit[first]]


def best_parents(child: np.ndarray, parent: np.ndarray, rank: np.ndarray, triple: np.ndarray,
                 delays: list[np.ndarray], n_pairs: int, bin_s: float, penalty: float,
                 rounds: int) -> np.ndarray:
    """ScoreNestings + FindNestedPairs: the chosen parent pair per pair (-1: a root). `triple` codes
    (A, B, C) per candidate; `delays` the delays each scoreboard bins (one scoreboard per delay)."""
    chosen = np.full(n_pairs, -1, dtype=np.int64)
    if child.size == 0:
        return chosen
    n_cand = np.bincount(child, minlength=n_pairs)
    # (A, B, C, delay bin) as one int64: bins are capped far beyond any real delay
    keys = [pd.factorize(triple * (1 << 24) + np.minimum(np.floor(np.clip(d, 0, None) / bin_s),
                                                         (1 << 24) - 1).astype(np.int64))[0]
            for d in delays]
    weight = 1.0 / n_cand[child]
    # candidates come out of the walk in rank order, so a stable sort by child gives (child, rank)
    by_child = int_order(child)
    starts = np.flatnonzero(np.r_[True, child[by_child][1:] != child[by_child][:-1]])
    for _ in range(max(1, rounds)):
        score = _board_scores(keys, weight)
        if penalty != 1.0:
            score = score * np.power(penalty, rank)
        best = _first_per_child(child, rank, score, by_child, starts)
        # the next round's scoreboard counts only the chosen nestings
        weight = np.zeros(len(child))
        weight[best] = 1.0
    chosen[child[best]] = parent[best]
    return chosen


def message_forest(n: int, calls: np.ndarray, rets: np.ndarray, chosen: np.ndarray,
                   t_at_callee_in: np.ndarray, t_at_callee_out: np.ndarray,
                   t_at_caller_out: np.ndarray, t_at_caller_in: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(parent per message, is_root per message) from the call-pair tree: within each pair's span at
    its callee, every message the callee sends is caused by the latest message it received there."""
    pairs = np.arange(len(calls))
    kids = np.flatnonzero(chosen >= 0)
    g = chosen[kids]
    # events per group (pair): inputs 0, outputs 1; the pair's own call first
    group = np.concatenate([pairs, g, g, pairs])
    time = np.concatenate([np.full(len(pairs), -np.inf), t_at_caller_in[kids], t_at_caller_out[kids],
                           t_at_callee_out])
    kind = np.concatenate([np.zeros(len(pairs) + len(kids), np.int8), np.ones(len(kids) + len(pairs), np.int8)])
    row = np.concatenate([calls, rets[kids], calls[kids], rets])
    # by group, then by time within each group, in one stable sort of a float key `group + position
    # in the pair's span` (the span on the callee's clock encloses every event of the group; float64
    # leaves 2**-31 of a span per step even at millions of pairs; the pair's own call first)
    start = t_at_callee_in[group]
    span = np.maximum(t_at_callee_out[group] - start, 1e-12)
    frac = np.clip((time - start) / span, 0.0, 1.0) * 0.5
    frac[np.isneginf(time)] = -0.25
    order = np.argsort(group + frac, kind="stable")
    k, r = kind[order], row[order]
    pos = np.where(k == 0, np.arange(order.size), 0)
    last_input = r[np.maximum.accumulate(pos)]
    parent = np.full(n, -1, dtype=np.int64)
    out = k == 1
    parent[r[out]] = last_input[out]
    is_root = np.zeros(n, dtype=bool)
    is_root[calls[chosen < 0]] = True
    return parent, is_root


def infer(messages: pd.DataFrame, **params) -> PathsResult:
    """Path patterns, node delays and edge latencies by Project5's nesting algorithm (see the module
    docstring for the parameters: bin, penalty, max_parents, timestamps)."""
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"nesting: unknown parameters {sorted(unknown)} (known: {sorted(DEFAULTS)})")
    p = {**DEFAULTS, **params}
    if p["timestamps"] not in ("local", "send"):
        raise ValueError(f"nesting: timestamps must be 'local' or 'send', not {p['timestamps']!r}")
    m = ensure_messages(messages)
    nodes = node_codes(m)
    n = len(m)
    t_out, t_in = clocks(m)
    if p["timestamps"] == "send":
        t_in = t_out
    kind = kind_codes(m)
    msg = m["msg"].to_numpy(dtype=np.int64)
    is_ret = kind == 2
    caller = np.where(is_ret, nodes.dst, nodes.src)
    callee = np.where(is_ret, nodes.src, nodes.dst)
    t_caller = np.where(is_ret, t_in, t_out)
    calls, rets, lone_calls, lone_rets = pair_calls(kind, msg, caller, callee, t_caller)
    warnings = []
    if lone_calls or lone_rets:
        warnings.append(f"{lone_calls} calls without a return and {lone_rets} returns "
                        f"without a call left out")
    untagged = int((kind == 0).sum())
    if untagged:
        warnings.append(f"{untagged} messages without a call/return tag left out")
    a, b = nodes.src[calls], nodes.dst[calls]
    # callee's view: call in, return out; caller's view: call out, return in
    in_start, in_end = t_in[calls], t_out[rets]
    out_start, out_end = t_out[calls], t_in[rets]
    child, parent, rank = candidate_parents(b, in_start, in_end, a, out_start, out_end,
                                            int(p["max_parents"]))
    triple = (a[parent] * nodes.n + b[parent]) * nodes.n + b[child]
    delays = [out_start[child] - in_start[parent]]
    if p["score"] == "pre+post":
        delays.append(in_end[parent] - out_end[child])
    chosen = best_parents(child, parent, rank, triple, delays, len(calls), float(p["bin"]),
                          float(p["penalty"]), int(p["rounds"]))
    par, is_root = message_forest(n, calls, rets, chosen, in_start, in_end, out_start, out_end)
    if p["orphans"] == "drop":
        servers = np.zeros(nodes.n, dtype=bool)
        servers[b] = True                       # nodes that receive calls
        orphan = is_root & servers[nodes.src]
        if orphan.any():
            warnings.append(f"{int(orphan.sum())} parentless call trees rooted at a called "
                            f"node left out (orphans='drop')")
        is_root &= ~orphan
    forest = Forest(par, is_root, None, warnings)
    return result_from_forest("nesting", m, nodes, forest, p)
