"""One collector recording several monitored hosts (harness/collector/hosts.py, issue 33 item 2): its
CPU per snapshot for 1, then all N hosts, in the same run over the same namespaces.

N network namespaces (bench-multihost-<pid>-k, made and removed here), in pairs joined by a veth,
each pair holding C established TCP connections with a trickle of traffic (a byte on each every
second). The real collector (harness.collector.main, --host NAME=PID for each host) records for
`--seconds` at `--interval`; CPU is the collector's own (run.db's meta collector_cpu_s), per snapshot.
The baseline is the same collector given one host: the ratio says what each further host costs.

    .venv/bin/python bench/bench_multihost.py [--hosts 6] [--conns 50] [--seconds 8] [--interval 0.1]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SERVER = ("import socket, time\ns = socket.create_server((__import__('sys').argv[1], 7000), backlog=1024)\n"
          "s.setblocking(False)\nconns = []\nwhile True:\n    try:\n        c, _ = s.accept(); c.setblocking(False); conns.append(c)\n"
          "    except BlockingIOError:\n        pass\n    for c in conns:\n        try:\n            c.recv(100)\n"
          "        except BlockingIOError:\n            pass\n    time.sleep(0.01)\n")
CLIENT = ("import socket, sys, time\nconns = [socket.create_connection((sys.argv[1], 7000)) for _ in range(int(sys.argv[2]))]\n"
          "while True:\n    for c in conns:\n        c.send(b'x')\n    time.sleep(1)\n")


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def collector_cpu(hosts: list[tuple[str, int]], seconds: float, interval: float, tmp: Path) -> tuple[float, int]:
    """(ms of collector CPU per snapshot, snapshots) recording `hosts` (name, pid)."""
    from rundir.db import create_db

    db = tmp / f"run-{len(hosts)}.db"
    create_db(db).close()
    argv = [sys.executable, "-m", "harness.collector.main", "--db", str(db), "--interval", str(interval)]
    for name, pid in hosts:
        argv += ["--host", f"{name}={pid}"]
    p = subprocess.Popen(argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    time.sleep(seconds)
    p.terminate()
    p.wait(timeout=20)
    conn = sqlite3.connect(db)
    snaps = conn.execute("SELECT count(*) FROM snapshots").fetchone()[0]
    cpu = float(conn.execute("SELECT value FROM meta WHERE key = 'collector_cpu_s'").fetchone()[0])
    conn.close()
    return 1000.0 * cpu / max(snaps, 1), snaps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=6, help="namespaces (an even number: in pairs)")
    ap.add_argument("--conns", type=int, default=50, help="connections per pair")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--interval", type=float, default=0.1)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)")
        return 2
    tag = f"bench-multihost-{os.getpid() % 100000}"
    names = [f"{tag}-{k}" for k in range(a.hosts - a.hosts % 2)]
    procs: list[subprocess.Popen] = []
    made: list[str] = []
    try:
        for k in range(0, len(names), 2):
            left, right = names[k], names[k + 1]
            for ns in (left, right):
                sh("ip", "netns", "add", ns)
                made.append(ns)
            la, ra = f"bmh{k}a", f"bmh{k}b"
            sh("ip", "link", "add", la, "netns", left, "type", "veth", "peer", "name", ra, "netns", right)
            for ns, dev, addr in ((left, la, f"10.79.{k}.1/24"), (right, ra, f"10.79.{k}.2/24")):
                sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
                sh("ip", "-n", ns, "link", "set", dev, "up")
            procs.append(subprocess.Popen(["ip", "netns", "exec", right, sys.executable, "-c", SERVER, f"10.79.{k}.2"]))
            time.sleep(0.3)
            procs.append(subprocess.Popen(["ip", "netns", "exec", left, sys.executable, "-c", CLIENT, f"10.79.{k}.2",
                                           str(a.conns)]))
        sleepers = []
        for ns in names:
            sleepers.append(subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "3600"]))
        procs += sleepers
        time.sleep(1.0)
        hosts = [(f"h{k}", p.pid) for k, p in enumerate(sleepers)]
        with tempfile.TemporaryDirectory() as tmp:
            one, n1 = collector_cpu(hosts[:1], a.seconds, a.interval, Path(tmp))
            many, nn = collector_cpu(hosts, a.seconds, a.interval, Path(tmp))
        print(f"collector CPU per snapshot at {a.interval * 1000:g} ms, {a.conns} connections per host:")
        print(f"  1 host : {one:7.2f} ms ({n1} snapshots; {one / a.interval / 10:5.1f}% of a core)")
        print(f"  {len(hosts)} hosts: {many:7.2f} ms ({nn} snapshots; {many / a.interval / 10:5.1f}% of a core)")
        print(f"  ratio {many / one:.2f} for {len(hosts)} hosts ({many / one / len(hosts):.2f} per host of the one-host cost)")
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
