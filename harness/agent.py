"""The node agent: host-local operations the runner needs done where a process runs.

    python3 -m harness.agent conns PID              established TCP connections of PID (JSON list)
    python3 -m harness.agent pause SHM_DIR PID      interceptor pause handshake (JSON PauseState)
    python3 -m harness.agent resume SHM_DIR PID     interceptor resume handshake (JSON PauseState)
    python3 -m harness.agent initdb DB              create run.db with its schema (rundir.db)
    python3 -m harness.agent count DB               snapshots recorded so far (JSON int)
    python3 -m harness.agent checkpoint DB          fold the WAL into DB (after the collector stopped)
    python3 -m harness.agent observed SHM_DIR PIDS  those of PIDS (comma-separated) the collector sees as apps
    python3 -m harness.agent delay SHM_DIR S MODE   the reply delay of every live process in SHM_DIR (its pids)
    python3 -m harness.agent undeferred SHM_DIR     sends the interceptor could not defer, over SHM_DIR

Each prints one JSON document on stdout; an error prints {"error": "..."} and exits 1. The runner calls
it through node.run([...]), on a testbed node over SSH. The Mininet backend calls the same functions
in-process instead (every Mininet host shares this machine's /proc), which is faster; the agent works
there too, through mnexec. It needs only the Python standard library and this package, so that the
monitored node needs nothing else (the collector also needs pyroute2, which the SSH backend ships).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path


def tcp_connections(pid: int) -> list[dict]:
    """Established TCP connections held by process `pid`, read from its own /proc view (its netns).

    Each: {'inode', 'src', 'sport', 'dst', 'dport'}. IPv4 only (the topologies are IPv4)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(int(link[8:-1]))
        lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return []
    out = []
    for line in lines:
        f = line.split()
        if f[3] != "01" or int(f[9]) not in inodes:   # 01 = ESTABLISHED
            continue
        (src, sport), (dst, dport) = (_hexaddr(x) for x in (f[1], f[2]))
        out.append({"inode": int(f[9]), "src": src, "sport": sport, "dst": dst, "dport": dport})
    return sorted(out, key=lambda c: c["inode"])


def _hexaddr(s: str) -> tuple[str, int]:
    addr, port = s.split(":")
    return ".".join(str(b) for b in reversed(bytes.fromhex(addr))), int(port, 16)


def _pause(shm_dir: str, pid: str, pause: bool) -> dict:
    from harness.interceptor.pause import pause_process, resume_process

    state = (pause_process if pause else resume_process)(shm_dir, int(pid))
    return dataclasses.asdict(state)


def application_pids(shm_dir: str, pids: list[int]) -> list[int]:
    """Those of `pids` that the collector records as application modules: a process under the
    interceptor (a counter file in `shm_dir`) that has had a data socket (harness.collector.appsockets
    reports no other; a daemon's master that only listens is none). The tier faults' targets."""
    from harness.interceptor.shm import HF_HAD_GRAPH, read_process, shm_file

    out = []
    for pid in pids:
        try:
            snap = read_process(shm_file(shm_dir, pid))
        except (OSError, ValueError, RuntimeError):   # gone, or not (yet) a whole counter file
            continue
        if snap.flags & HF_HAD_GRAPH or any(s.is_module for s in snap.sockets):
            out.append(pid)
    return out


def _pids(text: str) -> list[int]:
    return [int(p) for p in text.split(",") if p]


def _delay(shm_dir: str, seconds: str, mode: str) -> list[int]:
    from harness.interceptor.delay import set_host_delay

    return set_host_delay(shm_dir, float(seconds), int(mode))


def _undeferred(shm_dir: str) -> int:
    from harness.interceptor.delay import host_undeferred

    return host_undeferred(shm_dir)


def _initdb(db: str) -> bool:
    from rundir.db import create_db

    create_db(db).close()
    return True


def _count(db: str) -> int:
    from rundir.db import snapshot_count

    return snapshot_count(db)


def _checkpoint(db: str) -> bool:
    from rundir.db import checkpoint

    checkpoint(db)
    return True


COMMANDS = {
    "conns": (1, lambda pid: tcp_connections(int(pid))),
    "pause": (2, lambda shm, pid: _pause(shm, pid, True)),
    "resume": (2, lambda shm, pid: _pause(shm, pid, False)),
    "initdb": (1, _initdb),
    "count": (1, _count),
    "checkpoint": (1, _checkpoint),
    "observed": (2, lambda shm, pids: application_pids(shm, _pids(pids))),
    "delay": (3, _delay),
    "undeferred": (1, _undeferred),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS or len(argv) - 1 != COMMANDS[argv[0]][0]:
        print(json.dumps({"error": f"usage: python3 -m harness.agent {{{'|'.join(COMMANDS)}}} ARGS..."}))
        return 2
    try:
        result = COMMANDS[argv[0]][1](*argv[1:])
    except Exception as e:  # noqa: BLE001 - reported to the runner as one JSON line
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
