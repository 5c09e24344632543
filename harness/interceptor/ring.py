"""The reader of the interceptor's message ring (nestintercept.h, "Message tracing"): the events
every traced process puts in its shared-memory file, taken out by one reader, the drainer
(harness.collector.tracedrain).

`TraceRing(path)` opens a process's file read-write (the reader's only write is the ring's `tail`,
which frees the places it read) and `drain()` returns the events published since the last drain, in
the order they were reserved, as `Event` tuples; the writers' count of events dropped because the
ring was full is `drops()`. Events are read in two passes: the stamps first (an event is published
once its stamp is its index + 1), then the bytes of the published prefix, so no event is read while
its writer is still filling it (x86-64 keeps loads in order; its place is not written again until the
tail moves past it). An event reserved by a writer that died before publishing it blocks the events
after it until the process is gone; `drain(final=True)` then counts it as lost and moves on.

The reader runs as root over files the traced processes own (issue 40 items 4 and 9): it reads with
pread, never through a mapping (a file truncated under it is an InterceptorStateError, not SIGBUS),
opens regular files only, without following links and without blocking (a FIFO named N.nest is
refused), accepts no ring larger than the library makes (MAX_EVENTS) or than the file, reads a ring
CHUNK events at a time, and refuses a file whose header's pid is not the one in its name.
"""

from __future__ import annotations

import os
import socket
import struct
from typing import NamedTuple

import numpy as np

from harness.interceptor.shm import HDR, HEADER_SIZE, MAGIC, SLOT_SIZE, SUFFIX, VERSION, InterceptorStateError
from harness.interceptor.shm import (
    open_regular as open_file,  # the drainer opens rings as the collector opens counter files
)

TRACE_OFF = 192                          # header: trace_cap trace_event_size trace_off
TRACE = struct.Struct("<IIQ")
RING_SIZE = 256
HEAD_OFF, TAIL_OFF, DROPS_OFF = 0, 64, 128
EVENT_SIZE = 64
MAX_EVENTS = 1 << 24      # the most events a ring holds (trace.c's bound on NESTLAB_TRACE_EVENTS)
CHUNK = 4096              # events read at once
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
    """The ring's events in a process's file (0: it does not trace, or it is no interceptor file)."""
    fd, _st = open_file(path)
    try:
        head = os.pread(fd, TRACE_OFF + TRACE.size, 0)
    finally:
        os.close(fd)
    if len(head) < TRACE_OFF + TRACE.size or head[:8] != MAGIC:
        return 0
    return TRACE.unpack_from(head, TRACE_OFF)[0]


class TraceRing:
    """One traced process's ring, read with pread and its `tail` written with pwrite (no mapping: a
    file truncated under a mapping would kill the reader with SIGBUS; a short read here is an error)."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        self.fd, st = open_file(self.path, os.O_RDWR)
        try:
            head = os.pread(self.fd, HEADER_SIZE, 0)
            if len(head) < HEADER_SIZE:
                raise InterceptorStateError(f"{self.path}: truncated header")
            h = HDR.unpack_from(head, 0)
            if h[0] != MAGIC or h[1] != VERSION or h[3] != SLOT_SIZE:
                raise InterceptorStateError(f"{self.path}: not an interceptor file of format version {VERSION}")
            self.pid, self.starttime = h[5], h[7]
            # the library names its file by its own pid (shm_file): a header claiming another pid is
            # a forgery (a process writing rows in another's name)
            name = os.path.basename(self.path)
            if name != f"{self.pid}{SUFFIX}":
                raise InterceptorStateError(f"{self.path}: its header claims pid {self.pid}, not the file's "
                                            f"name; ring refused")
            cap, esize, off = TRACE.unpack_from(head, TRACE_OFF)
            if not cap:
                raise InterceptorStateError(f"{self.path}: the process does not trace messages")
            self.size = off + RING_SIZE + cap * EVENT_SIZE
            if esize != EVENT_SIZE or cap & (cap - 1) or cap > MAX_EVENTS or off < HEADER_SIZE or \
                    off % EVENT_SIZE or st.st_size < self.size:
                raise InterceptorStateError(f"{self.path}: a message ring this reader does not know "
                                            f"({cap} events of {esize} bytes at {off}, file of {st.st_size})")
        except BaseException:
            os.close(self.fd)
            raise
        self.cap, self.mask = cap, cap - 1
        self.ring = off
        self.events = off + RING_SIZE
        self.tail = self._u64(TAIL_OFF)
        self.lost = 0               # reserved and never published (the process ended first)
        self.read = 0               # events this reader took out

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def pread(self, n: int, off: int) -> bytes:
        """n bytes at off, all of them (InterceptorStateError: the file was cut short)."""
        got = os.pread(self.fd, n, off)
        if len(got) < n:
            raise InterceptorStateError(f"{self.path}: the file was truncated under its reader")
        return got

    def _u64(self, at: int) -> int:
        return U64.unpack(self.pread(8, self.ring + at))[0]

    def drops(self) -> int:
        """Events the writers dropped because the ring was full (cumulative)."""
        return self._u64(DROPS_OFF)

    def head(self) -> int:
        return self._u64(HEAD_OFF)

    def _stamps_ok(self, i: int, n: int) -> np.ndarray:
        """Which of the n places from index i (not wrapping) are published: stamp == index + 1."""
        raw = self.pread(n * EVENT_SIZE, self.events + (i & self.mask) * EVENT_SIZE)
        stamps = np.frombuffer(raw, dtype="<u4")[::EVENT_SIZE // 4]
        return stamps == (np.arange(i + 1, i + n + 1, dtype=np.uint64) & 0xffffffff).astype(np.uint32)

    def drain(self, final: bool = False, limit: int | None = None) -> list[Event]:
        """The events published since the last drain (at most `limit`), oldest first. final: the
        process is gone; places reserved and never published are counted in `lost` and skipped."""
        if os.fstat(self.fd).st_size < self.size:
            raise InterceptorStateError(f"{self.path}: the file was truncated under its reader")
        tail = self.tail
        # a head more than the ring past the tail is no writer's (they reserve at most cap places ahead):
        # a scribbled file must not make the final drain count lost places for ever
        end = min(self.head(), tail + self.cap if limit is None else tail + min(limit, self.cap))
        out: list[Event] = []
        i = tail
        while i < end:
            n = min(end - i, CHUNK, self.cap - (i & self.mask))   # a piece that does not wrap
            ok = self._stamps_ok(i, n)
            take = n if final or ok.all() else int(np.argmin(ok))   # the published run from i
            published = int(ok[:take].sum())
            if published:
                # the bytes read again after their stamps: no event is read while its writer fills it
                chunk = self.pread(take * EVENT_SIZE, self.events + (i & self.mask) * EVENT_SIZE)
                if published == take:
                    out.extend(Event._make(e[1:9] + e[10:]) for e in EVENT.iter_unpack(chunk))
                else:     # final: the others were reserved and never published (the process is gone)
                    for k in np.flatnonzero(ok[:take]):
                        e = EVENT.unpack_from(chunk, int(k) * EVENT_SIZE)
                        out.append(Event._make(e[1:9] + e[10:]))
            self.lost += take - published
            i += take
            if take < n:
                break
        if i != tail:
            os.pwrite(self.fd, U64.pack(i), self.ring + TAIL_OFF)
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
