"""NeST's collectors in the network lab: one collector, or one per monitored testbed node.

On Mininet one collector, in the first monitored host, records every monitored host (it reaches each
host's namespace, on one clock: harness.collector.hosts) into the run's own run.db. On testbed nodes a
collector cannot reach another machine, so each monitored node runs a collector of its own
(`--label-host`: its modules named with its host, as the one collector names them), writing a run.db
there; the backend brings them back and merges them on the reference clock (rundir/nodemerge.py).

A collector that exits, or records nothing for `stall_s`, ends the run: on Mininet the recording
stopped (RecordingStopped); on a testbed the node is named (NodeFailed: one line, exit status 2),
since that is what the researcher must look at, and what every node recorded until then comes back.
"""

from __future__ import annotations

import time

from harness.backends.base import Proc
from harness.collector.hosts import HostArg
from harness.collector.main import command as collector_command
from harness.collector.probe import ProbeSettings
from harness.faults.spec import monitor_host, monitored_hosts
from harness.ledger import signals_held
from harness.outline import RecordingStopped
from rundir.db import monotonic
from rundir.errors import UserError

COLLECTOR_READY_S = 10.0


class NodeFailed(UserError):
    """A testbed node stopped recording mid-run (gone, rebooted, its collector died): the run fails
    with one line naming it; what was recorded is brought back."""


class Collectors:
    """The run's collectors: start() (each has recorded a snapshot), check() every tick, stop()."""

    def __init__(self, spec, backend, rd, record, shm_dirs: dict[str, str], on_process):
        self.spec, self.backend, self.rd, self.record = spec, backend, rd, record
        self.shm_dirs, self.on_process = shm_dirs, on_process
        self.procs: dict[str, Proc] = {}          # monitored host -> its collector (one entry on Mininet)
        self.db: str | None = None                # the reference collector's run.db
        self.seen: dict[str, tuple[int, float]] = {}   # host -> (snapshots, when that count was first seen)

    @property
    def separate(self) -> bool:
        return self.backend.separate_collectors() and len(monitored_hosts(self.spec)) > 1

    def log(self, host: str):
        """The reference collector's log is collector.log, as on Mininet; the others' collector-<host>.log."""
        return self.rd.collector_log if host == monitor_host(self.spec) else self.rd.logs / f"collector-{host}.log"

    def argv(self, host: str, db: str) -> list[str]:
        """The command line of the collector recording `host` (or, with one collector, every host)."""
        backend, spec = self.backend, self.spec
        probe = None if spec.probe is None else ProbeSettings(**spec.probe.model_dump())
        if self.separate:
            return collector_command(backend.python(host), db, spec.snapshot_interval, self.shm_dirs.get(host),
                                     backend.ignored_interfaces(host), probe, (), label_host=host)
        hosts = [HostArg(h, backend.node(h).pid, self.shm_dirs.get(h)) for h in monitored_hosts(spec)] \
            if len(monitored_hosts(spec)) > 1 else []   # one collector reaches every host (harness.collector.hosts)
        return collector_command(backend.python(host), db, spec.snapshot_interval,
                                 None if hosts else self.shm_dirs.get(host), backend.ignored_interfaces(host), probe,
                                 hosts)

    def start(self) -> str:
        """Start every collector and wait for each one's first snapshot; returns where the reference
        collector writes."""
        hosts = list(monitored_hosts(self.spec)) if self.separate else [monitor_host(self.spec)]
        for host in hosts:
            db = self.backend.collector_db(host, self.record)
            if host == hosts[0]:
                self.db = db
            with signals_held():
                proc = self.procs[host] = self.backend.node(host).start(self.argv(host, db), self.log(host))
                self.on_process(proc, None, "collector", host)
        for host in hosts:
            self._wait_ready(host)
        now = monotonic()
        self.seen = {h: (0, now) for h in hosts}
        return self.db

    def _wait_ready(self, host: str) -> None:
        backend, proc = self.backend, self.procs[host]
        deadline = monotonic() + COLLECTOR_READY_S
        while monotonic() < deadline:
            if backend.snapshots(host, self.record) > 0:
                backend.start_progress(host)
                return
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        log, node = self.log(host), backend.node(host)
        try:   # the node's copy of the log (on Mininet the node writes this very file: nothing to copy)
            node.get(node.log_path(log), log)
        except Exception:  # noqa: BLE001 - the error below says what we know
            pass
        text = log.read_text()[-800:] if log.exists() else ""
        where = f" on {host}" if self.separate else ""
        raise RuntimeError(f"collector{where} did not record a snapshot: {text.strip()}")

    # -- every tick ----------------------------------------------------------------------------
    def check(self, t: float, snaps: int, quiet_s: float, stall_s: float) -> None:
        """RecordingStopped (NodeFailed on a testbed) when a collector exited, or recorded no snapshot
        for `stall_s`. `snaps`, `quiet_s`: the reference collector's, as the run loop counts them."""
        for host, proc in self.procs.items():
            code = proc.poll()
            if code is not None:
                self._fail(host, f"its collector exited with status {code} at t = {t:.1f} s"
                           if code != -1 or not self.backend.remote else
                           f"it stopped answering at t = {t:.1f} s (its command server is gone)", snaps)
        if not self.separate:
            if quiet_s > stall_s:
                self._fail(monitor_host(self.spec), f"the collector recorded no snapshot for {quiet_s:.1f} s (since "
                           f"t = {t - quiet_s:.1f} s", snaps, close=")")
            return
        now = monotonic()
        for host in self.procs:
            count = self.backend.progress_snapshots(host, self.record)
            last, since = self.seen.get(host, (0, now))
            if count != last:
                self.seen[host] = (count, now)
            elif now - since > stall_s:
                self._fail(host, f"its collector recorded no snapshot for {now - since:.1f} s (since t = "
                           f"{t - (now - since):.1f} s, after {count} snapshots; the node may be gone)", snaps)

    def _fail(self, host: str, what: str, snaps: int, close: str = "") -> None:
        tail = self._log_tail(host)
        if self.backend.remote:
            raise NodeFailed(f"{host}: {what}{close}{tail}; what was recorded until then is kept")
        if close:
            raise RecordingStopped(f"{what}, after {snaps} snapshots){tail}")
        raise RecordingStopped(f"{what.replace('its collector', 'the collector')}, after {snaps} snapshots{tail}")

    def _log_tail(self, host: str) -> str:
        """`: <the last line of the collector's log>`, or nothing (a testbed node's log comes back later)."""
        try:
            lines = self.log(host).read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return f": {lines[-1][:300]}" if lines else ""

    def stop(self) -> None:
        for host, proc in list(self.procs.items()):
            self.backend.node(host).stop(proc, timeout=5.0)
            self.on_process(proc, None, "ended", None)
        self.procs = {}
