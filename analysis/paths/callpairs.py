"""What the call-mapping algorithms share (FCFS, vPath, TraceWeaver-class: rivals.py, weaver.py): a
trace's call pairs (a call and its return, paired as Project5's FindCallPairs pairs them), the
incoming pairs that could have caused each outgoing pair (those enclosing it at its caller), and the
result of a choice of one parent pair per pair, as the message trees the other algorithms report
(nesting.message_forest: a message a node sends is caused by the latest message it received inside
the same incoming call)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.paths.assemble import (
    Forest,
    Nodes,
    clocks,
    ensure_messages,
    kind_codes,
    node_codes,
    result_from_forest,
)
from analysis.paths.model import PathsResult, has_threads
from analysis.paths.nesting import candidate_parents, message_forest, pair_calls


@dataclass
class CallPairs:
    messages: pd.DataFrame
    nodes: Nodes
    calls: np.ndarray          # row of each pair's call
    rets: np.ndarray           # row of its return
    caller: np.ndarray         # node codes
    callee: np.ndarray
    in_start: np.ndarray       # the call's arrival at the callee (callee's clock)
    in_end: np.ndarray         # the return's departure (callee's clock)
    out_start: np.ndarray      # the call's departure (caller's clock)
    out_end: np.ndarray        # the return's arrival (caller's clock)
    warnings: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.calls)


def call_pairs(messages: pd.DataFrame) -> CallPairs:
    """The call pairs of a trace (calls and returns paired by id; the rest counted in warnings)."""
    m = ensure_messages(messages)
    nodes = node_codes(m)
    t_out, t_in = clocks(m)
    kind = kind_codes(m)
    msg = m["msg"].to_numpy(dtype=np.int64)
    is_ret = kind == 2
    caller = np.where(is_ret, nodes.dst, nodes.src)
    callee = np.where(is_ret, nodes.src, nodes.dst)
    calls, rets, lone_calls, lone_rets = pair_calls(kind, msg, caller, callee, np.where(is_ret, t_in, t_out))
    warnings = []
    if lone_calls or lone_rets:
        warnings.append(f"{lone_calls} calls without a return and {lone_rets} returns without a call left out")
    untagged = int((kind == 0).sum())
    if untagged:
        warnings.append(f"{untagged} messages without a call/return tag left out (these algorithms map calls)")
    return CallPairs(m, nodes, calls, rets, nodes.src[calls], nodes.dst[calls], t_in[calls], t_out[rets],
                     t_out[calls], t_in[rets], warnings)


def candidates(cp: CallPairs, max_parents: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(child, parent, rank): every incoming pair `parent` at a pair's caller that encloses it (the
    call arrived before the child call left, the return left after the child's return arrived);
    rank 0 is the latest-started."""
    return candidate_parents(cp.callee, cp.in_start, cp.in_end, cp.caller, cp.out_start, cp.out_end, max_parents)


def threads(cp: CallPairs) -> tuple[np.ndarray, np.ndarray] | None:
    """(thread that received each pair's call at its callee, thread that sent it at its caller), -1
    where unknown; None when the trace has no thread columns."""
    if not has_threads(cp.messages):
        return None
    return (cp.messages["dst_thread"].to_numpy(dtype=np.int64)[cp.calls],
            cp.messages["src_thread"].to_numpy(dtype=np.int64)[cp.calls])


def pick(child: np.ndarray, parent: np.ndarray, key: np.ndarray, n: int) -> np.ndarray:
    """Per pair (n of them), the candidate parent with the smallest key (ties: the first listed);
    -1 where it has none."""
    chosen = np.full(n, -1, dtype=np.int64)
    if child.size:
        order = np.lexsort((np.arange(child.size), key, child))
        first = order[np.r_[True, child[order][1:] != child[order][:-1]]]
        chosen[child[first]] = parent[first]
    return chosen


def result(name: str, cp: CallPairs, chosen: np.ndarray, params: dict,
           warnings: list[str] | None = None) -> PathsResult:
    """The PathsResult of a parent pair per pair (-1: a root)."""
    par, is_root = message_forest(len(cp.messages), cp.calls, cp.rets, chosen, cp.in_start, cp.in_end,
                                  cp.out_start, cp.out_end)
    forest = Forest(par, is_root, None, cp.warnings + list(warnings or []))
    return result_from_forest(name, cp.messages, cp.nodes, forest, params)


def true_parents(cp: CallPairs, cause: np.ndarray) -> np.ndarray:
    """Per pair, the pair whose handling made its call (-1: a root): the truth (Truth.cause, per message
    row) read as the parent pairs these algorithms choose. A call caused by an incoming call has that
    pair as its parent; one caused by the return of an earlier call its caller made has that call's
    parent (the same handling), followed back to the incoming call."""
    cause = np.asarray(cause, dtype=np.int64)
    rows = len(cp.messages)
    pair_of = np.full(rows + 1, -1, dtype=np.int64)         # the last slot: no row
    pair_of[cp.calls] = np.arange(cp.n)
    pair_of[cp.rets] = np.arange(cp.n)
    is_call = np.zeros(rows + 1, dtype=bool)
    is_call[cp.calls] = True
    r = np.where(cause[cp.calls] >= 0, cause[cp.calls], rows)
    j = pair_of[r]
    parent = np.where(is_call[r], j, -1)
    # caused by a return: the parent of that return's call, back along a handling's sequential calls
    via = ~is_call[r] & (j >= 0)
    return parent[roots(np.where(via, j, -1))]


MAX_DEPTH = 64                  # pointer-doubling steps at most (2^64 levels: any real call tree)


def roots(chosen: np.ndarray) -> np.ndarray:
    """Per pair, the root of its chain of chosen parents (itself where it has none); pointer doubling,
    at most MAX_DEPTH steps (a cycle, which no mapping here makes, cannot hang it)."""
    up = np.where(chosen >= 0, chosen, np.arange(len(chosen)))
    for _ in range(MAX_DEPTH):
        nxt = up[up]
        if np.array_equal(nxt, up):
            break
        up = nxt
    return up
