"""The collector: the lean sock_diag decoder against `ss`, the module tracker's rows, ignored
interfaces. Real sockets on loopback; the tracker on hand-made observations."""

from __future__ import annotations

import re
import socket
import subprocess
import time

import pytest

from analysis.graph import load_run
from harness.collector.iface import InterfaceSource
from harness.collector.main import ModuleTracker
from harness.collector.sockdiag import SockDiag, TcpSock, TcpSource
from harness.collector.source import Observation
from harness.store import connect, create_db


@pytest.fixture
def connection():
    """A loopback TCP connection that has carried some data both ways."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    cli = socket.create_connection(srv.getsockname())
    acc, _ = srv.accept()
    for _ in range(5):
        cli.sendall(b"x" * 1000)
        acc.recv(65536)
    acc.sendall(b"y" * 300)
    time.sleep(0.05)
    yield cli, acc
    for s in (cli, acc, srv):
        s.close()


def test_decoder_agrees_with_ss(connection):
    cli, _ = connection
    port = cli.getsockname()[1]
    mine = [TcpSock.decode(r) for r in SockDiag().dump()]
    (s,) = [m for m in mine if m.sport == port and m.src == "127.0.0.1"]
    out = subprocess.run(["ss", "-tinHe", "src", f"127.0.0.1:{port}"], capture_output=True, text=True).stdout
    fields = dict(re.findall(r"(\w+):(\d+)", out))
    assert s.inode == int(re.search(r"ino:(\d+)", out).group(1))
    assert s.segs_out == int(fields["data_segs_out"]) == 5
    assert s.segs_in == int(fields["data_segs_in"]) == 1
    assert s.bytes_out == int(fields["bytes_acked"]) == 5001  # tcpi_bytes_acked counts the SYN
    assert s.bytes_in == int(fields["bytes_received"]) == 300
    assert s.rqueue == 300 and s.wqueue == 0  # the client has not read the reply yet
    # tcpi_rtt/rttvar: ss prints them in ms with three decimals ("rtt:0.052/0.026")
    rtt, rttvar = (float(x) for x in re.search(r"\brtt:([\d.]+)/([\d.]+)", out).groups())
    assert s.rtt_us == pytest.approx(rtt * 1000, abs=1) and s.rttvar_us == pytest.approx(rttvar * 1000, abs=1)
    assert s.rtt_us > 0


def test_ignored_addresses_never_become_modules(connection):
    cli, _ = connection
    port = cli.getsockname()[1]
    seen = [o.name for o in TcpSource(lambda a: None).poll()]
    assert any(f":{port}>" in n for n in seen)
    kept = [o.name for o in TcpSource(lambda a: None, ignored=lambda a: a == "127.0.0.1").poll()]
    assert not any("127.0.0.1" in n for n in kept)
    names = [o.key for o in InterfaceSource().poll()]
    if names:
        first = names[0].split(":", 1)[1]
        assert f"ipeth:{first}" not in [o.key for o in InterfaceSource({first}).poll()]


def test_tracker_writes_rows_on_change_and_the_reader_fills_them(tmp_path):
    db = create_db(tmp_path / "run.db")
    db.close()
    db = connect(tmp_path / "run.db")
    db.isolation_level = None
    tr = ModuleTracker(db)

    def ob(key, kind, msgs, children=()):
        return Observation(key, kind, key, {"in": {"total_msgs": msgs}, "out": {"total_msgs": 0}}, {}, list(children))

    steps = [[ob("tcp:1", "tcp", 10, ["ipeth:e"]), ob("ipeth:e", "ipeth", 100)],
             [ob("tcp:1", "tcp", 10, ["ipeth:e"]), ob("ipeth:e", "ipeth", 150)],
             [ob("tcp:1", "tcp", 12, ["ipeth:e"]), ob("ipeth:e", "ipeth", 150)],
             [ob("ipeth:e", "ipeth", 150)]]
    for k, obs in enumerate(steps):
        tr.record(float(k), time.time(), obs)
    tr.close(4.0)
    rows = db.execute("SELECT seq, module, dir, total_msgs FROM counters ORDER BY seq, module, dir").fetchall()
    # tcp (1): in rows at 0 and 2 only, out at 0 only; ipeth (2): in at 0 and 1, out at 0.
    assert rows == [(0, 1, "in", 10), (0, 1, "out", 0), (0, 2, "in", 100), (0, 2, "out", 0),
                    (1, 2, "in", 150), (2, 1, "in", 12)]
    assert db.execute("SELECT died FROM modules WHERE id = 1").fetchone() == (3.0,)
    assert db.execute("SELECT born, died FROM edges").fetchall() == [(0.0, 3.0)]
    run = load_run(tmp_path)
    tm = {}
    for st in run.stretches:
        for i, m in enumerate(st.modules):
            tm.setdefault(m, []).extend(st.counters["in"].tm[i].tolist())
    assert tm[1] == [10, 0, 2]          # carried forward at seq 1; gone at seq 3
    assert tm[2][1:] == [50, 0, 0]      # interfaces: deltas only (the first is not a measurement)


def test_tracker_writes_tcp_info_on_change(tmp_path):
    db = create_db(tmp_path / "run.db")
    db.isolation_level = None
    tr = ModuleTracker(db)
    for k, rtt in enumerate([(500, 250), (500, 250), (700, 300)]):
        tr.record(float(k), time.time(), [Observation("tcp:1", "tcp", "c", {"in": {"total_msgs": k}}, {}, [], rtt)])
    assert db.execute("SELECT seq, module, rtt_us, rttvar_us FROM tcp_info").fetchall() == [(0, 1, 500, 250),
                                                                                         (2, 1, 700, 300)]
