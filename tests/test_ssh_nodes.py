"""Hostile or broken SSH testbed nodes (no root, no sshd): a node's answers (the files it lists, the
interfaces, addresses and routes it reports) are never used unchecked. A file name becomes a local
path only as a plain name, and addresses and interface names reach `ip route` only once valid. A
refusal is one line naming the node and the value; what was already recorded stays."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from paramiko import SFTPAttributes

from harness.topology import Interface, load_topology
from tests.support.env import one_line, write


class FakeSftp:
    """A node's SFTP server as fetch_logs sees it: `entries` maps each listed name to its content
    (bytes) or to a file type (stat.S_IFIFO, stat.S_IFDIR, stat.S_IFLNK)."""

    def __init__(self, entries: dict[str, bytes | int]):
        self.entries = entries

    def _attr(self, name: str) -> SFTPAttributes:
        a = SFTPAttributes()
        a.filename = name
        v = self.entries[name]
        a.st_mode = (stat.S_IFREG | 0o644) if isinstance(v, bytes) else (v | 0o644)
        a.st_size = len(v) if isinstance(v, bytes) else 0
        return a

    def listdir(self, path: str) -> list[str]:
        return list(self.entries)

    def listdir_attr(self, path: str) -> list[SFTPAttributes]:
        return [self._attr(n) for n in self.entries]


class FakeLogNode:
    def __init__(self, name: str, entries: dict[str, bytes | int]):
        self.name = name
        self.p = SimpleNamespace(where=f"{name} (root@{name}.example:22)")
        self.conn = SimpleNamespace(sftp=FakeSftp(entries))
        self.fetched: list[str] = []

    def get(self, remote: str, local: Path) -> None:
        name = remote.split("/logs/", 1)[1]
        self.fetched.append(name)
        v = self.conn.sftp.entries[name]
        Path(local).write_bytes(v if isinstance(v, bytes) else b"not a regular file")


def test_file_names_a_node_lists_never_leave_the_logs_directory(tmp_path):
    """Names with `..`, absolute names, names with a separator, `.` and `..` themselves, and entries
    that are not regular files (a FIFO would hang the copy, a directory cannot be one) are refused
    with one line naming the node and each name; every plain log is brought back all the same."""
    from harness.backends.ssh.retrieve import fetch_logs

    run_dir = tmp_path / "run"
    logs = run_dir / "logs"
    outside = tmp_path / "outside.log"
    entries = {"../../outside.log": b"escaped", str(outside): b"absolute", "sub/evil.log": b"nested",
               ".": stat.S_IFDIR, "..": stat.S_IFDIR, "": b"empty name", "fifo.log": stat.S_IFIFO,
               "dir.log": stat.S_IFDIR, "w0-wget-i0-0.log": b"a good log", "collector.log": b"another"}
    node = FakeLogNode("site1n1", entries)
    with pytest.raises(Exception) as e:
        fetch_logs(node, "/tmp/nestlab-run-site1n1/logs", logs)
    msg = one_line(str(e.value))
    assert "site1n1" in msg
    for bad in ("../../outside.log", str(outside), "sub/evil.log", ".", "..", "", "fifo.log", "dir.log"):
        assert repr(bad) in msg, (bad, msg)
    assert not outside.exists() and not (tmp_path / "outside.log").exists()
    assert not (logs / "sub").exists()
    assert sorted(node.fetched) == ["collector.log", "w0-wget-i0-0.log"]
    assert (logs / "w0-wget-i0-0.log").read_bytes() == b"a good log"
    assert sorted(p.name for p in logs.iterdir()) == ["collector.log", "w0-wget-i0-0.log"]


def test_a_node_cannot_replace_what_is_already_recorded(tmp_path):
    """Each node's logs land in the same logs/ directory: a name another node delivered, or a file
    the runner wrote there (its traceback), is not replaced; the node and the name are named."""
    from harness.backends.ssh.backend import SshBackend

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "runner-traceback.txt").write_text("the runner's own record")
    backend = SshBackend.__new__(SshBackend)
    backend.remote_dbs, backend.trace_dbs, backend._clocks = {}, {}, None
    backend.spec = SimpleNamespace(monitor="site1n1")
    backend.nodes = {"site1n1": FakeLogNode("site1n1", {"w0-wget-i0-0.log": b"site1n1's log"}),
                     "x1": FakeLogNode("x1", {"w0-wget-i0-0.log": b"forged", "runner-traceback.txt": b"forged",
                                              "lighttpd-x1.error.log": b"x1's own"})}
    for node in backend.nodes.values():
        node.workdir = f"/tmp/nestlab-run-{node.name}"
    with pytest.raises(RuntimeError) as e:
        backend.bring_back(None, tmp_path)
    msg = one_line(str(e.value))
    assert "x1" in msg and "'w0-wget-i0-0.log'" in msg and "'runner-traceback.txt'" in msg
    assert (logs / "w0-wget-i0-0.log").read_bytes() == b"site1n1's log"
    assert (logs / "runner-traceback.txt").read_text() == "the runner's own record"
    assert (logs / "lighttpd-x1.error.log").read_bytes() == b"x1's own"


SSH_TOPO = """\
name: tiny-ssh
nodes:
  h1: {ssh: {host: 192.0.2.1, interfaces: [eth1]}}
  r:  {router: true, ssh: {host: 192.0.2.2}}
  h2: {ssh: {host: 192.0.2.3}}
links:
  - {a: h1, b: r}
  - {a: r, b: h2}
"""


def _addr(ifname, *addrs):
    return {"ifname": ifname, "addr_info": [{"family": "inet", "local": a, "prefixlen": p} for a, p in addrs]}


GOOD_ADDRS = {
    "h1": [_addr("lo", ("127.0.0.1", 8)), _addr("mgmt0", ("192.0.2.1", 24)), _addr("eth1", ("10.0.1.1", 24))],
    "r": [_addr("lo", ("127.0.0.1", 8)), _addr("mgmt0", ("192.0.2.2", 24)), _addr("ens3", ("10.0.1.2", 24)),
          _addr("ens4", ("10.0.2.1", 24))],
    "h2": [_addr("mgmt0", ("192.0.2.3", 24)), _addr("enp0s8", ("10.0.2.2", 24))],
}


class FakeNetNode:
    """A node answering `ip -j -4 addr show`, `ip -j route get` and the forwarding sysctl."""

    def __init__(self, name: str, addrs, route=None):
        self.name = name
        self.p = SimpleNamespace(where=f"{name} (root@{name}.example:22)")
        self.addrs = addrs
        self.route = route
        self.ran: list[list[str]] = []

    def run(self, argv, check=True, timeout=30.0, input=None, sudo=True, server=True):
        argv = [str(a) for a in argv]
        self.ran.append(argv)
        if argv[:2] == ["ip", "-j"] and "addr" in argv:
            out = self.addrs if isinstance(self.addrs, str) else json.dumps(self.addrs)
        elif argv[:2] == ["ip", "-j"] and "route" in argv:
            out = json.dumps([self.route]) if self.route is not None else "[]"
        elif argv[0] == "cat" and "tcp_congestion_control" in argv[1]:
            out = "cubic\n"
        else:
            out = "1\n"
        return subprocess.CompletedProcess(argv, 0, out, "")


def _replace(node, old, new):
    """GOOD_ADDRS with node's entry for interface `old` replaced by `new` (a whole entry)."""
    return {n: [new if n == node and a["ifname"] == old else a for a in v] for n, v in GOOD_ADDRS.items()}


REPORTS = [
    # (what, the nodes' addresses, node named, value named)
    ("interface name with ..", _replace("h2", "enp0s8", _addr("../../x", ("10.0.2.2", 24))), "h2", "../../x"),
    ("interface name with /", _replace("r", "ens3", _addr("a/b", ("10.0.1.2", 24))), "r", "a/b"),
    ("interface name with newline", _replace("h2", "enp0s8", _addr("e0\n-j ACCEPT", ("10.0.2.2", 24))), "h2",
     "e0\n-j ACCEPT"),
    ("interface name with space", _replace("r", "ens4", _addr("ens 4", ("10.0.2.1", 24))), "r", "ens 4"),
    ("interface name too long", _replace("h2", "enp0s8", _addr("x" * 16, ("10.0.2.2", 24))), "h2", "x" * 16),
    ("interface name .", _replace("h2", "enp0s8", _addr(".", ("10.0.2.2", 24))), "h2", "."),
    ("interface name ..", _replace("h2", "enp0s8", _addr("..", ("10.0.2.2", 24))), "h2", ".."),
    ("empty interface name", _replace("h2", "enp0s8", _addr("", ("10.0.2.2", 24))), "h2", ""),
    ("control interface name", _replace("h1", "mgmt0", _addr("mg/mt0", ("192.0.2.1", 24))), "h1", "mg/mt0"),
    ("address with iptables words", _replace("h1", "eth1", _addr("eth1", ("10.0.1.1/0 -j ACCEPT", 24))), "h1",
     "10.0.1.1/0 -j ACCEPT"),
    ("address with a quote", _replace("h1", "eth1", _addr("eth1", ('10.0.1.1"\nserver.modules', 24))), "h1",
     '10.0.1.1"\nserver.modules'),
    ("address out of range", _replace("h1", "eth1", _addr("eth1", ("10.0.1.300", 24))), "h1", "10.0.1.300"),
    ("address as a number", _replace("h1", "eth1", _addr("eth1", (167772417, 24))), "h1", 167772417),
    ("IPv6 address as inet", _replace("h1", "eth1", _addr("eth1", ("::1", 24))), "h1", "::1"),
    ("prefix length too large", _replace("h1", "eth1", _addr("eth1", ("10.0.1.1", 99))), "h1", 99),
    ("prefix length as text", _replace("h1", "eth1", _addr("eth1", ("10.0.1.1", "24 x"))), "h1", "24 x"),
    ("not JSON", {**GOOD_ADDRS, "r": "<html>"}, "r", "<html>"),
    ("JSON of the wrong shape", {**GOOD_ADDRS, "h2": {"ifname": "enp0s8"}}, "h2", None),
]


def _verify(tmp_path, addrs):
    from harness.backends.ssh.provision import verify_network

    topo = load_topology(write(tmp_path, "tiny.yaml", SSH_TOPO))
    nodes = {n: FakeNetNode(n, a) for n, a in addrs.items()}
    spec = SimpleNamespace(monitor="h1", workloads=[])
    info = {n: {"ssh_server_address": f"192.0.2.{i + 1}"} for i, n in enumerate(nodes)}
    control: dict = {}
    interfaces: dict = {}
    verify_network(nodes, topo, spec, info, control, interfaces)
    return control, interfaces


@pytest.mark.parametrize("what,addrs,node,value", REPORTS, ids=[r[0] for r in REPORTS])
def test_interfaces_and_addresses_a_node_reports_are_validated(tmp_path, what, addrs, node, value):
    from harness.backends.ssh.transport import SshError

    # The stand-in nodes pass when they are not hostile: what fails below fails for its value only.
    control, interfaces = _verify(tmp_path, GOOD_ADDRS)
    assert [(i.name, i.address) for i in interfaces["h2"]] == [("enp0s8", "10.0.2.2")]
    assert control == {"h1": "mgmt0", "r": "mgmt0", "h2": "mgmt0"}
    with pytest.raises(SshError) as e:
        _verify(tmp_path, addrs)
    msg = one_line(str(e.value))
    assert msg.startswith(f"{node} (root@{node}.example:22): "), msg
    if value is not None:
        assert repr(value) in msg, msg


class UndoLedger:
    def __init__(self):
        self.undo: list[dict] = []

    def add_undo(self, node, argv, what):
        self.undo.append({"node": node, "argv": list(argv), "what": what})

    def drop_undo(self, entry):
        self.undo.remove(entry)


ROUTES = [
    ("device with a space", {"dev": "eth1 x", "gateway": "10.0.1.2"}, "eth1 x"),
    ("device with ..", {"dev": "..", "gateway": "10.0.1.2"}, ".."),
    ("no device", {"gateway": "10.0.1.2"}, None),
    ("gateway with words", {"dev": "eth1", "gateway": "10.0.1.2 mtu lock 1"}, "10.0.1.2 mtu lock 1"),
    ("gateway as a number", {"dev": "eth1", "gateway": 5}, 5),
]


@pytest.mark.parametrize("what,route,value", ROUTES, ids=[r[0] for r in ROUTES])
def test_routes_a_node_reports_never_reach_ip_route(what, route, value):
    """The device and gateway of `ip route get` go into `ip route add ... congctl` and the ledger's
    undo entry only when valid; otherwise one line names the node and the value, and nothing is added."""
    from harness.backends.ssh.provision import set_congestion_control
    from harness.backends.ssh.transport import SshError

    nodes = {"h1": FakeNetNode("h1", [], route), "h2": FakeNetNode("h2", [], {"dev": "enp0s8", "gateway": "10.0.2.1"})}
    interfaces = {"h1": [Interface("h1", "eth1", "10.0.1.1", 24, "r", "10.0.1.2", 0)],
                  "h2": [Interface("h2", "enp0s8", "10.0.2.2", 24, "r", "10.0.2.1", 1)]}
    spec = SimpleNamespace(congestion_control="cubic", workloads=[SimpleNamespace(host="h1", server="h2")])
    ledger = UndoLedger()
    with pytest.raises(SshError) as e:
        set_congestion_control(nodes, spec, interfaces, {"h1": {}, "h2": {}}, ledger)
    msg = one_line(str(e.value))
    assert msg.startswith("h1 (root@h1.example:22): "), msg
    if value is not None:
        assert repr(value) in msg, msg
    assert not any(a[:3] == ["ip", "route", "add"] for a in nodes["h1"].ran)
    assert [u["node"] for u in ledger.undo] in ([], ["h2"])
