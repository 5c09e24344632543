"""The LD_PRELOAD interceptor, tested with real processes: tests/interceptor/nestprobe.c (built here
with gcc) compares its own call counts with the library's, and real wget and iperf run under it on
127.0.0.1. Every process a test starts is in its own process group and is killed at teardown."""

from __future__ import annotations

import errno
import http.server
import json
import mmap
import os
import queue
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.collector.appsockets import InterceptorSource, warnings_from_log
from harness.interceptor import build, create_shm_dir, preload_env, remove_shm_dir, shm
from harness.interceptor.pause import pause_process, pause_state, resume_process
from harness.interceptor.shm import (
    CLOSED,
    HEADER_SIZE,
    HF_EXITED,
    HF_HANDLER_KEPT,
    OPEN,
    SLOT_SIZE,
    ShmFile,
    read_process,
    shm_file,
)
from rundir.errors import UserError

REPO = Path(__file__).resolve().parent.parent
PROBE_SRC = REPO / "tests" / "interceptor" / "nestprobe.c"
LIB_DIR = REPO / "harness" / "interceptor"

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                                reason="needs gcc and make")


# ---- fixtures -----------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def lib() -> Path:
    return build()


@pytest.fixture(scope="session")
def probe(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("nestprobe") / "nestprobe"
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-I", str(LIB_DIR), "-o", str(out),
                    str(PROBE_SRC)], check=True)
    return out


@pytest.fixture
def shm_dir():
    d = create_shm_dir("nestlab-test-")
    yield d
    remove_shm_dir(d)


class Proc:
    """A started process: stdout lines through a queue, so a test can wait with a timeout."""

    def __init__(self, args, env, cwd=None):
        self.p = subprocess.Popen([str(a) for a in args], env=env, cwd=cwd, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        self.pid = self.p.pid
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.err: list[str] = []
        threading.Thread(target=self._pump, args=(self.p.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.p.stderr, self.err.append), daemon=True).start()

    @staticmethod
    def _pump(stream, put):
        for line in stream:
            put(line.rstrip("\n"))
        put(None)

    def expect(self, prefix: str, timeout: float = 15.0):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {prefix!r} line from {self.p.args} within {timeout} s; stderr: {self.err}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"{self.p.args} ended (rc {self.p.wait()}) before {prefix!r}; stderr: {self.err}")
            if line.startswith(prefix):
                rest = line[len(prefix):].strip()
                return json.loads(rest) if rest.startswith("{") else rest

    def send(self, line: str = "go") -> None:
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def wait(self, timeout: float = 15.0) -> int:
        return self.p.wait(timeout=timeout)

    def stderr_text(self) -> str:
        time.sleep(0.05)
        return "\n".join(x for x in self.err if x is not None)

    def kill(self) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for s in (self.p.stdin, self.p.stdout, self.p.stderr):
            try:
                s.close()
            except OSError:
                pass


@pytest.fixture
def procs():
    started: list[Proc] = []

    def start(args, env, cwd=None) -> Proc:
        p = Proc(args, env, cwd)
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()


class Sink:
    """A TCP peer on 127.0.0.1: 'drain' reads everything, 'hold' never reads or writes, 'stream'
    reads everything and writes 1 KB chunks without end."""

    def __init__(self, mode: str):
        self.mode = mode
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.port = self.ls.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            self.conns.append(c)
            if self.mode in ("drain", "stream"):
                threading.Thread(target=self._drain, args=(c,), daemon=True).start()
            if self.mode == "stream":
                threading.Thread(target=self._stream, args=(c,), daemon=True).start()

    def _drain(self, c):
        try:
            while c.recv(65536):
                pass
        except OSError:
            pass

    def _stream(self, c):
        chunk = b"x" * 1024
        try:
            while not self.stop:
                c.sendall(chunk)
        except OSError:
            pass

    def close(self):
        self.stop = True
        for s in [self.ls, *self.conns]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@pytest.fixture
def sink():
    made: list[Sink] = []

    def make(mode: str) -> Sink:
        s = Sink(mode)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def env_for(shm_dir, lib, **kw) -> dict:
    env = preload_env(shm_dir, **kw)
    assert env["LD_PRELOAD"].split()[0] == str(lib)
    return env


def sock_of(snap, fd):
    found = [s for s in snap.sockets if s.fd == fd]
    assert found, f"no slot for fd {fd}: {[(s.fd, s.inode) for s in snap.sockets]}"
    return found[0]


def wait_until(cond, timeout=5.0, interval=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    return cond()


# ---- build and format ---------------------------------------------------------------------------

def test_library_builds_clean_with_werror(tmp_path):
    out = tmp_path / "lib.so"
    sources = sorted(str(p) for p in LIB_DIR.glob("*.c"))   # every file, as the Makefile builds it
    r = subprocess.run(["gcc", "-O2", "-std=gnu11", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden",
                        "-fexceptions", "-U_FORTIFY_SOURCE", "-Wall", "-Wextra", "-Werror",
                        "-o", str(out), *sources, "-ldl"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""


def test_layout_matches_python_reader(tmp_path):
    src = tmp_path / "layout.c"
    src.write_text("""
#include <stdio.h>
#include <stddef.h>
#include "nestintercept.h"
#define F(t, m) printf("%s %zu\\n", #m, offsetof(struct t, m));
int main(void) {
    F(nest_header, max_fd) F(nest_header, ack_seq) F(nest_header, lost) F(nest_header, seq)
    F(nest_header, untracked) F(nest_header, deferred) F(nest_header, unended) F(nest_header, forced)
    F(nest_header, eintr_retried) F(nest_header, want_slots) F(nest_header, space_errno)
    F(nest_header, retired) F(nest_header, cmdline_len) F(nest_header, cmdline)
    F(nest_slot, state) F(nest_slot, laddr) F(nest_slot, close_ns) F(nest_slot, dir)
    printf("header %zu\\nslot %zu\\n", sizeof(struct nest_header), sizeof(struct nest_slot));
    return 0;
}
""")
    exe = tmp_path / "layout"
    subprocess.run(["gcc", "-I", str(LIB_DIR), "-o", str(exe), str(src)], check=True)
    got = dict(line.split() for line in subprocess.run([exe], capture_output=True, text=True).stdout.splitlines())
    assert shm.EXTRA_OFF == int(got["untracked"])
    assert {k: int(v) for k, v in got.items()} == {
        "max_fd": 64, "ack_seq": 80, "lost": 136, "untracked": 144, "deferred": 152, "unended": 160,
        "forced": 168, "eintr_retried": 176, "want_slots": 184, "space_errno": 188,
        "seq": 256, "retired": 272, "cmdline_len": 512,
        "cmdline": 520, "state": 28, "laddr": 48, "close_ns": 88, "dir": 128,
        "header": HEADER_SIZE, "slot": SLOT_SIZE}


def test_library_path_error_names_the_fix(monkeypatch, tmp_path):
    import harness.interceptor as hi

    monkeypatch.setattr(hi, "HERE", tmp_path)
    with pytest.raises(UserError, match="make -C"):
        hi.library_path()


def test_source_never_reuses_a_key_that_died(tmp_path):
    from harness.collector.source import Observation

    src = InterceptorSource(tmp_path)
    try:
        def ob(key, children=()):
            return Observation(key=key, kind="socket", name=key, counters={}, children=list(children))

        assert [o.key for o in src._unique([ob("app:1", ["sock:1:3:9"]), ob("sock:1:3:9", ["tcp:9"])])] == [
            "app:1", "sock:1:3:9"]
        src.live = {"app:1", "sock:1:3:9"}
        src.gone |= src.live - {"app:1"}          # the socket missed a snapshot
        src.live = {"app:1"}
        back = src._unique([ob("app:1", ["sock:1:3:9"]), ob("sock:1:3:9", ["tcp:9"])])
        assert [o.key for o in back] == ["app:1", "sock:1:3:9#2"]
        assert back[0].children == ["sock:1:3:9#2"] and back[1].children == ["tcp:9"]
    finally:
        src.close()


# ---- the C library through the probe ------------------------------------------------------------

@pytest.mark.timeout(60)
def test_threads_count_exactly_and_app_is_sum(lib, probe, shm_dir, procs):
    p = procs([probe, "threads", 4, 400, 1000, 3], env_for(shm_dir, lib))
    ready = p.expect("READY")
    snap = read_process(shm_file(shm_dir, p.pid))
    assert snap.cmdline[1:] == ["threads", "4", "400", "1000", "3"]
    assert snap.lost == 0
    for c in ready["conns"]:
        s = sock_of(snap, c["send_fd"])
        r = sock_of(snap, c["recv_fd"])
        assert (s.inode, r.inode) == (c["send_inode"], c["recv_inode"])
        assert s.out.msgs == c["send_calls"]           # connect + every send/write, K threads on one
        assert s.out.bytes == c["bytes"] and s.inp.msgs == 0
        assert r.inp.msgs == c["recv_calls"] and r.inp.bytes == c["bytes"]
        assert s.out.errors == r.inp.errors == 0
        assert s.out.pending == r.inp.pending == 0
        assert s.remote == ("127.0.0.1", r.local[1]) and r.remote == s.local
    listener = sock_of(snap, ready["listen_fd"])
    assert listener.is_listening and not listener.is_module

    src = InterceptorSource(shm_dir)
    try:
        obs = {o.key: o for o in src.poll()}
        app = obs[f"app:{p.pid}"]
        socks = [o for o in obs.values() if o.kind == "socket"]
        assert sorted(app.children) == sorted(o.key for o in socks)
        assert len(socks) == 2 * len(ready["conns"])
        for o in socks:
            assert o.children == [f"tcp:{o.attrs['inode']}"]
            assert os.readlink(f"/proc/{p.pid}/fd/{o.attrs['fd']}") == f"socket:[{o.attrs['inode']}]"
        for d in ("in", "out"):
            for name in ("total_msgs", "errors", "bytes"):
                assert app.counters[d][name] == sum(o.counters[d][name] for o in socks)
        before = app.counters

        p.send()                        # the probe closes every socket
        p.expect("CLOSED")
        snap = read_process(shm_file(shm_dir, p.pid), with_closed=True)
        assert all(s.state != OPEN for s in snap.sockets)
        assert snap.retired_n == len(socks)
        obs = {o.key: o for o in src.poll()}
        app = obs[f"app:{p.pid}"]
        assert app.children == [] and [o for o in obs.values() if o.kind == "socket"] == []
        for d in ("in", "out"):        # closed sockets stay in the application's sums
            for name in ("total_msgs", "errors", "bytes"):
                assert app.counters[d][name] == before[d][name]
            assert app.counters[d]["wait_ms"] >= before[d]["wait_ms"]
        p.send()
        assert p.wait() == 0
        assert read_process(shm_file(shm_dir, p.pid)).flags & HF_EXITED
        assert src.poll() == []         # the process is gone: its modules die
    finally:
        src.close()
    assert os.stat(shm_file(shm_dir, p.pid)).st_mode & 0o777 == 0o600
    assert os.stat(shm_dir).st_mode & 0o777 == 0o700


@pytest.mark.timeout(60)
def test_fork_child_gets_its_own_file(lib, probe, shm_dir, procs, sink):
    s = sink("drain")
    p = procs([probe, "fork", s.port], env_for(shm_dir, lib))
    child = p.expect("CHILD")
    cs = read_process(shm_file(shm_dir, child["pid"]))
    assert cs.ppid == p.pid and cs.cmdline[1] == "fork"
    a = sock_of(cs, child["a_fd"])
    assert a.inode == child["a_inode"] and a.out.msgs == 7    # inherited: the child's own calls only
    b = sock_of(cs, child["b_fd"])
    assert b.inode == child["b_inode"] and b.out.msgs == 1 + 3
    p.send()
    parent = p.expect("PARENT")
    assert parent["child_status"] == 0
    ps = read_process(shm_file(shm_dir, p.pid))
    pa = sock_of(ps, parent["a_fd"])
    assert pa.inode == parent["a_inode"] and pa.out.msgs == 1 + 5 + 2
    assert not [x for x in ps.sockets if x.inode == child["b_inode"]]
    assert read_process(shm_file(shm_dir, child["pid"])).flags & HF_EXITED
    p.send()
    assert p.wait() == 0


@pytest.mark.timeout(60)
def test_exec_keeps_file_and_inherited_sockets(lib, probe, shm_dir, procs, sink):
    s = sink("drain")
    p = procs([probe, "exec", s.port], env_for(shm_dir, lib))
    info = p.expect("EXEC2")
    snap = read_process(shm_file(shm_dir, p.pid), with_closed=True)
    assert snap.exec_count == 1 and snap.cmdline[:2] == ["nestprobe", "exec2"]
    a = sock_of(snap, info["a_fd"])
    assert a.state == OPEN and a.inode == info["a_inode"] and a.out.msgs == 1 + 4 + 6
    closed = [x for x in snap.sockets if x.inode == info["c_inode"]]
    assert closed and closed[0].state != OPEN                 # close-on-exec: retired
    assert snap.retired_out.msgs == 1 + 1
    p.send()
    assert p.wait() == 0


@pytest.mark.timeout(60)
def test_dup_dup2_close_range_give_each_fd_its_slot(lib, probe, shm_dir, procs, sink):
    s = sink("drain")
    p = procs([probe, "dup", s.port], env_for(shm_dir, lib))
    d = p.expect("DUP")
    snap = read_process(shm_file(shm_dir, p.pid), with_closed=True)
    a, b, c = (sock_of(snap, d[k]) for k in ("a_fd", "b_fd", "c_fd"))
    assert a.inode == b.inode == c.inode == d["inode"]
    assert a.state != OPEN and a.out.msgs == 1 + 2                   # closed by close_range
    assert b.state == OPEN and b.out.msgs == 3 and c.state == OPEN and c.out.msgs == 1
    assert snap.retired_out.msgs == 3 and snap.retired_n == 1
    assert snap.app_counters()[1].msgs == 1 + 2 + 3 + 1
    p.send()
    assert p.wait() == 0


@pytest.mark.timeout(60)
def test_poll_select_epoll_time_goes_to_the_socket(lib, probe, shm_dir, procs, sink):
    s = sink("hold")
    p = procs([probe, "poll", s.port], env_for(shm_dir, lib))
    w = p.expect("WAITED")
    p.expect("LONG")
    snap = read_process(shm_file(shm_dir, p.pid))
    sk = sock_of(snap, w["fd"])
    expected_in = w["poll_ms"] + w["select_ms"] + w["epoll_ms"]
    first = sk.inp.wait_ms
    # waits finished so far (the long poll may have started: subtract what is in progress)
    assert first >= expected_in - 1
    assert first <= expected_in + 200
    assert sk.inp.msgs == 0 and sk.out.msgs == 1               # the connect
    assert sk.out.wait_ms < w["out_ms"] + 20
    # a wait in progress is visible while it lasts
    time.sleep(0.3)
    t1 = time.monotonic()
    s1 = sock_of(read_process(shm_file(shm_dir, p.pid)), w["fd"])
    time.sleep(0.6)
    t2 = time.monotonic()
    s2 = sock_of(read_process(shm_file(shm_dir, p.pid)), w["fd"])
    assert s1.inp.pending == 1 and s2.inp.pending == 1
    assert abs((s2.inp.wait_ms - s1.inp.wait_ms) - (t2 - t1) * 1000) < 30
    done = p.expect("DONE")
    s3 = sock_of(read_process(shm_file(shm_dir, p.pid)), w["fd"])
    assert s3.inp.pending == 0
    assert abs(s3.inp.wait_ms - (expected_in + done["long_ms"])) < 30
    p.send()
    assert p.wait() == 0


def _counts(shm_dir, pid, fd):
    snap = read_process(shm_file(shm_dir, pid))
    s = sock_of(snap, fd)
    return (s.inp.msgs, s.out.msgs, s.inp.wait_ms, s.out.wait_ms), snap.pause


@pytest.mark.timeout(60)
def test_pause_stops_calls_and_wait_and_resume_restarts(lib, probe, shm_dir, procs, sink):
    s = sink("stream")
    p = procs([probe, "stream", s.port], env_for(shm_dir, lib))
    r = p.expect("READY")
    assert wait_until(lambda: _counts(shm_dir, p.pid, r["fd"])[0][0] > 100)
    t_send = time.clock_gettime(time.CLOCK_MONOTONIC)
    st = pause_process(shm_dir, p.pid)
    t_seen = time.clock_gettime(time.CLOCK_MONOTONIC)
    assert st.paused and st.ack_seq == 1 and t_send <= st.ack_mono <= t_seen
    assert st.pause_mono == st.ack_mono and st.pause_signal == signal.SIGUSR1
    assert wait_until(lambda: pause_state(shm_dir, p.pid).paused_threads == 2)
    a, _ = _counts(shm_dir, p.pid, r["fd"])
    time.sleep(0.5)
    b, ps = _counts(shm_dir, p.pid, r["fd"])
    assert a[:2] == b[:2]                                  # no call completes while paused
    assert b[2] - a[2] < 1 and b[3] - a[3] < 1              # and the parked time is not wait time
    assert ps.paused and ps.paused_threads == 2
    st2 = resume_process(shm_dir, p.pid)
    assert not st2.paused and st2.ack_seq == 2 and st2.resume_mono >= st.ack_mono + 0.5
    assert wait_until(lambda: _counts(shm_dir, p.pid, r["fd"])[0][0] > b[0] + 100)
    assert wait_until(lambda: _counts(shm_dir, p.pid, r["fd"])[0][1] > b[1] + 100)
    assert p.p.poll() is None
    p.send()
    c = p.expect("COUNTS")
    assert c["handler_ran"] == 0
    assert p.wait() == 0


@pytest.mark.timeout(60)
def test_program_cannot_replace_or_block_the_pause_handler(lib, probe, shm_dir, procs, sink):
    s = sink("stream")
    p = procs([probe, "handler", s.port], env_for(shm_dir, lib))
    r = p.expect("READY")
    # the program sees what it asked for, but the interceptor's handler stays installed
    assert r["signal_prev_dfl"] == 1 and r["sigaction_rc"] == 0
    assert r["old_is_mine"] == 1 and r["query_is_mine"] == 1
    assert r["mask_rc"] == 0 and r["usr1_blocked"] == 0 and r["usr2_blocked"] == 0
    st = pause_process(shm_dir, p.pid)
    assert st.paused and st.handler_kept
    assert wait_until(lambda: pause_state(shm_dir, p.pid).paused_threads == 2)
    a, _ = _counts(shm_dir, p.pid, r["fd"])
    time.sleep(0.3)
    b, _ = _counts(shm_dir, p.pid, r["fd"])
    assert a[:2] == b[:2]
    resume_process(shm_dir, p.pid)
    assert wait_until(lambda: _counts(shm_dir, p.pid, r["fd"])[0][1] > b[1] + 50)
    p.send()
    assert p.expect("COUNTS")["handler_ran"] == 0
    assert p.wait() == 0
    snap = read_process(shm_file(shm_dir, p.pid))
    assert snap.flags & HF_HANDLER_KEPT and snap.refused >= 3
    err = p.stderr_text()
    assert err.count("installs its own handler for SIGUSR1") == 1, err


@pytest.mark.timeout(60)
def test_pause_signal_is_configurable_and_none_leaves_default(lib, probe, shm_dir, procs, sink):
    s = sink("stream")
    # one signal that toggles
    p = procs([probe, "stream", s.port], env_for(shm_dir, lib, pause_signal="SIGUSR2", resume_signal="USR2"))
    r = p.expect("READY")
    st = pause_process(shm_dir, p.pid)
    assert st.paused and st.pause_signal == st.resume_signal == signal.SIGUSR2
    assert wait_until(lambda: pause_state(shm_dir, p.pid).paused_threads == 2)
    st = resume_process(shm_dir, p.pid)
    assert not st.paused and st.ack_seq == 2
    n = _counts(shm_dir, p.pid, r["fd"])[0][1]
    assert wait_until(lambda: _counts(shm_dir, p.pid, r["fd"])[0][1] > n + 50)
    os.kill(p.pid, signal.SIGUSR1)          # not ours in this process: the default action (exit)
    assert p.wait() == -signal.SIGUSR1
    # pause disabled: the program keeps the default dispositions
    q = procs([probe, "stream", s.port], env_for(shm_dir, lib, pause_signal="none"))
    q.expect("READY")
    assert pause_state(shm_dir, q.pid).pause_signal == 0
    os.kill(q.pid, signal.SIGUSR1)
    assert q.wait() == -signal.SIGUSR1


@pytest.mark.timeout(60)
def test_collector_absent_or_slow_never_hurts(lib, probe, shm_dir, procs, tmp_path):
    base = {k: v for k, v in os.environ.items() if not k.startswith("NESTLAB_")}
    # no environment at all: inert, the program runs as usual
    p = procs([probe, "threads", 3, 50, 100, 2], {**base, "LD_PRELOAD": str(lib)})
    p.expect("READY")
    p.send()
    p.send()
    assert p.wait() == 0 and p.stderr_text() == ""
    # a directory that does not exist: one line on stderr, then inert
    p = procs([probe, "threads", 3, 50, 100, 2], {**base, "LD_PRELOAD": str(lib),
                                                   "NESTLAB_SHM_DIR": str(tmp_path / "missing")})
    p.expect("READY")
    p.send()
    p.send()
    assert p.wait() == 0
    assert "not counting" in p.stderr_text() and not (tmp_path / "missing").exists()
    # a collector socket path nobody listens on
    env = env_for(shm_dir, lib, collector_sock=tmp_path / "nobody.sock")
    p = procs([probe, "threads", 3, 50, 100, 2], env)
    ready = p.expect("READY")
    snap = read_process(shm_file(shm_dir, p.pid))
    assert sock_of(snap, ready["conns"][1]["send_fd"]).out.msgs == ready["conns"][1]["send_calls"]
    p.send()
    p.send()
    assert p.wait() == 0
    # a collector that never reads: its queue fills, the program does not notice
    slow = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    slow.bind(str(tmp_path / "slow.sock"))
    try:
        t0 = time.monotonic()
        p = procs([probe, "threads", 60, 20, 100, 2], env_for(shm_dir, lib, collector_sock=tmp_path / "slow.sock"))
        p.expect("READY", timeout=20)
        p.send()
        p.expect("CLOSED")
        p.send()
        assert p.wait() == 0
        assert time.monotonic() - t0 < 10
        slow.setblocking(False)
        assert json.loads(slow.recv(65536))["ev"] == "start"
    finally:
        slow.close()


@pytest.mark.timeout(60)
def test_notifications_and_processes_without_sockets(lib, probe, shm_dir, procs, tmp_path):
    note = tmp_path / "collector.sock"
    src = InterceptorSource(shm_dir, notify_path=note)
    try:
        idle = procs(["/bin/sleep", "30"], env_for(shm_dir, lib, collector_sock=note))
        p = procs([probe, "threads", 2, 10, 100, 1], env_for(shm_dir, lib, collector_sock=note))
        ready = p.expect("READY")
        assert wait_until(lambda: shm_file(shm_dir, idle.pid).exists())
        obs = src.poll()
        assert {o.attrs["pid"] for o in obs} == {p.pid}      # sleep has no socket: no module
        msgs = src.messages()
        starts = {m["pid"]: m for m in msgs if m["ev"] == "start"}
        assert starts[p.pid]["cmdline"][1:] == ["threads", "2", "10", "100", "1"]
        assert starts[idle.pid]["cmdline"] == ["/bin/sleep", "30"]
        socks = {m["inode"]: m for m in msgs if m["ev"] == "sock" and m["pid"] == p.pid}
        for c in ready["conns"]:
            assert c["send_inode"] in socks and c["recv_inode"] in socks
            assert socks[c["send_inode"]]["remote"].startswith("127.0.0.1:")
        p.send()
        p.expect("CLOSED")
        closes = {m["inode"] for m in src.messages() if m["ev"] == "close"}
        assert {c["send_inode"] for c in ready["conns"]} <= closes
        p.send()
        assert p.wait() == 0
    finally:
        src.close()
    assert not note.exists()


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
def test_processes_of_another_network_namespace_are_not_reported(lib, probe, shm_dir, procs):
    p = procs(["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {probe} threads 2 10 100 1"],
              env_for(shm_dir, lib))
    p.expect("READY")
    assert read_process(shm_file(shm_dir, p.pid)).sockets   # counted all the same
    src = InterceptorSource(shm_dir)
    other = InterceptorSource(shm_dir, same_netns=False)
    try:
        assert src.poll() == []
        assert f"app:{p.pid}" in {o.key for o in other.poll()}
    finally:
        src.close()
        other.close()
    p.send()
    p.send()
    assert p.wait() == 0


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
    _fake_file(path, slots=4096, max_fd=4096)                 # 1 MiB, sparse: one page allocated
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


def _fake_file(path: Path, out_msgs: int = 7, slots: int = 64, max_fd: int = 4) -> None:
    """A counter file with one open TCP socket on fd 3, as the library would write it (sparse after
    its first page)."""
    buf = bytearray(shm.HEADER_SIZE + 4 * shm.SLOT_SIZE)
    struct.pack_into("<8sIIIIii", buf, 0, shm.MAGIC, shm.VERSION, shm.HEADER_SIZE, shm.SLOT_SIZE, slots, 4242, 1)
    struct.pack_into("<I", buf, 64, max_fd)
    off = shm.HEADER_SIZE + 3 * shm.SLOT_SIZE
    struct.pack_into("<QQQiIIHHHH", buf, off, 0, 1, 99, 3, OPEN, shm.SF_GRAPH | shm.SF_PEER, socket.AF_INET,
                     socket.SOCK_STREAM, 40000, 80)
    buf[off + 48:off + 52] = socket.inet_aton("127.0.0.1")
    buf[off + 64:off + 68] = socket.inet_aton("127.0.0.2")
    struct.pack_into("<Q", buf, off + shm.DIR_OFF[1] + 8, out_msgs)
    path.write_bytes(bytes(buf))
    os.truncate(path, shm.HEADER_SIZE + slots * shm.SLOT_SIZE)


def test_reader_waits_for_a_preempted_writer_and_never_drops_the_slot(tmp_path, monkeypatch):
    """(b) The flaky pause test's vanishing slot: a writer preempted inside its update holds the
    seqlock for milliseconds; the reader gave up after 50 quick retries and reported no socket."""
    path = tmp_path / "4242.nest"
    _fake_file(path)
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
