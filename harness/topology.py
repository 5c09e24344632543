"""Topologies: nodes (hosts and routers), links, addresses and static routes.

A topology file (topologies/<name>.yaml) names nodes and links; addresses and routes are derived
here so that every backend builds the same network: link k gets 10.0.<k+1>.0/24, endpoint `a`
takes .1 and endpoint `b` .2; routers forward, and their routes follow shortest paths (networkx).
Hosts have exactly one link and a default route through the router at its other end.

A link between two routers may be a bundle of `paths: N` parallel links (ECMP, topologies/ecmp.yaml):
it stands for N links, each shaped alike, listed in its place (link k, k+1, ..., their `path` 0..N-1),
and a destination reached over the bundle gets a multipath route with one next hop per link; so does
a destination with several shortest paths through different routers (a fat-tree). The
routers hash connections onto the next hops by their 5-tuple (fib_multipath_hash_policy=3 with the
5-tuple's fields, set by the backend), so a connection keeps its path and two connections may or may not share one.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.units import Duration, Rate
from harness.yamlload import YamlDoc

NODE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
IFNAMSIZ = 15  # usable characters of a Linux interface name
# Packets a bandwidth-limited link queues at each end, as Emulab's delay nodes do by default (a
# DropTail queue of 50 packets: Emulab's "Link Shaping"/"Queues" documentation, ns-2's limit_).
# docs/link-model.md explains why this, and not Linux's 1000-slot default, is the right model.
DEFAULT_QUEUE_PACKETS = 50
MAX_PATHS = 8


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


IFNAME = r"^[A-Za-z0-9_.:@-]{1,15}$"


class SshSettings(_Strict):
    """SSH backend only: where a logical node lives (docs/ssh-backend.md)."""

    host: str = Field(min_length=1, description="address or DNS name the runner connects to")
    port: int | None = Field(default=None, ge=1, le=65535)
    user: str | None = None
    key: str | None = Field(default=None, description="private key file (default: the agent, ~/.ssh/id_*)")
    # Data-plane interface names on the node, one per link of the node in the order the links are
    # listed. Omitted: each link's interface is the one holding the address nestlab derives for it
    # (what `nestlab export` asks Emulab and CloudLab to assign).
    interfaces: list[Annotated[str, Field(pattern=IFNAME)]] | None = None


class SshDefaults(_Strict):
    """SSH backend only: settings shared by every node of the topology."""

    user: str | None = None
    key: str | None = None
    port: int = Field(default=22, ge=1, le=65535)
    known_hosts: str | None = Field(default=None, description="default: ~/.ssh/known_hosts")
    connect_timeout: Duration = 10.0
    python: str = Field(default="python3", pattern=r"^[A-Za-z0-9_./+-]+$")
    workdir: str = Field(default="/tmp", pattern=r"^/[A-Za-z0-9_./+-]*$",
                         description="scratch directories of a run are made under it on each node")
    install: bool = Field(default=True, description="apt-get install missing programs on the nodes")
    sudo: bool | None = Field(default=None, description="prefix commands with sudo -n (default: unless root)")


class NodeSpec(_Strict):
    router: bool = False
    site: int | None = None
    description: str = ""
    ssh: SshSettings | None = None   # SSH backend only (ignored by Mininet)


class LinkSpec(_Strict):
    a: str
    b: str
    bw: Rate | None = Field(default=None, description="bandwidth limit, shaped with HTB")
    delay: Duration | None = None
    loss: float | None = Field(default=None, ge=0, le=100, description="loss in percent")
    queue: int | None = Field(default=None, ge=1, le=100_000,
                              description="packets queued at each end of a bandwidth-limited link "
                                          f"(default {DEFAULT_QUEUE_PACKETS}, as on Emulab)")
    paths: int = Field(default=1, ge=1, le=MAX_PATHS,
                       description="parallel links between two routers (ECMP), each as this one")
    path: int | None = Field(default=None, ge=0, description="which link of a bundle this is (set by nestlab)")

    @model_validator(mode="after")
    def _queue_needs_bw(self):
        if self.queue is not None and not self.bw:
            raise ValueError("queue applies to a bandwidth-limited link (give bw as well): without a "
                             "rate limit nothing queues on the link")
        return self

    @property
    def queue_packets(self) -> int | None:
        """The leaf queue of the link's shaping (packets), None when the link is not shaped."""
        return (self.queue or DEFAULT_QUEUE_PACKETS) if self.bw else None


class TopologySpec(_Strict):
    name: str
    description: str = ""
    ssh: SshDefaults | None = None   # SSH backend only
    nodes: dict[str, NodeSpec]
    links: list[LinkSpec]


@dataclass(frozen=True)
class Interface:
    node: str
    name: str          # e.g. site1n1-eth0 (Mininet naming: node-eth<k>)
    address: str       # 10.0.1.1
    prefixlen: int
    peer: str          # node at the other end
    peer_address: str
    link: int          # index into the topology's links


def expand_paths(spec: TopologySpec) -> TopologySpec:
    """The spec with every bundle of `paths: N` written as its N links (path 0..N-1), in place."""
    if all(lk.paths == 1 for lk in spec.links):
        return spec
    links = []
    for lk in spec.links:
        if lk.paths == 1:
            links.append(lk)
        else:
            links += [lk.model_copy(update={"paths": 1, "path": k}) for k in range(lk.paths)]
    return spec.model_copy(update={"links": links})


class Topology:
    """A validated topology with derived addressing and routes."""

    def __init__(self, spec: TopologySpec, source: Path | None = None):
        spec = expand_paths(spec)
        self.spec, self.source = spec, source
        self.interfaces: dict[str, list[Interface]] = {n: [] for n in spec.nodes}
        for k, link in enumerate(spec.links):
            net = ipaddress.ip_network(f"10.0.{k + 1}.0/24")
            ia, ib = str(net.network_address + 1), str(net.network_address + 2)
            for node, addr, peer, peer_addr in ((link.a, ia, link.b, ib), (link.b, ib, link.a, ia)):
                name = f"{node}-eth{len(self.interfaces[node])}"
                self.interfaces[node].append(Interface(node, name, addr, 24, peer, peer_addr, k))
        self.graph = nx.Graph()
        self.graph.add_nodes_from(spec.nodes)
        self.graph.add_edges_from((link.a, link.b) for link in spec.links)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def backend(self) -> str:
        """'ssh' when the nodes say where they live (every node has `ssh:`), else 'mininet'."""
        return "ssh" if any(n.ssh for n in self.spec.nodes.values()) else "mininet"

    def is_router(self, node: str) -> bool:
        return self.spec.nodes[node].router

    @property
    def hosts(self) -> list[str]:
        return [n for n, s in self.spec.nodes.items() if not s.router]

    @property
    def routers(self) -> list[str]:
        return [n for n, s in self.spec.nodes.items() if s.router]

    def address(self, node: str) -> str:
        """A node's main address (a host's only interface; a router's first)."""
        return self.interfaces[node][0].address

    def gateway(self, host: str) -> str:
        return self.interfaces[host][0].peer_address

    def routes(self, router: str) -> list[tuple[str, list[str]]]:
        """(destination subnet, next-hop addresses) for every subnet not directly attached to `router`:
        one next hop per link toward every neighbour on a shortest path to it (several: ECMP, over a
        bundle of parallel links or through different routers, as in a fat-tree)."""
        attached = {i.link for i in self.interfaces[router]}
        dist = self._distances()
        out = []
        for k, link in enumerate(self.spec.links):
            if k in attached:
                continue
            # Route toward the nearer endpoint of the link; the next hops are the neighbours one closer.
            mine = dist[router]
            target = min((link.a, link.b), key=lambda n: mine.get(n, 10**6))
            if target not in mine or mine[target] < 1:
                continue
            nearer = {n for n in self.graph[router] if dist[n].get(target, 10**6) == mine[target] - 1}
            vias = [i.peer_address for i in self.interfaces[router] if i.peer in nearer]
            out.append((f"10.0.{k + 1}.0/24", vias))
        return out

    def _distances(self) -> dict[str, dict[str, int]]:
        if not hasattr(self, "_dist"):
            self._dist = dict(nx.all_pairs_shortest_path_length(self.graph))
        return self._dist

    def bundle(self, router: str) -> list[Interface]:
        """`router`'s interfaces on its bundle of parallel links, by path (empty: it has none)."""
        links = self.spec.links
        return sorted((i for i in self.interfaces[router] if links[i.link].path is not None),
                      key=lambda i: links[i.link].path)

    @property
    def multipath(self) -> bool:
        return any(lk.path is not None for lk in self.spec.links)


def topology_errors(doc: YamlDoc, spec: TopologySpec):
    """Structural checks pydantic cannot do: unknown nodes, hosts with several links, disconnection."""
    degree = {n: 0 for n in spec.nodes}
    for lk in spec.links:
        for end in (lk.a, lk.b):
            degree[end] = degree.get(end, 0) + lk.paths
    for n in spec.nodes:
        # Names become interface names (<node>-eth<k>, at most 15 characters on Linux) and appear
        # in commands on the nodes: letters, digits and '_' only.
        longest = f"{n}-eth{max(degree[n] - 1, 0)}"
        if not NODE_NAME.fullmatch(n) or len(longest) > IFNAMSIZ:
            raise doc.error(("nodes", n), f"node name {n!r}: letters, digits and '_', starting with a letter, "
                            f"and short enough that {longest!r} fits in {IFNAMSIZ} characters")
    degree = {n: 0 for n in spec.nodes}
    for k, link in enumerate(spec.links):
        for end in ("a", "b"):
            node = getattr(link, end)
            if node not in spec.nodes:
                raise doc.error(("links", k, end), f"unknown node {node!r} (nodes: {', '.join(spec.nodes)})")
            degree[node] += link.paths
        if link.a == link.b:
            raise doc.error(("links", k), "a link needs two different nodes")
        if link.paths > 1 and not (spec.nodes[link.a].router and spec.nodes[link.b].router):
            raise doc.error(("links", k, "paths"), "parallel links (paths > 1) join two routers; a host has "
                            "exactly one link")
        if link.path is not None and link.paths > 1:
            raise doc.error(("links", k, "path"), "'path' is set by nestlab for each link of a bundle; "
                            "give 'paths: N' alone")
    pairs = [frozenset((lk.a, lk.b)) for lk in spec.links if lk.paths > 1]
    for router in {n for pair in pairs for n in pair}:
        if sum(router in pair for pair in pairs) > 1:
            raise doc.error(("links",), f"{router!r} has more than one bundle of parallel links; "
                            "nestlab supports one per router")
    for n, node in spec.nodes.items():
        if not node.router and degree[n] != 1:
            raise doc.error(("nodes", n), f"host {n!r} has {degree[n]} links; a host needs exactly one "
                            "(make it a router with 'router: true' to forward between several)")
    ssh_errors(doc, spec, degree)
    g = nx.Graph(list((lk.a, lk.b) for lk in spec.links))
    g.add_nodes_from(spec.nodes)
    if not nx.is_connected(g):
        parts = [sorted(c) for c in nx.connected_components(g)]
        raise doc.error(("links",), f"topology is not connected: {parts}")


def ssh_errors(doc: YamlDoc, spec: TopologySpec, degree: dict[str, int]) -> None:
    """An SSH topology places every node, and names one interface per link of the node."""
    placed = [n for n, node in spec.nodes.items() if node.ssh]
    if not placed:
        if spec.ssh is not None:
            raise doc.error(("ssh",), "an 'ssh:' section needs 'ssh: {host: ...}' on every node")
        return
    for n, node in spec.nodes.items():
        if node.ssh is None:
            raise doc.error(("nodes", n), f"node {n!r} has no 'ssh: {{host: ...}}' while {placed[0]!r} has: "
                            "an SSH topology places every node")
        names = node.ssh.interfaces
        if names is not None:
            if len(names) != degree[n]:
                raise doc.error(("nodes", n, "ssh", "interfaces"),
                                f"{n!r} has {degree[n]} link(s), so 'interfaces' needs {degree[n]} name(s) "
                                f"(one per link, in the order of 'links'), got {len(names)}")
            if len(set(names)) != len(names):
                raise doc.error(("nodes", n, "ssh", "interfaces"), f"interface names repeat: {names}")


def load_topology(path: Path | str) -> Topology:
    doc = YamlDoc(path)
    spec = doc.parse(TopologySpec)
    topology_errors(doc, spec)
    topo = Topology(spec, Path(path))
    topo.doc = doc  # kept so later checks (e.g. refused delay/loss) can point at the line
    return topo
