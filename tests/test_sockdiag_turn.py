"""The whose-turn fields the collector reads from tcp_info (format 8, issue 42): tcpi_unacked,
tcpi_notsent_bytes and the chrono stats, on real loopback sockets, against `ss`; and the tcp_info rows
the tracker writes with them (NULL where an observation has none)."""

from __future__ import annotations

import re
import socket
import subprocess
import time

import pytest

from harness.collector.main import ModuleTracker
from harness.collector.sockdiag import SockDiag, TcpSock, TcpSource
from rundir.db import TURN_COLUMNS, create_db


@pytest.fixture
def pair():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    cli = socket.create_connection(srv.getsockname())
    acc, _ = srv.accept()
    yield cli, acc
    for s in (cli, acc, srv):
        s.close()


def mine(port: int, same: list | None = None) -> TcpSock | None:
    got = [TcpSock.decode(r) for r in SockDiag().dump(same=same)]
    return next((s for s in got if s.sport == port and s.src == "127.0.0.1"), None)


def ss_fields(port: int) -> str:
    return subprocess.run(["ss", "-tinHe", "src", f"127.0.0.1:{port}"], capture_output=True, text=True).stdout


def test_a_reply_the_receiver_does_not_read_is_not_sent_and_rwnd_limited(pair):
    """The writer of a connection whose reader stopped reading: its bytes wait unsent (notsent), and
    the time it had data to send is busy time held by the receiver's window; as `ss` says."""
    cli, acc = pair
    acc.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    cli.setblocking(False)
    try:
        while True:
            cli.send(b"x" * 65536)
    except BlockingIOError:
        pass
    time.sleep(0.3)
    port = cli.getsockname()[1]
    s = mine(port)
    out = ss_fields(port)
    assert s.notsent_bytes > 100_000
    assert s.notsent_bytes == pytest.approx(int(re.search(r"\bnotsent:(\d+)", out).group(1)), rel=0.01)
    busy = int(re.search(r"\bbusy:(\d+)ms", out).group(1))
    rwnd = int(re.search(r"\brwnd_limited:(\d+)ms", out).group(1))
    assert s.busy_us / 1000 == pytest.approx(busy, abs=50) and busy >= 250
    assert s.rwnd_limited_us / 1000 == pytest.approx(rwnd, abs=50) and rwnd >= 250
    assert s.sndbuf_limited_us == 0
    m = re.search(r"\bunacked:(\d+)", out)
    assert s.unacked == (int(m.group(1)) if m else 0)


def test_an_idle_keep_alive_connection_has_nothing_outstanding(pair):
    """A request answered and read: nothing unacked, nothing unsent, no busy time since."""
    cli, acc = pair
    cli.sendall(b"GET / HTTP/1.1\r\n\r\n")
    acc.recv(100)
    acc.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
    cli.recv(100)
    time.sleep(0.05)
    for sock in (cli, acc):
        s = mine(sock.getsockname()[1])
        assert (s.unacked, s.notsent_bytes) == (0, 0)
        assert s.busy_us is not None and s.rwnd_limited_us == 0 and s.sndbuf_limited_us == 0


def test_a_changed_connection_decoded_by_the_skipping_dump_has_its_turn_fields(pair):
    """SockDiag.dump with `same` (the collector's path: chunks and walk) decodes the same fields."""
    cli, acc = pair
    diag = SockDiag()
    diag.dump(same=[])
    acc.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    cli.setblocking(False)
    try:
        while True:
            cli.send(b"y" * 65536)
    except BlockingIOError:
        pass
    time.sleep(0.1)
    port = cli.getsockname()[1]
    got = [TcpSock.decode(r) for r in diag.dump(same=[])]
    (s,) = [x for x in got if x.sport == port and x.src == "127.0.0.1"]
    assert s.notsent_bytes > 0 and s.busy_us > 0 and s.rwnd_limited_us > 0


def test_the_tracker_writes_the_turn_columns(tmp_path, pair):
    cli, acc = pair
    cli.sendall(b"q")
    acc.recv(1)
    db = create_db(tmp_path / "run.db")
    db.isolation_level = None
    src = TcpSource(lambda address: None)
    tr = ModuleTracker(db)
    obs = [o for o in src.poll() if o.name.startswith(f"tcp 127.0.0.1:{cli.getsockname()[1]}>")]
    tr.record(0.0, time.time(), obs)
    row = db.execute(f"SELECT {', '.join(TURN_COLUMNS)} FROM tcp_info").fetchone()
    assert row[:2] == (0, 0) and row[2] is not None
