"""analysis.labels reads a run's counters from its stretches' arrays (no long counters frame) and gets
what the frame gives: the same per-row arrays, the same series, the same labels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import labels
from analysis.load import load_run_data
from analysis.model.label_input import ArrayRows, StretchRows, label_rows
from analysis.model.long_frame import FrameRows
from analysis.model.stretches import DIRS
from tests.support.synthetic import synthetic_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return synthetic_run(tmp_path_factory.mktemp("labels") / "run", seconds=60, apps=2, conns=3, churn_s=10)


def test_the_stretches_give_the_frames_rows_and_series(run):
    fast = load_run_data(run)
    assert fast.counter_stretches()
    a = label_rows(fast)
    assert isinstance(a, StretchRows)
    assert fast._counters is None   # the long frame was not made
    slow = load_run_data(run)
    slow.counters = slow.counters   # made: the frame is what counts
    assert slow.counter_stretches() is None
    b = label_rows(slow)
    assert isinstance(b, ArrayRows)
    assert a.n == b.n and a.index.equals(b.index)
    assert a.invalid.dtype == b.invalid.dtype and np.array_equal(a.invalid, b.invalid)
    assert list(a.series) == list(b.series)
    for k, rows in b.series.items():
        assert np.array_equal(a.series[k], rows), k
        for f in ("t_start", "t_end"):
            assert np.array_equal(getattr(a, f)(rows), getattr(b, f)(rows), equal_nan=True), (k, f)
        for progress in (False, True):
            assert np.array_equal(a.idle(rows, progress), b.idle(rows, progress)), (k, progress)
    rng = np.random.default_rng(1)
    rows = rng.choice(b.n, 500)   # any rows, in any order, both directions
    for f in ("t_start", "t_end"):
        assert np.array_equal(getattr(a, f)(rows), getattr(b, f)(rows), equal_nan=True), f
    assert np.array_equal(a.idle(rows, True), b.idle(rows, True))
    assert b.idle(np.arange(b.n), True).sum() >= b.idle(np.arange(b.n)).sum() > 0
    mods = np.array(sorted(fast.modules.index))
    up, down = rng.choice(mods, 5, replace=False), rng.choice(mods, 5, replace=False)
    assert np.array_equal(a.oneway(up, down), b.oneway(up, down)) and a.oneway(up, down).any()
    t = fast.snapshots["mono"].to_numpy()
    for stop in (t[0] - 1, t[len(t) // 2], t[-1]):
        assert np.array_equal(a.after(stop), b.after(stop))


@pytest.mark.parametrize("policy", ["impact", "impact:retrans=continues,collateral=exclude", "window:tail=1"])
def test_same_labels_either_way(run, policy):
    fast = load_run_data(run)
    got = labels.parse_policy(policy).label(fast)
    slow = load_run_data(run)
    slow.counters = slow.counters
    want = labels.parse_policy(policy).label(slow)
    assert got.equals(want)
    assert (got.dtypes == want.dtypes).all()


def test_seqs_not_rising_fall_back_to_the_frame(run):
    data = load_run_data(run)
    sts = data.counter_stretches()
    assert len(sts) > 1
    assert not FrameRows(sts[::-1]).in_series_order   # label_rows then reads the frame
    data.run.stretches = sts[::-1]
    assert isinstance(label_rows(data), ArrayRows)


def test_counters_frame_rows_are_the_stretches_cells(run):
    data = load_run_data(run)
    frame = data.counters
    assert frame["dir"].dtype == "category" and frame.index.equals(pd.RangeIndex(len(frame)))
    o = 0
    for st in data.run.stretches:
        for d in DIRS:
            c = st.counters[d]
            rows = frame.iloc[o:o + st.n * st.t]
            assert (rows["dir"] == d).all()
            assert np.array_equal(rows["module"].to_numpy(), np.repeat(np.asarray(st.modules), st.t))
            assert np.array_equal(rows["seq"].to_numpy(), np.tile(st.seqs, st.n))
            for f in ("tm", "wait", "has_wait", "queued", "has_queue", "errors", "invalid"):
                assert np.array_equal(rows[f].to_numpy(), getattr(c, f).ravel()), f
            o += st.n * st.t
    assert o == len(frame)
    assert [str(t) for t in frame.dtypes] == ["int64", "category", "int64", "float64", "float64", "bool",
                                              "float64", "bool", "float64", "bool"]
