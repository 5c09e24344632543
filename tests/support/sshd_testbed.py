"""An SSH testbed on this machine: the nodes of a topology built with Mininet, a management network
namespace of the test's own with a veth to every node, and a real sshd in each node with its own
config, host key and authorized key in a temporary directory (root logs in with a generated key).

    ctl namespace (the runner runs here)           node namespaces (Mininet hosts)
    m-site1n1 10.255.1.1/24  <------ veth ------>  mgmt0 10.255.1.2/24, sshd on port 22
    m-site1n2 10.255.2.1/24  <------ veth ------>  mgmt0 10.255.2.2/24, sshd
    ...

The runner (run-experiment, in ctl) reaches each node's sshd over its management link, as it would
reach Emulab nodes over their control network. Shared by every SSH end-to-end test
(test_ssh_backend, test_ssh_service_e2e, test_ssh_tier_faults_e2e, test_ssh_fabric).
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from harness.backends.mininet import MininetBackend
from harness.ledger import LEDGER_DIR
from harness.topology import load_topology
from tests.support.env import REPO, VENV_BIN, leftovers, run_id


def e2e(fn):
    """Tests that build the sshd testbed: root, and slow."""
    return pytest.mark.root(pytest.mark.slow(fn))


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


def table_columns(db: sqlite3.Connection) -> dict[str, list[str]]:
    names = [n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return {n: [c[1] for c in db.execute(f"PRAGMA table_info({n})")] for n in names}


@contextmanager
def running(net: SshNet, spec: Path, tmp_path: Path, node: str, snapshots: int, timeout: float,
            env: dict | None = None, poll: float = 0.2) -> Iterator[tuple[subprocess.Popen, Path]]:
    """The spec run in the background over the testbed, yielded as (runner, run directory) once the
    collector on `node` has recorded `snapshots` (the nodes share this machine's files, so the test
    watches the remote run.db); the runner is killed on leaving if it is still running."""
    topo = net.topology_file(tmp_path / "topo.yaml")
    results = tmp_path / "results"
    proc = subprocess.Popen(net.runner_argv(str(spec), "--topology", str(topo), "--results", str(results)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    try:
        yield proc, _wait_for_snapshots(proc, results, node, snapshots, timeout, poll)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_for_snapshots(proc: subprocess.Popen, results: Path, node: str, snapshots: int, timeout: float,
                        poll: float) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = list(results.glob("*/*"))
        if runs:
            try:
                db = sqlite3.connect(f"file:/tmp/nestlab-{run_id(runs[0])}-{node}/run.db?mode=ro", uri=True)
                if db.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= snapshots:
                    return runs[0]
            except sqlite3.Error:
                pass
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read())
        time.sleep(poll)
    raise AssertionError("the run did not get going")


def end_runner(proc: subprocess.Popen, sig: int, timeout: float = 60) -> str:
    """Send the runner `sig` (`ip netns exec` execs it: the process is the runner) and wait for its end;
    its stderr."""
    proc.send_signal(sig)
    return proc.communicate(timeout=timeout)[1]


def cleanup(net: SshNet, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """`nestlab cleanup` from the management namespace, as a user would run it after a SIGKILL."""
    return subprocess.run(net.runner_argv("cleanup", program="nestlab"), capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env)
