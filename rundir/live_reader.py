"""Reading a run.db while the collector writes it: only what is new since the last read, never a write.

The connection is read-only (`mode=ro`, rundir.db.connect) and every read is one short read
transaction (WAL: it never blocks the collector's commits, and it sees whole snapshots, since the
collector writes a snapshot's row, its modules, edges and counters in one transaction).

What makes a read cost what is new, not what is there (docs/live.md):
- `counters` and `tcp_info` are plain rowid tables the collector appends to snapshot by snapshot, so
  their rows come in seq order: `rowid > last` reads the new ones through the table's B-tree. A
  catch-up (attaching to a long run) goes in steps of COUNTER_ROWS rows, ending on a whole snapshot.
- `snapshots` by seq (its primary key), `modules` by id, `edges` by rowid; deaths (a `died` set on an
  old row) are asked for the modules and edges still alive only.
- `faults` is read whole: a handful of rows.
- `probes` (format 5, when asked for) by rowid, the new rows only, cleaned as the offline reader
  cleans them (rundir.read.clean_probes). The collector writes a probe's row with the first snapshot
  after its outcome, so rows appear in rowid order; a row added below the last rowid read (a hand-made
  run.db) is noticed by the table's count and read then.

A run.db not written in seq order (a hand-made one, or one merged after the run) is detected at the
first row out of order and read by seq from then on (a scan per read; such a run does not grow).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from rundir.db import PROBE_COLUMNS, TCP_STATE_COLUMNS, connect
from rundir.read import clean_probes, probe_columns_missing

TCP_ROWS = 20_000   # tcp_info rows fetched at a time
COUNTER_ROWS = 50_000        # counters rows per read step
_NULL = -1e308               # SQL NULL while reading (counters are never negative)
_VALUES = ("total_msgs", "wait_ms", "queued", "errors")
_COLS = "rowid, seq, module, dir = 'out', " + ", ".join(f"coalesce({c}, {_NULL})" for c in _VALUES)
_IN_CHUNK = 500              # ids per `IN (...)` list


@dataclass
class News:
    """What a read found: snapshots after the last read up to `frontier`, and the rows that go with them."""

    seqs: np.ndarray                      # new snapshots, ascending
    mono: np.ndarray
    rows: dict[str, np.ndarray]           # counters rows of those snapshots: seq, module, out, vals, has
    modules: list[tuple] = field(default_factory=list)   # new (id, kind, name, key, attrs, born, died)
    deaths: dict[int, float] = field(default_factory=dict)       # module id -> died, for modules alive before
    edges: list[tuple] = field(default_factory=list)     # new (rowid, parent, child, born, died)
    edge_deaths: dict[int, float] = field(default_factory=dict)  # edge rowid -> died
    tcp_rows: np.ndarray | None = None    # (seq, module, *TCP_STATE_COLUMNS) of tcp_info, when asked for
    probes: pd.DataFrame | None = None   # new probes rows (rundir.read.clean_probes), when asked for
    faults: list[tuple] = field(default_factory=list)    # every fault row (see RunReader.read)
    clients: list[tuple] = field(default_factory=list)   # every client process: (pid, workload, cmdline)
    more: bool = False                    # stopped at a step limit: read again for the rest
    last_seq: int = -1                    # the newest snapshot in run.db


def _empty_rows() -> dict[str, np.ndarray]:
    return {"seq": np.zeros(0, np.int64), "module": np.zeros(0, np.int64), "out": np.zeros(0, bool),
            "vals": np.zeros((0, 4)), "has": np.zeros((0, 4), bool)}


def _as_rows(a: np.ndarray) -> dict[str, np.ndarray]:
    if len(a) == 0:
        return _empty_rows()
    has = a[:, 4:] > _NULL / 2
    return {"seq": a[:, 1].astype(np.int64), "module": a[:, 2].astype(np.int64), "out": a[:, 3] != 0,
            "vals": np.where(has, a[:, 4:], 0.0), "has": has}


class RunReader:
    """Incremental, read-only reader of one run.db."""

    def __init__(self, db: Path | str, tcp_state: bool = False, probes: bool = False):
        self.db = Path(db)
        self.conn = connect(self.db, readonly=True, live=True)
        self.conn.isolation_level = None      # explicit BEGIN ... COMMIT: one read transaction per read
        self.seq = -1                         # the last snapshot delivered
        self.rowid = 0                        # the last counters row delivered (seq-ordered run.db)
        self.ordered = True
        self.module_id = 0
        self.known: set[int] = set()
        self.alive_modules: set[int] = set()
        self.edge_rowid = 0
        self.alive_edges: set[int] = set()
        self.tcp_state = tcp_state
        self.tcp_rowid = 0
        self.tcp_step = TCP_ROWS
        self.tcp_ordered = True
        self.tcp_ok: bool | None = None
        self.probes = probes
        self.probe_rowids: set[int] = set()
        self.probe_rowid = 0
        self.probe_ok = False

    def close(self) -> None:
        self.conn.close()

    def read(self, upto: int | None = None) -> News:
        """New snapshots (seq > the last delivered, <= upto) and everything written with them."""
        c = self.conn
        c.execute("BEGIN")
        try:
            (newest,) = c.execute("SELECT max(seq) FROM snapshots").fetchone()
            newest = -1 if newest is None else int(newest)
            last = newest if upto is None else min(newest, int(upto))
            rows, frontier, more = self._counters(last)
            snaps = np.array(c.execute("SELECT seq, mono FROM snapshots WHERE seq > ? AND seq <= ? ORDER BY seq",
                                       (self.seq, frontier)).fetchall(), dtype=np.float64).reshape(-1, 2)
            news = News(snaps[:, 0].astype(np.int64), snaps[:, 1], rows, more=more, last_seq=newest)
            self._modules(news)
            self._edges(news)
            if self.tcp_state:
                news.tcp_rows = self._tcp_rows(frontier)
            if self.probes:
                news.probes = self._probe_rows()
            news.faults = c.execute("SELECT id, kind, at_node, target, planned_duration, start, end FROM faults "
                                    "ORDER BY id").fetchall()
            news.clients = c.execute("SELECT pid, workload, cmdline FROM processes WHERE role = 'client' "
                                     "ORDER BY started").fetchall()
        finally:
            c.execute("COMMIT")
        self.seq = max(self.seq, frontier)
        return news

    def _counters(self, last: int) -> tuple[dict[str, np.ndarray], int, bool]:
        """Counters rows of the snapshots after self.seq, up to a frontier <= last; (rows, frontier, more)."""
        if last <= self.seq:
            return _empty_rows(), self.seq, False
        if self.ordered:
            step = COUNTER_ROWS
            while True:
                a = self._fetch(f"SELECT {_COLS} FROM counters WHERE rowid > ? AND seq <= ? ORDER BY rowid LIMIT ?",
                                (self.rowid, last, step))
                seq = a[:, 1]
                if len(a) and (seq[0] <= self.seq or (np.diff(seq) < 0).any()):
                    self.ordered = False      # not written in seq order: read by seq from now on
                    break
                keep = np.ones(len(a), dtype=bool)
                frontier, more = last, False
                if len(a) == step:            # a full step: end it on a whole snapshot
                    if seq[0] == seq[-1]:
                        step *= 2             # one snapshot with more rows than a step
                        continue
                    frontier, more = int(seq[-1]) - 1, True
                    keep = seq <= frontier
                a = a[keep]
                if len(a):
                    self.rowid = int(a[-1, 0])
                return _as_rows(a), frontier, more
        a = self._fetch(f"SELECT {_COLS} FROM counters WHERE seq > ? AND seq <= ? ORDER BY seq, rowid",
                        (self.seq, last))
        return _as_rows(a), last, False

    def _fetch(self, sql: str, args: tuple) -> np.ndarray:
        rows = self.conn.execute(sql, args).fetchall()
        return np.array(rows, dtype=np.float64).reshape(-1, 4 + len(_VALUES))

    def _modules(self, news: News) -> None:
        c = self.conn
        cols = "id, kind, name, key, attrs, born, died"
        found = c.execute(f"SELECT {cols} FROM modules WHERE id > ? ORDER BY id", (self.module_id,)).fetchall()
        # The collector numbers modules as they are born; a run.db that does not (hand-made) may add a
        # module below the highest id seen: its counters rows name it.
        missing = sorted(set(news.rows["module"].tolist()) - self.known - {r[0] for r in found})
        for i in range(0, len(missing), _IN_CHUNK):
            part = missing[i:i + _IN_CHUNK]
            found += c.execute(f"SELECT {cols} FROM modules WHERE id IN ({','.join('?' * len(part))})", part).fetchall()
        for row in found:
            news.modules.append(row)
            self.known.add(row[0])
            self.module_id = max(self.module_id, row[0])
            if row[6] is None:
                self.alive_modules.add(row[0])
        news.deaths = self._deaths("SELECT id, died FROM modules WHERE died IS NOT NULL AND id IN ({})",
                                   self.alive_modules)
        self.alive_modules -= news.deaths.keys()

    def _edges(self, news: News) -> None:
        for row in self.conn.execute("SELECT rowid, parent, child, born, died FROM edges WHERE rowid > ? "
                                     "ORDER BY rowid", (self.edge_rowid,)):
            news.edges.append(row)
            self.edge_rowid = row[0]
            if row[4] is None:
                self.alive_edges.add(row[0])
        news.edge_deaths = self._deaths("SELECT rowid, died FROM edges WHERE died IS NOT NULL AND rowid IN ({})",
                                        self.alive_edges)
        self.alive_edges -= news.edge_deaths.keys()

    def _deaths(self, sql: str, alive: set[int]) -> dict[int, float]:
        out, ids = {}, sorted(alive)
        for i in range(0, len(ids), _IN_CHUNK):
            part = ids[i:i + _IN_CHUNK]
            out.update(self.conn.execute(sql.format(",".join("?" * len(part))), part).fetchall())
        return out

    def _tcp_rows(self, frontier: int) -> np.ndarray:
        """tcp_info state rows of the new snapshots (empty on runs recorded before format 4)."""
        width = 2 + len(TCP_STATE_COLUMNS)
        if self.tcp_ok is None:
            have = {r[1] for r in self.conn.execute("PRAGMA table_info(tcp_info)")}
            self.tcp_ok = set(TCP_STATE_COLUMNS) <= have
        if not self.tcp_ok:
            return np.zeros((0, width))
        cols = ", ".join(("rowid", "seq", "module", *TCP_STATE_COLUMNS))
        if self.tcp_ordered:
            # In steps, stopping at the first row past the frontier: catching up on a long run in
            # many reads must not fetch every later row each time (quadratic).
            parts, start, ordered = [], self.tcp_rowid, True
            while True:
                rows = self.conn.execute(f"SELECT {cols} FROM tcp_info WHERE rowid > ? ORDER BY rowid LIMIT ?",
                                         (start, self.tcp_step)).fetchall()
                a = np.array(rows, dtype=np.float64).reshape(-1, width + 1)
                if len(a) and ((np.diff(a[:, 1]) < 0).any() or (parts and a[0, 1] < parts[-1][-1, 1])):
                    ordered = False
                    break
                take = a[a[:, 1] <= frontier]
                if len(take):
                    parts.append(take)
                    start = int(take[-1, 0])
                if len(take) < len(a) or len(a) < self.tcp_step:
                    break
            if ordered:
                self.tcp_rowid = start
                return np.concatenate(parts)[:, 1:] if parts else np.zeros((0, width))
            self.tcp_ordered = False     # not written in seq order: read by seq from now on
        rows = self.conn.execute(f"SELECT {cols} FROM tcp_info WHERE seq > ? AND seq <= ? ORDER BY seq, rowid",
                                 (self.seq, frontier)).fetchall()
        return np.array(rows, dtype=np.float64).reshape(-1, width + 1)[:, 1:]

    def _probe_rows(self) -> pd.DataFrame:
        """The probes rows not read yet, cleaned (none on runs recorded before format 5)."""
        if not self.probe_ok:
            missing = probe_columns_missing(self.conn)   # None: no table (format <= 4); []: sound
            self.probe_ok = missing == []
            if not self.probe_ok:
                return clean_probes([], [])
        cols = ", ".join(("rowid", *PROBE_COLUMNS))
        rows = self.conn.execute(f"SELECT {cols} FROM probes WHERE rowid > ? ORDER BY rowid",
                                 (self.probe_rowid,)).fetchall()
        (count,) = self.conn.execute("SELECT count(*) FROM probes").fetchone()
        if count != len(self.probe_rowids) + len(rows):   # a row below the last rowid read: read them all
            rows = [r for r in self.conn.execute(f"SELECT {cols} FROM probes ORDER BY rowid")
                    if r[0] not in self.probe_rowids]
        for r in rows:
            self.probe_rowids.add(r[0])
            self.probe_rowid = max(self.probe_rowid, r[0])
        return clean_probes([r[1:] for r in rows], [])
