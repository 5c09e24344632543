"""What the interceptor's tests share: the library and tests/interceptor/nestprobe.c built once, a
fresh shm directory, started processes (each in its own process group, killed at teardown) and TCP
sinks on 127.0.0.1. Imported as fixtures by tests/test_interceptor.py and
tests/test_interceptor_limits.py."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness.interceptor import build, create_shm_dir, preload_env, remove_shm_dir, shm
from tests.support.env import REPO

PROBE_SRC = REPO / "tests" / "interceptor" / "nestprobe.c"
LIB_DIR = REPO / "harness" / "interceptor"

NEEDS_GCC = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
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


def counter_file(path: Path, pid: int, out_msgs: int = 7, slots: int = 64, max_fd: int = 4,
                 sparse: bool = False) -> None:
    """A counter file as the library writes it: one open TCP socket with a peer on fd 3, `out_msgs`
    messages out. `sparse`: only its first slots written, the rest a hole (as a large file is)."""
    written = 4 if sparse else slots
    buf = bytearray(shm.HEADER_SIZE + written * shm.SLOT_SIZE)
    struct.pack_into("<8sIIIIii", buf, 0, shm.MAGIC, shm.VERSION, shm.HEADER_SIZE, shm.SLOT_SIZE, slots, pid, 1)
    struct.pack_into("<I", buf, 64, max_fd)
    argv = f"prog{pid}\0".encode()
    struct.pack_into("<I", buf, 512, len(argv))
    buf[shm.CMDLINE_OFF:shm.CMDLINE_OFF + len(argv)] = argv
    off = shm.HEADER_SIZE + 3 * shm.SLOT_SIZE
    struct.pack_into("<QQQiIIHHHH", buf, off, 0, 1, 99, 3, shm.OPEN, shm.SF_GRAPH | shm.SF_PEER, socket.AF_INET,
                     socket.SOCK_STREAM, 40000, 80)
    buf[off + 48:off + 52] = socket.inet_aton("127.0.0.1")
    buf[off + 64:off + 68] = socket.inet_aton("127.0.0.2")
    struct.pack_into("<Q", buf, off + shm.DIR_OFF[1] + 8, out_msgs)
    path.write_bytes(bytes(buf))
    if sparse:
        os.truncate(path, shm.HEADER_SIZE + slots * shm.SLOT_SIZE)
