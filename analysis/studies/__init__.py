"""The study kinds' analysis halves, by name (docs/studies.md): what a view shows of a run depends on
the kind of system it studied, and every view asks the run's Study (analysis.studies.base) instead of
asking which kind it is. The name comes from the run's manifest (`study`; older runs: derived once,
in rundir.manifest.study_of); the lab half of the same name is harness.studies'.

    base.py      Study, the interface
    network.py   NeST on a host's network stack (thesis Table 3.3 and the seeds' tables)
    service.py   NeST on a multi-tier service's hosts (no seed tables; per-tier latency and paths first)
    streams.py   StreamsDiagnoser on a stream processing job (thesis Table 4.3, no network health)
    fabric.py    which link? 007 and NetBouncer per link on a fat-tree, NeST on every host beside

STUDIES maps a name to a loader of its Study, one line per kind. Runs of several kinds viewed
together get the network study's view (the house's general one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from analysis.studies.base import Study
from rundir.errors import named
from rundir.layout import RunDir
from rundir.manifest import read_manifest_quietly, study_of


def _network() -> Study:
    from analysis.studies.network import STUDY

    return STUDY


def _streams() -> Study:
    from analysis.studies.streams import STUDY

    return STUDY


def _service() -> Study:
    from analysis.studies.service import STUDY

    return STUDY


def _fabric() -> Study:
    from analysis.studies.fabric import STUDY

    return STUDY


STUDIES: dict[str, Callable[[], Study]] = {
    "network": _network,
    "streams": _streams,
    "service": _service,
    "fabric": _fabric,
}
GENERAL = "network"   # the view of runs of several kinds, or of none known


def study(name: str | None) -> Study:
    """The study kind `name` (None: the general one); UserError naming the known ones otherwise."""
    return named(STUDIES, name or GENERAL, "study kind")()


def name_of_data(data) -> str:
    """A loaded run's study kind (analysis.load.RunData): its manifest's; without a manifest (a frame
    built by hand), streams when every module is a stream connection."""
    m = getattr(getattr(data, "info", None), "manifest", None)
    if m is not None:
        return study_of(m) or GENERAL
    mods = getattr(data, "modules", None)
    if mods is not None and len(mods) and set(mods["kind"]) == {"sconn"}:
        return "streams"
    return GENERAL


def name_of_run(run: str | Path) -> str | None:
    """A stored run's study kind, from its manifest (None: it has no readable one)."""
    path = Path(run)
    return study_of(read_manifest_quietly(RunDir(path.parent if path.is_file() else path).manifest_path))


def of_data(data) -> Study:
    return study(name_of_data(data))


def common(names: Iterable[str | None]) -> Study:
    """The study of runs of these kinds: theirs when they share one, else the general one."""
    kinds = {n or GENERAL for n in names}
    return study(kinds.pop() if len(kinds) == 1 else GENERAL)


def of_runs(runs: Iterable[str | Path]) -> Study:
    """The study of stored runs (none: the general one)."""
    return common(name_of_run(r) for r in runs)


def of_evaluation(ev) -> Study:
    """An evaluation's study: from its runs' loaded data where it was kept, else from their manifests;
    runs with neither (counts made by hand): streams when every module counted is a stream connection."""
    names = [name_of_data(ev.data[p]) if p in ev.data else name_of_run(p) for p in ev.runs]
    if all(n is None for n in names) and len(ev.counts) and set(ev.counts["kind"].astype(str)) == {"sconn"}:
        names = ["streams"]
    return common(names)


__all__ = ["GENERAL", "STUDIES", "Study", "common", "name_of_data", "name_of_run", "of_data", "of_evaluation",
           "of_runs", "study"]
