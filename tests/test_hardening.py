"""Hostile or broken testbed nodes, and the run's ledger (issue 11, items 3 and 4). No root, no sshd.

A node's answers (the files it lists, the interfaces, addresses and routes it reports, the TCP
connections its agent finds) are never used unchecked: a file name becomes a local path only as a
plain name, and addresses, ports and interface names reach iptables input, `ip route` and the web
server's configuration only once valid. A refusal is one line naming the node and the value; what was
already recorded stays. The ledger is private whatever the umask, and `nestlab cleanup` acts only on
ledgers (and a ledger directory) that belong to the user running it and that nobody else may write.
"""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from paramiko import SFTPAttributes

from harness.topology import Interface, load_topology
from rundir.errors import UserError
from tests.support.env import REPO, write

# ---- item 3: what a node lists and reports ---------------------------------------------------------


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


def one_line(text: str) -> str:
    assert "\n" not in text, text
    return text


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
    backend.remote_db = None
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


RULE_VALUES = [
    ("source with iptables words", {"src": "10.0.1.1/0 -j ACCEPT"}, "10.0.1.1/0 -j ACCEPT"),
    ("source with a newline", {"src": "10.0.1.1\n-A FORWARD -j ACCEPT"}, "10.0.1.1\n-A FORWARD -j ACCEPT"),
    ("destination network", {"dst": "0.0.0.0/0"}, "0.0.0.0/0"),
    ("source as a number", {"src": 167772417}, 167772417),
    ("port 0", {"sport": 0}, 0),
    ("port 65536", {"dport": 65536}, 65536),
    ("negative port", {"sport": -1}, -1),
    ("port as text", {"dport": "80 -j ACCEPT"}, "80 -j ACCEPT"),
    ("port as a boolean", {"sport": True}, True),
    ("port as a float", {"sport": 80.5}, 80.5),
]
CONN = {"inode": 7, "src": "10.0.1.1", "sport": 40000, "dst": "10.0.2.2", "dport": 80}


@pytest.mark.parametrize("what,change,value", RULE_VALUES, ids=[r[0] for r in RULE_VALUES])
def test_iptables_rules_take_only_addresses_and_ports(what, change, value):
    from harness.faults.iptables import ip_drop_rule, tcp_drop_rule

    # Well-formed rules are what they always were.
    assert tcp_drop_rule("x1", "t", CONN).specs == [
        '-p tcp -s 10.0.1.1/32 --sport 40000 -d 10.0.2.2/32 --dport 80 -m comment --comment "t" -j DROP',
        '-p tcp -s 10.0.2.2/32 --sport 80 -d 10.0.1.1/32 --dport 40000 -m comment --comment "t" -j DROP']
    assert ip_drop_rule("x1", "t", "10.0.1.1").specs == ['-s 10.0.1.1/32 -m comment --comment "t" -j DROP',
                                                         '-d 10.0.1.1/32 -m comment --comment "t" -j DROP']
    with pytest.raises(UserError) as e:
        tcp_drop_rule("x1", "nestlab:r:f1", {**CONN, **change})
    msg = one_line(str(e.value))
    assert "x1" in msg and repr(value) in msg, msg
    if "src" in change or "dst" in change:
        address = change.get("src", change.get("dst"))
        with pytest.raises(UserError) as e:
            ip_drop_rule("x1", "nestlab:r:f1", address)
        assert "x1" in one_line(str(e.value)) and repr(address) in str(e.value)


@pytest.mark.parametrize("conn", [
    {**CONN, "src": "10.0.1.1/0 -j ACCEPT"},
    {**CONN, "sport": 70000},
    {**CONN, "module_key": "forged"},      # would clash with the target's own fields
    ["10.0.1.1", 40000],
], ids=["bad source", "bad port", "extra key", "not a mapping"])
def test_a_connection_the_monitored_host_reports_is_checked_before_a_tcp_drop_uses_it(conn):
    """tcp_drop picks one of the connections the node agent reports on the workload's host: a
    malformed one is refused with one line naming that host, before any rule is made."""
    from harness.faults.tcp_drop import TcpDrop

    proc = SimpleNamespace(pid=4242)
    w = SimpleNamespace(host="site1n1", server="site2n1")
    backend = SimpleNamespace(address=lambda n: "10.0.2.2", tcp_connections=lambda host, pid: [conn])
    env = SimpleNamespace(shared={}, spec=SimpleNamespace(workloads=[w]), backend=backend, rng=random.Random(1),
                          workloads=SimpleNamespace(live=lambda i: [(SimpleNamespace(index=0), proc)]))
    target = SimpleNamespace(workload=0, instance=None)
    fault = SimpleNamespace(target=target, at="x1")
    with pytest.raises(UserError) as e:
        TcpDrop(env)._target(fault)
    msg = one_line(str(e.value))
    assert msg.startswith("site1n1: "), msg


class FakeServerNode:
    def __init__(self, workdir: Path):
        self.name = "site2n1"
        self.workdir = str(workdir)
        self.ran: list[list[str]] = []
        self.inputs: list[str | None] = []

    def run(self, argv, check=True, timeout=30.0, input=None, sudo=True):
        self.ran.append([str(a) for a in argv])
        self.inputs.append(input)
        return subprocess.CompletedProcess(argv, 0, "", "")

    def log_path(self, log: Path) -> str:
        return f"{self.workdir}/logs/{log.name}"

    def start(self, argv, log, env=None):
        raise AssertionError("no server may start with a refused address")


@pytest.mark.parametrize("address", ['10.0.2.2"\nserver.modules += ("mod_cgi")', "10.0.2.2/24", "", "localhost"])
def test_the_web_server_configuration_takes_only_an_address(tmp_path, address):
    from harness.workloads import Workloads

    w = SimpleNamespace(kind="wget", host="site1n1", server="site2n1", file_size=1e6, instances=1)
    spec = SimpleNamespace(workloads=[w], duration=10)
    node = FakeServerNode(tmp_path)
    wl = Workloads(spec, {"site2n1": node}, {"site2n1": address, "site1n1": "10.0.1.1"}, tmp_path / "logs")
    try:
        with pytest.raises(UserError) as e:
            wl.start_servers()
    finally:
        wl.remove_files()
    msg = one_line(str(e.value))
    assert msg.startswith("site2n1: ") and repr(address) in msg, msg
    assert node.ran == [], "something was done on the node with a refused address"


# ---- item 4: the ledger ---------------------------------------------------------------------------

@pytest.fixture
def ledger_dir(tmp_path, monkeypatch):
    import harness.ledger

    d = tmp_path / "ledgers"
    monkeypatch.setattr(harness.ledger, "LEDGER_DIR", d)
    return d


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.mark.parametrize("mask", [0o000, 0o022])
def test_the_ledger_is_private_whatever_the_umask(ledger_dir, mask):
    from harness.ledger import Ledger

    old = os.umask(mask)
    try:
        ledger = Ledger("t-run", Path("/nonexistent"))
        ledger.add_process(os.getpid(), "me")   # written again
        assert _mode(ledger_dir) == 0o700
        assert _mode(ledger.path) == 0o600
        assert [p.name for p in ledger_dir.iterdir()] == ["t-run.json"]   # no temporary file is left
        ledger.close()
    finally:
        os.umask(old)


def test_a_ledger_directory_others_may_write_or_do_not_own_is_refused(ledger_dir, monkeypatch):
    from harness.ledger import Ledger

    ledger_dir.mkdir(mode=0o700)
    ledger_dir.chmod(0o777)
    with pytest.raises(UserError) as e:
        Ledger("t-run", Path("/nonexistent"))
    assert str(ledger_dir) in one_line(str(e.value)) and "777" in str(e.value)
    assert not list(ledger_dir.iterdir())
    ledger_dir.chmod(0o700)
    monkeypatch.setattr(os, "geteuid", lambda: 4242)   # as if another user ran it
    with pytest.raises(UserError) as e:
        Ledger("t-run", Path("/nonexistent"))
    assert str(ledger_dir) in one_line(str(e.value)) and "4242" in str(e.value)
    assert not list(ledger_dir.iterdir())


def _cleanup(ledger_dir: Path, euid: int | None = None) -> subprocess.CompletedProcess:
    """`nestlab cleanup` on ledger_dir, in a process of its own (as uid `euid`, as far as the
    harness can tell)."""
    code = ("import os, sys\n" + (f"os.geteuid = lambda: {euid}\n" if euid is not None else "")
            + "from nestlab.cli import nestlab_main\nsys.exit(nestlab_main(['cleanup']))\n")
    env = {**os.environ, "NESTLAB_LEDGER_DIR": str(ledger_dir), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=60)


def _leftover_ledger(ledger_dir: Path, tmp_path: Path, run_id: str) -> tuple[Path, Path]:
    """A ledger of a dead runner that lists a scratch directory; returns (ledger, directory)."""
    scratch = tmp_path / f"scratch-{run_id}"
    scratch.mkdir()
    path = ledger_dir / f"{run_id}.json"
    path.write_text(json.dumps({"run_id": run_id, "run_dir": str(tmp_path / "no-run"), "runner_pid": -1,
                                "runner_start": None, "processes": [], "links": [], "paths": [str(scratch)]}))
    path.chmod(0o600)
    return path, scratch


CLEANUP_CASES = ["group-writable ledger", "world-writable ledger", "symlinked ledger", "ledger of another user"]


@pytest.mark.parametrize("case", CLEANUP_CASES)
def test_cleanup_refuses_a_ledger_it_cannot_trust_and_leaves_it_alone(tmp_path, case):
    ledger_dir = tmp_path / "ledgers"
    ledger_dir.mkdir(mode=0o700)
    good, good_scratch = _leftover_ledger(ledger_dir, tmp_path, "good")
    bad, bad_scratch = _leftover_ledger(ledger_dir, tmp_path, "bad")
    if case == "group-writable ledger":
        bad.chmod(0o620)
    elif case == "world-writable ledger":
        bad.chmod(0o666)
    elif case == "symlinked ledger":
        real = tmp_path / "elsewhere.json"
        bad.rename(real)
        bad.symlink_to(real)
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(bad, 65534, 65534)
    r = _cleanup(ledger_dir)
    refusals = [line for line in r.stderr.splitlines() if str(bad) in line]
    assert len(refusals) == 1, r.stderr
    assert r.returncode != 0
    assert os.path.lexists(bad) and bad_scratch.is_dir()         # left alone
    assert not good.exists() and not good_scratch.exists()       # the trusted one is cleaned up


@pytest.mark.parametrize("case", ["group-writable directory", "world-writable directory", "symlinked directory",
                                  "directory of another user"])
def test_cleanup_refuses_a_ledger_directory_it_cannot_trust(tmp_path, case):
    ledger_dir = tmp_path / "ledgers"
    ledger_dir.mkdir(mode=0o700)
    ledger, scratch = _leftover_ledger(ledger_dir, tmp_path, "r1")
    euid = None
    where = ledger_dir
    if case == "group-writable directory":
        ledger_dir.chmod(0o770)
    elif case == "world-writable directory":
        ledger_dir.chmod(0o1777)
    elif case == "symlinked directory":
        where = tmp_path / "link"
        where.symlink_to(ledger_dir)
    else:
        euid = 4242
    r = _cleanup(where, euid)
    assert r.returncode == 2, r
    assert len(r.stderr.strip().splitlines()) == 1 and str(where) in r.stderr, r.stderr
    assert ledger.exists() and scratch.is_dir()


# ----------------------------------------------------------------------------- signal mask


@pytest.mark.root
def test_a_program_started_with_signals_held_still_obeys_sigterm(tmp_path):
    """The runner starts workloads and the collector with SIGTERM blocked (signals_held), and a
    blocked mask survives exec: the program must get an unblocked one, or teardown's SIGTERM is
    ignored and every stop waits out its timeout before a SIGKILL (the collector's last write lost)."""
    import re
    import signal

    from harness.backends.mininet import MininetNode
    from harness.ledger import signals_held

    node = MininetNode("h", SimpleNamespace(pid=os.getpid()), None)   # mnexec -a: our own namespaces
    with signals_held():
        proc = node.start(["sleep", "30"], tmp_path / "sleep.log")
    status = Path(f"/proc/{proc.pid}/status").read_text()
    blocked = int(re.search(r"^SigBlk:\s*([0-9a-f]+)", status, re.M).group(1), 16)
    assert not blocked & (1 << (signal.SIGTERM - 1)), status
    node.stop(proc, timeout=10.0)
    assert proc.handle.returncode == -signal.SIGTERM   # ended by the SIGTERM, not the SIGKILL after it
