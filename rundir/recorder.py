"""What the runner writes into run.db while a run goes on: events, processes, faults, queue samples.

The collector writes its own tables (modules, edges, snapshots, counters, tcp_info: rundir.snapshots);
the runner writes the others through a RunRecorder over its connection to the run's run.db, and reads
back what it reports (snapshot count, the counts at the end). The schema is rundir.db's
(docs/run-format.md). Every write that must survive a crash is committed at once, as the runner did
when it held the SQL itself; a process end and a fault's end are committed with what follows them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from rundir.db import create_db, ensure_indexes
from rundir.targets import resolve_fault_targets

COUNTED = ("snapshots", "modules", "faults")   # what a run's manifest counts at the end
COLLECTOR_TABLES = ("modules", "edges", "snapshots", "counters", "tcp_info", "probes")   # rundir.snapshots writes these


class RunRecorder:
    """The runner's writer of one run.db (`path`) over connection `db`."""

    def __init__(self, db: sqlite3.Connection, path: Path):
        self.db, self.path = db, path

    @classmethod
    def create(cls, path: Path) -> RunRecorder:
        """A new run.db at `path` with its schema (rundir.db)."""
        return cls(create_db(path), path)

    def commit(self) -> None:
        self.db.commit()

    def close(self) -> None:
        """Commit what is pending (process ends, events) and close the connection."""
        self.db.commit()
        self.db.close()

    # -- the timeline --------------------------------------------------------------------------
    def event(self, mono: float, kind: str, workload: int | None, detail: str) -> None:
        self.db.execute("INSERT INTO events (mono, kind, workload, detail) VALUES (?,?,?,?)",
                        (mono, kind, workload, detail))
        self.db.commit()

    def process_started(self, pid: int, workload: int | None, role: str, host: str | None, cmdline: str,
                        started: float) -> None:
        self.db.execute("INSERT INTO processes (pid, workload, role, host, cmdline, started) VALUES (?,?,?,?,?,?)",
                        (pid, workload, role, host, cmdline, started))
        self.db.commit()

    def process_ended(self, pid: int, started: float, ended: float, exit_code: int | None) -> None:
        """Not committed: the workload_end event that follows (or the end of the run) commits it."""
        self.db.execute("UPDATE processes SET ended = ?, exit_code = ? WHERE pid = ? AND started = ?",
                        (ended, exit_code, pid, started))

    def requests(self, rows: Iterable[Sequence]) -> None:
        """A service workload's true request paths (rundir.db.REQUEST_COLUMNS, a row per hop)."""
        self.db.executemany('INSERT INTO requests (request, type, tier, host, pid, start, "end", outcome) '
                            "VALUES (?,?,?,?,?,?,?,?)", rows)
        self.db.commit()

    # -- faults --------------------------------------------------------------------------------
    def faults_started(self, rows: Iterable[Sequence]) -> None:
        """One row per part of a fault in force: (id, spec_index, kind, at_node, target,
        planned_start, planned_duration, start, rule); committed together."""
        for row in rows:
            self.db.execute(
                "INSERT INTO faults (id, spec_index, kind, at_node, target, planned_start, planned_duration, start, "
                "rule) VALUES (?,?,?,?,?,?,?,?,?)", tuple(row))
        self.db.commit()

    def fault_ended(self, fault_id: int, end: float) -> None:
        """Not committed: the runner commits once every part of the fault is healed."""
        self.db.execute("UPDATE faults SET end = ? WHERE id = ?", (end, fault_id))

    def link_fault_targets(self, monitor: str, monitor_interface: str) -> None:
        link_fault_targets(self.db, monitor, monitor_interface)

    def link_stream_fault_targets(self) -> None:
        """Streams runs: each throttle or dropper row targets the connection its target names
        (docs/streams.md); the collector has written the connections' modules before any fault."""
        self.db.execute("UPDATE faults SET target_module = (SELECT id FROM modules WHERE modules.key = "
                        "'sconn:' || json_extract(faults.target, '$.connection')) "
                        "WHERE kind IN ('throttle', 'dropper') AND target_module IS NULL")
        self.db.commit()

    # -- network health ------------------------------------------------------------------------
    def queue_stats(self, stats: Iterable[dict], now: Callable[[], float]) -> None:
        """The shaped links' queue counters as the backend read them (Backend.queue_stats), each
        stamped with `now()` on the reference clock."""
        rows = [(now(), q["node"], q["interface"], q["sent_packets"], q["sent_bytes"], q["drops"],
                 q["overlimits"], q["requeues"], q["backlog_packets"], q["backlog_bytes"]) for q in stats]
        if rows:
            self.db.executemany("INSERT INTO queue_stats VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
            self.db.commit()

    # -- reading back --------------------------------------------------------------------------
    def snapshot_count(self) -> int:
        return self.db.execute("SELECT count(*) FROM snapshots").fetchone()[0]

    def counts(self) -> dict[str, int]:
        """Rows of snapshots, modules and faults: the manifest's `counts`."""
        return {k: self.db.execute(f"SELECT count(*) FROM {k}").fetchone()[0] for k in COUNTED}


def link_fault_targets(db: sqlite3.Connection, monitor: str, monitor_interface: str) -> None:
    """Link each fault row to the module it targets (faults.target_module), once the collector's
    modules are in `db` (rundir.targets.resolve_fault_targets: the same rule as every reader)."""
    modules = db.execute("SELECT id, key, born FROM modules").fetchall()
    faults = db.execute("SELECT id, kind, target, start FROM faults").fetchall()
    resolved = resolve_fault_targets([(kind, json.loads(target), start) for _, kind, target, start in faults],
                                     modules, monitor, monitor_interface)
    for (fid, *_), module in zip(faults, resolved, strict=True):
        if module is not None:
            db.execute("UPDATE faults SET target_module = ? WHERE id = ?", (module, fid))
    db.commit()


def merge_collector_db(db: sqlite3.Connection, path: Path) -> int:
    """Merge the tables a collector wrote into another run.db (a testbed node's copy, at `path`) into
    the run's own (`db`, whose processes, faults and events the runner wrote). Returns the snapshots
    merged."""
    if db.in_transaction:
        db.commit()
    db.execute("ATTACH DATABASE ? AS c", (str(path),))
    try:
        for table in COLLECTOR_TABLES:
            db.execute(f"INSERT INTO main.{table} SELECT * FROM c.{table}")
        db.commit()
        n = db.execute("SELECT count(*) FROM c.snapshots").fetchone()[0]
    finally:
        db.execute("DETACH DATABASE c")
    ensure_indexes(db)
    return n
