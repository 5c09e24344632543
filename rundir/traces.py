"""Reading a run's message trace (`messages`: every traced send and receive, issue 33 item 3) and
its true request paths (`requests`: one row per hop), for the black-box path analysis
(analysis/paths, docs/blackbox.md). A run without a `messages` table is a UserError saying how to
record one; rows whose numbers are not numbers are left out with a warning (rundir.read's rule).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rundir import read
from rundir.errors import UserError

MESSAGE_COLUMNS = ["mono", "host", "pid", "tid", "fd", "call", "bytes", "local", "remote"]
REQUEST_COLUMNS = ["request", "type", "tier", "host", "pid", "start", "end"]
HOW_TO_RECORD = ("record one with `trace: messages` in the run's spec (docs/service.md), or give a trace with "
                 "--trace or --jaeger (docs/blackbox.md)")


def read_trace_tables(run: str | Path, warnings: list[str]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(messages, requests, faults) of a run directory: the messages table (MESSAGE_COLUMNS; UserError
    when there is none), the requests table (REQUEST_COLUMNS; empty when there is none) and the
    faults table as stored."""
    path = Path(run)
    with read.run_db(path) as conn:
        tables = read.tables(conn)
        if "messages" not in tables:
            raise UserError(f"{path}: no messages table (the run did not trace messages); {HOW_TO_RECORD}")
        present = {r[1] for r in conn.execute("PRAGMA table_info(messages)")}
        lacking = [c for c in ("mono", "host", "call", "bytes", "local", "remote") if c not in present]
        if lacking:
            raise UserError(f"{path}: the messages table has no {', '.join(lacking)} column; a format this "
                            "nestlab does not read")
        cols = [c for c in MESSAGE_COLUMNS if c in present]
        messages = read.numeric_frame(conn, "messages", f"SELECT {', '.join(cols)} FROM messages", cols,
                                      ("mono", "bytes"), warnings)
        for c in MESSAGE_COLUMNS:
            if c not in messages:
                messages[c] = None
        requests = pd.DataFrame(columns=REQUEST_COLUMNS)
        if "requests" in tables:
            present = {r[1] for r in conn.execute("PRAGMA table_info(requests)")}
            if all(c in present for c in REQUEST_COLUMNS):
                sql = "SELECT " + ", ".join(f'"{c}"' for c in REQUEST_COLUMNS) + " FROM requests"
                requests = read.numeric_frame(conn, "requests", sql, REQUEST_COLUMNS, ("start", "end"), warnings)
            else:
                warnings.append("requests table without the columns " + ", ".join(REQUEST_COLUMNS)
                                + "; no true paths")
        faults = read.read_fault_rows(conn)
    return messages[MESSAGE_COLUMNS], requests, faults
