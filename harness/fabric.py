"""A fabric's links and paths (issue 44, topologies/fattree.yaml): which link a spec names, what tier
a link joins, and the path a 5-tuple takes, hop by hop, as each router's own route lookup says.

Linux hashes a forwarded packet onto one of a multipath route's next hops with a seeded hash of the
5-tuple (fib_multipath_hash_policy 3, harness/routing.py). Every network namespace starts with the
same internal seed, so in a fat-tree an aggregation router would repeat its edge router's choice
(hash polarisation: half the aggregation-core links carry nothing). Each router of a fabric gets a
seed of its own (`hash_seeds`); the path of a connection is then only known by asking the routers,
which `trace` does in batches (one `ip -batch` per router and hop), for 007's votes and NetBouncer's
probe paths alike. `walk` is the hop-by-hop logic itself, on any lookup (tests give it a model).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.topology import Interface, Topology

SEED_SYSCTL = "/proc/sys/net/ipv4/fib_multipath_hash_seed"
TIER_NAMES = {0: "host", 1: "edge", 2: "aggregation", 3: "core"}
MAX_HOPS = 16


@dataclass(frozen=True)
class Flow:
    """One direction of a TCP connection: the packet src:sport > dst:dport."""

    src: str
    sport: int
    dst: str
    dport: int

    def reverse(self) -> Flow:
        return Flow(self.dst, self.dport, self.src, self.sport)


def is_fabric(topo: Topology) -> bool:
    """Some router has a multipath route whose next hops are different routers (not one bundle)."""
    for r in topo.routers:
        peers = {i.peer_address: i.peer for i in topo.interfaces[r]}
        if any(len({peers[v] for v in vias}) > 1 for _, vias in topo.routes(r)):
            return True
    return False


def hash_seeds(topo: Topology) -> dict[str, int]:
    """A multipath hash seed per router of a fabric (1, 2, ... in the topology's order; 0 would be
    the kernel's shared one); none for other topologies, which keep the kernel's default."""
    if not is_fabric(topo):
        return {}
    return {r: k + 1 for k, r in enumerate(topo.routers)}


def tiers(topo: Topology) -> dict[str, int]:
    """Each node's distance from the nearest host: 0 hosts, 1 edge, 2 aggregation, 3 core."""
    dist = topo._distances()
    return {n: min(dist[n].get(h, 10**6) for h in topo.hosts) for n in topo.spec.nodes}


def link_name(topo: Topology, k: int) -> str:
    link = topo.spec.links[k]
    return f"{link.a}-{link.b}"


def link_kind(topo: Topology, k: int) -> str:
    """'host-edge', 'edge-aggregation', 'aggregation-core' (by the ends' tiers, lower first)."""
    t = tiers(topo)
    link = topo.spec.links[k]
    lo, hi = sorted((t[link.a], t[link.b]))
    return f"{TIER_NAMES.get(lo, lo)}-{TIER_NAMES.get(hi, hi)}"


def find_link(topo: Topology, ends: Iterable[str]) -> int | None:
    """The index of the link joining two nodes (either order); None when there is none, or several
    (a bundle: name its path)."""
    a, b = ends
    found = [k for k, lk in enumerate(topo.spec.links) if {lk.a, lk.b} == {a, b}]
    return found[0] if len(found) == 1 else None


def pods(topo: Topology) -> dict[str, int | None]:
    """Each host's pod: its `site` in the topology (None: not given)."""
    return {h: topo.spec.nodes[h].site for h in topo.hosts}


# A router's answer for one packet: (router, flow, ingress interface name or None) -> egress name ('' none)
Lookup = Callable[[str, Flow, str | None], str]


def walk(topo: Topology, flow: Flow, lookup: Lookup, interfaces: dict[str, list[Interface]] | None = None
         ) -> list[int]:
    """The links (indices) a packet of `flow` crosses from its source host to its destination, asking
    each router on the way which interface it leaves by. A path that ends nowhere (no route, a loop)
    is returned as far as it got."""
    interfaces = interfaces or topo.interfaces
    by_addr = {i.address: i for ifs in interfaces.values() for i in ifs}
    start = by_addr.get(flow.src)
    if start is None:
        return []
    links, node, ingress = [start.link], start.peer, None
    ingress = next(i.name for i in interfaces[node] if i.link == start.link)
    for _ in range(MAX_HOPS):
        if any(i.address == flow.dst for i in interfaces[node]) or not topo.is_router(node):
            return links
        out = lookup(node, flow, ingress)
        intf = next((i for i in interfaces[node] if i.name == out), None)
        if intf is None:
            return links
        links.append(intf.link)
        node = intf.peer
        ingress = next(i.name for i in interfaces[node] if i.link == intf.link)
    return links


def lookup_line(flow: Flow, ingress: str | None) -> str:
    """One `ip -batch` line: the route a TCP packet of `flow` arriving on `ingress` takes."""
    iif = f" iif {ingress}" if ingress else ""
    return f"route get {flow.dst} from {flow.src}{iif} ipproto tcp sport {flow.sport} dport {flow.dport}"


def _devices(text: str, n: int) -> list[str]:
    """The egress device of each of `n` answers of `ip -j -batch` (one JSON array a line; '' where
    an answer is missing or unreadable)."""
    out = []
    for line in text.splitlines():
        try:
            routes = json.loads(line)
        except ValueError:
            continue
        dev = routes[0].get("dev", "") if isinstance(routes, list) and routes and isinstance(routes[0], dict) else ""
        out.append(dev if isinstance(dev, str) else "")
    return (out + [""] * n)[:n]


def trace(topo: Topology, nodes: dict, flows: list[Flow],
          interfaces: dict[str, list[Interface]] | None = None) -> dict[Flow, list[int]]:
    """Every flow's path (link indices), asking the routers hop by hop: at each hop one `ip -j
    -batch -` per router for all the flows standing there (`nodes`: name -> node with run(argv,
    input=...))."""
    interfaces = interfaces or topo.interfaces
    by_addr = {i.address: i for ifs in interfaces.values() for i in ifs}
    state: dict[Flow, tuple[str, str | None]] = {}
    paths: dict[Flow, list[int]] = {}
    for f in flows:
        start = by_addr.get(f.src)
        if start is None:
            paths[f] = []
            continue
        paths[f] = [start.link]
        node = start.peer
        state[f] = (node, next(i.name for i in interfaces[node] if i.link == start.link))
    for _ in range(MAX_HOPS):
        at: dict[str, list[Flow]] = {}
        for f, (node, _ingress) in list(state.items()):
            if not topo.is_router(node) or any(i.address == f.dst for i in interfaces[node]):
                del state[f]
            else:
                at.setdefault(node, []).append(f)
        if not at:
            break
        for router, fs in at.items():
            text = "".join(lookup_line(f, state[f][1]) + "\n" for f in fs)
            r = nodes[router].run(["ip", "-j", "-batch", "-"], check=False, input=text)
            for f, dev in zip(fs, _devices(r.stdout, len(fs)), strict=True):
                intf = next((i for i in interfaces[router] if i.name == dev), None)
                if intf is None:
                    del state[f]
                    continue
                paths[f].append(intf.link)
                nxt = intf.peer
                state[f] = (nxt, next(i.name for i in interfaces[nxt] if i.link == intf.link))
    return paths


def seed_script(topo: Topology, router: str) -> list[str]:
    """The shell line that gives `router` its hash seed (nothing outside a fabric, or on a kernel
    without the sysctl, Linux < 6.11: check_fabric then finds the links unevenly used)."""
    seed = hash_seeds(topo).get(router)
    if seed is None:
        return []
    return [f"if [ -e {SEED_SYSCTL} ]; then sysctl -qw net.ipv4.fib_multipath_hash_seed={seed}; fi"]


SPREAD_FLOWS = 16   # connections traced from each host to a host of every other pod


def check_fabric(topo: Topology, nodes: dict, fail: Callable[[str, str], Exception],
                 interfaces: dict[str, list[Interface]] | None = None) -> dict:
    """Every router-router link of the fabric carries some of SPREAD_FLOWS connections from each host
    to each other pod, in the routers' own lookups: the seeds did away with hash polarisation and
    every multipath route is in place. `interfaces`: the nodes' real ones (a testbed's; None: the
    derived ones). Returns what the manifest's `routing` records."""
    if not is_fabric(topo):
        return {}
    interfaces = interfaces or topo.interfaces
    seeds = hash_seeds(topo)
    for router, seed in seeds.items():
        raw = nodes[router].run(["cat", SEED_SYSCTL], check=False).stdout.strip()
        if raw != str(seed):
            raise fail(router, f"multipath hash seed {raw or 'unreadable'}, wanted {seed} (Linux >= 6.11 has "
                               "net.ipv4.fib_multipath_hash_seed; without it every router hashes alike)")
    pod = pods(topo)
    address = {h: interfaces[h][0].address for h in topo.hosts}
    flows = [Flow(address[h], 20000 + j, address[d], 5001)
             for h in topo.hosts for d in topo.hosts if pod[d] != pod[h] and pod[d] is not None
             for j in range(SPREAD_FLOWS // max(1, len({pod[x] for x in topo.hosts}) - 1))]
    used: dict[int, int] = {}
    for path in trace(topo, nodes, flows, interfaces).values():
        for k in path:
            used[k] = used.get(k, 0) + 1
    fabric = [k for k, lk in enumerate(topo.spec.links) if topo.is_router(lk.a) and topo.is_router(lk.b)]
    idle = [link_name(topo, k) for k in fabric if not used.get(k)]
    if idle:
        raise fail(topo.name, f"{len(flows)} traced connections never crossed {', '.join(idle)}: the routers "
                              "do not spread connections over every equal-cost path")
    counts = sorted(used.get(k, 0) for k in fabric)
    return {"hash_seeds": seeds, "traced_connections": len(flows),
            "crossings_per_link": {"min": counts[0], "max": counts[-1]}}
