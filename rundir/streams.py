"""Reading what a streams run (run format 6, docs/streams.md) holds beyond a network run's tables:
the engine's own per-task metrics (`stream_tasks`, the engine baseline's input) and the stream
connections' endpoints (the `sconn` modules' attributes). Tolerant like rundir.read: a row whose
numbers are not numbers is left out with one warning; a run without the table gives no rows.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd

from rundir.db import STREAM_TASK_COLUMNS, connect
from rundir.read import numeric_frame
from rundir.repair import as_dict

# The gauges and cumulative times, and the task counters, of a stream_tasks row.
_TIMES = ("busy_ms_per_s", "backpressured_ms_per_s", "idle_ms_per_s", "acc_busy_ms", "acc_backpressured_ms",
          "acc_idle_ms")
_RECORDS = ("records_in", "records_out")


def read_stream_tasks(conn: sqlite3.Connection, warnings: list[str]) -> pd.DataFrame:
    """stream_tasks as a frame (STREAM_TASK_COLUMNS), sorted by (operator, seq); a row whose seq is not
    a number, or whose operator is not text, is left out; a time or counter that is not a number is
    unknown (NaN)."""
    cols = ", ".join(STREAM_TASK_COLUMNS)
    frame = numeric_frame(conn, "stream_tasks", f"SELECT {cols} FROM stream_tasks", list(STREAM_TASK_COLUMNS),
                          ("seq",), warnings, optional=_TIMES + _RECORDS)
    text = frame["operator"].map(lambda v: isinstance(v, str) and v != "")
    if len(frame) and not text.all():
        warnings.append(f"stream_tasks: {int((~text).sum())} row(s) whose operator is not a name; left out")
        frame = frame[text]
    for c in _TIMES + _RECORDS:
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype(float)
    frame["seq"] = frame["seq"].astype("int64")
    return frame.sort_values(["operator", "seq"], kind="stable").reset_index(drop=True)


def stream_tasks(run_dir: str | Path, warnings: list[str] | None = None) -> pd.DataFrame:
    """read_stream_tasks of a run directory (or run.db path)."""
    path = Path(run_dir)
    db = path if path.is_file() else path / "run.db"
    conn = connect(db, readonly=True)
    try:
        return read_stream_tasks(conn, warnings if warnings is not None else [])
    finally:
        conn.close()


def connection_ends(run_dir: str | Path) -> dict[int, tuple[str | None, str | None]]:
    """read_connection_ends of a run directory (or run.db path)."""
    path = Path(run_dir)
    db = path if path.is_file() else path / "run.db"
    conn = connect(db, readonly=True)
    try:
        return read_connection_ends(conn)
    finally:
        conn.close()


def read_connection_ends(conn: sqlite3.Connection) -> dict[int, tuple[str | None, str | None]]:
    """Per sconn module id, its (upstream PE, downstream PE) from the module's attributes (`src`,
    `dst`), else from its name 'SRC:outI>DST:inJ'; None where neither says."""
    rows = conn.execute("SELECT id, name, attrs FROM modules WHERE kind = 'sconn'").fetchall()
    out: dict[int, tuple[str | None, str | None]] = {}
    for mid, name, attrs in rows:
        if not isinstance(mid, int):
            continue
        a = as_dict(attrs)
        src, dst = a.get("src"), a.get("dst")
        if not (isinstance(src, str) and isinstance(dst, str)) and isinstance(name, str) and ">" in name:
            left, _, right = name.partition(">")
            src, dst = left.rpartition(":")[0] or None, right.rpartition(":")[0] or None
        out[mid] = (src if isinstance(src, str) else None, dst if isinstance(dst, str) else None)
    return out
