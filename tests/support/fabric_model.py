"""A model of the fat-tree's routers for tests of the fabric's pure logic: each router hashes a
5-tuple with its own seed onto its route's next hops (the kernel's hash is another; the logic of
the hop-by-hop walk, the votes and the solve does not depend on which)."""

from __future__ import annotations

import hashlib
import ipaddress
from pathlib import Path

from harness.fabric import Flow, hash_seeds, pods, walk
from harness.topology import load_topology

TOPOLOGIES = Path(__file__).resolve().parent.parent.parent / "topologies"


def fattree():
    return load_topology(TOPOLOGIES / "fattree.yaml")


def model_lookup(topo, seeds):
    def lookup(router, flow, ingress):
        for dst, vias in topo.routes(router):
            if ipaddress.ip_address(flow.dst) in ipaddress.ip_network(dst):
                key = f"{seeds.get(router, 0)}|{flow.src}|{flow.sport}|{flow.dst}|{flow.dport}".encode()
                via = vias[int(hashlib.sha256(key).hexdigest(), 16) % len(vias)]
                return next(i.name for i in topo.interfaces[router] if i.peer_address == via)
        return next((i.name for i in topo.interfaces[router]
                     if ipaddress.ip_address(flow.dst) in ipaddress.ip_interface(f"{i.address}/24").network), "")
    return lookup


def seeded_walk(topo):
    lookup = model_lookup(topo, hash_seeds(topo))
    return lambda flow: walk(topo, flow, lookup)


def probe_paths(topo):
    """One probe path per host and host of another pod: (forward links, reverse links)."""
    route, pod = seeded_walk(topo), pods(topo)
    out = []
    for h in topo.hosts:
        for d in topo.hosts:
            if pod[h] != pod[d]:
                f = Flow(topo.address(h), 61000, topo.address(d), 9)
                out.append((route(f), route(f.reverse())))
    return out


def mesh_connections(topo, flows, rng, reverse=False):
    """`flows` connections per host to random hosts of other pods: key -> forward path (with
    `reverse`, also the reverse path: (forward, reverse))."""
    route, pod = seeded_walk(topo), pods(topo)
    out = {}
    for h in topo.hosts:
        for j in range(flows):
            d = rng.choice([x for x in topo.hosts if pod[x] != pod[h]])
            f = Flow(topo.address(h), 40000 + j, topo.address(d), 5001)
            key = f"{f.src}:{f.sport}>{f.dst}:{f.dport}"
            out[key] = (route(f), route(f.reverse())) if reverse else route(f)
    return out
