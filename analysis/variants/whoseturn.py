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
from itertools import chain

import numpy as np

from analysis.model.batch import Batch
from analysis.model.stretches import DIRS, KINDS
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
    stalled_positive,
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


_TCP, _SOCKET, _APP = (KINDS.index(k) for k in ("tcp", "socket", "app"))


def _expand(first: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of `count[i]` consecutive items from `first[i]`: per item its row and its value."""
    row = np.repeat(np.arange(len(count)), count)
    step = np.arange(len(row)) - np.repeat(np.cumsum(count) - count, count)
    return row, np.repeat(first, count) + step


class _Running:
    """Per item, the sum of a value so far over the rows of its group (rows in time order, a row's
    items consecutive and in time order): its row's items up to it and every earlier row of its
    group. One cumsum per value, one sort of the rows for all; exact while the values are whole
    numbers (counter deltas are)."""

    def __init__(self, row: np.ndarray, row_first: np.ndarray, group: np.ndarray):
        self.row, self.row_first = row, row_first
        self.ends = np.append(row_first[1:], len(row))
        self.order = np.argsort(group, kind="stable")
        g = group[self.order]
        head = np.ones(len(g), dtype=bool)
        head[1:] = g[1:] != g[:-1]
        self.head = np.maximum.accumulate(np.where(head, np.arange(len(g)), 0))   # its group's first row

    def __call__(self, x: np.ndarray) -> np.ndarray:
        c = np.concatenate([[0.0], np.cumsum(x)])
        before = c[self.row_first]                 # the sum up to each row's first item
        total = (c[self.ends] - before)[self.order]   # each row's own sum, rows sorted by group
        excl = np.cumsum(total) - total            # the earlier rows', over all groups ...
        carry = np.empty(len(total))
        carry[self.order] = excl - excl[self.head]  # ... less those of the groups before
        return c[1:] - (before - carry)[self.row]


def _at(sts, has: np.ndarray, get, fill, dtype, cell: np.ndarray, k: np.ndarray) -> np.ndarray:
    """get(stretch) (modules, snapshots) at these cells (of stretches k), `fill` in a stretch without
    a turn. A run of format 4 to 7 has one value per stretch (a broadcast: unknown everywhere),
    read per stretch without a copy per cell."""
    arrays = [np.asarray(get(st)) if h else None for st, h in zip(sts, has, strict=True)]
    if all(a is None or not any(a.strides) for a in arrays):
        return np.array([fill if a is None or not a.size else a.flat[0] for a in arrays], dtype=dtype)[k]
    return np.concatenate([a.ravel() if a is not None else np.full(st.n * st.t, fill, dtype=dtype)
                           for st, a in zip(sts, arrays, strict=True)])[cell]


def _module_ids(sts) -> np.ndarray:
    """Every stretch's module ids, in order (ints from a run, strings from JSON snapshots)."""
    try:
        return np.fromiter(chain.from_iterable(st.modules for st in sts), dtype=np.int64)
    except (TypeError, ValueError):
        return np.asarray([m for st in sts for m in st.modules])


def turns(batch: Batch, exchanges: int) -> Turns | None:
    """The turn of every TCP cell the rules read (module docstring), built over all stretches of the
    batch at once; None when none is read (no stretch records a turn and a TCP state, or no
    connection has exchanged enough): the thesis rule. The stretches are taken in time order, so that
    a connection's exchanges add up across its stretches, and a service port read in one stretch is
    read in the later ones (tests/support/whoseturn_per_stretch.py: the same one stretch at a time)."""
    sts = batch.stretches
    has = np.array([getattr(st, "turn", None) is not None and st.tcpstate is not None for st in sts], dtype=bool)
    if not has.any():
        return None
    n = np.array([st.n for st in sts], dtype=np.int64)
    t = np.array([st.t for st in sts], dtype=np.int64)
    mbase = np.concatenate([[0], np.cumsum(n)])     # first module row of each stretch
    gbase = np.concatenate([[0], np.cumsum(t)])     # first snapshot (group) of each stretch
    order = sorted(range(len(sts)), key=lambda k: (sts[k].seqs[0] if sts[k].t else 0))
    rank = np.empty(len(sts), dtype=np.int64)
    rank[order] = np.arange(len(sts))
    kind = batch.module_kinds
    mod_k = np.repeat(np.arange(len(sts)), n)
    in_order = order == sorted(order)
    rows = np.arange(int(mbase[-1])) if in_order else \
        np.concatenate([np.arange(mbase[k], mbase[k + 1]) for k in order] or [np.zeros(0, dtype=np.int64)])
    rows = rows[kind[rows] == _TCP]                 # TCP module rows, in time order
    if not len(rows):
        return None
    rk = mod_k[rows]
    rt = t[rk]
    # the TCP cells, row by row, snapshot by snapshot
    first_cell = batch.offsets[rk] + (rows - mbase[rk]) * rt
    row, cell = _expand(first_cell, rt)
    row_first = np.cumsum(rt) - rt
    running = _Running(row, row_first, _module_ids(sts)[rows])
    cin, cout = batch.counters("in"), batch.counters("out")
    enough = (running(cin.tm[cell]) >= exchanges) & (running(cout.tm[cell]) >= exchanges)
    k = rk[row]
    j = cell - first_cell[row]
    group = gbase[k] + j
    on = has[k]
    ts_known = _at(sts, has, lambda st: st.tcpstate.known, False, bool, cell, k) & on
    tu_known = _at(sts, has, lambda st: st.turn.known, False, bool, cell, k)
    sent = _at(sts, has, lambda st: st.tcpstate.data_sent_at, np.nan, float, cell, k)
    recv = _at(sts, has, lambda st: st.tcpstate.data_recv_at, np.nan, float, cell, k)
    unacked = _at(sts, has, lambda st: st.turn.unacked, np.nan, float, cell, k)
    notsent = _at(sts, has, lambda st: st.turn.notsent, np.nan, float, cell, k)
    mono = np.concatenate([np.asarray(st.tcpstate.mono, dtype=float) if h else np.zeros(st.t)
                           for st, h in zip(sts, has, strict=True)])[group]
    server = np.concatenate([np.asarray(st.turn.server, dtype=bool) if h else np.zeros(st.n, dtype=bool)
                             for st, h in zip(sts, has, strict=True)])[rows][row]
    port_row = np.concatenate([np.asarray(st.turn.port, dtype=np.int64) if h and st.turn.port is not None
                               else np.full(st.n, -1, dtype=np.int64)
                               for st, h in zip(sts, has, strict=True)])[rows]
    with np.errstate(invalid="ignore"):
        inflight = (unacked > 0) | (notsent > 0) | (cout.queued[cell] > 0)
        recv_last = recv > np.where(np.isnan(sent), -np.inf, sent)
        sent_last = sent > np.where(np.isnan(recv), -np.inf, recv)
    unread = cin.queued[cell] > 0
    # the host's calls waiting for an answer: client ends with a known TCP state, exchanges or not
    calls = ts_known & ~server & (inflight | sent_last) & ~unread
    # read: known and exchanged enough, or on a service port read in an earlier stretch
    ruled = ts_known & tu_known
    first = np.zeros(len(rows), dtype=bool)         # connections read on their exchanges ...
    first[row[ruled & enough]] = True
    first &= port_row >= 0
    if first.any():   # ... and each service port's first stretch read (the rows are in time order)
        ports, at = np.unique(port_row[first], return_index=True)
        since = rank[rk[first]][at]
        i = np.minimum(np.searchsorted(ports, port_row), len(ports) - 1)
        later = (ports[i] == port_row) & (since[i] < rank[rk])
        enough |= later[row]
    ruled &= enough
    if not ruled.any():
        return None
    quiet = ~inflight[ruled]
    srv, r_recv, r_sent = server[ruled], recv_last[ruled], sent_last[ruled]
    held = quiet & (unread[ruled] | (srv & r_recv))
    awaiting = quiet & ~held & ~srv & r_sent
    sent_r, recv_r, mono_r = sent[ruled], recv[ruled], mono[ruled]
    answered = srv & ~r_recv & ~np.isnan(sent_r) & ~np.isnan(recv_r)   # the server end spoke last
    pos = np.full(len(cell), -1, dtype=np.int64)
    pos[ruled] = np.arange(int(ruled.sum()))
    # sockets over a read TCP cell, and applications over those sockets
    e, ek = batch.module_edges
    if not in_order:
        by_time = np.argsort(rank[ek], kind="stable")
        e, ek = e[by_time], ek[by_time]
    tcp_row = np.full(int(mbase[-1]), -1, dtype=np.int64)
    tcp_row[rows] = np.arange(len(rows))
    se = (kind[e[:, 0]] == _SOCKET) & (kind[e[:, 1]] == _TCP)
    sk = ek[se]
    at_e, jj = _expand(np.zeros(int(se.sum()), dtype=np.int64), t[sk])
    sock_of = pos[row_first[tcp_row[e[se, 1]]][at_e] + jj]
    keep = sock_of >= 0
    sock = (batch.offsets[sk] + (e[se, 0] - mbase[sk]) * t[sk])[at_e] + jj
    sock, sock_of = sock[keep], sock_of[keep]
    spos = np.full(batch.n_cells, -1, dtype=np.int64)
    spos[sock] = np.arange(len(sock))
    ae = (kind[e[:, 0]] == _APP) & (kind[e[:, 1]] == _SOCKET)
    ak = ek[ae]
    at_a, ja = _expand(np.zeros(int(ae.sum()), dtype=np.int64), t[ak])
    app_of = spos[(batch.offsets[ak] + (e[ae, 1] - mbase[ak]) * t[ak])[at_a] + ja]
    keep = app_of >= 0
    app = ((batch.offsets[ak] + (e[ae, 0] - mbase[ak]) * t[ak])[at_a] + ja)[keep]
    return Turns(cell=cell[ruled], inflight=~quiet, held=held, awaiting=awaiting, idle=quiet & ~held & ~awaiting,
                 age_recv=mono_r - recv_r, age_sent=mono_r - sent_r, server=srv, group=group[ruled],
                 n_groups=int(gbase[-1]), sock=sock, sock_of=sock_of, app=app, app_of=app_of[keep],
                 apps=np.unique(app), call_group=group[calls], call_age=(mono - sent)[calls].astype(float),
                 turn_at=recv_r[answered].astype(float), turn_s=(sent_r - recv_r)[answered].astype(float))


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
    return stalled_positive({d: apply(tu, base[d][0], latency).astype(np.int8) for d in DIRS})


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
