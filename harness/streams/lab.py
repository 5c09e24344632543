"""The streams lab: a Flink cluster, the graph's job, the streams collector, and the throttle and
dropper settings the run loop (harness.runner.Repetition) puts in and out on schedule, each verified
by the PE's acknowledgement and stamped. Every time is this machine's CLOCK_MONOTONIC."""

from __future__ import annotations

import json
import time

from harness.faults import kinds_used
from harness.lab.base import FaultRow, Injection, Lab, Run
from harness.outline import RecordingStopped
from harness.streams.cluster import FlinkCluster, flink_home
from harness.streams.collector import StreamsCollector
from harness.streams.spec import BACKEND, KINDS
from harness.window import Window
from rundir import __version__
from rundir.db import monotonic

ACK_S = 5.0          # a PE acknowledges a new setting within its 10 ms poll; more is a failure
STALL_S = 10.0       # no new snapshot for this long: the recording stopped


class StreamsLab(Lab):
    tick_s = 0.05
    spinner = False

    def __init__(self, run: Run):
        super().__init__(run)
        self.exp, self.graph = run.exp, run.exp.graph
        self.rd, self.record = run.rd, run.record
        self.rate = run.exp.rate_for(run.rep)
        self.control = self.rd.path.resolve() / "control"   # the JVMs run elsewhere: absolute paths
        self.cluster: FlinkCluster | None = None
        self.collector: StreamsCollector | None = None
        self.ctl_seq = 0
        self.started: list[float] = []
        self.stopped = True       # the cluster's JVMs are gone (or were never started)

    def now(self) -> float:
        return monotonic()

    # -- the start -----------------------------------------------------------------------------
    def manifest_start(self) -> dict:
        return dict(spec={**self.spec.model_dump(mode="json"), "graph_file": str(self.graph.path), "rate": self.rate},
                    backend=BACKEND, clock="CLOCK_MONOTONIC of this machine",
                    fault_kinds=kinds_used(self.spec.faults, KINDS))

    def setup(self) -> None:
        self.control.mkdir()
        self.run.say(f"starting Flink ({len(self.graph.pes)} PEs, {len(self.graph.connections)} connections, "
                     f"beacon {self.rate:g} tuples/s)")
        graph_file = self.rd.path.resolve() / "graph.txt"
        graph_file.write_text(self.graph.job_text(self.rate, self.spec.payload, self.control, self.spec.aggregate))
        self.cluster = FlinkCluster(self.rd.path, self.run.ledger, on_process=self._on_engine)
        self.stopped = False
        job = self.cluster.start(graph_file, self.run.run_id)   # an application cluster: our job, nothing else
        self.run.event("info", f"Flink job {job} running")
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

    # -- every tick ----------------------------------------------------------------------------
    def snapshots(self) -> int:
        return self.collector.snapshots

    def check(self, t: float, snaps: int, quiet_s: float) -> None:
        if self.collector.error or not self.collector.is_alive():
            raise RecordingStopped(f"the streams collector stopped: {self.collector.error or 'exited'}")
        if quiet_s > max(STALL_S, 10 * self.spec.snapshot_interval):
            raise RecordingStopped(f"no snapshot for {quiet_s:.0f} s")
        dead = self.cluster.alive()
        if dead:
            raise RuntimeError(dead)

    def progress_line(self, t: float, snaps: int, active: list[Injection]) -> str:
        return f"t {t:.0f} s of {self.spec.duration:g} s, {snaps} snapshots, {len(active)} settings active"

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

    def inject(self, w: Window, first_id: int) -> Injection:
        f = self.spec.faults[w.spec_index]
        kind = KINDS[f.kind]
        value = kind.on(f)
        start = self._set(f.operator, value)
        target = kind.target(f)
        t0 = self.run.t0
        rows = [FaultRow(f.kind, f.operator, json.dumps({**target, "connection": c.name}), t0 + w.start, start,
                         f"{f.operator}.ctl {value}") for c in self.graph.into(f.operator)]
        return Injection(w, rows, t0 + w.end)

    def injected(self, injection: Injection) -> None:
        self.record.link_stream_fault_targets()

    def heal(self, injection: Injection) -> list[float]:
        f = self.spec.faults[injection.window.spec_index]
        end = self._set(f.operator, KINDS[f.kind].off)
        return [end] * len(injection.rows)

    # -- the end -------------------------------------------------------------------------------
    def teardown_steps(self):
        return [("stop the streams collector", self._stop_collector), ("stop Flink", self._stop_cluster)]

    def _stop_collector(self) -> None:
        if self.collector is not None:
            self.collector.stop()
            if self.collector.is_alive():
                self.run.progress.warnings.append("the streams collector did not stop within 10 s")

    def _stop_cluster(self) -> None:
        """The ledger goes only when the cluster's JVMs are gone (else `nestlab cleanup` finds them)."""
        if self.cluster is None:
            return
        procs = list(self.cluster.procs)
        try:
            self.cluster.stop()
            self.stopped = True
        except Exception as e:
            raise RuntimeError(f"{type(e).__name__}: {e} (`nestlab cleanup` stops what is left)") from e
        finally:
            ended = monotonic()
            for p, started in zip(procs, self.started, strict=False):
                self.record.process_ended(p.pid, started, ended, p.returncode)

    def leftovers(self) -> bool:
        return not self.stopped

    def summary(self, counts: dict[str, int]) -> str:
        return (f"settings applied {counts['faults']}, snapshots {counts['snapshots']}, "
                f"connections {counts['modules']}")


def _flink_version() -> str:
    try:
        text = (flink_home() / "version.py").read_text()
        return text.split("__version__ = ")[1].split()[0].strip("\"'")
    except (OSError, IndexError):
        return "unknown"

