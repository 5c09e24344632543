"""TCP modules from netlink sock_diag (inet_diag) with a lean decoder of the hot path.

pyroute2's DiagSocket decodes tcp_info field by field (60-100 µs a socket here, and it takes
snd_wscale/rcv_wscale from the wrong bits): too slow for 1,000 connections at 100 ms. We keep
pyroute2 for the constants and the netlink plumbing it does well, and decode the dump with one
struct.unpack_from of tcp_info per socket (a dump of 1,000 sockets, kernel time included: 1.0-1.5 ms).
Both families come in one dump (one walk of the kernel's socket hash), and the Mininet hosts have a
private hash (harness.backends.mininet.private_tcp_hash). The collector's source decodes only the
sockets that changed since the last dump (SockDiag.dump with `same`): idle ones are compared, not
decoded, a recv chunk of them at a time (_Chunk). At a 50 ms interval it takes 1.7% of a core at 100
connections, 6.5% at 1,000 and about 36 ms a snapshot at 10,000, of which 11 ms are the kernel's dump
(bench/bench_collector.py, docs/collector.md).

Per TCP module (key 'tcp:<inode>') and direction:
  in:  total_msgs = tcpi_data_segs_in,  bytes = tcpi_bytes_received, queued = receive queue
  out: total_msgs = tcpi_data_segs_out, bytes = tcpi_bytes_acked,    queued = send queue,
       errors = tcpi_total_retrans
and per connection (the tcp_info table): tcpi_rtt, tcpi_rttvar (µs), TCP's state (format 4):
tcpi_ca_state, retransmits, probes, backoff, rto and the times of the last data sent/received and
ACK received, (format 5) tcpi_rcv_rtt, the receiver's RTT estimate (a pure receiver's tcpi_rtt
is the RTT of its few sent segments: a GET, not the loaded direction), and (format 8, issue 42) whose
turn it is: tcpi_unacked (segments sent and not acknowledged), tcpi_notsent_bytes (written, not yet
sent) and the chrono stats tcpi_busy_time, tcpi_rwnd_limited, tcpi_sndbuf_limited (µs the
connection had data to send, and of that the time the receiver's window, or the send buffer,
held it; they stop when the queues are empty). The chrono stats need a kernel of 4.10 or later (a
shorter tcp_info gives None); they are refreshed when a connection's other state changes (the
unchanged test below leaves them out: busy time grows with the clock while data waits).
The receive queue is data TCP has delivered and the socket has not read (pending work of the
reader); the send queue is the connection's own unsent/unacked work (see DESIGN.md).
"""

from __future__ import annotations

import os
import socket
import struct
from array import array
from dataclasses import dataclass
from itertools import compress
from operator import eq, not_, sub

from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR
from pyroute2.netlink.diag import SOCK_DIAG_BY_FAMILY

from harness.collector.source import Changes, Observation, Report

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
# Whose turn (format 8): 24 unacked (segments), 144 notsent_bytes; with a tcp_info of 192 bytes or more
# (Linux 4.10 on) also the chrono stats 168 busy_time, 176 rwnd_limited, 184 sndbuf_limited (µs, u64).
_TURN_SHORT = struct.Struct("=24xI116xI")
_TURN_LONG = struct.Struct("=24xI116xI20xQQQ")
_TI_CHRONO_LEN = _TURN_LONG.size
assert _TI_CHRONO_LEN == 192
_NO_CHRONO = (None, None, None)


def _turn(buf, info: int, length: int) -> tuple:
    """(unacked, notsent_bytes, busy_us, rwnd_limited_us, sndbuf_limited_us) of the tcp_info at
    `info`, `length` bytes long (the chrono stats None when it is shorter than 192)."""
    if length >= _TI_CHRONO_LEN:
        return _TURN_LONG.unpack_from(buf, info)
    return _TURN_SHORT.unpack_from(buf, info) + _NO_CHRONO


# One socket as dumped: raw addresses are decoded only when a connection is first seen.
#  0 inode, 1 family, 2 state, 3 src_raw, 4 sport_raw, 5 dst_raw, 6 dport_raw, 7 rqueue, 8 wqueue,
#  then _TCP_INFO's fields: 9 ca_state, 10 retransmits, 11 probes, 12 backoff, 13 rto_us,
#  14 last_data_sent_ms, 15 last_data_recv_ms, 16 last_ack_recv_ms, 17 rtt_us, 18 rttvar_us,
#  19 rcv_rtt_us, 20 total_retrans, 21 bytes_acked, 22 bytes_received, 23 data_segs_in, 24 data_segs_out,
#  then _turn's: 25 unacked, 26 notsent_bytes, 27 busy_us, 28 rwnd_limited_us, 29 sndbuf_limited_us
RawSock = tuple
TCP_INFO_FIELDS = slice(9, 20)   # Observation.tcp_info: ca_state .. rcv_rtt_us, then TURN_FIELDS
TURN_FIELDS = slice(25, 30)


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
    unacked: int           # tcpi_unacked: segments in flight, not yet acknowledged
    notsent_bytes: int     # tcpi_notsent_bytes: written by the application, not yet sent
    busy_us: int | None    # tcpi_busy_time: µs with data to send (None: a kernel before 4.10)
    rwnd_limited_us: int | None    # tcpi_rwnd_limited: of it, held by the receiver's window
    sndbuf_limited_us: int | None  # tcpi_sndbuf_limited: of it, held by the send buffer

    @classmethod
    def decode(cls, r: RawSock) -> TcpSock:
        fam = r[1]
        return cls(r[0], fam, r[2], _addr(fam, r[3]), int.from_bytes(r[4], "big"), _addr(fam, r[5]),
                   int.from_bytes(r[6], "big"), *r[7:])


def _addr(family: int, raw: bytes) -> str:
    return socket.inet_ntop(family, raw[:4] if family == socket.AF_INET else raw)


_BUF = 1 << 20
# What a message's fast reader may read past the bytes received (a netlink message is at most a few
# hundred bytes here; the buffer has this much beyond what recv_into is allowed to fill).
_SLACK = 4096


class SockDiag:
    """One netlink socket, reused for every dump; with `same` given to dump(), it remembers each
    socket's bytes to tell the ones that changed since the last such dump (`last`)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
        self.sock.bind((0, 0))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.buf = bytearray(_BUF + _SLACK)
        self.seq = 0
        # inode -> its _key in the last dump given a `same`: its bytes from the queues to tcp_info's
        # 160th, the three "ms ago" stamps replaced by two differences of them
        self.last: dict[int, bytes] = {}

    def close(self) -> None:
        self.sock.close()

    def forget(self, live: set[int]) -> None:
        self.last = {i: v for i, v in self.last.items() if i in live}

    def dump(self, families=None, same: list[int] | None = None) -> list[RawSock]:
        """Every live TCP socket of both families in one dump (the older TCPDIAG_GETSOCK request,
        which the kernel answers for AF_UNSPEC: one walk of the socket hash, not one per family),
        or with `families`, one SOCK_DIAG_BY_FAMILY dump per family.

        With `same` (a list), only the sockets that changed since the last dump given a `same` are
        decoded and returned; the inodes of the others are appended to `same`. Unchanged: the same
        message bytes from the queues to the end of the tcp_info we read but for its three "ms ago"
        stamps, which all grew by the same amount: no event since (an event resets one of them).
        Judged on their differences, which are exact, not on the stamps as times, which move with
        when in the dump the kernel filled the socket in (tens of ms apart at 10,000 sockets on a
        busy machine). An idle socket costs a bytes compare (_key), not a decode, and a chunk of
        messages of one length is compared in one pass (_Chunk)."""
        out: list[RawSock] = []
        if families is None:
            self.seq += 1
            req = _REQ_COMPAT.pack(0, 0, 0, 1 << (INET_DIAG_INFO - 1), b"\0" * 48, STATE_MASK, 0)
            self.sock.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(req), TCPDIAG_GETSOCK,
                                          NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0) + req)
            self._read(out, same)
            return out
        for family in families:
            self.seq += 1
            req = _REQ.pack(family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0, STATE_MASK, b"\0" * 48)
            hdr = _NLMSGHDR.pack(_NLMSGHDR.size + len(req), SOCK_DIAG_BY_FAMILY,
                                 NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0)
            self.sock.send(hdr + req)
            self._read(out, same)
        return out

    def _read(self, out: list[RawSock], same: list[int] | None) -> None:
        buf, sock, last = self.buf, self.sock, self.last
        track = same is not None
        get, append = last.get, out.append
        append_same = same.append if track else None
        unpack_lt, unpack_msg, unpack_info = _LENGTH_TYPE.unpack_from, _MSG.unpack_from, _TCP_INFO.unpack_from
        unpack_rta, unpack_inode, unpack_ago = _RTA.unpack_from, _INODE.unpack_from, _AGO.unpack_from
        # Messages of one length have their tcp_info at one place (the attributes before it are
        # fixed-size): `fast` reads a message's length, inode and stamps in one unpack, on the guess
        # that it is as long as the last one (checked: a message of another length takes the walk).
        hint_len, info_at = -1, _MIN_INFO_AT
        fast = _fast_reader(info_at)
        while True:
            n = sock.recv_into(buf, _BUF)
            off = 0
            if track and hint_len > 0:
                # A chunk of messages all as long as the last one: compared in one pass (_Chunk);
                # `off` past the ones it settled (all unchanged, or it decoded the changed ones).
                off = _chunk(hint_len, info_at, n).settle(self, buf, n, out, same)
            while off < n:
                start = off
                length, inode, sent_ago, recv_ago, ack_ago = fast(buf, start)
                off += (length + 3) & ~3
                if length == hint_len:
                    info = start + info_at
                    if track:
                        key = _key(buf, start, info, sent_ago, recv_ago, ack_ago)
                        # Equal bytes include the attribute's header, checked when the key was stored.
                        if get(inode) == key:
                            append_same(inode)
                            continue
                    alen, atype = unpack_rta(buf, info - 4)
                    if atype != INET_DIAG_INFO or alen - 4 < _TI_MIN_LEN:
                        info = -1
                else:
                    info = -1
                    if unpack_lt(buf, start)[1] in (NLMSG_DONE, NLMSG_ERROR):
                        _end(buf, start)
                        return
                if info < 0:
                    info = _find_info(buf, start, length)
                    if info < 0:
                        continue
                    hint_len, info_at = length, info - start
                    fast = _fast_reader(info_at)
                    (inode,) = unpack_inode(buf, start + 84)
                    sent_ago, recv_ago, ack_ago = unpack_ago(buf, info + 44)
                    if track:
                        key = _key(buf, start, info, sent_ago, recv_ago, ack_ago)
                        if get(inode) == key:
                            append_same(inode)
                            continue
                if not inode:   # an orphan (FIN_WAIT/LAST_ACK after close()): no process owns it any more
                    continue
                if track:
                    last[inode] = key
                (family, state, _t, _r, sport, dport, src, dst, _if, _ck,
                 _exp, rq, wq, _uid, _inode) = unpack_msg(buf, start + 16)
                append((inode, family, state, src, sport, dst, dport, rq, wq) + unpack_info(buf, info)
                       + _turn(buf, info, unpack_rta(buf, info - 4)[0] - 4))


_LENGTH_TYPE = struct.Struct("=IH")
_INODE = struct.Struct("=I")
# tcp_info's "ms ago" stamps: last_data_sent (44), last_data_recv (52), last_ack_recv (56)
_AGO = struct.Struct("=I4xII")
# The least offset of tcp_info in a message: the netlink header, inet_diag_msg, an attribute header.
_MIN_INFO_AT = _NLMSGHDR.size + _MSG.size + _RTA.size


def _end(buf, start: int) -> None:
    """The dump's last message (NLMSG_DONE, or NLMSG_ERROR: raised unless its errno is 0)."""
    if _LENGTH_TYPE.unpack_from(buf, start)[1] == NLMSG_ERROR:
        errno = -struct.unpack_from("=i", buf, start + 16)[0]
        if errno:
            raise OSError(errno, f"sock_diag: {os.strerror(errno)}")


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


def _key(buf, start: int, info: int, sent_ago: int, recv_ago: int, ack_ago: int) -> bytes:
    """What tells a socket unchanged (SockDiag.dump): the message's bytes from its queues to the end
    of the tcp_info we read, with the three "ms ago" stamps replaced by two differences of them."""
    return buf[start + 72:info + 44] + _DIFFS.pack(sent_ago - recv_ago, ack_ago - recv_ago) + buf[info + 60:info + 160]


_DIFFS = struct.Struct("=qq")


class _Chunk:
    """A recv chunk of `m` messages of one length and layout (tcp_info `info_at` bytes in), compared
    with the last dump in one pass, in C (unpack, map, compress) rather than a bytecode loop a socket.
    The chunk's stamps are replaced in the buffer by their differences, so that each message's
    _key is one slice. One bytes object a socket is also what keeps the comparison fast while the
    kernel's walk of 10,000 sockets between two chunks evicts the caches: a tuple of five objects a
    socket cost three times as much in the collector as in a replay of the same dump."""

    def __init__(self, length: int, info_at: int, m: int):
        step = (length + 3) & ~3
        self.length, self.info_at, self.m, self.step, self.end = length, info_at, m, step, m * step
        # per message: length, inode, the tcp_info attribute's header, the three stamps
        one = f"I80xI{info_at - 92}xHH44xI4xII{step - info_at - 60}x"
        self.unpack = struct.Struct("=" + one * m).unpack_from
        # per message: the key (the queues to tcp_info's 160th byte, the stamps' place holding the differences)
        self.keys = struct.Struct("=" + f"72x{info_at + 88}s{step - info_at - 160}x" * m).unpack_from

    def settle(self, diag: SockDiag, buf, n: int, out: list, same: list) -> int:
        """Compare the chunk's messages with `diag.last`: the unchanged go to `same`, the changed are
        decoded into `out` (and remembered). Returns the bytes settled: those of its `m` messages,
        or 0 (buffer untouched) unless every one of them has this length and its tcp_info at this place."""
        m = self.m
        flat = self.unpack(buf, 0)
        if (flat[0::7].count(self.length) != m or flat[3::7].count(INET_DIAG_INFO) != m
                or min(flat[2::7]) - 4 < _TI_MIN_LEN):
            return 0
        inodes, sent, recv, ack = flat[1::7], flat[4::7], flat[5::7], flat[6::7]
        at, end, step = self.info_at + 44, self.end, self.step
        for to, diffs in ((at, array("q", map(sub, sent, recv)).tobytes()),
                          (at + 8, array("q", map(sub, ack, recv)).tobytes())):
            for j in range(8):
                buf[to + j:end:step] = diffs[j::8]
        keys = self.keys(buf, 0)
        last = diag.last
        equal = list(map(eq, map(last.get, inodes), keys))
        same.extend(compress(inodes, equal))
        if equal.count(True) == m:
            return end
        info_at = self.info_at
        unpack_msg, unpack_info = _MSG.unpack_from, _TCP_INFO.unpack_from
        info_len = min(flat[2::7]) - 4   # one layout: every message's tcp_info is as long
        for k in compress(range(m), map(not_, equal)):
            inode = inodes[k]
            if not inode:   # an orphan: no process owns it any more
                continue
            last[inode] = keys[k]
            start = k * step
            (family, state, _t, _r, sport, dport, src, dst, _if, _ck,
             _exp, rq, wq, _uid, _inode) = unpack_msg(buf, start + 16)
            info = unpack_info(buf, start + info_at)   # its stamps from before they were replaced
            out.append((inode, family, state, src, sport, dst, dport, rq, wq) + info[:5] +
                       (sent[k], recv[k], ack[k]) + info[8:] + _turn(buf, start + info_at, info_len))
        return end


_CHUNKS: dict[tuple[int, int, int], _Chunk] = {}


def _chunk(length: int, info_at: int, n: int) -> _Chunk | _NoChunk:
    """The _Chunk for as many messages `length` long as `n` bytes hold (the rest, such as a dump's
    NLMSG_DONE, which some kernels send in the last chunk, is walked); a stand-in that settles
    nothing when that is fewer than two."""
    step = (length + 3) & ~3
    m = n // step
    if m < 2:
        return _NO_CHUNK
    c = _CHUNKS.get((length, info_at, m))
    if c is None:
        if len(_CHUNKS) > 256:   # a handful of chunk sizes in practice
            _CHUNKS.clear()
        c = _CHUNKS[(length, info_at, m)] = _Chunk(length, info_at, m)
    return c


class _NoChunk:
    def settle(self, *args) -> int:
        return 0


_NO_CHUNK = _NoChunk()


_FAST: dict[int, object] = {}


def _fast_reader(info_at: int):
    """unpack_from for a message whose tcp_info is `info_at` bytes in: its length, its inode (at 84:
    16 bytes of netlink header and 68 of inet_diag_msg) and tcp_info's three "ms ago" stamps."""
    f = _FAST.get(info_at)
    if f is None:
        f = _FAST[info_at] = struct.Struct(f"=I80xI{info_at - 88}x44xI4xII").unpack_from
    return f


class TcpSource:
    """Collector source: one 'tcp' module per live connection, child of its interface's ipeth."""

    name = "tcp"

    def __init__(self, address_to_ifkey, owner_of_inode=None, ignored=lambda address: False,
                 skip_unchanged: bool = False):
        # address_to_ifkey(local address) -> 'ipeth:<ifname>' (the tcp -> ipeth edge);
        # owner_of_inode(inodes) -> {inode: {pid, cmdline}}: who holds each new socket (attrs only);
        # ignored(local address): connections that are not part of the experiment (never modules);
        # skip_unchanged: report() gives only the connections born or changed since the last report
        # and those that died, without decoding the others (else every connection, decoded).
        self.diag = SockDiag()
        self.skip_unchanged = skip_unchanged
        self.address_to_ifkey = address_to_ifkey
        self.owner_of_inode = owner_of_inode
        self.ignored = ignored
        self.known: dict[int, tuple[str, str, list[str]]] = {}   # inode -> (key, name, children)
        self.keys: dict[int, str] = {}            # inode -> key, of the known
        self.ignored_inodes: set[int] = set()
        self.last: dict[int, Observation] = {}   # inode -> its last observation
        self.alive: set[int] = set()              # the inodes of the last report's dump (ignored ones too)
        self.changes = Changes()

    def poll(self) -> list[Observation]:
        """One observation per live connection, every one decoded."""
        return self._observe(self.diag.dump())

    def report(self) -> Report:
        """The connections born or changed since the last report (SockDiag.dump with `same`: the
        others are compared, not decoded) and those that died; without skip_unchanged, every one."""
        if not self.skip_unchanged:
            return self.changes(self.poll())
        same: list[int] = []
        raw = self.diag.dump(same=same)
        changed = self._observe(raw)
        alive = set(same)
        alive.update([r[0] for r in raw])
        gone, back = [], []
        if alive != self.alive:   # a set compare in C: Python looks at sockets only when some came or went
            before, known, last = self.alive, self.known, self.last
            gone = [known[i][0] for i in before - alive if i in known]
            # Unchanged since it was last seen, yet missing from the last dump (a socket whose connect
            # failed, connecting again): born again, with its last observation.
            back = [last[i] for i in same if i not in before and i in last]
        self.alive = alive
        keys = self.keys

        def unchanged() -> list[str]:
            out = list(filter(None, map(keys.get, same)))
            if back:
                again = {ob.key for ob in back}
                out = [k for k in out if k not in again]
            return out
        self._forget(alive)
        return Report(back + changed if back else changed, gone, unchanged)

    def _observe(self, raw: list[RawSock]) -> list[Observation]:
        """An observation for each dumped socket (decoded), the new ones named (and owned) first."""
        known, last, obs = self.known, self.last, []
        append = obs.append
        new = [r for r in raw if r[0] not in known and r[0] not in self.ignored_inodes]
        owners = self.owner_of_inode([r[0] for r in new]) if (new and self.owner_of_inode) else {}
        births = {}
        for r in new:
            s = TcpSock.decode(r)
            if self.ignored(s.src):
                self.ignored_inodes.add(s.inode)
                continue
            ifkey = self.address_to_ifkey(s.src)
            key = self.keys[s.inode] = f"tcp:{s.inode}"
            known[s.inode] = (key, f"tcp {s.src}:{s.sport}>{s.dst}:{s.dport}", [ifkey] if ifkey else [])
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
                births.get(inode, _NO_ATTRS), k[2], r[TCP_INFO_FIELDS] + r[TURN_FIELDS])
            append(ob)
        if not self.skip_unchanged:
            self._forget({r[0] for r in raw})
        return obs

    def _forget(self, live: set[int]) -> None:
        """Forget connections long gone, now and then (when they are as many as the live)."""
        if len(self.known) + len(self.ignored_inodes) > 2 * len(live) + 1000:
            self.known = {i: v for i, v in self.known.items() if i in live}
            self.keys = {i: v for i, v in self.keys.items() if i in live}
            self.last = {i: v for i, v in self.last.items() if i in live}
            self.ignored_inodes &= live
            self.diag.forget(live)

    def close(self) -> None:
        self.diag.close()


_NO_ATTRS: dict = {}  # attrs are read only when a module is born
