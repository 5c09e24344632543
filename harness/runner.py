"""Control: run one experiment spec, repetition by repetition, into results/<exp>/<run>/.

For each repetition: build the topology (Mininet) or verify the testbed nodes (SSH), start servers,
hook the fault chain into the routers, start the collector in the monitored host, start the workloads
(t0), inject the planned faults while the collector records, then tear everything down in reverse
order. Teardown runs on every exit path (normal end, error, Ctrl-C, SIGTERM) with those signals
blocked, and the manifest ends `complete`, `interrupted` or `failed` with the reason; run.db keeps
what was recorded.

Every time recorded is on the monitored host's CLOCK_MONOTONIC (the run's reference clock). On
Mininet every namespace shares the machine's clock; on testbed nodes the backend measures each node's
offset (and the runner's own): the fault kinds (harness/faults/) convert their nodes' stamps of fault
windows with those nodes' offsets, the runner its own stamps (events, process starts) with the
runner's. On a testbed the collector writes its tables into a run.db on the monitored node; teardown
brings that back and merges it into the local run.db, with every node's logs (docs/ssh-backend.md).

The runner asks and does not look inside: the backend (harness/backends/, chosen by the topology's
kind) for the nodes, the clocks, what the manifest records and where the collector writes; the fault
kinds (harness/faults/) for faults; the collector (harness.collector.main.command) for its command
line; the recorder (rundir/recorder.py) for run.db's rows; the store for the run directory.
"""

from __future__ import annotations

import contextlib
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.text import Text

from harness.backends import check_runner, make_backend
from harness.backends.base import Clocks, Proc
from harness.clean import refuse_on_leftovers
from harness.collector.appsockets import warnings_from_log
from harness.collector.main import command as collector_command
from harness.collector.probe import ProbeSettings
from harness.faults import FaultEnv, FaultKind, Faults, NoTarget, Part, kinds_used
from harness.ledger import Ledger, signals_held
from harness.lock import machine_lock
from harness.observers import NONE, LiveLine, Observers
from harness.outline import Interrupted, RecordingStopped, guarded_run  # noqa: F401 - used by tests and the suite
from harness.spec import Experiment, Window, load_spec
from harness.workloads import Workloads
from rundir import __version__
from rundir.db import FORMAT_VERSION, monotonic
from rundir.layout import RunDir
from rundir.recorder import RunRecorder, link_fault_targets

TICK_S = 0.02
LIVE_S = 1.0               # how often the progress view's live diagnosis is refreshed
COLLECTOR_READY_S = 10.0
QUEUE_SAMPLE_S = 1.0       # how often the shaped links' queues are read (network health)
# No new snapshot for this long (and for 50 intervals): the recording stopped. Above the SSH backend's
# progress poll (2 s) with room for a slow poll; a collector that exits is seen at once.
COLLECTOR_STALL_S = 10.0

console = Console(stderr=True, highlight=False, soft_wrap=True)


@dataclass
class ActiveFault:
    """A fault in force: its kind, and one faults row (id) per part it acts on (a rule, or each
    paused process), which the kind heals."""

    window: Window
    end_due: float
    kind: FaultKind
    parts: list[tuple[int, Part]]


@dataclass
class Progress:
    injected: int = 0
    skipped: int = 0
    warnings: list[str] = field(default_factory=list)


class Repetition:
    """One repetition of an experiment."""

    def __init__(self, exp: Experiment, repetition: int, results_root: Path, suite: str | None = None,
                 status_prefix=None, observers: Observers = NONE):
        self.exp, self.rep = exp, repetition
        self.suite = suite
        self.observers = observers
        # A suite's part of the progress line (runs done, ETA), called with the run's time.
        self.status_prefix = status_prefix
        self.spec = exp.spec
        self.plan = exp.plan(repetition)
        self.rng = random.Random(exp.seed_for(repetition))
        self.rd = RunDir.create(results_root, self.spec.name, repetition)
        # The ledger, rule tags and scratch directories are named by it: unique across experiments too.
        self.run_id = f"{self.spec.name}-{self.rd.path.name}"
        self.record = RunRecorder.create(self.rd.db)   # the runner's rows of run.db
        self.db = self.record.db                        # its connection, for what takes one (target links)
        self.progress = Progress()
        self.backend = None
        self.ledger: Ledger | None = None
        self.workloads: Workloads | None = None
        self.collector: Proc | None = None
        self.faults: Faults | None = None
        self.active: list[ActiveFault] = []
        self.t0: float | None = None
        self.shm_dir: str | None = None
        self.fault_ids = 0   # faults.id, assigned here so a rule's tag is known before its row is written
        self.clocks: Clocks | None = None
        self.collector_db: str | None = None    # where the collector writes (the run's own run.db, or a node's)

    def now(self) -> float:
        """The reference clock (the monitored host's CLOCK_MONOTONIC), read through the runner's."""
        return self.runner_time(monotonic())

    def runner_time(self, t: float) -> float:
        return self.clocks.from_runner(t) if self.clocks else t

    # -- recording helpers ---------------------------------------------------------------------
    def event(self, kind: str, detail: str = "", workload: int | None = None) -> None:
        self.record.event(self.now(), kind, workload, detail)
        if kind == "warning":
            self.progress.warnings.append(detail)

    def _on_process(self, proc: Proc, workload: int | None, role: str, host: str | None) -> None:
        started = self.runner_time(proc.started)
        if role == "ended":
            code = proc.poll()
            self.record.process_ended(proc.pid, started, self.now(), code)
            if workload is not None:
                self.event("workload_end", f"pid {proc.pid} exit {code}", workload)
            return
        self.record.process_started(proc.pid, workload, role, host, " ".join(proc.argv), started)
        if workload is not None:
            self.event("workload_start", f"pid {proc.pid}: {' '.join(proc.argv)}", workload)

    def _manifest(self, status: str, **fields) -> None:
        self.rd.update_manifest(status=status, **fields)

    # -- the run -------------------------------------------------------------------------------
    def execute(self) -> int:
        spec, topo = self.spec, self.exp.topology
        monitor_if = topo.interfaces[spec.monitor][0]
        self.rd.update_manifest(
            format_version=FORMAT_VERSION, run_id=self.run_id, experiment=spec.name,
            spec_file=str(self.exp.path), spec=spec.model_dump(mode="json"),
            topology={"name": topo.name, "file": str(topo.source), "spec": topo.spec.model_dump(mode="json"),
                      "addresses": {n: [i.__dict__ for i in intfs] for n, intfs in topo.interfaces.items()}},
            backend=topo.backend, repetition=self.rep, seed=self.exp.seed_for(self.rep),
            spec_digest=self.exp.digest(self.rep), **({"suite": self.suite} if self.suite else {}),
            monitor={"host": spec.monitor, "address": monitor_if.address, "interface": monitor_if.name},
            congestion_control=spec.congestion_control, snapshot_interval=spec.snapshot_interval,
            planned_faults=[w.__dict__ for w in self.plan], clock="CLOCK_MONOTONIC of the monitored host",
            fault_kinds=kinds_used(spec.faults),
            start_wall=time.time(), start_mono=monotonic(), status="running")
        def teardown(status: str, reason: str | None) -> None:
            self._teardown_safely()
            self._finish(status, reason)

        return guarded_run(lambda: (self._setup(), self._main_loop()), teardown, self.rd.logs)

    def _setup(self) -> None:
        spec, topo = self.spec, self.exp.topology
        self.ledger = Ledger(self.run_id, self.rd.path)
        backend = self.backend = make_backend(topo.backend, topo, self.ledger, spec, self.run_id)
        self._announce("preflight")
        backend.preflight()   # programs, permissions, connections: before anything is made
        self._announce("build")
        backend.build()
        self.clocks = backend.clocks(spec.monitor)
        monitor_if = backend.interfaces(spec.monitor)[0]
        interfaces = {n: [i.__dict__ for i in backend.interfaces(n)] for n in topo.spec.nodes}
        monitor = {"host": spec.monitor, "address": monitor_if.address, "interface": monitor_if.name,
                   **backend.manifest_monitor(spec.monitor)}
        # start_mono was read on the runner's clock (the same clock on Mininet: offset 0).
        self._manifest("running", topology={**self.rd.manifest["topology"], "addresses": interfaces},
                       versions={"nestlab": __version__, **backend.versions()},
                       clock_offsets=self.clocks.as_dict(), monitor=monitor, link_model=backend.link_model,
                       **backend.manifest_extra(), start_mono=self.runner_time(self.rd.manifest["start_mono"]))
        nodes = {n: backend.node(n) for n in topo.spec.nodes}
        addresses = {n: backend.address(n) for n in topo.spec.nodes}
        client_env = {}
        if spec.interceptor:
            self.shm_dir, client_env[spec.monitor] = backend.interceptor(spec.monitor)
        self.workloads = Workloads(spec, nodes, addresses, self.rd.logs, client_env, on_process=self._on_process,
                                   warn=lambda message, workload: self.event("warning", message, workload))
        self.ledger.add_path(self.workloads.www)
        self.workloads.start_servers()
        self.faults = Faults(FaultEnv(spec, backend, self.clocks, self.workloads, self.rng, self.run_id,
                                      self.shm_dir, self.ledger))
        self.faults.setup()   # the kinds' shared state, e.g. the fault chain on each router
        self._start_collector()

    def _announce(self, step: str) -> None:
        message = self.backend.announce(step)
        if message:
            console.print(Text.assemble((self.spec.name, "bold"), f" r{self.rep}: {message}"))

    def _start_collector(self) -> None:
        backend, monitor = self.backend, self.spec.monitor
        node = backend.node(monitor)
        self.collector_db = backend.collector_db(monitor, self.record)
        probe = None if self.spec.probe is None else ProbeSettings(**self.spec.probe.model_dump())
        argv = collector_command(backend.python(monitor), self.collector_db, self.spec.snapshot_interval,
                                 self.shm_dir, backend.ignored_interfaces(monitor), probe)
        with signals_held():
            self.collector = node.start(argv, self.rd.logs / "collector.log")
            self._on_process(self.collector, None, "collector", self.spec.monitor)
        deadline = monotonic() + COLLECTOR_READY_S
        while monotonic() < deadline:
            if backend.snapshots(monitor, self.record) > 0:
                backend.start_progress(monitor)
                return
            if self.collector.poll() is not None:
                break
            time.sleep(0.05)
        log = self.rd.logs / "collector.log"
        try:   # the node's copy of the log (on Mininet the node writes this very file: nothing to copy)
            node.get(node.log_path(log), log)
        except Exception:  # noqa: BLE001 - the error below says what we know
            pass
        text = log.read_text()[-800:] if log.exists() else ""
        raise RuntimeError(f"collector did not record a snapshot: {text.strip()}")

    def _main_loop(self) -> None:
        self.t0 = self.workloads.t0 = self.now()
        self.event("run_start", f"t0 = {self.t0:.6f}")
        self._manifest("running", t0=self.t0)
        diagnosis = None
        if self.observers.live is not None and self._collector_db_is_local():
            diagnosis = self.observers.live(self.rd.path, lambda message: self.event("warning", message))
        try:
            self._loop(diagnosis)
        finally:
            if diagnosis is not None:
                diagnosis.close()
        for af in list(self.active):
            self._end_fault(af)
        self._sample_queues()
        self.event("run_end", f"t = {self.now() - self.t0:.3f}")

    def _loop(self, diagnosis: LiveLine | None) -> None:
        """Until the run's duration is over: start workloads and faults when due, end faults, sample
        the queues, and show progress (with the live line, if any, under it)."""
        spec = self.spec
        pending = list(self.plan)
        live = console.is_terminal
        last_print = next_queue_sample = next_diagnosis = -1e9
        stall_s = max(COLLECTOR_STALL_S, 50 * spec.snapshot_interval)
        last_snaps, last_new = -1, self.now()
        with console.status("", spinner="dots") if live else contextlib.nullcontext() as status:
            while True:
                now = self.now()
                t = now - self.t0
                if t >= spec.duration:
                    break
                snaps = self.backend.progress_snapshots(spec.monitor, self.record)
                if snaps != last_snaps:
                    last_snaps, last_new = snaps, now
                self._check_recording(t, snaps, now - last_new, stall_s)
                self.workloads.start_due(now)
                # A signal waits until a fault is fully in or out, so that its rule or pause and its
                # row always go together (teardown then removes what is recorded).
                for af in [a for a in self.active if now >= a.end_due]:
                    with signals_held():
                        self._end_fault(af)
                while pending and t >= pending[0].start:
                    with signals_held():
                        self._start_fault(pending.pop(0))
                if now >= next_queue_sample:
                    self._sample_queues()
                    next_queue_sample = now + QUEUE_SAMPLE_S
                if diagnosis is not None and now >= next_diagnosis:
                    diagnosis.refresh()
                    next_diagnosis = now + LIVE_S
                line = self._progress_line(t, snaps)
                second = diagnosis.line(console.width if live else 160) if diagnosis is not None else ""
                if live:
                    status.update(Text(line + "\n" + second) if second else Text(line))
                elif now - last_print >= 10:
                    console.print(line, soft_wrap=True, markup=False)
                    if second:
                        console.print(second, soft_wrap=True, markup=False)
                    last_print = now
                time.sleep(TICK_S)

    def _collector_db_is_local(self) -> bool:
        """The collector writes the run's own run.db (Mininet), which the live diagnosis can read."""
        try:
            return self.collector_db is not None and Path(self.collector_db).resolve() == self.rd.db.resolve()
        except OSError:
            return False

    def _sample_queues(self) -> None:
        """The shaped links' queue counters (cumulative drops, sent packets) and backlog."""
        self.record.queue_stats(self.backend.queue_stats(), self.now)

    def _check_recording(self, t: float, snaps: int, quiet_s: float, stall_s: float) -> None:
        """RecordingStopped when the collector exited, or wrote no snapshot for `stall_s`."""
        code = self.collector.poll() if self.collector is not None else None
        if code is not None:
            raise RecordingStopped(f"the collector exited with status {code} at t = {t:.1f} s, after {snaps} "
                                   f"snapshots{self._collector_log_tail()}")
        if quiet_s > stall_s:
            raise RecordingStopped(f"the collector recorded no snapshot for {quiet_s:.1f} s (since t = "
                                   f"{t - quiet_s:.1f} s, after {snaps} snapshots){self._collector_log_tail()}")

    def _collector_log_tail(self) -> str:
        """`: <the last line of the collector's log>`, or nothing (a testbed node's log comes back later)."""
        try:
            lines = (self.rd.logs / "collector.log").read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return f": {lines[-1][:300]}" if lines else ""

    def _progress_line(self, t: float, snaps: int) -> str:
        prefix = self.status_prefix(t) if self.status_prefix else ""
        return (f"{prefix}{self.spec.name} r{self.rep}: {t:5.1f}/{self.spec.duration:g} s  "
                f"faults {self.progress.injected}/{len(self.plan)}  snapshots {snaps}  "
                f"active {','.join(self.spec.faults[a.window.spec_index].kind for a in self.active) or '-'}")

    # -- faults --------------------------------------------------------------------------------
    def _start_fault(self, w: Window) -> None:
        f = self.spec.faults[w.spec_index]
        kind = self.faults.of(w)
        try:   # the first part's id is known before its row is written: a rule's tag carries it
            parts = kind.inject(w, self.fault_ids + 1)
        except NoTarget as e:
            self.progress.skipped += 1
            self.event("warning", f"{f.kind} at {w.start:g}s skipped: {e}", f.target.workload if f.target else None)
            return
        rows = []
        for part in parts:   # written after the fault is in force, so the injection never waits for the database
            self.fault_ids += 1
            rows.append((self.fault_ids, part))
        self.record.faults_started((fid, w.spec_index, f.kind, f.node(self.spec), part.target, w.start,
                                    w.duration, part.start, part.rule) for fid, part in rows)
        self.progress.injected += 1
        self.active.append(ActiveFault(w, parts[-1].start + w.duration, kind, rows))

    def _end_fault(self, af: ActiveFault) -> None:
        self.active.remove(af)
        for fid, part in af.parts:
            try:
                end = af.kind.heal(part)
            except Exception as e:  # noqa: BLE001 - e.g. a paused process that exited meanwhile
                end = self.now()
                self.event("warning", f"fault {fid}: ending it failed ({type(e).__name__}: {e}); end stamped now")
            self.record.fault_ended(fid, end)
        self.record.commit()

    # -- teardown ------------------------------------------------------------------------------
    def _teardown_safely(self) -> None:
        """Undo everything, in reverse order. A second Ctrl-C or SIGTERM is ignored (execute()
        restores the handlers afterwards) so that teardown always finishes."""
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda *_: console.print("cleaning up, please wait", style="yellow", markup=False))
        steps = [
            ("stop progress", lambda: self.backend and self.backend.stop_progress()),
            ("remove fault rules", self._remove_active_faults),
            ("stop workloads", lambda: self.workloads and self.workloads.stop_clients()),
            ("stop collector", self._stop_collector),
            ("stop servers", lambda: self.workloads and self.workloads.stop_servers()),
            ("remove firewall chains", self._remove_chains),
            ("bring back run.db and logs", self._bring_back),
            ("record the interceptor's warnings", self._interceptor_warnings),
            ("resolve fault targets", self._resolve_targets),
            ("tear down topology", lambda: self.backend and self.backend.teardown()),
            ("remove served files", lambda: self.workloads and self.workloads.remove_files()),
        ]
        for what, step in steps:
            try:
                step()
            except Exception as e:  # noqa: BLE001 - keep going: every later step still matters
                msg = f"teardown: {what}: {type(e).__name__}: {e}"
                console.print(Text.assemble(("warning: ", "yellow"), msg))   # a node's error text is not markup
                try:
                    self.event("warning", msg)
                except Exception:  # noqa: BLE001
                    pass
        if self.ledger:
            self.ledger.close()
            if self.ledger.path.exists():
                console.print(Text.assemble(("warning: ", "yellow"), f"testbed nodes still hold parts of this run (see "
                                            f"{self.ledger.path}); run `nestlab cleanup` when they are reachable"))

    def _remove_active_faults(self) -> None:
        for af in list(self.active):
            self._end_fault(af)

    def _stop_collector(self) -> None:
        if self.collector is not None:
            self.backend.node(self.spec.monitor).stop(self.collector, timeout=5.0)
            self._on_process(self.collector, None, "ended", None)

    def _remove_chains(self) -> None:
        if self.faults is not None:
            self.faults.teardown()

    def _interceptor_warnings(self) -> None:
        """What the interceptor could not count (lost updates, untracked sockets, no shared memory),
        as the collector logged it: into the run's warnings."""
        for w in warnings_from_log(self.rd.logs / "collector.log"):
            self.event("warning", f"interceptor: {w}")

    def _bring_back(self) -> None:
        """What the backend left on the nodes (SSH: the collector's tables, merged into the local
        run.db, and every node's logs), and how far the clocks drifted apart during the run."""
        if self.backend is None:
            return
        if self.clocks is not None:
            try:
                end = self.backend.clocks_end()
                if end is not None:   # None: one shared clock
                    self.rd.update_manifest(clock_offsets_end=end.as_dict())
            except Exception as e:  # noqa: BLE001 - a node gone away: bring back what can be
                self.event("warning", f"measuring the clocks again failed: {e}")
        self.backend.bring_back(self.record, self.rd.path)

    def _resolve_targets(self) -> None:
        """Link each fault to the module it targets, now that the collector has recorded them."""
        if self.backend is None or self.clocks is None:
            return
        link_fault_targets(self.db, self.spec.monitor, self.backend.interfaces(self.spec.monitor)[0].name)

    def _columnar_copy(self) -> None:
        """The analysis's columnar copy of the counters (rundir.columnar), now that run.db is complete:
        the run's report and every later analysis read it instead of fetching the rows. A copy that
        cannot be made is no failure (the analysis reads run.db)."""
        try:
            from rundir import copies
            from rundir.columnar import write_after_run

            copies.claim(self.rd.path)   # this process made the run: its report's copies go into it too
            write_after_run(self.rd.path)
        except Exception as e:  # noqa: BLE001 - a shortcut for the analysis, never the run's outcome
            console.print(Text.assemble(("warning: ", "yellow"), f"columnar copy of the counters not written: {e}"))

    def _finish(self, status: str, reason: str | None) -> None:
        counts = self.record.counts()
        self.record.close()  # commits the rows written since the last commit (process ends, events)
        self._manifest(status, reason=reason, end_wall=time.time(), end_mono=self.now(), counts=counts,
                       warnings=self.progress.warnings)
        self._columnar_copy()
        colour = {"complete": "green", "interrupted": "yellow", "failed": "red"}[status]
        console.print(Text.assemble((status, colour), f"{': ' + reason if reason else ''} -> {self.rd.path}"))
        console.print(f"  faults injected {counts['faults']} (skipped {self.progress.skipped}), "
                      f"snapshots {counts['snapshots']}, modules {counts['modules']}")


def repetition_class(exp) -> type:
    """The runner of an experiment's repetitions: a network one, or a streams one (a Flink cluster)."""
    from harness.streams.spec import StreamsExperiment

    if isinstance(exp, StreamsExperiment):
        from harness.streams.runner import StreamsRepetition

        return StreamsRepetition
    return Repetition


def run_experiment(spec_path: str | Path, results_root: str | Path = "results",
                   topology: str | Path | None = None, observers: Observers = NONE) -> tuple[int, list[Path]]:
    exp = load_spec(spec_path, topology)  # spec mistakes are reported before anything needs root
    check_runner(exp.topology.backend)   # e.g. root for Mininet, before a run directory is made
    runs: list[Path] = []
    code = 0
    with machine_lock(str(spec_path)):
        refuse_on_leftovers()
        for rep in range(exp.spec.repetitions):
            run = repetition_class(exp)(exp, rep, Path(results_root), observers=observers)
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
