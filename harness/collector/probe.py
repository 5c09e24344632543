"""Probes of silent connections' remotes, sent by the collector (run format 5's `probes` table;
docs/probes.md).

A passive host with one flow cannot tell "my path is dead" from "this one connection is dead"
(thesis 3.3.2, 3.5.2.3). One small probe can: when a busy TCP connection has made no progress (no byte received or acknowledged) for
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

Budget (007, NSDI 2018: at most 10 probes/s per host): sliding windows per host (`host_rate`) and
per remote address (`remote_rate`): a burst goes only when, with it, neither sent more than `rate`
probes in the last second (in the last count/rate seconds when a burst is larger than the rate), so
the rate holds in every window, from the first second on (a token bucket let a full bucket and a
second's refill through: 18 probes in one second at 10/s). Connections to the same remote address,
whatever their ports, share its budget; a remote's window is forgotten once it is empty. A remote
given as an IPv4-mapped IPv6 address (a dual-stack server's view of an IPv4 peer) is probed over
IPv4, as its packets travel. Standard library only: the collector runs on testbed nodes.
"""

from __future__ import annotations

import errno
import ipaddress
import select
import socket
from collections import deque
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


class _Window:
    """The probes sent within the last `span` seconds: at most `cap` of them (`rate` a second)."""

    def __init__(self, rate: float, count: int):
        self.span = max(1.0, count / rate)
        self.cap = rate * self.span + 1e-9
        self.sent: deque[float] = deque()

    def room(self, now: float, count: int) -> bool:
        sent = self.sent
        while sent and sent[0] <= now - self.span:
            sent.popleft()
        return len(sent) + count <= self.cap

    def take(self, at: float) -> None:
        self.sent.append(at)


def plain_remote(remote: tuple[int, str, int]) -> tuple[int, str, int]:
    """An IPv4-mapped IPv6 remote (::ffff:a.b.c.d) as the IPv4 remote its packets go to."""
    family, address, port = remote
    if family == socket.AF_INET6 and address.lower().startswith("::ffff:"):
        mapped = ipaddress.IPv6Address(address).ipv4_mapped
        if mapped is not None:
            return socket.AF_INET, str(mapped), port
    return remote


@dataclass
class _Watch:
    """One TCP connection as the prober follows it."""

    remote: tuple[int, str, int]        # family, address, port
    segs: tuple                         # (progress in, out) last seen: bytes received, bytes acked
    first: float                        # when the prober first saw it
    progress: float | None = None       # when they last moved (None: not since first seen)
    next_burst: float = 0.0
    queues: tuple = (0, 0, None)        # (receive queue, send queue, rto_us) last seen


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
    # Watches that may want a probe while nothing changes (data queued, or received and not held):
    # only these are looked at again for a connection unchanged since the last snapshot.
    armed: set[int] = field(default_factory=set)
    inflight: list[_Probe] = field(default_factory=list)
    done: list[tuple] = field(default_factory=list)    # probes rows not yet written
    remotes: dict[tuple[int, str], _Window] = field(default_factory=dict)   # (family, address) -> window
    host: _Window | None = None
    # The probes' own packets, by local address: [packets out, bytes out, packets in, bytes in], so
    # that the interface's counters can leave them out (ProbeFeed.discount).
    traffic: dict[str, list[int]] = field(default_factory=dict)

    def observe(self, now: float, seq: int, connections, unchanged=()) -> None:
        """connections: (module id, remote (family, address, port), progress in, out (bytes received,
        bytes acknowledged: a retransmission is no progress), receive queue, send queue, rto_us or None) of the live TCP modules in the snapshot just taken;
        unchanged: the module ids of the other live ones, whose values are those last given (only
        those that may want a probe are looked at: the cost follows what moves, not the host's size)."""
        watches, armed = self.watches, self.armed
        for mid, remote, segs_in, segs_out, rqueue, wqueue, rto_us in connections:
            w = watches.get(mid)
            if w is None:
                w = watches[mid] = _Watch(plain_remote(remote), (segs_in, segs_out), now)
                w.queues = (rqueue, wqueue, rto_us)
                if wqueue:
                    armed.add(mid)
                continue
            w.queues = (rqueue, wqueue, rto_us)
            if wqueue or (w.progress is not None and not rqueue) or (segs_in, segs_out) != w.segs:
                armed.add(mid)
            else:
                armed.discard(mid)
            if (segs_in, segs_out) != w.segs:
                w.segs, w.progress = (segs_in, segs_out), now
                continue
            self._consider(now, seq, mid, w)
        for mid in unchanged:
            if mid in armed:
                self._consider(now, seq, mid, watches[mid])
        if len(watches) > len(connections) + len(unchanged):   # some ended: forget them
            live = {c[0] for c in connections}.union(unchanged)
            self.watches = {m: w for m, w in watches.items() if m in live}
            self.armed = armed & live
        if len(self.remotes) > 64:   # forget remotes whose window is empty (a host talks to many)
            self.remotes = {k: r for k, r in self.remotes.items() if r.room(now, 0) and r.sent}

    def _consider(self, now: float, seq: int, mid: int, w: _Watch) -> None:
        """A burst for a connection that made no progress, if it is busy, silent long enough,
        due, and the budget has room."""
        s = self.settings
        rqueue, wqueue, rto_us = w.queues
        sending = bool(wqueue)
        receiving = w.progress is not None and now - w.progress <= s.hold and not rqueue
        if not (sending or receiving):   # idle: unarmed until its segments or queues move again
            self.armed.discard(mid)
            return
        since = now - (w.progress if w.progress is not None else w.first)
        wait = min(s.after, rto_us / 1e6) if rto_us else s.after
        if since >= wait and now >= w.next_burst and (windows := self._budget(now, w.remote)):
            self._burst(seq, mid, w.remote, windows)
            w.next_burst = now + s.every

    def _budget(self, now: float, remote) -> tuple[_Window, _Window] | None:
        """The host's and the remote's windows when both have room for a burst. `now` is the
        snapshot's time, never later than the probes will go: a window counts at least every probe
        sent within `span` before them."""
        s = self.settings
        if self.host is None:
            self.host = _Window(s.host_rate, s.count)
        key = remote[:2]
        r = self.remotes.get(key)
        if r is None:
            r = self.remotes[key] = _Window(s.remote_rate, s.count)
        if not (self.host.room(now, s.count) and r.room(now, s.count)):
            return None
        if any(p.remote[:2] == key for p in self.inflight):   # the remote's last burst is still out
            return None
        return self.host, r

    def _burst(self, seq: int, mid: int, remote, windows) -> None:
        family, address, port = remote
        burst, self.next_burst = self.next_burst, self.next_burst + 1
        for _ in range(self.settings.count):
            sent = monotonic()
            for w in windows:   # each probe at the time it goes (what the budget is judged on)
                w.take(sent)
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
