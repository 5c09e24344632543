"""The derived copies never write outside their place (rundir.copies): a symlinked `columnar/` or a
link planted at a temporary name is never followed; a reader (open_run, accuracy) writes nothing into
the run (no columnar/, no SQLite side files) and keeps its copies in a private per-user cache; a copy
that lies (checksum, shape, a record batch longer than its buffers) is not used, with a warning, and
the results are run.db's (issue 30, findings 1-4)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

import nestlab
from rundir import columnar, copies
from rundir.db import connect
from tests.support.damaged import lengthen_batch, synthetic_base


def tree(root: Path) -> dict[str, tuple]:
    """Every path under root with its type, size and modification time (links not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def run(tmp_path) -> Path:
    path = synthetic_base(tmp_path / "run")
    for side in ("run.db-wal", "run.db-shm"):
        (path / side).unlink(missing_ok=True)
    return path


@pytest.fixture
def outside(tmp_path) -> Path:
    d = tmp_path / "elsewhere"
    d.mkdir()
    (d / "victim").write_text("keep me\n")
    return d


def test_a_symlinked_columnar_is_never_written_through(run, outside):
    (run / columnar.DIR).symlink_to(outside)
    before = tree(outside)
    assert columnar.write_after_run(run) is None           # run-experiment's copy: refused, not redirected
    copies.claim(run)
    assert len(nestlab.open_run(run).counters)              # a claimed run's reader: nothing through the link
    assert tree(outside) == before


def test_a_planted_temporary_name_is_not_followed(run, outside):
    (run / columnar.DIR).mkdir()
    for pid in range(os.getpid() - 2, os.getpid() + 3):     # the names the writer used to use
        (run / columnar.DIR / f".{columnar.COUNTERS}.{pid}.tmp").symlink_to(outside / "victim")
    (run / columnar.DIR / columnar.COUNTERS).symlink_to(outside / "target")   # and the final name
    assert columnar.write_after_run(run) == columnar.copy_path(run)
    assert (outside / "victim").read_text() == "keep me\n"
    assert not (outside / "target").exists()
    assert not columnar.copy_path(run).is_symlink()         # the link replaced, never followed


def test_reading_a_run_writes_nothing_into_it(run):
    before = tree(run)
    r = nestlab.open_run(run)
    assert len(r.counters) and len(r.diagnose()) and len(r.accuracy())
    assert tree(run) == before                              # no columnar/, no run.db-wal, no run.db-shm
    cached = copies.cached_path(run, columnar.STRETCHES)
    assert cached is not None and cached.is_file()          # the reader's copies are in its cache
    assert stat.S_IMODE(cached.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(cached.stat().st_mode) == 0o600


def test_a_cache_another_user_could_write_is_not_used(run, tmp_path, monkeypatch):
    shared = tmp_path / "shared-cache"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv(copies.CACHE_ENV, str(shared))
    assert len(nestlab.open_run(run).counters)
    assert list(shared.iterdir()) == []                     # open to others: neither written nor read
    link = tmp_path / "linked-cache"
    link.symlink_to(tmp_path / "elsewhere-cache", target_is_directory=True)
    (tmp_path / "elsewhere-cache").mkdir(mode=0o700)
    monkeypatch.setenv(copies.CACHE_ENV, str(link))
    assert len(nestlab.open_run(run).counters)
    assert list((tmp_path / "elsewhere-cache").iterdir()) == []   # a symlinked cache is not followed


def read_through_copy(run: Path) -> tuple[dict, list[str]]:
    conn = connect(run / "run.db", readonly=True)
    try:
        warnings: list[str] = []
        rows, _ = columnar.read_counters(run / "run.db", conn, warnings)
        return rows, warnings
    finally:
        conn.close()


@pytest.mark.parametrize("extra", [300, 5_000_000])
def test_a_record_batch_longer_than_its_buffers_is_refused(run, extra):
    """Unchecked, 300 rows more came in as garbage rows and 5 M crashed the process (SIGSEGV)."""
    want, _ = read_through_copy(run)                        # from run.db (the cache's copy written)
    copies.cached_path(run, columnar.COUNTERS).unlink()
    assert columnar.write_after_run(run)
    lengthen_batch(columnar.copy_path(run), extra)
    got, warnings = read_through_copy(run)
    assert len(got["seq"]) == len(want["seq"])
    assert np.array_equal(np.sort(got["seq"]), np.sort(want["seq"]))
    assert any("counters.arrow: not a valid Arrow table" in w for w in warnings), warnings


def test_another_users_copy_in_the_run_is_not_mapped(run, monkeypatch):
    """A copy in the run that someone else could change under the mapping is not used."""
    assert columnar.write_after_run(run)
    columnar.copy_path(run).chmod(0o666)
    assert [p for p, _ in copies.mapped_files(run, columnar.COUNTERS)] == []
