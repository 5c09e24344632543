"""One repetition of a streams experiment: a Flink cluster, the graph's job, the collector, the
throttle and dropper settings on schedule (each verified by the PE's acknowledgement and stamped),
and teardown on every exit path. Same interface as harness.runner.Repetition (suites run both)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.text import Text

from harness.faults import kinds_used
from harness.ledger import Ledger, signals_held
from harness.observers import NONE, Observers
from harness.outline import RecordingStopped, guarded_run
from harness.streams.cluster import FlinkCluster, flink_home
from harness.streams.collector import StreamsCollector
from harness.streams.spec import BACKEND, KINDS, StreamsExperiment
from harness.window import Window
from rundir import __version__
from rundir.db import FORMAT_VERSION, monotonic
from rundir.layout import RunDir
from rundir.recorder import RunRecorder

TICK_S = 0.05
ACK_S = 5.0          # a PE acknowledges a new setting within its 10 ms poll; more is a failure
STALL_S = 10.0       # no new snapshot for this long: the recording stopped

console = Console(stderr=True, highlight=False, soft_wrap=True)


@dataclass
class Active:
    window: Window
    rows: list[int]   # its faults rows, one per connection into the PE


class StreamsRepetition:
    def __init__(self, exp: StreamsExperiment, repetition: int, results_root: Path, suite: str | None = None,
                 status_prefix=None, observers: Observers = NONE):
        self.exp, self.rep, self.suite = exp, repetition, suite
        self.spec, self.graph = exp.spec, exp.graph
        self.status_prefix = status_prefix
        self.observers = observers
        self.plan = exp.plan(repetition)
        self.rd = RunDir.create(results_root, self.spec.name, repetition)
        self.run_id = f"{self.spec.name}-{self.rd.path.name}"
        self.record = RunRecorder.create(self.rd.db)
        self.control = self.rd.path.resolve() / "control"   # the JVMs run elsewhere: absolute paths
        self.cluster: FlinkCluster | None = None
        self.collector: StreamsCollector | None = None
        self.ledger: Ledger | None = None
        self.active: list[Active] = []
        self.fault_ids = 0
        self.ctl_seq = 0
        self.warnings: list[str] = []
        self.t0: float | None = None
        self.started: list[float] = []

    # -- the run -------------------------------------------------------------------------------
    def execute(self) -> int:
        spec = self.spec
        self.rd.update_manifest(
            format_version=FORMAT_VERSION, status="running", run_id=self.run_id, experiment=spec.name,
            repetition=self.rep, seed=self.exp.seed_for(self.rep), spec_file=str(self.exp.path),
            spec_digest=self.exp.digest(self.rep), **({"suite": self.suite} if self.suite else {}),
            spec={**spec.model_dump(mode="json"), "graph_file": str(self.graph.path),
                  "rate": self.exp.rate_for(self.rep)},
            backend=BACKEND, snapshot_interval=spec.snapshot_interval,
            planned_faults=[w.__dict__ for w in self.plan], clock="CLOCK_MONOTONIC of this machine",
            fault_kinds=kinds_used(spec.faults, KINDS),
            start_wall=time.time(), start_mono=monotonic())
        def teardown(status: str, reason: str | None) -> None:
            self._teardown()
            self._finish(status, reason)

        return guarded_run(lambda: (self._setup(), self._loop()), teardown, self.rd.logs)

    def event(self, kind: str, detail: str = "") -> None:
        self.record.event(monotonic(), kind, None, detail)
        if kind == "warning":
            self.warnings.append(detail)

    def _setup(self) -> None:
        self.ledger = Ledger(self.run_id, self.rd.path)
        self.control.mkdir()
        console.print(Text.assemble((self.spec.name, "bold"), f" r{self.rep}: starting Flink "
                                    f"({len(self.graph.pes)} PEs, {len(self.graph.connections)} connections, "
                                    f"beacon {self.exp.rate_for(self.rep):g} tuples/s)"))
        self.cluster = FlinkCluster(self.rd.path, self.ledger, on_process=self._on_engine)
        self.cluster.start()
        graph_file = self.rd.path.resolve() / "graph.txt"
        graph_file.write_text(self.graph.job_text(self.exp.rate_for(self.rep), self.spec.payload, self.control,
                                                  self.spec.aggregate))
        job = self.cluster.submit(graph_file, self.run_id)
        self.event("info", f"Flink job {job} running")
        self.rd.update_manifest(versions={"nestlab": __version__, "flink": _flink_version(), "java": self.cluster.java})
        self.collector = StreamsCollector(self.cluster.metrics_ports, self.graph, self.rd.db,
                                          self.spec.snapshot_interval)
        self.collector.start()
        deadline = monotonic() + 30
        while self.collector.snapshots == 0:
            if self.collector.error or monotonic() > deadline:
                raise RuntimeError(f"the streams collector recorded no snapshot: {self.collector.error or 'timeout'}")
            time.sleep(0.05)

    def _on_engine(self, proc) -> None:
        """A JVM of the cluster started: its processes row (ended at teardown)."""
        self.started.append(monotonic())
        self.record.process_started(proc.pid, None, "engine", "localhost", " ".join(map(str, proc.args)),
                                    self.started[-1])

    def _loop(self) -> None:
        spec = self.spec
        self.t0 = monotonic()
        self.event("run_start", f"t0 = {self.t0:.6f}")
        self.rd.update_manifest(t0=self.t0)
        pending = sorted(self.plan, key=lambda w: w.start)
        last_snaps, last_new, last_print = -1, self.t0, -1e9
        while True:
            now = monotonic()
            t = now - self.t0
            if t >= spec.duration:
                break
            snaps = self.collector.snapshots
            if snaps != last_snaps:
                last_snaps, last_new = snaps, now
            if self.collector.error or not self.collector.is_alive():
                raise RecordingStopped(f"the streams collector stopped: {self.collector.error or 'exited'}")
            if now - last_new > max(STALL_S, 10 * spec.snapshot_interval):
                raise RecordingStopped(f"no snapshot for {now - last_new:.0f} s")
            dead = self.cluster.alive()
            if dead:
                raise RuntimeError(dead)
            for a in [a for a in self.active if t >= a.window.end]:
                with signals_held():
                    self._end(a)
            while pending and t >= pending[0].start:
                with signals_held():
                    self._start(pending.pop(0))
            if now - last_print >= 10:
                prefix = self.status_prefix(t) if self.status_prefix else ""
                console.print(f"{prefix}{spec.name} r{self.rep}: t {t:.0f} s of {spec.duration:g} s, "
                              f"{snaps} snapshots, {len(self.active)} settings active", markup=False)
                last_print = now
            time.sleep(TICK_S)
        for a in list(self.active):
            self._end(a)
        self.event("run_end", f"t = {monotonic() - self.t0:.3f}")

    # -- throttles and droppers ----------------------------------------------------------------
    def _set(self, operator: str, value: str) -> float:
        """Write a PE's control file and wait for its acknowledgement: the time it took effect."""
        self.ctl_seq += 1
        seq = str(self.ctl_seq)
        tmp = self.control / f"{operator}.ctl.tmp"
        tmp.write_text(f"{seq} {value}\n")
        tmp.replace(self.control / f"{operator}.ctl")
        ack = self.control / f"{operator}.ack"
        deadline = monotonic() + ACK_S
        while monotonic() < deadline:
            try:
                fields = ack.read_text().split()
            except FileNotFoundError:
                fields = []
            if len(fields) == 3 and fields[0] == seq:
                return float(fields[2])
            time.sleep(0.005)
        raise RuntimeError(f"{operator} did not acknowledge setting {value!r} within {ACK_S:g} s")

    def _start(self, w: Window) -> None:
        f = self.spec.faults[w.spec_index]
        kind = KINDS[f.kind]
        value = kind.on(f)
        start = self._set(f.operator, value)
        target = kind.target(f)
        rows = []
        for c in self.graph.into(f.operator):
            self.fault_ids += 1
            rows.append((self.fault_ids, w.spec_index, f.kind, f.operator,
                         json.dumps({**target, "connection": c.name}), self.t0 + w.start, w.duration, start,
                         f"{f.operator}.ctl {value}"))
        self.record.faults_started(rows)
        self.record.link_stream_fault_targets()
        self.active.append(Active(w, [r[0] for r in rows]))

    def _end(self, a: Active) -> None:
        f = self.spec.faults[a.window.spec_index]
        end = self._set(f.operator, KINDS[f.kind].off)
        for fid in a.rows:
            self.record.fault_ended(fid, end)
        self.record.commit()
        self.active.remove(a)

    # -- the end -------------------------------------------------------------------------------
    def _teardown(self) -> None:
        """Every step on its own: one that fails is a warning, and the next still runs. The ledger
        goes only when the cluster's JVMs are gone (else `nestlab cleanup` finds them)."""
        for a in list(self.active):   # a stopped run: leave no PE throttled (the job is cancelled next)
            try:
                self._end(a)
            except Exception as e:  # noqa: BLE001
                self.warnings.append(f"ending {self.spec.faults[a.window.spec_index].operator}'s setting: {e}")
                self.active.remove(a)
        if self.collector is not None:
            self.collector.stop()
            if self.collector.is_alive():
                self.warnings.append("the streams collector did not stop within 10 s")
        stopped = True
        if self.cluster is not None:
            procs = list(self.cluster.procs)
            try:
                self.cluster.stop()
            except Exception as e:  # noqa: BLE001
                stopped = False
                self.warnings.append(f"stopping Flink: {type(e).__name__}: {e} (`nestlab cleanup` stops what is left)")
            ended = monotonic()
            for p, started in zip(procs, self.started, strict=False):
                self.record.process_ended(p.pid, started, ended, p.returncode)
        if self.ledger is not None and stopped:
            self.ledger.close()

    def _finish(self, status: str, reason: str | None) -> None:
        counts = self.record.counts()
        self.record.close()
        self.rd.update_manifest(status=status, reason=reason, end_wall=time.time(), end_mono=monotonic(),
                                counts=counts, warnings=self.warnings)
        colour = {"complete": "green", "interrupted": "yellow", "failed": "red"}[status]
        console.print(Text.assemble((status, colour), f"{': ' + reason if reason else ''} -> {self.rd.path}"))
        console.print(f"  settings applied {counts['faults']}, snapshots {counts['snapshots']}, "
                      f"connections {counts['modules']}", markup=False)


def _flink_version() -> str:
    try:
        text = (flink_home() / "version.py").read_text()
        return text.split("__version__ = ")[1].split()[0].strip("\"'")
    except (OSError, IndexError):
        return "unknown"
