"""Topology up/down time: the Mininet backend (build incl. addressing, routes and the shaping
check; teardown) against a baseline measured in the same run: the same shape built with bare
`ip netns` + veth + addresses (no shaping, no checks).

    .venv/bin/python bench/bench_topology.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from pathlib import Path

from harness.backends.mininet import MininetBackend
from harness.topology import load_topology

REPO = Path(__file__).resolve().parent.parent


def sh(cmds: list[str]) -> None:
    subprocess.run(["sh", "-ec", "\n".join(cmds)], check=True, capture_output=True)


def bare(topo) -> tuple[float, float]:
    ns = {n: f"nlb-{n}" for n in topo.spec.nodes}
    t = time.perf_counter()
    cmds = [f"ip netns add {v}" for v in ns.values()]
    for k, link in enumerate(topo.spec.links):
        ia = next(i for i in topo.interfaces[link.a] if i.link == k)
        ib = next(i for i in topo.interfaces[link.b] if i.link == k)
        cmds.append(f"ip link add {ia.name} netns {ns[link.a]} type veth peer name {ib.name} netns {ns[link.b]}")
        for i in (ia, ib):
            cmds += [f"ip -n {ns[i.node]} addr add {i.address}/24 dev {i.name}", f"ip -n {ns[i.node]} link set {i.name} up"]
    sh(cmds)
    up = time.perf_counter() - t
    t = time.perf_counter()
    sh([f"ip netns del {v}" for v in ns.values()])
    return up, time.perf_counter() - t


def mininet(topo) -> tuple[float, float]:
    b = MininetBackend(topo)
    t = time.perf_counter()
    try:
        b.build()
        up = time.perf_counter() - t
    finally:
        t = time.perf_counter()
        b.teardown()
    return up, time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    topo = load_topology(REPO / "topologies" / "dumbbell.yaml")
    res = {"mininet": [], "bare": []}
    for _ in range(a.repeat):
        res["mininet"].append(mininet(topo))
        res["bare"].append(bare(topo))
    med = {k: (statistics.median(u for u, _ in v), statistics.median(d for _, d in v)) for k, v in res.items()}
    print(f"topology {topo.name}: {len(topo.spec.nodes)} nodes, {len(topo.spec.links)} links, {a.repeat} repeats (median)")
    for k, (up, down) in med.items():
        print(f"  {k:8s} up {up * 1000:7.1f} ms   down {down * 1000:7.1f} ms")
    print(f"  ratio mininet/bare: up {med['mininet'][0] / med['bare'][0]:.2f}x  down {med['mininet'][1] / med['bare'][1]:.2f}x")


if __name__ == "__main__":
    main()
