"""Probes of silent connections' remotes, sent by the collector (run format 5's `probes` table;
docs/probes.md).

A passive host with one flow cannot tell "my path is dead" from "this one connection is dead"
(thesis 3.3.2, 3.5.2.3). One small probe can: when a busy TCP connection has made no progress for
`after` seconds (at most its RTO), the collector sends a *burst* of `count` half-open TCP probes to
the connection's remote address and port (harness.collector.synprobe: a SYN from a fresh source
port, which our kernel resets when the SYN-ACK comes, so the remote application never sees it). A
fresh port is another 5-tuple: a rule or an ECMP hash that singles out the connection's 5-tuple
does not single out the probe. A SYN-ACK (`answered`) or a RST (`refused`) means the remote answered
over the network; no answer within `timeout` is `timeout`; a local routing error `unreachable`.
While the connection stays silent it is probed again every `every` seconds. The probes' port
holders are never modules: they are bound but never connected, and the TCP source's dump lists live
connections only; and the probes' packets (the SYN, its answer, and
the RST our kernel sends for a SYN-ACK) are left out of the interface's counters (`traffic`), so a
probe never makes a silent interface look active.

Busy: data in the send queue, or (a receiver, whose peer's backlog it cannot see) data received at
most `hold` seconds ago and nothing waiting for the application to read (a full receive queue is the
host's own stall, not the network's).

Budget (007, NSDI 2018: at most 10 probes/s per host): token buckets per host (`host_rate`) and
per remote (`remote_rate`); a burst goes only when both hold `count` tokens, and connections to the
same remote share its bursts. Standard library only: the collector runs on testbed nodes.
"""

from __future__ import annotations

import errno
import select
import socket
from dataclasses import dataclass, field

from harness.collector.synprobe import SynProbe, segment_bytes
from rundir.db import monotonic

_UNREACHABLE = (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ENETDOWN)


@dataclass(frozen=True)
class ProbeSettings:
    """The spec's `probe:` (harness.spec.Probe), in seconds and per second."""

    after: float = 0.3
    every: float = 1.0
    timeout: float = 1.0
    count: int = 2
    host_rate: float = 10.0
    remote_rate: float = 2.0
    hold: float = 10.0


class _Bucket:
    def __init__(self, rate: float, capacity: float, now: float):
        self.rate, self.capacity, self.tokens, self.at = rate, capacity, capacity, now

    def fill(self, now: float) -> float:
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        return self.tokens


@dataclass
class _Watch:
    """One TCP connection as the prober follows it."""

    remote: tuple[int, str, int]        # family, address, port
    segs: tuple                         # (data segments in, out) last seen
    first: float                        # when the prober first saw it
    progress: float | None = None       # when the segments last moved (None: not since first seen)
    next_burst: float = 0.0


@dataclass
class _Probe:
    syn: SynProbe
    burst: int
    module: int
    remote: tuple[int, str, int]
    seq: int
    sent: float
    deadline: float


@dataclass
class Prober:
    """Decides when to probe (`observe`, once a snapshot), sends bursts, and completes them while the
    collector waits for its next snapshot (`wait`). Finished probes are `take`n as probes rows."""

    settings: ProbeSettings
    next_id: int = 1
    next_burst: int = 1
    watches: dict[int, _Watch] = field(default_factory=dict)   # TCP module id -> its watch
    inflight: list[_Probe] = field(default_factory=list)
    done: list[tuple] = field(default_factory=list)    # probes rows not yet written
    remotes: dict[str, _Bucket] = field(default_factory=dict)
    host: _Bucket | None = None
    # The probes' own packets, by local address: [packets out, bytes out, packets in, bytes in], so
    # that the interface's counters can leave them out (ProbeFeed.discount).
    traffic: dict[str, list[int]] = field(default_factory=dict)

    def observe(self, now: float, seq: int, connections) -> None:
        """connections: (module id, remote (family, address, port), data segments in, out, receive
        queue, send queue, rto_us or None) of every live TCP module in the snapshot just taken."""
        s = self.settings
        live = set()
        for mid, remote, segs_in, segs_out, rqueue, wqueue, rto_us in connections:
            live.add(mid)
            w = self.watches.get(mid)
            if w is None:
                self.watches[mid] = _Watch(remote, (segs_in, segs_out), now)
                continue
            if (segs_in, segs_out) != w.segs:
                w.segs, w.progress = (segs_in, segs_out), now
                continue
            sending = bool(wqueue)
            receiving = w.progress is not None and now - w.progress <= s.hold and not rqueue
            if not (sending or receiving):
                continue
            since = now - (w.progress if w.progress is not None else w.first)
            wait = min(s.after, rto_us / 1e6) if rto_us else s.after
            if since >= wait and now >= w.next_burst and self._budget(now, remote):
                self._burst(now, seq, mid, remote)
                w.next_burst = now + s.every
        for mid in [m for m in self.watches if m not in live]:
            del self.watches[mid]

    def _budget(self, now: float, remote) -> bool:
        s = self.settings
        if self.host is None:
            self.host = _Bucket(s.host_rate, max(s.host_rate, s.count), now)
        key = _remote_text(remote)
        r = self.remotes.get(key)
        if r is None:
            r = self.remotes[key] = _Bucket(s.remote_rate, max(s.remote_rate, s.count), now)
        if self.host.fill(now) < s.count or r.fill(now) < s.count:
            return False
        if any(p.remote == remote for p in self.inflight):   # the remote's last burst is still out
            return False
        self.host.tokens -= s.count
        r.tokens -= s.count
        return True

    def _burst(self, now: float, seq: int, mid: int, remote) -> None:
        family, address, port = remote
        burst, self.next_burst = self.next_burst, self.next_burst + 1
        for _ in range(self.settings.count):
            sent = monotonic()
            try:
                syn = SynProbe(family, address, port)
            except OSError as e:
                code = e.errno if e.errno in _UNREACHABLE else -1
                self._record(burst, mid, remote, None, seq, sent, monotonic(), code)
                continue
            self._count(syn.src, out=segment_bytes(family))
            self.inflight.append(_Probe(syn, burst, mid, remote, seq, sent, sent + self.settings.timeout))

    def wait(self, until: float) -> None:
        """Until `until` (reference clock), complete the probes in flight as their answers come."""
        while True:
            now = monotonic()
            for p in [p for p in self.inflight if p.deadline <= now]:
                self._finish(p, now, errno.ETIMEDOUT)
            if now >= until:
                return
            if not self.inflight:
                os_sleep(until - now)
                return
            limit = min(until, min(p.deadline for p in self.inflight))
            ready, _, _ = select.select([p.syn.sock for p in self.inflight], [], [], max(0.0, limit - now))
            at = monotonic()
            for sock in ready:
                p = next(p for p in self.inflight if p.syn.sock is sock)
                code = p.syn.answer()
                if code is not None:
                    self._count(p.syn.src, into=p.syn.answer_bytes)
                    if code == 0:   # our kernel answers the SYN-ACK with a RST
                        self._count(p.syn.src, out=segment_bytes(p.remote[0]))
                    self._finish(p, at, code)

    def _count(self, src: str, out: int = 0, into: int = 0) -> None:
        t = self.traffic.setdefault(src, [0, 0, 0, 0])
        if out:
            t[0] += 1
            t[1] += out
        if into:
            t[2] += 1
            t[3] += into

    def _finish(self, p: _Probe, at: float, code: int) -> None:
        self.inflight.remove(p)
        p.syn.close()
        self._record(p.burst, p.module, p.remote, p.syn.sport, p.seq, p.sent, at, code)

    def _record(self, burst: int, mid: int, remote, sport, seq: int, sent: float, at: float, code: int) -> None:
        if code == 0:
            outcome = "answered"
        elif code == errno.ECONNREFUSED:
            outcome = "refused"
        elif code == errno.ETIMEDOUT:
            outcome = "timeout"
        elif code in _UNREACHABLE:
            outcome = "unreachable"
        else:
            outcome = "error"
        rtt = round((at - sent) * 1000.0, 3) if outcome in ("answered", "refused") else None
        self.done.append((self.next_id, burst, mid, _remote_text(remote), sport, "syn", seq, round(sent, 6),
                          round(at, 6), outcome, rtt))
        self.next_id += 1

    def take(self) -> list[tuple]:
        """The probes rows finished since the last call (rundir.snapshots.INSERT_PROBE's values)."""
        rows, self.done = self.done, []
        return rows

    def close(self) -> None:
        """Let the probes in flight finish (at most `timeout`), so every probe sent has its row."""
        if self.inflight:
            self.wait(max(p.deadline for p in self.inflight))


def os_sleep(seconds: float) -> None:
    if seconds > 0:
        select.select([], [], [], seconds)


def _remote_text(remote) -> str:
    family, address, port = remote
    return f"[{address}]:{port}" if family == socket.AF_INET6 else f"{address}:{port}"
