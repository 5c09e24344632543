"""`whoseturn`: NeST for request/response connections (issue 42). Host-only and passive: no trace, no
requests table, only what the collector and the interceptor record on each monitored host.

FlowDiagnoser assumes every socket has work (thesis 3.6.2: the roots of the analysis graph), so an
idle keep-alive connection of a service, a server waiting for its next request, is STALLED (or its
socket waits in epoll and its TCP connection is): NeST's false positives on service runs
(docs/blackbox.md). TCP itself knows whose turn it is. Per TCP connection and snapshot, from tcp_info
(analysis.model.tcpstate: the times of the last data sent and received; analysis.model.turnstate:
unacked and not-sent data, the connection's server end) and the counters (the receive and send
queues):

- **in flight**: data unacknowledged, not yet sent, or in the send queue: the network's or the
  receiver's turn. The thesis rule decides the connection, unchanged (a silent connection with data
  to move is STALLED); its socket, STALLED, becomes BLOCKED (the application waits on the
  connection: the blame is the connection's, which names both ends).
- **held**: nothing in flight, and this end holds data: its receive queue is not empty (unread), or
  it is the server end and the last data was received (a request read and not answered). Held
  longer than `latency` (the serving tier's quiet-time latency; its age is the snapshot's time less
  the last data received) is a stall of the serving application: its socket is STALLED (so its
  application, thesis 3.3.1), unless the host is itself waiting downstream (below), when the socket
  is BLOCKED: the application waits on a call it made, whose callee takes the blame.
  (The stamps are jiffies truncated to ms: a request and its answer within one tick have equal
  stamps, which counts as answered at either end: held needs the receive strictly later, awaiting
  the send.)
- **awaiting**: nothing in flight, the client end, the last data was sent and nothing is unread: a
  request delivered, its answer not come. Not this host's stall: STALLED becomes BLOCKED. The host
  *waits downstream* at a snapshot when one of its client ends with a known TCP state (whatever its
  exchanges: a connection opened for a call that never came back counts) last sent data, or has
  data in flight, with nothing unread, for longer than `latency` since its last data sent.
- **idle**: nothing in flight, nothing unread, and the server end's last data was sent (it answered:
  waiting for the next request) or the client end's was received (its answer read: nothing asked).
  Not stalled: STALLED or BLOCKED become DONTCARE, on the connection and its socket.

The TCP connection itself is never STALLED by the new rules: held or awaiting, STALLED becomes
BLOCKED (it waits on an application, here or there). An application with at least one socket the
rules read is STALLED when one of its sockets is, else HEALTHY when it moved, BLOCKED when one of
those sockets is, else DONTCARE: its sockets without a TCP connection (Unix sockets: nginx's channel
to its master) do not decide it.

**Where the rules apply**: TCP connections with a known TCP state (run format 4 on) that have
carried at least `exchanges` data segments each way so far (request/response traffic alternates; a
download carries one request, an upload none back), or whose service port (the lower of its two) a
connection read in an earlier stretch of the batch (the same host) used: a connection opened while
requests pile up (nginx's new upstream connection, a new thread's memcached connection) is read
from its first request on. Their sockets and applications too. Runs of format 8
add tcpi_unacked and tcpi_notsent_bytes; before it the send queue (bytes not acknowledged, sent or
not) alone says what is in flight, which is the same test in bytes. Everything else keeps
`flowdiagnoser:theta=2`'s result: on the thesis's network workloads (wget, iperf: one-way data) the
variant gives the thesis rule's labels (tests/test_whoseturn.py checks it on generated snapshots; on
the stored net_fault run the two diagnoses are identical), and so on runs without a TCP state.

Parameters: `latency` (s, default 0.05: above every tier's quiet-time hop p99 on the service runs
here, 1-16 ms, docs/service.md; `auto`: learnt per host from its own server ends' answered
requests in its first seconds, learned_latency), `exchanges` (default 2), `theta` (the baseline's Θ,
default 2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.model.batch import Batch
from analysis.model.stretches import DIRS, Stretch
from analysis.variants import flowdiagnoser
from analysis.variants.base import (
    BLOCKED,
    DONTCARE,
    HEALTHY,
    STALLED,
    Param,
    RuleSystem,
    positive_int,
    seconds,
)


@dataclass
class Turns:
    """The TCP cells the rules read (`cell`, flat cell indices) and, aligned with them, their turn;
    the socket cells over them and the application cells over those."""

    cell: np.ndarray
    inflight: np.ndarray
    held: np.ndarray
    awaiting: np.ndarray
    idle: np.ndarray
    age_recv: np.ndarray   # s since the last data received (NaN unknown)
    age_sent: np.ndarray
    server: np.ndarray
    group: np.ndarray      # its host and snapshot (stretch, snapshot), numbered
    n_groups: int
    sock: np.ndarray       # socket cells over a read TCP cell ...
    sock_of: np.ndarray    # ... and that TCP cell's position in `cell`
    app: np.ndarray        # application cells over such a socket ...
    app_of: np.ndarray     # ... and that socket's position in `sock`
    apps: np.ndarray       # the application cells, once each
    call_group: np.ndarray  # the host's calls waiting for an answer (Builder._calls): their snapshot ...
    call_age: np.ndarray    # ... and the age of their last data sent
    turn_at: np.ndarray     # answered requests seen at the server ends: when each was received ...
    turn_s: np.ndarray      # ... and how long the host took to answer it (s; latency=auto learns from them)


def _empty() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


class _Builder:
    """Turns, one stretch at a time (only its TCP rows are read: a service host's connections are a
    fraction of its cells)."""

    def __init__(self, batch: Batch, exchanges: int):
        self.batch, self.exchanges = batch, exchanges
        self.slot: dict = {}    # module id -> its row of `carry`
        self.carry = np.zeros((0, 2))   # data segments so far (in, out) per module, across stretches
        self.parts: dict[str, list] = {k: [] for k in ("cell", "inflight", "held", "awaiting", "idle", "age_recv",
                                                       "age_sent", "server", "group", "sock", "sock_of", "app",
                                                       "app_of", "call_group", "call_age", "turn_at", "turn_s")}
        self.count = self.n_sock = 0
        self.rr_ports: set[int] = set()   # service ports of connections the rules read, so far

    def stretch(self, k: int, st: Stretch, gbase: int) -> None:
        kinds = np.asarray(st.kinds)
        is_tcp = kinds == "tcp"
        if not is_tcp.any():
            return
        r = np.flatnonzero(is_tcp)
        rows = r.tolist()
        t = st.t
        slot = self.slot
        for m in rows:
            slot.setdefault(st.modules[m], len(slot))
        if len(slot) > len(self.carry):   # grown by doubling: a run's connections come a few at a time
            self.carry = np.vstack([self.carry, np.zeros((max(len(slot), 2 * len(self.carry)) - len(self.carry), 2))])
        at = np.fromiter((slot[st.modules[m]] for m in rows), dtype=np.intp, count=len(rows))
        cum = []
        for x, d in enumerate(DIRS):
            c = np.cumsum(st.counters[d].tm[r], axis=1)
            c += self.carry[at, x][:, None]
            cum.append(c)
            self.carry[at, x] = c[:, -1]
        tu, ts = getattr(st, "turn", None), st.tcpstate
        if tu is None or ts is None:
            return
        self._calls(st, r, tu, ts, gbase)
        enough = (cum[0] >= self.exchanges) & (cum[1] >= self.exchanges)
        port = None if tu.port is None else np.asarray(tu.port, dtype=np.int64)[r]
        if port is not None and self.rr_ports:
            # a connection to a port this host already speaks request/response on, opened since
            enough |= np.isin(port, list(self.rr_ports))[:, None]
        ruled = enough & tu.known[r] & ts.known[r]
        if port is not None:
            self.rr_ports.update(port[ruled.any(axis=1) & (port >= 0)].tolist())
        if not ruled.any():
            return
        i, j = np.nonzero(ruled)
        m = r[i]

        def at(a) -> np.ndarray:   # the ruled cells of a (modules, snapshots) array, in (i, j) order
            return np.take(a, r, axis=0)[ruled]

        sent, recv = at(ts.data_sent_at), at(ts.data_recv_at)
        mono = np.asarray(ts.mono, dtype=float)[j]
        server = np.asarray(tu.server, dtype=bool)[m]
        with np.errstate(invalid="ignore"):
            recv_last = recv > np.where(np.isnan(sent), -np.inf, sent)
            sent_last = sent > np.where(np.isnan(recv), -np.inf, recv)
            inflight = (at(tu.unacked) > 0) | (at(tu.notsent) > 0) | (at(st.counters["out"].queued) > 0)
        unread = at(st.counters["in"].queued) > 0
        quiet = ~inflight
        held = quiet & (unread | (server & recv_last))
        awaiting = quiet & ~held & ~server & sent_last
        base = int(self.batch.offsets[k])
        p = self.parts
        answered = server & ~recv_last & ~np.isnan(sent) & ~np.isnan(recv)   # the server end spoke last
        p["turn_at"].append(recv[answered])
        p["turn_s"].append((sent - recv)[answered])
        for key, v in (("cell", base + m * t + j), ("inflight", inflight), ("held", held), ("awaiting", awaiting),
                       ("idle", quiet & ~held & ~awaiting), ("age_recv", mono - recv), ("age_sent", mono - sent),
                       ("server", server), ("group", gbase + j)):
            p[key].append(v)
        # sockets over a read TCP cell, and applications over those sockets
        pos = np.full((st.n, t), -1, dtype=np.int64)
        pos[m, j] = self.count + np.arange(len(m))
        self.count += len(m)
        e = self.batch.edge_arrays[k]
        is_sock = kinds == "socket"
        se = e[is_sock[e[:, 0]] & is_tcp[e[:, 1]]]
        ei, js = np.nonzero(pos[se[:, 1]] >= 0)
        spos = np.full((st.n, t), -1, dtype=np.int64)
        if len(ei):
            p["sock"].append(base + se[ei, 0] * t + js)
            p["sock_of"].append(pos[se[ei, 1], js])
            spos[se[ei, 0], js] = self.n_sock + np.arange(len(ei))
            self.n_sock += len(ei)
            ae = e[(kinds[e[:, 0]] == "app") & is_sock[e[:, 1]]]
            ai, ajs = np.nonzero(spos[ae[:, 1]] >= 0)
            if len(ai):
                p["app"].append(base + ae[ai, 0] * t + ajs)
                p["app_of"].append(spos[ae[ai, 1], ajs])

    def _calls(self, st: Stretch, r: np.ndarray, tu, ts, gbase: int) -> None:
        """The host's calls waiting for an answer: client ends with a known TCP state, exchanges or
        not (a connection opened for a call that never came back is one), whose last data was sent,
        or that have data in flight, and nothing unread: their snapshot (`call_group`) and the age of
        their last data sent (`call_age`)."""
        server = np.asarray(tu.server, dtype=bool)[r]
        known = np.take(ts.known, r, axis=0) & ~server[:, None]
        if not known.any():
            return

        def at(a) -> np.ndarray:
            return np.take(a, r, axis=0)[known]

        sent, recv = at(ts.data_sent_at), at(ts.data_recv_at)
        with np.errstate(invalid="ignore"):
            flight = (at(tu.unacked) > 0) | (at(tu.notsent) > 0) | (at(st.counters["out"].queued) > 0)
            sent_last = sent > np.where(np.isnan(recv), -np.inf, recv)
            waiting = (flight | sent_last) & ~(at(st.counters["in"].queued) > 0)
        mono = np.asarray(ts.mono, dtype=float)[np.nonzero(known)[1]]
        self.parts["call_group"].append(gbase + np.nonzero(known)[1][waiting])
        self.parts["call_age"].append((mono - sent)[waiting])

    def done(self, n_groups: int) -> Turns | None:
        p = self.parts
        if not p["cell"]:
            return None
        cat = {k: (np.concatenate(v) if v else _empty()) for k, v in p.items()}
        for key in ("call_age", "turn_at", "turn_s"):
            cat[key] = cat[key].astype(float)
        return Turns(n_groups=n_groups, apps=np.unique(cat["app"]), **cat)


def turns(batch: Batch, exchanges: int) -> Turns | None:
    """The turn of every TCP cell the rules read (module docstring); None when none is read (no
    stretch records a turn and a TCP state, or no connection has exchanged enough): the thesis rule."""
    sts = batch.stretches
    if not any(getattr(st, "turn", None) is not None and st.tcpstate is not None for st in sts):
        return None
    b = _Builder(batch, exchanges)
    gbase = np.concatenate([[0], np.cumsum([st.t for st in sts])]).astype(np.int64)
    # in time order, so that a connection's exchanges add up across its stretches
    for k in sorted(range(len(sts)), key=lambda k: (sts[k].seqs[0] if sts[k].t else 0)):
        b.stretch(k, sts[k], int(gbase[k]))
    return b.done(int(gbase[-1]))


def _shared_turns(batch: Batch, exchanges: int) -> Turns | None:
    return batch.shared(f"whoseturn:{exchanges}", lambda: turns(batch, exchanges))


LEARN_S = 4.0      # latency=auto: the host's first seconds of answered requests ...
LEARN_MIN = 20     # ... at least this many distinct ones (else DEFAULT_LATENCY) ...
LEARN_FLOOR = 0.01  # ... and never below 10 ms (2.5 jiffies at HZ=250: the stamps' resolution)
DEFAULT_LATENCY = 0.05


def learned_latency(tu: Turns) -> float:
    """latency=auto: twice the p99 of the time this host took to answer the distinct requests its
    server ends received in its first LEARN_S seconds of them (host-only and passive: tcp_info's last
    data received and sent at the server ends); at least LEARN_FLOOR; DEFAULT_LATENCY with fewer than
    LEARN_MIN. The first seconds, not the whole run: a diagnoser does not know the fault schedule,
    and the runs here put their first fault after a quiet start (a fault in them makes the host's
    latency higher, so fewer stalls, never more)."""
    ok = np.isfinite(tu.turn_at) & np.isfinite(tu.turn_s)
    if not ok.any():
        return DEFAULT_LATENCY
    at, dur = tu.turn_at[ok], tu.turn_s[ok]
    first = at <= at.min() + LEARN_S
    turns = np.unique(np.stack([at[first], dur[first]]), axis=1)   # a turn is seen at every snapshot until the next
    if turns.shape[1] < LEARN_MIN:
        return DEFAULT_LATENCY
    return max(LEARN_FLOOR, 2.0 * float(np.quantile(turns[1], 0.99)))


def apply(tu: Turns, base: np.ndarray, latency: float) -> np.ndarray:
    """One direction's results with the rules applied to the thesis rule's `base`."""
    with np.errstate(invalid="ignore"):
        held_long = tu.held & (tu.age_recv > latency)
        down = tu.call_age > latency
    waits = np.zeros(tu.n_groups, dtype=bool)
    waits[tu.call_group[down]] = True
    res = base.copy()
    # TCP connections: held or awaiting, STALLED -> BLOCKED; idle, STALLED/BLOCKED -> DONTCARE
    b = base[tu.cell]
    res[tu.cell[(tu.held | tu.awaiting) & (b == STALLED)]] = BLOCKED
    res[tu.cell[tu.idle & ((b == STALLED) | (b == BLOCKED))]] = DONTCARE
    # sockets over a read connection; over one with data in flight, STALLED -> BLOCKED (the network's
    # or the receiver's turn, not this application's)
    i = tu.sock_of
    b = base[tu.sock]
    long = held_long[i]
    new = b.copy()
    new[long] = np.where(waits[tu.group[i[long]]], BLOCKED, STALLED)
    new[tu.held[i] & ~long & (b == STALLED)] = DONTCARE
    new[tu.awaiting[i] & (b == STALLED)] = BLOCKED
    new[tu.idle[i] & ((b == STALLED) | (b == BLOCKED))] = DONTCARE
    new[tu.inflight[i] & (b == STALLED)] = BLOCKED
    res[tu.sock] = new
    # applications with such a socket follow those sockets
    if len(tu.app):
        n = len(base)
        any_stalled = np.zeros(n, dtype=bool)
        any_stalled[tu.app[new[tu.app_of] == STALLED]] = True
        any_blocked = np.zeros(n, dtype=bool)
        any_blocked[tu.app[new[tu.app_of] == BLOCKED]] = True
        apps = tu.apps
        res[apps] = np.where(any_stalled[apps], STALLED, np.where(base[apps] == HEALTHY, HEALTHY,
                             np.where(any_blocked[apps], BLOCKED, DONTCARE)))
    return res


def _latency(text: str):
    return "auto" if text.strip().lower() == "auto" else seconds(text)


def diagnose(batch: Batch, latency=DEFAULT_LATENCY, exchanges: int = 2, theta: int = 2):
    base = flowdiagnoser.diagnose(batch, theta=theta)
    tu = _shared_turns(batch, exchanges)
    if tu is None:
        return base
    if latency == "auto":   # a batch is one host's stretches (analysis.diagnose): one tier's latency
        latency = learned_latency(tu)
    out = {}
    for d in DIRS:
        res = apply(tu, base[d][0], latency).astype(np.int8)
        out[d] = (res, res == STALLED)
    return out


SYSTEM = RuleSystem(
    name="whoseturn",
    kind="label",
    summary="NeST for request/response connections (issue 42): tcp_info says whose turn it is; an idle "
            "keep-alive connection is not stalled, a request held longer than `latency` is a stall of "
            "the serving application (BLOCKED while it waits downstream), data in flight as "
            "flowdiagnoser:theta=2; elsewhere flowdiagnoser:theta=2; positive = STALLED",
    params=(
        Param("latency", DEFAULT_LATENCY, _latency, "s a request may be held (or awaited) before it counts as a "
              "stall (the serving tier's quiet-time latency); auto: learnt per host from its server ends' "
              "answered requests in its first seconds (learned_latency)"),
        Param("exchanges", 2, positive_int, "data segments each way a connection must have carried for the "
              "rules to read it (request/response traffic; fewer: the thesis rule)"),
        Param("theta", 2, positive_int, "Θ of the flowdiagnoser baseline"),
    ),
    diagnose=diagnose,
    presets=("whoseturn", "whoseturn:latency=auto", "whoseturn:latency=0.02", "whoseturn:latency=0.1"),
)
