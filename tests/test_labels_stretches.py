"""analysis.labels reads a run's counters from its stretches' arrays (no long counters frame) and gets
what the frame gives: the same per-row arrays, the same series, the same labels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import labels
from analysis.load import load_run_data
from analysis.stretches import DIRS
from tests.support.synthetic import synthetic_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return synthetic_run(tmp_path_factory.mktemp("labels") / "run", seconds=60, apps=2, conns=3, churn_s=10)


def test_the_stretches_give_the_frames_rows_and_series(run):
    fast = load_run_data(run)
    assert fast.counter_stretches()
    a = labels._Frame.of(fast)
    assert fast._counters is None   # the long frame was not made
    slow = load_run_data(run)
    slow.counters = slow.counters   # made: the frame is what counts
    assert slow.counter_stretches() is None
    b = labels._Frame.of(slow)
    for k in ("module", "out", "t_start", "t_end", "idle", "idle_progress", "invalid"):
        x, y = getattr(a, k), getattr(b, k)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), k
    assert list(a.series) == list(b.series)
    for k, rows in b.series.items():
        assert np.array_equal(a.series[k], rows), k
    assert a.index.equals(b.index)


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
    assert labels._Frame._of_stretches(data, sts[::-1]) is None


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
