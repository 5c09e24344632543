"""From inferred causal links to a `PathsResult`: what nesting, linking and convolution share once
they have decided which message caused which.

An algorithm hands over a *forest*: `parent[i]` is the row of the message that caused message i (-1:
a root, or a message in no path), which rows are path roots, and optionally a weight per tree (the
probability of that path instance, for linking's expected counts). This module then

- names every tree's pattern in linear time: each message gets a 64-bit hash of its subtree (its
  `src>dst` label mixed with the order-independent sum of its children's hashes, computed level by
  level from the deepest up, all in numpy); trees with equal hashes have equal canonical patterns
  (model.pattern_of), and the canonical text is built once per distinct pattern from one
  representative tree;
- sums per pattern the node delays (t_send of a message minus t_recv of its parent, both on the
  sending node's clock, summed over the node's messages in one path, averaged over the paths) and
  the edge latencies (t_recv - t_send), weighted by the tree weights;
- builds the overall `node_delays` frame (mean, count and a histogram per node, over every link in
  the forest) and `edge_latencies` (over every message with both timestamps).

Path instances that an algorithm enumerates one by one (linking's try-both alternatives) are added
through `PatternTable.add_instance` with the same bookkeeping.
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.paths.model import (
    COLUMNS,
    THREAD_COLUMNS,
    PathPattern,
    PathsResult,
    as_messages,
    edge_key,
    has_threads,
    token,
)

# Histogram bin edges for node delays, s (log-spaced: delays of interest span 0.1 ms to seconds).
HIST_EDGES_S = (0.0, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, np.inf)
MAX_PATTERNS = 500        # patterns kept in a result, most frequent first (the rest are counted)

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping arithmetic is the point)."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


def mix_into(x: np.ndarray) -> np.ndarray:
    """mix, in place on a uint64 array of the caller's own (one temporary instead of five)."""
    t = np.empty_like(x)
    with np.errstate(over="ignore"):
        for shift, mult in ((30, _M1), (27, _M2), (31, None)):
            np.right_shift(x, np.uint64(shift), out=t)
            x ^= t
            if mult is not None:
                x *= mult
    return x


@dataclass
class Nodes:
    """Integer codes for the trace's nodes (the union of senders and receivers)."""

    names: np.ndarray          # code -> node name (str)
    src: np.ndarray            # int64 per message
    dst: np.ndarray            # int64 per message

    @property
    def n(self) -> int:
        return len(self.names)


def ensure_messages(messages: pd.DataFrame) -> pd.DataFrame:
    """The frame itself when it already has the model's columns, dtypes, order and index (no copy),
    else model.as_messages of it."""
    types = {**COLUMNS, **THREAD_COLUMNS} if has_threads(messages) else COLUMNS
    ok = (list(messages.columns) == list(types)
          and all(str(messages[c].dtype) == d for c, d in types.items())
          and isinstance(messages.index, pd.RangeIndex) and messages.index.start == 0
          and messages.index.step == 1
          and bool((np.diff(messages["t_send"].to_numpy()) >= 0).all()))
    return messages if ok else as_messages(messages)


def _codes(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(codes, names) of a column, cheaply when it is categorical (the model's dtype)."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        names = np.asarray(series.cat.categories.astype(str), dtype=object)
        return series.cat.codes.to_numpy(dtype=np.int64), names
    codes, names = pd.factorize(series.astype(str).to_numpy())
    return codes.astype(np.int64), np.asarray(names, dtype=object)


def node_codes(messages: pd.DataFrame) -> Nodes:
    s_codes, s_names = _codes(messages["src"])
    d_codes, d_names = _codes(messages["dst"])
    names = pd.Index(s_names).append(pd.Index(d_names)).unique()
    s_map = names.get_indexer(s_names).astype(np.int64)
    d_map = names.get_indexer(d_names).astype(np.int64)
    return Nodes(np.asarray(names, dtype=object), s_map[s_codes], d_map[d_codes])


def kind_codes(messages: pd.DataFrame) -> np.ndarray:
    """0 untagged, 1 call, 2 return, per message."""
    codes, names = _codes(messages["kind"])
    table = np.array([{"call": 1, "return": 2}.get(str(k), 0) for k in names] + [0], dtype=np.int8)
    return table[codes]          # code -1 (missing) reads the trailing 0


def clocks(messages: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(t_out, t_in) per message: when its sender sent it (sender's clock) and when its receiver got
    it (receiver's clock; the send time where the receiver's record is missing)."""
    t_out = messages["t_send"].to_numpy(dtype=np.float64)
    t_in = messages["t_recv"].to_numpy(dtype=np.float64)
    return t_out, np.where(np.isnan(t_in), t_out, t_in)


def int_order(x: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """A stable argsort of non-negative integers (applied after `order`, if given): LSD radix passes
    over 16-bit digits (numpy sorts 16-bit keys by radix sort, in linear time)."""
    o = np.arange(len(x)) if order is None else order
    if len(x) == 0:
        return o
    top = int(x.max())
    shift = 0
    while True:
        digit = ((x[o] >> shift) & 0xFFFF).astype(np.uint16)
        o = o[np.argsort(digit, kind="stable")]
        shift += 16
        if top >> shift == 0:
            return o


def order_by(group: np.ndarray, time: np.ndarray) -> np.ndarray:
    """The stable order by (group, time), groups non-negative ints: a float sort (fast on the
    nearly sorted times of a trace), then radix passes by group. Equal (group, time) keep their
    input order."""
    return int_order(group, np.argsort(time, kind="stable"))


def positions_in_runs(run_node: np.ndarray, run_time: np.ndarray, node: np.ndarray,
                     time: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For sorted runs (run_node ascending, run_time ascending within a node) and queries (node,
    time): per query, the number of run entries up to it (entries of its node at or before `time`,
    plus all entries of earlier nodes) and the first position of its node's run. A binary search
    per node's run: no merged sort."""
    top = int(max(run_node.max(initial=-1), node.max(initial=-1))) + 1
    bounds = np.searchsorted(run_node, np.arange(top + 1))
    by_node = int_order(node)
    q_bounds = np.searchsorted(node[by_node], np.arange(top + 1))
    pos = np.zeros(len(node), dtype=np.int64)
    for v in range(top):
        qs = by_node[q_bounds[v]:q_bounds[v + 1]]
        if qs.size:
            lo, hi = bounds[v], bounds[v + 1]
            pos[qs] = lo + np.searchsorted(run_time[lo:hi], time[qs], side="right")
    return pos, bounds[node]


def forest_depth(parent: np.ndarray, max_depth: int = 10_000) -> tuple[np.ndarray, np.ndarray]:
    """(depth, parent) per message; links that close a cycle (possible only with clock skew larger
    than the delays) are cut, so the returned parent is a forest. Depths by pointer jumping (each
    round doubles the distance climbed: log(depth) numpy passes)."""
    parent = parent.astype(np.int64, copy=True)
    depth = (parent >= 0).astype(np.int64)      # the distance to anc, then to the root
    anc = parent.copy()
    active = np.flatnonzero(anc >= 0)
    rounds, checked = 0, False
    deep = min(max_depth, 64)
    while active.size:
        up = anc[active]
        depth[active] += depth[up]
        anc[active] = anc[up]
        active = active[anc[active] >= 0]
        rounds += 1
        if active.size and (1 << rounds) > deep and not checked:
            # deeper than any real call tree: what climbs past max_depth is on (or under) a cycle,
            # found by squaring the parent map
            still = _power(parent, max_depth + 2) >= 0
            if still.any():
                parent[still] = -1      # cut it there
                return forest_depth(parent, max_depth)
            checked = True              # only deep chains: climb on
    if not checked and depth.max(initial=0) > deep and (_power(parent, max_depth + 2) >= 0).any():
        parent[_power(parent, max_depth + 2) >= 0] = -1     # a chain deeper than max_depth + 1
        return forest_depth(parent, max_depth)
    return depth, parent


def _power(parent: np.ndarray, e: int) -> np.ndarray:
    """The e-th ancestor of every message (-1: none), by repeated squaring."""
    base = np.append(parent, -1)        # index -1 is the sink: -1 maps to -1
    res = np.append(np.arange(len(parent)), -1)
    while e:
        if e & 1:
            res = base[res]
        base = base[base]
        e >>= 1
    return res[:-1]


def forest_roots(parent: np.ndarray) -> np.ndarray:
    """The root of every message's tree (pointer jumping: log(depth) numpy passes)."""
    idx = np.arange(len(parent))
    root = np.where(parent >= 0, parent, idx)
    nxt = np.empty_like(root)         # two buffers, swapped: no fresh array per pass
    while True:
        np.take(root, root, out=nxt)
        if np.array_equal(nxt, root):
            return root
        root, nxt = nxt, root


def label_hashes(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """subtree_hashes's term of a message's own (src, dst), per message."""
    label = src.astype(np.uint64)
    label *= np.uint64(1_000_003)
    label += dst.astype(np.uint64)
    label += np.uint64(1)
    return mix_into(label)


def child_term(h: np.ndarray) -> np.ndarray:
    """What a child's subtree hash adds to its parent's sum of children in subtree_hashes."""
    return mix(h ^ _M2)


def subtree_hashes(nodes: Nodes, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """A hash per message of its subtree's canonical pattern (equal patterns, equal hashes)."""
    label = label_hashes(nodes.src, nodes.dst)
    h = np.zeros(len(parent), dtype=np.uint64)
    childsum = np.zeros(len(parent), dtype=np.uint64)
    # deepest first; depths fit 16 bits (forest_depth cuts at 10,000), where numpy's stable sort
    # is a radix sort (linear) rather than a merge sort of int64
    top = int(depth.max(initial=0))
    key = (top - depth).astype(np.uint16) if top < 1 << 16 else -depth
    order = np.argsort(key, kind="stable")
    bounds = np.flatnonzero(np.diff(depth[order])) + 1
    for level in np.split(order, bounds):
        with np.errstate(over="ignore"):
            h[level] = mix(label[level] ^ mix(childsum[level] + _GOLD))
        p = parent[level]
        has = p >= 0
        np.add.at(childsum, p[has], child_term(h[level][has]))
    return h


class PatternTable:
    """Patterns accumulated by canonical text: weighted count, raw count, weighted node-delay and
    edge-latency sums."""

    def __init__(self, names: np.ndarray):
        self.names = names
        self.count: dict[str, float] = {}
        self.raw: dict[str, int] = {}
        self.delay: dict[str, dict[str, float]] = {}
        self.lat: dict[str, dict[str, list[float]]] = {}
        self.left_out = 0                # distinct patterns not named (beyond max_patterns)
        self.left_count = 0.0            # their count (paths), for shares over all patterns
        self.by_hash: dict[int, str] = {}   # subtree hash -> text, of the patterns added with their hash
        # patterns held by hash until the table is read (linking_instances.Hashed): only the most
        # frequent are ever named
        self.pending: list = []

    def _slot(self, text: str) -> None:
        if text not in self.count:
            self.count[text], self.raw[text] = 0.0, 0
            self.delay[text], self.lat[text] = {}, {}

    def add_bulk(self, text: str, count: float, raw: int, delay_sums: dict[str, float],
                 lat_sums: dict[str, tuple[float, float]], key: int | None = None) -> None:
        """delay_sums: node -> weighted sum of its per-path delay; lat_sums: edge -> (weighted sum,
        weight); key: the pattern's subtree hash, where known."""
        if key is not None:
            self.by_hash[key] = text
        if text not in self.count:          # a new pattern (the most common case): its sums as given
            self.count[text], self.raw[text] = 0.0 + count, 0 + raw
            self.delay[text] = {k: 0.0 + v for k, v in delay_sums.items()}
            self.lat[text] = {k: [0.0 + s, 0.0 + w] for k, (s, w) in lat_sums.items()}
            return
        self.count[text] += count
        self.raw[text] += raw
        d = self.delay[text]
        for k, v in delay_sums.items():
            d[k] = d.get(k, 0.0) + v
        lat = self.lat[text]
        for k, (s, w) in lat_sums.items():
            acc = lat.setdefault(k, [0.0, 0.0])
            acc[0] += s
            acc[1] += w

    def adopt(self, text: str, count: float, raw: int, delay_sums: dict[str, float],
              lat_sums: dict[str, list[float]], key: int | None = None) -> None:
        """add_bulk of sums the table may keep as they are (fresh dicts of floats, lat_sums' values
        fresh [sum, weight] lists, no -0.0 among them: what add_bulk's copy would make of them)."""
        if text in self.count:
            self.add_bulk(text, count, raw, delay_sums, lat_sums, key)
            return
        if key is not None:
            self.by_hash[key] = text
        self.count[text], self.raw[text] = 0.0 + count, 0 + raw
        self.delay[text], self.lat[text] = delay_sums, lat_sums

    def add_instance(self, text: str, weight: float, node_delay: dict[str, float],
                     edge_lat: dict[str, list[float]], key: int | None = None) -> None:
        """One path instance: its per-node delay (summed over visits) and its edges' latencies (key:
        its subtree hash, where known)."""
        self.add_bulk(text, weight, 1, {k: v * weight for k, v in node_delay.items()},
                      {k: (sum(v) * weight, len(v) * weight) for k, v in edge_lat.items()}, key=key)

    def patterns(self, max_patterns: int = MAX_PATTERNS) -> tuple[list[PathPattern], int]:
        for held in self.pending:
            held.resolve(self, max_patterns)
        self.pending = []
        ranked = sorted(self.count, key=lambda t: (-self.count[t], t))
        out = []
        for text in ranked[:max_patterns]:
            c = self.count[text]
            if c <= 0:
                continue
            out.append(PathPattern(
                text, c, {k: v / c for k, v in sorted(self.delay[text].items())},
                {k: s / w for k, (s, w) in sorted(self.lat[text].items()) if w > 0}))
        return out, max(0, len(ranked) - max_patterns) + self.left_out


def canonical_text(nodes: Nodes, children: dict[int, list[int]], root: int,
                   labels: dict[tuple[int, int], str] | None = None) -> str:
    """The pattern text of the tree under `root` (children: message -> its children), each node's
    children sorted by their texts. `labels`: (src, dst) codes -> edge key, made once per tree, or
    kept by the caller across trees of the same nodes (linking's instances of one trace)."""
    names, src, dst = nodes.names, nodes.src, nodes.dst
    if labels is None:
        labels = {}

    def text(i: int) -> str:
        kids = sorted(text(c) for c in children.get(i, ()))
        pair = (int(src[i]), int(dst[i]))
        label = labels.get(pair)
        if label is None:
            label = labels[pair] = edge_key(names[pair[0]], names[pair[1]])
        return label + (f"({','.join(kids)})" if kids else "")

    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(max(limit, 20_000))
        return text(root)
    finally:
        sys.setrecursionlimit(limit)


def tree_texts(nodes: Nodes, parent: np.ndarray, root_of: np.ndarray, h: np.ndarray,
               roots: np.ndarray) -> list[str]:
    """canonical_text of the trees under `roots`, each distinct subtree (by its subtree hash `h`)
    named once: trees of one forest share most of their subtrees. The trees' messages renumbered
    0.. (their order kept), children as one list sorted by parent (CSR), read by bisection."""
    is_rep = np.zeros(len(parent), dtype=bool)
    is_rep[roots] = True
    sub = np.flatnonzero(is_rep[root_of])
    par = parent[sub]
    has = np.flatnonzero(par >= 0)
    local = np.searchsorted(sub, par[has])
    o = np.argsort(local, kind="stable")
    by_parent, kid_list = local[o].tolist(), has[o].tolist()
    names = [token(x) for x in nodes.names.tolist()]
    src, dst, hs = nodes.src[sub].tolist(), nodes.dst[sub].tolist(), h[sub].tolist()
    memo: dict[int, str] = {}

    def text(i: int) -> str:
        got = memo.get(hs[i])
        if got is not None:
            return got
        lo = bisect_left(by_parent, i)
        hi = bisect_left(by_parent, i + 1, lo)
        label = f"{names[src[i]]}>{names[dst[i]]}"
        if hi > lo:
            label += "(" + ",".join(sorted([text(c) for c in kid_list[lo:hi]])) + ")"
        memo[hs[i]] = label
        return label

    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(max(limit, 20_000))
        return [text(r) for r in np.searchsorted(sub, roots).tolist()]
    finally:
        sys.setrecursionlimit(limit)


def add_forest(table: PatternTable, nodes: Nodes, messages: pd.DataFrame, parent: np.ndarray,
               is_root: np.ndarray, tree_weight: np.ndarray | None = None,
               max_patterns: int = MAX_PATTERNS, depth: np.ndarray | None = None,
               root_of: np.ndarray | None = None, hashes: np.ndarray | None = None) -> np.ndarray:
    """Add the trees of the forest whose root is marked in `is_root` to the table (trees under other
    roots are ignored; of the distinct patterns, the `max_patterns` most frequent, the rest counted in
    `table.left_out`). tree_weight: per message, read at the roots (default 1). Returns the root row
    of every message (-1 for messages in no kept tree)."""
    n = len(parent)
    if n == 0:
        return np.full(0, -1, dtype=np.int64)
    nn = nodes.n
    if depth is None:   # else the caller's forest_depth (and forest_roots) of this very parent array
        depth, parent = forest_depth(parent)
        root_of = hashes = None
    if root_of is None:
        root_of = forest_roots(parent)
    kept = is_root[root_of]
    h = subtree_hashes(nodes, parent, depth) if hashes is None else hashes
    roots = np.flatnonzero(is_root & (parent < 0))
    w_root = np.ones(n) if tree_weight is None else np.asarray(tree_weight, dtype=np.float64)
    pid_root, uniq = pd.factorize(h[roots])
    count = np.bincount(pid_root, weights=w_root[roots], minlength=len(uniq))
    raw = np.bincount(pid_root, minlength=len(uniq))
    # only the most frequent patterns are named (naming is the Python part, per distinct pattern)
    top = np.argsort(-count, kind="stable")[:max_patterns]
    table.left_out += len(uniq) - len(top)
    table.left_count += float(count.sum() - count[top].sum())
    rank = np.full(len(uniq), -1, dtype=np.int64)
    rank[top] = np.arange(len(top))
    pid = np.full(n, -1, dtype=np.int64)
    pid[roots] = rank[pid_root]
    msg_pid = np.where(kept, pid[root_of], -1)
    w_msg = w_root[root_of]
    n_pat = len(top)

    t_out, t_in = clocks(messages)
    linked = np.flatnonzero((msg_pid >= 0) & (parent >= 0))
    delay = t_out[linked] - t_in[parent[linked]]
    dkeys, (dsum,) = key_sums(msg_pid[linked] * nn + nodes.src[linked], n_pat * nn, delay * w_msg[linked])
    lat = messages["t_recv"].to_numpy(dtype=np.float64) - t_out
    seen = np.flatnonzero((msg_pid >= 0) & ~np.isnan(lat))
    lkeys, (lsum, lw) = key_sums(msg_pid[seen] * nn * nn + nodes.src[seen] * nn + nodes.dst[seen], n_pat * nn * nn,
                                 lat[seen] * w_msg[seen], w_msg[seen])

    # per pattern, node -> delay sum and edge -> (latency sum, weight): the keys ascend, so each
    # pattern's entries are one run
    names = [str(x) for x in nodes.names]
    dkeys = np.asarray(dkeys)
    at = np.searchsorted(dkeys // nn, np.arange(n_pat + 1)).tolist()
    node_names = [names[x] for x in (dkeys % nn).tolist()]
    dl = dsum.tolist()
    delays = [dict(zip(node_names[a:b], dl[a:b], strict=True)) for a, b in zip(at[:-1], at[1:], strict=True)]
    lkeys = np.asarray(lkeys)
    edge_codes, edge_of = np.unique(lkeys % (nn * nn), return_inverse=True)
    edge_names = [edge_key(names[e // nn], names[e % nn]) for e in edge_codes.tolist()]
    lat_names = [edge_names[x] for x in edge_of.tolist()]
    # fresh [sum, weight] lists the table keeps (bincount's sums start at +0.0: never -0.0)
    pairs = [[a, b] for a, b in zip(lsum.tolist(), lw.tolist(), strict=True)]
    at = np.searchsorted(lkeys // (nn * nn), np.arange(n_pat + 1)).tolist()
    lats = [dict(zip(lat_names[a:b], pairs[a:b], strict=True)) for a, b in zip(at[:-1], at[1:], strict=True)]
    first_of = np.full(len(uniq), -1, dtype=np.int64)
    first_of[pid_root[::-1]] = roots[::-1]              # the first root of each pattern
    first_root = first_of[top]
    texts = tree_texts(nodes, parent, root_of, h, first_root)
    for p, text in enumerate(texts):
        table.adopt(text, float(count[top[p]]), int(raw[top[p]]), delays[p], lats[p], key=int(uniq[top[p]]))
    return np.where(kept, root_of, -1)


def key_sums(key: np.ndarray, top: int, *values: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The distinct keys (non-negative, below `top`) in ascending order and, per values array, its
    sum per key (in the array's order, as np.bincount adds): by bincount over the key range where
    that range is small, else over factorized keys."""
    if top <= 4 * len(key) + (1 << 20):
        keys = np.flatnonzero(np.bincount(key, minlength=top))
        return keys, [np.bincount(key, weights=v, minlength=top)[keys] for v in values]
    keys, codes = np.unique(key, return_inverse=True)
    return keys, [np.bincount(codes, weights=v, minlength=len(keys)) for v in values]


def node_delay_frame(nodes: Nodes, node: np.ndarray, delay: np.ndarray,
                     weight: np.ndarray | None = None) -> pd.DataFrame:
    """node, mean_s, count, hist_<lo>_<hi>ms (weighted counts per bin) from per-link delays."""
    w = np.ones(len(delay)) if weight is None else weight
    edges = np.asarray(HIST_EDGES_S)
    names = [f"hist_{_ms(lo)}_{_ms(hi)}ms" for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    nodes_seen = np.flatnonzero(np.bincount(node, minlength=nodes.n))
    slot_of = np.zeros(nodes.n, dtype=np.int64)
    slot_of[nodes_seen] = np.arange(len(nodes_seen))
    slot = slot_of[node]
    bins = np.clip(np.searchsorted(edges, np.clip(delay, 0, None), side="right") - 1, 0, len(names) - 1)
    hist = np.bincount(slot * len(names) + bins, weights=w, minlength=len(nodes_seen) * len(names))
    total = np.bincount(slot, weights=w, minlength=len(nodes_seen))
    wsum = np.bincount(slot, weights=w * delay, minlength=len(nodes_seen))
    count = np.bincount(slot, minlength=len(nodes_seen))
    cols = {"node": [str(nodes.names[c]) for c in nodes_seen],
            "mean_s": np.where(total > 0, wsum / np.where(total > 0, total, 1), np.nan),
            "count": count.astype(np.int64)}
    table = hist.reshape(len(nodes_seen), len(names))
    cols.update({name: table[:, i] for i, name in enumerate(names)})   # one frame, not 13 insertions
    return pd.DataFrame(cols).sort_values("node", ignore_index=True)


def _ms(s: float) -> str:
    return "inf" if not np.isfinite(s) else f"{s * 1000:g}"


def edge_latency_frame(nodes: Nodes, messages: pd.DataFrame) -> pd.DataFrame:
    """src, dst, mean_s, count: time in flight per edge (receiver clock minus sender clock: includes
    any clock offset, as WAP5 5.2 notes)."""
    lat = (messages["t_recv"] - messages["t_send"]).to_numpy(dtype=np.float64)
    ok = ~np.isnan(lat)
    key = nodes.src[ok] * nodes.n + nodes.dst[ok]
    s = np.bincount(key, weights=lat[ok], minlength=nodes.n * nodes.n)
    c = np.bincount(key, minlength=nodes.n * nodes.n)
    uniq = np.flatnonzero(c)
    return pd.DataFrame({"src": [str(nodes.names[k // nodes.n]) for k in uniq],
                         "dst": [str(nodes.names[k % nodes.n]) for k in uniq],
                         "mean_s": s[uniq] / c[uniq], "count": c[uniq].astype(np.int64)})


@dataclass
class Forest:
    """An algorithm's decision: parent per message, which rows are path roots, tree weights."""

    parent: np.ndarray
    is_root: np.ndarray
    tree_weight: np.ndarray | None = None
    warnings: list[str] = field(default_factory=list)
    depth: np.ndarray | None = None     # forest_depth of parent, where the algorithm has it
    root_of: np.ndarray | None = None   # forest_roots of parent, likewise (with depth only)
    hashes: np.ndarray | None = None    # subtree_hashes of parent, likewise (with depth only)


def result_from_forest(algorithm: str, messages: pd.DataFrame, nodes: Nodes, forest: Forest,
                       params: dict, table: PatternTable | None = None,
                       max_patterns: int = MAX_PATTERNS) -> PathsResult:
    """The PathsResult of a forest (plus any instances already in `table`)."""
    table = table if table is not None else PatternTable(nodes.names)
    root_of = add_forest(table, nodes, messages, forest.parent, forest.is_root, forest.tree_weight,
                         max_patterns, forest.depth, forest.root_of, forest.hashes)
    patterns, left = table.patterns(max_patterns)
    warnings = list(forest.warnings)
    if left:
        warnings.append(f"{left} rarer patterns left out (max_patterns={max_patterns})")
    t_out, t_in = clocks(messages)
    linked = np.flatnonzero((root_of >= 0) & (forest.parent >= 0))
    w = None if forest.tree_weight is None else forest.tree_weight[root_of[linked]]
    delays = node_delay_frame(nodes, nodes.src[linked], t_out[linked] - t_in[forest.parent[linked]], w)
    params = dict(params)
    params["raw_counts"] = {p.pattern: table.raw[p.pattern] for p in patterns}
    # the patterns beyond max_patterns that were named and then cut here count in the total too
    total = sum(table.count.values()) + table.left_count
    parent = np.where(root_of >= 0, forest.parent, -1)
    return PathsResult(algorithm, patterns, delays, edge_latency_frame(nodes, messages), params, warnings,
                       parent=parent, total=float(total))
