"""The fast paths of load_stretches give what the general paths give, bit for bit, on small hand-made
inputs, including inputs where a fast path does not apply and the general one runs."""

from __future__ import annotations

import numpy as np
import pytest

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
