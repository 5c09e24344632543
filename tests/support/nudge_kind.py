"""A fault kind that exists only for the tests (tests/test_fault_kinds.py): everything about it in
this one module, as docs/faults.md ("Adding a fault kind") says, registered into a copy of the
registry and never into harness.faults.KINDS.

nudge: the processes of a workload (instance) slowed by `strength`; the culprit is the application
and its sockets (like app_pause); its windows are drawn in #123456.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from pydantic import Field

from harness.faults.base import FaultEnv, Part, target_json
from harness.faults.spec import FaultSpec, FaultTarget
from harness.window import Window
from rundir.faultkinds import FaultKindInfo

INFO = FaultKindInfo("nudge", colour="#123456", label="nudge (test)", order=-1, children="socket")


class NudgeSpec(FaultSpec):
    target_on_monitor: ClassVar[bool] = True

    target: FaultTarget | None = None
    strength: int | None = Field(default=None, ge=1, le=10, description="nudge: how hard, 1 to 10")

    def check(self) -> None:
        if self.target is None:
            raise ValueError("nudge needs 'target: {workload: N}'")
        if self.strength is None:
            raise ValueError("nudge needs 'strength', 1 to 10")


class Nudge:
    info = INFO
    spec = NudgeSpec

    def __init__(self, env: FaultEnv):
        self.env = env
        self.nudged: list[int] = []

    def setup(self, faults: Sequence[FaultSpec]) -> None:
        pass

    def teardown(self) -> None:
        self.nudged.clear()

    def describe(self, action: int) -> str:
        return f"nudge pid {action}"

    def inject(self, window: Window, first_id: int) -> list[Part]:
        f = self.env.spec.faults[window.spec_index]
        pids = [p.pid for _, p in self.env.workloads.live(f.target.workload)]
        self.nudged += pids
        return [Part(target_json(description=f"nudge pid {pid}", workload=f.target.workload, pid=pid,
                                 module_key=f"app:{pid}"), self.describe(pid), window.start, pid) for pid in pids]

    def heal(self, part: Part) -> float:
        self.nudged.remove(part.action)
        return part.start + 1.0
