"""The interceptor's reply delay (the delay fault at any tier, issue 33 item 5): a process's header
field `reply_delay_ns` (nestintercept.h), which the library reads before every send; a send that
starts a reply (on an accepted socket, after a receive there) is held that long. Set here, in the
files of a host's interceptor directory, by the fault kind (harness/faults/delay.py); `replies_delayed`
counts the replies held.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from harness.interceptor.shm import HDR, MAGIC, SUFFIX, VERSION, InterceptorStateError, process_alive

DELAY_OFF = 208          # reply_delay_ns, then replies_delayed
DELAY = struct.Struct("<QQ")


def set_reply_delay(path: str | os.PathLike, seconds: float) -> int:
    """Set one process's reply delay (0: none) and read it back; returns the nanoseconds in force."""
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
        struct.pack_into("<Q", mm, DELAY_OFF, ns)
        got = DELAY.unpack_from(mm, DELAY_OFF)[0]
    finally:
        mm.close()
    if got != ns:
        raise InterceptorStateError(f"{path}: reply delay reads {got} ns, not {ns}")
    return got


def replies_delayed(path: str | os.PathLike) -> int:
    with open(path, "rb") as f:
        f.seek(DELAY_OFF)
        return DELAY.unpack(f.read(DELAY.size))[1]


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


def set_host_delay(shm_dir: str | os.PathLike, seconds: float) -> list[int]:
    """Set the reply delay of every live process in a host's interceptor directory; their pids."""
    done = []
    for pid, path in sorted(live_files(shm_dir).items()):
        try:
            set_reply_delay(path, seconds)
        except FileNotFoundError:
            continue   # gone meanwhile
        done.append(pid)
    return done
