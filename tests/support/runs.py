"""Hand-made run directories for the analysis tests (the builders are rundir.handmade's, public
through nestlab.testing).

`RunBuilder` writes a small run.db with rundir.db.create_db (modules with per-snapshot counter
deltas, edges, processes, faults, events) and a small manifest, written by the runner's writer
(rundir.layout.RunDir.write_manifest, which checks it against rundir.manifest); `make_run` is a ready one with two workloads and two faults. `labelled`,
`positives` and `spans` read the labels back.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from analysis.labels import label_run
from analysis.load import load_run_data
from rundir.handmade import DT, IPERF_DOWN, IPERF_DUAL, IPERF_UP, T0, WGET, RunBuilder, make_run
from rundir.layout import RunDir
from rundir.runs import open_run

__all__ = ["DT", "IPERF_DOWN", "IPERF_DUAL", "IPERF_UP", "T0", "WGET", "RunBuilder", "edit_db", "labelled", "make_run",
           "positives", "spans"]


def labelled(b: RunBuilder, policy=None):
    data = load_run_data(open_run(b.write()))
    return data, label_run(data, policy)


def positives(frame, module: int, d: str) -> list[int]:
    f = frame[(frame["module"] == module) & (frame["dir"] == d) & frame["actual"] & ~frame["exclude"]]
    return sorted(f["seq"].tolist())


def spans(seqs: list[int]) -> list[tuple[int, int]]:
    """[(first, last)] of consecutive runs."""
    out = []
    for s in seqs:
        if out and s == out[-1][1] + 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def edit_db(run: Path, *statements: str) -> list[int]:
    """Run SQL statements on a run's run.db (a test's damage); the rows each changed."""
    db = sqlite3.connect(RunDir(run).db)
    try:
        changed = [db.execute(sql).rowcount for sql in statements]
        db.commit()
    finally:
        db.close()
    return changed
