"""Plain per-snapshot reference for `whoseturn` (issue 42), written from the rules in
analysis/variants/whoseturn.py's docstring one module and one snapshot at a time; it shares no code
with analysis.variants. One stretch alone: a connection's exchanges are counted from the stretch's
first snapshot. Importing this module registers it in tests.support.reference.REFERENCE.
"""

from __future__ import annotations

import math

import numpy as np

from analysis.model.stretches import DIRS, Stretch
from analysis.variants import BLOCKED, DONTCARE, HEALTHY, STALLED
from tests.support import reference as _reference


def _num(a, m, t) -> float | None:
    v = float(a[m, t])
    return None if math.isnan(v) else v


def turn_of(st: Stretch, m: int, t: int, exchanges: int) -> str | None:
    """'inflight', 'held', 'awaiting', 'idle', or None (the rules do not read this cell)."""
    tu, ts = getattr(st, "turn", None), st.tcpstate
    if st.kinds[m] != "tcp" or tu is None or ts is None or not tu.known[m, t] or not ts.known[m, t]:
        return None
    for d in DIRS:
        if st.counters[d].tm[m, : t + 1].sum() < exchanges:
            return None
    unacked, notsent = _num(tu.unacked, m, t), _num(tu.notsent, m, t)
    if (unacked or 0) > 0 or (notsent or 0) > 0 or st.counters["out"].queued[m, t] > 0:
        return "inflight"
    sent, recv = _num(ts.data_sent_at, m, t), _num(ts.data_recv_at, m, t)
    recv_last = recv is not None and (sent is None or recv > sent)
    sent_last = sent is not None and (recv is None or sent > recv)
    server = bool(tu.server[m])
    if st.counters["in"].queued[m, t] > 0 or (server and recv_last):
        return "held"
    if not server and sent_last:
        return "awaiting"
    return "idle"


def ref_whoseturn(st: Stretch, latency=0.05, exchanges=2, theta=2):
    base = _reference.REFERENCE["flowdiagnoser"](st, theta=theta)
    ts = st.tcpstate
    turn = {(m, t): turn_of(st, m, t, exchanges) for m in range(st.n) for t in range(st.t)}

    def age(field, m, t):
        v = _num(getattr(ts, field), m, t)
        return None if v is None else float(ts.mono[t]) - v

    def long(field, m, t):
        a = age(field, m, t)
        return a is not None and a > latency

    server = getattr(getattr(st, "turn", None), "server", np.zeros(st.n, dtype=bool))
    def calling(m, t) -> bool:   # a client end waiting for an answer, exchanges or not
        if st.kinds[m] != "tcp" or ts is None or getattr(st, "turn", None) is None or server[m] or not ts.known[m, t]:
            return False
        tu = st.turn
        sent, recv = _num(ts.data_sent_at, m, t), _num(ts.data_recv_at, m, t)
        flight = ((_num(tu.unacked, m, t) or 0) > 0 or (_num(tu.notsent, m, t) or 0) > 0
                  or st.counters["out"].queued[m, t] > 0)
        sent_last = sent is not None and (recv is None or sent > recv)
        return (flight or sent_last) and not st.counters["in"].queued[m, t] > 0 and long("data_sent_at", m, t)

    waits_down = [any(calling(m, t) for m in range(st.n)) for t in range(st.t)]
    tcp_of = {p: c for p, c in st.edges if st.kinds[p] == "socket" and st.kinds[c] == "tcp"}
    out = {}
    for d in DIRS:
        b = base[d][0]
        res = b.copy()
        ruled_socket = np.zeros((st.n, st.t), dtype=bool)
        for m in range(st.n):
            for t in range(st.t):
                x = turn[(m, t)]
                if x in ("held", "awaiting") and b[m, t] == STALLED:
                    res[m, t] = BLOCKED
                elif x == "idle" and b[m, t] in (STALLED, BLOCKED):
                    res[m, t] = DONTCARE
        for s, c in tcp_of.items():
            for t in range(st.t):
                x = turn[(c, t)]
                if x is None:
                    continue
                ruled_socket[s, t] = True
                if x == "inflight":
                    if b[s, t] == STALLED:
                        res[s, t] = BLOCKED
                elif x == "held" and long("data_recv_at", c, t):
                    res[s, t] = BLOCKED if waits_down[t] else STALLED
                elif x == "held" and b[s, t] == STALLED:
                    res[s, t] = DONTCARE
                elif x == "awaiting" and b[s, t] == STALLED:
                    res[s, t] = BLOCKED
                elif x == "idle" and b[s, t] in (STALLED, BLOCKED):
                    res[s, t] = DONTCARE
        for a in range(st.n):
            if st.kinds[a] != "app":
                continue
            kids = [c for p, c in st.edges if p == a and st.kinds[c] == "socket"]
            for t in range(st.t):
                mine = [k for k in kids if ruled_socket[k, t]]
                if not mine:
                    continue
                if any(res[k, t] == STALLED for k in mine):
                    res[a, t] = STALLED
                elif b[a, t] == HEALTHY:
                    res[a, t] = HEALTHY
                elif any(res[k, t] == BLOCKED for k in mine):
                    res[a, t] = BLOCKED
                else:
                    res[a, t] = DONTCARE
        out[d] = (res, res == STALLED)
    return out


_reference.REFERENCE["whoseturn"] = ref_whoseturn
