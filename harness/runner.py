"""Control: run one experiment spec, repetition by repetition, into results/<exp>/<run>/.

The run loop is the same for every lab kind (harness.lab: the network, a stream engine): it makes
the run directory and run.db, writes the manifest's first and last versions, sets t0, keeps the
run's time (when its duration is over, when each planned fault is due to go in and out), shows
progress (with the live diagnosis under it when the layer above gives one), records the events and
faults rows, and tears down on every exit path (normal end, error, Ctrl-C, SIGTERM) with those
signals held; the manifest ends `complete`, `interrupted` or `failed` with the reason, and run.db
keeps what was recorded. What is built, started, recorded, injected and torn down is the lab's
(harness.lab.base.Lab), the one its study kind names (harness.studies), whose name the manifest records.
"""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path

from rich.console import Console
from rich.text import Text

from harness.clean import refuse_on_leftovers
from harness.lab.base import FaultSkipped, Injection, Lab, Progress
from harness.ledger import Ledger, signals_held
from harness.lock import machine_lock
from harness.observers import NONE, LiveLine, Observers
from harness.outline import Interrupted, RecordingStopped, guarded_run  # noqa: F401 - used by tests and the suite
from harness.studies import check_runner, lab_study, load_spec
from rundir.db import FORMAT_VERSION, monotonic
from rundir.layout import RunDir
from rundir.recorder import RunRecorder

LIVE_S = 1.0               # how often the progress view's live diagnosis is refreshed
PRINT_S = 10.0             # how often progress is printed when it is not a live status line
# The manifest's first write, in this order (keys a lab adds that are not here come before start_wall).
START_ORDER = ("format_version", "run_id", "experiment", "study", "spec_file", "spec", "topology", "backend", "repetition",
               "seed", "spec_digest", "suite", "monitor", "congestion_control", "snapshot_interval",
               "planned_faults", "clock", "fault_kinds")

console = Console(stderr=True, highlight=False, soft_wrap=True)


class Repetition:
    """One repetition of an experiment, on the lab kind that runs it."""

    def __init__(self, exp, repetition: int, results_root: Path, suite: str | None = None,
                 status_prefix=None, observers: Observers = NONE):
        self.exp, self.rep = exp, repetition
        self.suite = suite
        self.observers = observers
        # A suite's part of the progress line (runs done, ETA), called with the run's time.
        self.status_prefix = status_prefix
        self.spec = exp.spec
        self.plan = exp.plan(repetition)
        self.rd = RunDir.create(results_root, self.spec.name, repetition)
        # The ledger, rule tags and scratch directories are named by it: unique across experiments too.
        self.run_id = f"{self.spec.name}-{self.rd.path.name}"
        self.record = RunRecorder.create(self.rd.db)   # the loop's and the lab's rows of run.db
        self.progress = Progress()
        self.ledger: Ledger | None = None
        self.active: list[Injection] = []
        self.t0: float | None = None
        self.fault_ids = 0   # faults.id, assigned here so a rule's tag is known before its row is written
        self.lab: Lab = lab_study(exp.study).lab()(self)

    def now(self) -> float:
        return self.lab.now()

    def event(self, kind: str, detail: str = "", workload: int | None = None) -> None:
        self.record.event(self.now(), kind, workload, detail)
        if kind == "warning":
            self.progress.warnings.append(detail)

    def say(self, message: str) -> None:
        """A line about this run's progress (a step of its setup)."""
        console.print(Text.assemble((self.spec.name, "bold"), f" r{self.rep}: {message}"))

    # -- the run -------------------------------------------------------------------------------
    def execute(self) -> int:
        exp, rep = self.exp, self.rep
        first = dict(format_version=FORMAT_VERSION, run_id=self.run_id, experiment=self.spec.name, study=exp.study,
                     spec_file=str(exp.path), repetition=rep, seed=exp.seed_for(rep), spec_digest=exp.digest(rep),
                     **({"suite": self.suite} if self.suite else {}), snapshot_interval=self.spec.snapshot_interval,
                     planned_faults=[w.__dict__ for w in self.plan], **self.lab.manifest_start())
        order = {k: i for i, k in enumerate(START_ORDER)}
        first = dict(sorted(first.items(), key=lambda kv: order.get(kv[0], len(order))))
        self.rd.update_manifest(**first, start_wall=time.time(), start_mono=monotonic(), status="running")

        def teardown(status: str, reason: str | None) -> None:
            self._teardown_safely()
            self._finish(status, reason)

        return guarded_run(lambda: (self._setup(), self._main_loop()), teardown, self.rd.logs)

    def _setup(self) -> None:
        self.ledger = Ledger(self.run_id, self.rd.path)
        self.lab.setup()

    def _main_loop(self) -> None:
        self.t0 = self.now()
        self.lab.begin(self.t0)
        self.event("run_start", f"t0 = {self.t0:.6f}")
        self.rd.update_manifest(status="running", t0=self.t0)
        diagnosis = None
        if self.observers.live is not None and self.lab.live_db():
            diagnosis = self.observers.live(self.rd.path, lambda message: self.event("warning", message))
        try:
            self._loop(diagnosis)
        finally:
            if diagnosis is not None:
                diagnosis.close()
        for injection in list(self.active):   # as in the loop: the fault out and its end stamped together
            with signals_held():
                self._heal(injection)
        self.lab.ending()
        self.event("run_end", f"t = {self.now() - self.t0:.3f}")

    def _loop(self, diagnosis: LiveLine | None) -> None:
        """Until the run's duration is over: what the lab has due, faults in and out when due, and
        progress (with the live line, if any, under it)."""
        lab, spec = self.lab, self.spec
        pending = list(self.plan)
        live = lab.spinner and console.is_terminal
        last_print = next_diagnosis = -1e9
        last_snaps, last_new = -1, self.now()
        with console.status("", spinner="dots") if live else contextlib.nullcontext() as status:
            while True:
                now = self.now()
                t = now - self.t0
                if t >= spec.duration:
                    break
                snaps = lab.snapshots()
                if snaps != last_snaps:
                    last_snaps, last_new = snaps, now
                lab.check(t, snaps, now - last_new)
                lab.tick(now)
                # A signal waits until a fault is fully in or out, so that its rule or pause and its
                # row always go together (teardown then removes what is recorded).
                for injection in [a for a in self.active if now >= a.end_due]:
                    with signals_held():
                        self._heal(injection)
                while pending and t >= pending[0].start:
                    with signals_held():
                        self._inject(pending.pop(0))
                if diagnosis is not None and now >= next_diagnosis:
                    diagnosis.refresh()
                    next_diagnosis = now + LIVE_S
                line = self._progress_line(t, snaps)
                second = diagnosis.line(console.width if live else 160) if diagnosis is not None else ""
                if live:
                    status.update(Text(line + "\n" + second) if second else Text(line))
                elif now - last_print >= PRINT_S:
                    console.print(line, soft_wrap=True, markup=False)
                    if second:
                        console.print(second, soft_wrap=True, markup=False)
                    last_print = now
                time.sleep(lab.tick_s)

    def _progress_line(self, t: float, snaps: int) -> str:
        prefix = self.status_prefix(t) if self.status_prefix else ""
        return f"{prefix}{self.spec.name} r{self.rep}: {self.lab.progress_line(t, snaps, self.active)}"

    # -- faults --------------------------------------------------------------------------------
    def _inject(self, w) -> None:
        try:
            injection = self.lab.inject(w, self.fault_ids + 1)
        except FaultSkipped as e:
            self.progress.skipped += 1
            self.event("warning", str(e), e.workload)
            return
        for _ in injection.rows:   # written after the fault is in force, so the injection never waits for the database
            self.fault_ids += 1
            injection.ids.append(self.fault_ids)
        self.record.faults_started((fid, w.spec_index, r.kind, r.at_node, r.target, r.planned_start, w.duration,
                                    r.start, r.rule) for fid, r in zip(injection.ids, injection.rows, strict=True))
        self.lab.injected(injection)
        self.progress.injected += 1
        self.active.append(injection)

    def _heal(self, injection: Injection) -> None:
        ends = self.lab.heal(injection)
        self.active.remove(injection)
        for fid, end in zip(injection.ids, ends, strict=True):
            self.record.fault_ended(fid, end)
        self.record.commit()

    # -- teardown ------------------------------------------------------------------------------
    def _teardown_safely(self) -> None:
        """Take the faults in force out, then the lab's steps, in order, each on its own. A second
        Ctrl-C or SIGTERM is ignored (guarded_run restores the handlers afterwards) so that teardown
        always finishes."""
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda *_: console.print("cleaning up, please wait", style="yellow", markup=False))
        for injection in list(self.active):   # a stopped run: no fault stays in force
            ids = ", ".join(map(str, injection.ids))
            failed = self._step(f"end fault {ids}", lambda i=injection: self._heal(i)) is not None
            if failed and injection in self.active:   # _heal may have failed after taking it off the list
                self.active.remove(injection)
        for what, step in self.lab.teardown_steps():
            self._step(what, step)
        if self.ledger:
            if not self.lab.leftovers():
                self.ledger.close()
            if self.ledger.path.exists():
                console.print(Text.assemble(("warning: ", "yellow"), f"parts of this run are still in place (see "
                                            f"{self.ledger.path}); run `nestlab cleanup` (for testbed nodes: "
                                            "when they are reachable)"))

    def _step(self, what: str, step) -> Exception | None:
        """One step of teardown: an error is a warning (printed and recorded), and the next step still runs."""
        try:
            step()
        except Exception as e:  # noqa: BLE001 - keep going: every later step still matters
            msg = f"teardown: {what}: {type(e).__name__}: {e}"
            console.print(Text.assemble(("warning: ", "yellow"), msg))   # a node's error text is not markup
            try:
                self.event("warning", msg)
            except Exception:  # noqa: BLE001
                pass
            return e
        return None

    def _finish(self, status: str, reason: str | None) -> None:
        counts = self.record.counts()
        self.record.close()  # commits the rows written since the last commit (process ends, events)
        self.rd.update_manifest(status=status, reason=reason, end_wall=time.time(), end_mono=self.now(),
                                counts=counts, warnings=self.progress.warnings)
        self.lab.finished(self.rd.path)
        colour = {"complete": "green", "interrupted": "yellow", "failed": "red"}[status]
        console.print(Text.assemble((status, colour), f"{': ' + reason if reason else ''} -> {self.rd.path}"))
        console.print(f"  {self.lab.summary(counts)}", markup=False)


def run_experiment(spec_path: str | Path, results_root: str | Path = "results",
                   topology: str | Path | None = None, observers: Observers = NONE) -> tuple[int, list[Path]]:
    exp = load_spec(spec_path, topology)  # spec mistakes are reported before anything needs root
    check_runner(exp)   # e.g. root for Mininet, before a run directory is made
    runs: list[Path] = []
    code = 0
    with machine_lock(str(spec_path)):
        refuse_on_leftovers()
        for rep in range(exp.spec.repetitions):
            run = Repetition(exp, rep, Path(results_root), observers=observers)
            runs.append(run.rd.path)
            code = run.execute()
            if code != 0:
                break
    return code, runs


def run_spec_file(spec_path: str, results_root: str = "results", topology: str | None = None,
                  observers: Observers = NONE) -> int:
    """Run a spec's repetitions; then, if the last one recorded snapshots, report every run."""
    code, runs = run_experiment(spec_path, results_root, topology, observers)
    if observers.report is not None and runs and RunDir.open(runs[-1]).manifest.get("counts", {}).get("snapshots"):
        for run in runs:
            observers.report(run, False)
    return code
