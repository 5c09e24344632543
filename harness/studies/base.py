"""A study kind's lab half (docs/studies.md): everything the lab needs to know about a kind of study,
declared once, so that the runner, the suite and the spec loader ask it instead of asking "is this
streams?". Its analysis half (analysis.studies) is registered under the same name; the run's
manifest records the name (`study`) and is where the two halves meet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.lab.base import Lab
    from harness.yamlload import YamlDoc


@dataclass(frozen=True)
class LabStudy:
    """A study kind as the lab sees it."""

    name: str
    description: str
    # Whether a spec document (a file, or a suite's merged entry) is one of this kind's specs.
    # The registry asks the kinds in its order; the last (network) claims every other document.
    claims: Callable[[YamlDoc], bool]
    # (doc, path, topology, scale, seeds) -> the experiment, validated and planned (its spec model
    # and rules); the experiment has `study` set to this kind's name.
    experiment: Callable[..., Any]
    # The lab that runs it (harness.lab.base.Lab), loaded on call.
    lab: Callable[[], type[Lab]]
    # The fault kinds its specs may name, by name (a class with `info`, rundir.faultkinds).
    fault_kinds: Callable[[], Mapping[str, Any]]
    # What the runner's machine needs (e.g. root), before anything is made: (experiment) -> None.
    check_runner: Callable[[Any], None]
    # Which modules a suite summary's three headline rates are of ("TCP" or "conn").
    scope: str = "TCP"


def experiment_of(loader: Callable[..., Any], name: str, kinds: Callable[[], Mapping[str, Any]]) -> Callable[..., Any]:
    """A loader whose experiments carry the study kind's name and name only the fault kinds it allows
    (after the kinds' own checks, which say more, e.g. that a delay needs a service workload)."""

    def load(doc, path: Path, topology=None, scale: int = 1, seeds: tuple[int, ...] = ()):
        exp = loader(doc, path, topology, scale, seeds)
        allowed = kinds()
        for i, f in enumerate(exp.spec.faults):
            if f.kind not in allowed:
                raise doc.error(("faults", i, "kind"), f"a {name} study's fault kinds: {', '.join(allowed)}")
        exp.study = name
        return exp

    return load
