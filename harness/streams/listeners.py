"""What a process listens on, from /proc (no root, no `ss`): the TCP sockets in LISTEN state whose
inodes are among the process's open files. The streams cluster checks its JVMs with it: every port
on loopback (docs/streams.md, "A private cluster"), and the ports it gave them taken by them."""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

_LISTEN = "0A"


def _sockets(pid: int) -> set[int]:
    """Socket inodes among the open files of `pid` (empty when it is gone or not ours to read)."""
    out = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return out
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def _address(hex_addr: str, family: int) -> str:
    raw = bytes.fromhex(hex_addr)
    # /proc/net/tcp{,6} print each 32-bit word in host (little-endian) order
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, raw)


def listening(pid: int, netns_pid: int | None = None) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket `pid` listens on."""
    inodes = _sockets(pid)
    out = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            lines = Path(f"/proc/{netns_pid or pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == _LISTEN and int(f[9]) in inodes:
                addr, port = f[1].split(":")
                out.add((_address(addr, family), int(port, 16)))
    return out


def exposed(addresses: set[tuple[str, int]]) -> list[tuple[str, int]]:
    """Those of `addresses` that are not loopback (reachable from the network)."""
    return sorted(a for a in addresses if not ipaddress.ip_address(a[0]).is_loopback
                  and not (ipaddress.ip_address(a[0]).version == 6
                           and (ipaddress.ip_address(a[0]).ipv4_mapped or ipaddress.ip_address("::")).is_loopback))
