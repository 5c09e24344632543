"""The reader of the interceptor's message ring (nestintercept.h, "Message tracing"): the events
every traced process puts in its shared-memory file, taken out by one reader, the drainer
(harness.collector.tracedrain).

`TraceRing(path)` maps a process's file read-write (the reader's only write is the ring's `tail`,
which frees the places it read) and `drain()` returns the events published since the last drain, in
the order they were reserved, as `Event` tuples; the writers' count of events dropped because the
ring was full is `drops()`. Events are read in two passes: the stamps first (an event is published
once its stamp is its index + 1), then the bytes of the published prefix, so no event is read while
its writer is still filling it (x86-64 keeps loads in order; its place is not written again until the
tail moves past it). An event reserved by a writer that died before publishing it blocks the events
after it until the process is gone; `drain(final=True)` then counts it as lost and moves on.
"""

from __future__ import annotations

import mmap
import os
import socket
import struct
from typing import NamedTuple

from harness.interceptor.shm import HDR, HEADER_SIZE, MAGIC, SLOT_SIZE, VERSION, InterceptorStateError

TRACE_OFF = 192                          # header: trace_cap trace_event_size trace_off
TRACE = struct.Struct("<IIQ")
RING_SIZE = 256
HEAD_OFF, TAIL_OFF, DROPS_OFF = 0, 64, 128
EVENT_SIZE = 64
# stamp tid mono_ns fd bytes call family lport rport pad laddr raddr
EVENT = struct.Struct("<IIQiIBBHHH16s16s")
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
assert EVENT.size == EVENT_SIZE and TRACE.size == 16

# NEST_C_* -> the call's name in the messages table (sendfile64 is sendfile); below 16: a receive
CALLS = {1: "read", 2: "readv", 3: "recv", 4: "recvfrom", 5: "recvmsg", 6: "recvmmsg",
         16: "write", 17: "writev", 18: "send", 19: "sendto", 20: "sendmsg", 21: "sendmmsg",
         22: "sendfile", 23: "sendfile"}


class Event(NamedTuple):
    tid: int
    mono_ns: int
    fd: int
    bytes: int
    call: int
    family: int
    lport: int
    rport: int
    laddr: bytes
    raddr: bytes


def trace_capacity(path: str | os.PathLike) -> int:
    """The ring's events in a process's file (0: it does not trace)."""
    with open(path, "rb") as f:
        head = f.read(TRACE_OFF + TRACE.size)
    if len(head) < TRACE_OFF + TRACE.size or head[:8] != MAGIC:
        return 0
    return TRACE.unpack_from(head, TRACE_OFF)[0]


class TraceRing:
    """One traced process's ring, mapped read-write (the reader writes `tail` only)."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            st = os.fstat(fd)
            head = os.pread(fd, HEADER_SIZE, 0)
            if len(head) < HEADER_SIZE:
                raise InterceptorStateError(f"{self.path}: truncated header")
            h = HDR.unpack_from(head, 0)
            if h[0] != MAGIC or h[1] != VERSION or h[3] != SLOT_SIZE:
                raise InterceptorStateError(f"{self.path}: not an interceptor file of format version {VERSION}")
            self.pid, self.starttime = h[5], h[7]
            cap, esize, off = TRACE.unpack_from(head, TRACE_OFF)
            if not cap:
                raise InterceptorStateError(f"{self.path}: the process does not trace messages")
            size = off + RING_SIZE + cap * EVENT_SIZE
            if esize != EVENT_SIZE or cap & (cap - 1) or off < HEADER_SIZE or st.st_size < size:
                raise InterceptorStateError(f"{self.path}: a message ring this reader does not know "
                                            f"({cap} events of {esize} bytes at {off}, file of {st.st_size})")
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.cap, self.mask = cap, cap - 1
        self.ring = off
        self.events = off + RING_SIZE
        self.tail = U64.unpack_from(self.mm, self.ring + TAIL_OFF)[0]
        self.lost = 0               # reserved and never published (the process ended first)
        self.read = 0               # events this reader took out

    def close(self) -> None:
        self.mm.close()

    def drops(self) -> int:
        """Events the writers dropped because the ring was full (cumulative)."""
        return U64.unpack_from(self.mm, self.ring + DROPS_OFF)[0]

    def head(self) -> int:
        return U64.unpack_from(self.mm, self.ring + HEAD_OFF)[0]

    def drain(self, final: bool = False, limit: int | None = None) -> list[Event]:
        """The events published since the last drain (at most `limit`), oldest first. final: the
        process is gone; places reserved and never published are counted in `lost` and skipped."""
        mm, tail, mask, base = self.mm, self.tail, self.mask, self.events
        # a head more than the ring past the tail is no writer's (they reserve at most cap places ahead):
        # a scribbled file must not make the final drain count lost places for ever
        end = min(self.head(), tail + self.cap if limit is None else tail + min(limit, self.cap))
        out: list[Event] = []
        i = tail
        while i < end:
            n = 0   # the published run from i
            while i + n < end and U32.unpack_from(mm, base + ((i + n) & mask) * EVENT_SIZE)[0] == (i + n + 1) & 0xffffffff:
                n += 1
            k = i
            while k < i + n:   # the run's bytes, in at most two pieces (the ring wraps)
                start = k & mask
                m = min(i + n - k, self.cap - start)
                chunk = mm[base + start * EVENT_SIZE:base + (start + m) * EVENT_SIZE]
                out.extend(Event._make(e[1:9] + e[10:]) for e in EVENT.iter_unpack(chunk))
                k += m
            i += n
            if i < end:
                if not final:
                    break
                self.lost += 1   # a writer reserved it and never published it: the process is gone
                i += 1
        if i != tail:
            struct.pack_into("<Q", mm, self.ring + TAIL_OFF, i)
            self.tail = i
        self.read += len(out)
        return out


def endpoint(family: int, raw: bytes, port: int) -> str:
    """An event's endpoint as the messages table writes it: 'ADDR:PORT' ('[ADDR]:PORT' for IPv6),
    'unix/<inode>' for a Unix socket (its own inode, or its peer's), '' when unknown."""
    if family == socket.AF_INET:
        if not port and raw[:4] == b"\0\0\0\0":
            return ""
        return f"{socket.inet_ntop(socket.AF_INET, raw[:4])}:{port}"
    if family == socket.AF_INET6:
        if not port and raw == bytes(16):
            return ""
        return f"[{socket.inet_ntop(socket.AF_INET6, raw)}]:{port}"
    if family == socket.AF_UNIX:
        ino = int.from_bytes(raw[:8], "little")
        return f"unix/{ino}" if ino else ""
    return ""
