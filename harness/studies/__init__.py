"""The study kinds, by name (docs/studies.md): what kind of system a run studies, and everything the
lab needs to know about it (harness.studies.base.LabStudy: its spec model and rules, lab, fault
kinds, what the runner's machine needs). The runner, the suite and the spec loader dispatch once from
here; the run's manifest records the kind's name (`study`), which the analysis' registry of the same
names (analysis.studies) reads.

    base.py      LabStudy, the interface
    network.py   a host's network stack (wget, iperf), the network fault kinds
    service.py   a multi-tier service on the network lab, the tiers' fault kinds
    fabric.py    a fat-tree fabric with a mesh workload on the network lab, link faults (which link?)
    streams.py   a stream processing job on Flink, throttles and droppers

STUDIES maps a name to a loader of its LabStudy, one line per kind, in the order their specs are
recognised (network last: it claims every other document); looked up with rundir.errors.named like
every registry of the project. Adding a study kind: a LabStudy in a module of its own, its line here,
and its analysis half's line in analysis.studies.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.studies.base import LabStudy
from harness.yamlload import YamlDoc
from rundir.errors import named


def _streams() -> LabStudy:
    from harness.studies.streams import STUDY

    return STUDY


def _service() -> LabStudy:
    from harness.studies.service import STUDY

    return STUDY


def _fabric() -> LabStudy:
    from harness.studies.fabric import STUDY

    return STUDY


def _network() -> LabStudy:
    from harness.studies.network import STUDY

    return STUDY


STUDIES: dict[str, Callable[[], LabStudy]] = {
    "streams": _streams,
    "service": _service,
    "fabric": _fabric,
    "network": _network,
}


def lab_study(name: str) -> LabStudy:
    """The study kind `name` (UserError naming the known ones otherwise)."""
    return named(STUDIES, name, "study kind")()


def study_of_doc(doc: YamlDoc) -> LabStudy:
    """The study kind whose spec this document is: the first in STUDIES that claims it."""
    for loader in STUDIES.values():
        study = loader()
        if study.claims(doc):
            return study
    raise doc.error((), f"no study kind claims this spec (known: {', '.join(STUDIES)})")


def experiment_from(doc: YamlDoc, path: Path, topology: Path | str | None = None, scale: int = 1,
                    seeds: tuple[int, ...] = ()):
    """An experiment from a parsed document (a spec file or a suite's merged entry), by its study kind:
    validated, scaled, resolved against its topology or graph (relative to `path`) and planned."""
    return study_of_doc(doc).experiment(doc, path, topology, scale, seeds)


def load_spec(path: Path | str, topology: Path | str | None = None):
    """Load and check a spec of any study kind. `topology` overrides a network spec's topology file
    (`run-experiment SPEC --topology FILE`)."""
    path = Path(path)
    return experiment_from(YamlDoc(path), path, topology)


def check_runner(exp) -> None:
    """What the experiment's study kind needs of the runner's machine (e.g. root), before anything is made."""
    lab_study(exp.study).check_runner(exp)


__all__ = ["STUDIES", "LabStudy", "check_runner", "experiment_from", "lab_study", "load_spec", "study_of_doc"]
