"""The collector: the lean sock_diag decoder against `ss`, the module tracker's rows, ignored
interfaces, interceptor counters stored raw. Real sockets on loopback; the tracker on hand-made
observations and on an interceptor counter file written here."""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import threading
import time

import pytest

from analysis.model.stretches import load_stretches
from harness.collector.appsockets import InterceptorSource
from harness.collector.iface import InterfaceSource
from harness.collector.main import ModuleTracker
from harness.collector.sockdiag import SockDiag, TcpSock, TcpSource
from harness.collector.source import Observation
from harness.interceptor import shm
from rundir.db import connect, create_db


def loopback_pair() -> tuple[socket.socket, socket.socket, socket.socket]:
    """(listener, client, accepted): a fresh loopback TCP connection."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    cli = socket.create_connection(srv.getsockname())
    acc, _ = srv.accept()
    return srv, cli, acc


@pytest.fixture
def connection():
    """A loopback TCP connection that has carried some data both ways."""
    srv, cli, acc = loopback_pair()
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
    # the state of format 4: rto, and the times since the last data/ACK (ss dumps a little later)
    assert s.rto_us == pytest.approx(float(re.search(r"\brto:([\d.]+)", out).group(1)) * 1000, abs=1000)
    assert (s.ca_state, s.retransmits, s.probes, s.backoff) == (0, 0, 0, 0)   # a healthy loopback connection
    for mine_ms, theirs in ((s.last_data_sent_ms, "lastsnd"), (s.last_data_recv_ms, "lastrcv"),
                            (s.last_ack_recv_ms, "lastack")):
        assert 0 <= int(fields[theirs]) - mine_ms <= 1000, (theirs, mine_ms, fields[theirs])


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
    run = load_stretches(tmp_path)
    tm = {}
    for st in run.stretches:
        for i, m in enumerate(st.modules):
            tm.setdefault(m, []).extend(st.counters["in"].tm[i].tolist())
    assert tm[1] == [10, 0, 2]          # carried forward at seq 1; gone at seq 3
    assert tm[2][1:] == [50, 0, 0]      # interfaces: deltas only (the first is not a measurement)


def test_tracker_writes_tcp_info_on_change(tmp_path):
    """A row when a value changes or a "last ... ago" time moves: an idle connection, whose ages
    grow with the clock, writes none."""
    db = create_db(tmp_path / "run.db")
    db.isolation_level = None
    tr = ModuleTracker(db)
    # (ca_state, retransmits, probes, backoff, rto, last sent, last recv, last ack: ms ago, rtt, rttvar,
    #  rcv_rtt)
    infos = [(0, 0, 0, 0, 204000, 0, 50, 0, 500, 250, 0),
             (0, 0, 0, 0, 204000, 100, 150, 100, 500, 250, 0),   # 0.1 s later, nothing happened
             (0, 0, 0, 0, 204000, 200, 250, 200, 700, 300, 0),   # a new RTT
             (4, 1, 0, 1, 408000, 300, 350, 300, 700, 300, 0),   # an RTO: loss state, backed off
             (4, 1, 0, 1, 408000, 0, 450, 400, 700, 300, 0),     # a retransmission sent
             (4, 1, 0, 1, 408000, 100, 550, 500, 700, 300, 900)]  # a receive-side RTT measured
    for k, info in enumerate(infos):
        tr.record(k / 10, time.time(), [Observation("tcp:1", "tcp", "c", {"in": {"total_msgs": k}}, {}, [], info)])
    rows = db.execute("SELECT * FROM tcp_info").fetchall()
    assert [r[0] for r in rows] == [0, 2, 3, 4, 5]
    assert rows[0] == (0, 1, 500, 250, 0, 0, 0, 0, 204000, 0.0, -0.05, 0.0, 0, None, None, None, None, None)
    assert rows[4][12] == 900
    assert rows[2][4:9] == (1, 4, 1, 0, 408000)
    assert rows[3][9] == pytest.approx(0.4) and rows[3][10] == pytest.approx(-0.05)   # sent at 0.4 s; recv unchanged


class CounterFile:
    """A counter file in the interceptor's format (harness/interceptor/nestintercept.h) for this
    very process, with one connected TCP socket whose inbound and outbound counters a test sets."""

    FD, INODE, NSLOTS = 3, 4242, 8

    def __init__(self, shm_dir):
        self.path = shm.shm_file(shm_dir, os.getpid())
        header = shm.HDR.pack(shm.MAGIC, shm.VERSION, shm.HEADER_SIZE, shm.SLOT_SIZE, self.NSLOTS,
                              os.getpid(), os.getppid(), 0, 1, 0, shm.HF_HAD_GRAPH, 0, self.FD + 1,
                              10, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        cmd = b"probe\0raw\0"
        with open(self.path, "wb") as f:
            f.write(bytes(shm.HEADER_SIZE + self.NSLOTS * shm.SLOT_SIZE))
            f.seek(0)
            f.write(header)
            f.seek(512)
            f.write(struct.pack("<I", len(cmd)))
            f.seek(shm.CMDLINE_OFF)
            f.write(cmd)

    def set(self, inp: tuple[int, float], out: tuple[int, float]) -> None:
        """(calls, wait_ms) per direction; bytes follow the calls, no errors, no call in progress."""
        dirs = []
        for msgs, wait_ms in (inp, out):
            dirs += [0, msgs, 100 * msgs, 0, round(wait_ms * 1e6), 0, 0, 0]
        addr = socket.inet_aton("127.0.0.1") + bytes(12)
        slot = shm.FULL_SLOT.pack(0, 1, self.INODE, self.FD, shm.OPEN,
                                  shm.SF_GRAPH | shm.SF_PEER | shm.SF_CONNECT, socket.AF_INET,
                                  socket.SOCK_STREAM, 40000, 5001, 0, addr, addr, 1, 0, *dirs)
        with open(self.path, "r+b") as f:
            f.seek(shm.HEADER_SIZE + self.FD * shm.SLOT_SIZE)
            f.write(slot)


def test_interceptor_counters_are_stored_raw_and_the_analysis_applies_thesis_3_4(tmp_path):
    """A counter that goes backwards reaches run.db as read; the analysis alone applies the rule
    (analysis/model/stretches.py): the lower snapshot is invalid, and when the next one is lower too the
    higher value before them was the spurious one. A wait_ms reading a few microseconds low (a call
    ending between the reader's look and its clock) is not an event."""
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    cf = CounterFile(shm_dir)
    db = create_db(tmp_path / "run.db")
    db.isolation_level = None
    tr = ModuleTracker(db)
    src = InterceptorSource(shm_dir)
    msgs_in = [5, 9, 7, 8, 10, 12]                      # 9 is spurious: 7 and then 8 are below it
    wait_out = [1.0, 2.0, 1.98, 1.99, 3.0, 3.5]          # 2.0 -> 1.98 -> 1.99: within 0.05 ms
    try:
        for k, (m, w) in enumerate(zip(msgs_in, wait_out, strict=True)):
            cf.set(inp=(m, 0.5 * k), out=(10 + k, w))
            obs = {o.key: o for o in src.poll()}
            sock = obs[f"sock:{os.getpid()}:{cf.FD}:{cf.INODE}"]
            assert sock.counters["in"]["total_msgs"] == m and sock.counters["out"]["wait_ms"] == w
            assert obs[f"app:{os.getpid()}"].counters == sock.counters       # the sum of one socket
            tr.record(10.0 + 0.1 * k, time.time(), list(obs.values()))
        tr.close(10.0 + 0.1 * len(msgs_in))
    finally:
        src.close()
    for kind in ("app", "socket"):
        (mid,) = db.execute("SELECT id FROM modules WHERE kind = ?", (kind,)).fetchone()
        stored = db.execute("SELECT total_msgs FROM counters WHERE module = ? AND dir = 'in' ORDER BY seq",
                            (mid,)).fetchall()
        assert [v for (v,) in stored] == msgs_in                                   # raw, as read
        stored = db.execute("SELECT wait_ms FROM counters WHERE module = ? AND dir = 'out' ORDER BY seq",
                            (mid,)).fetchall()
        assert [v for (v,) in stored] == wait_out
    db.close()

    run = load_stretches(tmp_path)
    (st,) = run.stretches
    for i, m in enumerate(st.modules):
        inp, out = st.counters["in"], st.counters["out"]
        assert run.module_kind[m] in ("app", "socket")
        # seq 0: the run's first snapshot; 9 and 7 discarded, 8 measured from 7
        assert inp.invalid[i].tolist() == [True, True, True, False, False, False]
        assert inp.tm[i].tolist()[3:] == [1, 2, 2]
        assert out.invalid[i].tolist() == [True] + [False] * 5
        assert out.wait[i].tolist()[1:] == pytest.approx([1.0, 0.0, 0.0, 1.0, 0.5])



def test_receive_side_rtt_agrees_with_ss():
    """tcpi_rcv_rtt (format 5): a bulk receiver's estimate, which ss prints as rcv_rtt in ms."""
    srv, cli, acc = loopback_pair()
    try:
        size = 8 << 20
        received = []
        reader = threading.Thread(target=lambda: received.append(_drain(acc, size)))
        reader.start()
        cli.sendall(b"x" * size)
        reader.join()
        me, peer = acc.getsockname()[1], acc.getpeername()[1]
        (s,) = [d for d in map(TcpSock.decode, SockDiag().dump()) if (d.src, d.sport, d.dport) == ("127.0.0.1", me, peer)]
        out = subprocess.run(["ss", "-tinH", "src", f"127.0.0.1:{me}", "dst", f"127.0.0.1:{peer}"],
                             capture_output=True, text=True).stdout
        assert received == [size] and s.bytes_in == size
        assert s.rcv_rtt_us > 0, out
        assert s.rcv_rtt_us == pytest.approx(float(re.search(r"\brcv_rtt:([\d.]+)", out).group(1)) * 1000, abs=1)
    finally:
        for x in (cli, acc, srv):
            x.close()


def _drain(sock, size: int) -> int:
    n = 0
    while n < size:
        n += len(sock.recv(1 << 20))
    return n


def test_one_dump_of_both_families_equals_a_dump_per_family(connection):
    """dump() asks once for every family (TCPDIAG_GETSOCK, one walk of the socket hash); it must see
    exactly the sockets the per-family SOCK_DIAG_BY_FAMILY dumps see, IPv6 ones included."""
    srv = socket.socket(socket.AF_INET6)
    try:
        srv.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    srv.listen(1)
    cli6 = socket.create_connection(srv.getsockname()[:2])
    acc6, _ = srv.accept()
    ours = {os.fstat(s.fileno()).st_ino for s in (*connection, cli6, acc6)}   # others may come and go
    try:
        diag = SockDiag()
        both = {r[0]: TcpSock.decode(r) for r in diag.dump() if r[0] in ours}
        each = {r[0]: TcpSock.decode(r) for r in diag.dump((socket.AF_INET, socket.AF_INET6)) if r[0] in ours}
        assert set(both) == set(each) == ours
        assert {s.family for s in both.values()} == {socket.AF_INET, socket.AF_INET6}
        for inode, s in both.items():   # the same decode (times and RTT may move between the dumps)
            t = each[inode]
            assert (s.src, s.sport, s.dst, s.dport, s.segs_out, s.bytes_out) == (t.src, t.sport, t.dst, t.dport,
                                                                                t.segs_out, t.bytes_out)
    finally:
        for s in (cli6, acc6, srv):
            s.close()


def test_a_dump_of_changes_tells_the_idle_from_the_moved():
    """SockDiag.dump with `same`: a connection is decoded again only when its queues, counters or state moved
    or one of its "ms ago" stamps was reset by an event; idle ones are listed as unchanged."""
    pairs = [loopback_pair() for _ in range(3)]
    try:
        inodes = [os.fstat(cli.fileno()).st_ino for _, cli, _ in pairs]
        diag = SockDiag()
        changed = diag.dump(same=(same := []))
        full = {r[0]: TcpSock.decode(r) for r in SockDiag().dump()}
        mine = {r[0]: TcpSock.decode(r) for r in changed if r[0] in inodes}
        assert set(mine) == set(inodes) and not set(same) & set(inodes)
        for i in inodes:   # decoded as dump() decodes them
            a, b = mine[i], full[i]
            assert (a.src, a.sport, a.dst, a.dport, a.segs_out, a.bytes_out) == \
                   (b.src, b.sport, b.dst, b.dport, b.segs_out, b.bytes_out)
        time.sleep(0.03)
        changed = diag.dump(same=(same := []))
        assert set(inodes) <= set(same) and not {r[0] for r in changed} & set(inodes)
        pairs[1][1].sendall(b"x" * 100)
        time.sleep(0.03)
        changed = diag.dump(same=(same := []))
        (moved,) = [TcpSock.decode(r) for r in changed if r[0] in inodes]
        assert moved.inode == inodes[1] and moved.bytes_out == 101 and moved.segs_out == 1   # (the SYN is acked too)
        assert {inodes[0], inodes[2]} <= set(same)
    finally:
        for trio in pairs:
            for s in trio:
                s.close()


def test_skipping_unchanged_connections_writes_the_same_counters(tmp_path):
    """The collector's TCP source with skip_unchanged (reporting only the connections born, changed or
    dead, Report) writes the very counter rows the source without it writes, keeps
    the idle connections alive, and notices their end."""
    pairs = [loopback_pair() for _ in range(3)]
    try:
        keys = {f"tcp:{os.fstat(s.fileno()).st_ino}" for _, cli, acc in pairs for s in (cli, acc)}
        dbs, runs = [], []
        for skip in (False, True):
            db = create_db(tmp_path / f"run{skip}.db")
            db.isolation_level = None
            dbs.append(db)
            runs.append((TcpSource(lambda a: None, None, skip_unchanged=skip), ModuleTracker(db)))
        sames = []
        for k in range(8):
            if k == 3:
                pairs[0][1].sendall(b"x" * 500)
            if k == 5:
                pairs[2][2].sendall(b"y" * 200)
                pairs[2][1].recv(100)
            if k == 6:
                for s in pairs[1][1:]:
                    s.close()
            time.sleep(0.02)
            for src, tr in runs:
                rep = src.report()
                rep.changed = sorted((o for o in rep.changed if o.key in keys), key=lambda o: o.key)
                tr.record_reports(float(k), time.time(), [rep])
            sames.append(sum(key in keys for key in rep.unchanged()))
        for _, tr in runs:
            tr.close(8.0)
        q = "SELECT seq, m.key, dir, total_msgs, queued, errors, bytes FROM counters c JOIN modules m ON m.id = c.module"
        a, b = (sorted(db.execute(q).fetchall()) for db in dbs)
        assert a == b and len(a) > 12
        assert sames[1] == 6 and sames[3] == 4 and sames[7] == 4   # idle pairs are passed over
        died = "SELECT key, died FROM modules ORDER BY key"
        assert dbs[0].execute(died).fetchall() == dbs[1].execute(died).fetchall()
        assert sorted(d for _, d in dbs[1].execute(died)) == [6.0, 6.0, 8.0, 8.0, 8.0, 8.0]
    finally:
        for trio in pairs:
            for s in trio:
                s.close()
