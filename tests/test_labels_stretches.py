"""analysis.labels reads a run's counters from its stretches' arrays (no long counters frame) and gets
what the frame gives: the same per-row arrays, the same series, the same labels."""

from __future__ import annotations

import numpy as np
import pytest

from analysis import labels
from analysis.load import load_run_data
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
