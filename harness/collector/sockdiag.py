"""TCP modules from netlink sock_diag (inet_diag) with a lean decoder of the hot path.

pyroute2's DiagSocket decodes tcp_info field by field (60-100 µs a socket here, and it takes
snd_wscale/rcv_wscale from the wrong bits): too slow for 1,000 connections at 100 ms. We keep
pyroute2 for the constants and the netlink plumbing it does well, and decode the dump with one
struct.unpack_from per socket (≈ 2 µs).

Per TCP module (key 'tcp:<inode>') and direction:
  in:  total_msgs = tcpi_data_segs_in,  bytes = tcpi_bytes_received, queued = receive queue
  out: total_msgs = tcpi_data_segs_out, bytes = tcpi_bytes_acked,    queued = send queue,
       errors = tcpi_total_retrans
and per connection (the tcp_info table, for the run's network health): tcpi_rtt, tcpi_rttvar (µs).
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
# inet_diag_msg: family state timer retrans | sport dport (be16) src[16] dst[16] if cookie[8] |
#                expires rqueue wqueue uid inode
_MSG = struct.Struct("=BBBB2s2s16s16sI8sIIIII")
_RTA = struct.Struct("=HH")
# struct tcp_info (include/uapi/linux/tcp.h) offsets of the fields we read:
_TI_TOTAL_RETRANS = 100  # u32
_U32 = struct.Struct("=I")
_TI_BYTES = struct.Struct("=QQ")          # bytes_acked @120, bytes_received @128
_TI_DATA_SEGS = struct.Struct("=II")      # data_segs_in @152, data_segs_out @156
_TI_RTT = struct.Struct("=II")            # rtt @68, rttvar @72 (µs, smoothed)
# @0: (state,) ca_state, retransmits, probes, backoff (u8), (options, wscale, flags,) rto (u32, µs)
_TI_STATE = struct.Struct("=xBBBB3xI")
# @44: last_data_sent, (last_ack_sent,) last_data_recv, last_ack_recv: ms before the dump
_TI_LAST = struct.Struct("=I4xII")
_TI_MIN_LEN = 160


# One socket as dumped: raw addresses are decoded only when a connection is first seen.
# (inode, family, state, src_raw, sport_raw, dst_raw, dport_raw, rqueue, wqueue,
#  data_segs_in, data_segs_out, bytes_received, bytes_acked, total_retrans, rtt_us, rttvar_us,
#  ca_state, retransmits, probes, backoff, rto_us, last_data_sent_ms, last_data_recv_ms, last_ack_recv_ms)
RawSock = tuple


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
    segs_in: int
    segs_out: int
    bytes_in: int
    bytes_out: int
    retrans: int
    rtt_us: int
    rttvar_us: int
    ca_state: int          # 0 Open, 1 Disorder, 2 CWR, 3 Recovery, 4 Loss
    retransmits: int       # RTO retransmissions of the head segment in a row
    probes: int            # unanswered zero-window probes
    backoff: int           # RTO doublings
    rto_us: int
    last_data_sent_ms: int
    last_data_recv_ms: int
    last_ack_recv_ms: int

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

    def dump(self, families=(socket.AF_INET, socket.AF_INET6)) -> list[RawSock]:
        out: list[RawSock] = []
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
        unpack_u32, unpack_bytes, unpack_segs = _U32.unpack_from, _TI_BYTES.unpack_from, _TI_DATA_SEGS.unpack_from
        unpack_rtt, unpack_state, unpack_last = _TI_RTT.unpack_from, _TI_STATE.unpack_from, _TI_LAST.unpack_from
        append = out.append
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
                while a + 4 <= end:
                    alen, atype = unpack_rta(buf, a)
                    if alen < 4:
                        break
                    if atype == INET_DIAG_INFO and alen - 4 >= _TI_MIN_LEN:
                        i = a + 4
                        append((inode, family, state, src, sport, dst, dport, rq, wq,
                                *unpack_segs(buf, i + 152), *unpack_bytes(buf, i + 120)[::-1],
                                unpack_u32(buf, i + _TI_TOTAL_RETRANS)[0], *unpack_rtt(buf, i + 68),
                                *unpack_state(buf, i), *unpack_last(buf, i + 44)))
                        break
                    a += (alen + 3) & ~3


class TcpSource:
    """Collector source: one 'tcp' module per live connection, child of its interface's ipeth."""

    name = "tcp"

    def __init__(self, address_to_ifkey, owner_of_inode=None, ignored=lambda address: False):
        # address_to_ifkey(local address) -> 'ipeth:<ifname>' (the tcp -> ipeth edge);
        # owner_of_inode(inodes) -> {inode: {pid, cmdline}}: who holds each new socket (attrs only);
        # ignored(local address): connections that are not part of the experiment (never modules).
        self.diag = SockDiag()
        self.address_to_ifkey = address_to_ifkey
        self.owner_of_inode = owner_of_inode
        self.ignored = ignored
        self.known: dict[int, tuple[str, str, list[str]]] = {}   # inode -> (key, name, children)
        self.ignored_inodes: set[int] = set()

    def poll(self) -> list[Observation]:
        raw = self.diag.dump()
        known, obs = self.known, []
        if self.ignored_inodes:
            raw = [r for r in raw if r[0] not in self.ignored_inodes]
        new = [r for r in raw if r[0] not in known]
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
            if r[0] in self.ignored_inodes:
                continue
            key, name, children = known[r[0]]
            obs.append(Observation(
                key, "tcp", name,
                {"in": {"total_msgs": r[9], "bytes": r[11], "queued": r[7]},
                 "out": {"total_msgs": r[10], "bytes": r[12], "queued": r[8], "errors": r[13]}},
                births.get(r[0], _NO_ATTRS), children, (r[14], r[15], r[19], r[16], r[17], r[18], r[20],
                                                        r[21], r[22], r[23])))
        if len(known) + len(self.ignored_inodes) > 2 * len(raw) + 1000:  # forget connections long gone
            live = {r[0] for r in raw}
            self.known = {i: v for i, v in known.items() if i in live}
            self.ignored_inodes &= live
        return obs

    def close(self) -> None:
        self.diag.close()


_NO_ATTRS: dict = {}  # attrs are read only when a module is born
