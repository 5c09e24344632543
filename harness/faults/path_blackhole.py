"""path_blackhole: every packet crossing one link of a router's bundle of parallel links (ECMP) is
dropped, on that router (`at`), in both directions: forwarded out of the link's interface or in
from it. A gray failure of one path: the connections the routers hash onto it die, the others go on.

Its targets are the monitored host's connections that cross the link in either direction, as the
routers' own route lookups for their 5-tuples say at injection (`ip route get ... ipproto tcp sport
dport`: the routers hash the 5-tuple): the forward direction at `at`, the
reverse at the router at the bundle's other end. One faults row per target connection, all sharing
the one rule; a blackhole that no monitored connection crosses is one row without a target module
(nothing on the host is at fault, and its window is not quiet time). A connection opened while the
blackhole is in force is not a target (docs/faults.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import networkx as nx
from pydantic import Field

from harness.faults.base import Part, target_json
from harness.faults.iptables import Rule, _Drop, check_connection, connection_key, path_rule
from harness.faults.spec import FaultSpec, Footprint, Loc, SpecView, monitor_host
from harness.routing import bundle_interfaces, path_of
from rundir.faultkinds import FaultKindInfo

if TYPE_CHECKING:
    from harness.topology import Interface, Topology
    from harness.window import Window

INFO = FaultKindInfo("path_blackhole", colour="#9e9ac8", order=2)


class PathBlackholeSpec(FaultSpec):
    at: str | None = Field(default=None, description="router that drops (network faults)")
    path: int | None = Field(default=None, ge=0, description="path_blackhole: which link of `at`'s bundle (0, 1, ...)")

    def check(self) -> None:
        if self.at is None:
            raise ValueError("path_blackhole needs 'at': the router that drops the packets")
        if self.path is None:
            raise ValueError("path_blackhole needs 'path: K' (which parallel link)")
        if getattr(self, "target", None) is not None:
            raise ValueError("path_blackhole has no 'target': its targets are the connections routed over the path")

    def check_against(self, spec: SpecView, topology: Topology) -> tuple[Loc, str] | None:
        if self.at not in topology.spec.nodes:
            return None   # the common check names the unknown node
        bundle = topology.bundle(self.at) if topology.is_router(self.at) else []
        if not bundle:
            return ("at",), (f"{self.at!r} has no parallel links (a bundle, 'paths: N' in the topology) for "
                             "path_blackhole; try topology ecmp")
        if self.path >= len(bundle):
            return ("path",), f"{self.at!r} has {len(bundle)} parallel links: path is 0 to {len(bundle) - 1}"
        return None

    def footprint(self, spec: SpecView) -> Footprint:
        """Any workload may be stalled: which ones the routers' hash decides."""
        return Footprint(frozenset(), frozenset((i, None) for i in range(len(spec.workloads))))

    def same_action(self, other: FaultSpec) -> bool:
        return self.at == other.at and self.path == other.path


@dataclass
class SharedRule:
    """The rule behind every row of one blackhole: deleted once, at the first heal."""

    rule: Rule
    healed: float | None = None


def _toward(topo: Topology, interfaces: list[Interface], router: str, host: str) -> Interface:
    """Of `router`'s interfaces, the one on its shortest path toward `host` (a packet from `host`
    comes in by it)."""
    nxt = nx.shortest_path(topo.graph, router, host)[1]
    return next(i for i in interfaces if i.peer == nxt)


class PathBlackhole(_Drop):
    info = INFO
    spec = PathBlackholeSpec

    def inject(self, window: Window, first_id: int) -> list[Part]:
        env = self.env
        f = env.spec.faults[window.spec_index]
        topo = env.backend.topology
        # The node's own interface names (a testbed's differ from the derived ones).
        link = bundle_interfaces(topo, {f.at: env.backend.interfaces(f.at)}, f.at)[f.path]
        crossing = self.crossing(f, link)
        rule = path_rule(f.at, f"nestlab:{env.run_id}:f{first_id}", link.name)
        start = env.clocks.from_node(f.at, self.chains.firewalls[f.at].insert(rule))
        shared, rule_text = SharedRule(rule), self.describe(rule)
        where = dict(at=f.at, path=f.path, interface=link.name)
        if not crossing:
            target = target_json(description=f"path {f.path} of {f.at} ({link.name}): no connection of "
                                             f"{monitor_host(env.spec)} crosses it", module_key=None, **where)
            return [Part(target, rule_text, start, shared)]
        return [Part(target_json(description=f"tcp {c['src']}:{c['sport']}>{c['dst']}:{c['dport']} over path "
                                             f"{f.path} of {f.at} ({ways})", workload=wl, pid=pid, ways=ways,
                                 module_key=connection_key(c),
                                 **where, **c), rule_text, start, shared)
                for c, pid, wl, ways in crossing]

    def crossing(self, f: FaultSpec, link: Interface) -> list[tuple[dict, int, int, str]]:
        """(connection, pid, workload, 'forward'/'reverse'/'both') of the monitored host's
        connections routed over `link` (`at`'s end of one bundle link) in either direction."""
        env = self.env
        topo = env.backend.topology
        monitor = monitor_host(env.spec)
        far = env.backend.node(link.peer)
        near = env.backend.node(f.at)
        far_interfaces = env.backend.interfaces(link.peer)
        far_end = next(i for i in far_interfaces if i.link == link.link)
        ingress = _toward(topo, env.backend.interfaces(f.at), f.at, monitor).name
        out = []
        for wl, w in enumerate(env.spec.workloads):
            if w.host != monitor:
                continue
            server = env.backend.address(w.server)
            back = _toward(topo, far_interfaces, link.peer, w.server).name
            for _, proc in env.workloads.live(wl):
                for c in env.backend.tcp_connections(monitor, proc.pid):
                    c = check_connection(monitor, c)
                    if c["dst"] != server:
                        continue
                    fwd = path_of(near, c["dst"], c["src"], ingress, c["sport"], c["dport"]) == link.name
                    rev = path_of(far, c["src"], c["dst"], back, c["dport"], c["sport"]) == far_end.name
                    if fwd or rev:
                        out.append((c, proc.pid, wl, "both" if fwd and rev else "forward" if fwd else "reverse"))
        return out

    def heal(self, part: Part) -> float:
        shared: SharedRule = part.action
        if shared.healed is None:
            rule = shared.rule
            shared.healed = self.env.clocks.from_node(rule.node, self.chains.firewalls[rule.node].delete(rule))
        return shared.healed

    def describe(self, action) -> str:
        return (action.rule if isinstance(action, SharedRule) else action).describe()
