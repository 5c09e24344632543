"""Per-snapshot TCP state of each TCP connection (run format 4), as arrays aligned with a stretch.

run.db's `tcp_info` table (rundir/db.py, docs/run-format.md) has a row per TCP module when its
values change; a row's values hold for every later snapshot of the module's life until the next row
(carried forward, like counters). Format 4 adds to `rtt_us`, `rttvar_us` the fields
`flowdiagnoser:tcpstate=on` reads (`TCP_STATE_COLUMNS`):

- `backoff`, `ca_state`, `retransmits`, `probes`: tcp_info's u8 fields tcpi_backoff, tcpi_ca_state
  (0 Open, 1 Disorder, 2 CWR, 3 Recovery, 4 Loss), tcpi_retransmits (consecutive RTO retransmissions
  of the head segment), tcpi_probes (unanswered zero-window probes);
- `rto_us`: tcpi_rto, microseconds;
- `data_sent_at`, `data_recv_at`, `ack_recv_at`: the run's reference clock (snapshots.mono, seconds)
  of the last data sent, data received and ACK received.

A run without these columns (format <= 3) has no state: rundir.read.read_tcp_state returns None and every stretch
keeps `Stretch.tcpstate = None`. A value that is NULL or not a number is unknown (NaN), and so is
every field of a module/snapshot before the module's first row (`TcpState.known` False).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from rundir.db import TCP_STATE_COLUMNS

CA_RECOVERY, CA_LOSS = 3, 4


@dataclass
class TcpState:
    """One stretch's TCP state: every field (modules, snapshots) float, NaN where unknown."""

    known: np.ndarray        # bool: a tcp_info row at or before this snapshot (carried forward)
    mono: np.ndarray         # (snapshots,) the snapshot times (seconds, snapshots.mono)
    backoff: np.ndarray
    ca_state: np.ndarray
    retransmits: np.ndarray
    probes: np.ndarray
    rto_us: np.ndarray
    data_sent_at: np.ndarray
    data_recv_at: np.ndarray
    ack_recv_at: np.ndarray

    @classmethod
    def unknown(cls, n: int, t: int, mono=None) -> TcpState:
        """No row for any module (e.g. a stretch without TCP connections)."""
        nan = np.full((n, t), np.nan)
        return cls(np.zeros((n, t), dtype=bool), np.zeros(t) if mono is None else np.asarray(mono, dtype=float),
                   *(nan.copy() for _ in TCP_STATE_COLUMNS))

    def take(self, cols) -> TcpState:
        return TcpState(*(getattr(self, f.name)[..., cols] for f in fields(self)))


def attach(stretches, rows, seqs: np.ndarray, mono: np.ndarray) -> None:
    """Set `Stretch.tcpstate` of every stretch from the rows of rundir.read.read_tcp_state (None: leave it None).

    Each module's last row at or before a snapshot holds for that snapshot (carried forward over the
    module's life: a stretch only has the snapshots its modules are present in). Of two rows for one
    (seq, module) the later one wins. Rows of a seq that is no snapshot of the run are left out."""
    if rows is None:
        return
    seq = rows["seq"].to_numpy(dtype=float)
    mod = rows["module"].to_numpy(dtype=float)
    s_count = len(seqs)
    pos = np.searchsorted(seqs, seq)
    ok = (pos < s_count) & (mod == np.round(mod)) & (mod >= 0)
    ok[ok] = seqs[pos[ok]] == seq[ok]
    vals = np.column_stack([rows[c].to_numpy(dtype=float) for c in TCP_STATE_COLUMNS])[ok] if len(rows) else \
        np.zeros((0, len(TCP_STATE_COLUMNS)))
    key = mod[ok].astype(np.int64) * s_count + pos[ok]
    order = np.argsort(key, kind="stable")
    key, vals, rmod = key[order], vals[order], mod[ok].astype(np.int64)[order]
    if len(key) == 0:   # no row (a run without tcp_info rows): nothing known anywhere, as below
        for st in stretches:
            nan = np.broadcast_to(np.nan, (st.n, st.t))
            st.tcpstate = TcpState(np.zeros((st.n, st.t), dtype=bool), mono[np.searchsorted(seqs, st.seqs)],
                                   *(nan for _ in TCP_STATE_COLUMNS))
        return
    for st in stretches:
        ids = np.asarray(st.modules, dtype=np.int64)
        at = np.searchsorted(seqs, st.seqs)
        want = ids[:, None] * s_count + at[None, :]
        idx = np.searchsorted(key, want, side="right") - 1
        known = idx >= 0
        known[known] = rmod[idx[known]] == np.broadcast_to(ids[:, None], want.shape)[known]
        if not known.any():   # nothing known here: one read-only NaN for every field, no memory
            nan = np.broadcast_to(np.nan, (st.n, st.t))
            st.tcpstate = TcpState(known, mono[at], *(nan for _ in TCP_STATE_COLUMNS))
            continue
        state = TcpState.unknown(st.n, st.t, mono[at])
        state.known = known
        for i, c in enumerate(TCP_STATE_COLUMNS):
            getattr(state, c)[known] = vals[idx[known], i]
        st.tcpstate = state
