"""One half-open TCP probe: a SYN from a fresh source port, sent on a raw socket; its answer read on
the same raw socket, filtered in the kernel to that port.

The remote's kernel answers a SYN with a SYN-ACK (a listener) or a RST (no listener); our kernel,
which has no connection on the probe's port, answers that SYN-ACK with a RST, so the handshake never
completes and the remote application never sees the probe (a full connect would be accepted and
reset, which iperf 2's server takes as a broken test and ends: measured here, docs/probes.md). The
probe's port is held by a bound, unconnected TCP socket while the probe lives, so no connection of
the host takes it meanwhile. Needs CAP_NET_RAW (the collector runs as root). Standard library only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct

SYN, RST, ACK = 0x02, 0x04, 0x10
ETHERNET_HEADER, IPV4_HEADER, IPV6_HEADER, TCP_HEADER = 14, 20, 40, 20


def segment_bytes(family: int) -> int:
    """A bare TCP segment (our SYN, or the RST our kernel answers a SYN-ACK with) on the wire."""
    return ETHERNET_HEADER + (IPV4_HEADER if family == socket.AF_INET else IPV6_HEADER) + TCP_HEADER
_TCP = struct.Struct("!HHIIBBHHH")   # sport dport seq ack offset flags window checksum urgent
_WINDOW = 64240

# Classic BPF: accept a packet from the remote's port to the probe's port (and, over IPv4, from the
# remote's address), drop everything else in the kernel: packets of other hosts or ports never wake
# the collector. IPv4 raw sockets see the IP header first (its length in the low nibble of byte 0);
# IPv6 ones do not (their source address is checked by answer()).
_BPF = struct.Struct("HBBI")
_LDXB_MSH, _LDH_IND, _LDH_ABS, _LDW_ABS, _JEQ_K, _RET_K = 0xB1, 0x48, 0x28, 0x20, 0x15, 0x06
SO_ATTACH_FILTER = 26
# At most this many packets are read per answer() call: a flood at the probe's port (which the
# filter lets through only when it claims to come from the remote) cannot hold the caller.
READ_LIMIT = 64


def _filter_program(family: int, port: int, remote_port: int = 0,
                    remote: str | None = None) -> list[tuple[int, int, int, int]]:
    if family == socket.AF_INET:
        checks = [[(_LDXB_MSH, 0, 0, 0), (_LDH_IND, 0, 0, 2)]]       # the TCP destination port
        loads = [(_LDH_IND, 0, 0, 0)]
    else:
        checks = [[(_LDH_ABS, 0, 0, 2)]]
        loads = [(_LDH_ABS, 0, 0, 0)]
    values = [port]
    if remote_port:
        checks.append(loads)
        values.append(remote_port)
    if remote is not None and family == socket.AF_INET:
        checks.append([(_LDW_ABS, 0, 0, 12)])                        # the IPv4 source address
        values.append(int.from_bytes(socket.inet_aton(remote), "big"))
    program: list[tuple[int, int, int, int]] = []
    jumps = []
    for load, value in zip(checks, values, strict=True):
        program += load
        jumps.append(len(program))
        program.append((_JEQ_K, 0, 0, value))
    reject = len(program) + 1
    for at in jumps:   # a mismatch jumps to the rejecting return
        program[at] = (_JEQ_K, 0, reject - at - 1, program[at][3])
    return [*program, (_RET_K, 0, 0, 0xFFFF), (_RET_K, 0, 0, 0)]


def _attach_filter(sock: socket.socket, program) -> None:
    code = ctypes.create_string_buffer(b"".join(_BPF.pack(*ins) for ins in program))
    fprog = struct.pack("HL", len(program), ctypes.addressof(code))   # struct sock_fprog
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def syn_segment(family: int, src: str, dst: str, sport: int, dport: int, seq: int) -> bytes:
    """A TCP SYN header (no options) with its checksum over the pseudo-header."""
    header = _TCP.pack(sport, dport, seq, 0, 5 << 4, SYN, _WINDOW, 0, 0)
    a, b = socket.inet_pton(family, src), socket.inet_pton(family, dst)
    if family == socket.AF_INET:
        pseudo = a + b + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(header))
    else:
        pseudo = a + b + struct.pack("!I3xB", len(header), socket.IPPROTO_TCP)
    return _TCP.pack(sport, dport, seq, 0, 5 << 4, SYN, _WINDOW, _checksum(pseudo + header), 0)


def source_address(family: int, dst: str, port: int) -> str:
    """The address the host sends from to reach `dst` (a UDP socket's route lookup; sends nothing)."""
    with socket.socket(family, socket.SOCK_DGRAM) as u:
        u.connect((dst, port))
        return u.getsockname()[0]


class SynProbe:
    """A SYN in flight: `sock` (raw, to select on) becomes readable when an answer may have come;
    `answer()` reads it."""

    def __init__(self, family: int, dst: str, dport: int):
        self.family, self.dst, self.dport = family, dst, dport
        self.sock = self.hold = None
        self.answer_bytes = 0      # the answer's size on the wire (IP and Ethernet headers included)
        try:
            self.src = src = source_address(family, dst, dport)
            self.hold = socket.socket(family, socket.SOCK_STREAM)   # reserves the fresh port
            self.hold.bind((src, 0))
            self.sport = self.hold.getsockname()[1]
            self.sock = socket.socket(family, socket.SOCK_RAW, socket.IPPROTO_TCP)
            _attach_filter(self.sock, _filter_program(family, self.sport, dport, dst))
            self.sock.setblocking(False)
            self._drain()   # what came in before the filter was attached
            self.seq = int.from_bytes(os.urandom(4), "big")
            self.sock.sendto(syn_segment(family, src, dst, self.sport, dport, self.seq), (dst, 0))
        except BaseException:
            self.close()
            raise

    def _drain(self) -> None:
        for _ in range(1024):   # more than the receive buffer holds; bounded, as a flood could refill it
            try:
                self.sock.recv(65535)
            except BlockingIOError:
                return

    def answer(self, limit: int = READ_LIMIT) -> int | None:
        """0 for a SYN-ACK, errno.ECONNREFUSED for a RST, None while nothing of ours has come
        (within the first `limit` packets waiting: the caller comes back after its other work)."""
        for _ in range(limit):
            try:
                packet, (addr, *_) = self.sock.recvfrom(65535)
            except BlockingIOError:
                return None
            tcp = packet[(packet[0] & 0x0F) * 4:] if self.family == socket.AF_INET else packet
            if len(tcp) < 20 or addr != self.dst:
                continue
            sport, dport, _, ack, _, flags = struct.unpack("!HHIIBB", tcp[:14])
            if sport != self.dport or dport != self.sport or ack != (self.seq + 1) & 0xFFFFFFFF:
                continue
            ip_header = 0 if self.family == socket.AF_INET else IPV6_HEADER   # IPv4's is in `packet`
            if flags & RST:
                self.answer_bytes = len(packet) + ip_header + ETHERNET_HEADER
                return errno.ECONNREFUSED
            if flags & (SYN | ACK) == SYN | ACK:
                self.answer_bytes = len(packet) + ip_header + ETHERNET_HEADER
                return 0
        return None

    def close(self) -> None:
        for s in (self.sock, self.hold):
            if s is not None:
                s.close()
