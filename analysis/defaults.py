"""The variants a view uses when none is named: those of the system under test (DESIGN.md: a host's
network stack, or a stream processing job). A streams run (backend `flink`, docs/streams.md) is
scored by StreamsDiagnoser, never by the network rule systems (flowdiagnoser:theta=2, nest-cf read
TCP counters a stream connection does not have); a network run by NeST (Θ = 2), as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from analysis.variants import DEFAULT_VARIANT
from rundir.layout import RunDir
from rundir.manifest import read_manifest_quietly

# The one variant of a table, a comparison's baseline, a run's figures and `nestlab top`.
STREAMS_VARIANT = "streamsdiagnoser"
# A streams run's report and end-of-run summary: the thesis's StreamsDiagnoser, the lab's engine=on
# beside it (issue 34) and the engine's own reading (flink-backpressure).
STREAMS_VARIANTS = ("streamsdiagnoser", "streamsdiagnoser:engine=on", "flink-backpressure")


def is_streams_run(run: str | Path) -> bool:
    """The run's manifest says it ran on a stream engine (backend `flink`)."""
    path = Path(run)
    m = read_manifest_quietly(RunDir(path.parent if path.is_file() else path).manifest_path)
    return m is not None and m.backend == "flink"


def all_streams(runs: Iterable[str | Path]) -> bool:
    """Every run is a streams run (and there is at least one)."""
    runs = list(runs)
    return bool(runs) and all(is_streams_run(r) for r in runs)


def default_variant(runs: Iterable[str | Path]) -> str:
    """The one variant for these runs when none is named."""
    return STREAMS_VARIANT if all_streams(runs) else DEFAULT_VARIANT
