"""The fast paths of load_stretches give what the general paths give, bit for bit, on small hand-made
inputs, including inputs where a fast path does not apply and the general one runs."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.model import deltas, dense, stretches
from analysis.model.stretches import DIRS, build_stretches
from rundir import repair
from tests.support.reference_dense import ref_build_stretches, ref_dense_counter_rows
from tests.test_dense import assert_same_stretches


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

def _old_rebaseline(vals: np.ndarray, has: np.ndarray, bad: np.ndarray, a: int, end: int,
                delta: np.ndarray, invalid: np.ndarray) -> int:
    """deltas._rebaseline as it was (a row at a time from the arrays)."""
    cum = list(deltas._CUM)
    base, base_row, pending = vals[a, cum].tolist(), a, None
    i = a + 1
    while i < end:
        if pending is None and i > a + 1 and not bad[i]:
            break
        v, ok = vals[i, cum].tolist(), (has[i, cum] & has[i - 1, cum]).tolist()
        lower = any(o and x < b for x, b, o in zip(v, base, ok, strict=True))
        if lower and pending is not None:  # the third is lower than the first too
            invalid[base_row] = True
            base = pending
            lower = any(o and x < b for x, b, o in zip(v, base, ok, strict=True))
        if lower:
            invalid[i] = True
            delta[i] = 0.0
            pending = v
        else:
            delta[i] = [x - b if o else 0.0 for x, b, o in zip(v, base, ok, strict=True)]
            invalid[i] = False
            base, base_row, pending = v, i, None
        i += 1
    return i


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
                resume = _old_rebaseline(vals, has, bad, b - 1, group_end[b], delta, invalid)
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


# ---------------------------------------------------------------- build_stretches: spans and gathers

def _run_graph(rng, s_count=70, n_mod=10, gaps=False):
    """Like tests/test_dense.py's random_graph, but each (module, direction) has its rows as one run of
    consecutive positions (the part of its life after its first row, as load_stretches has them),
    rows by module then position; `gaps`: some runs broken (the general path)."""
    ids = np.sort(rng.choice(np.arange(1, 10_000), n_mod, replace=False))
    kind = {int(m): str(rng.choice(["app", "socket", "tcp", "ipeth"])) for m in ids}
    born = rng.integers(0, s_count - 5, n_mod)
    died = np.minimum(born + rng.integers(1, s_count, n_mod), s_count)
    mono = 100.0 + np.arange(s_count) * 0.1
    per_dir, pres = {}, []
    for d in DIRS:
        mods, poss = [], []
        for m, a, b in zip(ids, born, died, strict=True):
            if rng.random() < 0.15:   # no rows in this direction
                continue
            a = a + (rng.integers(0, max(1, (b - a) // 2)) if rng.random() < 0.4 else 0)   # first row later
            p = np.arange(a, b)
            if gaps and rng.random() < 0.3:
                p = p[rng.random(len(p)) < 0.8]
            mods.append(np.full(len(p), m))
            poss.append(p)
        mod, pos = np.concatenate(mods), np.concatenate(poss)
        r = len(pos)
        delta = rng.random((3, r)).T if rng.random() < 0.5 else rng.random((r, 3))   # columns contiguous or not
        per_dir[d] = (pos, mod, delta, rng.random(r), rng.random((r, 4)) < 0.7, rng.random(r) < 0.1)
        pres.append((mod, pos))
    edges = []
    for _ in range(15):
        p, c = rng.choice(ids, 2)
        a = rng.integers(0, s_count)
        b = None if rng.random() < 0.3 else mono[min(s_count - 1, a + rng.integers(1, 30))]
        edges.append((int(p), int(c), float(mono[a]) - 0.01, b))
    row_module = np.concatenate([m for m, _ in pres])
    row_pos = np.concatenate([p for _, p in pres])
    return np.arange(s_count), mono, kind, per_dir, row_module, row_pos, edges


@pytest.mark.parametrize("seed", range(30))
def test_build_stretches_gathers_as_the_plain_form(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    seqs, mono, kind, per_dir, row_module, row_pos, edges = _run_graph(rng, gaps=seed % 3 == 0)
    by_pos = {d: tuple(a[np.argsort(x[0], kind="stable")] for a in x) for d, x in per_dir.items()}
    want = ref_build_stretches(seqs, mono, kind, by_pos, row_module, row_pos, edges)
    seen = []
    real = dense.gather_index

    def spy(*a):
        seen.append(real(*a))
        return seen[-1]

    monkeypatch.setattr(stretches, "gather_index", spy)
    got = build_stretches(seqs, mono, kind, per_dir, row_module, row_pos, edges)
    assert_same_stretches(got, want)
    if seed % 3:   # one run per module: gathered, some blocks only in part or not at all
        assert all(g is not None for g in seen)
    # the general path (cell_places and a scatter) on the same rows
    monkeypatch.setattr(stretches, "gather_index", lambda *a: None)
    assert_same_stretches(build_stretches(seqs, mono, kind, per_dir, row_module, row_pos, edges), want)


def test_gather_covers_partial_and_absent_blocks():
    missing = []
    for seed in range(30):
        seqs, mono, kind, per_dir, row_module, row_pos, edges = _run_graph(np.random.default_rng(seed))
        ids = np.fromiter(sorted(kind), dtype=np.int64)
        spans = dense.presence_spans(ids, row_module, row_pos, len(seqs))
        bounds = np.unique(np.concatenate([[0, len(seqs)], spans[1], spans[2]]))
        members, n = dense.stretch_members(bounds[:-1], spans)
        keep = n > 0
        g = dense.gather_index(ids, per_dir["out"][1], per_dir["out"][0], bounds[:-1][keep], np.diff(bounds)[keep],
                               members, n[keep])
        missing.append(len(g[1]))
    assert max(missing) > 0   # so the tests above gather cells without a row too


@pytest.mark.parametrize("seed", range(20))
def test_presence_spans_as_presence(seed):
    rng = np.random.default_rng(seed)
    s_count, ids = 50, np.array([4, 9, 12, 30, 31])
    if seed % 2:   # runs (both directions, overlapping and touching spans)
        parts = []
        for _ in range(12):
            a = int(rng.integers(0, s_count - 1))
            b = int(rng.integers(a + 1, s_count + 1))
            parts.append((np.full(b - a, rng.choice(ids)), np.arange(a, b)))
        mod, pos = (np.concatenate(x) for x in zip(*parts, strict=True))
    else:          # single rows in any order, duplicates (presence's matrix)
        mod, pos = rng.choice(ids, 300), rng.integers(0, s_count, 300)
    slot = dense.module_slots(ids, mod) if seed % 2 == 0 else np.searchsorted(ids, mod)
    pm, pp = dense.presence(slot, pos, len(ids), s_count)
    new_run = np.append(True, (pm[1:] != pm[:-1]) | (pp[1:] != pp[:-1] + 1))
    end_run = np.append(new_run[1:], True)
    got = dense.presence_spans(ids, mod, pos, s_count)
    for g, w in zip(got, (pm[new_run], pp[new_run], pp[end_run] + 1), strict=True):
        assert np.array_equal(g, w)
    bad = mod.copy()
    bad[len(bad) // 2:] = 5   # a module not in ids: KeyError with the first such row's module
    with pytest.raises(KeyError, match="5"):
        dense.presence_spans(ids, bad, pos, s_count)


def test_gather_counters_as_fill_counters():
    rng = np.random.default_rng(2)
    r, n_cells = 30, 40
    cell = rng.permutation(n_cells)[:r]
    inv = np.zeros(n_cells, dtype=np.int64)
    inv[cell] = np.arange(r)
    missing = np.setdiff1d(np.arange(n_cells), cell)
    args = (rng.random((r, 3)), rng.random(r), rng.random((r, 4)) < 0.5, rng.random(r) < 0.5)
    want = dense.fill_counters(n_cells, cell, *args)
    got = dense.gather_counters(inv, missing, *args)
    assert want.keys() == got.keys()
    for f in want:
        assert want[f].dtype == got[f].dtype and np.array_equal(want[f], got[f]), f


# ---------------------------------------------------------------- dense_counter_rows: rows complete already

@pytest.mark.parametrize("case", ["complete", "gap", "tie", "lives_on", "out_of_order", "one_series"])
def test_dense_counter_rows_complete_as_the_general_path(case, monkeypatch):
    rng = np.random.default_rng(4)
    s_count, ids = 12, np.array([3, 8, 21])
    spans = {(False, 3): (0, 12), (False, 8): (2, 9), (False, 21): (5, 12), (True, 3): (1, 12), (True, 21): (5, 12)}
    if case == "one_series":
        spans = {(True, 8): (2, 9)}
    end = np.array([12, 9, 12])
    out, mod, pos = [], [], []
    for (o, m), (a, b) in sorted(spans.items()):
        out += [o] * (b - a)
        mod += [m] * (b - a)
        pos += list(range(a, b))
    out, mod, pos = np.array(out), np.array(mod, dtype=np.int64), np.array(pos, dtype=np.int64)
    if case == "gap":
        out, mod, pos = np.delete(out, 4), np.delete(mod, 4), np.delete(pos, 4)
    elif case == "tie":
        out, mod, pos = np.insert(out, 4, out[4]), np.insert(mod, 4, mod[4]), np.insert(pos, 4, pos[4])
    elif case == "lives_on":
        end = np.array([12, 11, 12])    # module 8 alive after its last row: carried forward
    elif case == "out_of_order":
        order = np.lexsort((pos, out, mod))   # by module first
        out, mod, pos = out[order], mod[order], pos[order]
    n = len(pos)
    rows = {"seq": pos + 100, "module": mod, "out": out, "vals": rng.random((n, 4)), "has": rng.random((n, 4)) < 0.8,
            "bad": rng.random(n) < 0.1}
    seqs = np.arange(s_count) + 100
    assert dense.complete_series(mod, out, pos, (ids, end)) == (case in ("complete", "one_series"))
    got, got_pos = dense.dense_counter_rows(rows, pos, (ids, end), seqs, by_direction=True)
    monkeypatch.setattr(dense, "complete_series", lambda *a: False)
    want, want_pos = dense.dense_counter_rows(rows, pos, (ids, end), seqs, by_direction=True)
    assert np.array_equal(got_pos, want_pos) and got.keys() == want.keys()
    for k in want:
        assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), k
    ref, ref_pos = ref_dense_counter_rows(rows, pos, (ids, end), seqs)
    order = np.lexsort((ref_pos, ref["module"], ref["out"]))
    assert np.array_equal(got_pos, ref_pos[order])
    for k in ref:
        assert np.array_equal(got[k], ref[k][order]), k


@pytest.mark.parametrize("n", [0, 1, 2, 5, dense._CHUNK - 1, dense._CHUNK, dense._CHUNK + 1, 3 * dense._CHUNK + 7])
def test_run_heads_in_chunks(n):
    rng = np.random.default_rng(n)
    mod = np.sort(rng.integers(0, 5, n))
    pos = np.arange(n) - np.repeat(rng.integers(0, 3, n // 50 + 1), 50)[:n]
    out = np.arange(n) > n // 2
    for o in (None, out):
        brk = (mod[1:] != mod[:-1]) | (pos[1:] != pos[:-1] + 1)
        if o is not None:
            brk |= o[1:] != o[:-1]
        want = np.flatnonzero(np.append(n > 0, brk))
        assert np.array_equal(dense.run_heads(mod, pos, o), want)


def test_series_deltas_into_a_buffer():
    rng = np.random.default_rng(9)
    mod, vals, has, kz, first = _random_series(rng)
    want = deltas.series_deltas(mod, vals, has, kz, first)
    buf = np.full((3, len(mod) + 5), np.nan)
    got = deltas.series_deltas(mod, vals, has, kz, first, buf)
    assert np.shares_memory(got[0], buf)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.mark.parametrize("seed", range(8))
def test_stretch_edges_without_a_table(seed, monkeypatch):
    """Stretches with so many modules that stretch_edges finds the distinct edges by sorting."""
    rng = np.random.default_rng(seed)
    args = _run_graph(rng)
    want = build_stretches(*args)
    monkeypatch.setattr(dense, "_TABLE_CELLS", 0)
    assert_same_stretches(build_stretches(*args), want)
    assert all(a.edges == b.edges for a, b in zip(build_stretches(*args), want, strict=True))
    assert any(st.edges for st in want)


# ---------------------------------------------------------------- tcpstate / probes attach without rows

def _small_stretches():
    seqs, mono, kind, per_dir, row_module, row_pos, edges = _run_graph(np.random.default_rng(5))
    kind = {m: "tcp" if i % 2 else k for i, (m, k) in enumerate(sorted(kind.items()))}
    return build_stretches(seqs, mono, kind, per_dir, row_module, row_pos, edges), seqs, mono, kind


def test_tcpstate_attach_without_rows_as_with_rows_of_no_stretch():
    import pandas as pd

    from analysis.model import tcpstate
    from rundir.db import TCP_STATE_COLUMNS

    cols = ["seq", "module", *TCP_STATE_COLUMNS]
    sts, seqs, mono, _ = _small_stretches()
    tcpstate.attach(sts, pd.DataFrame({c: pd.Series(dtype=float) for c in cols}), seqs, mono)
    got = [st.tcpstate for st in sts]
    # a row of a module no stretch has: the general path, which knows nothing either
    tcpstate.attach(sts, pd.DataFrame([[float(seqs[3]), 1e9, *range(len(TCP_STATE_COLUMNS))]], columns=cols), seqs, mono)
    for g, st in zip(got, sts, strict=True):
        w = st.tcpstate
        for f in vars(w):
            a, b = getattr(g, f), getattr(w, f)
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True), f


def test_probes_attach_without_bursts_as_with_bursts_of_no_module():
    import pandas as pd

    from analysis.model import probes

    sts, seqs, mono, kind = _small_stretches()
    remotes = {m: f"10.0.0.{i}:80" for i, m in enumerate(kind) if kind[m] == "tcp"}
    empty = probes.burst_table(None)
    probes.attach(sts, empty, seqs, mono, remotes)
    got = [st.probes for st in sts]
    other = pd.DataFrame({"burst": [1.0], "remote": ["10.9.9.9:80"], "sent": [float(mono[2])],
                          "done": [float(mono[2]) + 0.01], "answer": [np.inf]})
    probes.attach(sts, other, seqs, mono, remotes)   # bursts, but to no module's remote: the general path
    for g, st in zip(got, sts, strict=True):
        w = st.probes
        assert np.array_equal(g.remote, w.remote) and g.remote.dtype == w.remote.dtype
        assert (g.remote == -1).all()
        for f in ("mono", "prev"):
            assert np.array_equal(getattr(g, f), getattr(w, f))
        for f in ("since", "until"):
            for d in DIRS:
                assert np.array_equal(getattr(g, f)[d], getattr(w, f)[d], equal_nan=True)


@pytest.mark.parametrize("pattern", ["falling", "saw", "falling_then_flat"])
def test_series_deltas_long_rebaselines(pattern):
    """Rebaselines that go on for more rows than _rebaseline fetches at once."""
    n = 40
    x = {"falling": 100.0 - np.arange(n), "saw": 100.0 + np.where(np.arange(n) % 2, -1.0, 1.0) * np.arange(n),
         "falling_then_flat": np.concatenate([100.0 - np.arange(n // 2), np.full(n - n // 2, 60.0)])}[pattern]
    mod = np.repeat([1, 2], n)
    vals = np.zeros((2 * n, 4))
    vals[:n, 0] = x
    vals[n:, 3] = x[::-1]
    vals[:, 1] = np.tile(x, 2)
    has = np.ones((2 * n, 4), dtype=bool)
    has[n + 5, 1] = False
    kz, first = np.ones(2 * n, dtype=bool), np.zeros(2 * n, dtype=bool)
    want = _old_series_deltas(mod, vals.copy(), has, kz, first)
    got = deltas.series_deltas(mod, vals.copy(), has, kz, first)
    for g, w in zip(got, want, strict=True):
        assert np.ascontiguousarray(g).tobytes() == np.ascontiguousarray(w).tobytes()
