"""What the link faults share (issue 44): `loss` with `link: [A, B]` (a share of every packet crossing
that link) and `link_down` (every packet), both directions, dropped on one router end of the link.

Every packet crossing a link with a router at one end is forwarded by that router, out of or in from
its interface on the link: two rules in its NESTLAB chain (`-o IF` and `-i IF`, harness.faults.iptables)
catch both directions, with `-m statistic` for a share. The link model turns segmentation offloads off
on every interface, so a share is of wire packets (docs/environment notes: otherwise of GSO
aggregates). Routes do not change: as with a failed link that no routing protocol has noticed yet,
connections hashed onto it keep using it. The fault's row names its culprit link (`link`, its index and
its kind, e.g. edge-aggregation) and no module: the fabric diagnosers are scored per link.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.fabric import find_link, link_kind, link_name
from harness.faults.base import target_json
from harness.faults.iptables import Rule, UnsafeValue, _drop, _share
from harness.faults.spec import Footprint

if TYPE_CHECKING:
    from harness.faults.base import FaultEnv
    from harness.faults.spec import FaultSpec, Loc, SpecView
    from harness.topology import Topology


def link_error(fault: FaultSpec, topology: Topology) -> tuple[Loc, str] | None:
    """A `link` that is not one link of the topology, or with no router end; else None, and the
    fault's `at` set to the router end that drops (its `a` end when both are routers)."""
    a, b = fault.link
    for k, name in enumerate((a, b)):
        if name not in topology.spec.nodes:
            return ("link", k), f"unknown node {name!r} in topology {topology.name}"
    k = find_link(topology, (a, b))
    if k is None:
        return ("link",), f"[{a}, {b}] is not a link of topology {topology.name} (no single link joins them)"
    lk = topology.spec.links[k]
    routers = [n for n in (lk.a, lk.b) if topology.is_router(n)]
    if not routers:
        return ("link",), f"[{a}, {b}] joins two hosts; a link fault is injected on a router end"
    if fault.at is not None and fault.at not in routers:
        return ("at",), f"{fault.at!r} is not a router end of the link [{a}, {b}]"
    fault.at = fault.at or routers[0]
    return None


def check_link_field(link) -> None:
    if link is not None and (len(link) != 2 or link[0] == link[1]):
        raise ValueError("link: two different nodes, e.g. [a1, c1]")


def link_footprint(spec: SpecView) -> Footprint:
    """Which connections cross a link is known only once they run: every mesh (and other) workload."""
    return Footprint(frozenset(), frozenset((i, None) for i in range(len(spec.workloads))))


def link_rule(node: str, tag: str, interface: str, probability: float | None) -> Rule:
    """Every packet (or a share) the router forwards out of or in from `interface`."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", interface):
        raise UnsafeValue(f"{node}: refusing interface {interface!r} for an iptables rule")
    c = _drop(tag, probability)
    return Rule(node, tag, [f"-o {interface} {c}", f"-i {interface} {c}"])


def link_target(env: FaultEnv, fault: FaultSpec) -> tuple[str, Callable[[str], Rule]]:
    """The row's target JSON (the culprit link) and the rule on the router end `at`."""
    topo = env.backend.topology
    k = find_link(topo, fault.link)
    intf = next(i for i in env.backend.interfaces(fault.at) if i.link == k)   # the node's own name
    probability, share = _share(fault)
    name, kind = link_name(topo, k), link_kind(topo, k)
    target = target_json(description=f"{share or 'all '}packets crossing link {name} ({kind}), dropped at "
                                     f"{fault.at} ({intf.name})", link=name, link_index=k, link_kind=kind,
                         interface=intf.name, module_key=None)
    return target, lambda tag: link_rule(fault.at, tag, intf.name, probability)
