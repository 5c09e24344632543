"""Routes on the nodes: the multipath route a router gets for a destination behind a bundle of
parallel links, and a router's own answer to "which interface does this 5-tuple leave by" (the
ECMP check after the build, and path_blackhole's targets at injection).

Shared by the backends: `multipath_routes` gives a router's multipath routes in the addresses and
interface names the node really has (Mininet's are the derived ones; a testbed's are those the SSH
backend found), and `check_multipath` verifies them on the nodes the same way everywhere: the hash
settings, each route's next hops, and that 64 source ports' route lookups use every link of the bundle.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.topology import Interface, Topology

# The routers hash a connection onto a next hop by its 5-tuple: Linux's custom policy (3) with the
# fields source and destination address, IP protocol, source and destination port (not policy 1:
# docs/faults.md says why).
HASH_POLICY = 3
HASH_FIELDS = 0x0001 | 0x0002 | 0x0004 | 0x0010 | 0x0020
HASH_SYSCTLS = {"net.ipv4.fib_multipath_hash_policy": str(HASH_POLICY),
                "net.ipv4.fib_multipath_hash_fields": f"{HASH_FIELDS:#06x}"}
LOOKUPS = 64        # source ports whose route lookups must use every link of a bundle

Fail = Callable[[str, str], Exception]


def route_argv(dst: str, vias: list[str], devs: list[str] | None = None) -> list[str]:
    """`ip route replace` for one next hop, or a multipath route with one `nexthop` per address;
    with `devs`, each next hop names its interface too."""
    devs = list(devs) if devs else [""] * len(vias)
    if len(vias) == 1:
        return ["ip", "route", "replace", dst, "via", vias[0], *(["dev", devs[0]] if devs[0] else [])]
    argv = ["ip", "route", "replace", dst]
    for via, dev in zip(vias, devs, strict=True):
        argv += ["nexthop", "via", via, *(["dev", dev] if dev else [])]
    return argv


def route_command(dst: str, vias: list[str], devs: list[str] | None = None) -> str:
    """route_argv as one shell command line (addresses and interface names need no quoting)."""
    return " ".join(route_argv(dst, vias, devs))


def bundle_interfaces(topo: Topology, interfaces: dict[str, list[Interface]], router: str) -> list[Interface]:
    """Topology.bundle(router) as the node has it (`interfaces`: the nodes' real interfaces)."""
    real = {i.link: i for i in interfaces[router]}
    return [real[i.link] for i in topo.bundle(router)]


def multipath_routers(topo: Topology) -> list[str]:
    """The routers with a multipath route: a bundle of parallel links, or a fabric's equal-cost
    paths through different routers."""
    return [r for r in topo.routers if any(len(vias) > 1 for _, vias in topo.routes(r))]


def multipath_routes(topo: Topology, interfaces: dict[str, list[Interface]] | None,
                     router: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """The multipath routes of Topology.routes(router) (those with several next hops) in the nodes'
    own addresses and interface names: (destination subnet, [(next hop, interface), ...]).
    `interfaces` are the nodes' real interfaces (the SSH backend's); None: the derived ones."""
    interfaces = interfaces or topo.interfaces
    link_of = {str(_net(i)): i.link for ifs in topo.interfaces.values() for i in ifs}
    real_net = {i.link: str(_net(i)) for ifs in interfaces.values() for i in ifs}
    mine = {i.link: i for i in interfaces[router]}
    via_link = {i.peer_address: i.link for i in topo.interfaces[router]}
    out = []
    for dst, vias in topo.routes(router):
        if len(vias) > 1:
            hops = [(mine[via_link[v]].peer_address, mine[via_link[v]].name) for v in vias]
            out.append((real_net[link_of[dst]], hops))
    return out


def _net(i: Interface) -> ipaddress.IPv4Network:
    return ipaddress.ip_interface(f"{i.address}/{i.prefixlen}").network


def _json_list(text: str) -> list[dict]:
    """`ip -j` output as a list of objects; [] for anything else (callers compare it with what they
    expect, so a malformed answer is a mismatch, never a crash)."""
    try:
        out = json.loads(text or "[]")
    except ValueError:
        return []
    return [x for x in out if isinstance(x, dict)] if isinstance(out, list) else []


def _text(value) -> str:
    return value if isinstance(value, str) else repr(value)


def path_of(node, dst: str, src: str, ingress: str | None, sport: int, dport: int) -> str:
    """The interface `node` (a router) sends a TCP packet src:sport > dst:dport arriving on `ingress`
    out of, as its own route lookup says (`ip route get` with the packet's ports: the multipath hash
    of the 5-tuple sees them); '' when it has no route."""
    argv = ["ip", "-j", "route", "get", dst, "from", src]
    if ingress:
        argv += ["iif", ingress]
    argv += ["ipproto", "tcp", "sport", str(sport), "dport", str(dport)]
    routes = _json_list(node.run(argv).stdout)
    dev = routes[0].get("dev", "") if routes else ""
    return dev if isinstance(dev, str) else ""


def hash_settings(node) -> tuple[int | None, int | None, list[str]]:
    """The router's multipath hash policy and fields (None where unreadable), and the raw values."""
    keys = [k.replace(".", "/") for k in HASH_SYSCTLS]
    raw = node.run(["cat", *(f"/proc/sys/{k}" for k in keys)]).stdout.split()
    values = [parse_number(v) for v in raw] if len(raw) == 2 else [None, None]
    return values[0], values[1], raw


def parse_number(text: str) -> int | None:
    """A sysctl's number as the kernel prints it (decimal) or as it is written (0x hex)."""
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        return None


def installed_nexthops(node, dst: str) -> set[tuple[str, str]]:
    """(gateway, device) of each next hop of the route to `dst` the node uses (the lowest metric)."""
    routes = _json_list(node.run(["ip", "-j", "route", "show", dst]).stdout)
    if not routes:
        return set()
    best = min(routes, key=lambda r: r.get("metric", 0) if isinstance(r.get("metric", 0), int) else 1 << 32)
    hops = best.get("nexthops") if "nexthops" in best else [best]
    if not isinstance(hops, list):
        return {("?", _text(hops))}
    return {(_text(h.get("gateway")), _text(h.get("dev"))) for h in hops if isinstance(h, dict)}


def _runtime_error(node: str, message: str) -> Exception:
    return RuntimeError(f"{node}: {message}")


def check_multipath(topo: Topology, nodes, interfaces: dict[str, list[Interface]] | None = None,
                    fail: Fail = _runtime_error, routers: list[str] | None = None) -> dict[str, dict]:
    """Every multipath route is in place with one next hop per parallel link, the routers hash by
    5-tuple, and the hash does spread connections: LOOKUPS source ports' route lookups through each
    bundle use every one of its links (the routers' own answer, `ip route get`). `nodes` maps a name to
    a node with run(argv); `interfaces` are the nodes' real ones (None: the derived ones); `fail(node,
    message)` makes the exception. Returns what was verified, per router, for the manifest's `routing`."""
    interfaces = interfaces or topo.interfaces
    routing = {}
    for name in routers if routers is not None else topo.routers:
        bundle = bundle_interfaces(topo, interfaces, name)
        if not bundle:
            continue
        node = nodes[name]
        policy, fields, raw = hash_settings(node)
        if (policy, fields) != (HASH_POLICY, HASH_FIELDS):
            shown = ", ".join(repr(v) for v in raw) or "nothing"
            raise fail(name, f"multipath hash policy and fields {shown}: not the 5-tuple "
                             f"(policy {HASH_POLICY}, fields {HASH_FIELDS:#06x})")
        names = {i.name for i in bundle}
        ingress = next((i for i in interfaces[name] if i.name not in names), None)
        src, iif = (ingress.peer_address, ingress.name) if ingress else (bundle[0].address, None)
        checked = []
        for dst, hops in multipath_routes(topo, interfaces, name):
            shown = installed_nexthops(node, dst)
            if shown != set(hops):
                raise fail(name, f"the route to {dst} has next hops {sorted(shown)}, wanted {sorted(hops)}")
            link = topo.spec.links[next(i.link for ifs in interfaces.values() for i in ifs
                                        if str(_net(i)) == dst)]
            host = next(i.address for i in interfaces[link.a] if str(_net(i)) == dst)
            used = {path_of(node, host, src, iif, sport=20000 + k, dport=80) for k in range(LOOKUPS)}
            devs = {dev for _, dev in hops}
            if used != devs:
                raise fail(name, f"{LOOKUPS} connections to {dst} used {sorted(used)}, not every link of the "
                                 f"bundle {sorted(devs)}: no L4 hashing")
            checked.append({"destination": dst, "next_hops": [via for via, _ in hops], "interfaces_used": sorted(used)})
        routing[name] = {"fib_multipath_hash_policy": HASH_POLICY, "fib_multipath_hash_fields": HASH_FIELDS,
                         "multipath_routes": checked}
    return routing
