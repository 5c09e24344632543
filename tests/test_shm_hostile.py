"""The collector's reader of the counter files against files a traced process controls (issue 40,
item 4's twin for `harness/interceptor/shm.py`). The collector runs as root; each traced process owns
its `<pid>.nest`: cutting it short under the reader, naming a FIFO so, or claiming more slots than the
library makes must cost one warning for that process, never the collector (SIGBUS, a hang).

Each reading runs in a child process: a SIGBUS shows as a negative exit status, a hang as a timeout.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.interceptor import shm
from harness.interceptor.shm import InterceptorStateError, ShmFile
from tests.support.interceptor_kit import counter_file

REPO = Path(__file__).resolve().parent.parent


def child(code: str, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                       cwd=REPO, timeout=timeout)
    assert r.returncode >= 0, f"the reader was killed by signal {-r.returncode}: {r.stderr[-300:]}"
    assert r.returncode == 0, r.stderr[-600:]
    return r


def test_a_file_truncated_after_it_was_opened_is_one_reading_with_a_reason_not_sigbus(tmp_path):
    """Today: the file is mapped at open; the snapshot after the truncation touches the lost pages
    and the reader dies of SIGBUS (exit -7)."""
    path = tmp_path / "4242.nest"
    counter_file(path, 4242)
    r = child("""
        import os, sys
        from harness.interceptor.shm import ShmFile, InterceptorStateError, read_process
        f = ShmFile(sys.argv[1])
        a = f.snapshot()
        print("BEFORE", a.sockets[0].out.msgs, a.exited, repr(a.unreadable))
        os.truncate(sys.argv[1], 100)
        b = f.snapshot()
        print("AFTER", [s.out.msgs for s in b.sockets], b.exited, b.cmdline)
        print("PROBLEM", b.problems()[0])
        try:
            f.pause_state()
        except InterceptorStateError as e:
            print("PAUSE", e)
        f.close()
        try:
            read_process(sys.argv[1])
        except InterceptorStateError as e:
            print("READ", e)
        """, str(path))
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert lines["BEFORE"] == "7 False ''"
    assert lines["AFTER"] == "[7] True ['prog4242']"          # the last reading, marked: nothing more comes
    assert "truncated under its reader" in lines["PROBLEM"]
    assert "truncated" in lines["PAUSE"]
    assert "truncated header" in lines["READ"] or "bytes, expected" in lines["READ"]


def test_a_file_truncated_before_its_first_snapshot(tmp_path):
    path = tmp_path / "4242.nest"
    counter_file(path, 4242)
    r = child("""
        import os, sys
        from harness.interceptor.shm import ShmFile
        f = ShmFile(sys.argv[1])
        os.truncate(sys.argv[1], 4096 + 256)       # the header stays, the slots go
        s = f.snapshot()
        print(s.pid, s.exited, len(s.sockets), s.cmdline, "truncated" in s.unreadable)
        """, str(path))
    assert r.stdout.split() == ["4242", "True", "0", "['prog4242']", "True"]


def test_the_collector_warns_once_for_the_truncated_file_and_goes_on_with_the_others(tmp_path):
    """Two live processes' files (the child's own pid and its parent's: alive, same network
    namespace); one is cut short after the first poll. Today: SIGBUS at the second poll."""
    r = child("""
        import os, sys
        from tests.support.interceptor_kit import counter_file
        from pathlib import Path
        from harness.collector.appsockets import InterceptorSource
        d = Path(sys.argv[1])
        mine, theirs = d / f"{os.getpid()}.nest", d / f"{os.getppid()}.nest"
        counter_file(mine, os.getpid(), out_msgs=5)
        counter_file(theirs, os.getppid(), out_msgs=9)
        src = InterceptorSource(d)
        def apps():
            return sorted(o.key for o in src.poll() if o.key.startswith("app:"))
        print("FIRST", apps())
        os.truncate(theirs, 200)
        print("SECOND", apps())
        print("THIRD", apps())
        print("WARNINGS", len(src.warnings()))
        for w in src.warnings():
            print("WARN", w)
        src.close()
        """, str(tmp_path))
    out = dict(line.split(" ", 1) for line in r.stdout.splitlines() if not line.startswith("WARN "))
    ours = f"app:{os.getpid()}"                                     # the child's parent: the truncated one
    assert out["FIRST"].count("app:") == 2 and ours in out["FIRST"]
    assert out["SECOND"] == out["THIRD"] and out["SECOND"].count("app:") == 1 and ours not in out["SECOND"]
    assert out["WARNINGS"] == "1"
    warn = next(x for x in r.stdout.splitlines() if x.startswith("WARN "))
    assert f"[{ours}] prog{os.getpid()}" in warn and "truncated under its reader" in warn


def test_a_fifo_named_like_a_counter_file_is_refused_without_blocking(tmp_path):
    """Today: os.open(O_RDONLY) of a FIFO waits for a writer: the collector hangs for ever."""
    fifo = tmp_path / "4242.nest"
    os.mkfifo(fifo)
    r = child("""
        import sys
        from harness.interceptor.shm import ShmFile, InterceptorStateError
        try:
            ShmFile(sys.argv[1])
        except InterceptorStateError as e:
            print("REFUSED", e)
        """, str(fifo), timeout=10)
    assert r.stdout.startswith("REFUSED") and "not a regular file" in r.stdout


def test_a_link_is_not_followed(tmp_path):
    target = tmp_path / "real"
    counter_file(target, 4242)
    link = tmp_path / "4242.nest"
    link.symlink_to(target)
    with pytest.raises(InterceptorStateError, match="not a regular file"):
        ShmFile(link)


def test_more_slots_than_the_library_makes_are_refused(tmp_path):
    """Today: a header claiming 65537 slots on a file of that size is mapped and walked (a sparse file
    of any size is given its space first: root fallocates what the process asked for)."""
    path = tmp_path / "4242.nest"
    counter_file(path, 4242, slots=4)
    with open(path, "r+b") as f:
        f.seek(20)
        f.write(struct.pack("<I", shm.MAX_SLOTS + 1))
    os.truncate(path, shm.HEADER_SIZE + (shm.MAX_SLOTS + 1) * shm.SLOT_SIZE)
    with pytest.raises(InterceptorStateError, match="more than the library makes"):
        ShmFile(path)
    assert os.stat(path).st_blocks * 512 < 1 << 20                 # and nothing was allocated for it


def test_slots_in_use_grow_between_snapshots(tmp_path):
    """The reader copies the slots the last snapshot used; a socket on a higher fd is still read."""
    path = tmp_path / "4242.nest"
    counter_file(path, 4242, max_fd=1)
    f = ShmFile(path)
    try:
        assert f.snapshot().sockets == []
        with open(path, "r+b") as w:
            w.seek(64)
            w.write(struct.pack("<I", 4))
        assert [s.out.msgs for s in f.snapshot().sockets] == [7]
    finally:
        f.close()
