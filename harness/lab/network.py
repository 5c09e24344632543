"""The network lab: a topology of hosts and routers, workloads between them, NeST's collector on the
monitored host and faults on the routers and hosts.

Setup builds the topology (Mininet) or verifies the testbed nodes (SSH), starts the servers, hooks
the fault chain into the routers and starts the collector in the monitored host; at t0 the workloads
start as they come due, and the fault kinds (harness/faults/) put the planned faults in and out.
Teardown undoes it all in reverse order.

Every time recorded is on the monitored host's CLOCK_MONOTONIC (the run's reference clock). On
Mininet every namespace shares the machine's clock; on testbed nodes the backend measures each node's
offset (and the runner's own): the fault kinds convert their nodes' stamps of fault windows with
those nodes' offsets, this lab the runner's stamps (events, process starts) with the runner's. On a
testbed the collector writes its tables into a run.db on the monitored node; teardown brings that
back and merges it into the local run.db, with every node's logs (docs/ssh-backend.md).

The lab asks and does not look inside: the backend (harness/backends/, chosen by the topology's kind)
for the nodes, the clocks, what the manifest records and where the collector writes; the fault kinds
(harness/faults/) for faults; the collector (harness.collector.main.command) for its command line;
the recorder (rundir/recorder.py) for run.db's rows; rundir.layout.RunDir for the run directory.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from rich.console import Console
from rich.text import Text

from harness.backends import make_backend
from harness.backends.base import Clocks, Proc
from harness.collector.appsockets import warnings_from_log
from harness.faults import FaultEnv, Faults, NoTarget, kinds_used
from harness.faults.spec import monitor_host, monitored_hosts
from harness.lab.base import FaultRow, FaultSkipped, Injection, Lab, Run
from harness.lab.collectors import Collectors
from harness.lab.fabric import FabricLab
from harness.lab.queues import QueueSampler
from harness.lab.tracing import MessageTracing
from harness.window import Window
from harness.workloads import Workloads, check_binaries
from rundir import __version__
from rundir.db import monotonic
from rundir.recorder import link_fault_targets

# How often testbed nodes' clocks are measured again during a run (a node that lost sync ends it)
CLOCK_CHECK_S = 10.0
QUEUE_SAMPLE_S = 1.0       # how often the shaped links' queues are read (network health)
# No new snapshot for this long (and for 50 intervals): the recording stopped. Above the SSH backend's
# progress poll (2 s) with room for a slow poll; a collector that exits is seen at once.
COLLECTOR_STALL_S = 10.0

console = Console(stderr=True, highlight=False, soft_wrap=True)


class NetworkLab(Lab):
    def __init__(self, run: Run):
        super().__init__(run)
        self.exp = run.exp
        self.rd, self.record = run.rd, run.record
        self.db = run.record.db           # run.db's connection, for what takes one (target links)
        self.rng = random.Random(run.exp.seed_for(run.rep))
        self.backend = None
        self.workloads: Workloads | None = None
        self.collectors: Collectors | None = None
        self.faults: Faults | None = None
        self.shm_dir: str | None = None          # the interceptor's directory on the first monitored host
        self.shm_dirs: dict[str, str] = {}        # ... on each monitored host
        self.tracing: MessageTracing | None = None   # `trace: messages` (harness/lab/tracing.py)
        self.clocks: Clocks | None = None
        self.collector_db: str | None = None    # where the collector writes (the run's own run.db, or a node's)
        self.queues: QueueSampler | None = None   # the shaped links' queues, read in a thread (lab/queues.py)
        self.fabric: FabricLab | None = None     # a fabric's probers and paths (harness/lab/fabric.py)
        self.next_clock_check = monotonic() + CLOCK_CHECK_S

    def now(self) -> float:
        """The reference clock (the monitored host's CLOCK_MONOTONIC), read through the runner's."""
        return self.runner_time(monotonic())

    def runner_time(self, t: float) -> float:
        return self.clocks.from_runner(t) if self.clocks else t

    def _on_process(self, proc: Proc, workload: int | None, role: str, host: str | None) -> None:
        started = self.runner_time(proc.started)
        if role == "ended":
            code = proc.poll()
            self.record.process_ended(proc.pid, started, self.now(), code)
            if workload is not None:
                self.run.event("workload_end", f"pid {proc.pid} exit {code}", workload)
            else:   # no event follows to commit it: its open transaction would hold run.db's write lock
                self.record.commit()   # through the next steps (stopping the servers), past the drainer's busy timeout
            return
        self.record.process_started(proc.pid, workload, role, host, " ".join(proc.argv), started)
        if workload is not None:
            self.run.event("workload_start", f"pid {proc.pid}: {' '.join(proc.argv)}", workload)

    # -- the start -----------------------------------------------------------------------------
    def manifest_start(self) -> dict:
        spec, topo = self.spec, self.exp.topology
        monitor_if = topo.interfaces[monitor_host(spec)][0]
        return dict(
            spec=spec.model_dump(mode="json"),
            topology={"name": topo.name, "file": str(topo.source), "spec": topo.spec.model_dump(mode="json"),
                      "addresses": {n: [i.__dict__ for i in intfs] for n, intfs in topo.interfaces.items()}},
            backend=topo.backend,
            monitor={"host": monitor_host(spec), "address": monitor_if.address, "interface": monitor_if.name},
            **self._monitored(topo.interfaces),
            congestion_control=spec.congestion_control, clock="CLOCK_MONOTONIC of the monitored host",
            fault_kinds=kinds_used(spec.faults))

    def _monitored(self, interfaces) -> dict:
        """Several monitored hosts: the manifest's `monitored`, each host's address and interface
        (`monitor` stays the first's, the reference clock's). Nothing for one host."""
        if len(monitored_hosts(self.spec)) < 2:
            return {}
        return {"monitored": [{"host": h, "address": interfaces[h][0].address, "interface": interfaces[h][0].name}
                              for h in monitored_hosts(self.spec)]}

    def setup(self) -> None:
        spec, topo, rd = self.spec, self.exp.topology, self.rd
        backend = self.backend = make_backend(topo.backend, topo, self.run.ledger, spec, self.run.run_id)
        self._announce("preflight")
        backend.preflight(lambda: check_binaries(spec))   # programs, permissions, connections: before anything is made
        self._announce("build")
        backend.build()
        self.clocks = backend.clocks(monitor_host(spec))
        monitor_if = backend.interfaces(monitor_host(spec))[0]
        interfaces = {n: [i.__dict__ for i in backend.interfaces(n)] for n in topo.spec.nodes}
        monitor = {"host": monitor_host(spec), "address": monitor_if.address, "interface": monitor_if.name,
                   **backend.manifest_monitor(monitor_host(spec))}
        # start_mono was read on the runner's clock (the same clock on Mininet: offset 0).
        rd.update_manifest(status="running", topology={**rd.manifest["topology"], "addresses": interfaces},
                           versions={"nestlab": __version__, **backend.versions()},
                           clock_offsets=self.clocks.as_dict(), monitor=monitor, link_model=backend.link_model,
                           **self._monitored({n: backend.interfaces(n) for n in monitored_hosts(spec)}),
                           **backend.manifest_extra(), start_mono=self.runner_time(rd.manifest["start_mono"]))
        nodes = {n: backend.node(n) for n in topo.spec.nodes}
        addresses = {n: backend.address(n) for n in topo.spec.nodes}
        client_env = {}
        if spec.interceptor:   # each monitored host's clients and tiers run with the interceptor
            for host in monitored_hosts(spec):
                self.shm_dirs[host], client_env[host] = backend.interceptor(host)
            self.shm_dir = self.shm_dirs[monitor_host(spec)]
        if spec.trace:
            self.tracing = MessageTracing(spec, backend, topo.backend)
            self.tracing.add_env(client_env)
        self.workloads = Workloads(spec, nodes, addresses, rd.logs, client_env, on_process=self._on_process,
                                   warn=lambda message, workload: self.run.event("warning", message, workload),
                                   python=backend.python, seed=self.exp.seed_for(self.run.rep),
                                   pods={h: topo.spec.nodes[h].site for h in topo.hosts},
                                   pythonpath=backend.pythonpath)
        self.run.ledger.add_path(self.workloads.www)
        self.workloads.start_servers()
        self.faults = Faults(FaultEnv(spec, backend, self.clocks, self.workloads, self.rng, self.run.run_id,
                                      self.shm_dir, self.run.ledger, shm_dirs=self.shm_dirs))
        self.faults.setup()   # the kinds' shared state, e.g. the fault chain on each router
        if FabricLab.wanted(topo):   # NetBouncer's probe paths, traced before the run, and its probers
            self.fabric = FabricLab(topo, backend, rd.logs, self._on_process, self.clocks)
            self.fabric.plan()
            self.fabric.start()
        self._start_collector()
        if self.tracing is not None:
            self.tracing.start(str(rd.db), rd.logs / "tracedrain.log", self._on_process)

    def _announce(self, step: str) -> None:
        message = self.backend.announce(step)
        if message:
            self.run.say(message)

    def _start_collector(self) -> None:
        self.collectors = Collectors(self.spec, self.backend, self.rd, self.record, self.shm_dirs, self._on_process)
        self.collector_db = self.collectors.start()

    def begin(self, t0: float) -> None:
        self.workloads.t0 = t0
        self.queues = QueueSampler(self.backend.queue_stats, self.now, QUEUE_SAMPLE_S)
        self.queues.start()

    def live_db(self) -> bool:
        """The collector writes the run's own run.db (Mininet), which the live diagnosis can read."""
        try:
            return self.collector_db is not None and Path(self.collector_db).resolve() == self.rd.db.resolve()
        except OSError:
            return False

    # -- every tick ----------------------------------------------------------------------------
    def snapshots(self) -> int:
        return self.backend.progress_snapshots(monitor_host(self.spec), self.record)

    def check(self, t: float, snaps: int, quiet_s: float) -> None:
        self._check_recording(t, snaps, quiet_s, max(COLLECTOR_STALL_S, 50 * self.spec.snapshot_interval))

    def _check_recording(self, t: float, snaps: int, quiet_s: float, stall_s: float) -> None:
        """RecordingStopped (a testbed node: NodeFailed) when a collector exited or stopped recording."""
        self.collectors.check(t, snaps, quiet_s, stall_s)

    def tick(self, now: float) -> None:
        self.workloads.start_due(now)
        if monotonic() >= self.next_clock_check:   # testbed nodes: a node that lost clock sync ends the run
            self.next_clock_check = monotonic() + CLOCK_CHECK_S   # (the runner's clock, as set in __init__)
            self.backend.check_clocks()
        if self.queues is not None:
            self._record_queues(self.queues.drain())

    def _record_queues(self, rounds) -> None:
        """The shaped links' queue counters (cumulative drops, sent packets) and backlog, each round
        stamped when it was read."""
        for t, stats in rounds:
            self.record.queue_stats(stats, lambda t=t: t)

    def _stop_queues(self) -> None:
        """The sampler stopped and what it read recorded; a round it could not read said once."""
        if self.queues is None:
            return
        queues, self.queues = self.queues, None
        self._record_queues(queues.stop())
        if queues.error is not None:
            self.run.event("warning", f"reading the links' queues stopped: {queues.error}")

    def progress_line(self, t: float, snaps: int, active: list[Injection]) -> str:
        faults = self.spec.faults
        return (f"{t:5.1f}/{self.spec.duration:g} s  faults {self.run.progress.injected}/{len(self.run.plan)}  "
                f"snapshots {snaps}  active {','.join(faults[a.window.spec_index].kind for a in active) or '-'}")

    def ending(self) -> None:
        self._stop_queues()
        self._record_queues([(self.now(), self.backend.queue_stats())])   # the queues as the run ends

    # -- faults --------------------------------------------------------------------------------
    def inject(self, w: Window, first_id: int) -> Injection:
        f = self.spec.faults[w.spec_index]
        kind = self.faults.of(w)
        try:   # the first part's id is known before its row is written: a rule's tag carries it
            parts = kind.inject(w, first_id)
        except NoTarget as e:
            raise FaultSkipped(f"{f.kind} at {w.start:g}s skipped: {e}", f.target.workload if f.target else None) from e
        rows = [FaultRow(f.kind, f.node(self.spec), part.target, w.start, part.start, part.rule, (kind, part))
                for part in parts]
        return Injection(w, rows, parts[-1].start + w.duration)

    def heal(self, injection: Injection) -> list[float]:
        ends = []
        for fid, row in zip(injection.ids, injection.rows, strict=True):
            kind, part = row.handle
            try:
                ends.append(kind.heal(part))
            except Exception as e:  # noqa: BLE001 - e.g. a paused process that exited meanwhile
                ends.append(self.now())
                self.run.event("warning", f"fault {fid}: ending it failed ({type(e).__name__}: {e}); end stamped now")
        for kind in {id(row.handle[0]): row.handle[0] for row in injection.rows}.values():
            for w in getattr(kind, "take_warnings", list)():   # e.g. delay: replies it could not defer
                self.run.event("warning", w)
        return ends

    # -- the end -------------------------------------------------------------------------------
    def teardown_steps(self):
        return [
            ("stop progress", lambda: self.backend and self.backend.stop_progress()),
            ("stop reading the queues", self._stop_queues),
            ("stop workloads", lambda: self.workloads and self.workloads.stop_clients()),
            ("stop the fabric's probers", lambda: self.fabric and self.fabric.stop()),
            ("stop collector", self._stop_collector),
            ("stop servers", lambda: self.workloads and self.workloads.stop_servers()),
            ("stop the message drainer", self._stop_tracing),
            ("record the request paths", self._record_requests),
            ("remove firewall chains", self._remove_chains),
            ("bring back run.db and logs", self._bring_back),
            ("record the interceptor's warnings", self._interceptor_warnings),
            ("resolve fault targets", self._resolve_targets),
            ("record the fabric's paths and probes", self._record_fabric),
            ("tear down topology", lambda: self.backend and self.backend.teardown()),
            ("remove served files", lambda: self.workloads and self.workloads.remove_files()),
        ]

    def _stop_collector(self) -> None:
        if self.collectors is not None:
            self.collectors.stop()

    def _stop_tracing(self) -> None:
        """The drainer's last drain, then the trace's totals in the manifest and its losses warned."""
        if self.tracing is None:
            return
        # nothing the runner wrote may hold run.db's write lock through the drainer's last drain
        self.run.record.commit()
        self.tracing.stop(self._on_process)
        if not self.tracing.separate:   # testbed nodes: once their traces are back (_bring_back)
            self._trace_outcome()

    def _trace_outcome(self) -> None:
        totals, warnings = self.tracing.outcome(self.rd.db)
        if totals is not None and self.tracing.separate and self.clocks is not None:
            totals["clock"] = {h: self.clocks.nodes[h].as_dict() for h in self.tracing.dirs if h in self.clocks.nodes}
        self.tracing.totals = totals
        self.rd.update_manifest(trace=totals)
        for w in warnings:
            self.run.event("warning", w)

    def _record_requests(self) -> None:
        """A service workload's true request paths (the requests table) and its load generator's
        summary (the manifest's `service`), from the tiers' logs (harness.service.paths)."""
        if self.workloads is None or not self.workloads.services:
            return
        # nginx stamps the wall clock: every Mininet namespace shares this machine's clocks; on testbed
        # nodes it is read on the web node, and every node's stamps converted with its offset
        if self.backend.separate_collectors():
            offsets = {n: o.offset for n, o in self.clocks.nodes.items()} if self.clocks else {}
            rows, summaries = self.workloads.service_records(None, offsets)
        else:
            rows, summaries = self.workloads.service_records(time.time() - monotonic())
        self.record.requests(rows)
        self.rd.update_manifest(service={str(i): s for i, s in summaries.items()})

    def _remove_chains(self) -> None:
        if self.faults is not None:
            self.faults.teardown()

    def _interceptor_warnings(self) -> None:
        """What the interceptor could not count (lost updates, untracked sockets, no shared memory),
        as the collector logged it: into the run's warnings."""
        logs = [self.collectors.log(h) for h in monitored_hosts(self.spec)] \
            if self.collectors is not None and self.collectors.separate else [self.rd.collector_log]
        for log in logs:
            for w in warnings_from_log(log):
                self.run.event("warning", f"interceptor: {w}")

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
                self.run.event("warning", f"measuring the clocks again failed: {e}")
        try:
            self.backend.bring_back(self.record, self.rd.path)
        finally:
            if self.tracing is not None and self.tracing.separate:
                self._trace_outcome()

    def _resolve_targets(self) -> None:
        """Link each fault to the module it targets, now that the collector has recorded them."""
        if self.backend is None or self.clocks is None:
            return
        link_fault_targets(self.db, monitor_host(self.spec), self.backend.interfaces(monitor_host(self.spec))[0].name)

    def _record_fabric(self) -> None:
        if self.fabric is not None and self.backend is not None:
            self.record.commit()
            self.rd.update_manifest(fabric=self.fabric.record(self.db, self.rd.path))

    def finished(self, path: Path) -> None:
        """The analysis's columnar copy of the counters (rundir.columnar), now that run.db is complete:
        the run's report and every later analysis read it instead of fetching the rows. A copy that
        cannot be made is no failure (the analysis reads run.db)."""
        try:
            from rundir import copies
            from rundir.columnar import write_after_run

            copies.claim(path)   # this process made the run: its report's copies go into it too
            write_after_run(path)
        except Exception as e:  # noqa: BLE001 - a shortcut for the analysis, never the run's outcome
            console.print(Text.assemble(("warning: ", "yellow"), f"columnar copy of the counters not written: {e}"))

    def summary(self, counts: dict[str, int]) -> str:
        line = (f"faults injected {counts['faults']} (skipped {self.run.progress.skipped}), "
                f"snapshots {counts['snapshots']}, modules {counts['modules']}")
        totals = self.tracing.totals if self.tracing is not None else None
        if totals:
            line += f", messages {totals['events']} (dropped {totals['dropped']}, lost {totals['lost']})"
        return line
