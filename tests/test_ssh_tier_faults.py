"""The faults aimed at a service tier on testbed nodes (harness/faults/onnode.py), without root, sshd
or a network: `tier_pause`, `slow`, delay at any tier and `target: {host: H}` do their host-local work
on the tier's node, through its commands (the SSH backend's node interface, here a node that runs
each command on this machine and records it), with every change's undo in the run's ledger while it
is in force; and a node that stops answering fails within seconds (harness/backends/ssh/node.py).
The same kinds on a real sshd testbed: tests/test_ssh_service_e2e.py."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from harness.backends.base import ClockOffset, Clocks
from harness.backends.ssh.backend import SshBackend
from harness.faults import KINDS, onnode
from harness.faults.base import FaultEnv
from harness.spec import load_spec
from harness.window import Window
from tests.support.env import REPO, write
from tests.support.fake_cgroup import FakeTree

SPEC = f"""\
name: svc
topology: {REPO / "topologies" / "service-ssh.yaml"}
duration: 30s
monitor: [web, cache]
trace: messages
workloads:
  - {{kind: service, rate: 10/s}}
faults:
  - {{{{FAULT}}}}
"""


class LocalNode:
    """A testbed node whose commands run on this machine (its /proc is the node's): every argv kept."""

    def __init__(self, name: str):
        self.name = name
        self.p = NS(python=sys.executable, where=f"{name} (root@{name}.example:22)", sudo=False)
        self.commands: list[list[str]] = []
        self.signals: list[tuple[int, int]] = []

    def run(self, argv, check=True, timeout=30.0, input=None, server=True):
        argv = [str(a) for a in argv]
        self.commands.append(argv)
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise RuntimeError(f"{self.name}: {argv[0]} failed ({r.returncode}): {r.stderr.strip()}")
        return r

    def signal(self, proc, sig, group=True):
        self.signals.append((proc.pid, int(sig)))
        os.killpg(proc.pid, sig)

    def monotonic(self) -> float:
        return time.monotonic()


def _backend(hosts=("web", "cache", "db")) -> SshBackend:
    """The SSH backend's own agent and node lookup, over LocalNodes (the package is this checkout)."""
    b = SshBackend.__new__(SshBackend)
    b.nodes = {h: LocalNode(h) for h in hosts}
    b.pkg = {h: str(REPO) for h in hosts}
    b.params = {h: NS(python=sys.executable) for h in hosts}
    return b


class Ledger:
    """The run's ledger's undo list (harness.ledger.Ledger's add_undo / drop_undo)."""

    def __init__(self):
        self.undo: list[dict] = []
        self.cgroups: list[str] = []

    def add_undo(self, node, argv, what):
        self.undo.append({"node": node, "argv": list(argv), "what": what})

    def drop_undo(self, entry):
        self.undo.remove(entry)

    def add_cgroup(self, path):   # Mininet's: must not be used for a node's cgroup
        self.cgroups.append(str(path))


def _env(tmp_path, fault: str, backend, services=None, client_env=None, shm_dirs=None):
    exp = load_spec(write(tmp_path, "s.yaml", SPEC.replace("{FAULT}", fault)))
    assert exp.topology.backend == "ssh"
    workloads = NS(services=services or {}, client_env=client_env or {})
    return FaultEnv(exp.spec, backend, Clocks("web", {h: ClockOffset() for h in backend.nodes}, ClockOffset()),
                    workloads, random.Random(1), "r1", ledger=Ledger(), shm_dirs=shm_dirs or {})


def _group(n_children: int = 2) -> subprocess.Popen:
    """A daemon's process group: a shell (the leader) and its children."""
    script = " & ".join(["sleep 60"] * n_children) + " & wait"
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    deadline = time.monotonic() + 5
    while len(onnode.local_group_pids(proc.pid)) < n_children + 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc


def _end(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _states(pids) -> set[str]:
    out = set()
    for p in pids:
        for task in os.listdir(f"/proc/{p}/task"):
            out.add(Path(f"/proc/{p}/task/{task}/status").read_text().split("State:")[1].split()[0])
    return out


def _start_time(pid: int) -> str:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    return data[data.rfind(b")") + 2:].split()[19].decode()


# ---- the daemon group, read on the node ---------------------------------------------------------------

def test_a_tier_group_is_read_from_the_nodes_proc():
    b = _backend()
    env = NS(backend=b)
    proc = _group()
    try:
        pids = onnode.group_pids(env, "cache", proc.pid)
        assert pids == onnode.local_group_pids(proc.pid) and len(pids) == 3 and proc.pid in pids
        (argv,) = b.nodes["cache"].commands
        assert argv[:2] == [sys.executable, "-c"] and argv[2] == onnode.GROUP_SCRIPT and argv[3] == str(proc.pid)
        # nothing of nestlab is needed on the node for it: the script's own lines, run without PYTHONPATH
        assert "harness" not in onnode.GROUP_SCRIPT
        assert onnode.group_pids(NS(backend=NS(remote=False)), "cache", proc.pid) == pids   # Mininet: in-process
    finally:
        _end(proc)


# ---- tier_pause ---------------------------------------------------------------------------------------

def test_tier_pause_on_a_node_stops_and_continues_the_group_there_with_its_sigcont_in_the_ledger(tmp_path):
    b = _backend()
    proc = _group()
    daemon = NS(node="cache", pid=proc.pid, argv=["memcached", "-l", "10.0.7.1"], start_time=_start_time(proc.pid),
                poll=lambda: None)
    tiers = NS(procs=[("cache", daemon)])
    env = _env(tmp_path, "kind: tier_pause, host: cache, schedule: {at: [5s], duration: 2s}", b, services={0: tiers})
    kind = KINDS["tier_pause"](env)
    try:
        (part,) = kind.inject(Window(0, 5.0, 2.0), 1)
        pids = onnode.local_group_pids(proc.pid)
        assert _states(pids) == {"T"}
        target = json.loads(part.target)
        assert target["host"] == "cache" and target["tier"] == "cache" and target["pids"] == pids
        assert target["module_key"] is None   # cache is monitored, but none of it runs under the interceptor here
        (undo,) = env.ledger.undo
        assert undo["node"] == "cache" and undo["argv"][:3] == [sys.executable, "-c", onnode.CONT_SCRIPT]
        assert undo["argv"][3:] == [str(proc.pid), daemon.start_time]
        node = b.nodes["cache"]
        assert any(a[2] == onnode.GROUP_SCRIPT for a in node.commands if len(a) > 2)   # the pids, from the node
        kind.heal(part)
        assert _states(pids) <= {"S", "R"} and env.ledger.undo == []
        assert node.signals == [(proc.pid, signal.SIGSTOP), (proc.pid, signal.SIGCONT)]
    finally:
        kind.teardown()
        _end(proc)


def test_the_ledgers_sigcont_continues_the_group_a_killed_runner_left_stopped_and_no_other():
    proc = _group(1)
    try:
        os.killpg(proc.pid, signal.SIGSTOP)
        time.sleep(0.1)
        pids = onnode.local_group_pids(proc.pid)
        env = NS(backend=_backend())
        wrong = onnode.cont_undo(env, "cache", proc.pid, str(int(_start_time(proc.pid)) + 1))
        subprocess.run(wrong, check=True)     # a pid reused by another group: left alone
        time.sleep(0.1)
        assert _states(pids) == {"T"}
        subprocess.run(onnode.cont_undo(env, "cache", proc.pid, _start_time(proc.pid)), check=True)
        time.sleep(0.1)
        assert "T" not in _states(pids)
        subprocess.run(onnode.cont_undo(env, "cache", 2 ** 22 + 7, "1"), check=True)   # no such process: nothing
    finally:
        _end(proc)


# ---- delay at an intercepted tier ---------------------------------------------------------------------

def test_delay_at_the_db_tier_sets_the_nodes_headers_through_its_agent_and_undoes_it(tmp_path):
    from harness.interceptor import ENV_SHM_DIR
    from harness.interceptor.delay import DELAY, DELAY_OFF
    from tests.test_service_delay import _header_file

    shm = tmp_path / "shm"
    shm.mkdir()
    path = _header_file(shm, os.getpid())
    b = _backend()
    env = _env(tmp_path, "kind: delay, host: db, by: 200ms, schedule: {at: [5s], duration: 2s}", b,
               client_env={"db": {ENV_SHM_DIR: str(shm)}})
    kind = KINDS["delay"](env)

    def delay_ns():
        return DELAY.unpack_from(open(path, "rb").read(), DELAY_OFF)[0]

    (part,) = kind.inject(Window(0, 5.0, 2.0), 1)
    assert delay_ns() == 200_000_000
    target = json.loads(part.target)
    assert target["pids"] == [os.getpid()] and target["tier"] == "db" and target["module_key"] is None
    agent = [a for a in b.nodes["db"].commands if "harness.agent" in a]
    assert [a[a.index("harness.agent") + 1] for a in agent] == ["undeferred", "delay"]
    assert agent[0][:3] == ["env", f"PYTHONPATH={REPO}", sys.executable]
    (undo,) = env.ledger.undo
    assert undo["node"] == "db" and undo["argv"][-4:] == ["delay", str(shm), "0.0", "0"]
    subprocess.run(undo["argv"], check=True, capture_output=True)   # what cleanup runs after a SIGKILL
    assert delay_ns() == 0
    kind.inject(Window(0, 8.0, 2.0), 2)
    assert delay_ns() == 200_000_000
    kind.teardown()                                                # an interrupted run
    assert delay_ns() == 0 and env.ledger.undo == []


def test_delay_at_a_node_whose_tier_has_no_process_under_the_interceptor_is_skipped_without_an_undo(tmp_path):
    from harness.faults.base import NoTarget
    from harness.interceptor import ENV_SHM_DIR

    (tmp_path / "shm").mkdir()
    env = _env(tmp_path, "kind: delay, host: web, by: 20ms, schedule: {at: [5s], duration: 2s}", _backend(),
               client_env={"web": {ENV_SHM_DIR: str(tmp_path / "shm")}})
    with pytest.raises(NoTarget, match="no process of the web tier on web runs under the interceptor"):
        KINDS["delay"](env).inject(Window(0, 5.0, 2.0), 1)
    assert env.ledger.undo == []


def test_the_tiers_application_processes_are_read_on_the_node(tmp_path):
    from tests.test_service_delay import _header_file

    shm = tmp_path / "shm"
    shm.mkdir()
    _header_file(shm, os.getpid())   # a counter file without a data socket: no application module
    b = _backend()
    env = NS(backend=b, spec=NS(monitor=["web", "cache"]), shm_dirs={"cache": str(shm)})
    from harness.faults.tier_hosts import observed_pids

    assert observed_pids(env, "cache", [os.getpid(), 1]) == []
    (argv,) = b.nodes["cache"].commands
    assert argv[-3:] == ["observed", str(shm), f"{os.getpid()},1"]
    assert observed_pids(env, "db", [os.getpid()]) == [] and not b.nodes["db"].commands   # not monitored: not asked


# ---- slow: the node's cgroup ---------------------------------------------------------------------------

class TreeNode(LocalNode):
    """A node whose cgroup tree is a FakeTree: cgroup.py's command line run in-process against it."""

    def __init__(self, name, tree: FakeTree):
        super().__init__(name)
        self.tree = tree

    def run(self, argv, check=True, timeout=30.0, input=None, server=True):
        import contextlib
        import io

        from harness.faults import cgroup

        argv = [str(a) for a in argv]
        self.commands.append(argv)
        if len(argv) < 3 or argv[2] != onnode.CGROUP_SOURCE:
            return super().run(argv, check, timeout, input)
        tree = self.tree
        out = io.StringIO()
        saved = (cgroup.CpuCap, cgroup.cpu_hierarchy, cgroup.cgroup_mounts, cgroup._ENABLED)
        cgroup._ENABLED = {}   # each command is a process of its own on the node
        fake = type(tree.cap())

        class TreeCap(fake):   # the tree's /proc stands for the node's
            def __init__(self, name, hierarchy, proc=tree.proc):
                super().__init__(name, hierarchy, proc)

        cgroup.CpuCap = TreeCap
        cgroup.cpu_hierarchy = lambda: getattr(self, "hierarchy", tree.hierarchy)
        cgroup.cgroup_mounts = lambda: [(tree.version, tree.root, "/", ["rw", "cpu"])]
        try:
            with contextlib.redirect_stdout(out):
                code = cgroup.main(argv[3:])
        finally:
            cgroup.CpuCap, cgroup.cpu_hierarchy, cgroup.cgroup_mounts, cgroup._ENABLED = saved
        return subprocess.CompletedProcess(argv, code, out.getvalue(), "")


@pytest.mark.parametrize("version", [1, 2])
def test_slow_on_a_node_caps_the_tier_in_the_nodes_cgroup_with_its_removal_in_the_ledger(tmp_path, monkeypatch,
                                                                                           version):
    tree = FakeTree(tmp_path, version, subtree="memory")
    tree.process(41, "/system.slice", threads=(43,))
    tree.process(42, "/system.slice")
    b = _backend()
    b.nodes["cache"] = TreeNode("cache", tree)
    monkeypatch.setattr("harness.faults.slow.tier_pids", lambda env, host: (0, "cache", [41, 42]))
    env = _env(tmp_path, "kind: slow, host: cache, cpu: 20%, schedule: {at: [5s], duration: 2s}", b)
    kind = KINDS["slow"](env)
    kind.setup(env.spec.faults)
    assert kind.hierarchies["cache"].version == version
    (part,) = kind.inject(Window(0, 5.0, 2.0), 1)
    mine = "/nestlab-r1-cache"
    assert tree.where(41) == tree.where(43) == tree.where(42) == mine
    target = json.loads(part.target)
    assert target["hierarchy"] == f"cgroup v{version}" and target["cgroup"] == str(tree.root / "nestlab-r1-cache")
    assert target["limit"] == ("cpu.max 20000 100000" if version == 2 else
                               "cpu.cfs_quota_us 20000 of cpu.cfs_period_us 100000")
    assert env.ledger.cgroups == []   # not this machine's
    (undo,) = env.ledger.undo
    assert undo["node"] == "cache" and undo["argv"][3:5] == ["remove", str(tree.root / "nestlab-r1-cache")]
    control = tree.root / "cgroup.subtree_control"
    if version == 2:   # this run enabled v2's cpu controller: its undo disables it again
        assert undo["argv"][5:] == ["disable-cpu"] and "cpu" in control.read_text().split()
    kind.heal(part)
    assert tree.where(41) == tree.where(43) == tree.where(42) == "/system.slice"
    assert not (tree.root / "nestlab-r1-cache").exists() and env.ledger.undo == []
    if version == 2:
        assert control.read_text().split() == ["memory"]


@pytest.mark.parametrize("version", [1, 2])
def test_the_ledgers_removal_empties_and_removes_a_killed_runners_cgroup_on_the_node(tmp_path, version):
    tree = FakeTree(tmp_path, version, subtree="memory")
    tree.process(41, "/system.slice/x.service")
    node = TreeNode("db", tree)
    env = NS(backend=NS(remote=True, node=lambda h: node))
    cap = onnode.RemoteCap(env, "db", "nestlab-r1-db", tree.hierarchy)
    cap.apply([41], 30)
    assert tree.where(41) == "/nestlab-r1-db"
    node.run(cap.undo_argv())               # the runner was SIGKILLed: `nestlab cleanup` runs its undo
    assert tree.where(41) == "/" and not (tree.root / "nestlab-r1-db").exists()
    if version == 2:
        assert (tree.root / "cgroup.subtree_control").read_text().split() == ["memory"]
    # only the run's own cgroups, under a cpu mount
    for path in (str(tree.root / "system.slice"), "/etc/nestlab-x"):
        assert json.loads(node.run([sys.executable, "-c", onnode.CGROUP_SOURCE, "remove", path]).stdout) is False
    assert (tree.root / "system.slice").is_dir()


def test_a_hierarchy_hidden_under_another_mount_on_the_node_is_no_hierarchy(tmp_path):
    """A node whose mountinfo lists the cpu hierarchy under a mount that hides it (the sshd testbed's
    Mininet hosts: a fresh sysfs on /sys): refused at setup, not a failed window."""
    from harness.faults.cgroup import Hierarchy

    tree = FakeTree(tmp_path, 1)
    node = TreeNode("db", tree)
    node.hierarchy = Hierarchy(1, tmp_path / "hidden" / "cpu")
    env = NS(backend=NS(remote=True, node=lambda h: node))
    with pytest.raises(RuntimeError, match=r"^db: the cgroup cpu controller: NoCpuController: .* lists the cgroup "
                                           r"v1 hierarchy with the cpu controller at .*/hidden/cpu, but it is not "
                                           r"reachable there \(hidden under another mount\)$"):
        onnode.remote_hierarchy(env, "db")


def test_a_node_without_the_cpu_controller_ends_the_run_before_t0_naming_it(tmp_path):
    from rundir.errors import UserError

    b = _backend()

    class NoCgroup(LocalNode):
        def run(self, argv, check=True, timeout=30.0, input=None, server=True):
            self.commands.append(argv)
            return subprocess.CompletedProcess(argv, 1, json.dumps({"error": "NoCpuController: no cgroup mounted at all"}), "")

    b.nodes["db"] = NoCgroup("db")
    env = _env(tmp_path, "kind: slow, host: db, cpu: 20%, schedule: {at: [5s], duration: 2s}", b)
    with pytest.raises(UserError) as e:
        KINDS["slow"](env).setup(env.spec.faults)
    assert str(e.value) == ("db: slow needs the cgroup cpu controller (v2 or v1) on the node: db: the cgroup cpu "
                            "controller: NoCpuController: no cgroup mounted at all")


def test_the_cgroup_command_line_runs_from_its_source_alone():
    """`python3 -c <cgroup.py>` on a node with nothing of nestlab: check says which hierarchy (or why none)."""
    r = subprocess.run([sys.executable, "-I", "-c", onnode.CGROUP_SOURCE, "check"], capture_output=True, text=True,
                       cwd="/")
    out = json.loads(r.stdout)
    assert (r.returncode, set(out)) in ((0, {"version", "mount", "root"}), (1, {"error"}))
    bad = subprocess.run([sys.executable, "-I", "-c", onnode.CGROUP_SOURCE, "frobnicate"], capture_output=True, text=True)
    assert bad.returncode == 1 and "unknown operation 'frobnicate'" in json.loads(bad.stdout)["error"]


@pytest.mark.root
def test_a_real_process_is_capped_in_this_machines_cgroup_through_the_command_line_and_released():
    """The node's side on a real hierarchy (this machine: cgroup v1's cpu): cap, release, undo."""
    from harness.faults.cgroup import cpu_problem

    if cpu_problem() is not None:
        pytest.skip(cpu_problem())
    node = LocalNode("db")
    env = NS(backend=NS(remote=True, node=lambda h: node))
    h = onnode.remote_hierarchy(env, "db")
    proc = subprocess.Popen(["sleep", "60"])
    cap = onnode.RemoteCap(env, "db", f"nestlab-test-{os.getpid()}", h)
    try:
        before = Path(f"/proc/{proc.pid}/cgroup").read_text()
        cap.apply([proc.pid], 25)
        assert f"/nestlab-test-{os.getpid()}" in Path(f"/proc/{proc.pid}/cgroup").read_text()
        assert cap.limit.startswith("cpu.max 25000" if h.version == 2 else "cpu.cfs_quota_us 25000")
        cap.release()
        assert Path(f"/proc/{proc.pid}/cgroup").read_text() == before and not Path(str(cap.path)).exists()
        cap.apply([proc.pid], 25)
        node.run(cap.undo_argv())
        assert not Path(str(cap.path)).exists()
    finally:
        proc.kill()
        proc.wait()
        if Path(str(cap.path)).exists():
            node.run(cap.undo_argv(), check=False)


# ---- a node that stops answering ------------------------------------------------------------------------

class SilentChannel:
    """A command server's channel to a node that stopped answering: nothing ever arrives."""

    def __init__(self, transport):
        self.a, self.b = socket.socketpair()
        self.transport, self.closed, self.sent = transport, False, []

    def exec_command(self, command):
        pass

    def sendall(self, data):
        self.sent.append(data)

    def recv_ready(self):
        return False

    def recv_stderr_ready(self):
        return False

    def exit_status_ready(self):
        return False

    def fileno(self):
        return self.a.fileno()

    def get_transport(self):
        return self.transport

    def close(self):
        self.closed = True


class Transport:
    """sshd's side of a keepalive: answered at once (a live machine), or never (a dead one)."""

    def __init__(self, answers: bool):
        self.answers, self.asked = answers, 0
        self.never = threading.Event()

    def global_request(self, kind, wait=True):
        assert kind == "keepalive@openssh.com" and wait
        self.asked += 1
        if not self.answers:
            self.never.wait(30)
        return None

    def is_active(self):
        return True


def _silent_node(answers: bool):
    from harness.backends.ssh.node import SshNode

    transport = Transport(answers)
    closed = []
    conn = NS(p=NS(where="app2 (root@app2.example:22)", sudo=False, python="python3"),
              open=lambda long_lived=False: SilentChannel(transport), close=lambda: closed.append(True),
              closed=closed, clients=[(NS(get_transport=lambda: transport), [])])
    node = SshNode("app2", conn, None, "/tmp/w")
    node.use_server = True
    return node, transport


def test_a_node_that_stops_answering_fails_within_seconds_naming_it_and_asks_nothing_more(monkeypatch):
    from harness.backends.ssh import node as node_module
    from harness.backends.ssh.node import NodeGone
    from rundir.errors import UserError

    node, transport = _silent_node(answers=False)
    t0 = time.monotonic()
    with pytest.raises(NodeGone) as e:
        node.run(["iptables-restore", "--noflush"], timeout=30)   # a fault's command, 30 s allowed
    took = time.monotonic() - t0
    assert node_module.ALIVE_AFTER_S + node_module.ALIVE_WAIT_S - 0.5 < took < 8.0, took
    msg = str(e.value)
    assert isinstance(e.value, UserError) and "\n" not in msg
    assert msg.startswith("app2 (root@app2.example:22): it stopped answering (no answer for ")
    assert "during run iptables-restore --noflush; what was recorded until then is kept" in msg
    t1 = time.monotonic()
    with pytest.raises(NodeGone):
        node.kill(4242, "17", signal.SIGTERM)                # teardown: at once, not another wait
    with pytest.raises(NodeGone):
        node.get("/tmp/w/run.db", Path("/nonexistent"))
    with pytest.raises(NodeGone):
        node.exists("/tmp/w/trace.db")
    with pytest.raises(NodeGone):
        node.run(["true"], server=False)
    assert time.monotonic() - t1 < 0.5 and transport.asked == 1
    assert node.conn.closed == [True]   # its connections closed: a direct SFTP call fails at once too
    assert node.exit_code(4242) == -1                       # what it started: ended, exit unknown
    transport.never.set()


def test_a_slow_command_on_a_node_that_answers_its_keepalives_is_waited_for(monkeypatch):
    from harness.backends.ssh import node as node_module

    monkeypatch.setattr(node_module, "ALIVE_AFTER_S", 0.2)
    node, transport = _silent_node(answers=True)
    with pytest.raises(RuntimeError, match="the command server stopped") as e:
        node._request({"op": "run", "argv": ["sleep", "1"]}, 1.5)   # no answer ever: its own timeout ends it
    assert not isinstance(e.value, node_module.NodeGone) and transport.asked >= 3 and node.gone is None


def test_a_node_found_gone_beside_the_run_loop_ends_what_it_started_and_its_progress_poll(monkeypatch):
    """The progress thread asks each monitored node for an SSH keepalive before its snapshot count: a
    node that does not answer is marked gone there, so the run loop's next check of its collector
    (exit unknown, -1: "it stopped answering") names it, without a request of its own having to wait."""
    from harness.backends.ssh import backend as ssh_backend
    from harness.backends.ssh import node as node_module
    from harness.backends.ssh.node import NodeGone, RemoteProc

    monkeypatch.setattr(node_module, "ALIVE_WAIT_S", 0.3)
    monkeypatch.setattr(ssh_backend, "PROGRESS_S", 0.05)
    alive, _ = _silent_node(answers=True)
    assert alive.check_alive() and alive.gone is None
    node, transport = _silent_node(answers=False)
    collector = RemoteProc("app2", 4242, ["python3", "-m", "harness.collector.main"], None, 0.0, None,
                           start_time="17", node_ref=node)
    b = SshBackend.__new__(SshBackend)
    b.nodes, b._progress, b._pollers, b._poller_stop = {"app2": node}, {}, [], threading.Event()
    b.snapshots = lambda name, run_db=None, server=True: pytest.fail("a gone node is not asked for its count")
    t0 = time.monotonic()
    b.start_progress("app2")
    b._pollers[0].join(5)
    assert not b._pollers[0].is_alive() and time.monotonic() - t0 < 2.0
    assert node.gone == "app2 (root@app2.example:22): it stopped answering (no answer to an SSH keepalive within " \
                        "0.3 s); what was recorded until then is kept"
    assert collector.poll() == -1 and node.conn.closed == [True]
    with pytest.raises(NodeGone):
        node.run(["true"])
    transport.never.set()
