"""analysis.health on arrays: its silences the same counts as the frame version they replace (copies of
the frame, sorted), on a synthetic run with random quiet time; and every figure the same whether it
reads the stretches' arrays (the frame not made) or the long frame."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import health
from analysis.load import load_run_data
from tests.support.damaged import synthetic_base
from tests.support.synthetic import synthetic_run


def frame_silences(data, quiet: pd.Series) -> dict[str, tuple[int, int]]:
    """Per direction: (busy, silent) TCP module-snapshots in quiet time."""
    c = data.counters
    tcp_ids = data.modules.index[data.modules["kind"] == "tcp"]
    c = c[c["module"].isin(tcp_ids)]
    out = {}
    for d in ("out", "in"):
        s = c[(c["dir"] == d)].sort_values(["module", "seq"], kind="stable")
        mod = s["module"].to_numpy(np.int64)
        tm = s["tm"].to_numpy(float)
        first = np.ones(len(s), dtype=bool)
        first[1:] = mod[1:] != mod[:-1]
        if d == "out":
            prev_q = np.roll(s["queued"].to_numpy(float) * s["has_queue"].to_numpy(bool), 1)
            busy = ~first & (prev_q > 0)
        else:
            moved = (tm > 0).astype(np.int64)
            group = np.cumsum(first)
            before = pd.Series(moved).groupby(group).cumsum().to_numpy() - moved
            after = pd.Series(moved[::-1]).groupby(group[::-1]).cumsum().to_numpy()[::-1] - moved
            busy = (before > 0) & (after > 0)
        ok = busy & ~s["invalid"].to_numpy(bool) & quiet.reindex(s["seq"]).fillna(False).to_numpy(bool)
        out[d] = (int(ok.sum()), int((ok & (tm == 0)).sum()))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("health")
    return [load_run_data(synthetic_run(base / "syn", seconds=40, apps=2, conns=3, churn_s=8)),
            load_run_data(synthetic_base(base / "small"))]


def tcp_ids(data) -> np.ndarray:
    return data.modules.index[data.modules["kind"] == "tcp"].to_numpy(np.int64)


@pytest.mark.parametrize("seed", range(4))
def test_silences_as_the_frame_version(tmp_path, seed):
    rng = np.random.default_rng(seed)
    for data in (load_run_data(synthetic_run(tmp_path / "syn", seconds=40, apps=2, conns=3, churn_s=8)),
                 load_run_data(synthetic_base(tmp_path / "small"))):
        quiet = pd.Series(rng.random(len(data.snapshots)) < 0.7, index=data.snapshots.index)
        assert data.counter_stretches() is not None   # the frame is not made: the stretches' arrays
        from_arrays = health._silences(health._tcp_series(data, tcp_ids(data)), quiet)
        assert from_arrays == frame_silences(data, quiet)
        assert data.counter_stretches() is None       # now it is: the frame's columns
        assert health._silences(health._tcp_series(data, tcp_ids(data)), quiet) == from_arrays
        assert sum(busy for busy, _ in from_arrays.values()) > 0


def test_health_from_arrays_as_from_the_frame(runs):
    for data in runs:
        data.counters = None   # back to the stretches' arrays
        assert data.counter_stretches() is not None
        series = health._tcp_series(data, tcp_ids(data))
        got = health.network_health(data).as_dict(), health.receivers(data, tcp_ids(data), series)
        assert data.counter_stretches() is not None   # health did not make the frame
        data.counters.head()                            # made: the frame's path
        assert data.counter_stretches() is None
        assert (health.network_health(data).as_dict(), health.receivers(data, tcp_ids(data))) == got
