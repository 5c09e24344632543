"""The collector: inside the monitored host's namespace, every interval, ask each source what it
sees and record modules, edges, a snapshot and its counters in run.db.

    python -m harness.collector.main --db RUN/run.db --interval 0.1 [--interceptor-dir DIR] [--probe JSON]

Snapshots follow absolute deadlines (start + k * interval) so the interval does not drift; a
snapshot that overruns skips missed deadlines rather than bunching up. Each snapshot is one short
transaction (rundir.snapshots). SIGTERM/SIGINT end the loop after
the current snapshot. With --probe (harness.collector.probe), silent busy connections' remotes are
probed, and the probes complete while the loop waits for its next deadline.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import resource
import signal
import socket
import sqlite3
import sys
import time
from collections.abc import Iterable, Sequence

from harness.collector.hosts import HostArg, HostSources, host_sources, label
from harness.collector.iface import InterfaceSource
from harness.collector.probe import Prober, ProbeSettings
from harness.collector.procs import socket_owners
from harness.collector.sockdiag import TcpSource
from harness.collector.source import Changes, Observation, Report, Source, reporter
from rundir.db import connect, monotonic
from rundir.snapshots import SnapshotWriter

ADDRESS_REFRESH_S = 5.0
GC_THRESHOLD = 100_000   # net new containers between two cyclic collections (gc.set_threshold)


class ModuleTracker:
    """Turns per-snapshot reports (births, changes, deaths) into module/edge lifetimes and counter rows."""

    def __init__(self, db: sqlite3.Connection):
        self.writer = SnapshotWriter(db)
        self.ids: dict[str, int] = {}                # live key -> module id
        self.children: dict[str, list[str]] = {}     # live key -> its children's keys, when it has any
        self.last: dict[tuple[int, str], tuple] = {}   # (module id, dir) -> values last written
        self.last_info: dict[int, tuple] = {}          # module id -> tcp_info values last written
        self.edges: set[tuple[int, int]] = set()     # live (parent id, child id)
        self.next_id, self.seq = self.writer.next_ids()
        self.full = Changes()                        # record(): a full list, as births and deaths

    def record(self, now: float, wall: float, observations: list[Observation], probes=()) -> None:
        """A snapshot given as every live module (births and deaths found here)."""
        self.record_reports(now, wall, [self.full(observations)], probes)

    def record_reports(self, now: float, wall: float, reports: list[Report], probes=()) -> None:
        """A snapshot given as births, changes and deaths (Report): a live module no report names
        costs nothing here, which is most of them on a busy host."""
        ids, children, last, last_info = self.ids, self.children, self.last, self.last_info
        deaths = []
        for rep in reports:
            for key in rep.gone:
                mid = ids.pop(key, None)
                if mid is None:
                    continue
                deaths.append((now, mid))
                children.pop(key, None)
                last.pop((mid, "in"), None)
                last.pop((mid, "out"), None)
                last_info.pop(mid, None)
        births = []
        # A row only when a module/direction's values differ from the last row written (always at
        # birth): readers carry values forward within the module's lifetime (docs/run-format.md).
        # One pass over the changed, with lookups hoisted.
        seq, rows, info_rows = self.seq, [], []
        for rep in reports:
            for ob in rep.changed:
                key = ob.key
                mid = ids.get(key)
                if mid is None:
                    mid = ids[key] = self.next_id
                    self.next_id += 1
                    births.append((mid, ob.kind, ob.name, key, json.dumps(ob.attrs), now))
                if ob.children:
                    children[key] = ob.children
                elif children:
                    children.pop(key, None)
                for d, c in ob.counters.items():
                    vals = c if type(c) is tuple else (c.get("total_msgs"), c.get("wait_ms"), c.get("queued"),
                                                       c.get("errors"), c.get("bytes"))
                    if last.get((mid, d)) != vals:
                        last[(mid, d)] = vals
                        rows.append((seq, mid, d, *vals))
                if ob.tcp_info is not None:
                    row = _info_row(now, ob.tcp_info, last_info.get(mid))
                    if row is not None:
                        last_info[mid] = row
                        info_rows.append((seq, mid) + row[0] + row[1])
        # A module's children are fixed while it lives, or change only as other modules are born and
        # die (an app's sockets); so the edges need a look only when the set of modules changed.
        if births or deaths:
            edges = {(ids[key], ids[child]) for key, kids in children.items() for child in kids if child in ids}
        else:
            edges = self.edges
        changed = edges != self.edges
        self.writer.snapshot(seq, now, wall, births, deaths, rows, info_rows,
                             edges - self.edges if changed else (), self.edges - edges if changed else (), probes)
        self.edges, self.seq = edges, seq + 1

    def close(self, now: float, probes=()) -> None:
        """Mark everything still alive as dying at the end of the recording."""
        self.writer.close(now, self.ids.values(), probes)


class ProbeFeed:
    """The TCP observations of a snapshot as the prober reads them (Prober.observe's tuples), and the
    interface observations without the probes' own packets (discount)."""

    def __init__(self, prober: Prober, ifkey_of=lambda address: None):
        self.prober = prober
        self.ifkey_of = ifkey_of              # local address -> 'ipeth:<ifname>'
        self.remotes: dict[int, tuple[int, str, int]] = {}   # module id -> (family, address, port)
        self.last: dict[tuple[str, str, str], int] = {}      # (ipeth key, dir, field) -> value last given

    def discount(self, reports: list[Report]) -> None:
        """Take the probes' packets and bytes out of their interface's cumulative counters (interfaces
        are always among the changed: their source reports every one, Changes)."""
        if not self.prober.traffic:
            return
        by_key = {}
        for address, (p_out, b_out, p_in, b_in) in self.prober.traffic.items():
            key = self.ifkey_of(address)
            if key is not None:
                t = by_key.setdefault(key, [0, 0, 0, 0])
                t[0] += p_out
                t[1] += b_out
                t[2] += p_in
                t[3] += b_in
        for ob in (ob for rep in reports for ob in rep.changed):
            t = by_key.get(ob.key) if ob.kind == "ipeth" else None
            if t is None:
                continue
            for d, field, n in (("out", "total_msgs", t[0]), ("out", "bytes", t[1]),
                                ("in", "total_msgs", t[2]), ("in", "bytes", t[3])):
                # A packet counted here a moment before the interface counted it must not make the
                # cumulative counter go backwards: never below what the last snapshot gave.
                value = max(ob.counters[d][field] - n, self.last.get((ob.key, d, field), 0))
                ob.counters[d][field] = self.last[(ob.key, d, field)] = value

    def feed(self, now: float, seq: int, reports: list[Report], ids: dict[str, int]) -> None:
        """The changed TCP modules' values, and the ids of the live ones left out (their values are
        those the prober was given last)."""
        conns, same = [], []
        for rep in reports:
            for ob in rep.changed:
                if ob.kind != "tcp":
                    continue
                mid = ids[ob.key]
                remote = self.remotes.get(mid)
                if remote is None:
                    remote = self.remotes[mid] = _remote(ob)
                c_in, c_out = ob.counters["in"], ob.counters["out"]
                # Progress is data delivered: bytes received, bytes the remote acknowledged. Not data segments,
                # which an RTO's retransmission into a dead path moves (each one restarted the silence:
                # an upload's first burst of an ip_drop went ~1 s late, past the analysis's look-ahead).
                conns.append((mid, remote, c_in[4], c_out[4], c_in[2], c_out[2], ob.tcp_info[4] if ob.tcp_info else None))
            same.extend(map(ids.__getitem__, rep.unchanged()))
        if len(self.remotes) > 2 * (len(conns) + len(same)) + 1000:   # forget connections long gone
            live = {c[0] for c in conns}.union(same)
            self.remotes = {m: r for m, r in self.remotes.items() if m in live}
        self.prober.observe(now, seq, conns, same)


def _remote(ob: Observation) -> tuple[int, str, int]:
    """(family, address, port) of a TCP module's remote: its attrs at birth, else its name
    ('tcp SRC:SPORT>DST:DPORT')."""
    dst, dport = ob.attrs.get("dst"), ob.attrs.get("dport")
    if dst is None or dport is None:
        dst, _, dport = ob.name.rsplit(">", 1)[1].rpartition(":")
    family = socket.AF_INET6 if ":" in dst else socket.AF_INET
    return family, dst, int(dport)


# tcp_info's "ms ago" fields become times on the reference clock (snapshot time - ago), which stay
# put while nothing happens, so an idle connection writes no rows. They are kernel jiffies
# truncated to ms: a time that moved less than this is the same time.
STAMP_TOLERANCE_S = 0.011
_TOLERANCE_MS = STAMP_TOLERANCE_S * 1000.0


# The tcp_info values a row holds before its three stamps (INSERT_TCP_INFO): TCP's state, the RTTs and
# (format 8) the whose-turn fields.
_INFO_VALUES = 13


def _info_row(now: float, info: tuple, last: tuple | None) -> tuple | None:
    """(values, stamps in s as written, stamps in ms for the next comparison) for one connection
    (Observation.tcp_info), or None when nothing changed since `last`. Runs for every connection
    every snapshot: plain comparisons, no loops."""
    values = info[:5] + info[8:]
    if len(values) < _INFO_VALUES:   # an observation without the whose-turn fields (format 8): NULL
        values += (None,) * (_INFO_VALUES - len(values))
    t = now * 1000.0
    sent, recv, ack = t - info[5], t - info[6], t - info[7]
    if last is not None and last[0] == values:
        ls, lr, la = last[2]
        tol = _TOLERANCE_MS
        if -tol <= sent - ls <= tol and -tol <= recv - lr <= tol and -tol <= ack - la <= tol:
            return None
    return values, (round(sent / 1000.0, 4), round(recv / 1000.0, 4), round(ack / 1000.0, 4)), (sent, recv, ack)


def make_sources(interceptor_dir: str | None, ignore_interfaces=()) -> tuple[list[Source], InterfaceSource]:
    iface = InterfaceSource(set(ignore_interfaces))
    sources: list[Source] = [iface, TcpSource(iface.ifkey_of, socket_owners, iface.ignored, skip_unchanged=True)]
    if interceptor_dir:
        from harness.collector.appsockets import InterceptorSource

        sources.insert(0, InterceptorSource(interceptor_dir))
    return sources, iface


def run(db_path: str, interval: float, interceptor_dir: str | None = None,
        max_snapshots: int | None = None, ignore_interfaces=(), probe: ProbeSettings | None = None,
        hosts: Sequence[HostArg] = (), label_host: str | None = None) -> int:
    """hosts: several monitored hosts (harness.collector.hosts), the first being this process's own;
    their modules record their host. Probes need one host. label_host: one host of several, recorded
    by a collector of its own (a testbed node): its modules record it as `hosts` would label them."""
    db = connect(db_path)
    db.isolation_level = None  # explicit BEGIN/COMMIT per snapshot
    tracker = ModuleTracker(db)
    prober = None
    if probe is not None and hosts:
        raise SystemExit("collector: --probe takes one monitored host (not --host)")
    if probe is not None:
        prober = Prober(probe, *tracker.writer.next_probe_ids())
    if hosts:
        per_host = [host_sources(h, ignore_interfaces) for h in hosts]
        iface = _AllHosts(per_host, tracker)
        sources = [iface]
    else:
        sources, iface = make_sources(interceptor_dir, ignore_interfaces)
        if label_host:
            sources = [_Labelled(src, label_host, tracker) for src in sources]
    feed = ProbeFeed(prober, iface.ifkey_of) if prober else None
    reporters = [reporter(src) for src in sources]
    stop = False

    def on_signal(signum, frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # A snapshot of 10,000 connections makes and drops some 15,000 containers; at the default
    # threshold (700, counted net of frees) that was 25 collections and 5-7 ms of CPU a snapshot,
    # for objects that form no cycles. Collections now come only with real growth.
    gc.set_threshold(GC_THRESHOLD)
    print("collector: ready", flush=True)
    start, cpu_start = monotonic(), _cpu_seconds()   # the first snapshot's deadline: its `now` a moment later
    next_refresh = start + ADDRESS_REFRESH_S
    k = 0
    try:
        while not stop:
            now = monotonic()
            reports = [report() for report in reporters]
            if feed is not None:
                feed.discount(reports)
            tracker.record_reports(now, time.time(), reports, prober.take() if prober else ())
            if feed is not None:
                feed.feed(now, tracker.seq - 1, reports, tracker.ids)
            if max_snapshots is not None and tracker.seq >= max_snapshots:
                break
            if now >= next_refresh:
                iface.refresh_addresses()
                next_refresh = now + ADDRESS_REFRESH_S
            k += 1
            deadline = start + k * interval
            now = monotonic()
            if now > deadline:  # overran: skip the deadlines already missed
                k = int((now - start) / interval) + 1
                deadline = start + k * interval
            if prober is not None:
                prober.wait(deadline)
            else:
                time.sleep(max(0.0, deadline - monotonic()))
    finally:
        if prober is not None:
            prober.close()
        tracker.close(monotonic(), prober.take() if prober else ())
        # The recording's own cost (imports and setup before `start` left out): CPU and wall seconds.
        tracker.writer.meta({"collector_cpu_s": f"{_cpu_seconds() - cpu_start:.3f}",
                             "collector_s": f"{monotonic() - start:.3f}"})
        for src in sources:
            src.close()
        db.close()
    return 0


class _Labelled:
    """One source whose new modules (not among the tracker's live keys) record `host` (hosts.label):
    a monitored host of several recorded by its own collector, as on testbed nodes."""

    def __init__(self, src: Source, host: str, tracker: ModuleTracker):
        self.src, self.host, self.tracker = src, host, tracker
        self.name = getattr(src, "name", "source")
        self._report = None

    def report(self) -> Report:
        if self._report is None:
            self._report = reporter(self.src)
        rep = self._report()
        for ob in rep.changed:
            if ob.key not in self.tracker.ids:
                label(ob, self.host)
        return rep

    def __getattr__(self, name):   # refresh_addresses, ifkey_of, close: the source's own
        return getattr(self.src, name)


class _AllHosts:
    """Every monitored host's sources as one source (report, close) and one interface source
    (refresh_addresses). A module new to the tracker (not among its live keys) is labelled with its host."""

    name = "hosts"

    def __init__(self, hosts: list[HostSources], tracker: ModuleTracker):
        self.hosts, self.tracker = hosts, tracker

    def report(self) -> Report:
        reports = [rep for h in self.hosts for rep in h.reports(self.tracker.ids)]
        return Report([ob for rep in reports for ob in rep.changed], [key for rep in reports for key in rep.gone],
                      lambda: [key for rep in reports for key in rep.unchanged()])

    def refresh_addresses(self) -> None:
        for h in self.hosts:
            h.iface.refresh_addresses()

    def close(self) -> None:
        for h in self.hosts:
            h.close()


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def command(python: list[str], db: str, interval: float, interceptor_dir: str | None = None,
            ignore_interfaces: Iterable[str] = (), probe: ProbeSettings | None = None,
            hosts: Sequence[HostArg] = (), label_host: str | None = None) -> list[str]:
    """The command line that runs the collector: `python` is the argv prefix that runs this package's
    modules where the collector runs (Backend.python), the rest are main()'s options."""
    argv = [*python, "-m", "harness.collector.main", "--db", db, "--interval", str(interval)]
    if label_host:
        argv += ["--label-host", label_host]
    for h in hosts:
        argv += ["--host", h.argv()]
    if probe is not None:
        argv += ["--probe", json.dumps(dataclasses.asdict(probe), sort_keys=True)]
    if interceptor_dir is not None:
        argv += ["--interceptor-dir", str(interceptor_dir)]
    for name in ignore_interfaces:
        argv += ["--ignore-interface", name]
    return argv


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", required=True)
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--interceptor-dir")
    p.add_argument("--max-snapshots", type=int)
    p.add_argument("--ignore-interface", action="append", default=[],
                   help="an interface outside the experiment (e.g. a testbed's control network): "
                        "neither it nor connections bound to its addresses become modules")
    p.add_argument("--probe", type=lambda text: ProbeSettings(**json.loads(text)),
                   help="probe silent connections' remotes, with these settings (JSON of ProbeSettings)")
    p.add_argument("--host", action="append", default=[], type=HostArg.parse,
                   help="NAME=PID[=SHM_DIR]: a monitored host, reached through process PID's network namespace, "
                        "its interceptor's directory; repeated for several hosts (harness.collector.hosts)")
    p.add_argument("--label-host", help="record every module with this host (one of several monitored hosts, "
                                        "each with its own collector: testbed nodes)")
    a = p.parse_args(argv)
    return run(a.db, a.interval, a.interceptor_dir, a.max_snapshots, a.ignore_interface, a.probe, a.host,
               a.label_host)


if __name__ == "__main__":
    sys.exit(main())
