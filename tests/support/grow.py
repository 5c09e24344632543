"""A finished run.db replayed into a new run directory snapshot by snapshot, the way the collector and
the runner write it while a run goes on: `Grower(src, dst).grow(seq)`.

Each grow() is one transaction, as a collector snapshot is: the new snapshots, the modules born by
then (died still NULL), the deaths of modules and edges that happened by then, the counters and
tcp_info rows in seq order (the collector appends them in that order), the probes done by then (the
collector writes a probe's row with the first snapshot after its outcome; one whose done is not a
number at finish()), and the faults begun by then (end NULL until they end). finish() writes what the collector's close() and the runner's end write:
the remaining deaths and the manifest's final status. The live engine's tests and bench_live use it
to compare what analysis.live saw while the run grew with the offline analysis of the whole run.
"""

from __future__ import annotations

import json
from pathlib import Path

from rundir.db import connect, create_db

_TABLES = {
    "counters": "seq, module, dir, total_msgs, wait_ms, queued, errors, bytes",
    "tcp_info": "seq, module, rtt_us, rttvar_us, backoff, ca_state, retransmits, probes, rto_us, data_sent_at, "
                "data_recv_at, ack_recv_at",
    "stream_tasks": "seq, operator, busy_ms_per_s, backpressured_ms_per_s, idle_ms_per_s, acc_busy_ms, "
                    "acc_backpressured_ms, acc_idle_ms, records_in, records_out",
}


class Grower:
    def __init__(self, src: Path | str, dst: Path | str):
        src, self.dst = Path(src), Path(dst)
        self.dst.mkdir(parents=True, exist_ok=True)
        self.src = connect(src / "run.db" if src.is_dir() else src, readonly=True)
        self.db = create_db(self.dst / "run.db")
        self.db.isolation_level = None
        self.manifest = {"format_version": 4, "status": "complete", "run_id": self.dst.name}
        if src.is_dir() and (src / "manifest.json").is_file():
            self.manifest = json.loads((src / "manifest.json").read_text())
        self._write_manifest("running")
        self.columns = {}    # what the source has of each table (older formats have fewer columns)
        for table, cols in _TABLES.items():
            have = {r[1] for r in self.src.execute(f"PRAGMA table_info({table})")}
            self.columns[table] = ", ".join(c for c in cols.split(", ") if c in have)
        self.columns = {t: c for t, c in self.columns.items() if c}
        self.snaps = self.src.execute("SELECT seq, mono, wall FROM snapshots ORDER BY seq").fetchall()
        self.mono = {s: m for s, m, _ in self.snaps}
        self.last = self.snaps[-1][0] if self.snaps else -1
        self.seq = -1
        self.modules_in: set[int] = set()
        self.modules_dead: set[int] = set()
        self.edges_in: set[tuple] = set()
        self.edges_dead: set[tuple] = set()
        self.faults_in: set[int] = set()
        self.faults_ended: set[int] = set()
        self.probes_in: set[int] = set()   # rowids of the source's probes rows written
        self.probe_cols = [r[1] for r in self.src.execute("PRAGMA table_info(probes)")]

    def close(self) -> None:
        self.src.close()
        self.db.close()

    def _write_manifest(self, status: str) -> None:
        m = dict(self.manifest, status=status)
        (self.dst / "manifest.json").write_text(json.dumps(m, indent=1) + "\n")

    def grow(self, upto: int) -> None:
        """Everything of the snapshots up to seq `upto`, in one transaction."""
        upto = min(upto, self.last)
        if upto <= self.seq:
            return
        t = self.mono[upto]
        s, d = self.src, self.db
        d.execute("BEGIN")
        d.executemany("INSERT INTO snapshots VALUES (?, ?, ?)", [r for r in self.snaps if self.seq < r[0] <= upto])
        for mid, kind, name, key, attrs, born, died in s.execute(
                "SELECT id, kind, name, key, attrs, born, died FROM modules WHERE born <= ? ORDER BY id", (t,)):
            if mid not in self.modules_in:
                d.execute("INSERT INTO modules VALUES (?, ?, ?, ?, ?, ?, NULL)", (mid, kind, name, key, attrs, born))
                self.modules_in.add(mid)
            if died is not None and died <= t and mid not in self.modules_dead:
                d.execute("UPDATE modules SET died = ? WHERE id = ?", (died, mid))
                self.modules_dead.add(mid)
        for parent, child, born, died in s.execute("SELECT parent, child, born, died FROM edges WHERE born <= ?", (t,)):
            key = (parent, child, born)
            if key not in self.edges_in:
                d.execute("INSERT INTO edges VALUES (?, ?, ?, NULL)", key)
                self.edges_in.add(key)
            if died is not None and died <= t and key not in self.edges_dead:
                d.execute("UPDATE edges SET died = ? WHERE parent = ? AND child = ? AND born = ?", (died, *key))
                self.edges_dead.add(key)
        for table, cols in self.columns.items():
            rows = s.execute(f"SELECT {cols} FROM {table} WHERE seq > ? AND seq <= ? ORDER BY seq, rowid",
                             (self.seq, upto)).fetchall()
            d.executemany(f"INSERT INTO {table} ({cols}) VALUES ({','.join('?' * len(cols.split(',')))})", rows)
        self._faults(t)
        self._probes(t)
        d.execute("COMMIT")
        self.seq = upto

    def _probes(self, t: float | None) -> None:
        """The probes rows done by t (None: every one left), in rowid order."""
        if not self.probe_cols:
            return
        cols = ", ".join(self.probe_cols)
        when = "" if t is None else " WHERE typeof(done) IN ('integer', 'real') AND done <= ?"
        for rowid, *row in self.src.execute(f"SELECT rowid, {cols} FROM probes{when} ORDER BY rowid",
                                            () if t is None else (t,)).fetchall():
            if rowid not in self.probes_in:
                self.db.execute(f"INSERT INTO probes ({cols}) VALUES ({','.join('?' * len(row))})", row)
                self.probes_in.add(rowid)

    def _faults(self, t: float) -> None:
        cols = "id, spec_index, kind, at_node, target_module, target, planned_start, planned_duration, start, end, rule"
        for row in self.src.execute(f"SELECT {cols} FROM faults WHERE start <= ? ORDER BY id", (t,)).fetchall():
            fid, end = row[0], row[9]
            if fid not in self.faults_in:   # the runner writes a fault once it is in force, its end later
                self.db.execute(f"INSERT INTO faults ({cols}) VALUES ({','.join('?' * 11)})",
                                (*row[:4], None, *row[5:9], None, row[10]))
                self.faults_in.add(fid)
            if end is not None and end <= t and fid not in self.faults_ended:
                self.db.execute("UPDATE faults SET end = ? WHERE id = ?", (end, fid))
                self.faults_ended.add(fid)

    def finish(self, status: str = "complete") -> None:
        """The rest of the run, the collector's close() (remaining deaths) and the runner's end."""
        self.grow(self.last)
        self.db.execute("BEGIN")
        for mid, died in self.src.execute("SELECT id, died FROM modules WHERE died IS NOT NULL"):
            if mid in self.modules_in and mid not in self.modules_dead:
                self.db.execute("UPDATE modules SET died = ? WHERE id = ?", (died, mid))
        for parent, child, born, died in self.src.execute("SELECT parent, child, born, died FROM edges "
                                                          "WHERE died IS NOT NULL"):
            self.db.execute("UPDATE edges SET died = ? WHERE parent = ? AND child = ? AND born = ? AND died IS NULL",
                            (died, parent, child, born))
        self._probes(None)
        self.db.execute("COMMIT")
        self._write_manifest(status)

