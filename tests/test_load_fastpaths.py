"""The fast paths of load_stretches give what the general paths give, bit for bit, on small hand-made
inputs, including inputs where a fast path does not apply and the general one runs."""

from __future__ import annotations

import numpy as np
import pytest

from analysis import deltas
from rundir import repair


def _rows(seq, module, rng):
    n = len(seq)
    return {"seq": np.asarray(seq, dtype=np.int64), "module": np.asarray(module, dtype=np.int64),
            "out": np.zeros(n, dtype=bool), "bad": np.zeros(n, dtype=bool),
            "vals": rng.random((n, 4)), "has": np.ones((n, 4), dtype=bool)}


def _place_both(rows, seqs, kind, monkeypatch):
    w_fast: list[str] = []
    fast = repair.place_rows(dict(rows), seqs, kind, w_fast)
    with monkeypatch.context() as m:
        m.setattr(repair, "_exact_positions", lambda *a: None)
        w_gen: list[str] = []
        gen = repair.place_rows(dict(rows), seqs, kind, w_gen)
    return fast, gen, w_fast, w_gen


@pytest.mark.parametrize("case", ["from0", "from7", "unknown_module", "missing_seq", "after_end", "before_start",
                                  "gap_in_seqs", "not_in_runs"])
def test_place_rows_fast_path_as_the_search(case, monkeypatch):
    rng = np.random.default_rng(3)
    first = 7 if case != "from0" else 0
    seqs = np.arange(first, first + 6, dtype=np.int64)
    module = np.repeat([2, 5, 9], 6)
    seq = np.tile(seqs, 3)
    kind = {2: "app", 5: "tcp", 9: "ip"}
    if case == "unknown_module":
        module = module.copy()
        module[6:12] = 4
    elif case == "missing_seq":
        seqs = np.delete(seqs, 3)
    elif case == "after_end":
        seq = seq.copy()
        seq[5] = seqs[-1] + 3
    elif case == "before_start":
        seq = seq.copy()
        seq[0] = seqs[0] - 1
    elif case == "gap_in_seqs":
        seqs = seqs.copy()
        seqs[4:] += 10
        seq = np.tile(seqs, 3)
    elif case == "not_in_runs":
        module = np.tile([2, 5, 9], 6)
    rows = _rows(seq, module, rng)
    (fr, fp), (gr, gp), wf, wg = _place_both(rows, seqs, kind, monkeypatch)
    assert wf == wg
    assert fp.dtype == gp.dtype and np.array_equal(fp, gp)
    assert fr.keys() == gr.keys()
    for k in gr:
        assert fr[k].dtype == gr[k].dtype and np.array_equal(fr[k], gr[k]), k
    took_fast = repair._exact_positions(rows, seqs, kind) is not None
    assert took_fast == (case in ("from0", "from7"))


# ---------------------------------------------------------------- series_deltas

def _old_series_deltas(mod, vals, has, kinds_zero, first_of_run):
    """series_deltas as it was before it went column by column (2-D masks and copies)."""
    r = len(mod)
    cum = list(deltas._CUM)
    if r == 0:
        return np.zeros((0, len(cum))), np.zeros(0, dtype=bool)
    start = np.ones(r, dtype=bool)
    start[1:] = mod[1:] != mod[:-1]
    vals = deltas.absorb_wait_jitter(vals, has, start)
    cv, hc = vals[:, cum], has[:, cum]
    ok = hc.copy()
    ok[1:] &= hc[:-1]
    delta = np.empty((r, len(cum)))
    delta[0] = 0.0
    np.subtract(cv[1:], cv[:-1], out=delta[1:])
    delta[~ok] = 0.0
    delta[start] = np.where(hc[start], cv[start], 0.0)
    invalid = start & ~kinds_zero
    bad = ((delta < 0) & ok).any(1) & ~start
    if bad.any():
        ends = np.append(np.flatnonzero(start)[1:], r)
        group_end = ends[np.searchsorted(ends, np.arange(r), side="right")]
        resume = 0
        for b in np.flatnonzero(bad):
            if b >= resume:
                resume = deltas._rebaseline(vals, has, bad, b - 1, group_end[b], delta, invalid)
    invalid |= first_of_run
    return delta, invalid


def _random_series(rng, n_mod=6, length=40, p_has=0.8, steps=(0.6, 0.15, 0.15, 0.1)):
    """Rows sorted by (module, position): cumulative values that mostly rise, sometimes fall (a little,
    within the wait_ms jitter, or a lot), with counters that come and go."""
    mods, vals = [], []
    for m in range(n_mod):
        n = int(rng.integers(1, length))
        kind = rng.choice(4, (n, 4), p=list(steps))
        step = np.select([kind == 0, kind == 1, kind == 2], [rng.random((n, 4)) * 10, 0.0, -rng.random((n, 4)) * 0.05],
                         -rng.random((n, 4)) * 20)
        vals.append(np.cumsum(step, axis=0) + 100)
        mods.append(np.full(n, m * 3 + 1))
    mod, vals = np.concatenate(mods), np.concatenate(vals)
    vals[rng.random(vals.shape) < 0.05] = 7.0       # equal and out-of-line values
    has = rng.random(vals.shape) < p_has
    return mod, vals, has, rng.random(len(mod)) < 0.5, rng.random(len(mod)) < 0.05


@pytest.mark.parametrize("seed", range(40))
def test_series_deltas_as_before(seed):
    rng = np.random.default_rng(seed)
    p_has = (1.0, 0.8, 0.97, 0.5)[seed % 4]   # 1.0: every counter always there (the columns' fast path)
    mod, vals, has, kz, first = _random_series(rng, p_has=p_has)
    if seed % 5 == 0:   # whole columns always there, others not
        has[:, [0, 3]] = True
    want = _old_series_deltas(mod, vals.copy(), has, kz, first)
    got = deltas.series_deltas(mod, vals.copy(), has, kz, first)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert np.ascontiguousarray(g).tobytes() == np.ascontiguousarray(w).tobytes()   # bit for bit, -0.0 too
    # the delta's columns are contiguous (build_stretches gathers from them)
    assert all(got[0][:, j].flags.c_contiguous for j in range(3))


def test_series_deltas_wait_jitter_and_rebaseline_cases():
    mod = np.array([1, 1, 1, 1, 1, 2, 2, 2, 2])
    vals = np.zeros((9, 4))
    vals[:, 0] = [1, 2, 1, 0.5, 3, 5, 4, 6, 6]           # a decrease, then a lower third: rebaseline
    vals[:, 1] = [10, 9.97, 9.96, 9.9, 11, 2, 1.99, 1.99, 1]   # small drops (jitter) and a real one
    vals[:, 3] = [0, 0, 0, 0, 0, 1, 1, 1, 1]
    has = np.ones((9, 4), dtype=bool)
    kz, first = np.array([True] * 5 + [False] * 4), np.zeros(9, dtype=bool)
    want = _old_series_deltas(mod, vals, has, kz, first)
    got = deltas.series_deltas(mod, vals, has, kz, first)
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g, w)
    assert got[1].any() and (got[0][:, 1] != vals[:, 1] - np.append(0, vals[:-1, 1])).any()
    assert deltas.series_deltas(mod[:0], vals[:0], has[:0], kz[:0], first[:0])[0].shape == (0, 3)
