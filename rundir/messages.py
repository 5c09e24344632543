"""Writing a run's message trace (the messages and traced tables, rundir.db.TRACE_SCHEMA) and reading
back what was lost of it. The drainer (harness/collector/tracedrain.py) is the one writer; the
analysis reads the rows through rundir.traces. Standard library only (the write path).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

from rundir import db as rundb

MESSAGE_ROW = ("mono", "host", "pid", "tid", "fd", "call", "bytes", "local", "remote")
TRACED_ROW = ("host", "pid", "starttime", "cmdline", "ring", "events", "dropped", "lost")


class MessageWriter:
    """Appends message rows and keeps each traced process's row up to date, one transaction a call."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        conn.executescript(rundb.TRACE_SCHEMA)
        conn.commit()

    def write(self, messages: Iterable[tuple], traced: Iterable[tuple] = ()) -> None:
        """messages: MESSAGE_ROW tuples; traced: TRACED_ROW tuples (replacing the process's row)."""
        conn = self.conn
        conn.execute("BEGIN")
        try:
            conn.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", messages)
            conn.executemany("INSERT OR REPLACE INTO traced VALUES (?, ?, ?, ?, ?, ?, ?, ?)", traced)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


def trace_totals(run_db: Path | str) -> dict[str, int] | None:
    """{'processes', 'events', 'dropped', 'lost'} of a run's trace, and per host under 'hosts'
    ({host: events}); None when the run did not trace messages."""
    conn = rundb.connect(run_db, readonly=True, live=True)
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'traced'").fetchone():
            return None
        n, events, dropped, lost = conn.execute(
            "SELECT count(*), coalesce(sum(events), 0), coalesce(sum(dropped), 0), coalesce(sum(lost), 0) "
            "FROM traced").fetchone()
        hosts = dict(conn.execute("SELECT host, sum(events) FROM traced GROUP BY host ORDER BY host").fetchall())
    finally:
        conn.close()
    return {"processes": n, "events": events, "dropped": dropped, "lost": lost, "hosts": hosts}


def drop_warnings(totals: dict | None) -> list[str]:
    """The run's warnings about its trace: events dropped (a ring was full) or lost."""
    if not totals:
        return []
    out = []
    if totals["dropped"]:
        out.append(f"message trace: {totals['dropped']} event(s) dropped because a process's ring was full "
                   f"({totals['events']} recorded; see the traced table for which process); the trace is "
                   "incomplete, paths through those calls may be misread")
    if totals["lost"]:
        out.append(f"message trace: {totals['lost']} event(s) lost (reserved by a thread that ended before "
                   "writing them)")
    return out
