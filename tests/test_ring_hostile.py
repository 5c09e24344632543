"""The drainer (root) against ring files a traced process controls (issue 40 items 4, 5 and 9): a ring
truncated between drains, an absurd capacity, a FIFO named N.nest, a header claiming another pid, a
link; and its endpoint-name cache stays bounded. Crafted rings (tests/support/rings.py), no library."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from harness.collector import tracedrain
from harness.collector.tracedrain import TraceDrainer
from harness.interceptor import ring as R
from harness.interceptor.shm import HEADER_SIZE, InterceptorStateError
from rundir.db import create_db
from rundir.messages import MessageWriter
from tests.support.rings import event, write_ring

REPO = Path(__file__).resolve().parent.parent
DEAD_PID = 4_000_000     # above any pid_max: never a live process


def drainer(tmp_path: Path, d: Path) -> tuple[TraceDrainer, object]:
    conn = create_db(tmp_path / "run.db")
    conn.isolation_level = None
    return TraceDrainer({"h": str(d)}, MessageWriter(conn)), conn


def in_child(code: str, timeout: float = 20) -> subprocess.CompletedProcess:
    """Python code in a child (a SIGBUS or a hang must fail the test, not kill or hold pytest)."""
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_a_ring_truncated_between_drains_is_an_error_not_sigbus(tmp_path):
    path = write_ring(tmp_path / f"{DEAD_PID}.nest", DEAD_PID, 1024, [event(k) for k in range(3)])
    code = f"""
import os
from harness.interceptor.ring import TraceRing
from harness.interceptor.shm import InterceptorStateError
ring = TraceRing({str(path)!r})
assert len(ring.drain()) == 3
os.truncate({str(path)!r}, 4096)
try:
    ring.drain(final=True)
except InterceptorStateError as e:
    print("refused:", e)
"""
    r = in_child(code)
    assert r.returncode == 0, (r.returncode, r.stderr[-500:])
    assert "truncated under its reader" in r.stdout


def test_the_drainer_goes_on_past_a_truncated_ring(tmp_path):
    d = tmp_path / "shm"
    d.mkdir()
    bad = write_ring(d / f"{DEAD_PID}.nest", DEAD_PID, 64, [event(k) for k in range(3)])
    write_ring(d / f"{DEAD_PID + 1}.nest", DEAD_PID + 1, 64, [event(k) for k in range(5)])
    code = f"""
import os
from harness.collector.tracedrain import TraceDrainer
from rundir.db import create_db
from rundir.messages import MessageWriter
conn = create_db({str(tmp_path / 'run.db')!r}); conn.isolation_level = None
dr = TraceDrainer({{"h": {str(d)!r}}}, MessageWriter(conn))
dr._scan()
os.truncate({str(bad)!r}, 100)
print("rows", dr.drain(), conn.execute("SELECT pid, count(*) FROM messages GROUP BY pid").fetchall())
"""
    r = in_child(code)
    assert r.returncode == 0, (r.returncode, r.stderr[-500:])
    assert f"rows 5 [({DEAD_PID + 1}, 5)]" in r.stdout
    assert "truncated under its reader" in r.stderr


def test_a_ring_of_2_31_events_on_a_sparse_file_is_refused(tmp_path):
    cap = 1 << 31
    path = write_ring(tmp_path / f"{DEAD_PID}.nest", DEAD_PID, cap, [event(0)],
                      size=HEADER_SIZE + R.RING_SIZE + cap * R.EVENT_SIZE)
    assert R.trace_capacity(path) == cap
    with pytest.raises(InterceptorStateError, match="does not know"):
        R.TraceRing(path)


def test_a_capacity_beyond_the_file_is_refused(tmp_path):
    path = write_ring(tmp_path / f"{DEAD_PID}.nest", DEAD_PID, 1 << 16, [event(0)], size=HEADER_SIZE + 8192)
    with pytest.raises(InterceptorStateError, match="file of"):
        R.TraceRing(path)


@pytest.mark.timeout(60)
def test_the_final_drain_of_the_largest_ring_all_unpublished_is_quick(tmp_path):
    """2^22 places reserved and none published, a head a ring ahead: counted lost at numpy speed."""
    cap = 1 << 22
    path = write_ring(tmp_path / f"{DEAD_PID}.nest", DEAD_PID, cap, [event(cap - 1)], head=2 * cap - 1, tail=cap - 1)
    ring = R.TraceRing(path)
    try:
        t0 = time.perf_counter()
        got = ring.drain(final=True)
        took = time.perf_counter() - t0
    finally:
        ring.close()
    assert len(got) == 1 and ring.lost == cap - 1 and ring.tail == 2 * cap - 1
    assert took < 10, took


def test_a_fifo_named_like_a_ring_does_not_block_the_drainer(tmp_path):
    d = tmp_path / "shm"
    d.mkdir()
    os.mkfifo(d / "123.nest")
    write_ring(d / f"{DEAD_PID}.nest", DEAD_PID, 64, [event(k) for k in range(2)])
    code = f"""
from harness.collector.tracedrain import TraceDrainer
from harness.interceptor.ring import trace_capacity
from harness.interceptor.shm import InterceptorStateError
from rundir.db import create_db
from rundir.messages import MessageWriter
conn = create_db({str(tmp_path / 'run.db')!r}); conn.isolation_level = None
print("rows", TraceDrainer({{"h": {str(d)!r}}}, MessageWriter(conn)).drain(final=True))
"""
    try:
        r = in_child(code, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("the drainer blocked on a FIFO named 123.nest")
    assert r.returncode == 0, r.stderr[-500:]
    assert "rows 2" in r.stdout
    assert "123.nest: not a regular file" in r.stderr


def test_a_link_named_like_a_ring_is_not_followed(tmp_path, capsys):
    d = tmp_path / "shm"
    d.mkdir()
    target = write_ring(tmp_path / f"{DEAD_PID}.nest", DEAD_PID, 64, [event(k) for k in range(2)])
    (d / f"{DEAD_PID}.nest").symlink_to(target)
    dr, conn = drainer(tmp_path, d)
    assert dr.drain(final=True) == 0
    assert "not a regular file" in capsys.readouterr().err
    assert R.TraceRing(target).tail == 0     # the target's tail was not moved
    conn.close()


def test_a_header_claiming_another_pid_writes_no_rows_in_its_name(tmp_path, capsys):
    d = tmp_path / "shm"
    d.mkdir()
    write_ring(d / "31337.nest", 1, 64, [event(k) for k in range(4)])
    dr, conn = drainer(tmp_path, d)
    dr.drain(final=True)
    assert conn.execute("SELECT count(*) FROM messages").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM traced").fetchone() == (0,)
    assert "claims pid 1, not the file's name" in capsys.readouterr().err
    conn.close()


def test_the_endpoint_name_cache_stays_bounded(tmp_path, monkeypatch):
    """40,000 events with distinct far ends: what the drainer keeps after the drain does not grow with
    them (the unbounded cache kept every name: ~80,000 entries here, several MiB)."""
    monkeypatch.setattr(tracedrain, "NAMES_MAX", 1000)
    d = tmp_path / "shm"
    d.mkdir()
    n = 40_000
    base = int(ipaddress.IPv4Address("10.0.0.0"))
    write_ring(d / f"{DEAD_PID}.nest", DEAD_PID, 1 << 16,
               [event(k, raddr=str(ipaddress.IPv4Address(base + k)), rport=1 + k % 60000) for k in range(n)])
    dr, conn = drainer(tmp_path, d)
    dr._scan()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        assert dr.drain(final=True) == n
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    conn.close()
    assert kept < 1_000_000, f"{kept} bytes kept after the drain"

