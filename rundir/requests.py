"""Reading a run's true request paths (the requests table, format 7 on: a service workload's hops,
docs/service.md). A run without the table has no service: an empty frame. Rows whose times are not
numbers are left out with a warning (rundir.read.numeric_frame's rule)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd

from rundir import read
from rundir.db import REQUEST_COLUMNS, connect


def read_requests(run: str | Path, warnings: list[str]) -> pd.DataFrame:
    """The requests table of a run directory (REQUEST_COLUMNS), empty when it has none."""
    db = Path(run) / "run.db"
    if not db.is_file():
        return pd.DataFrame(columns=REQUEST_COLUMNS)
    try:
        conn = connect(db, readonly=True)
    except sqlite3.Error as e:
        raise read.db_error(Path(run), e) from None
    try:
        if "requests" not in read.tables(conn):
            return pd.DataFrame(columns=REQUEST_COLUMNS)
        sql = "SELECT " + ", ".join(f'"{c}"' for c in REQUEST_COLUMNS) + " FROM requests"
        return read.numeric_frame(conn, "requests", sql, REQUEST_COLUMNS, ("start", "end"), warnings)
    except sqlite3.Error as e:
        raise read.db_error(Path(run), e) from None
    finally:
        conn.close()

