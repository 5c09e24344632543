"""Which process holds a socket: scan /proc/<pid>/fd for 'socket:[inode]' links.

Run only for sockets not seen before, and only over processes in the collector's own network
namespace (Mininet hosts share the pid namespace with the machine, so /proc shows everyone).
"""

from __future__ import annotations

import os


def _netns(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def socket_owners(inodes: list[int], netns: int | None = None) -> dict[int, dict]:
    """{inode: {'pid': pid, 'cmdline': '...'}} for the inodes found (the first holder wins), among the
    processes of network namespace `netns` (its inode; default: the collector's own)."""
    wanted = {f"socket:[{i}]": i for i in inodes}
    mine = _netns("self") if netns is None else netns
    found: dict[int, dict] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or _netns(entry.name) != mine:
            continue
        pid = int(entry.name)
        if pid == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            inode = wanted.get(target)
            if inode is not None and inode not in found:
                found[inode] = {"pid": pid, "fd": int(fd), "cmdline": _cmdline(pid)}
        if len(found) == len(wanted):
            break
    return found


def _cmdline(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
