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

# Classic BPF: accept a packet whose TCP destination port is the probe's, drop everything else.
# IPv4 raw sockets see the IP header first (its length in the low nibble of byte 0); IPv6 ones do not.
_BPF = struct.Struct("HBBI")
_LDXB_MSH, _LDH_IND, _LDH_ABS, _JEQ_K, _RET_K = 0xB1, 0x48, 0x28, 0x15, 0x06
SO_ATTACH_FILTER = 26


def _filter_program(family: int, port: int) -> list[tuple[int, int, int, int]]:
    load = [(_LDXB_MSH, 0, 0, 0), (_LDH_IND, 0, 0, 2)] if family == socket.AF_INET else [(_LDH_ABS, 0, 0, 2)]
    return [*load, (_JEQ_K, 0, 1, port), (_RET_K, 0, 0, 0xFFFF), (_RET_K, 0, 0, 0)]


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
            _attach_filter(self.sock, _filter_program(family, self.sport))
            self.sock.setblocking(False)
            self._drain()   # what came in before the filter was attached
            self.seq = int.from_bytes(os.urandom(4), "big")
            self.sock.sendto(syn_segment(family, src, dst, self.sport, dport, self.seq), (dst, 0))
        except BaseException:
            self.close()
            raise

    def _drain(self) -> None:
        while True:
            try:
                self.sock.recv(65535)
            except BlockingIOError:
                return

    def answer(self) -> int | None:
        """0 for a SYN-ACK, errno.ECONNREFUSED for a RST, None while nothing of ours has come."""
        while True:
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

    def close(self) -> None:
        for s in (self.sock, self.hold):
            if s is not None:
                s.close()
