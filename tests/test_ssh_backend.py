"""The SSH backend against real sshd servers: the same spec on "testbed nodes" over SSH.

The testbed is made on this machine the way Mininet tests its own Emulab scripts: the dumbbell built
with Mininet (the data plane the testbed would have), a management link from a network namespace of
the test's own to every node, and a real sshd in each node, with its own config, host key and
authorized key in a temporary directory (root logs in with a generated key). Nothing is added to the
machine outside namespaces the test makes itself:

    ctl namespace (the runner runs here)           node namespaces (Mininet hosts)
    m-site1n1 10.255.1.1/24  <------ veth ------>  mgmt0 10.255.1.2/24, sshd on port 22
    m-site1n2 10.255.2.1/24  <------ veth ------>  mgmt0 10.255.2.2/24, sshd
    ...                                            (7 nodes: the hosts and the routers x1, x2)

The runner (run-experiment, in ctl) reaches each node's sshd over that node's management link, as it
would reach Emulab nodes over their control network, and finds the data-plane interfaces the topology
names (or, for some nodes, the ones holding the derived addresses). The run directory it brings back
is compared with a Mininet run of the same spec; a wrong host key, an unknown host and an unreachable
node end the run with one line and leave nothing behind; a SIGKILLed runner is cleaned up by
`nestlab cleanup`, which also brings back what the collector had recorded.

The first tests need neither root nor the testbed: SSH topology validation, connection settings,
the command server and the node agent, run locally.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.backends.mininet import MininetBackend
from harness.ledger import LEDGER_DIR
from harness.runner import run_experiment
from harness.topology import load_topology
from rundir.db import FORMAT_VERSION
from tests.support.env import REPO, VENV_BIN, leftovers, run_id, write


def e2e(fn):
    """Tests that build the sshd testbed: root, and slow."""
    return pytest.mark.root(pytest.mark.slow(fn))


DUMBBELL = REPO / "topologies" / "dumbbell.yaml"
SPEC = f"""\
name: e2e_ssh
topology: {DUMBBELL}
duration: {{duration}}
seed: 3
monitor: site1n1
workloads:
  - {{{{kind: wget, host: site1n1, server: site2n1, file_size: 200MB}}}}
  - {{{{kind: iperf, host: site1n1, server: site2n2, direction: upload}}}}
faults:
  - {{{{kind: tcp_drop, at: x1, target: {{{{workload: 0}}}}, schedule: {{{{at: [3s], duration: 2s}}}}}}}}
  - {{{{kind: app_pause, target: {{{{workload: 1}}}}, schedule: {{{{at: [6s], duration: 1.5s}}}}}}}}
  - {{{{kind: ip_drop, at: x1, schedule: {{{{at: [10s], duration: 2s}}}}}}}}
"""

SSHD = "/usr/sbin/sshd"
SSHD_CONFIG = """\
Port 22
ListenAddress {address}
HostKey {hostkey}
PidFile none
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile {authorized}
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
MaxStartups 100:30:200
Subsystem sftp internal-sftp
LogLevel ERROR
"""


# ---- without the testbed ------------------------------------------------------------------------

SSH_TOPO = """\
name: tiny-ssh
ssh: {user: alice, key: keys/id_ed25519, known_hosts: known_hosts, connect_timeout: 2s}
nodes:
  h1: {ssh: {host: 192.0.2.1, interfaces: [eth1]}}
  r:  {router: true, ssh: {host: 192.0.2.2, port: 2222, user: root, interfaces: [eth1, eth2]}}
  h2: {ssh: {host: h2.example.org}}
links:
  - {a: h1, b: r}
  - {a: r, b: h2}
"""


def test_ssh_topology_resolves_settings_relative_to_the_topology_file(tmp_path):
    from harness.backends.ssh.transport import ssh_params

    topo = load_topology(write(tmp_path, "tiny.yaml", SSH_TOPO))
    assert topo.backend == "ssh"
    p = ssh_params(topo)
    assert p["h1"].user == "alice" and p["h1"].sudo and p["h1"].port == 22 and p["h1"].timeout == 2.0
    assert p["h1"].key == str(tmp_path / "keys" / "id_ed25519")
    assert p["h1"].known_hosts == str(tmp_path / "known_hosts")
    assert p["r"].user == "root" and not p["r"].sudo and p["r"].port == 2222
    assert p["h2"].host == "h2.example.org" and p["h2"].python == "python3"
    assert load_topology(DUMBBELL).backend == "mininet"
    example = load_topology(REPO / "topologies" / "dumbbell-ssh.yaml")   # the documented example
    dumbbell = load_topology(DUMBBELL)
    assert example.backend == "ssh" and example.spec.links == dumbbell.spec.links
    assert list(example.spec.nodes) == list(dumbbell.spec.nodes)


@pytest.mark.parametrize("change,where,message", [
    ("  h2: {ssh: {host: h2.example.org}}", "  h2: {}", ("tiny.yaml:6", "nodes.h2", "has no 'ssh:")),
    ("interfaces: [eth1, eth2]", "interfaces: [eth1]", ("tiny.yaml:5", "nodes.r.ssh.interfaces", "2 link(s)")),
    ("interfaces: [eth1, eth2]", "interfaces: [eth1, eth1]", ("tiny.yaml:5", "interfaces", "repeat")),
    ("interfaces: [eth1, eth2]", "interfaces: [eth1, 'a b']", ("tiny.yaml:5", "interfaces", "")),
    ("port: 2222", "port: 0", ("tiny.yaml:5", "nodes.r.ssh.port", "")),
])
def test_ssh_topology_mistakes_are_one_line_naming_file_line_and_field(tmp_path, change, where, message):
    from rundir.errors import UserError

    path = write(tmp_path, "tiny.yaml", SSH_TOPO.replace(change, where))
    with pytest.raises(UserError) as e:
        load_topology(path)
    text = str(e.value)
    assert "\n" not in text and all(m in text for m in message), text


def test_node_server_runs_spawns_reports_exits_and_kills_only_its_own(tmp_path):
    from harness.backends.ssh.node import SERVER_SOURCE

    srv = subprocess.Popen([sys.executable, "-u", "-c", SERVER_SOURCE], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ask(**q):
        srv.stdin.write(json.dumps(q) + "\n")
        srv.stdin.flush()
        return json.loads(srv.stdout.readline())

    try:
        a = ask(op="run", argv=["sh", "-c", 'cat; echo "$1" >&2; exit 3', "sh", "x y"], input="in", id=1)
        assert a == {"rc": 3, "out": "in", "err": "x y\n", "id": 1}   # argv, never a shell string
        assert ask(op="run", argv=["no-such-program"], id=2)["rc"] == 127
        assert ask(op="run", argv=["sleep", "5"], timeout=0.2, id=3)["rc"] is None
        log = tmp_path / "p.log"
        a = ask(op="spawn", argv=["sh", "-c", "echo out; exec sleep 30"], cwd=str(tmp_path), log=str(log),
                env={"X": "1"}, id=4)
        pid, start = a["pid"], a["start"]
        assert os.getpgid(pid) == pid   # its own process group
        deadline = time.monotonic() + 10
        while log.read_text() != "out\n" and time.monotonic() < deadline:   # its output goes to its log
            time.sleep(0.02)
        assert ask(op="kill", pid=pid, start="1", sig=15, id=5) == {"sent": False, "id": 5}   # not that process
        assert ask(op="kill", pid=pid, start="1", sig=15, group=False, id=8) == {"sent": False, "id": 8}
        assert ask(op="kill", pid=pid, start=start, sig=15, id=6)["sent"]
        assert srv.stderr.readline().strip() == f"exit {pid} -15"
        assert log.read_text() == "out\n"   # and nothing after the kill
        assert "error" in ask(op="nope", id=7)
    finally:
        srv.stdin.close()
        srv.wait(5)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_node_server_sweeps_a_group_whose_leader_exited_only_if_it_knows_the_group(tmp_path):
    """A shell that leaves a child behind and exits: the group lives on without its leader. The server
    that spawned it still kills the group; another server (which never saw the leader) refuses."""
    from harness.backends.ssh.node import SERVER_SOURCE

    def server():
        return subprocess.Popen([sys.executable, "-u", "-c", SERVER_SOURCE], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ask(srv, **q):
        srv.stdin.write(json.dumps(q) + "\n")
        srv.stdin.flush()
        return json.loads(srv.stdout.readline())

    spawner, other = server(), server()
    log = tmp_path / "p.log"
    child = None
    try:
        a = ask(spawner, op="spawn", argv=["sh", "-c", "sleep 60 & echo $!"], log=str(log), id=1)
        pid, start = a["pid"], a["start"]
        assert spawner.stderr.readline().strip() == f"exit {pid} 0"   # the leader is gone
        assert _wait_for(lambda: log.read_text().strip().isdigit())
        child = int(log.read_text())
        assert os.getpgid(child) == pid and _alive(child)
        assert ask(other, op="kill", pid=pid, start=start, sig=9, id=1)["sent"] is False
        assert ask(spawner, op="kill", pid=pid, start="1", sig=9, id=2)["sent"] is False   # not that group
        assert ask(spawner, op="kill", pid=pid, start=start, sig=0, id=3)["sent"] is True  # something left
        assert ask(spawner, op="kill", pid=pid, start=start, sig=9, id=4)["sent"] is True
        assert _wait_for(lambda: not _alive(child)), "the group's member survived"
        assert ask(spawner, op="kill", pid=pid, start=start, sig=0, id=5)["sent"] is False  # nothing left
    finally:
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)
        for srv in (spawner, other):
            srv.stdin.close()
            srv.wait(5)


class LocalChannel:
    """What SshNode needs of a paramiko session channel, for a command run here (its shell string)."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.closed = False

    def exec_command(self, command: str) -> None:
        self.proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)

    def fileno(self) -> int:
        return self.proc.stdout.fileno()

    def _ready(self, f) -> bool:
        return bool(select.select([f], [], [], 0)[0])

    def recv_ready(self) -> bool:
        return self._ready(self.proc.stdout)

    def recv_stderr_ready(self) -> bool:
        return self._ready(self.proc.stderr)

    def recv(self, n: int) -> bytes:
        return os.read(self.proc.stdout.fileno(), n)

    def recv_stderr(self, n: int) -> bytes:
        return os.read(self.proc.stderr.fileno(), n)

    def sendall(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def exit_status_ready(self) -> bool:
        return self.proc.poll() is not None

    def shutdown_write(self) -> None:
        self.proc.stdin.close()

    def close(self) -> None:   # as sshd ends a session the client closed: the server goes
        if not self.closed:
            self.closed = True
            self.proc.kill()
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                f.close()


class LocalConnection:
    def __init__(self):
        from harness.backends.ssh.transport import SshParams

        self.p = SshParams(node="n1", host="local", port=22, user="root", key=None, known_hosts="",
                           timeout=5.0, sudo=False, python=sys.executable)
        self.channels: list[LocalChannel] = []

    def open(self, long_lived: bool = False) -> LocalChannel:
        self.channels.append(LocalChannel())
        return self.channels[-1]


@pytest.fixture
def local_node(tmp_path):
    """An SshNode whose command server runs here (no sshd)."""
    from harness.backends.ssh.node import SshNode

    (tmp_path / "logs").mkdir()
    node = SshNode("n1", LocalConnection(), None, str(tmp_path))
    node.use_server = True
    yield node
    node.close()
    for chan in node.conn.channels:
        chan.close()


def test_ssh_node_stop_sweeps_the_group_after_its_leader_exited(local_node, tmp_path):
    proc = local_node.start(["sh", "-c", "sleep 60 & echo $!"], tmp_path / "logs" / "p.log")
    assert _wait_for(lambda: proc.poll() is not None) and proc.poll() == 0   # reported by the server
    child = int((tmp_path / "logs" / "p.log").read_text())
    try:
        assert _alive(child)
        local_node.stop(proc)
        assert _wait_for(lambda: not _alive(child), 5), "stop left the group's member running"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def test_ssh_node_ends_what_a_replaced_command_server_started(local_node, tmp_path):
    """A command server that stops answering is replaced; what it started can no longer be watched:
    it is killed, and polling it ends (exit code unknown, -1) instead of waiting forever."""
    proc = local_node.start(["sleep", "60"], tmp_path / "logs" / "p.log")
    try:
        assert proc.poll() is None
        with pytest.raises(RuntimeError, match="command server stopped"):
            local_node._request({"op": "run", "argv": ["sleep", "1"], "timeout": 5}, timeout=0.2)
        assert local_node.run(["echo", "hi"]).stdout == "hi\n"   # a new server answers
        assert proc.poll() == -1
        assert _wait_for(lambda: not _alive(proc.pid), 5), "the old server's process was left running"
        assert len(local_node.conn.channels) == 2
    finally:
        if _alive(proc.pid):
            os.kill(proc.pid, signal.SIGKILL)


class PathLedger:
    """The part of a Ledger that records remote paths."""

    def __init__(self):
        self.paths: list[tuple[str, str]] = []

    def add_remote_path(self, node: str, path: str) -> None:
        self.paths.append((node, path))

    def drop_remote_path(self, node: str, path: str) -> None:
        self.paths.remove((node, path))


def test_scratch_directories_are_made_new_never_taken_over(local_node, tmp_path, monkeypatch):
    """A node's scratch directory (and the interceptor's in /dev/shm) is created, mode 700; one that
    exists already (another user could have made it, in /tmp) is refused with one line naming the node
    and the path, and so is one that does not belong to the user the commands run as."""
    from harness.backends.ssh.provision import make_private_dir
    from harness.backends.ssh.transport import SshError

    local_node.ledger = ledger = PathLedger()
    fresh = tmp_path / "fresh"
    make_private_dir(local_node, str(fresh))
    assert fresh.is_dir() and (fresh.stat().st_mode & 0o777) == 0o700
    assert ledger.paths == [("n1", str(fresh))]
    taken = tmp_path / "taken"
    taken.mkdir(mode=0o777)
    (tmp_path / "link").symlink_to(taken)
    for path in (taken, tmp_path / "link"):
        with pytest.raises(SshError) as e:
            make_private_dir(local_node, str(path))
        assert str(e.value).startswith(f"n1 (root@local:22): scratch directory {path}: it exists already")
        assert ledger.paths == [("n1", str(fresh))]   # not recorded: not the run's to remove
    # Made, but not owned by the user commands run as (here: `id` says another uid).
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "id").write_text("#!/bin/sh\necho 12345\n")
    (fake / "id").chmod(0o755)
    local_node.close()   # the next command server starts with the fake id first on its PATH
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    with pytest.raises(SshError, match=r"n1 \(root@local:22\): scratch directory .*/other: it is not a "
                                       r"directory owned by uid 12345"):
        make_private_dir(local_node, str(tmp_path / "other"))
    assert ledger.paths == [("n1", str(fresh))]


def test_ssh_node_signal_checks_the_start_time_without_group_too(local_node, tmp_path):
    proc = local_node.start(["sleep", "60"], tmp_path / "logs" / "p.log")
    try:
        real = proc.start_time
        proc.start_time = "1"   # as if the pid now belonged to another process
        local_node.signal(proc, signal.SIGKILL, group=False)
        time.sleep(0.2)
        assert proc.poll() is None and _alive(proc.pid)
        proc.start_time = real
        local_node.signal(proc, signal.SIGKILL, group=False)
        assert _wait_for(lambda: proc.poll() is not None) and proc.poll() == -signal.SIGKILL
    finally:
        if _alive(proc.pid):
            os.kill(proc.pid, signal.SIGKILL)


def test_agent_reports_connections_and_reads_run_db_locally(tmp_path):
    import socket

    def agent(*args):
        r = subprocess.run([sys.executable, "-m", "harness.agent", *map(str, args)], capture_output=True,
                           text=True, cwd=REPO)
        return r.returncode, json.loads(r.stdout)

    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    try:
        code, conns = agent("conns", os.getpid())
        assert code == 0
        mine = [c for c in conns if (c["src"], c["sport"]) == client.getsockname()]
        assert mine and mine[0]["dport"] == server.getsockname()[1]
        assert mine[0]["inode"] == os.fstat(client.fileno()).st_ino
    finally:
        for s in (client, peer, server):
            s.close()
    db = tmp_path / "run.db"
    assert agent("initdb", db) == (0, True)
    assert agent("count", db) == (0, 0)
    assert agent("checkpoint", db) == (0, True)
    code, out = agent("pause", tmp_path, 1)
    assert code == 1 and "no interceptor file" in out["error"]
    assert agent("bogus")[0] == 2


class LocalNode:
    """A stand-in for a node: runs argv here, with PATH from the test (fake programs first)."""

    name = "local"

    def __init__(self, path: str):
        self.env = {**os.environ, "PATH": path}

    def run(self, argv, check=True, timeout=30.0, input=None, sudo=True):
        return subprocess.run([str(a) for a in argv], input=input, capture_output=True, text=True,
                              timeout=timeout, env=self.env, check=check)


def test_cleanups_chain_undo_makes_the_same_iptables_calls_as_firewall_teardown(tmp_path):
    """The ledger's undo entry for the fault chain (run by `nestlab cleanup`) and Firewall.teardown
    remove the chain with the same iptables calls; here the chain is hooked into FORWARD twice."""
    from harness.faults import Firewall, chain_teardown_argv

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "iptables"   # logs its arguments; `-D FORWARD` succeeds twice, then fails
    fake.write_text('#!/bin/sh\necho "$*" >> "$LOG"\ncase "$*" in *"-D FORWARD"*)\n'
                    '  n=$(cat "$LOG.n" 2>/dev/null || echo 0); echo $((n + 1)) > "$LOG.n"; [ "$n" -lt 2 ];;\n'
                    'esac\n')
    fake.chmod(0o755)
    calls = {}
    for how in ("teardown", "undo"):
        log = tmp_path / f"{how}.log"
        node = LocalNode(f"{bin_dir}:{os.environ['PATH']}")
        node.env["LOG"] = str(log)
        if how == "teardown":
            Firewall(node).teardown()
        else:
            node.run(chain_teardown_argv())
        calls[how] = log.read_text().splitlines()
    assert calls["teardown"] == calls["undo"]
    assert calls["undo"] == ["-w -D FORWARD -j NESTLAB"] * 3 + ["-w -F NESTLAB", "-w -X NESTLAB"]


def test_failed_apt_install_names_aptgets_last_line(tmp_path):
    from types import SimpleNamespace

    from harness.backends.ssh.provision import apt_install
    from harness.backends.ssh.transport import SshError

    calls = []

    def run(argv, check=True, timeout=30.0):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 100, "", "W: something\nE: Unable to locate package iperf\n")

    node = SimpleNamespace(run=run, p=SimpleNamespace(where="h1 (alice@192.0.2.1:22)"))
    with pytest.raises(SshError) as e:
        apt_install(node, ["iperf"])
    assert str(e.value) == ("h1 (alice@192.0.2.1:22): apt-get install iperf failed: "
                            "E: Unable to locate package iperf")
    assert [a[2] for a in calls] == ["apt-get"] * 3   # install, update, install again


# ---- the testbed ---------------------------------------------------------------------------------

def _run(argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


# The sysctls a run sets on a node (ECMP and a fabric's routers, a fabric's hosts), undone at its end.
RUN_SYSCTLS = ("net.ipv4.fib_multipath_hash_policy", "net.ipv4.fib_multipath_hash_fields",
               "net.ipv4.fib_multipath_hash_seed", "net.ipv4.tcp_early_retrans")


class SshNet:
    """The testbed: Mininet nodes, a management namespace, one sshd per node."""

    def __init__(self, topology: Path, tmp: Path):
        self.topo = load_topology(topology)
        self.tmp = tmp
        self.ctl = f"nestlab-test-ctl-{os.getpid()}"
        self.backend: MininetBackend | None = None
        self.sshd: dict[str, subprocess.Popen] = {}
        self.mgmt: dict[str, str] = {}                     # node -> its management address
        self.host_keys: dict[str, str] = {}                # node -> "type base64"
        self.made_run_sshd = False

    def start(self) -> SshNet:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.backend = MininetBackend(self.topo, None, "cubic")
        self.backend.preflight()
        self.backend.build()
        _run(["ip", "netns", "add", self.ctl])
        _run(["ip", "-n", self.ctl, "link", "set", "lo", "up"])
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.tmp / "id_ed25519")])
        shutil.copy(self.tmp / "id_ed25519.pub", self.tmp / "authorized_keys")
        if not os.path.isdir("/run/sshd"):   # sshd's privilege separation directory (normally made by systemd)
            os.makedirs("/run/sshd", mode=0o755)
            self.made_run_sshd = True
        for k, name in enumerate(self.topo.spec.nodes, start=1):
            node = self.backend.node(name)
            ctl_if, addr = f"m-{name}"[:15], f"10.255.{k}.2"
            _run(["ip", "link", "add", ctl_if, "netns", self.ctl, "type", "veth", "peer", "name", "mgmt0",
                  "netns", str(node.pid)])
            _run(["ip", "-n", self.ctl, "addr", "add", f"10.255.{k}.1/24", "dev", ctl_if])
            _run(["ip", "-n", self.ctl, "link", "set", ctl_if, "up"])
            node.run(["ip", "addr", "add", f"{addr}/24", "dev", "mgmt0"])
            node.run(["ip", "link", "set", "mgmt0", "up"])
            self.mgmt[name] = addr
            key = self.tmp / f"hostkey-{name}"
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)])
            self.host_keys[name] = " ".join(Path(f"{key}.pub").read_text().split()[:2])
            conf = self.tmp / f"sshd-{name}.conf"
            conf.write_text(SSHD_CONFIG.format(address=addr, hostkey=key, authorized=self.tmp / "authorized_keys"))
            with open(self.tmp / f"sshd-{name}.log", "wb") as log:
                self.sshd[name] = subprocess.Popen(["mnexec", "-a", str(node.pid), SSHD, "-D", "-e", "-f", str(conf)],
                                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.write_known_hosts(self.tmp / "known_hosts")
        for name in self.topo.spec.nodes:
            self._wait_listening(name)

    def _wait_listening(self, name: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.in_node(name, ["ss", "-ltnH", "sport = :22"]).stdout.strip():
                return
            if self.sshd[name].poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"sshd in {name} did not start: {(self.tmp / f'sshd-{name}.log').read_text()}")

    def in_node(self, name: str, argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(["mnexec", "-a", str(self.backend.node(name).pid), *argv], capture_output=True, text=True)

    # -- what the runner is given --------------------------------------------------------------
    def write_known_hosts(self, path: Path, keys: dict[str, str | None] | None = None) -> Path:
        keys = {**self.host_keys, **(keys or {})}
        path.write_text("".join(f"{self.mgmt[n]} {keys[n]}\n" for n in self.topo.spec.nodes if keys.get(n)))
        return path

    def topology_file(self, path: Path, known_hosts: Path | None = None, hosts: dict[str, str] | None = None,
                      connect_timeout: str = "3s") -> Path:
        """The dumbbell placed on the sshd nodes. Most nodes name their data interfaces; x2 and
        site2n2 leave them to be found by the addresses nestlab derives."""
        spec = self.topo.spec.model_dump(mode="json", exclude_none=True)
        spec["name"] = f"{spec['name']}-ssh"
        spec["ssh"] = {"user": "root", "key": str(self.tmp / "id_ed25519"),
                       "known_hosts": str(known_hosts or self.tmp / "known_hosts"),
                       "connect_timeout": connect_timeout, "python": "/usr/bin/python3"}
        for link in spec["links"]:
            link.pop("bw", None)   # a testbed's links are what they are; Mininet shaped them already
        for name, node in spec["nodes"].items():
            node["ssh"] = {"host": (hosts or {}).get(name, self.mgmt[name])}
            if name not in ("x2", "site2n2"):
                node["ssh"]["interfaces"] = [i.name for i in self.topo.interfaces[name]]
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    def runner(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """run-experiment (or another entry point) inside the management namespace."""
        return subprocess.run(self.runner_argv(*args), capture_output=True, text=True, timeout=timeout, cwd=REPO)

    def runner_argv(self, *args: str, program: str = "run-experiment") -> list[str]:
        return ["ip", "netns", "exec", self.ctl, str(VENV_BIN / program), *args]

    # -- what a run may leave on the nodes -----------------------------------------------------
    def node_state(self) -> dict[str, str]:
        """Per node: its routes, its iptables rules and the sysctls a run may set (what a run changes
        inside a node)."""
        out = {}
        for name in self.topo.spec.nodes:
            routes = self.in_node(name, ["ip", "route", "show"]).stdout
            rules = self.in_node(name, ["iptables", "-w", "-S"]).stdout
            sysctls = self.in_node(name, ["sysctl", "-e", *RUN_SYSCTLS]).stdout
            out[name] = routes + rules + sysctls
        return out

    def stop(self) -> None:
        for proc in self.sshd.values():
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in self.sshd.values():
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.sshd = {}
        if self.backend is not None:
            self.backend.teardown()   # the node ends of the management veths go with the namespaces
            self.backend = None
        subprocess.run(["ip", "netns", "del", self.ctl], capture_output=True)
        if self.made_run_sshd:
            shutil.rmtree("/run/sshd", ignore_errors=True)
            self.made_run_sshd = False


def _netns(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def processes_in(namespaces: set[int]) -> dict[int, str]:
    """Processes in the given network namespaces (the test's own: others may run Mininet meanwhile)."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _netns(entry.name) in namespaces:
            try:
                cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            except OSError:
                continue
            if cmd:
                out[int(entry.name)] = cmd[:200]
    return out


def run_traces(run_id: str) -> list[str]:
    """What a run with this id could leave on the nodes' (shared) filesystem, and its ledger."""
    found = [str(p) for base in ("/tmp", "/dev/shm") for p in Path(base).glob(f"nestlab-{run_id}-*")]
    ledger = LEDGER_DIR / f"{run_id}.json"
    return found + ([str(ledger)] if ledger.exists() else [])


def sshd_testbed(topology, tmp_path_factory):
    """An sshd testbed of `topology` for a module's tests (yielded), then stopped: nothing may be left
    in its namespaces, its control namespace gone, no leftover naming it. The SSH service e2e's too."""
    tmp = tmp_path_factory.mktemp("sshnet")
    tmp.chmod(0o755)
    net = SshNet(topology, tmp).start()
    namespaces = {_netns(net.backend.node(n).pid) for n in net.topo.spec.nodes}
    namespaces.add(os.stat(f"/run/netns/{net.ctl}").st_ino)
    try:
        yield net
    finally:
        net.stop()
        time.sleep(0.2)
        left = processes_in(namespaces)
        assert not left, f"processes left in the test's namespaces: {left}"
        assert net.ctl not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not [line for line in leftovers() if str(net.tmp) in line or net.ctl in line]


def nodes_left_as_found(net, grace: float):
    """Around one test: no process of its own left in any node (only the Mininet shells and the sshd
    listeners; sshd's session processes get `grace` seconds to end after the runner's connections
    close), the same routes and firewall rules."""
    namespaces = {_netns(net.backend.node(n).pid) for n in net.topo.spec.nodes}
    before, state = processes_in(namespaces), net.node_state()
    yield
    deadline = time.monotonic() + grace
    while True:
        left = {p: c for p, c in processes_in(namespaces).items() if p not in before}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"the run left processes on the nodes: {left}"
    assert net.node_state() == state, "the run changed routes or firewall rules on the nodes"


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    yield from sshd_testbed(DUMBBELL, tmp_path_factory)


@pytest.fixture
def clean_nodes(net):
    """Each test leaves the nodes as it found them."""
    yield from nodes_left_as_found(net, grace=5)


def _tables(db: sqlite3.Connection) -> dict[str, list[str]]:
    names = [n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return {n: [c[1] for c in db.execute(f"PRAGMA table_info({n})")] for n in names}


def _shape(run: Path) -> dict:
    db = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
    try:
        return {
            "tables": _tables(db),
            "module_kinds": {k for (k,) in db.execute("SELECT DISTINCT kind FROM modules")},
            "fault_kinds": {k for (k,) in db.execute("SELECT kind FROM faults")},
            "roles": {r for (r,) in db.execute("SELECT DISTINCT role FROM processes")},
            "event_kinds": {k for (k,) in db.execute("SELECT DISTINCT kind FROM events")},
            "logs": {p.name for p in (run / "logs").iterdir()},
            "manifest": set(json.loads((run / "manifest.json").read_text())),
        }
    finally:
        db.close()


def _value(db, module, direction, t):
    """A counter's value as of time t (the collector writes a row only when the values change)."""
    row = db.execute("SELECT c.total_msgs FROM counters c JOIN snapshots s USING (seq) WHERE c.module = ? "
                     "AND c.dir = ? AND s.mono <= ? ORDER BY seq DESC LIMIT 1", (module, direction, t)).fetchone()
    return row[0] if row else None


def _advance(db, module, direction, t_from, t_to):
    return _value(db, module, direction, t_to) - _value(db, module, direction, t_from)


@e2e
def test_same_spec_over_ssh_brings_back_a_run_like_mininets(net, tmp_path, clean_nodes):
    spec = write(tmp_path, "e2e.yaml", SPEC.format(duration="15s"))
    code, runs = run_experiment(spec, tmp_path / "mininet")   # the reference: the same spec on Mininet
    assert code == 0
    reference = runs[0]

    topo = net.topology_file(tmp_path / "dumbbell-ssh.yaml")
    r = net.runner(str(spec), "--topology", str(topo), "--results", str(tmp_path / "ssh"))
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = (tmp_path / "ssh" / "e2e_ssh").iterdir()
    assert not run_traces(run_id(run)), "the run left files or its ledger behind"

    # The same tables, columns, kinds of modules, faults, processes, events, logs and manifest keys.
    ssh, mininet = _shape(run), _shape(reference)
    for key in ("tables", "fault_kinds", "roles", "event_kinds", "logs"):
        assert ssh[key] == mininet[key], key
    assert ssh["module_kinds"] == mininet["module_kinds"] == {"app", "socket", "tcp", "ipeth"}
    assert mininet["manifest"] <= ssh["manifest"]

    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "complete" and m["backend"] == "ssh" and m["format_version"] == FORMAT_VERSION
    assert m["monitor"] == {"host": "site1n1", "address": "10.0.1.1", "interface": "site1n1-eth0",
                            "control_interface": "mgmt0"}
    assert set(m["nodes"]) == set(net.topo.spec.nodes)
    assert m["nodes"]["x2"]["interfaces"] == ["x2-eth0", "x2-eth1", "x2-eth2"]   # found by address
    assert m["versions"]["iperf"].startswith("iperf version 2") and m["versions"]["lighttpd"].startswith("lighttpd")
    clocks = m["clock_offsets"]
    assert clocks["reference"] == "CLOCK_MONOTONIC of site1n1" and set(clocks["nodes"]) == set(net.topo.spec.nodes)
    for name, off in clocks["nodes"].items():   # one machine, one clock: offsets within the round trip
        assert abs(off["offset"]) <= max(off["rtt"], 1e-3), (name, off)
        assert off["samples"] >= 5
    assert abs(clocks["runner"]["offset"]) < 1e-3 and 0 < clocks["runner"]["rtt"] < 0.05
    assert set(m["clock_offsets_end"]["nodes"]) == set(net.topo.spec.nodes)   # measured again at the end

    db = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
    monos = [t for (t,) in db.execute("SELECT mono FROM snapshots ORDER BY seq")]
    assert len(monos) >= 120
    t0 = m["t0"]
    assert monos[0] <= t0 + 1 and monos[-1] >= t0 + 14   # the collector's clock is the runner's reference
    faults = {k: (s, e, mod, json.loads(t)) for k, s, e, mod, t in
              db.execute("SELECT kind, start, end, target_module, target FROM faults")}
    assert set(faults) == {"tcp_drop", "app_pause", "ip_drop"}
    for kind, (start, end, mod, _) in faults.items():
        assert start is not None and end is not None and mod is not None, kind
        assert monos[0] < start < end < monos[-1]
    planned = {k: t0 + s for k, s in db.execute("SELECT kind, planned_start FROM faults")}
    for kind, (start, _, _, _) in faults.items():   # injected on time, stamped on the monitor's clock
        assert 0 <= start - planned[kind] < 0.5, (kind, start - planned[kind])
    # The faults took effect on the nodes: the dropped connection and the dropped interface stall.
    start, end, mod, target = faults["tcp_drop"]
    assert target["dst"] == "10.0.5.1" and _advance(db, mod, "in", start + 0.2, end) == 0
    start, end, mod, _ = faults["ip_drop"]
    (ipeth,) = db.execute("SELECT id FROM modules WHERE key = 'ipeth:site1n1-eth0'").fetchone()
    assert mod == ipeth and _advance(db, ipeth, "in", start + 0.2, end) == 0
    assert _advance(db, ipeth, "in", start - 2, start) > 100
    # The control interface and the runner's own SSH session are not part of the experiment.
    assert db.execute("SELECT count(*) FROM modules WHERE key = 'ipeth:mgmt0' OR name LIKE '%:22>%' "
                      "OR name LIKE '%>%:22'").fetchone()[0] == 0


@e2e
def test_agent_through_mnexec_sees_what_the_mininet_backend_reads_in_process(net, clean_nodes):
    """The node agent works on Mininet too (through mnexec), and agrees with the in-process path the
    Mininet backend takes."""
    backend, node = net.backend, net.backend.node("site1n1")
    client = subprocess.Popen(["mnexec", "-a", str(node.pid), sys.executable, "-c",
                               "import socket, sys, time; s = socket.create_connection((sys.argv[1], 22)); "
                               "print('up', flush=True); time.sleep(30)", net.mgmt["site1n1"]],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert client.stdout.readline().strip() == "up"
        r = node.run([*backend.python("site1n1"), "-m", "harness.agent", "conns", str(client.pid)])
        via_agent = json.loads(r.stdout)
        assert via_agent == backend.tcp_connections("site1n1", client.pid)
        assert [(c["dst"], c["dport"]) for c in via_agent] == [(net.mgmt["site1n1"], 22)]
    finally:
        os.killpg(client.pid, signal.SIGKILL)
        client.wait()


def _one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.stderr
    return errors[0]


def _check_nothing_made(tmp_path: Path, results: Path) -> None:
    (run,) = (results / "e2e_ssh").iterdir()
    assert not run_traces(run_id(run))
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "failed"


@e2e
@pytest.mark.parametrize("case", ["wrong key", "unknown host"])
def test_wrong_or_unknown_host_key_fails_with_one_line_and_leaves_nothing(net, tmp_path, clean_nodes, case):
    spec = write(tmp_path, "e2e.yaml", SPEC.format(duration="15s"))
    # x1 presents its own key; known_hosts has another node's for it (or none at all).
    keys = {"x1": net.host_keys["site2n1"]} if case == "wrong key" else {"x1": None}
    known = net.write_known_hosts(tmp_path / "known_hosts", keys)
    topo = net.topology_file(tmp_path / "topo.yaml", known_hosts=known)
    r = net.runner(str(spec), "--topology", str(topo), "--results", str(tmp_path / "results"))
    line = _one_error_line(r)
    assert line.startswith("error: x1 (root@10.255.4.2:22): host key ")
    assert ("mismatch" if case == "wrong key" else "not in") in line
    _check_nothing_made(tmp_path, tmp_path / "results")


@e2e
def test_unreachable_node_fails_with_one_line_and_leaves_nothing(net, tmp_path, clean_nodes):
    spec = write(tmp_path, "e2e.yaml", SPEC.format(duration="15s"))
    topo = net.topology_file(tmp_path / "topo.yaml", hosts={"site2n2": "10.255.7.99"}, connect_timeout="2s")
    t = time.monotonic()
    r = net.runner(str(spec), "--topology", str(topo), "--results", str(tmp_path / "results"))
    line = _one_error_line(r)
    assert line.startswith("error: site2n2 (root@10.255.7.99:22): cannot connect: ")
    assert time.monotonic() - t < 15
    _check_nothing_made(tmp_path, tmp_path / "results")


def start_and_wait(net: SshNet, spec: Path, tmp_path: Path, node: str, snapshots: int, timeout: float,
                   env: dict | None = None, poll: float = 0.2) -> tuple[subprocess.Popen, Path]:
    """The spec run in the background over the testbed, once the collector on `node` has recorded
    `snapshots` (the nodes share this machine's files, so the test watches the remote run.db)."""
    topo = net.topology_file(tmp_path / "topo.yaml")
    results = tmp_path / "results"
    proc = subprocess.Popen(net.runner_argv(str(spec), "--topology", str(topo), "--results", str(results)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = list(results.glob("*/*"))
        if runs:
            try:
                db = sqlite3.connect(f"file:/tmp/nestlab-{run_id(runs[0])}-{node}/run.db?mode=ro", uri=True)
                if db.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= snapshots:
                    return proc, runs[0]
            except sqlite3.Error:
                pass
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read())
        time.sleep(poll)
    proc.kill()
    raise AssertionError("the run did not get going")


def _start_and_wait(net: SshNet, tmp_path: Path, snapshots: int) -> tuple[subprocess.Popen, Path]:
    """A 60 s run, once the collector on site1n1 has recorded `snapshots`."""
    spec = write(tmp_path, "e2e.yaml", SPEC.format(duration="60s"))
    return start_and_wait(net, spec, tmp_path, "site1n1", snapshots, timeout=60)


@e2e
def test_sigterm_midway_tears_down_the_nodes_and_brings_back_the_run(net, tmp_path, clean_nodes):
    proc, run = _start_and_wait(net, tmp_path, 40)   # during the tcp_drop (3 s - 5 s)
    try:
        proc.send_signal(signal.SIGTERM)   # `ip netns exec` execs the runner: this is the runner
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert not run_traces(run_id(run))
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted" and "SIGTERM" in m["reason"]
    db = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
    assert db.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= 40
    assert db.execute("SELECT count(*) FROM faults WHERE start IS NOT NULL AND end IS NULL").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM faults").fetchone()[0] >= 1


@e2e
def test_sigkilled_runner_is_cleaned_up_and_its_recording_brought_back(net, tmp_path, clean_nodes):
    proc, run = _start_and_wait(net, tmp_path, 50)   # past the tcp_drop at 3 s
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert run_traces(run_id(run)), "a SIGKILLed runner cannot clean up; there should be something to clean"
    remote = sqlite3.connect(f"file:/tmp/nestlab-{run_id(run)}-site1n1/run.db?mode=ro", uri=True)
    recorded, last = remote.execute("SELECT count(*), max(seq) FROM snapshots").fetchone()   # the collector runs on
    remote.close()
    r = subprocess.run(net.runner_argv("cleanup", program="nestlab"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "remote process group(s) killed" in r.stdout and "brought back" in r.stdout, r.stdout
    assert not run_traces(run_id(run))
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted" and "cleanup" in m["reason"]
    db = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= recorded >= 50
    assert db.execute("SELECT count(*) FROM snapshots WHERE seq <= ?", (last,)).fetchone()[0] == recorded
    # The collector was stopped (it closed its recording: every module and edge has ended) before its
    # run.db was copied, not copied while it wrote.
    assert db.execute("SELECT count(*) FROM modules WHERE died IS NULL").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM edges WHERE died IS NULL").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM faults WHERE kind = 'tcp_drop'").fetchone()[0] == 1
    assert (run / "logs" / "collector.log").exists()
