"""iperf throughput with and without the interceptor on the same path, in one run (target: ratio
>= 0.98). Two paths of the dumbbell: site1n1 -> site2n2 through the 100 Mbit/s bottleneck (the
experiments' path) and site1n1 -> site1n2 through x1 only (unshaped veths: CPU-bound, where a
per-call cost would show). Rounds alternate with/without so drift hits both alike; on a 2-core VM
the unshaped path varies by tens of percent from run to run, so read it with more rounds.

    .venv/bin/python bench/bench_iperf_interceptor.py [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from harness import interceptor
from harness.backends.mininet import MininetBackend
from harness.topology import load_topology

REPO = Path(__file__).resolve().parent.parent


def throughput(node, server_addr: str, seconds: float, env: dict | None, log: Path) -> float:
    """Mbit/s reported by `iperf -c -y C` (CSV: the last field is bits per second)."""
    proc = node.start(["iperf", "-c", server_addr, "-t", str(seconds), "-y", "C", "-l", "128K"], log, env=env)
    proc.handle.wait(seconds + 20)
    lines = [ln for ln in log.read_text().splitlines() if ln.count(",") >= 8]
    log.unlink()
    return float(lines[-1].split(",")[-1]) / 1e6


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    topo = load_topology(REPO / "topologies" / "dumbbell.yaml")
    backend = MininetBackend(topo)
    shm = interceptor.create_shm_dir(prefix="nestlab-bench-")
    tmp = Path(tempfile.mkdtemp(prefix="nestlab-bench-"))
    servers = []
    try:
        backend.build()
        env = interceptor.preload_env(shm, env={})
        client = backend.node("site1n1")
        print(f"iperf -c, {a.seconds:g} s x {a.rounds} rounds per case (median Mbit/s)")
        for label, server in (("bottleneck site1n1->site2n2", "site2n2"), ("unshaped   site1n1->site1n2", "site1n2")):
            addr = topo.address(server)
            srv = backend.node(server).start(["iperf", "-s", "-B", addr], tmp / f"srv-{server}.log")
            servers.append(srv)
            backend.node(server).run(["sh", "-c", "for i in $(seq 50); do ss -ltn | grep -q :5001 && exit 0; sleep 0.1; done"])
            res = {"without": [], "with": []}
            for _ in range(a.rounds):
                res["without"].append(throughput(client, addr, a.seconds, None, tmp / "c.log"))
                res["with"].append(throughput(client, addr, a.seconds, env, tmp / "c.log"))
            wo, wi = statistics.median(res["without"]), statistics.median(res["with"])
            print(f"  {label}: without {wo:8.1f}  with {wi:8.1f}  ratio {wi / wo:.3f}  (target >= 0.98)")
    finally:
        for srv in servers:
            backend.node(srv.node).stop(srv)
        backend.teardown()
        interceptor.remove_shm_dir(shm)
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()


if __name__ == "__main__":
    main()
