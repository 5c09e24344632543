"""The LD_PRELOAD interceptor, tested with real processes: its build and shm layout, then the library
through tests/interceptor/nestprobe.c (built here with gcc), which compares its own call counts with
the library's: threads, fork, exec, dup, poll/select/epoll, pause and resume, namespaces. Its limits
and real wget and iperf are tests/test_interceptor_limits.py; the fixtures are
tests/support/interceptor_kit.py's."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

from harness.collector.appsockets import InterceptorSource
from harness.interceptor import shm
from harness.interceptor.pause import pause_process, pause_state, resume_process
from harness.interceptor.shm import (
    HEADER_SIZE,
    HF_EXITED,
    HF_HANDLER_KEPT,
    OPEN,
    SLOT_SIZE,
    read_process,
    shm_file,
)
from rundir.errors import UserError
from tests.support.interceptor_kit import (
    LIB_DIR,
    NEEDS_GCC,
    env_for,
    sock_of,
    wait_until,
)

pytestmark = NEEDS_GCC


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
