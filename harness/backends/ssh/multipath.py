"""ECMP on testbed nodes: the multipath routes and the 5-tuple hash of a topology with a bundle of
parallel links (`paths: N`), installed on the routers at provision time and verified.

A testbed's own static routing (Emulab's `$ns rtproto Static`, CloudLab's static routing style)
gives each router one next hop per destination, over one link of the bundle. For every router with a
bundle, nestlab sets the hash sysctls (`fib_multipath_hash_policy=3` with the 5-tuple's fields, as
the Mininet backend does) and replaces each route toward the far side of the bundle with a multipath
route (harness.routing.route_argv, from Topology.routes, in the node's real addresses and interface
names), then verifies them as the Mininet backend does (harness.routing.check_multipath). Every
change is written to the run's ledger first as an undo command: the sysctl's previous value, the
route that was there (`ip route replace` with its next hops, protocol, scope and source address) or,
where there was none, the removal of ours. Teardown and `nestlab cleanup` run them. What a node
reports (sysctl values, the route in place) reaches those commands only through reported.py's checks.

A fabric (harness/fabric.py: equal-cost paths through different routers, topologies/fattree-ssh.yaml)
gets the same on every router with a multipath route, plus each router's own hash seed
(net.ipv4.fib_multipath_hash_seed, Linux 6.11 or later, refused in one line where missing: without it
every router hashes alike and half the aggregation-core links carry nothing), and is verified as the
Mininet backend verifies it (harness.fabric.check_fabric: every router-router link carries traced
connections).
"""

from __future__ import annotations

import ipaddress
import json

from harness.backends.ssh import reported
from harness.backends.ssh.node import SshNode
from harness.backends.ssh.provision import each
from harness.backends.ssh.transport import SshError
from harness.fabric import SEED_SYSCTL, check_fabric, hash_seeds
from harness.ledger import Ledger
from harness.routing import (
    HASH_SYSCTLS,
    check_multipath,
    multipath_routers,
    multipath_routes,
    parse_number,
    route_argv,
)
from harness.topology import Interface, Topology

MIN_KERNEL = "5.12"   # fib_multipath_hash_fields (the custom hash policy 3) is new in Linux 5.12


routers = multipath_routers   # a bundle's or a fabric's


def install(nodes: dict[str, SshNode], topo: Topology, interfaces: dict[str, list[Interface]],
            ledger: Ledger | None) -> None:
    """The hash sysctls and the multipath routes on every router that has some, and a fabric's
    seed on each of its routers (one after another on a router; the routers at once)."""
    seeds = hash_seeds(topo)

    def setup(name: str) -> None:
        node = nodes[name]
        multipath = multipath_routes(topo, interfaces, name)
        if multipath:
            set_hash(node, ledger)
        if name in seeds:
            set_sysctls(node, {SEED_KEY: str(seeds[name])}, ledger, missing=(
                "a fabric's routers each hash with a seed of their own (net.ipv4.fib_multipath_hash_seed, "
                "Linux 6.11 or later; without it every router hashes alike: hash polarisation); this "
                "kernel has none: use a disk image with a newer kernel"))
        for dst, hops in multipath:
            replace_route(node, dst, hops, ledger)

    each(list(dict.fromkeys([*routers(topo), *seeds])), setup)   # a fabric's every router has a seed


def verify(nodes: dict[str, SshNode], topo: Topology, interfaces: dict[str, list[Interface]]) -> dict[str, dict]:
    """check_multipath on every router with a bundle (at once), check_fabric on a fabric; a refusal is
    one line naming the node. Returns the manifest's `routing`."""
    found: dict[str, dict] = {}

    def fail(name: str, message: str) -> SshError:
        where = nodes[name].p.where if name in nodes else name
        return SshError(f"{where}: ECMP: {message}")

    def check(name: str) -> None:
        found.update(check_multipath(topo, nodes, interfaces, fail, routers=[name]))

    each([r for r in routers(topo) if topo.bundle(r)], check)
    fabric = check_fabric(topo, nodes, fail, interfaces)
    return {**{name: found[name] for name in routers(topo) if name in found},
            **({"fabric": fabric} if fabric else {})}


SEED_KEY = SEED_SYSCTL.removeprefix("/proc/sys/").replace("/", ".")


def set_hash(node: SshNode, ledger: Ledger | None) -> None:
    """fib_multipath_hash_policy and _fields as HASH_SYSCTLS says (set_sysctls)."""
    set_sysctls(node, HASH_SYSCTLS, ledger, missing=(
        f"(Linux {MIN_KERNEL} or later: the routers hash connections by their 5-tuple with "
        "fib_multipath_hash_policy 3); this kernel has none: use a newer disk image"))


def set_sysctls(node: SshNode, wanted: dict[str, str], ledger: Ledger | None, missing: str,
                purpose: str = "ECMP") -> None:
    """Set each sysctl of `wanted` on the node, its previous value in the ledger first as an undo (a
    value already right is left alone and not recorded). A sysctl the kernel lacks is one line:
    the node, `purpose`, the key and `missing` (why it is needed, what to do)."""
    where = node.p.where
    changes = []
    for key, value in wanted.items():
        r = node.run(["cat", f"/proc/sys/{key.replace('.', '/')}"], sudo=False, check=False)
        if r.returncode != 0:
            raise SshError(f"{where}: {purpose} needs {key} {missing}")
        before = reported.sysctl_number(where, r.stdout.strip(), key)
        if int(before) != parse_number(value):
            changes.append((key, before))
    if not changes:
        return
    if ledger:
        for key, before in changes:
            ledger.add_undo(node.name, ["sysctl", "-qw", f"{key}={before}"], f"restore {key} = {before}")
    r = node.run(["sysctl", "-qw", *(f"{key}={wanted[key]}" for key, _ in changes)], check=False)
    if r.returncode != 0:   # the undo entries stay: putting back a value is harmless
        raise SshError(f"{where}: {purpose}: cannot set {', '.join(k for k, _ in changes)}: "
                       f"{(r.stderr or r.stdout).strip()}")


def replace_route(node: SshNode, dst: str, hops: list[tuple[str, str]], ledger: Ledger | None) -> None:
    """The multipath route to `dst` in place of the node's (metric 0, the one `ip route replace`
    replaces), which the ledger's undo entry puts back."""
    out = node.run(["ip", "-j", "route", "show", dst], sudo=False).stdout
    before = route_in_place(node.p.where, out, dst)
    ours = route_argv(dst, [via for via, _ in hops], [dev for _, dev in hops])
    if before is not None:
        undo = ["ip", "route", "replace", *before]
        what = f"restore the route {' '.join(before)}"
    else:
        undo = ["ip", "route", "del", *ours[3:]]
        what = f"remove the multipath route to {dst}"
    if ledger:
        ledger.add_undo(node.name, undo, what)
    r = node.run(ours, check=False)
    if r.returncode != 0:
        if ledger:
            ledger.drop_undo({"node": node.name, "argv": undo, "what": what})
        raise SshError(f"{node.p.where}: ECMP: cannot install the multipath route to {dst}: "
                       f"{(r.stderr or r.stdout).strip()}")


def route_in_place(where: str, out: str, dst: str) -> list[str] | None:
    """The route of metric 0 in `ip -j route show DST` output (the route to `dst`) as `ip route` arguments (type,
    destination, protocol, scope, source address, then its next hop or next hops with their
    weights), every value checked; None when there is none. Other attributes (metrics such as an
    MTU) are not kept: a testbed's static routes have none."""
    try:
        routes = json.loads(out or "[]")
    except ValueError:
        raise reported.refuse(where, "the output of `ip -j route show`", out.strip()[:200], "not JSON") from None
    if not isinstance(routes, list) or not all(isinstance(r, dict) for r in routes):
        raise reported.refuse(where, "the output of `ip -j route show`", out.strip()[:200], "not a list of routes")
    route = next((r for r in routes if r.get("metric", 0) == 0), None)
    if route is None:
        return None
    args = []
    if route.get("type", "unicast") != "unicast":
        args.append(reported.route_word(where, route["type"], "route type"))
    try:
        shown = str(ipaddress.IPv4Network(route.get("dst")))
    except (TypeError, ValueError):
        shown = None
    if shown != dst:
        raise reported.refuse(where, "route destination", route.get("dst"), f"not {dst}, which was asked for")
    args.append(dst)
    # Route attributes first: `ip route` reads everything after the first `nexthop` as next hops.
    for key, word in (("protocol", "proto"), ("scope", "scope")):
        if route.get(key) is not None:
            args += [word, reported.route_word(where, route[key], f"route {key}")]
    if route.get("prefsrc") is not None:
        args += ["src", reported.ipv4_address(where, route["prefsrc"], "route source address")]
    if "nexthops" in route:
        hops = route["nexthops"]
        if not isinstance(hops, list) or not hops or not all(isinstance(h, dict) for h in hops):
            raise reported.refuse(where, "next hops", hops, "not a list of next hops")
        for h in hops:
            weight = reported.count(where, h.get("weight", 1), "next hop weight", 1, 256)
            args += ["nexthop", *_hop(where, h), "weight", str(weight)]
    else:
        args += _hop(where, route)
    return args


def _hop(where: str, hop: dict) -> list[str]:
    """via GATEWAY dev DEVICE [onlink] of one next hop (or a route with one), checked."""
    args = []
    if hop.get("gateway") is not None:
        args += ["via", reported.ipv4_address(where, hop["gateway"], "route gateway")]
    if hop.get("dev") is not None:
        args += ["dev", reported.interface_name(where, hop["dev"], "route device")]
    if not args:
        raise reported.refuse(where, "route", hop, "it names neither a gateway nor a device")
    flags = hop.get("flags", [])
    if isinstance(flags, list) and "onlink" in flags:
        args.append("onlink")
    return args
