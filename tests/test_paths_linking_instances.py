"""Linking's try-both instances built in numpy (analysis/paths/linking_instances.py) give what the walk
in Python gives (linking.VECTORISED off: the implementation before), pattern for pattern: counts,
raw counts, node delays, edge latencies, the patterns left out; on Maketrace traces with seeds, tags
or none, several k, parallelism and models, and traces where the walk's order matters."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.paths import linking
from analysis.paths.assemble import forest_depth, node_codes, subtree_hashes
from analysis.paths.linking_instances import hash_of_text, preorder
from analysis.paths.maketrace import maketrace, web_service
from analysis.paths.model import patterns_of


def both(m: pd.DataFrame, monkeypatch, **params):
    monkeypatch.setattr(linking, "VECTORISED", False)
    walked = linking.infer(m, **params)
    monkeypatch.setattr(linking, "VECTORISED", True)
    return walked, linking.infer(m, **params)


def assert_same(a, b):
    assert [p.pattern for p in a.patterns] == [p.pattern for p in b.patterns]
    for x, y in zip(a.patterns, b.patterns, strict=True):
        assert y.count == pytest.approx(x.count, rel=1e-9)
        assert sorted(x.node_delays) == sorted(y.node_delays)
        for k, v in x.node_delays.items():
            assert y.node_delays[k] == pytest.approx(v, rel=1e-9, abs=1e-12)
        assert sorted(x.edge_latencies) == sorted(y.edge_latencies)
        for k, v in x.edge_latencies.items():
            assert y.edge_latencies[k] == pytest.approx(v, rel=1e-9)
    assert a.params["raw_counts"] == b.params["raw_counts"]
    assert a.warnings == b.warnings
    pd.testing.assert_frame_equal(a.node_delays, b.node_delays)


@pytest.mark.parametrize("seed, parallelism, tags, params", [
    (1, 2, False, {"untraced": "client"}),
    (2, 4, True, {}),
    (3, 8, False, {"untraced": "client", "k": 2}),
    (4, 1, True, {"model": "edges"}),
    (5, 6, False, {"untraced": "client", "k": 6}),
    (6, 3, False, {"untraced": "client", "ambiguity": 0.3}),
    (7, 2, True, {"orphans": "drop"}),
])
def test_numpy_instances_equal_the_walk(seed, parallelism, tags, params, monkeypatch):
    tr = maketrace(web_service(), duration=25, parallelism=parallelism, seed=seed, tags=tags)
    a, b = both(tr.messages, monkeypatch, **params)
    assert a.params["trees_enumerated"] > 50          # the case exercises the instances
    assert_same(a, b)


def test_the_walks_order_cases_are_exercised(monkeypatch):
    """With a wide ambiguity most trees have grafts of every kind (inner, outer, overlapping): the
    numpy build still matches, and builds most of them itself."""
    from analysis.paths import linking_instances

    seen = {}
    real = linking_instances.walk_order_matters

    def spy(*args):
        bad = real(*args)
        seen["trees"], seen["walked"] = len(bad), int(bad.sum())
        return bad

    monkeypatch.setattr(linking, "walk_order_matters", spy)
    tr = maketrace(web_service(), duration=20, parallelism=6, seed=11, tags=False)
    a, b = both(tr.messages, monkeypatch, untraced="client", ambiguity=0.45, k=5)
    assert_same(a, b)
    assert 0 < seen["walked"] < seen["trees"] / 2


def test_more_patterns_than_kept_are_counted_alike(monkeypatch):
    tr = maketrace(web_service(), duration=25, parallelism=6, seed=8, tags=False)
    a, b = both(tr.messages, monkeypatch, untraced="client", ambiguity=0.3)
    assert any("rarer patterns left out" in w for w in a.warnings)
    assert_same(a, b)


def test_preorder_lays_every_subtree_out_as_one_slice():
    rng = np.random.default_rng(3)
    parent = np.full(400, -1)
    for i in range(1, 400):
        parent[i] = rng.integers(-1, i) if rng.random() < 0.9 else -1
    depth, parent = forest_depth(parent)
    pre, size = preorder(parent, depth)
    assert sorted(pre.tolist()) == list(range(400))
    anc = [set() for _ in range(400)]
    for v in range(400):
        a = parent[v]
        while a >= 0:
            anc[v].add(a)
            a = parent[a]
    for v in range(0, 400, 7):
        inside = {u for u in range(400) if pre[v] <= pre[u] < pre[v] + size[v]}
        assert inside == {u for u in range(400) if u == v or v in anc[u]}


def test_hash_of_text_is_the_subtree_hash():
    tr = maketrace(web_service(), duration=5, parallelism=2, seed=2)
    m, t = tr.messages, tr.truth
    nodes = node_codes(m)
    depth, cause = forest_depth(t.cause)
    h = subtree_hashes(nodes, cause, depth)
    roots = np.flatnonzero((cause < 0) & (t.request >= 0))[:30]
    texts = patterns_of(m["src"].astype(str).to_numpy(), m["dst"].astype(str).to_numpy(), cause, roots)
    assert [hash_of_text(x, nodes.names) for x in texts] == [int(h[r]) for r in roots]


def walk_back(t_out, t_in, arr, pos, first, cutoff, max_parents):
    """linking.possible_parents as it was before (the reference): one arrival back at a time."""
    child, parent = [], []
    q = np.arange(len(t_out))
    j = pos - 1
    for _ in range(max_parents):
        live = j >= first[q]
        q, j = q[live], j[live]
        if q.size == 0:
            break
        par = arr[j]
        live = (t_out[q] - t_in[par] <= cutoff[q]) & (par != q)
        q, j, par = q[live], j[live], par[live]
        child.append(q)
        parent.append(par)
        j = j - 1
    child = np.concatenate(child) if child else np.zeros(0, np.int64)
    parent = np.concatenate(parent) if parent else np.zeros(0, np.int64)
    return child, parent, t_out[child] - t_in[parent]


@pytest.mark.parametrize("seed, parallelism, skew, selfish", [(1, 2, 0.0, False), (2, 8, 0.0, False),
                                                              (3, 20, 0.002, False), (4, 4, 0.0, True)])
def test_possible_parents_equal_walking_back(seed, parallelism, skew, selfish, monkeypatch):
    from analysis.paths.assemble import clocks
    from analysis.paths.model import as_messages

    monkeypatch.setattr(linking, "BLOCK", 1000)     # many blocks: their layout is the walk's order

    m = maketrace(web_service(), duration=30, parallelism=parallelism, seed=seed, tags=False,
                  clock_skew=skew).messages
    if selfish:   # messages from a node to itself, received before they were sent: the walk stops there
        f = m.astype({"dst": str, "src": str})
        sel = np.arange(len(f)) % 5 == 0
        f.loc[sel, "dst"] = f.loc[sel, "src"]
        f.loc[sel, "t_recv"] = f.loc[sel, "t_send"] - 0.0005
        m = as_messages(f)
    nodes = node_codes(m)
    t_out, _ = clocks(m)
    t_in = m["t_recv"].to_numpy().copy()
    arr, pos, first = linking._arrivals_and_departures(nodes, t_out, t_in)
    d = linking.causal_delays(nodes, t_out, t_in, arr, pos, first, 2.0, 0.001)
    stops = 0
    for cutoff in (np.minimum(2.0, d * (4 + np.log(100))), np.full(len(m), 0.003), np.full(len(m), 5.0)):
        for most in (32, 3, 1):
            want = walk_back(t_out, t_in, arr, pos, first, cutoff, most)
            got = linking.possible_parents(t_out, t_in, arr, pos, first, cutoff, most)
            for a, b in zip(want, got, strict=True):
                np.testing.assert_array_equal(a, b)
            stops += len(want[0])
    assert stops > len(m)


@pytest.mark.parametrize("k", [0, 4])
def test_blocks_do_not_change_the_result(k, monkeypatch):
    """The walk back and the weights work a block of messages or links at a time: with blocks of a
    few hundred (many blocks) the result is bit for bit that of one block."""
    from analysis.paths import linking_weights

    tr = maketrace(web_service(), duration=20, parallelism=4, seed=9, tags=False)
    one = linking.infer(tr.messages, untraced="client", k=k)
    monkeypatch.setattr(linking, "BLOCK", 300)
    monkeypatch.setattr(linking_weights, "BLOCK", 700)
    many = linking.infer(tr.messages, untraced="client", k=k)
    assert [(p.pattern, p.count, p.node_delays, p.edge_latencies) for p in one.patterns] == \
        [(p.pattern, p.count, p.node_delays, p.edge_latencies) for p in many.patterns]
    pd.testing.assert_frame_equal(one.node_delays, many.node_delays)


@pytest.mark.parametrize("seed, params", [
    (11, {"untraced": "client", "ambiguity": 0.45, "k": 5}),   # inner grafts move subtrees
    (2, {}),
    (5, {"untraced": "client", "k": 6}),
])
def test_copied_rows_hashes_are_computed_only_where_changed(seed, params, monkeypatch):
    """Batch.copy_hashes (the forest's hashes, recomputed only on the rows above a changed link)
    gives every copied row the hash assemble.subtree_hashes gives the whole copy, on cases with
    drops, outer grafts and inner grafts' moved subtrees."""
    from analysis.paths import linking_instances
    from analysis.paths.assemble import Nodes

    seen = []
    real = linking_instances.Batch.copy_hashes

    def spy(self, par, natural, msg):
        h = real(self, par, natural, msg)
        seen.append((self, par, natural, msg, h))
        return h

    monkeypatch.setattr(linking_instances.Batch, "copy_hashes", spy)
    tr = maketrace(web_service(), duration=20, parallelism=6, seed=seed, tags=False)
    linking.infer(tr.messages, **params)
    assert seen
    moved = 0
    for batch, par, natural, msg, h in seen:
        depth, same = forest_depth(par)
        assert (same == par).all()
        rows = Nodes(batch.nodes.names, batch.nodes.src[msg], batch.nodes.dst[msg])
        assert (h == subtree_hashes(rows, par, depth)).all()
        moved += int((par != natural).sum())
    assert moved > 100


def test_canonical_text_is_one_function_for_trees_and_instances():
    """linking's walked instances name their trees with assemble.canonical_text, its edge labels
    kept across a trace's instances (the labels argument): the same texts as with labels made per
    tree, and as tree_texts' (the forest's naming), names with the pattern syntax's characters too."""
    from analysis.paths.assemble import Nodes, canonical_text, forest_roots, tree_texts

    tr = maketrace(web_service(), duration=5, parallelism=2, seed=3)
    m, t = tr.messages, tr.truth
    nodes = node_codes(m)
    odd = Nodes(np.array([f"{x}(a>b),\\" for x in nodes.names], dtype=object), nodes.src, nodes.dst)
    depth, cause = forest_depth(t.cause)
    root_of = forest_roots(cause)
    h = subtree_hashes(odd, cause, depth)
    roots = np.flatnonzero((cause < 0) & (t.request >= 0))[:40]
    children: dict[int, list[int]] = {}
    for c in np.flatnonzero(cause >= 0).tolist():
        children.setdefault(int(cause[c]), []).append(c)
    labels: dict[tuple[int, int], str] = {}
    shared = [canonical_text(odd, children, int(r), labels) for r in roots]
    assert labels                                  # filled once, then read by the later trees
    assert shared == [canonical_text(odd, children, int(r)) for r in roots]
    assert shared == tree_texts(odd, cause, root_of, h, roots)
    assert all("\\(a\\>b\\)" in s for s in shared)


def test_top_rows_and_pair_sums_equal_what_they_replace():
    """top_rows climbs from a few rows only: forest_roots' roots of them; _pair_sums counts into a
    dense key range: key_sums' keys and sums to the last bit (the same additions in the same order)."""
    from analysis.paths.assemble import forest_roots, key_sums
    from analysis.paths.linking_instances import _pair_sums, top_rows

    rng = np.random.default_rng(4)
    n = 5000
    par = np.where(rng.random(n) < 0.05, -1, np.arange(n) - rng.integers(1, 40, n))
    par[par < 0] = -1
    rows = rng.integers(0, n, 300)
    assert (top_rows(par, rows) == forest_roots(par)[rows]).all()
    major, minor = rng.integers(0, 3000, 20_000), rng.choice([3, 77, 400, 899], 20_000)
    v, w = rng.standard_normal(20_000), rng.random(20_000)
    keys, (a, b) = _pair_sums(major, minor, 900, v, w)
    want, (a0, b0) = key_sums(major * 900 + minor, 3000 * 900, v, w)
    assert (keys == want).all() and (a == a0).all() and (b == b0).all()
