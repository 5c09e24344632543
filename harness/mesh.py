"""The mesh workload (`kind: mesh`, issue 44): each member host keeps `flows` long-lived TCP
connections of `rate` each to hosts of other pods, chosen with the repetition's seed.

Every connection is one `iperf -c` (iperf 2) sending `rate` as isochronous frames of `FRAME_BYTES`
(`--isochronous=FPS:RATE,0`, one write a frame): an application-limited sender, which writes at that
pace instead of filling the path, so that a lossy link is seen as retransmissions of connections that
keep running, not as congestion. Not `-b rate`: iperf 2.1.8 paces `-b` with ~8,000 short
clock_nanosleeps a second, 22% of a core per 1 Mbit/s connection here (0.9 s of CPU in 4 s), so 64 of
them saturated both cores, delayed the routers' softirqs and made healthy connections retransmit;
an isochronous sender sleeps once a frame (no measurable CPU). Every destination runs
`iperf -s`. A host's pod is its `site` in the topology (topologies/fattree.yaml). The pairs are a
pure function of the members, their pods, `flows` and the seed (`pairs`), so a run can be repeated
and the analysis can tell which connections were planned.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from rundir.facts import IPERF_PORT

if TYPE_CHECKING:
    from harness.topology import Topology

FRAME_BYTES = 16384   # a frame, written at once: small frames keep a rate-limited sender smooth


def members(w, topo: Topology) -> list[str]:
    """The mesh's hosts: those listed, or every host of the topology."""
    return list(w.members) if w.members else list(topo.hosts)


def mesh_error(w, topo: Topology) -> tuple[tuple, str] | None:
    """(field under the workload, message) for a mesh that cannot be made on `topo`, else None."""
    for k, h in enumerate(w.members or ()):
        if h not in topo.spec.nodes or topo.is_router(h):
            return ("members", k), f"{h!r} is not a host of topology {topo.name} (hosts: {', '.join(topo.hosts)})"
    hosts = members(w, topo)
    pod = {h: topo.spec.nodes[h].site for h in hosts}
    if any(p is None for p in pod.values()):
        h = next(h for h, p in pod.items() if p is None)
        return ("members",), f"host {h!r} has no pod ('site' in the topology); a mesh connects hosts of other pods"
    if len(set(pod.values())) < 2:
        return ("members",), f"a mesh needs hosts in at least two pods; these are all in pod {next(iter(pod.values()))}"
    return None


def pairs(hosts: list[str], pod: dict[str, int], flows: int, seed: int, workload: int = 0) -> list[tuple[str, str]]:
    """(client, server) of every connection: `flows` per host, each to a host of another pod drawn
    with a stream of its own (the seed and the workload's index), in the hosts' order."""
    rng = random.Random(f"mesh:{seed}:{workload}")
    out = []
    for h in hosts:
        others = [d for d in hosts if pod[d] != pod[h]]
        out += [(h, rng.choice(others)) for _ in range(flows)]
    return out


def client_argv(server_address: str, rate: float, seconds: int) -> list[str]:
    """One application-limited connection for `seconds` (the runner stops it at the end)."""
    fps = max(rate / (8 * FRAME_BYTES), 0.1)
    return ["iperf", "-c", server_address, "-p", str(IPERF_PORT), "-t", str(seconds),
            f"--isochronous={fps:.4g}:{int(rate)},0"]
