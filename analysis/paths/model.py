"""The trace model every black-box algorithm reads and writes, and the canonical form of a causal
path pattern by which inferred paths are compared with the true ones.

A trace is a frame of logical messages (one row per message, after reconciliation of the per-process
send and receive events, WAP5 section 4), sorted by `t_send`:

    column   dtype     meaning
    t_send   float64   when the sender sent it (s, the sender host's clock as recorded)
    t_recv   float64   when the receiver received it (s, the receiver host's clock; NaN: not seen)
    src      category  sending node (a host or tier name: what the algorithms call a node)
    dst      category  receiving node
    kind     category  "call" | "return" | "" (unknown: convolution and linking need no tags)
    msg      int64     the message id for pairing a call with its return (-1: none); never a request id

Optionally (only when the source knows them; a frame without them is exactly as before):

    src_thread  int64  the sender's thread (a trace's host/pid/tid, as a number unique within the
                       node; -1: not known)
    dst_thread  int64  the receiver's thread (-1: not known)

Linking reads them (`granularity="thread"`: WAP5's nodes "down to single threads"); the other
algorithms, and every reported node, stay at `src`/`dst`.

What an algorithm never sees is kept beside it, in `Truth` (same row order): which request each
message belongs to and which earlier message caused it. Truth comes from the generator (Maketrace),
from a service run's `requests` table, or from a Jaeger export's parent links.

A causal path is a tree of messages: a message's children are the messages its receiver sent because
of it (WAP5's "caused by", Project5's nesting: a call's nested calls and its return). The *pattern*
of a path is that tree with times dropped, written canonically so that equal shapes are equal
strings: `src>dst` for a message, its children in parentheses, siblings sorted, e.g.
`client>web(web>app1(app1>cache(cache>app1(app1>web(web>client)))))`. Algorithms that infer call
nesting rather than message causality convert to this form (`pattern_of`). A node name holding the
syntax's characters (`>`, `(`, `)`, `,` or a backslash) is written with a backslash before each of
them (`token`), so that every name makes a pattern `render.parse_pattern` reads back exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

COLUMNS = {"t_send": "float64", "t_recv": "float64", "src": "category", "dst": "category",
           "kind": "category", "msg": "int64"}
KINDS = ("call", "return", "")
THREAD_COLUMNS = {"src_thread": "int64", "dst_thread": "int64"}


SYNTAX = str.maketrans({c: "\\" + c for c in "\\>(),"})


_TOKENS: dict[str, str] = {}     # names seen (a trace has few): naming patterns asks for each often


def token(name: object) -> str:
    """A node name as it is written in a pattern or an edge key: `>`, `(`, `)`, `,` and `\\`
    escaped with a backslash (names without them are unchanged)."""
    if type(name) is not str:
        return str(name).translate(SYNTAX)
    out = _TOKENS.get(name)
    if out is None:
        out = name.translate(SYNTAX)
        if len(_TOKENS) < 65_536:
            _TOKENS[name] = out
    return out


def edge_key(src: object, dst: object) -> str:
    """The key of an edge in PathPattern.edge_latencies: `src>dst`, both names as `token` writes them."""
    return f"{token(src)}>{token(dst)}"


def tokens(names: Sequence[object]) -> np.ndarray:
    """`token` of each name, computed once per distinct name."""
    codes, uniq = pd.factorize(np.asarray(names, dtype=object))
    return np.asarray([token(x) for x in uniq] + [""], dtype=object)[codes]


def has_threads(frame: pd.DataFrame) -> bool:
    """Whether the frame carries the optional thread columns."""
    return all(c in frame for c in THREAD_COLUMNS)


def empty_messages() -> pd.DataFrame:
    return as_messages(pd.DataFrame({c: [] for c in COLUMNS}))


def as_messages(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with the model's columns and dtypes, sorted by t_send (stable), index 0..n-1.
    Missing optional columns are filled: t_recv NaN, kind "", msg -1. The thread columns are kept
    when both are there (missing values: -1), else left out."""
    f = frame.copy()
    if "t_recv" not in f:
        f["t_recv"] = np.nan
    if "kind" not in f:
        f["kind"] = ""
    if "msg" not in f:
        f["msg"] = -1
    types = dict(COLUMNS)
    if has_threads(f):
        types.update(THREAD_COLUMNS)
        for c in THREAD_COLUMNS:
            f[c] = pd.to_numeric(f[c], errors="coerce").fillna(-1)
    f = f[list(types)]
    f["kind"] = f["kind"].fillna("").astype(str)
    f = f.astype(types)
    return f.sort_values("t_send", kind="stable").reset_index(drop=True)


@dataclass
class Truth:
    """What really happened, row-aligned with the trace's messages: `request` (int64, -1: noise, no
    request) and `cause` (int64, the row of the message that caused this one, -1: a path's root)."""

    request: np.ndarray
    cause: np.ndarray
    request_type: dict[int, str] = field(default_factory=dict)   # request id -> its type, where known
    # Optional, where the source knows them (Maketrace, Jaeger): per row, the time (s) the sender
    # really spent from receiving its cause to sending this message (NaN: a root or noise), on true
    # clocks; and per request the pattern it really took (request, pattern, type) before any message
    # was dropped from the trace. `true_patterns` prefers `patterns` to rebuilding from `cause`.
    node_delay: np.ndarray | None = None
    patterns: pd.DataFrame | None = None


@dataclass
class Trace:
    messages: pd.DataFrame              # as_messages(...)
    truth: Truth | None = None
    warnings: list[str] = field(default_factory=list)
    source: str = ""                    # where it came from, for messages and reports
    # Fault windows where known (Maketrace's faults, a run's faults table): node, start, stop (s, the
    # trace's clock), extra_s (the delay added, NaN: unknown), kind.
    faults: pd.DataFrame | None = None
    # The epoch second the times count from, where the source's times were absolute whole µs (a span
    # export: seconds since then keep every µs exact; at today's epoch a float's step is 0.24 µs)
    time_base: int = 0


@dataclass
class PathPattern:
    """One inferred (or true) path pattern: its canonical string, how many paths have it (an expected
    count where the algorithm weighs alternatives), and the mean delay each of its nodes added
    (node -> s: from receiving a message to sending the next message it caused, summed over the
    node's visits in the path)."""

    pattern: str
    count: float
    node_delays: dict[str, float] = field(default_factory=dict)
    edge_latencies: dict[str, float] = field(default_factory=dict)   # "src>dst" -> mean s in flight
    raw_count: float | None = None      # instances built, where `count` is an expected count (linking)


@dataclass
class PathsResult:
    """What every algorithm returns."""

    algorithm: str
    patterns: list[PathPattern]               # most frequent first
    node_delays: pd.DataFrame                 # node, mean_s, count, and hist_* bin columns
    edge_latencies: pd.DataFrame              # src, dst, mean_s, count
    params: dict[str, object] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # Per message of the trace given (its row order), the message inferred to have caused it (-1: a
    # path's root, or in no path), where the algorithm links messages (not convolution): what
    # request_accuracy compares with the truth's causes
    parent: np.ndarray | None = None
    total: float | None = None          # paths over all patterns, those beyond `patterns` too


def pattern_of(src: Sequence[str], dst: Sequence[str], parent: Sequence[int], root: int) -> str:
    """The canonical pattern of the tree of messages rooted at `root`: message i is src[i]>dst[i],
    parent[i] the message that caused it (-1 for none). Only messages under `root` are read."""
    return patterns_of(src, dst, parent, [root])[0]


def patterns_of(src: Sequence[str], dst: Sequence[str], parent: Sequence[int],
                roots: Sequence[int]) -> list[str]:
    """pattern_of for many roots at once: the children are indexed once (linear in the messages,
    not messages x roots), and trees are walked without recursion (any depth)."""
    src, dst = tokens(src), tokens(dst)
    children: dict[int, list[int]] = {}
    for i, p in enumerate(np.asarray(parent).tolist()):
        if p >= 0:
            children.setdefault(p, []).append(i)
    out = []
    for root in roots:
        root = int(root)
        done: dict[int, str] = {}
        stack = [(root, False)]
        while stack:
            i, expanded = stack.pop()
            kids = children.get(i, ())
            if expanded or not kids:
                texts = sorted(done.pop(c) for c in kids)
                done[i] = f"{src[i]}>{dst[i]}" + (f"({','.join(texts)})" if texts else "")
            else:
                stack.append((i, True))
                stack.extend((c, False) for c in kids)
        out.append(done[root])
    return out


def true_patterns(trace: Trace) -> pd.DataFrame:
    """Per request of the truth: request, pattern, type (the generator's or the run's)."""
    if trace.truth is None:
        raise ValueError(f"{trace.source or 'trace'}: no true paths to compare with")
    if trace.truth.patterns is not None:
        return trace.truth.patterns[["request", "pattern", "type"]].reset_index(drop=True)
    t, m = trace.truth, trace.messages
    src, dst = m["src"].astype(str).to_numpy(), m["dst"].astype(str).to_numpy()
    roots = np.flatnonzero((t.cause < 0) & (t.request >= 0))
    out = pd.DataFrame({"request": t.request[roots].astype(np.int64),
                        "pattern": patterns_of(src, dst, t.cause, roots)})
    out["type"] = out["request"].map(t.request_type).astype(object).fillna("")
    return out
