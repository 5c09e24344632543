"""The collector's change-skipping path against the full decode, on hand-made sock_diag dumps: the
TCP source that decodes only the connections that changed (SockDiag.dump with `same`, its one-pass
comparison of whole chunks and its message-by-message walk) must record exactly what the source that
decodes every connection records, and a skip that misses an event must show in the comparison."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field, replace

import pytest

from harness.collector import sockdiag
from harness.collector.main import ModuleTracker
from harness.collector.sockdiag import _MSG, _NLMSGHDR, _RTA, _TCP_INFO, INET_DIAG_INFO, SockDiag, TcpSource
from rundir.db import create_db

INTERVAL = 0.05
TI_LEN = 232          # tcp_info as a recent kernel sends it: longer than the 160 bytes we read
SHUTDOWN, MARK = 8, 15


@dataclass
class Sock:
    """One connection as the kernel reports it; stamps are "ms ago" at the snapshot."""

    inode: int
    sport: int
    rq: int = 0
    wq: int = 0
    state: int = 1
    ti: dict = field(default_factory=lambda: {"rto": 204000, "rtt": 50, "rttvar": 25, "acked": 1, "segs_out": 0,
                                              "received": 0, "segs_in": 0, "retrans": 0, "ca_state": 0})
    sent: int = 1000
    recv: int = 2000
    ack: int = 1000
    tail: int = 0         # a tcp_info field past the 160 bytes we read (tcpi_delivery_rate's place)
    marked: bool = False  # an extra attribute: a message of another length and layout

    def message(self, seq: int) -> bytes:
        t = self.ti
        ti = bytearray(TI_LEN)
        _TCP_INFO.pack_into(ti, 0, t["ca_state"], 0, 0, 0, t["rto"], self.sent, self.recv, self.ack, t["rtt"],
                            t["rttvar"], 0, t["retrans"], t["acked"], t["received"], t["segs_in"], t["segs_out"])
        ti[0] = self.state   # tcpi_state (a pad byte of _TCP_INFO)
        struct.pack_into("=I", ti, 200, self.tail)
        src, dst = socket.inet_aton("10.99.0.1") + bytes(12), socket.inet_aton("10.99.0.2") + bytes(12)
        body = _MSG.pack(socket.AF_INET, self.state, 0, 0, self.sport.to_bytes(2, "big"), (7000).to_bytes(2, "big"),
                         src, dst, 0, self.inode.to_bytes(8, "little"), 0, self.rq, self.wq, 0, self.inode)
        attrs = _RTA.pack(5, SHUTDOWN) + b"\0\0\0\0"
        if self.marked:
            attrs += _RTA.pack(8, MARK) + struct.pack("=I", 7)
        attrs += _RTA.pack(4 + TI_LEN, INET_DIAG_INFO) + ti
        return _NLMSGHDR.pack(_NLMSGHDR.size + len(body) + len(attrs), 18, 2, seq, 0) + body + attrs


def done(seq: int) -> bytes:
    return _NLMSGHDR.pack(20, 3, 2, seq, 0) + bytes(4)


class Replay:
    """A netlink socket that answers each dump with the next of `dumps` (lists of recv chunks)."""

    def __init__(self, dumps: list[list[bytes]]):
        self.dumps = [list(d) for d in dumps]
        self.chunks: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.chunks = self.dumps.pop(0)

    def recv_into(self, buf, nbytes: int = 0) -> int:
        chunk = self.chunks.pop(0)
        buf[:len(chunk)] = chunk
        return len(chunk)

    def close(self) -> None:
        pass


def scenario(per_chunk: int = 6) -> list[list[bytes]]:
    """Eight dumps, 50 ms apart, of 40 connections (and an orphan) in chunks of `per_chunk` messages:
    most idle; some send, one gets a pure ACK, one a queue, one a state change, one only a tcp_info
    field we do not read; one is born in the middle of the dump, one dies, one carries an extra
    attribute (another message length)."""
    socks = [Sock(1000 + k, 40000 + k) for k in range(40)]
    socks.insert(17, Sock(0, 39999))   # an orphan: no inode
    socks[23].marked = True
    dumps = []
    for k in range(8):
        for s in socks:   # 50 ms on: the stamps of every connection grow together
            s.sent, s.recv, s.ack = s.sent + 50, s.recv + 50, s.ack + 50
        if k in (2, 5):
            for s in socks[3:40:7]:   # a byte sent and acked
                s.ti = {**s.ti, "acked": s.ti["acked"] + 1, "segs_out": s.ti["segs_out"] + 1}
                s.sent = s.ack = 3
        if k == 3:
            socks[8].ack = 5                           # a pure ACK: only a stamp is reset
            socks[9].wq = 1200                         # data queued
            socks[11].tail += 1                        # a field we do not read
            socks.insert(20, Sock(2000, 41000))        # born in the middle: the chunks shift
            socks[23].ti = {**socks[23].ti, "rtt": 70}
        if k == 4:
            socks[12].state = 8                        # CLOSE_WAIT
        if k == 6:
            del socks[30]                              # gone
        messages = [s.message(k) for s in socks] + [done(k)]
        dumps.append([b"".join(messages[i:i + per_chunk]) for i in range(0, len(messages), per_chunk)])
    return dumps


def record(dumps: list[list[bytes]], skip: bool, tmp_path, tamper=None) -> dict[str, list]:
    """What a TCP source (skipping unchanged connections or not) and the module tracker write for
    `dumps`; `tamper(changed, same)` may change what the dump said before the source sees it."""
    db = create_db(tmp_path / f"run-{skip}-{tamper is not None}.db")
    db.isolation_level = None
    src = TcpSource(lambda a: "ipeth:nlb-c", None, skip_unchanged=skip)
    src.diag.sock.close()
    src.diag.sock = Replay(dumps)
    if tamper is not None:
        dump = src.diag.dump

        def tampered(families=None, same=None):
            changed = dump(families, same)
            tamper(changed, same)
            return changed
        src.diag.dump = tampered
    tracker = ModuleTracker(db)
    sames = []
    for k in range(len(dumps)):
        if skip:   # births, changes and deaths only (Report), as the collector runs
            rep = src.report()
            sames.append(len(rep.unchanged()))
            tracker.record_reports(k * INTERVAL, 0.0, [rep])
        else:      # every live connection, decoded: the tracker finds births and deaths
            tracker.record(k * INTERVAL, 0.0, src.poll())
            sames.append(0)
    tracker.close(len(dumps) * INTERVAL)
    key = "JOIN modules m ON m.id = t.module"
    out = {"modules": db.execute("SELECT key, kind, name, attrs, born, died FROM modules ORDER BY key").fetchall(),
           "counters": db.execute(f"SELECT seq, key, dir, total_msgs, wait_ms, queued, errors, bytes FROM counters t "
                                  f"{key} ORDER BY seq, key, dir").fetchall(),
           "tcp_info": db.execute(f"SELECT t.*, key FROM tcp_info t {key} ORDER BY seq, key").fetchall(),
           "same": sames}
    db.close()
    return out


@pytest.mark.parametrize("per_chunk", [6, 1, 200])
def test_the_change_skipping_path_records_what_the_full_decode_records(tmp_path, per_chunk):
    """Chunks of 6 messages (most settled in one pass, those with the longer message walked), of
    one message each (always walked), and the whole dump in one chunk."""
    sockdiag._CHUNKS.clear()
    dumps = scenario(per_chunk)
    full, skipped = record(dumps, False, tmp_path), record(dumps, True, tmp_path)
    for table in ("modules", "counters", "tcp_info"):
        assert skipped[table] == full[table], table
    # not vacuous: idle connections were passed over, events were recorded, modules born and dead
    assert full["same"] == [0] * 8 and min(skipped["same"][1:]) >= 25
    assert len(full["modules"]) == 41 and sum(d is not None and d < 0.4 for *_, d in full["modules"]) == 1
    seqs = {r[0] for r in full["tcp_info"]}
    assert {2, 3, 5} <= seqs and not {1, 4, 7} & seqs   # idle snapshots write no tcp_info (nor a state change)
    if per_chunk == 6:
        assert sockdiag._CHUNKS, "no chunk was compared in one pass"


def test_a_skip_that_misses_an_event_shows_in_the_records(tmp_path):
    """The comparison above can fail: a change-skipping source that takes the pure ACK of snapshot 3
    (only tcp_info's last_ack_recv moved) for no change records less than the full decode."""
    dumps = scenario()
    dumped = []

    def miss_the_ack(changed, same):
        dumped.append(1)
        if len(dumped) == 4:   # snapshot 3
            (ack,) = [r for r in changed if r[0] == 1008]
            changed.remove(ack)
            same.append(ack[0])
    full, missed = record(dumps, False, tmp_path), record(dumps, True, tmp_path, tamper=miss_the_ack)
    assert missed["counters"] == full["counters"]
    assert missed["tcp_info"] != full["tcp_info"]
    (lost,) = set(full["tcp_info"]) - set(missed["tcp_info"])
    assert lost[0] == 3 and lost[-1] == "tcp:1008"


def test_one_pass_and_the_walk_decode_alike():
    """SockDiag.dump with `same` gives the same changed sockets, decoded alike, and the same unchanged
    ones, whether the dump comes in chunks it compares in one pass or message by message."""
    results = []
    for per_chunk in (7, 1):
        diag = SockDiag()
        diag.sock.close()
        diag.sock = Replay(scenario(per_chunk))
        seen = []
        for _ in range(8):
            same: list[int] = []
            changed = diag.dump(same=same)
            seen.append((sorted(changed), sorted(same)))
        results.append(seen)
    assert results[0] == results[1]
    changed3 = {r[0] for r in results[0][3][0]}
    assert {1008, 1009, 2000} <= changed3 and 1011 not in changed3 and 0 not in changed3
    assert 1012 in {r[0] for r in results[0][4][0]}   # the state change
    # every live socket once (the one born at 3 until the one gone at 6), the orphan never
    assert [len(c) + len(s) for c, s in results[0]] == [40, 40, 40, 41, 41, 41, 40, 40]
    full = SockDiag()
    full.sock.close()
    full.sock = Replay(scenario(7))
    assert [len(full.dump()) for _ in range(2)] == [40, 40]   # every socket but the orphan, decoded


def test_a_decoded_socket_is_the_message_it_came_from():
    s = replace(Sock(77, 45000, rq=3, wq=9), sent=11, recv=22, ack=33)
    diag = SockDiag()
    diag.sock.close()
    diag.sock = Replay([[s.message(0) + Sock(78, 45001).message(0), done(0)]] * 2)
    a = diag.dump()[0]
    same: list[int] = []
    b = diag.dump(same=same)[0]
    assert a == b and same == []   # nothing remembered by a dump without `same`
    d = sockdiag.TcpSock.decode(a)
    assert (d.inode, d.sport, d.dport, d.src, d.rqueue, d.wqueue) == (77, 45000, 7000, "10.99.0.1", 3, 9)
    assert (d.last_data_sent_ms, d.last_data_recv_ms, d.last_ack_recv_ms, d.rtt_us) == (11, 22, 33, 50)
