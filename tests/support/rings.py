"""Crafted interceptor files with a message ring (the layout of nestintercept.h, as
harness.interceptor.ring reads it), for the drainer's hostile-input tests and bench/: any pid in the
header, any capacity, any events, published or not."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from harness.interceptor import ring as R
from harness.interceptor.shm import HDR, HEADER_SIZE, MAGIC, SLOT_SIZE, VERSION


def header(pid: int, cap: int, starttime: int = 0, off: int = HEADER_SIZE, cmdline: bytes = b"crafted\0") -> bytes:
    head = bytearray(HEADER_SIZE)
    HDR.pack_into(head, 0, MAGIC, VERSION, HEADER_SIZE, SLOT_SIZE, 0, pid, 1, starttime, *([0] * 17))
    R.TRACE.pack_into(head, R.TRACE_OFF, cap, R.EVENT_SIZE, off)
    head[512:516] = len(cmdline).to_bytes(4, "little")
    head[520:520 + len(cmdline)] = cmdline
    return bytes(head)


def event(index: int, tid: int = 7, fd: int = 5, nbytes: int = 100, call: int = 18,
          raddr: str = "10.0.0.2", rport: int = 80, published: bool = True) -> bytes:
    return R.EVENT.pack((index + 1) & 0xffffffff if published else 0, tid, 1_000_000 + index, fd, nbytes, call,
                        socket.AF_INET, 40000, rport, 0, socket.inet_aton("10.0.0.1") + bytes(12),
                        socket.inet_aton(raddr) + bytes(12))


def write_ring(path: str | os.PathLike, pid: int, cap: int, events: list[bytes] = (), head: int | None = None,
               tail: int = 0, size: int | None = None, **kw) -> Path:
    """An interceptor file at path: header, ring header (head: len(events) unless given) and `events`
    from place `tail`; `size` (default: exactly the ring's) is set with truncate (sparse)."""
    path = Path(path)
    off = kw.get("off", HEADER_SIZE)
    with open(path, "wb") as f:
        f.write(header(pid, cap, **kw))
        f.truncate(size if size is not None else off + R.RING_SIZE + cap * R.EVENT_SIZE)
        ring = bytearray(R.RING_SIZE)
        R.U64.pack_into(ring, R.HEAD_OFF, tail + len(events) if head is None else head)
        R.U64.pack_into(ring, R.TAIL_OFF, tail)
        f.seek(off)
        f.write(ring)
        events = list(events)[-cap:] if events else []
        first = tail + max(0, len(events) - cap) if events else tail
        split = min(len(events), cap - first % cap)    # up to the ring's end, then from its start
        for at, part in ((first % cap, events[:split]), (0, events[split:])):
            if part:
                f.seek(off + R.RING_SIZE + at * R.EVENT_SIZE)
                f.write(b"".join(part))
    return path
