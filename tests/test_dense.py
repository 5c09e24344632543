"""analysis.model.dense and the stretches load_stretches builds with it: the same as the plain forms
(tests/support/reference_dense.py) on random rows (sparse, out of order, two at one position,
modules with no rows), and nest-cf's fold on the additive scale bit for bit as it was."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.model import dense
from analysis.model.batch import Batch
from analysis.model.stretches import DIRS, build_stretches
from analysis.variants import nest_cf
from tests.support.reference_dense import ref_build_stretches, ref_dense_counter_rows


def random_rows(rng, n_rows=400, s_count=60, ids=(3, 7, 8, 100, 5000), dup=True, shuffle=True):
    ids = np.array(sorted(ids), dtype=np.int64)
    module = rng.choice(ids, n_rows)
    out = rng.random(n_rows) < 0.5
    pos = rng.integers(0, s_count, n_rows)
    if not dup:   # one row per (module, direction, position)
        key = np.unique((np.searchsorted(ids, module) * 2 + out) * s_count + pos)
        module, out, pos = ids[key // s_count // 2], (key // s_count) % 2 == 1, key % s_count
    order = rng.permutation(len(pos)) if shuffle else np.lexsort((pos, module, out))
    rows = {"seq": pos[order] + 10, "module": module[order], "out": out[order],
            "vals": rng.random((len(pos), 4))[order], "has": (rng.random((len(pos), 4)) < 0.8)[order],
            "bad": (rng.random(len(pos)) < 0.05)[order]}
    end = rng.integers(0, s_count + 1, len(ids))
    return rows, pos[order], (ids, end), np.arange(s_count) + 10


@pytest.mark.parametrize("seed", range(30))
def test_dense_counter_rows_as_the_plain_form(seed):
    rng = np.random.default_rng(seed)
    rows, pos, lives, seqs = random_rows(rng, dup=seed % 3 != 0, shuffle=seed % 2 == 0)
    want, want_pos = ref_dense_counter_rows(rows, pos, lives, seqs)
    got, got_pos = dense.dense_counter_rows(rows, pos, lives, seqs)
    assert np.array_equal(got_pos, want_pos)
    for k in want:
        assert np.array_equal(got[k], want[k]), k
    # by direction: the same rows, each direction's one slice
    got, got_pos = dense.dense_counter_rows(rows, pos, lives, seqs, by_direction=True)
    order = np.lexsort((want_pos, want["module"], want["out"]))
    assert np.array_equal(got_pos, want_pos[order])
    for k in want:
        assert np.array_equal(got[k], want[k][order]), k


def test_dense_rows_already_complete_come_back_in_series_order():
    rng = np.random.default_rng(1)
    ids = np.array([2, 9])
    pos = np.tile(np.arange(5), 4)
    rows = {"module": np.repeat([2, 9, 2, 9], 5), "out": np.repeat([False, False, True, True], 5),
            "seq": pos, "vals": rng.random((20, 4)), "has": np.ones((20, 4), bool)}
    got, got_pos = dense.dense_counter_rows(rows, pos, (ids, np.array([5, 5])), np.arange(5))
    want, want_pos = ref_dense_counter_rows(rows, pos, (ids, np.array([5, 5])), np.arange(5))
    assert np.array_equal(got_pos, want_pos) and all(np.array_equal(got[k], want[k]) for k in want)


def random_graph(rng, s_count=80, n_mod=12):
    """Modules with lives, rows where they live (some missing), edges between them that come and go."""
    ids = np.sort(rng.choice(np.arange(1, 10_000), n_mod, replace=False))
    kind = {int(m): str(rng.choice(["app", "socket", "tcp", "ipeth"])) for m in ids}
    born = rng.integers(0, s_count - 5, n_mod)
    died = np.minimum(born + rng.integers(1, s_count, n_mod), s_count)
    mono = 100.0 + np.arange(s_count) * 0.1
    per_dir, pres = {}, []
    for d in DIRS:
        mods, poss = [], []
        for m, a, b in zip(ids, born, died, strict=True):
            p = np.arange(a, b)
            p = p[rng.random(len(p)) < 0.9]
            mods.append(np.full(len(p), m))
            poss.append(p)
        mod, pos = np.concatenate(mods), np.concatenate(poss)
        order = np.argsort(pos, kind="stable")
        mod, pos = mod[order], pos[order]
        r = len(pos)
        per_dir[d] = (pos, mod, rng.random((r, 3)), rng.random(r), rng.random((r, 4)) < 0.7, rng.random(r) < 0.1)
        pres.append((mod, pos))
    edges = []
    for _ in range(20):
        p, c = rng.choice(ids, 2)
        a = rng.integers(0, s_count)
        b = None if rng.random() < 0.3 else mono[min(s_count - 1, a + rng.integers(1, 30))]
        edges.append((int(p), int(c), float(mono[a]) - 0.01, b))
    row_module = np.concatenate([m for m, _ in pres])
    row_pos = np.concatenate([p for _, p in pres])
    return np.arange(s_count), mono, kind, per_dir, row_module, row_pos, edges


def assert_same_stretches(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.modules == b.modules and a.kinds == b.kinds and a.edges == b.edges
        assert np.array_equal(a.seqs, b.seqs)
        for d in DIRS:
            for f in a.counters[d].__dataclass_fields__:
                x, y = getattr(a.counters[d], f), getattr(b.counters[d], f)
                assert x.dtype == y.dtype and np.array_equal(x, y), (d, f)


@pytest.mark.parametrize("seed", range(25))
def test_build_stretches_as_the_plain_form(seed):
    rng = np.random.default_rng(seed)
    seqs, mono, kind, per_dir, row_module, row_pos, edges = random_graph(rng)
    want = ref_build_stretches(seqs, mono, kind, per_dir, row_module, row_pos, edges)
    assert_same_stretches(build_stretches(seqs, mono, kind, per_dir, row_module, row_pos, edges), want)
    shuffled = {}
    for d, arrays in per_dir.items():   # rows in any order
        order = rng.permutation(len(arrays[0]))
        shuffled[d] = tuple(a[order] for a in arrays)
    got = build_stretches(seqs, mono, kind, shuffled, row_module, row_pos, edges)
    assert_same_stretches(got, want)
    # The stretches' counters lie back to back: a batch of them takes them without a copy.
    if got:
        batch = Batch(got)
        for d in DIRS:
            c = batch.counters(d)
            assert not c.tm.flags.owndata and not c.tm.flags.writeable
            assert np.array_equal(c.tm, np.concatenate([st.counters[d].tm.ravel() for st in got]))


def old_combine(values, cells, n):
    """nest-cf's fold as it was (element-wise to_sum of every value)."""
    ok = ~np.isnan(values)
    values, cells = values[ok], cells[ok]
    pos = np.bincount(cells, weights=values == 1, minlength=n) > 0
    neg = np.bincount(cells, weights=values == -1, minlength=n) > 0
    finite = np.abs(values) < 1
    total = np.bincount(cells[finite], weights=nest_cf.to_sum(values[finite]), minlength=n)
    return np.where(pos & neg, 0.0, np.where(pos, 1.0, np.where(neg, -1.0, nest_cf.from_sum(total))))


@pytest.mark.parametrize("seed", range(10))
def test_nest_cf_fold_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    table = np.array([np.nan, -1.0, -0.8, -0.6, -0.4, 0.4, 0.6, 0.8, 1.0])
    p = np.array([0.2, 0.01, 0.1, 0.2, 0.15, 0.15, 0.1, 0.08, 0.01])
    values = rng.choice(table, 5000, p=p / p.sum())
    cells = rng.integers(0, 300, 5000)
    got = nest_cf.combine(values, cells, 300)
    assert np.array_equal(got, old_combine(values, cells, 300))   # not approximately: the same bits


@pytest.mark.parametrize("chunk", [1, 500])
def test_nest_cf_in_pieces_bit_for_bit(tmp_path, monkeypatch, chunk):
    """nest-cf folds a piece of whole stretches at a time (nest_cf.CHUNK cells, more than any test run
    has): pieces of one stretch, or of a few, give the same bits as the whole run in one piece."""
    from analysis.model.stretches import load_stretches
    from tests.support.synthetic import synthetic_run

    run = load_stretches(synthetic_run(tmp_path / "run", seconds=30, apps=2, conns=3, churn_s=5))
    assert len(run.stretches) > 3 and sum(st.n * st.t for st in run.stretches) > 2 * chunk
    whole = nest_cf.diagnose(Batch(run.stretches))
    monkeypatch.setattr(nest_cf, "CHUNK", chunk)
    pieces = nest_cf.diagnose(Batch(run.stretches))
    for d in DIRS:
        assert np.array_equal(pieces[d][0], whole[d][0]) and np.array_equal(pieces[d][1], whole[d][1]), d
    assert any(whole[d][1].any() for d in DIRS)   # positives to get wrong
