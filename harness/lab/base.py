"""What a lab kind gives the run loop (harness.runner.Repetition), and what the loop gives it.

The loop owns a run's outline: the run directory and run.db, timing (t0, the duration, when a fault
is due), signals, progress, the events and faults rows, the manifest's first and last writes, and
teardown on every exit path. A lab kind owns its system under test: what it builds and starts, its
collector and when the recording has stopped, how a fault goes in and out, what it adds to the
manifest, and how it is torn down. Like Jepsen's split of control, nemesis and checker: the loop
never looks inside a lab, a lab never decides when anything happens.

A new lab is a subclass of Lab in a module of its own, named by its study kind (harness.studies).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness.window import Window

if TYPE_CHECKING:
    from harness.ledger import Ledger
    from rundir.layout import RunDir
    from rundir.recorder import RunRecorder


class FaultSkipped(Exception):  # noqa: N818 - an outcome, not an error: the loop counts it and goes on
    """A fault that found nothing to act on (e.g. its workload's connection is gone): the loop
    records the message as a warning (of `workload`, when it names one) and counts it as skipped."""

    def __init__(self, message: str, workload: int | None = None):
        super().__init__(message)
        self.workload = workload


@dataclass
class FaultRow:
    """One faults row of an injected fault (a fault acts on one or several parts: rules, processes,
    connections); `handle` is the lab's own, for healing it."""

    kind: str
    at_node: str | None
    target: str               # JSON: what it acts on
    planned_start: float
    start: float              # when it took effect, on the reference clock
    rule: str                 # the exact rule, signal or setting used
    handle: Any = None


@dataclass
class Injection:
    """A fault in force: its window, its rows (ids given by the loop, in order) and when it is due
    to end on the lab's clock (Lab.now)."""

    window: Window
    rows: list[FaultRow]
    end_due: float
    ids: list[int] = field(default_factory=list)


@dataclass
class Progress:
    injected: int = 0
    skipped: int = 0
    warnings: list[str] = field(default_factory=list)


class Run(Protocol):
    """What a lab reads of the run it is part of (harness.runner.Repetition)."""

    exp: Any
    rep: int
    spec: Any
    plan: list[Window]
    rd: RunDir
    record: RunRecorder
    run_id: str
    ledger: Ledger | None
    progress: Progress
    t0: float | None

    def event(self, kind: str, detail: str = "", workload: int | None = None) -> None: ...

    def say(self, message: str) -> None: ...


class Lab:
    """A kind of lab: the network (harness.lab.network), a stream engine (harness.streams.lab).

    The loop calls, in order: manifest_start; setup (the ledger exists); begin(t0); then every tick
    snapshots, check, tick, heal, inject and injected as faults come due, progress_line; ending; and, on every
    exit path, teardown_steps (each step on its own: one failing is a warning), leftovers, finished
    and summary."""

    tick_s: float = 0.02          # the loop's tick
    spinner: bool = True          # progress as a live status line on a terminal (else a line every 10 s)

    def __init__(self, run: Run):
        self.run = run
        self.spec = run.spec

    # -- the start -----------------------------------------------------------------------------
    def manifest_start(self) -> dict:
        """What the manifest's first write says about this lab (spec, topology, backend, clock, ...)."""
        raise NotImplementedError

    def setup(self) -> None:
        """Build and start everything, the collector last; return once it recorded a snapshot."""
        raise NotImplementedError

    def now(self) -> float:
        """The run's reference clock (the clock every recorded time is on)."""
        raise NotImplementedError

    def begin(self, t0: float) -> None:
        """The run's time starts now (t0, on the reference clock)."""

    def live_db(self) -> bool:
        """Whether the progress view's live diagnosis can read the run's run.db as it is written."""
        return False

    # -- every tick ----------------------------------------------------------------------------
    def snapshots(self) -> int:
        """Snapshots recorded so far."""
        raise NotImplementedError

    def check(self, t: float, snaps: int, quiet_s: float) -> None:
        """Raise (harness.outline.RecordingStopped, or any error) when the recording stopped (no new
        snapshot for `quiet_s` seconds) or the system under test failed."""

    def tick(self, now: float) -> None:
        """What is due besides faults (workloads to start, samples to take)."""

    def inject(self, w: Window, first_id: int) -> Injection:
        """Put fault window `w` in force; its rows will get ids first_id, first_id + 1, ... Raises
        FaultSkipped when it finds nothing to act on."""
        raise NotImplementedError

    def injected(self, injection: Injection) -> None:
        """Its rows are written (with their ids)."""

    def heal(self, injection: Injection) -> list[float]:
        """Take a fault out: the end time of each of its rows."""
        raise NotImplementedError

    def progress_line(self, t: float, snaps: int, active: list[Injection]) -> str:
        """The progress line after `<experiment> r<repetition>: `."""
        raise NotImplementedError

    def ending(self) -> None:
        """The run's time is over and its faults are out; the last samples."""

    # -- the end -------------------------------------------------------------------------------
    def teardown_steps(self) -> list[tuple[str, Callable[[], object]]]:
        """(what, step) in the order they run, after the faults in force are taken out."""
        return []

    def leftovers(self) -> bool:
        """Something this lab made may still be there after teardown: the ledger stays for
        `nestlab cleanup`."""
        return False

    def finished(self, path: Path) -> None:
        """After the manifest's last write (e.g. derived copies for the analysis)."""

    def summary(self, counts: dict[str, int]) -> str:
        """The line under the run's status: what it did and recorded."""
        raise NotImplementedError
