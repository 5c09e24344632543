"""Testing a plug-in against the lab's own small hand-made runs (docs/plugins.md), from the plug-in's
test suite:

    from nestlab.testing import check_variant

    def test_my_rule(tmp_path):
        table = check_variant("myrule", tmp_path)      # a name, a "name:key=value" spec or a Variant
        assert table["TP"].sum() > 0

The runs (small_runs): `network`, a wget download and an iperf upload on one interface with a
connection fault (tcp_drop) and an interface fault (ip_drop), 50 snapshots of 100 ms; `streams`, a
four-operator Flink chain whose throttle stops reading for five snapshots. Their builders are public too:
RunBuilder and make_run (rundir.handmade), StreamsRun, Graph and chain (rundir.handmade_streams).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rundir.handmade import IPERF_UP, WGET, RunBuilder, make_run
from rundir.handmade_streams import Graph, StreamsRun, chain

__all__ = ["IPERF_UP", "WGET", "Graph", "RunBuilder", "StreamsRun", "chain", "check_variant", "make_run",
           "small_runs"]


def small_runs(directory: str | Path) -> dict[str, Path]:
    """The lab's small hand-made runs, written under `directory`: {"network": ..., "streams": ...}."""
    directory = Path(directory)
    network, _, _ = make_run(directory / "network")
    g = chain(("src", "beacon"), ("a", "pass"), ("t", "throttle"), ("snk", "sink"))
    r = StreamsRun(g, experiment="handmade-streams")
    flow = {c: (10, 10) for c in g.conns}
    into_t = g.into("t")[0]
    r.step(flow, 3).step({"src:out0>a:in0": (10, 10), into_t: (0, 10)}, 5).step(flow, 3)
    r.fault("throttle", "t", start=3.0, end=8.0, rate=0)
    return {"network": network, "streams": r.write(directory / "streams")}


def check_variant(variant, directory: str | Path, policy: str | None = None) -> pd.DataFrame:
    """Diagnose and score the small runs with one variant, through the lab's own path (contract
    checks included: a broken result raises rundir.errors.UserError naming the variant). Returns the
    accuracy table, a block of rows per run (column `run`) as `nestlab accuracy` writes per_run.csv."""
    from nestlab import api

    runs = [api.open_run(p) for p in small_runs(directory).values()]
    for run in runs:
        frame = run.diagnose(variant)
        # Raised, not asserted: a plug-in author's test must fail under `python -O` too.
        if not len(frame):
            raise AssertionError(f"{run.name}: {variant}: no diagnosis")
        if frame["positive"].dtype != bool:
            raise AssertionError(f"{run.name}: {variant}: `positive` is {frame['positive'].dtype}, not bool")
    return api.accuracy_of(runs, variant, policy, per_run=True)
