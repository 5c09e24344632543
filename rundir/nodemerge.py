"""Several testbed nodes' recordings merged into one run.db on one timeline (docs/ssh-backend.md,
"Several monitored hosts" and "Offsets").

On Mininet one collector records every monitored host (one snapshot sequence, one clock). On testbed
nodes each monitored host has a collector of its own, writing a run.db on its node on that node's
CLOCK_MONOTONIC; the runner measured each node's offset to the reference clock (the first monitored
host's). Merging puts them on one timeline, as a Mininet run is:

- the reference node's snapshots are the run's, verbatim (offset 0);
- every other node's snapshot k, taken at `mono_k` on its clock, is at `mono_k + offset` on the
  reference clock and is placed on the reference snapshot nearest that time (both follow the same
  interval, so the map is one to one but for the odd collision or gap at the edges); where two of a
  node's snapshots land on one reference snapshot, a module's later values are kept (the counters are
  cumulative), and a reference snapshot none lands on carries the node's values forward, as readers do
  between rows;
- its modules and edges get new ids after those already merged (a key another node's module has
  already becomes `<key>%<node>`: machines share no pid, inode or interface name space), their birth and death the time of the
  reference snapshot their snapshot landed on (a module is born at "the first snapshot it appeared
  in"), the collector's final close converted with the offset; tcp_info's stamps and probes' times are
  converted with the offset.

A node's message trace (messages, traced) is converted with its offset: every time in run.db is on
the reference clock; differences of times on one node are unchanged (the offset is one constant per
node). Standard library only; the one place the SQL of the merge lives.
"""

from __future__ import annotations

import bisect
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from rundir.db import TRACE_SCHEMA, ensure_indexes


@dataclass(frozen=True)
class NodeRecording:
    """A node's run.db (its collector's tables, or its drainer's), and its clock against the reference."""

    node: str
    path: Path
    offset: float = 0.0      # seconds to add to the node's readings: reference = node + offset


def grid_map(node_monos: list[float], offset: float, ref_monos: list[float]) -> list[int]:
    """For each node snapshot time (node clock), the index of the reference snapshot nearest it on the
    reference clock (clamped to the first and last)."""
    out = []
    n = len(ref_monos)
    for t in node_monos:
        t = t + offset
        j = bisect.bisect_left(ref_monos, t)
        if j <= 0:
            out.append(0)
        elif j >= n:
            out.append(n - 1)
        else:
            out.append(j if ref_monos[j] - t < t - ref_monos[j - 1] else j - 1)
    return out


def _max(db: sqlite3.Connection, sql: str) -> int:
    return db.execute(sql).fetchone()[0] or 0


def merge_nodes(db: sqlite3.Connection, reference: NodeRecording, others: list[NodeRecording]) -> int:
    """Merge the reference node's collector tables as they are and every other node's onto its
    snapshots (module docstring); returns the snapshots of the merged run. The reference's snapshots
    must be the first in `db` (it holds none before). A `reference` with an offset is another node
    standing in for a reference whose recording is lost: its times are converted too."""
    if db.in_transaction:
        db.commit()
    _attach(db, reference.path)
    try:
        for table in ("snapshots", "modules", "edges", "counters", "tcp_info", "probes"):
            db.execute(f"INSERT INTO main.{table} SELECT * FROM c.{table}")
        db.commit()
    finally:
        db.execute("DETACH DATABASE c")
    if reference.offset:   # the grid is another node's (the reference's recording is lost): convert it
        off = {"off": reference.offset}
        db.execute("UPDATE snapshots SET mono = mono + :off", off)
        db.execute("UPDATE modules SET born = born + :off, died = died + :off", off)
        db.execute("UPDATE edges SET born = born + :off, died = died + :off", off)
        db.execute("UPDATE tcp_info SET data_sent_at = data_sent_at + :off, data_recv_at = data_recv_at + :off, "
                   "ack_recv_at = ack_recv_at + :off", off)
        db.execute("UPDATE probes SET sent = sent + :off, done = done + :off", off)
        db.commit()
    ref = db.execute("SELECT seq, mono FROM snapshots ORDER BY seq").fetchall()
    ref_seqs, ref_monos = [s for s, _ in ref], [m for _, m in ref]
    for rec in others:
        if ref:
            _merge_one(db, rec, ref_seqs, ref_monos)
    ensure_indexes(db)
    return len(ref)


def _attach(db: sqlite3.Connection, path: Path) -> None:
    db.execute("ATTACH DATABASE ? AS c", (str(path),))


def _merge_one(db: sqlite3.Connection, rec: NodeRecording, ref_seqs: list[int], ref_monos: list[float]) -> None:
    _attach(db, rec.path)
    try:
        snaps = db.execute("SELECT seq, mono FROM c.snapshots ORDER BY seq").fetchall()
        idx = grid_map([m for _, m in snaps], rec.offset, ref_monos)
        db.execute("CREATE TEMP TABLE IF NOT EXISTS seqmap (nseq INTEGER PRIMARY KEY, nmono REAL, rseq INTEGER, "
                   "rmono REAL)")
        db.execute("DELETE FROM temp.seqmap")
        db.executemany("INSERT INTO temp.seqmap VALUES (?, ?, ?, ?)",
                       [(s, m, ref_seqs[j], ref_monos[j]) for (s, m), j in zip(snaps, idx, strict=True)])
        db.execute("CREATE INDEX IF NOT EXISTS temp.seqmap_mono ON seqmap (nmono)")
        shift = _max(db, "SELECT max(id) FROM main.modules")
        off = rec.offset
        # A time that is a node snapshot's becomes that snapshot's place on the grid; any other (the
        # collector's close) is converted with the offset.
        on_grid = "coalesce((SELECT rmono FROM temp.seqmap WHERE nmono = {0}), {0} + :off)"
        # A key another node's module has already (testbed machines each have their own pids, socket
        # inodes and interface names: eth1 on every node) gets the node's name, so that no fault
        # target (rundir.targets, by key) resolves to another node's module.
        db.execute(f"INSERT INTO main.modules SELECT id + :shift, kind, name, "
                   f"CASE WHEN key IN (SELECT key FROM main.modules) THEN key || '%' || :node ELSE key END, attrs, "
                   f"{on_grid.format('m.born')}, "
                   f"CASE WHEN m.died IS NULL THEN NULL ELSE {on_grid.format('m.died')} END FROM c.modules m",
                   {"shift": shift, "off": off, "node": rec.node})
        db.execute(f"INSERT INTO main.edges SELECT parent + :shift, child + :shift, {on_grid.format('e.born')}, "
                   f"CASE WHEN e.died IS NULL THEN NULL ELSE {on_grid.format('e.died')} END FROM c.edges e",
                   {"shift": shift, "off": off})
        # The later of two rows landing on one reference snapshot (SQLite takes the bare columns of
        # max()'s row).
        db.execute("INSERT INTO main.counters SELECT rseq, module + :shift, dir, total_msgs, wait_ms, queued, errors, "
                   "bytes FROM (SELECT s.rseq, c.module, c.dir, max(c.seq), c.total_msgs, c.wait_ms, c.queued, "
                   "c.errors, c.bytes FROM c.counters c JOIN temp.seqmap s ON s.nseq = c.seq "
                   "GROUP BY s.rseq, c.module, c.dir)", {"shift": shift})
        cols = [r[1] for r in db.execute("PRAGMA c.table_info(tcp_info)")]
        stamps = {"data_sent_at", "data_recv_at", "ack_recv_at"}
        rest = [c for c in cols if c not in ("seq", "module")]
        inner = ", ".join(f"t.{c}" for c in rest)
        outer = ", ".join(f"{c} + :off" if c in stamps else c for c in rest)
        db.execute(f"INSERT INTO main.tcp_info (seq, module, {', '.join(rest)}) SELECT rseq, module + :shift, "
                   f"{outer} FROM (SELECT s.rseq, t.module, max(t.seq), {inner} FROM c.tcp_info t "
                   f"JOIN temp.seqmap s ON s.nseq = t.seq GROUP BY s.rseq, t.module)",
                   {"shift": shift, "off": off})
        pid_shift = _max(db, "SELECT max(id) FROM main.probes")
        burst_shift = _max(db, "SELECT max(burst) FROM main.probes")
        db.execute("INSERT INTO main.probes SELECT p.id + :pid, p.burst + :burst, p.module + :shift, p.remote, "
                   "p.sport, p.kind, coalesce(s.rseq, 0), p.sent + :off, p.done + :off, p.outcome, p.rtt_ms "
                   "FROM c.probes p LEFT JOIN temp.seqmap s ON s.nseq = p.seq",
                   {"pid": pid_shift, "burst": burst_shift, "shift": shift, "off": off})
        db.commit()
    except BaseException:
        db.rollback()
        raise
    finally:
        db.execute("DETACH DATABASE c")


def merge_trace(db: sqlite3.Connection, rec: NodeRecording) -> int:
    """A node's message trace (its drainer's messages and traced rows) into `db`, its times converted
    to the reference clock; returns the messages merged (0 when the node recorded no trace)."""
    if db.in_transaction:
        db.commit()
    db.executescript(TRACE_SCHEMA)
    _attach(db, rec.path)
    try:
        if not db.execute("SELECT 1 FROM c.sqlite_master WHERE type = 'table' AND name = 'messages'").fetchone():
            return 0
        db.execute("INSERT INTO main.messages SELECT mono + :off, host, pid, tid, fd, call, bytes, local, remote "
                   "FROM c.messages", {"off": rec.offset})
        db.execute("INSERT OR REPLACE INTO main.traced SELECT * FROM c.traced")
        n = db.execute("SELECT count(*) FROM c.messages").fetchone()[0]
        db.commit()
        return n
    except BaseException:
        db.rollback()
        raise
    finally:
        db.execute("DETACH DATABASE c")
