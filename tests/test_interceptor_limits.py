"""The LD_PRELOAD interceptor at its limits, and under real applications: no program may die or hang
because of it (a full or tiny shm, a preempted writer or reader, a dead thread's lock, EINTR), what it
could not count reaches the collector's warnings, and real wget and iperf on 127.0.0.1 are counted and
paused. The fixtures (lib, probe, shm_dir, procs, sink) are tests/support/interceptor_kit.py's."""

from __future__ import annotations

import errno
import http.server
import mmap
import os
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.collector.appsockets import InterceptorSource, warnings_from_log
from harness.interceptor import shm
from harness.interceptor.pause import pause_process, pause_state, resume_process
from harness.interceptor.shm import (
    CLOSED,
    ShmFile,
    read_process,
    shm_file,
)
from tests.support.interceptor_kit import (
    NEEDS_GCC,
    REPO,
    Proc,
    counter_file,
    env_for,
    sock_of,
    wait_until,
)

pytestmark = NEEDS_GCC


# ---- at its limits: no program may die or hang because of the interceptor --------------------------

needs_mount_ns = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                    reason="needs root and unshare (a small tmpfs in a private mount namespace)")


def _small_tmpfs(procs, lib, mnt: Path, args, fill: bool = False) -> Proc:
    """Start args under the interceptor, with NESTLAB_SHM_DIR a fresh 256 KiB tmpfs mounted at mnt in
    a private mount namespace (filled up first if `fill`). Its files: /proc/<pid>/root<mnt>."""
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k nestlab-test {mnt}"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a private mount namespace: {probe.stderr.strip()}")
    base = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("NESTLAB_")}
    script = f"mount -t tmpfs -o size=256k,mode=0700 nestlab-test {mnt} || exit 97\n"
    if fill:
        script += f"dd if=/dev/zero of={mnt}/fill bs=4k 2>/dev/null\n"
    script += "exec env " + shlex.join([f"LD_PRELOAD={lib}", f"NESTLAB_SHM_DIR={mnt}", *map(str, args)])
    return procs(["unshare", "-m", "sh", "-c", script], base)


@needs_mount_ns
@pytest.mark.timeout(60)
def test_full_shm_gives_a_flagged_header_only_file_never_sigbus(lib, probe, procs, sink, tmp_path):
    """(a) 4096 slots need 1 MiB; 256 KiB of tmpfs hold the header only. Today's file is sparse: the
    probe's sockets on fds 100, 116, ... 1364 touch 80 pages of slots, the 65th write is SIGBUS and
    the probe dies."""
    mnt = tmp_path / "shm"
    mnt.mkdir()
    s = sink("drain")
    p = _small_tmpfs(procs, lib, mnt, [probe, "highfd", s.port, 100, 80])
    h = p.expect("HIGH")
    shm_dir = f"/proc/{p.pid}/root{mnt}"
    snap = read_process(shm_file(shm_dir, p.pid))
    assert snap.no_space and snap.nslots == 0 and snap.want_slots == 4096
    assert snap.space_errno == errno.ENOSPC
    assert snap.sockets == [] and snap.untracked == 1 + 80      # the socket and its 80 dups
    assert snap.problems()[0].startswith("no space in the shared memory")
    st = pause_process(shm_dir, p.pid)                          # the application fault still works
    assert st.paused and resume_process(shm_dir, p.pid).ack_seq == 2
    src = InterceptorSource(shm_dir)                            # the collector: no module, a warning
    try:
        assert src.poll() == []
        assert len(src.warnings()) == 1 and f"[app:{h['pid']}]" in src.warnings()[0]
        assert "no space" in src.warnings()[0] and "81 socket(s) not tracked (no slots)" in src.warnings()[0]
    finally:
        src.close()
    p.send()
    assert p.wait() == 0
    assert "not counting: no space for 4096 slots" in p.stderr_text()


@needs_mount_ns
@pytest.mark.timeout(60)
def test_shm_without_room_for_a_header_leaves_the_program_uncounted_not_dead(lib, probe, procs, sink, tmp_path):
    """(a) A full tmpfs: no file at all, one line on stderr. Today: SIGBUS at the header's first byte."""
    mnt = tmp_path / "shm"
    mnt.mkdir()
    s = sink("drain")
    p = _small_tmpfs(procs, lib, mnt, [probe, "highfd", s.port, 40], fill=True)
    h = p.expect("HIGH")
    assert not shm_file(f"/proc/{p.pid}/root{mnt}", h["pid"]).exists()
    p.send()
    assert p.wait() == 0
    assert "not counting: No space left on device" in p.stderr_text()


@needs_mount_ns
@pytest.mark.timeout(60)
def test_reader_never_maps_a_sparse_file_it_cannot_fill(procs, tmp_path):
    """(a) A file of an earlier build is sparse; reading its holes in a full tmpfs allocates pages:
    SIGBUS in the collector. The reader gives the file its space first, or does not read it."""
    mnt = tmp_path / "shm"
    mnt.mkdir()
    if subprocess.run(["unshare", "-m", "true"]).returncode != 0:
        pytest.skip("cannot make a mount namespace")
    holder = procs(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=2m nestlab-test {mnt} && echo READY "
                    "&& exec sleep 60"], None)
    try:
        holder.expect("READY")
    except AssertionError:
        pytest.skip(f"cannot mount a tmpfs in a private mount namespace: {holder.stderr_text()}")
    root = Path(f"/proc/{holder.pid}/root{mnt}")
    path = root / "4242.nest"
    counter_file(path, 4242, slots=4096, max_fd=4096, sparse=True)   # 1 MiB, sparse: one page allocated
    fd = os.open(root / "fill", os.O_WRONLY | os.O_CREAT, 0o600)
    try:                                                      # now nothing is left
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    code = ("import sys; from harness.interceptor.shm import read_process, InterceptorStateError\n"
            "try:\n    read_process(sys.argv[1])\nexcept InterceptorStateError as e:\n    print('REFUSED', e)\n")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, f"the reader died (rc {r.returncode}): {r.stderr[-300:]}"
    assert r.stdout.startswith("REFUSED") and "sparse" in r.stdout
    os.unlink(root / "fill")                                  # room again: given its space, then read
    assert sock_of(read_process(path), 3).out.msgs == 7


def test_reader_waits_for_a_preempted_writer_and_never_drops_the_slot(tmp_path, monkeypatch):
    """(b) The flaky pause test's vanishing slot: a writer preempted inside its update holds the
    seqlock for milliseconds; the reader gave up after 50 quick retries and reported no socket."""
    path = tmp_path / "4242.nest"
    counter_file(path, 4242, sparse=True)
    seq_off = shm.HEADER_SIZE + 3 * shm.SLOT_SIZE + shm.DIR_OFF[1]
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), 0)
    try:
        struct.pack_into("<Q", mm, seq_off, (5 << 32) | (777 << 1) | 1)     # held by thread 777

        def let_go():
            time.sleep(0.02)
            struct.pack_into("<QQ", mm, seq_off, 6 << 32, 8)               # its update, released
        monkeypatch.setattr(shm, "SLOT_PATIENCE_S", 1.0, raising=False)   # a busy test machine
        t = threading.Thread(target=let_go)
        t.start()
        snap = read_process(path)
        t.join()
        assert sock_of(snap, 3).out.msgs == 8
        # a holder that never lets go: the slot is still there, waited for once, then not again
        monkeypatch.setattr(shm, "SLOT_PATIENCE_S", 0.05, raising=False)
        struct.pack_into("<Q", mm, seq_off, (7 << 32) | (777 << 1) | 1)
        f = ShmFile(path)
        try:
            t0 = time.monotonic()
            a = f.snapshot()
            t1 = time.monotonic()
            b = f.snapshot()
            t2 = time.monotonic()
        finally:
            f.close()
        assert sock_of(a, 3).out.msgs == sock_of(b, 3).out.msgs == 8
        assert t1 - t0 >= 0.05 and t2 - t1 < 0.02
    finally:
        mm.close()


def _lock_case(lib, probe, shm_dir, procs, case, **env):
    p = procs([probe, "lock", case], {**env_for(shm_dir, lib), **env})
    r = p.expect("LOCK")
    snap = read_process(shm_file(shm_dir, p.pid), with_closed=True)
    p.send()
    assert p.wait() == 0
    return r, snap


@pytest.mark.timeout(60)
def test_a_writer_waits_for_a_preempted_thread_instead_of_taking_its_lock(lib, probe, shm_dir, procs):
    """(b) Closing a socket while another thread (preempted, 300 ms) is inside its send counters.
    Today the close takes the lock after a short spin: it finishes at once, the holder's update lands
    on the closed slot and is missing from the application's totals."""
    r, snap = _lock_case(lib, probe, shm_dir, procs, "other")
    a = sock_of(snap, r["a_fd"])
    assert a.state == CLOSED and a.out.pending == 0
    assert r["close_ms"] >= 250
    assert snap.retired_out.msgs == 1 + 2 + 100                 # connect, 2 sends, the holder's 100
    assert snap.forced == snap.lost == snap.unended == 0


@pytest.mark.timeout(60)
def test_a_lock_left_by_a_dead_thread_is_taken_over_and_counted(lib, probe, shm_dir, procs):
    r, snap = _lock_case(lib, probe, shm_dir, procs, "dead", NESTLAB_LOCK_WAIT_MS="5000")
    assert r["close_ms"] < 1000                                # not the 5 s of a live holder
    assert sock_of(snap, r["a_fd"]).state == CLOSED and snap.retired_out.msgs == 1 + 2
    assert snap.forced == 1
    assert "1 counter lock(s) taken over" in " ".join(snap.problems())


@pytest.mark.timeout(60)
def test_a_thread_never_waits_for_a_lock_it_holds_itself(lib, probe, shm_dir, procs):
    """A signal handler re-entering the library on the socket its thread was updating."""
    r, snap = _lock_case(lib, probe, shm_dir, procs, "self", NESTLAB_LOCK_WAIT_MS="5000")
    assert r["send_ms"] < 500 and r["send_rc"] == 1
    a = sock_of(snap, r["a_fd"])
    assert a.out.msgs == 1 + 2 + 1 and a.out.pending == 0 and snap.lost == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", ["end", "defer"])
def test_the_end_of_a_call_is_never_lost_leaving_the_socket_waiting(lib, probe, shm_dir, procs, case):
    """(c) A recv ends while another thread holds its counters' lock (300 ms; 400 ms with a 50 ms
    wait limit, so its end is recorded later, at the program's next call). Today the end is dropped
    after a short spin: the socket shows the recv in progress for ever, its wait growing."""
    env = {"NESTLAB_LOCK_WAIT_MS": "50"} if case == "defer" else {}
    r, snap = _lock_case(lib, probe, shm_dir, procs, case, **env)
    assert r["got"] == 10
    a = sock_of(snap, r["a_fd"])
    assert a.inp.pending == 0 and a.inp.msgs == 1 and a.inp.bytes == 10
    assert snap.lost == snap.unended == snap.forced == 0
    assert snap.deferred == (1 if case == "defer" else 0)


@pytest.mark.timeout(90)
def test_pause_and_resume_signals_never_surface_as_eintr(lib, probe, shm_dir, procs, sink):
    """(d) Timed waits that SA_RESTART does not restart, hit by pause/resume every 15 ms: each ends as
    it would have without the signals (timeout, after its full time), never with EINTR; the
    program's own signal still interrupts. Today poll, select, epoll, the sleeps... return EINTR."""
    s = sink("hold")
    p = procs([probe, "eintr", s.port], env_for(shm_dir, lib))
    p.expect("EINTR_READY")
    stop = threading.Event()

    def signals():
        while not stop.is_set():
            pause_process(shm_dir, p.pid)
            time.sleep(0.015)
            resume_process(shm_dir, p.pid)
            time.sleep(0.015)
    t = threading.Thread(target=signals)
    t.start()
    try:
        p.send()
        p.expect("OWN", timeout=60)
    finally:
        stop.set()
        t.join()
    p.send()
    res = p.expect("EINTR")
    assert res.pop("alarms") == 1
    rc, err, ms, _ = res.pop("own_alarm")
    assert (rc, err) == (-1, errno.EINTR) and ms < 1000
    timed_out = {"recv_timeout": errno.EAGAIN, "sem_timedwait": errno.ETIMEDOUT, "sigtimedwait": errno.EAGAIN}
    for name, (rc, err, ms, expected) in res.items():
        want = (-1, timed_out[name]) if name in timed_out else (0, 0)
        assert (rc, err) == want, (name, rc, errno.errorcode.get(err, err))
        assert expected - 2 <= ms < expected + 400, (name, ms)
    snap = read_process(shm_file(shm_dir, p.pid))
    assert snap.eintr_retried > 0
    p.send()
    assert p.wait() == 0


@pytest.mark.timeout(60)
def test_what_could_not_be_counted_reaches_the_collector_warnings(lib, probe, shm_dir, procs, sink, capsys,
                                                                  tmp_path):
    """(e) Sockets beyond the slots (NESTLAB_MAX_FDS=64, a dup on fd 100) and a lock taken from a dead
    thread: counted in the file, said by the collector source on stderr (the collector's log) and
    read back from the log for the run's warnings."""
    s = sink("drain")
    p = procs([probe, "highfd", s.port, 100], env_for(shm_dir, lib, max_fds=64))
    h = p.expect("HIGH")
    q = procs([probe, "lock", "dead"], env_for(shm_dir, lib))
    lk = q.expect("LOCK")
    snap = read_process(shm_file(shm_dir, p.pid))
    assert snap.untracked == 1 and snap.flags & shm.HF_FD_OVERFLOW
    src = InterceptorSource(shm_dir)
    try:
        obs = {o.key for o in src.poll()}
        assert f"sock:{p.pid}:{h['a_fd']}:{h['inode']}" in obs     # the fd below 64 is counted
        assert src.poll() and len(src.warnings()) == 2             # said once, not every poll
    finally:
        src.close()
    p.send()
    q.send()
    assert p.wait() == 0 and q.wait() == 0
    err = capsys.readouterr().err
    log = tmp_path / "collector.log"
    log.write_text("collector: ready\n" + err)
    got = {w.split("]")[0] + "]": w for w in warnings_from_log(log)}
    assert sorted(got) == sorted([f"[app:{p.pid}]", f"[app:{lk['pid']}]"])
    assert got[f"[app:{p.pid}]"].startswith(
        f"[app:{p.pid}] nestprobe (pid {p.pid}): 1 socket(s) not tracked (fd beyond its 64 slots")
    assert "1 counter lock(s) taken over" in got[f"[app:{lk['pid']}]"]


# ---- real applications --------------------------------------------------------------------------

BODY = 3 * 1024 * 1024
CHUNK = 64 * 1024


class SlowHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(BODY))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        block = b"\0" * CHUNK
        try:
            for _ in range(BODY // CHUNK):
                self.wfile.write(block)
                time.sleep(0.03)
        except OSError:
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowHandler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.skipif(shutil.which("wget") is None, reason="needs wget")
def test_wget_counts_and_pause(lib, shm_dir, procs, http_server, tmp_path):
    port = http_server.server_address[1]
    p = procs(["wget", "-q", "-O", "out.bin", f"http://127.0.0.1:{port}/file"], env_for(shm_dir, lib),
              cwd=tmp_path)
    src = InterceptorSource(shm_dir)
    try:
        def sock_obs():   # attrs come with a module's first observation only
            obs = src.poll()
            socks = [o for o in obs if o.kind == "socket"]
            return (socks, {o.key: o for o in obs}) if socks else None
        socks, obs = wait_until(sock_obs)
        assert len(socks) == 1
        sk = socks[0]
        assert (sk.attrs["dst"], sk.attrs["dport"]) == ("127.0.0.1", port)
        assert os.readlink(f"/proc/{p.pid}/fd/{sk.attrs['fd']}") == f"socket:[{sk.attrs['inode']}]"
        assert sk.children == [f"tcp:{sk.attrs['inode']}"]
        app = obs[f"app:{p.pid}"]
        assert app.children == [sk.key] and app.name.startswith("wget")
        assert wait_until(lambda: read_process(shm_file(shm_dir, p.pid)).sockets[0].inp.bytes > 300_000)
        st = pause_process(shm_dir, p.pid)                  # wget has its own SIGUSR1 handler
        assert st.paused and st.handler_kept
        assert wait_until(lambda: pause_state(shm_dir, p.pid).paused_threads == 1)
        a = read_process(shm_file(shm_dir, p.pid)).sockets[0]
        time.sleep(0.5)
        b = read_process(shm_file(shm_dir, p.pid)).sockets[0]
        assert (a.inp.msgs, a.inp.bytes) == (b.inp.msgs, b.inp.bytes)
        assert b.inp.wait_ms - a.inp.wait_ms < 1
        assert not (tmp_path / "wget-log").exists()          # wget's own handler did not run
        resume_process(shm_dir, p.pid)
        assert p.wait(timeout=30) == 0
    finally:
        src.close()
    assert (tmp_path / "out.bin").stat().st_size == BODY
    snap = read_process(shm_file(shm_dir, p.pid), with_closed=True)
    inp, out = snap.app_counters()
    assert BODY < inp.bytes < BODY + 4096                   # body and headers, read once
    assert BODY / 65536 <= inp.msgs <= inp.bytes / 16       # many reads, none empty-handed
    assert out.msgs >= 2 and out.bytes < 1024               # connect and the request
    assert inp.wait_ms > 500                                # select/read waiting on a slow server
    assert inp.errors == out.errors == 0


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.skipif(shutil.which("iperf") is None, reason="needs iperf")
def test_iperf_counts_and_survives_pause(lib, shm_dir, procs):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("NESTLAB_")}
    server = procs(["iperf", "-s", "-B", "127.0.0.1", "-p", port], base)
    time.sleep(0.3)
    p = procs(["iperf", "-c", "127.0.0.1", "-p", port, "-t", "2.5", "-P", "2"], env_for(shm_dir, lib))
    assert wait_until(lambda: shm_file(shm_dir, p.pid).exists()
                      and read_process(shm_file(shm_dir, p.pid)).app_counters()[1].bytes > 50_000_000)
    st = pause_process(shm_dir, p.pid)                      # without the interceptor: SIGUSR1 kills iperf
    assert wait_until(lambda: pause_state(shm_dir, p.pid).paused_threads == 2)
    a = read_process(shm_file(shm_dir, p.pid)).app_counters()[1]
    time.sleep(0.4)
    b = read_process(shm_file(shm_dir, p.pid)).app_counters()[1]
    assert (a.msgs, a.bytes) == (b.msgs, b.bytes) and b.wait_ms - a.wait_ms < 1
    resume_process(shm_dir, p.pid)
    assert st.paused and p.wait(timeout=30) == 0
    snap = read_process(shm_file(shm_dir, p.pid), with_closed=True)
    data = [s for s in snap.sockets if s.is_graph and not s.is_listening]
    assert len(data) == 2
    for s in data:
        # 128 KB per write; connect and a small header are the only others
        assert abs(s.out.msgs - s.out.bytes / 131072) <= 4, (s.out.msgs, s.out.bytes)
        assert s.out.msgs > 100 and s.out.errors == 0
    inp, out = snap.app_counters()
    assert out.msgs == sum(s.out.msgs for s in data) and out.bytes == sum(s.out.bytes for s in data)
    assert server.p.poll() is None
