"""TCP modules from netlink sock_diag (inet_diag) with a lean decoder of the hot path.

pyroute2's DiagSocket decodes tcp_info field by field (60-100 µs a socket here, and it takes
snd_wscale/rcv_wscale from the wrong bits): too slow for 1,000 connections at 100 ms. We keep
pyroute2 for the constants and the netlink plumbing it does well, and decode the dump with one
struct.unpack_from of tcp_info per socket (a dump of 1,000 sockets, kernel time included: 1.0-1.5 ms).
Both families come in one dump (one walk of the kernel's socket hash), and the Mininet hosts have a
private hash (harness.backends.mininet.private_tcp_hash). The collector's source decodes only the
sockets that changed since the last dump (SockDiagChanges; idle ones are compared, not decoded): at a
50 ms interval it takes 1.5% of a core at 100 connections, 7% at 1,000 and 43 ms a snapshot at 10,000
of which 10.6 ms are the kernel's (bench/bench_collector.py, docs/collector.md).

Per TCP module (key 'tcp:<inode>') and direction:
  in:  total_msgs = tcpi_data_segs_in,  bytes = tcpi_bytes_received, queued = receive queue
  out: total_msgs = tcpi_data_segs_out, bytes = tcpi_bytes_acked,    queued = send queue,
       errors = tcpi_total_retrans
and per connection (the tcp_info table): tcpi_rtt, tcpi_rttvar (µs), TCP's state (format 4):
tcpi_ca_state, retransmits, probes, backoff, rto and the times of the last data sent/received and
ACK received, and (format 5) tcpi_rcv_rtt, the receiver's RTT estimate (a pure receiver's tcpi_rtt
is the RTT of its few sent segments: a GET, not the loaded direction).
The receive queue is data TCP has delivered and the socket has not read (pending work of the
reader); the send queue is the connection's own unsent/unacked work (see DESIGN.md).
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR
from pyroute2.netlink.diag import SOCK_DIAG_BY_FAMILY

from harness.collector.source import Observation

NETLINK_SOCK_DIAG = 4
INET_DIAG_INFO = 2

# TCP states we report: live connections. LISTEN has no data; TIME_WAIT/CLOSE have no tcp_info.
_STATES = (1, 2, 3, 4, 5, 8, 9, 11)  # ESTABLISHED SYN_SENT SYN_RECV FIN_WAIT1/2 CLOSE_WAIT LAST_ACK CLOSING
STATE_MASK = sum(1 << s for s in _STATES)

_NLMSGHDR = struct.Struct("=IHHII")
# inet_diag_req_v2: family, protocol, ext, pad, states, then inet_diag_sockid (48 bytes)
_REQ = struct.Struct("=BBBBI48s")
# inet_diag_req (the request before v2, all address families): family, src_len, dst_len, ext,
# inet_diag_sockid, states, dbs
_REQ_COMPAT = struct.Struct("=BBBB48sII")
TCPDIAG_GETSOCK = 18
# inet_diag_msg: family state timer retrans | sport dport (be16) src[16] dst[16] if cookie[8] |
#                expires rqueue wqueue uid inode
_MSG = struct.Struct("=BBBB2s2s16s16sI8sIIIII")
_RTA = struct.Struct("=HH")
# struct tcp_info (include/uapi/linux/tcp.h), the fields we read in one unpack (offsets in bytes):
#   1 ca_state, 2 retransmits, 3 probes, 4 backoff (u8); 8 rto (µs); 44 last_data_sent,
#   52 last_data_recv, 56 last_ack_recv (ms before the dump); 68 rtt, 72 rttvar (µs, smoothed);
#   92 rcv_rtt (µs, the receiver's estimate, 0 until measured); 100 total_retrans;
#   120 bytes_acked, 128 bytes_received (u64); 152 data_segs_in, 156 data_segs_out
_TCP_INFO = struct.Struct("=xBBBB3xI32xI4xII8xII16xI4xI16xQQ16xII")
_TI_MIN_LEN = 160
assert _TCP_INFO.size == _TI_MIN_LEN
# The hot path of SockDiag.changes: a message's rqueue, wqueue and inode (at 72 past the netlink
# header: 16 of it and 56 of inet_diag_msg), and tcp_info's three "ms ago" stamps (at 44).
_QUEUES_INODE = struct.Struct("=II4xI")
_AGO = struct.Struct("=I4xII")


# One socket as dumped: raw addresses are decoded only when a connection is first seen.
#  0 inode, 1 family, 2 state, 3 src_raw, 4 sport_raw, 5 dst_raw, 6 dport_raw, 7 rqueue, 8 wqueue,
#  then _TCP_INFO's fields: 9 ca_state, 10 retransmits, 11 probes, 12 backoff, 13 rto_us,
#  14 last_data_sent_ms, 15 last_data_recv_ms, 16 last_ack_recv_ms, 17 rtt_us, 18 rttvar_us,
#  19 rcv_rtt_us, 20 total_retrans, 21 bytes_acked, 22 bytes_received, 23 data_segs_in, 24 data_segs_out
RawSock = tuple
TCP_INFO_FIELDS = slice(9, 20)   # Observation.tcp_info: ca_state .. rcv_rtt_us


@dataclass(slots=True)
class TcpSock:
    """A decoded RawSock (for callers off the hot path)."""

    inode: int
    family: int
    state: int
    src: str
    sport: int
    dst: str
    dport: int
    rqueue: int
    wqueue: int
    ca_state: int          # 0 Open, 1 Disorder, 2 CWR, 3 Recovery, 4 Loss
    retransmits: int       # RTO retransmissions of the head segment in a row
    probes: int            # unanswered zero-window probes
    backoff: int           # RTO doublings
    rto_us: int
    last_data_sent_ms: int
    last_data_recv_ms: int
    last_ack_recv_ms: int
    rtt_us: int
    rttvar_us: int
    rcv_rtt_us: int        # tcpi_rcv_rtt: the receiver's RTT estimate (0 until measured)
    retrans: int
    bytes_out: int         # tcpi_bytes_acked
    bytes_in: int          # tcpi_bytes_received
    segs_in: int
    segs_out: int

    @classmethod
    def decode(cls, r: RawSock) -> TcpSock:
        fam = r[1]
        return cls(r[0], fam, r[2], _addr(fam, r[3]), int.from_bytes(r[4], "big"), _addr(fam, r[5]),
                   int.from_bytes(r[6], "big"), *r[7:])


def _addr(family: int, raw: bytes) -> str:
    return socket.inet_ntop(family, raw[:4] if family == socket.AF_INET else raw)


class SockDiag:
    """One netlink socket, reused for every dump."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
        self.sock.bind((0, 0))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.buf = bytearray(1 << 20)
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def dump(self, families=None) -> list[RawSock]:
        """Every live TCP socket of both families in one dump (the older TCPDIAG_GETSOCK request,
        which the kernel answers for AF_UNSPEC: one walk of the socket hash, not one per family),
        or with `families`, one SOCK_DIAG_BY_FAMILY dump per family."""
        out: list[RawSock] = []
        if families is None:
            self.seq += 1
            req = _REQ_COMPAT.pack(0, 0, 0, 1 << (INET_DIAG_INFO - 1), b"\0" * 48, STATE_MASK, 0)
            self.sock.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(req), TCPDIAG_GETSOCK,
                                          NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0) + req)
            self._read(out)
            return out
        for family in families:
            self.seq += 1
            req = _REQ.pack(family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0, STATE_MASK, b"\0" * 48)
            hdr = _NLMSGHDR.pack(_NLMSGHDR.size + len(req), SOCK_DIAG_BY_FAMILY,
                                 NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0)
            self.sock.send(hdr + req)
            self._read(out)
        return out

    def _read(self, out: list[RawSock]) -> None:
        buf = self.buf
        unpack_hdr, unpack_msg, unpack_rta = _NLMSGHDR.unpack_from, _MSG.unpack_from, _RTA.unpack_from
        unpack_info = _TCP_INFO.unpack_from
        append = out.append
        # Where INET_DIAG_INFO sat in the last message, and that message's length: the attributes
        # before it are fixed-size, so a message of the same length has it at the same place (checked
        # by its header), which saves walking four attributes per socket.
        hint_len, hint_at = -1, 0
        while True:
            n = self.sock.recv_into(buf)
            off = 0
            while off < n:
                length, mtype, _flags, _seq, _pid = unpack_hdr(buf, off)
                if mtype == NLMSG_DONE:
                    return
                if mtype == NLMSG_ERROR:
                    errno = -struct.unpack_from("=i", buf, off + 16)[0]
                    if errno:
                        raise OSError(errno, f"sock_diag: {os.strerror(errno)}")
                    return
                body = off + _NLMSGHDR.size
                (family, state, _t, _r, sport, dport, src, dst, _if, _ck,
                 _exp, rq, wq, _uid, inode) = unpack_msg(buf, body)
                a = body + _MSG.size
                end = off + length
                off += (length + 3) & ~3
                # inode 0: an orphan (FIN_WAIT/LAST_ACK after close()); no process owns it any more.
                if not inode:
                    continue
                if length == hint_len:
                    alen, atype = unpack_rta(buf, a + hint_at)
                    if atype == INET_DIAG_INFO and alen - 4 >= _TI_MIN_LEN:
                        append((inode, family, state, src, sport, dst, dport, rq, wq) +
                               unpack_info(buf, a + hint_at + 4))
                        continue
                first = a
                while a + 4 <= end:
                    alen, atype = unpack_rta(buf, a)
                    if alen < 4:
                        break
                    if atype == INET_DIAG_INFO and alen - 4 >= _TI_MIN_LEN:
                        append((inode, family, state, src, sport, dst, dport, rq, wq) + unpack_info(buf, a + 4))
                        hint_len, hint_at = length, a - first
                        break
                    a += (alen + 3) & ~3


class SockDiagChanges(SockDiag):
    """A SockDiag that also tells which sockets changed since the last dump (`changes`): the cost of
    a snapshot then follows the connections that moved, not all of them (a server holds thousands,
    most of them idle)."""

    def __init__(self):
        super().__init__()
        # inode -> (queues and tcp_info's bytes but its stamps, two differences of its stamps)
        self.last: dict[int, tuple] = {}

    def forget(self, live: set[int]) -> None:
        self.last = {i: v for i, v in self.last.items() if i in live}

    def changes(self) -> tuple[list[RawSock], list[int]]:
        """One dump like dump(): (the sockets that changed, decoded as RawSock; the inodes of those
        that did not). Unchanged: the same queues and tcp_info bytes as in the last dump but for its
        three "ms ago" stamps, which all grew by the same amount: no event since (an event resets
        one of them). Judged on their differences, which are exact, not on the stamps as times,
        which move with when in the dump the kernel filled the socket in (tens of ms apart at
        10,000 sockets on a busy machine)."""
        self.seq += 1
        req = _REQ_COMPAT.pack(0, 0, 0, 1 << (INET_DIAG_INFO - 1), b"\0" * 48, STATE_MASK, 0)
        self.sock.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(req), TCPDIAG_GETSOCK,
                                      NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0) + req)
        changed: list[RawSock] = []
        same: list[int] = []
        buf, last = self.buf, self.last
        unpack_lt, unpack_msg = _LENGTH_TYPE.unpack_from, _MSG.unpack_from
        unpack_info, unpack_qi, unpack_ago = _TCP_INFO.unpack_from, _QUEUES_INODE.unpack_from, _AGO.unpack_from
        append_changed, append_same, get = changed.append, same.append, last.get
        # Messages of one length have their tcp_info at one place (the attributes before it are
        # fixed-size): one unpack then reads the queues, inode, the attribute's header and the stamps.
        hint_len, info_at, fast = -1, 0, None
        while True:
            n = self.sock.recv_into(buf)
            off = 0
            while off < n:
                length, mtype = unpack_lt(buf, off)
                if mtype == NLMSG_DONE:
                    return changed, same
                if mtype == NLMSG_ERROR:
                    errno = -struct.unpack_from("=i", buf, off + 16)[0]
                    if errno:
                        raise OSError(errno, f"sock_diag: {os.strerror(errno)}")
                    return changed, same
                start = off
                off += (length + 3) & ~3
                info = -1
                if length == hint_len:
                    rq, wq, inode, alen, atype, sent_ago, recv_ago, ack_ago = fast(buf, start + 72)
                    if atype == INET_DIAG_INFO and alen - 4 >= _TI_MIN_LEN:
                        info = start + info_at
                if info < 0:
                    info = _find_info(buf, start, length)
                    if info < 0:
                        continue
                    hint_len, info_at = length, info - start
                    fast = _fast_reader(info_at)
                    rq, wq, inode = unpack_qi(buf, start + 72)
                    sent_ago, recv_ago, ack_ago = unpack_ago(buf, info + 44)
                if not inode:   # an orphan: no process owns it any more
                    continue
                now = (rq, wq, sent_ago - recv_ago, ack_ago - recv_ago, buf[info:info + 44], buf[info + 60:info + 160])
                if get(inode) == now:
                    append_same(inode)
                    continue
                last[inode] = now
                (family, state, _t, _r, sport, dport, src, dst, _if, _ck,
                 _exp, _rq, _wq, _uid, _inode) = unpack_msg(buf, start + 16)
                append_changed((inode, family, state, src, sport, dst, dport, rq, wq) + unpack_info(buf, info))


_LENGTH_TYPE = struct.Struct("=IH")


def _find_info(buf, start: int, length: int) -> int:
    """Where the tcp_info of the message at `start` begins (its attribute's payload), or -1."""
    a, end = start + _NLMSGHDR.size + _MSG.size, start + length
    while a + 4 <= end:
        alen, atype = _RTA.unpack_from(buf, a)
        if alen < 4:
            return -1
        if atype == INET_DIAG_INFO and alen - 4 >= _TI_MIN_LEN:
            return a + 4
        a += (alen + 3) & ~3
    return -1


_FAST: dict[int, object] = {}


def _fast_reader(info_at: int):
    """unpack_from for a message whose tcp_info is `info_at` bytes in, read from 72 bytes in: rqueue,
    wqueue, inode, the attribute's length and type, and the three "ms ago" stamps."""
    f = _FAST.get(info_at)
    if f is None:
        f = _FAST[info_at] = struct.Struct(f"=II4xI{info_at - 4 - 88}xHH44xI4xII").unpack_from
    return f


class TcpSource:
    """Collector source: one 'tcp' module per live connection, child of its interface's ipeth."""

    name = "tcp"

    def __init__(self, address_to_ifkey, owner_of_inode=None, ignored=lambda address: False,
                 skip_unchanged: bool = False):
        # address_to_ifkey(local address) -> 'ipeth:<ifname>' (the tcp -> ipeth edge);
        # owner_of_inode(inodes) -> {inode: {pid, cmdline}}: who holds each new socket (attrs only);
        # ignored(local address): connections that are not part of the experiment (never modules);
        # skip_unchanged: a connection unchanged since the last poll gives its last observation
        # again, marked `same` (what the collector writes no row for), without being decoded.
        self.diag = SockDiagChanges()
        self.skip_unchanged = skip_unchanged
        self.address_to_ifkey = address_to_ifkey
        self.owner_of_inode = owner_of_inode
        self.ignored = ignored
        self.known: dict[int, tuple[str, str, list[str]]] = {}   # inode -> (key, name, children)
        self.ignored_inodes: set[int] = set()
        self.last: dict[int, Observation] = {}   # inode -> its last observation

    def poll(self) -> list[Observation]:
        """One observation per live connection; a connection unchanged since the last poll
        (SockDiagChanges.changes) gives its last observation again, marked `same`."""
        if self.skip_unchanged:
            raw, same = self.diag.changes()
        else:
            raw, same = self.diag.dump(), []
        known, last, obs = self.known, self.last, []
        append = obs.append
        for inode in same:
            ob = last.get(inode)
            if ob is not None:   # None: ignored
                ob.same = True
                append(ob)
        new = [r for r in raw if r[0] not in known and r[0] not in self.ignored_inodes]
        owners = self.owner_of_inode([r[0] for r in new]) if (new and self.owner_of_inode) else {}
        births = {}
        for r in new:
            s = TcpSock.decode(r)
            if self.ignored(s.src):
                self.ignored_inodes.add(s.inode)
                continue
            ifkey = self.address_to_ifkey(s.src)
            known[s.inode] = (f"tcp:{s.inode}", f"tcp {s.src}:{s.sport}>{s.dst}:{s.dport}", [ifkey] if ifkey else [])
            births[s.inode] = {"inode": s.inode, "src": s.src, "sport": s.sport, "dst": s.dst, "dport": s.dport,
                               **owners.get(s.inode, {})}
        for r in raw:
            inode = r[0]
            k = known.get(inode)
            if k is None:   # ignored
                continue
            # Counter tuples in COUNTER_FIELDS order: total_msgs, wait_ms, queued, errors, bytes.
            ob = last[inode] = Observation(
                k[0], "tcp", k[1],
                {"in": (r[23], None, r[7], None, r[22]), "out": (r[24], None, r[8], r[20], r[21])},
                births.get(inode, _NO_ATTRS), k[2], r[TCP_INFO_FIELDS])
            append(ob)
        live_count = len(raw) + len(same)
        if len(known) + len(self.ignored_inodes) > 2 * live_count + 1000:  # forget connections long gone
            live = {r[0] for r in raw}.union(same)
            self.known = {i: v for i, v in known.items() if i in live}
            self.last = {i: v for i, v in last.items() if i in live}
            self.ignored_inodes &= live
            self.diag.forget(live)
        return obs

    def close(self) -> None:
        self.diag.close()


_NO_ATTRS: dict = {}  # attrs are read only when a module is born
