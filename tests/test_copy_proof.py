"""A copy's bytes are proven once, by its writer (rundir.copies, "proof"): a reader that finds the copy's
identity (device, inode, size, mtime, ctime) as the proof recorded it uses it without reading all its
bytes for the checksum again (the read bench's ~25 ms on a 63 MB copy); any change to the copy after
the proof, even one that puts its mtime back, or a proof others could have written, sends the reader
back to the checksum, which catches the change (issue 30's read bench)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from rundir import columnar, copies
from rundir.db import connect
from tests.support.damaged import flip_in_place, synthetic_base


@pytest.fixture
def run(tmp_path) -> Path:
    path = synthetic_base(tmp_path / "run")
    for side in ("run.db-wal", "run.db-shm"):
        (path / side).unlink(missing_ok=True)
    return path


def _read(run: Path) -> tuple[dict, list[str]]:
    conn = connect(run / "run.db", readonly=True)
    try:
        warnings: list[str] = []
        rows, _ = columnar.read_counters(run / "run.db", conn, warnings)
        return rows, warnings
    finally:
        conn.close()


@pytest.fixture
def digests(monkeypatch) -> list[int]:
    """The bytes each call of copies.digest read (the checksum's cost)."""
    calls: list[int] = []
    real = copies.digest

    def counted(parts):
        out = real(parts)
        calls.append(int(out.rsplit(":", 1)[1]))
        return out
    monkeypatch.setattr(copies, "digest", counted)
    return calls


def _proof(copy: Path) -> Path:
    return copy.with_name(copy.name + copies.PROOF)


def test_a_proven_copy_is_used_without_its_checksum_and_gives_the_same_rows(run, digests):
    copy = columnar.write_after_run(run)
    assert copy is not None and _proof(copy).is_file()
    digests.clear()
    proven, said = _read(run)
    assert digests == [] and said == []                       # used (no rewrite), bytes not summed again
    _proof(copy).unlink()
    checked, said = _read(run)
    assert len(digests) == 1 and digests[0] > copy.stat().st_size // 2 and said == []   # the whole copy summed
    assert proven.keys() == checked.keys()
    for k in proven:
        assert np.array_equal(proven[k], checked[k]), k


def test_a_change_after_the_proof_is_caught_by_the_checksum_even_with_its_mtime_put_back(run, digests):
    copy = columnar.write_after_run(run)
    flip_in_place(copy, "vals")
    digests.clear()
    _, said = _read(run)
    assert len(digests) >= 1
    assert any("counters.arrow: does not match its checksum" in w for w in said), said


@pytest.mark.parametrize("how", ["open to others", "a link"])
def test_a_proof_that_is_not_the_readers_own_is_not_trusted(run, how, tmp_path):
    copy = columnar.write_after_run(run)
    proof = _proof(copy)
    flip_in_place(copy, "vals")
    # A proof naming the changed copy's identity, as someone else might plant it.
    st = copy.stat()
    forged = proof.read_text().replace(proof.read_text().split('"identity": ')[1].split("]")[0] + "]",
                                       str([st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]))
    proof.unlink()
    if how == "a link":
        (tmp_path / "planted").write_text(forged)
        proof.symlink_to(tmp_path / "planted")
    else:
        proof.write_text(forged)
        proof.chmod(0o666)
    d = os.open(copy.parent, os.O_RDONLY)
    try:
        assert copies._proven(d, copy.name, copy.stat()) is None
    finally:
        os.close(d)
    _, said = _read(run)
    assert any("does not match its checksum" in w for w in said), said


def test_the_writer_reads_the_copy_back_only_once_the_clock_is_past_its_last_change(run, monkeypatch):
    seen = []
    real = columnar._sum_of

    def check(mm):
        place = run / columnar.DIR
        copy_ctime = (place / columnar.COUNTERS).stat().st_ctime_ns
        clocks = [p.stat().st_ctime_ns for p in place.glob(f".{columnar.COUNTERS}{copies.PROOF}.*.tmp")]
        seen.append(bool(clocks) and min(clocks) > copy_ctime)
        return real(mm)
    monkeypatch.setattr(columnar, "_sum_of", check)
    copy = columnar.write_after_run(run)
    assert seen == [True] and _proof(copy).is_file()
    assert not list((run / columnar.DIR).glob(".*.tmp"))      # the proof's temporary name is gone
