"""A fabric run's own file and its reads of run.db (docs/fabric.md): `fabric.json` (the links, every
connection's path, the probe paths and probes) written by the lab, and what the fabric diagnosers read
of run.db: TCP connections with their cumulative retransmissions, link faults, snapshot times.
Standard library only."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from rundir.layout import RunDir

FABRIC_FILE = "fabric.json"


def fabric_path(run_dir: Path | str) -> Path:
    return Path(run_dir) / FABRIC_FILE


def write_fabric(run_dir: Path | str, doc: dict[str, Any]) -> None:
    fabric_path(run_dir).write_text(json.dumps(doc))


def read_fabric(run_dir: Path | str) -> dict[str, Any]:
    return json.loads(fabric_path(run_dir).read_text())


def read_manifest_json(run_dir: Path | str) -> dict[str, Any]:
    return json.loads(RunDir(Path(run_dir)).manifest_path.read_text())


def tcp_attrs(db: sqlite3.Connection) -> list[dict[str, Any]]:
    """The attributes of every TCP module recorded (a live run's connection: the lab's)."""
    return [json.loads(a or "{}") for (a,) in db.execute("SELECT attrs FROM modules WHERE kind = 'tcp'")]


def _open(run_dir: Path | str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{RunDir(Path(run_dir)).db}?mode=ro", uri=True)


def read_connections(run_dir: Path | str) -> tuple[tuple[float, float], dict[int, tuple], list[tuple]]:
    """((first, last snapshot time), {module: (attrs, born, died)} of TCP modules, [(module, mono,
    cumulative retransmissions)] of their outbound counter rows in order)."""
    db = _open(run_dir)
    try:
        first, last = db.execute("SELECT MIN(mono), MAX(mono) FROM snapshots").fetchone()
        mods = {mid: (json.loads(attrs or "{}"), born, died) for mid, attrs, born, died
                in db.execute("SELECT id, attrs, born, died FROM modules WHERE kind = 'tcp'")}
        rows = db.execute("SELECT c.module, s.mono, c.errors FROM counters c JOIN snapshots s ON s.seq = c.seq "
                          "WHERE c.dir = 'out' AND c.errors IS NOT NULL ORDER BY c.module, c.seq").fetchall()
    finally:
        db.close()
    return (first or 0.0, last or 0.0), mods, rows


def read_fault_rows(run_dir: Path | str) -> list[tuple]:
    """(kind, target JSON, start, end, spec_index) of every fault that took effect, by start."""
    db = _open(run_dir)
    try:
        return db.execute("SELECT kind, target, start, end, spec_index FROM faults WHERE start IS NOT NULL "
                          "ORDER BY start").fetchall()
    finally:
        db.close()


def snapshot_times(run_dir: Path | str) -> dict[int, float]:
    db = _open(run_dir)
    try:
        return dict(db.execute("SELECT seq, mono FROM snapshots"))
    finally:
        db.close()
