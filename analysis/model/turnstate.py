"""Whose turn it is on each TCP connection (run format 8, issue 42): what the whoseturn variant reads
beside analysis.model.tcpstate's state, as arrays aligned with a stretch.

- `unacked`, `notsent`: tcp_info's tcpi_unacked (segments sent, not yet acknowledged) and
  tcpi_notsent_bytes (written, not yet sent), carried forward from the module's last tcp_info row
  like the state (a row is written when a value changes); NaN where unknown: before the module's
  first row, a NULL. A run of format 4 to 7 has no such columns: they are unknown everywhere
  (`known` True, values NaN), and the send queue (the TCP module's outbound `queued`, inet_diag's
  wqueue: bytes not yet acknowledged, sent or not) alone says what is in flight.
- `server`: per module, the connection's server end, from its ports (attrs `sport` < `dport`: a
  client's port is an ephemeral one, allocated from the top of the port range, a server's is the
  port it listens on: 80, 3306, 8000, 11211 here). A module without both ports is not a server end.

The chrono stats the collector records beside them (busy, rwnd-limited and sndbuf-limited time) are
not read here: no rule uses them yet (docs/diagnosis.md, "whoseturn").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rundir import repair
from rundir.db import connect


@dataclass
class TurnState:
    """One stretch's whose-turn fields: (modules, snapshots) arrays, and `server` per module."""

    known: np.ndarray     # bool: a tcp_info row with the fields at or before this snapshot
    unacked: np.ndarray   # float, NaN where unknown
    notsent: np.ndarray
    server: np.ndarray    # bool (modules,)
    port: np.ndarray | None = None   # (modules,) the connection's service port (the server end's), -1 unknown


def server_ends(mods: list[tuple]) -> dict[int, tuple[bool, int]]:
    """Per TCP module (rows as RunStretches.modules): whether it is its connection's server end
    (module docstring), and the connection's service port (the lower of the two; -1 unknown)."""
    out = {}
    for i, k, _name, _key, attrs, *_ in mods:
        if k != "tcp":
            continue
        a = repair.as_dict(attrs)
        sport, dport = a.get("sport"), a.get("dport")
        known = isinstance(sport, int) and isinstance(dport, int)
        out[i] = (known and sport < dport, min(sport, dport) if known else -1)
    return out


def _per_module(server: dict, modules) -> tuple[np.ndarray, np.ndarray]:
    got = [server.get(int(m), (False, -1)) for m in modules]
    return np.array([g[0] for g in got], dtype=bool), np.array([g[1] for g in got], dtype=np.int64)


def read_rows(db: Path) -> np.ndarray | None:
    """(seq, module, unacked, notsent_bytes) rows of run.db's tcp_info with the fields, sorted by
    module then seq; None when the table has no such columns (format <= 7)."""
    from rundir.read import turn_rows

    conn = connect(db, readonly=True)
    try:
        rows = turn_rows(conn)
    finally:
        conn.close()
    if rows is None:
        return None
    a = np.array([[float(x) if isinstance(x, int | float) else np.nan for x in r] for r in rows],
                 dtype=float).reshape(-1, 4)
    a = a[np.isfinite(a[:, 0]) & np.isfinite(a[:, 1])]
    return a[np.lexsort((a[:, 0], a[:, 1]))]


def attach(stretches, db: Path, seqs: np.ndarray, mods: list[tuple]) -> None:
    """Set `Stretch.turn` (a TurnState) on every stretch (module docstring). A module's last row at or
    before a snapshot holds for it."""
    rows = read_rows(db)
    server = server_ends(mods)
    if rows is None:   # format 4-7: the send queue alone says what is in flight (unacked + not sent)
        for st in stretches:
            nan = np.broadcast_to(np.nan, (st.n, st.t))
            st.turn = TurnState(np.broadcast_to(True, (st.n, st.t)), nan, nan, *_per_module(server, st.modules))
        return
    s_count = len(seqs)
    pos = np.searchsorted(seqs, rows[:, 0])
    ok = pos < s_count
    ok[ok] = seqs[pos[ok]] == rows[ok, 0]
    rows, pos = rows[ok], pos[ok]
    key = rows[:, 1].astype(np.int64) * max(s_count, 1) + pos
    order = np.argsort(key, kind="stable")
    key, rows = key[order], rows[order]
    for st in stretches:
        ids = np.asarray(st.modules, dtype=np.int64)
        at = np.searchsorted(seqs, st.seqs)
        want = ids[:, None] * max(s_count, 1) + at[None, :]
        idx = np.searchsorted(key, want, side="right") - 1
        known = idx >= 0
        known[known] = rows[idx[known], 1].astype(np.int64) == np.broadcast_to(ids[:, None], want.shape)[known]
        unacked = np.full(want.shape, np.nan)
        notsent = np.full(want.shape, np.nan)
        unacked[known] = rows[idx[known], 2]
        notsent[known] = rows[idx[known], 3]
        st.turn = TurnState(known, unacked, notsent, *_per_module(server, st.modules))
