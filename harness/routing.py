"""Routes on the nodes: the multipath route a router gets for a destination behind a bundle of
parallel links, and a router's own answer to "which interface does this 5-tuple leave by" (the
ECMP check after the build, and path_blackhole's targets at injection).
"""

from __future__ import annotations

import json


def route_command(dst: str, vias: list[str]) -> str:
    """`ip route replace` for one next hop, or a multipath route with one `nexthop` per address."""
    if len(vias) == 1:
        return f"ip route replace {dst} via {vias[0]}"
    return f"ip route replace {dst} " + " ".join(f"nexthop via {v}" for v in vias)


def path_of(node, dst: str, src: str, ingress: str | None, sport: int, dport: int) -> str:
    """The interface `node` (a router) sends a TCP packet src:sport > dst:dport arriving on `ingress`
    out of, as its own route lookup says (`ip route get` with the packet's ports: the multipath hash
    of the 5-tuple sees them); '' when it has no route."""
    argv = ["ip", "-j", "route", "get", dst, "from", src]
    if ingress:
        argv += ["iif", ingress]
    argv += ["ipproto", "tcp", "sport", str(sport), "dport", str(dport)]
    routes = json.loads(node.run(argv).stdout or "[]")
    return routes[0].get("dev", "") if routes else ""
