"""The columnar copy of the counters (rundir.columnar): the same arrays, warnings and unplaced rows as
reading run.db, on sound and damaged runs; a copy made stale by any change to run.db is not used
but made again; a copy that cannot be written or read leaves run.db to the reader."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from rundir import columnar, copies, read
from rundir.db import connect
from tests.support.damaged import COPIES, DAMAGES, FATAL, synthetic_base
from tests.support.synthetic import synthetic_run


def from_db(run: Path):
    conn = connect(run / "run.db", readonly=True)
    try:
        warnings: list[str] = []
        rows, unplaced = read.read_counters(conn, warnings)
        return rows, unplaced, warnings
    finally:
        conn.close()


def through_copy(run: Path):
    conn = connect(run / "run.db", readonly=True)
    try:
        warnings: list[str] = []
        rows, unplaced = columnar.read_counters(run / "run.db", conn, warnings)
        return rows, unplaced, warnings
    finally:
        conn.close()


def in_series_order(rows):
    """The rows by direction, module and seq, stably (the copy's order; run.db gives them as written)."""
    order = np.lexsort((rows["seq"], rows["module"], rows["out"]))
    return {k: v[order] for k, v in rows.items()}


def assert_same(a, b):
    rows_a, unplaced_a, warnings_a = a
    rows_b, unplaced_b, warnings_b = b
    rows_a, rows_b = in_series_order(rows_a), in_series_order(rows_b)
    assert sorted(rows_a) == sorted(rows_b)
    for k in rows_a:
        assert rows_a[k].dtype == rows_b[k].dtype, k
        assert rows_a[k].shape == rows_b[k].shape, k
        assert np.array_equal(rows_a[k], rows_b[k]), k
    assert unplaced_a == unplaced_b
    assert warnings_a == warnings_b


def uses_copy(run: Path, monkeypatch) -> bool:
    """Whether columnar.read_counters answers from the copy (run.db's rows are not fetched)."""
    called = []
    real = read.read_counters
    monkeypatch.setattr(read, "read_counters", lambda *a, **k: called.append(1) or real(*a, **k))
    through_copy(run)
    monkeypatch.setattr(read, "read_counters", real)
    return not called


def reader_copy(run: Path, name: str = columnar.COUNTERS) -> Path:
    """Where a reader keeps its copy of the run: the per-user cache (rundir.copies), never the run."""
    return copies.cached_path(run, name)


def no_cache(monkeypatch) -> None:
    """A cache that cannot be made (its parent is a file): a reader has nowhere to keep a copy."""
    monkeypatch.setenv(copies.CACHE_ENV, "/dev/null/nestlab")


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    return synthetic_run(tmp_path_factory.mktemp("columnar") / "run", seconds=60, apps=2, conns=3, churn_s=10)


def test_copy_written_then_used_with_the_same_arrays(synthetic, monkeypatch):
    copy = reader_copy(synthetic)
    copy.unlink(missing_ok=True)
    want = from_db(synthetic)
    assert_same(through_copy(synthetic), want)      # read from run.db, copy written (in the cache)
    assert copy.is_file() and not columnar.copy_path(synthetic).exists()
    assert uses_copy(synthetic, monkeypatch)
    got = through_copy(synthetic)
    assert_same(got, want)
    assert not got[0]["vals"].flags.writeable      # mapped, not copied


def test_write_after_run_makes_the_copy_the_reader_uses(synthetic, monkeypatch):
    columnar.copy_path(synthetic).unlink(missing_ok=True)
    reader_copy(synthetic).unlink(missing_ok=True)
    assert columnar.write_after_run(synthetic) == columnar.copy_path(synthetic)
    assert uses_copy(synthetic, monkeypatch)


def test_any_write_to_run_db_makes_the_copy_stale(tmp_path, monkeypatch):
    run = synthetic_run(tmp_path / "run", seconds=30, apps=1, conns=2, churn_s=10)
    assert columnar.write_after_run(run)
    conn = sqlite3.connect(run / "run.db")
    conn.execute("UPDATE counters SET total_msgs = total_msgs + 1 WHERE rowid = 5")   # same size, same rows
    conn.commit()
    conn.close()
    assert not uses_copy(run, monkeypatch)
    assert_same(through_copy(run), from_db(run))
    assert uses_copy(run, monkeypatch)           # made again for the next reader


@pytest.mark.parametrize("damage", [d for d in DAMAGES if d not in FATAL + COPIES and not d.startswith("manifest")])
def test_damaged_runs_read_the_same_through_the_copy(tmp_path, damage, monkeypatch):
    """A copy made before the damage is stale after it; the one made from the damaged run.db holds
    what reading run.db gives, warnings and rows that cannot be placed included."""
    run = synthetic_base(tmp_path / "run")
    assert columnar.write_after_run(run)
    DAMAGES[damage](run)
    want = from_db(run)
    assert_same(through_copy(run), want)
    assert uses_copy(run, monkeypatch)
    assert_same(through_copy(run), want)


def test_a_copy_that_cannot_be_written_or_read_is_no_failure(tmp_path, monkeypatch):
    run = synthetic_run(tmp_path / "run", seconds=20, apps=1, conns=2, churn_s=10)
    want = from_db(run)
    (run / columnar.DIR).write_text("not a directory")     # nowhere to write the run's copy
    no_cache(monkeypatch)                                  # nor the reader's
    assert_same(through_copy(run), want)
    assert columnar.write_after_run(run) is None
    (run / columnar.DIR).unlink()
    assert columnar.write_after_run(run)
    monkeypatch.undo()
    columnar.copy_path(run).write_bytes(b"garbage" * 100)   # a damaged copy: run.db is read
    assert not uses_copy(run, monkeypatch)
    assert_same(through_copy(run), want)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_a_read_only_run_directory_is_read_from_run_db(tmp_path):
    run = synthetic_run(tmp_path / "run", seconds=20, apps=1, conns=2, churn_s=10)
    want = from_db(run)
    run.chmod(0o555)
    try:
        assert_same(through_copy(run), want)
        assert not columnar.copy_path(run).exists()
    finally:
        run.chmod(0o755)


def stretches_of(run: Path):
    from analysis.model.stretches import load_stretches

    r = load_stretches(run)
    return r.warnings, r.modules, [(st.modules, st.kinds, st.edges, st.seqs.tolist(),
                                    {d: {f: getattr(c, f).copy() for f in c.__dataclass_fields__}
                                     for d, c in st.counters.items()}) for st in r.stretches]


@pytest.mark.parametrize("damage", [None, "counter_text", "counter_keys_not_numbers", "snapshot_row_missing",
                                    "snapshot_time_backwards", "module_dies_before_born", "wal_lost"])
def test_load_stretches_the_same_with_and_without_the_copy(tmp_path, damage, monkeypatch):
    run = synthetic_base(tmp_path / "run")
    if damage:
        DAMAGES[damage](run)
    no_cache(monkeypatch)                 # no copy can be written: run.db read
    plain = stretches_of(run)
    monkeypatch.undo()
    assert stretches_of(run)[:2] == plain[:2]   # copy written
    with_copy = stretches_of(run)               # copy read
    assert with_copy[:2] == plain[:2]
    for a, b in zip(with_copy[2], plain[2], strict=True):
        assert a[:4] == b[:4]
        for d in a[4]:
            for f in a[4][d]:
                assert np.array_equal(a[4][d][f], b[4][d][f]), (d, f)


def test_arrays_kept_under_a_key(tmp_path):
    cols = {"x": np.linspace(0, 1, 1000), "flag": np.arange(1000) % 3 == 0, "n": np.arange(1000, dtype=np.int64)}
    assert columnar.write_arrays(tmp_path, "t.arrow", {"k": 1}, cols, {"note": [1, "a"]}) is not None
    got, meta = columnar.read_arrays(tmp_path, "t.arrow", {"k": 1})
    assert meta == {"note": [1, "a"]}
    for name, a in cols.items():
        assert got[name].dtype == a.dtype and np.array_equal(got[name], a), name
        assert not got[name].flags.writeable                 # the mapped file, read-only
        assert got[name][10:20].base is got[name]            # a view of it has it as its base (analysis.model.batch)
    assert columnar.read_arrays(tmp_path, "t.arrow", {"k": 2}) is None        # another key
    assert columnar.read_arrays(tmp_path, "none.arrow", {"k": 1}) is None     # none
    reader_copy(tmp_path, "t.arrow").write_bytes(b"not arrow")
    assert columnar.read_arrays(tmp_path, "t.arrow", {"k": 1}) is None        # damaged: made again
