"""The collector's writer of run.db: a snapshot, the modules born and dead at it, its counter and
tcp_info rows and the edges that changed, as one short transaction (a crash loses at most the
snapshot being written, and the runner, which writes the same run.db, never waits long for the
lock). Standard library only: it runs on testbed nodes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterable, Sequence

from rundir.db import ensure_indexes

INSERT_TCP_INFO = ("INSERT INTO tcp_info (seq, module, ca_state, retransmits, probes, backoff, rto_us, rtt_us, "
                   "rttvar_us, rcv_rtt_us, unacked, notsent_bytes, busy_us, rwnd_limited_us, sndbuf_limited_us, "
                   "data_sent_at, data_recv_at, ack_recv_at) "
                   "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
INSERT_STREAM_TASK = ("INSERT INTO stream_tasks (seq, operator, busy_ms_per_s, backpressured_ms_per_s, idle_ms_per_s, "
                      "acc_busy_ms, acc_backpressured_ms, acc_idle_ms, records_in, records_out) "
                      "VALUES (?,?,?,?,?,?,?,?,?,?)")
INSERT_PROBE = ("INSERT INTO probes (id, burst, module, remote, sport, kind, seq, sent, done, outcome, rtt_ms) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?)")


class SnapshotWriter:
    """Writes snapshots into run.db over connection `db` (rundir.db.connect)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def next_ids(self) -> tuple[int, int]:
        """(next module id, next snapshot seq): a collector that starts again goes on from there."""
        (last_id,) = self.db.execute("SELECT coalesce(max(id), 0) FROM modules").fetchone()
        (last_seq,) = self.db.execute("SELECT coalesce(max(seq), -1) FROM snapshots").fetchone()
        return last_id + 1, last_seq + 1

    def next_probe_ids(self) -> tuple[int, int]:
        """(next probe id, next burst): a collector that starts again goes on from there."""
        return self.db.execute("SELECT coalesce(max(id), 0) + 1, coalesce(max(burst), 0) + 1 FROM probes").fetchone()

    def snapshot(self, seq: int, now: float, wall: float, births: Sequence[tuple], deaths: Sequence[tuple],
                 counters: Sequence[tuple], tcp_info: Sequence[tuple], edges_born: Collection[tuple[int, int]] = (),
                 edges_died: Collection[tuple[int, int]] = (), probes: Sequence[tuple] = (),
                 stream_tasks: Sequence[tuple] = ()) -> None:
        """births: (id, kind, name, key, attrs JSON, born); deaths: (died, id); counters: (seq, module,
        dir, total_msgs, wait_ms, queued, errors, bytes); tcp_info: INSERT_TCP_INFO's values; edges as
        (parent, child), born or died at `now`; probes: INSERT_PROBE's values (finished since the last
        snapshot); stream_tasks: INSERT_STREAM_TASK's values (streams runs)."""
        db = self.db
        db.execute("BEGIN")
        db.execute("INSERT INTO snapshots VALUES (?, ?, ?)", (seq, now, wall))
        if births:
            db.executemany("INSERT INTO modules (id, kind, name, key, attrs, born) VALUES (?,?,?,?,?,?)", births)
        if deaths:
            db.executemany("UPDATE modules SET died = ? WHERE id = ?", deaths)
        db.executemany("INSERT INTO counters VALUES (?,?,?,?,?,?,?,?)", counters)
        if tcp_info:
            db.executemany(INSERT_TCP_INFO, tcp_info)
        if edges_born:
            db.executemany("INSERT OR IGNORE INTO edges (parent, child, born) VALUES (?,?,?)",
                           [(p, c, now) for p, c in edges_born])
        if edges_died:
            db.executemany("UPDATE edges SET died = ? WHERE parent = ? AND child = ? AND died IS NULL",
                           [(now, p, c) for p, c in edges_died])
        if probes:
            db.executemany(INSERT_PROBE, probes)
        if stream_tasks:
            db.executemany(INSERT_STREAM_TASK, stream_tasks)
        db.execute("COMMIT")

    def meta(self, values: dict[str, str]) -> None:
        """Keys of run.db's meta table (the collector's own cost, at its end)."""
        self.db.execute("BEGIN")
        self.db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(values.items()))
        self.db.execute("COMMIT")

    def close(self, now: float, alive: Iterable[int], probes: Sequence[tuple] = ()) -> None:
        """The end of the recording: every module and edge still alive dies now, the last probes'
        rows; the readers' index."""
        db = self.db
        db.execute("BEGIN")
        if probes:
            db.executemany(INSERT_PROBE, probes)
        db.executemany("UPDATE modules SET died = ? WHERE id = ?", [(now, m) for m in alive])
        db.execute("UPDATE edges SET died = ? WHERE died IS NULL", (now,))
        db.execute("COMMIT")
        ensure_indexes(db)
