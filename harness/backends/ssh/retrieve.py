"""Bringing a run's data back from the nodes: the collector's run.db (merged into the local one)
and every node's logs. Used at the end of a run, and by `nestlab cleanup` for a killed one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from harness.backends.ssh.node import SshNode
from harness.store import ensure_indexes

COLLECTOR_TABLES = ("modules", "edges", "snapshots", "counters", "tcp_info")


def fetch_collector_db(node: SshNode, remote_db: str, run_dir: Path, db: sqlite3.Connection,
                       checkpoint=None) -> int:
    """Copy the collector's database from the node and merge its tables into the local run.db
    (whose processes, faults and events the runner wrote). Returns the snapshots merged."""
    if checkpoint is not None:
        try:
            checkpoint()
        except Exception:  # noqa: BLE001 - the -wal file is copied along instead
            pass
    tmp = run_dir / "collector.db"
    for suffix in ("", "-wal"):
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)
        if suffix == "" or node.exists(remote_db + suffix):
            node.get(remote_db + suffix, Path(f"{tmp}{suffix}"))
    try:
        return merge_collector_db(db, tmp)
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)


def merge_collector_db(db: sqlite3.Connection, path: Path) -> int:
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


def fetch_logs(node: SshNode, remote_dir: str, local_dir: Path) -> int:
    local_dir.mkdir(parents=True, exist_ok=True)
    try:
        names = node.conn.sftp.listdir(remote_dir)
    except OSError:
        return 0
    for name in names:
        node.get(f"{remote_dir}/{name}", local_dir / name)
    return len(names)
