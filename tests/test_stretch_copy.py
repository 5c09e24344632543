"""The stretches' copy (analysis/model/stretch_copy.py): load_stretches from it gives what cutting the counters
gives, on sound and damaged runs (every array, the modules' lives, the warnings in their order, the
detached modules, TCP state and probes made again); it is used only under its key (run.db as it is,
this code), so a run that changed or code that changed makes it again; a copy that cannot be written
or read leaves the counters to the reader."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from analysis.model import stretch_copy
from analysis.model.batch import Batch
from analysis.model.stretches import load_stretches
from rundir import columnar, copies
from rundir.db import connect
from tests.support.damaged import COPIES, DAMAGES, FATAL, synthetic_base
from tests.support.synthetic import synthetic_run


def copy_of(run: Path) -> Path:
    """A reader's stretches copy of the run: in the per-user cache (rundir.copies)."""
    return copies.cached_path(run, columnar.STRETCHES)


def everything(run: Path):
    """load_stretches(run) as plain values, arrays copied."""
    r = load_stretches(run)
    sts = []
    for st in r.stretches:
        state = None if st.tcpstate is None else {k: np.array(v) for k, v in vars(st.tcpstate).items()}
        probes = None if st.probes is None else repr(vars(st.probes))
        sts.append((st.modules, st.kinds, st.edges, st.seqs.tolist(), st.detached.tolist(), st.remote, state, probes,
                    {d: {f: getattr(c, f).copy() for f in c.__dataclass_fields__} for d, c in st.counters.items()}))
    return r.warnings, r.modules, r.edges, sts


def same(a, b) -> None:
    assert a[:3] == b[:3]
    assert len(a[3]) == len(b[3])
    for x, y in zip(a[3], b[3], strict=True):
        assert x[:6] == y[:6] and x[7] == y[7]
        assert (x[6] is None) == (y[6] is None)
        for k in x[6] or {}:
            assert np.array_equal(x[6][k], y[6][k], equal_nan=True), k
        for d in x[8]:
            for f in x[8][d]:
                assert x[8][d][f].dtype == y[8][d][f].dtype and np.array_equal(x[8][d][f], y[8][d][f]), (d, f)


@pytest.mark.parametrize("damage", [None, *sorted(set(DAMAGES) - set(FATAL) - set(COPIES))])
def test_the_copy_gives_what_the_counters_give(tmp_path, damage, monkeypatch):
    run = synthetic_base(tmp_path / "run")
    if damage:
        DAMAGES[damage](run)
    monkeypatch.setenv(copies.CACHE_ENV, "/dev/null/nestlab")   # no copy can be written: cut each time
    plain = everything(run)
    monkeypatch.undo()
    same(everything(run), plain)           # cut from the counters, copy written
    assert copy_of(run).is_file()
    same(everything(run), plain)           # from the copy


def test_a_copy_is_mapped_and_diagnosed_without_a_copy_of_its_cells(tmp_path):
    run = synthetic_run(tmp_path / "run", seconds=30, apps=2, conns=3, churn_s=6)
    load_stretches(run)
    r = load_stretches(run)
    assert copy_of(run).is_file() and len(r.stretches) > 3
    c = r.stretches[1].counters["out"]
    assert not c.tm.flags.writeable                 # the mapped file, read-only
    assert Batch(r.stretches)._shared_flat("out") is not None   # the cells as one flat view, no concatenation


def test_used_only_under_its_key(tmp_path, monkeypatch):
    run = synthetic_run(tmp_path / "run", seconds=30, apps=2, conns=3, churn_s=6)
    plain = everything(run)
    made = copy_of(run).stat().st_mtime_ns
    same(everything(run), plain)
    assert copy_of(run).stat().st_mtime_ns == made   # read, not made again
    # Other code: the copy is not used, and is made again.
    monkeypatch.setattr(stretch_copy, "code_digest", lambda: "other code")
    same(everything(run), plain)
    assert copy_of(run).stat().st_mtime_ns != made
    monkeypatch.undo()
    # run.db changed (a snapshot more): not the same run any more.
    everything(run)
    conn = sqlite3.connect(run / "run.db")
    cols = [r[1] for r in conn.execute("PRAGMA table_info(snapshots)")]
    last = dict(zip(cols, conn.execute("SELECT * FROM snapshots ORDER BY seq DESC LIMIT 1").fetchone(), strict=True))
    last["seq"] += 1
    last["mono"] += 0.1
    conn.execute(f"INSERT INTO snapshots ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", list(last.values()))
    conn.commit()
    conn.close()
    reader = connect(run / "run.db", readonly=True)
    key = stretch_copy.key(columnar.stamp(run / "run.db", reader))
    reader.close()
    assert stretch_copy.read(run, key) is None                # the copy there is of the run before
    everything(run)
    assert stretch_copy.read(run, key) is not None            # made again under the new key


def test_a_damaged_copy_is_made_again(tmp_path):
    run = synthetic_run(tmp_path / "run", seconds=20, apps=1, conns=2, churn_s=5)
    plain = everything(run)
    copy_of(run).write_bytes(b"\0" * 100)
    same(everything(run), plain)
    assert copy_of(run).stat().st_size > 100
