"""The whose-turn builder as it was before issue 42's speed work: one stretch at a time, in time
order, a connection's exchanges carried from stretch to stretch in a dict, the request/response
ports in a set. Kept as the reference that tests/test_whoseturn.py compares
analysis.variants.whoseturn.turns (all stretches at once) with, field by field, on batches of many
stretches (the per-snapshot reference, tests/support/reference_whoseturn.py, sees one stretch alone).
"""

from __future__ import annotations

import numpy as np

from analysis.model.batch import Batch
from analysis.model.stretches import DIRS, Stretch
from analysis.variants.whoseturn import Turns


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
