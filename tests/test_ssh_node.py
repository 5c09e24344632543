"""The SSH backend's parts without a testbed: SSH topology validation and connection settings, the
command server and the node agent, the cleanup chain and provisioning's errors, run locally (no root,
no network). The same backend against real sshd servers is tests/test_ssh_backend.py.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.topology import load_topology
from tests.support.env import REPO, write

DUMBBELL = REPO / "topologies" / "dumbbell.yaml"


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


