"""The interceptor's reply delay (the delay fault at any tier, issue 33 item 5): a process's header
fields `reply_delay_ns` and `reply_delay_mode` (nestintercept.h), which the library reads before every
send. A send that starts a reply (on an accepted socket, after a receive there) is delayed that long:

- HOLD (a thread per connection, MariaDB): the sending thread sleeps before the call (call.c);
- DEFER (an event loop, nginx and memcached): the reply's bytes are queued and the call returns at
  once; the library's own thread sends them `reply_delay_ns` after the call, in order (defer.c), so
  the other connections of the program's thread are not held.

Set here, in the files of a host's interceptor directory, by the fault kind (harness/faults/delay.py);
`replies_delayed` counts the replies delayed, `replies_undeferred` the sends a deferral had no room for
(NESTLAB_DEFER_MAX_BYTES: sent at once, not delayed), `deferred_bytes` the bytes queued now and
`replies_dropped` the deferred sends never written (their socket closed or replaced under them, or its
peer gone: never written to another socket).
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from harness.interceptor.shm import HDR, MAGIC, SUFFIX, VERSION, InterceptorStateError, process_alive

DELAY_OFF = 208          # reply_delay_ns, replies_delayed, reply_delay_mode, pad, replies_undeferred, deferred_bytes
DELAY = struct.Struct("<QQ")
MODE_OFF = 224
DEFER_COUNTS = struct.Struct("<QQ")   # at 232: replies_undeferred, deferred_bytes
DROPPED_OFF = 248                     # replies_dropped
HOLD, DEFER = 0, 1


def set_reply_delay(path: str | os.PathLike, seconds: float, mode: int = HOLD) -> int:
    """Set one process's reply delay (0: none; `mode` HOLD or DEFER) and read it back; returns the
    nanoseconds in force. The mode is written first: the library reads the delay, then the mode."""
    if mode not in (HOLD, DEFER):
        raise ValueError(f"reply delay mode {mode!r}: HOLD (0) or DEFER (1)")
    ns = int(round(seconds * 1e9))
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        head = os.pread(fd, HDR.size, 0)
        if len(head) < HDR.size or HDR.unpack(head)[0] != MAGIC or HDR.unpack(head)[1] != VERSION:
            raise InterceptorStateError(f"{path}: not an interceptor file of format version {VERSION}")
        mm = mmap.mmap(fd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    try:
        if ns:
            struct.pack_into("<I", mm, MODE_OFF, mode)
        struct.pack_into("<Q", mm, DELAY_OFF, ns)
        got = DELAY.unpack_from(mm, DELAY_OFF)[0]
        got_mode = struct.unpack_from("<I", mm, MODE_OFF)[0]
    finally:
        mm.close()
    if got != ns or (ns and got_mode != mode):
        raise InterceptorStateError(f"{path}: reply delay reads {got} ns mode {got_mode}, not {ns} mode {mode}")
    return got


def replies_delayed(path: str | os.PathLike) -> int:
    with open(path, "rb") as f:
        f.seek(DELAY_OFF)
        return DELAY.unpack(f.read(DELAY.size))[1]


def defer_counts(path: str | os.PathLike) -> tuple[int, int]:
    """(replies_undeferred, deferred_bytes) of one process."""
    with open(path, "rb") as f:
        f.seek(MODE_OFF + 8)
        return DEFER_COUNTS.unpack(f.read(DEFER_COUNTS.size))


def replies_dropped(path: str | os.PathLike) -> int:
    """Deferred sends of one process that were never written (0 in files of earlier builds: padding)."""
    with open(path, "rb") as f:
        f.seek(DROPPED_OFF)
        return struct.unpack("<Q", f.read(8))[0]


def live_files(shm_dir: str | os.PathLike) -> dict[int, Path]:
    """pid -> file of the processes of a directory that are alive."""
    out = {}
    for p in Path(shm_dir).glob(f"*{SUFFIX}"):
        try:
            h = HDR.unpack(p.open("rb").read(HDR.size))
        except (OSError, struct.error):
            continue
        if h[0] == MAGIC and process_alive(h[5], h[7]):
            out[h[5]] = p
    return out


def host_undeferred(shm_dir: str | os.PathLike) -> int:
    """Sends the deferral had no room for, over the live processes of a host's directory."""
    total = 0
    for path in live_files(shm_dir).values():
        try:
            total += defer_counts(path)[0]
        except (OSError, struct.error):
            continue
    return total


def set_host_delay(shm_dir: str | os.PathLike, seconds: float, mode: int = HOLD) -> list[int]:
    """Set the reply delay of every live process in a host's interceptor directory; their pids."""
    done = []
    for pid, path in sorted(live_files(shm_dir).items()):
        try:
            set_reply_delay(path, seconds, mode)
        except FileNotFoundError:
            continue   # gone meanwhile
        done.append(pid)
    return done
