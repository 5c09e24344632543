"""The delay fault at an event loop (the web and cache tiers, issue 33 item 5): the interceptor defers
each reply (harness/interceptor/defer.c) instead of holding the thread. Real memcached and real nginx
(proxying to a tiny local backend) on 127.0.0.1 under the library: with 150 ms set, every reply takes
at least 150 ms, yet 20 concurrent requests to a daemon of two threads finish together, not one after
the other; cleared, replies are fast again. No namespace, no root: loopback only."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.interceptor import build, create_shm_dir, preload_env, remove_shm_dir
from harness.interceptor.delay import DEFER, HOLD, defer_counts, live_files, replies_delayed, set_host_delay

DELAY_S = 0.15
CONCURRENT = 20

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(120),
    pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None, reason="needs gcc and make"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        assert proc.poll() is None, f"{what} exited with {proc.returncode}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"{what} does not listen on {port}"
            time.sleep(0.05)


@pytest.fixture
def shm():
    build()
    d = create_shm_dir("nestlab-webdelay-")
    yield d
    remove_shm_dir(d)


@pytest.fixture
def daemons():
    """Start daemons in their own process groups; every group killed on every exit path."""
    procs: list[subprocess.Popen] = []

    def start(argv, env, port, what):
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        procs.append(p)
        wait_port(port, p, what)
        return p

    start.adopt = procs.append
    yield start
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=10)


def wait_files(shm: Path, n: int) -> None:
    deadline = time.monotonic() + 10
    while len(live_files(shm)) < n:
        assert time.monotonic() < deadline, f"{len(live_files(shm))} processes under the interceptor, not {n}"
        time.sleep(0.05)


def timed(ask, n: int) -> tuple[list[float], float]:
    """n requests at once (a connection each): each one's time and the time of them all."""
    barrier = threading.Barrier(n)

    def one(_):
        barrier.wait()
        t = time.monotonic()
        ask()
        return time.monotonic() - t

    t0 = time.monotonic()
    with ThreadPoolExecutor(n) as ex:
        each = list(ex.map(one, range(n)))
    return each, time.monotonic() - t0


def delayed_and_concurrent(shm: Path, ask) -> dict[str, object]:
    fast, _ = timed(ask, CONCURRENT)
    assert set_host_delay(shm, DELAY_S, DEFER)
    slow, wall = timed(ask, CONCURRENT)
    solo = [timed(ask, 1)[0][0] for _ in range(3)]
    set_host_delay(shm, 0)
    after, _ = timed(ask, CONCURRENT)
    files = live_files(shm).values()
    return {"fast": fast, "slow": slow, "wall": wall, "solo": solo, "after": after,
            "delayed": sum(replies_delayed(p) for p in files),
            "undeferred": sum(defer_counts(p)[0] for p in files),
            "queued": sum(defer_counts(p)[1] for p in files)}


def check(got: dict, replies: int) -> None:
    print({k: (sorted(round(x * 1000, 1) for x in v) if isinstance(v, list) else v) for k, v in got.items()})
    assert max(got["fast"]) < DELAY_S * 0.8 and max(got["after"]) < DELAY_S * 0.8
    assert min(got["slow"]) >= DELAY_S * 0.97 and min(got["solo"]) >= DELAY_S * 0.97
    # Not serialised: 20 replies of 2 threads held one by one would take 10 x 150 ms at least.
    assert got["wall"] < 4 * DELAY_S, got["wall"]
    assert got["delayed"] >= replies and got["undeferred"] == 0 and got["queued"] == 0


def memcached(port: int, threads: int) -> list[str]:
    as_root = ["-u", "root"] if os.geteuid() == 0 else []
    return ["memcached", *as_root, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", str(threads), "-m", "16"]


@pytest.mark.skipif(shutil.which("memcached") is None, reason="needs memcached")
def test_memcached_replies_are_deferred_not_the_thread(shm, daemons):
    port = free_port()
    env = preload_env(shm, env=dict(os.environ))
    daemons(memcached(port, 2), env, port, "memcached")
    wait_files(shm, 1)

    def ask():
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(b"set k 0 0 5\r\nhello\r\n")
            assert c.recv(64) == b"STORED\r\n"
            c.sendall(b"get k\r\n")
            got = b""
            while not got.endswith(b"END\r\n"):
                part = c.recv(64)
                assert part, got
                got += part
            assert got == b"VALUE k 0 5\r\nhello\r\nEND\r\n"

    got = delayed_and_concurrent(shm, ask)
    for k in ("slow", "solo"):        # two replies per ask, each deferred
        assert min(got[k]) >= 2 * DELAY_S * 0.97, (k, got[k])
    got["slow"] = [x / 2 for x in got["slow"]]
    got["solo"] = [x / 2 for x in got["solo"]]
    got["wall"] /= 2
    check(got, 2 * (CONCURRENT + 3))


class _Backend(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"x" * 2000 + b"\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.mark.skipif(shutil.which("nginx") is None, reason="needs nginx")
def test_nginx_replies_are_deferred_not_the_worker(shm, daemons, tmp_path):
    ThreadingHTTPServer.request_queue_size = 128   # 20 connections at once (its default 5 drops SYNs: 1 s)
    backend = ThreadingHTTPServer(("127.0.0.1", 0), _Backend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    try:
        port = free_port()
        d = tmp_path / "nginx"
        for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (d / sub).mkdir(parents=True)
        # as harness/service/tiers.py runs it: two workers, keepalive to the upstream, HTTP/1.1
        (d / "nginx.conf").write_text(
            f"daemon off;\nmaster_process on;\nworker_processes 2;\npid {d / 'nginx.pid'};\n"
            f"error_log {d / 'error.log'} warn;\nevents {{ worker_connections 1024; }}\nhttp {{\n  access_log off;\n"
            + "".join(f"  {k}_temp_path {d / k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
            + f"  upstream apps {{\n    server 127.0.0.1:{backend.server_address[1]} max_fails=0;\n    keepalive 64;\n  }}\n"
            f"  server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      proxy_pass http://apps;\n"
            '      proxy_http_version 1.1;\n      proxy_set_header Connection "";\n    }\n  }\n}\n')
        env = preload_env(shm, env=dict(os.environ))
        daemons(["nginx", "-c", str(d / "nginx.conf"), "-p", str(d), "-e", str(d / "error.log")], env, port, "nginx")
        wait_files(shm, 3)                       # the master and its two workers

        def ask():
            with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
                c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                got = b""
                while part := c.recv(65536):
                    got += part
                assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"x" * 2000 + b"\n"), got[:200]

        check(delayed_and_concurrent(shm, ask), CONCURRENT + 3)
        # the closes nginx made with replies queued were done by the library once they were sent
        assert not (d / "error.log").exists() or "alert" not in (d / "error.log").read_text()
    finally:
        backend.shutdown()
        backend.server_close()


def test_a_hold_mode_delay_still_holds_the_thread_for_comparison(shm, daemons):
    """HOLD at an event loop (what the db tier uses): the thread sleeps, so concurrent replies queue
    up behind each other; the reason DEFER exists."""
    if shutil.which("memcached") is None:
        pytest.skip("needs memcached")
    port = free_port()
    daemons(memcached(port, 1), preload_env(shm, env=dict(os.environ)), port, "memcached")
    wait_files(shm, 1)

    def ask():
        with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
            c.sendall(b"version\r\n")
            assert c.recv(64).startswith(b"VERSION")

    set_host_delay(shm, 0.05, HOLD)
    _, wall = timed(ask, 8)
    set_host_delay(shm, 0)
    assert wall >= 8 * 0.05 * 0.9, wall


# ---- the deferral's paths, with a small server of ours (tests/interceptor/reply_server.py) -----------------

SERVER = Path(__file__).resolve().parent / "interceptor" / "reply_server.py"


def pattern(n: int) -> bytes:
    return (bytes(i % 251 for i in range(251)) * (n // 251 + 1))[:n]


def start_server(shm, tmp_path, daemons, *args, trace_events=None, **env_extra):
    portfile = tmp_path / f"port-{time.monotonic_ns()}"
    env = preload_env(shm, env=dict(os.environ), trace_events=trace_events)
    env.update({k: str(v) for k, v in env_extra.items()})
    p = subprocess.Popen([sys.executable, str(SERVER), str(portfile), *args], env=env, start_new_session=True)
    deadline = time.monotonic() + 20
    while not portfile.exists():
        assert p.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    daemons.adopt(p)
    wait_files(shm, 1)
    return int(portfile.read_text())


def fetch(port: int, request: bytes, wait: float = 0.0) -> tuple[bytes, float]:
    """The whole reply (until the server's close or shutdown) and how long it took; `wait`: read
    nothing for that long first (the socket's buffers fill: the library's writes meet EAGAIN)."""
    with socket.socket() as c:
        if wait:   # a small receive buffer: the server's socket fills (seen with strace: EAGAIN, then POLLOUT)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.settimeout(20)
        c.connect(("127.0.0.1", port))
        t = time.monotonic()
        c.sendall(request)
        time.sleep(wait)
        got = bytearray()
        while part := c.recv(1 << 16):
            got += part
        return bytes(got), time.monotonic() - t


def test_a_long_reply_leaves_late_whole_in_order_and_then_closes(shm, daemons, tmp_path):
    """4 MB in 64 KiB sends: queued at once (the server closes right after), then written by the
    library's thread as the socket drains (EAGAIN, POLLOUT); the close waits for the last byte."""
    port = start_server(shm, tmp_path, daemons)
    set_host_delay(shm, DELAY_S, DEFER)
    for request, n, wait in ((b"4000000\n", 4_000_000, 0.5), (b"4000000\n", 4_000_000, 0),
                             (b"300000 shut\n", 300_000, 0)):
        got, took = fetch(port, request, wait)
        assert len(got) == n and got == pattern(n) and took >= DELAY_S * 0.97, (len(got), took)
    set_host_delay(shm, 0)
    got, took = fetch(port, b"1000\n")
    assert got == pattern(1000) and took < DELAY_S * 0.8
    (path,) = live_files(shm).values()
    assert replies_delayed(path) == 3 and defer_counts(path) == (0, 0)


def test_past_the_cap_sends_are_not_deferred_and_are_counted(shm, daemons, tmp_path):
    """NESTLAB_DEFER_MAX_BYTES: a reply whose first send does not fit goes at once; one whose later
    sends do not fit waits for its queue, then goes on in order. Both counted."""
    port = start_server(shm, tmp_path, daemons, NESTLAB_DEFER_MAX_BYTES=100_000)
    set_host_delay(shm, DELAY_S, DEFER)
    got, took = fetch(port, b"1000000\n")             # 64 KiB queued, the next 64 KiB waits for it
    assert got == pattern(1_000_000) and took >= DELAY_S * 0.97
    (path,) = live_files(shm).values()
    assert defer_counts(path)[0] >= 1
    before = defer_counts(path)[0]
    got, took = fetch(port, b"1000\n")                # fits: deferred
    assert got == pattern(1000) and took >= DELAY_S * 0.97 and defer_counts(path)[0] == before
    set_host_delay(shm, 0)


def test_a_child_forked_in_the_window_defers_and_sends_before_it_exits(shm, daemons, tmp_path):
    """A child made after the delay was set takes its parent's delay (its own file); it exits right
    after its reply, and the library sends what it queued first."""
    port = start_server(shm, tmp_path, daemons, "fork")
    set_host_delay(shm, DELAY_S, DEFER)
    got, took = fetch(port, b"200000\n")
    assert got == pattern(200_000) and took >= DELAY_S * 0.97
    set_host_delay(shm, 0)
    got, took = fetch(port, b"200000\n")
    assert got == pattern(200_000) and took < DELAY_S * 0.8


def test_the_trace_shows_a_deferred_reply_leaving_late_from_the_programs_thread(shm, daemons, tmp_path):
    """The message trace (as WAP5 and Project5 read it): the send is stamped when the library's thread
    wrote it, `by` after the request came in, and carries the id of the thread that made the call."""
    from harness.interceptor.ring import TraceRing

    port = start_server(shm, tmp_path, daemons, trace_events=4096)
    set_host_delay(shm, DELAY_S, DEFER)
    fetch(port, b"1000\n")
    set_host_delay(shm, 0)
    fetch(port, b"1000\n")
    (path,) = live_files(shm).values()
    ring = TraceRing(path)
    try:
        events = ring.drain(final=True)
    finally:
        ring.close()
    gaps = []
    for recv, send in zip(events, events[1:], strict=False):
        if recv.call == 3 and send.call == 18 and send.fd == recv.fd and send.bytes == 1000:   # recv, send
            assert send.tid == recv.tid
            gaps.append((send.mono_ns - recv.mono_ns) / 1e9)
    assert len(gaps) == 2 and gaps[0] >= DELAY_S and gaps[1] < DELAY_S / 2, gaps


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s"]))
