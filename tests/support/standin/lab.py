"""The stand-in study's lab half: a spec with `standin:` is its; its lab pokes a box twice a run."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.lab.base import FaultRow, Injection, Lab
from harness.studies.base import LabStudy
from harness.window import Window


@dataclass
class Spec:
    name: str = "standin"
    duration: float = 0.6
    snapshot_interval: float = 0.1
    repetitions: int = 1
    faults: list = field(default_factory=list)


@dataclass
class Experiment:
    spec: Spec
    path: Path
    study: str = "standin"

    def plan(self, repetition: int) -> list[Window]:
        return [Window(0, 0.1, 0.2)]

    def seed_for(self, repetition: int) -> int:
        return repetition

    def digest(self, repetition: int) -> str:
        return "standin"


class StandinLab(Lab):
    def manifest_start(self) -> dict:
        return {"backend": "standin", "clock": "this machine's CLOCK_MONOTONIC"}

    def setup(self) -> None:
        pass

    def now(self) -> float:
        return time.monotonic()

    def snapshots(self) -> int:
        return int((self.now() - self.run.t0) / self.spec.snapshot_interval)

    def inject(self, w: Window, first_id: int) -> Injection:
        now = self.now()
        return Injection(w, [FaultRow("poke", "box", "{}", w.start, now, "poke")], now + w.duration)

    def heal(self, injection: Injection) -> list[float]:
        return [self.now()]

    def progress_line(self, t: float, snaps: int, active: list[Injection]) -> str:
        return f"standin t={t:.1f}"

    def summary(self, counts: dict[str, int]) -> str:
        return f"pokes {counts['faults']}"


def _experiment(doc, path, topology, scale, seeds):
    return Experiment(Spec(name=str(doc.data["standin"])), Path(path))


STUDY = LabStudy(
    name="standin",
    description="a stand-in study: a box poked twice",
    claims=lambda doc: isinstance(doc.data, dict) and "standin" in doc.data,
    experiment=_experiment,
    lab=lambda: StandinLab,
    fault_kinds=dict,
    check_runner=lambda exp: None,
    scope="all",
)
