"""ECMP topologies on testbed nodes (issue 21, item 1): the SSH backend installs the multipath routes
and the 5-tuple hash on the routers of a bundle, records how to undo them, verifies them like the
Mininet backend does, and teardown puts the testbed's routes back. No root, no sshd.

The routers are stand-ins (FakeRouter: a main routing table, the hash sysctls and a route lookup that
hashes the way the settings say) with testbed interface names (eth1, eth2, ...) rather than Mininet's,
and the testbed's own single-path static routes in place; where unprivileged user and network
namespaces are available, the same cycle also runs against the kernel's real routing (`ip` in a
namespace of the test's own per router).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import shutil
import subprocess
import time
from types import SimpleNamespace

import pytest

from harness.backends.ssh import multipath
from harness.backends.ssh.backend import SshBackend
from harness.backends.ssh.transport import SshError
from harness.export import ssh_topology
from harness.routing import check_multipath, route_argv
from harness.topology import load_topology
from tests.support.env import REPO, write

POLICY, FIELDS = "net.ipv4.fib_multipath_hash_policy", "net.ipv4.fib_multipath_hash_fields"

# What Emulab's static routing leaves on the routers (one next hop per destination; here also a
# route of metric 100 that is not ours to touch, a missing one and an earlier multipath route).
TESTBED_ROUTES = {
    "x1": [{"dst": "10.0.6.0/24", "gateway": "10.0.4.2", "dev": "eth4", "flags": []},
           {"dst": "10.0.6.0/24", "gateway": "10.0.5.2", "dev": "eth5", "metric": 100, "flags": []},
           {"dst": "10.0.7.0/24", "gateway": "10.0.4.2", "dev": "eth4", "flags": []}],
    "x2": [{"dst": "10.0.1.0/24", "gateway": "10.0.4.1", "dev": "eth1", "protocol": "static", "flags": []},
           {"dst": "10.0.3.0/24", "protocol": "static", "flags": [],
            "nexthops": [{"gateway": "10.0.4.1", "dev": "eth1", "weight": 2, "flags": []},
                         {"gateway": "10.0.5.1", "dev": "eth2", "weight": 1, "flags": []}]}],
}
BEFORE_SYSCTLS = {POLICY: "0", FIELDS: "7"}


class FakeRouter:
    """A testbed router as `cat /proc/sys`, `sysctl -w` and `ip [-j] route show|replace|del|get`
    see it. A lookup hashes the ports only with policy 3 and the port fields set (else every
    connection to a destination takes the same next hop)."""

    def __init__(self, name: str, routes: list[dict], sysctls: dict[str, str] | None = None):
        self.name, self.procs = name, {}
        self.p = SimpleNamespace(where=f"{name} (alice@{name}.exp.proj.emulab.net:22)")
        self.routes = [json.loads(json.dumps(r)) for r in routes]
        self.sysctls = dict(BEFORE_SYSCTLS if sysctls is None else sysctls)
        self.calls: list[list[str]] = []

    def close(self) -> None:
        pass

    def run(self, argv, check=True, timeout=30.0, input=None, sudo=True, server=True):
        argv = [str(a) for a in argv]
        self.calls.append(argv)
        rc, out, err = self._do(argv)
        if check and rc:
            raise RuntimeError(f"{self.name}: {' '.join(argv)} failed ({rc}): {err}")
        return subprocess.CompletedProcess(argv, rc, out, err)

    def _do(self, argv: list[str]) -> tuple[int, str, str]:
        if argv[0] == "cat":
            keys = [a.removeprefix("/proc/sys/").replace("/", ".") for a in argv[1:]]
            if not all(k in self.sysctls for k in keys):
                return 1, "", "No such file or directory"
            return 0, "".join(self.sysctls[k] + "\n" for k in keys), ""
        if argv[:2] == ["sysctl", "-qw"]:
            for a in argv[2:]:
                k, v = a.split("=")
                self.sysctls[k] = str(int(v, 0))
            return 0, "", ""
        if argv[:4] == ["ip", "-j", "route", "show"]:   # (a broken node may answer with another route)
            return 0, json.dumps([r for r in self.routes if r["dst"].startswith(argv[4])]), ""
        if argv[:3] == ["ip", "route", "replace"]:
            new = parse_route(argv[3:])
            self.routes = [r for r in self.routes if (r["dst"], r.get("metric", 0)) != (new["dst"], 0)] + [new]
            return 0, "", ""
        if argv[:3] == ["ip", "route", "del"]:
            gone = parse_route(argv[3:])
            keep = [r for r in self.routes if not (r["dst"] == gone["dst"] and r.get("metric", 0) == 0
                                                    and _gateways(r) == _gateways(gone))]
            if len(keep) == len(self.routes):
                return 2, "", "RTNETLINK answers: No such process"
            self.routes = keep
            return 0, "", ""
        if argv[:4] == ["ip", "-j", "route", "get"]:
            dst, sport = ipaddress.ip_address(argv[4]), int(argv[argv.index("sport") + 1])
            found = sorted((r for r in self.routes if dst in ipaddress.ip_network(r["dst"])),
                           key=lambda r: r.get("metric", 0))
            if not found:
                return 2, "", "RTNETLINK answers: Network is unreachable"
            hops = found[0].get("nexthops") or [found[0]]
            l4 = self.sysctls[POLICY] == "3" and int(self.sysctls[FIELDS]) & 0x30 == 0x30
            hop = hops[sport * 7 % len(hops)] if l4 else hops[0]
            return 0, json.dumps([{"dst": argv[4], "gateway": hop["gateway"], "dev": hop["dev"], "flags": []}]), ""
        raise AssertionError(f"unexpected command {argv}")


def parse_route(words: list[str]) -> dict:
    """`ip route` arguments as `ip -j route show` prints the route (after the first `nexthop` only
    next-hop words are allowed, as in iproute2)."""
    words, route, hops = list(words), {"flags": []}, []
    route["dst"] = words.pop(0)
    target = route
    while words:
        w = words.pop(0)
        if w == "nexthop":
            target = {"flags": []}
            hops.append(target)
        elif w in ("via", "dev", "weight"):
            target[{"via": "gateway", "dev": "dev", "weight": "weight"}[w]] = words.pop(0)
        elif w == "onlink":
            target["flags"].append("onlink")
        elif w in ("proto", "scope", "src") and not hops:
            route[{"proto": "protocol", "scope": "scope", "src": "prefsrc"}[w]] = words.pop(0)
        else:
            raise AssertionError(f"ip route would refuse {w!r} here")
    if hops:
        route["nexthops"] = [{"gateway": h["gateway"], "dev": h["dev"], "weight": int(h.get("weight", 1)),
                              "flags": h["flags"]} for h in hops]
    return route


def _gateways(route: dict) -> set[str]:
    return {h["gateway"] for h in route.get("nexthops") or [route]}


def _table(routes: list[dict]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in routes)


@pytest.fixture
def ecmp_ssh(tmp_path):
    """ecmp.yaml exported as an SSH topology, and the nodes' interfaces as a testbed names them."""
    text = ssh_topology(load_topology(REPO / "topologies" / "ecmp.yaml"), "exp.proj.emulab.net", "alice")
    topo = load_topology(write(tmp_path, "ecmp-ssh.yaml", text))
    interfaces = {n: [dataclasses.replace(i, name=f"eth{j + 1}") for j, i in enumerate(ifs)]
                  for n, ifs in topo.interfaces.items()}
    return topo, interfaces


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    import harness.ledger

    monkeypatch.setattr(harness.ledger, "LEDGER_DIR", tmp_path / "ledgers")
    return harness.ledger.Ledger("t-ecmp", tmp_path / "run")


def _undo(ledger, node: str) -> list[list[str]]:
    return [u["argv"] for u in ledger.data["remote"]["undo"] if u["node"] == node]


def test_provisioning_installs_multipath_routes_and_hash_records_undo_and_teardown_restores(ecmp_ssh, ledger):
    topo, interfaces = ecmp_ssh
    nodes = {r: FakeRouter(r, TESTBED_ROUTES[r]) for r in ("x1", "x2")}
    multipath.install(nodes, topo, interfaces, ledger)

    changes = {r: [c for c in n.calls if c[0] == "sysctl" or c[:3] == ["ip", "route", "replace"]]
               for r, n in nodes.items()}
    hash_set = ["sysctl", "-qw", f"{POLICY}=3", f"{FIELDS}=0x0037"]
    assert changes["x1"] == [hash_set] + [
        ["ip", "route", "replace", dst, "nexthop", "via", "10.0.4.2", "dev", "eth4", "nexthop", "via", "10.0.5.2",
         "dev", "eth5"] for dst in ("10.0.6.0/24", "10.0.7.0/24")]
    assert changes["x2"] == [hash_set] + [
        ["ip", "route", "replace", dst, "nexthop", "via", "10.0.4.1", "dev", "eth1", "nexthop", "via", "10.0.5.1",
         "dev", "eth2"] for dst in ("10.0.1.0/24", "10.0.2.0/24", "10.0.3.0/24")]
    restore_hash = [["sysctl", "-qw", f"{POLICY}=0"], ["sysctl", "-qw", f"{FIELDS}=7"]]
    assert _undo(ledger, "x1") == restore_hash + [
        ["ip", "route", "replace", "10.0.6.0/24", "via", "10.0.4.2", "dev", "eth4"],
        ["ip", "route", "replace", "10.0.7.0/24", "via", "10.0.4.2", "dev", "eth4"]]
    assert _undo(ledger, "x2") == restore_hash + [
        ["ip", "route", "replace", "10.0.1.0/24", "proto", "static", "via", "10.0.4.1", "dev", "eth1"],
        ["ip", "route", "del", "10.0.2.0/24", "nexthop", "via", "10.0.4.1", "dev", "eth1", "nexthop", "via",
         "10.0.5.1", "dev", "eth2"],
        ["ip", "route", "replace", "10.0.3.0/24", "proto", "static", "nexthop", "via", "10.0.4.1", "dev", "eth1",
         "weight", "2", "nexthop", "via", "10.0.5.1", "dev", "eth2", "weight", "1"]]
    assert nodes["x1"].sysctls == {POLICY: "3", FIELDS: str(0x37)}
    # the metric-100 route is not the testbed's working route: left alone
    assert {"dst": "10.0.6.0/24", "gateway": "10.0.5.2", "dev": "eth5", "metric": 100, "flags": []} in nodes["x1"].routes

    routing = multipath.verify(nodes, topo, interfaces)
    assert list(routing) == ["x1", "x2"]
    assert routing["x1"]["fib_multipath_hash_policy"] == 3 and routing["x1"]["fib_multipath_hash_fields"] == 0x37
    assert [r["destination"] for r in routing["x2"]["multipath_routes"]] == ["10.0.1.0/24", "10.0.2.0/24", "10.0.3.0/24"]
    assert all(r["interfaces_used"] == ["eth4", "eth5"] and r["next_hops"] == ["10.0.4.2", "10.0.5.2"]
               for r in routing["x1"]["multipath_routes"])

    backend = SshBackend(topo, ledger, SimpleNamespace(monitor="site1n1"), "t-ecmp")
    backend.nodes, backend.routing, backend._interfaces = nodes, routing, interfaces
    assert backend.manifest_extra()["routing"] == routing
    assert [lk.get("path") for lk in backend.link_model] == [None, None, None, 0, 1, None, None]
    backend.teardown()   # runs the undo entries, as after any run
    for r, node in nodes.items():
        assert _table(node.routes) == _table(TESTBED_ROUTES[r]) and node.sysctls == BEFORE_SYSCTLS
    assert not ledger.remote_leftovers()


def test_build_installs_ecmp_after_verifying_the_network_and_before_congestion_control(ecmp_ssh, ledger, monkeypatch):
    from harness.backends.ssh import provision

    topo, interfaces = ecmp_ssh
    steps = []
    monkeypatch.setattr(provision, "check_nodes", lambda *a: steps.append("check"))
    monkeypatch.setattr(provision, "install", lambda *a: steps.append("install") or {"site1n1": "/pkg"})
    monkeypatch.setattr(provision, "verify_network", lambda nodes, t, s, info, control, found:
                        steps.append("network") or found.update(interfaces))
    monkeypatch.setattr(provision, "set_congestion_control", lambda *a: steps.append("cc"))
    monkeypatch.setattr(provision, "measure_clocks", lambda *a: steps.append("clocks"))
    monkeypatch.setattr(multipath, "install", lambda nodes, t, found, lg: steps.append(("ecmp", lg is ledger,
                                                                                          found is interfaces)))
    monkeypatch.setattr(multipath, "verify", lambda *a: steps.append("verify") or {"x1": {}})
    backend = SshBackend(topo, ledger, SimpleNamespace(monitor="site1n1", interceptor=False, workloads=[],
                                                       faults=[]), "t-ecmp")
    backend._interfaces = interfaces
    backend.build()
    assert steps[0] == "check" and set(steps[1:3]) == {"install", "network"}
    assert steps[3:] == [("ecmp", True, True), "verify", "cc", "clocks"]
    assert backend.manifest_extra()["routing"] == {"x1": {}}
    assert provision.needed_programs(topo, SimpleNamespace(workloads=[], faults=[], monitor="site1n1",
                                                           interceptor=False))["x1"] >= {"sysctl", "ip"}


def _installed(ecmp_ssh):
    topo, interfaces = ecmp_ssh
    nodes = {r: FakeRouter(r, TESTBED_ROUTES[r]) for r in ("x1", "x2")}
    multipath.install(nodes, topo, interfaces, None)
    return topo, interfaces, nodes


def test_verification_refuses_a_route_with_one_next_hop(ecmp_ssh):
    topo, interfaces, nodes = _installed(ecmp_ssh)
    nodes["x2"].run(route_argv("10.0.2.0/24", ["10.0.5.1"], ["eth2"]))   # the testbed's routing came back
    with pytest.raises(SshError) as e:
        multipath.verify(nodes, topo, interfaces)
    text = str(e.value)
    assert "\n" not in text and text.startswith("x2 (alice@x2.exp.proj.emulab.net:22): ECMP: the route to 10.0.2.0/24")
    assert "[('10.0.5.1', 'eth2')]" in text


@pytest.mark.parametrize("policy,fields", [("1", "7"), ("0", "55"), ("3", "7")])
def test_verification_refuses_a_hash_that_is_not_the_5_tuple(ecmp_ssh, policy, fields):
    topo, interfaces, nodes = _installed(ecmp_ssh)
    nodes["x1"].sysctls.update({POLICY: policy, FIELDS: fields})
    with pytest.raises(SshError) as e:
        multipath.verify(nodes, topo, interfaces)
    assert str(e.value).startswith("x1 (alice@") and f"policy and fields '{policy}', '{fields}'" in str(e.value)
    assert "not the 5-tuple (policy 3, fields 0x0037)" in str(e.value)


def test_the_shared_check_is_the_mininet_backends_on_derived_names(ecmp_ssh):
    """With Mininet's interface names and no `interfaces`, check_multipath records what the Mininet
    backend's own check recorded, and refuses with RuntimeError."""
    topo, _ = ecmp_ssh
    names = {i.peer_address: i.name for r in ("x1", "x2") for i in topo.interfaces[r]}
    routes = {r: [{**route, **({"dev": names[route["gateway"]]} if "gateway" in route else {})}
                  for route in TESTBED_ROUTES[r] if "nexthops" not in route] for r in ("x1", "x2")}
    nodes = {r: FakeRouter(r, routes[r]) for r in ("x1", "x2")}
    multipath.install(nodes, topo, topo.interfaces, None)
    routing = check_multipath(topo, nodes)
    assert routing["x1"]["multipath_routes"][0] == {"destination": "10.0.6.0/24", "next_hops": ["10.0.4.2", "10.0.5.2"],
                                                    "interfaces_used": ["x1-eth3", "x1-eth4"]}
    nodes["x1"].sysctls[POLICY] = "1"
    with pytest.raises(RuntimeError, match="^x1: multipath hash policy"):
        check_multipath(topo, nodes)


def test_a_kernel_without_the_hash_fields_is_refused_before_anything_changes(ecmp_ssh, ledger):
    topo, interfaces = ecmp_ssh
    nodes = {r: FakeRouter(r, TESTBED_ROUTES[r], sysctls={POLICY: "0"}) for r in ("x1", "x2")}
    with pytest.raises(SshError, match=r"ECMP needs net\.ipv4\.fib_multipath_hash_fields \(Linux 5\.12"):
        multipath.install(nodes, topo, interfaces, ledger)
    assert not any(c[0] == "sysctl" or c[:3] == ["ip", "route", "replace"] for n in nodes.values() for c in n.calls)
    assert not ledger.remote_leftovers()


@pytest.mark.parametrize("route,what", [
    ({"dst": "10.0.6.0/24", "gateway": "10.0.4.2 -j", "dev": "eth4"}, "route gateway"),
    ({"dst": "10.0.6.0/24", "gateway": "10.0.4.2", "dev": "eth4 up"}, "route device"),
    ({"dst": "10.0.6.0/24", "gateway": "10.0.4.2", "dev": "eth4", "protocol": "static nexthop"}, "route protocol"),
    ({"dst": "10.0.6.0/24", "nexthops": [{"gateway": "10.0.4.2", "dev": "eth4", "weight": "1 x"}]}, "next hop weight"),
    ({"dst": "10.0.6.0/24; reboot", "gateway": "10.0.4.2", "dev": "eth4"}, "route destination"),
    ({"dst": "10.0.6.0/24", "gateway": "10.0.4.2", "dev": "eth4", "type": "unicast x"}, "route type"),
    ({"dst": "10.0.6.0/24"}, "route"),
])
def test_a_route_in_place_reaches_the_undo_entry_only_checked(ecmp_ssh, ledger, route, what):
    topo, interfaces = ecmp_ssh
    nodes = {"x1": FakeRouter("x1", [route]), "x2": FakeRouter("x2", TESTBED_ROUTES["x2"])}
    with pytest.raises(SshError) as e:
        multipath.install(nodes, topo, interfaces, ledger)
    assert f"refusing {what}" in str(e.value) and "\n" not in str(e.value)
    assert not any(c[:3] == ["ip", "route", "replace"] for c in nodes["x1"].calls)
    with pytest.raises(SshError, match="refusing net.ipv4.fib_multipath_hash_policy '3; reboot'"):
        multipath.set_hash(FakeRouter("x1", [], sysctls={POLICY: "3; reboot", FIELDS: "7"}), None)


# ---- the kernel's routing, in namespaces of the test's own ------------------------------------------

class NsRouter:
    """A router in a user and network namespace of its own (no root needed): its interfaces are veth
    pairs with the testbed's names and addresses, their peers left in the namespace."""

    def __init__(self, name: str, interfaces, routes: list[list[str]]):
        self.name, self.procs = name, {}
        self.p = SimpleNamespace(where=f"{name} (namespace)")
        self.proc = subprocess.Popen(["unshare", "-rn", "sleep", "600"])
        mine = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + 5
        while os.readlink(f"/proc/{self.proc.pid}/ns/net") == mine and time.monotonic() < deadline:
            time.sleep(0.01)
        self.run(["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        for j, i in enumerate(interfaces):
            self.run(["ip", "link", "add", i.name, "type", "veth", "peer", "name", f"p{j}"])
            self.run(["ip", "link", "set", i.name, "up"])
            self.run(["ip", "link", "set", f"p{j}", "up"])
            self.run(["ip", "addr", "add", f"{i.address}/{i.prefixlen}", "dev", i.name])
        for r in routes:
            self.run(["ip", "route", "add", *r])

    def run(self, argv, check=True, timeout=30.0, input=None, sudo=True, server=True):
        r = subprocess.run(["nsenter", "-t", str(self.proc.pid), "-U", "-n", "--preserve-credentials",
                            *map(str, argv)], capture_output=True, text=True, timeout=timeout, input=input)
        if check and r.returncode:
            raise RuntimeError(f"{self.name}: {' '.join(map(str, argv))} failed: {r.stderr.strip()}")
        return r

    def state(self) -> tuple[list[str], str]:
        return (_table(json.loads(self.run(["ip", "-j", "route", "show"]).stdout)),
                self.run(["cat", "/proc/sys/net/ipv4/fib_multipath_hash_policy",
                          "/proc/sys/net/ipv4/fib_multipath_hash_fields"]).stdout)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _namespaces_work() -> bool:
    if not (shutil.which("unshare") and shutil.which("nsenter")):
        return False
    r = subprocess.run(["unshare", "-rn", "sh", "-c", "ip link add v0 type veth peer name v1 && "
                        "cat /proc/sys/net/ipv4/fib_multipath_hash_fields"], capture_output=True)
    return r.returncode == 0


@pytest.mark.skipif(not _namespaces_work(), reason="needs unprivileged user and network namespaces, veth, Linux 5.12+")
def test_the_cycle_against_the_kernels_routing(ecmp_ssh, ledger):
    topo, interfaces = ecmp_ssh
    testbed = {"x1": [["10.0.6.0/24", "via", "10.0.4.2", "dev", "eth4"]],
               "x2": [["10.0.1.0/24", "via", "10.0.4.1", "proto", "static"],
                      ["10.0.3.0/24", "proto", "static", "nexthop", "via", "10.0.4.1", "weight", "2",
                       "nexthop", "via", "10.0.5.1"]]}
    nodes = {}
    try:
        for r in ("x1", "x2"):
            nodes[r] = NsRouter(r, interfaces[r], testbed[r])
        before = {r: n.state() for r, n in nodes.items()}
        multipath.install(nodes, topo, interfaces, ledger)
        routing = multipath.verify(nodes, topo, interfaces)   # the kernel hashes 64 source ports onto both links
        assert all(m["interfaces_used"] == ["eth4", "eth5"] for m in routing["x1"]["multipath_routes"])
        assert len(routing["x2"]["multipath_routes"]) == 3
        nodes["x1"].run(["ip", "route", "replace", "10.0.6.0/24", "via", "10.0.5.2"])
        with pytest.raises(SshError, match="x1 .namespace.: ECMP: the route to 10.0.6.0/24 has next hops"):
            multipath.verify(nodes, topo, interfaces)
        for entry in ledger.data["remote"]["undo"]:   # what teardown and `nestlab cleanup` run
            nodes[entry["node"]].run(entry["argv"])
        assert {r: n.state() for r, n in nodes.items()} == before
    finally:
        for n in nodes.values():
            n.close()
