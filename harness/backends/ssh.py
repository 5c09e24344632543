"""Testbed nodes over SSH (paramiko): the same Node interface as Mininet, on real machines.

On a testbed the network already exists (Emulab/CloudLab made the links, addresses and routes), so
this backend builds nothing: it connects to every node (host keys checked against known_hosts, never
added), verifies what the run relies on (the named data interfaces exist and have addresses, the
routers forward, each client reaches its server through its data interface), records the real
addresses, installs what is missing (apt packages, this package and the interceptor on the monitored
host, in a scratch directory of the run), sets the congestion control, and measures every node's
clock against the monitored host's. Everything it changes on a node is written to the run's ledger
first, so that teardown, and `nestlab cleanup` after a killed run, can undo it. docs/ssh-backend.md
describes the topology file and the whole procedure.

Commands go to a small command server on each node (harness/backends/nodeserver.py, sent as
`python3 -u -c <source>` over one SSH channel, with sudo where needed) as JSON argv lists and run
without any shell: one round trip each, however slow the login shell's startup files are. The server
also starts background processes (each in a new session, so its pid is the process group to signal),
writing their output to a log on the node, and reports their exits on its stderr, so polling a
process costs no round trip; it also reads the node's clock in-process. The few commands that run
through the login shell (the first check of each node, the command server itself, the progress
reads) are argv lists joined with shlex.join: no spec field ever reaches a shell unquoted.
"""

from __future__ import annotations

import getpass
import io
import json
import logging
import os
import re
import select
import shlex
import signal
import socket
import sqlite3
import subprocess
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import paramiko

from harness.backends.base import ClockOffset, Clocks, Proc
from harness.clean import Ledger
from harness.collector.interceptor import PauseState
from harness.errors import UserError
from harness.faults import chain_teardown_argv
from harness.store import ensure_indexes, monotonic
from harness.topology import Interface, Topology

# paramiko logs transport errors itself; our errors are one line each (UserError), so keep it quiet.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False

CHANNELS_PER_CONNECTION = 8    # sshd's MaxSessions defaults to 10 per connection; keep room for commands
CLOCK_ROUNDS = 15              # round trips per node when measuring clock offsets; the fastest is kept
MIN_PYTHON = (3, 10)

SERVER_SOURCE = (Path(__file__).resolve().parent / "nodeserver.py").read_text()
# $1 = "sudo" or "-", then the programs to look for. Prints uname, the OS, $SSH_CONNECTION, a line
# "missing <program>" for each one not found, and "checked" when the check ran.
PROBE_SCRIPT = ('uname -sr; (. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}"); echo "$SSH_CONNECTION"\n'
                'check=\'for p; do command -v "$p" >/dev/null 2>&1 || echo "missing $p"; done; echo checked\'\n'
                'if [ "$1" = sudo ]; then shift; sudo -n sh -c "$check" sh "$@"; else shift; sh -c "$check" sh "$@"; fi\n')
# Removes the harness's fault chain on a router: the ledger's undo entry (Firewall.teardown's steps).
CHAIN_UNDO = chain_teardown_argv()

# Programs a node needs for its role, and the Debian/Ubuntu packages that provide them.
PACKAGES = {"python3": "python3", "ip": "iproute2", "ss": "iproute2", "truncate": "coreutils", "tar": "tar",
            "sysctl": "procps", "iptables": "iptables", "iptables-restore": "iptables", "lighttpd": "lighttpd",
            "iperf": "iperf", "wget": "wget", "make": "make", "gcc": "gcc libc6-dev"}
BASE_PROGRAMS = ("ip",)


class SshError(UserError):
    """A node could not be reached or refused us: one line, exit status 2."""


@dataclass(frozen=True)
class SshParams:
    """How to reach one node: what the topology says, resolved (paths absolute, defaults filled)."""

    node: str
    host: str
    port: int
    user: str
    key: str | None
    known_hosts: str
    timeout: float
    sudo: bool
    python: str

    @property
    def where(self) -> str:
        return f"{self.node} ({self.user}@{self.host}:{self.port})"

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def ssh_params(topology: Topology) -> dict[str, SshParams]:
    """Every node's SshParams; key and known_hosts paths are taken relative to the topology file."""
    d = topology.spec.ssh
    base = topology.source.parent if topology.source else Path.cwd()

    def path(p: str | None) -> str | None:
        if p is None:
            return None
        q = Path(os.path.expanduser(p))
        return str(q if q.is_absolute() else (base / q).resolve())

    out = {}
    for name, node in topology.spec.nodes.items():
        s = node.ssh
        user = s.user or (d.user if d else None) or getpass.getuser()
        out[name] = SshParams(
            node=name, host=s.host, port=s.port or (d.port if d else 22), user=user,
            key=path(s.key or (d.key if d else None)),
            known_hosts=path(d.known_hosts if d and d.known_hosts else "~/.ssh/known_hosts"),
            timeout=d.connect_timeout if d else 10.0,
            sudo=(d.sudo if d and d.sudo is not None else user != "root"),
            python=d.python if d else "python3")
    return out


# ---- connections ---------------------------------------------------------------------------------

def _fingerprint(key) -> str:
    return f"{key.get_name()} {key.fingerprint}" if hasattr(key, "fingerprint") else key.get_name()


class Connection:
    """SSH connections to one node: a pool, since sshd limits the sessions (channels) of one
    connection (MaxSessions), and the command server keeps one open for the whole run."""

    def __init__(self, params: SshParams):
        self.p = params
        self.clients: list[tuple[paramiko.SSHClient, list]] = []   # (client, its long-lived channels)
        self.lock = threading.Lock()
        self._sftp = None

    def _client(self) -> paramiko.SSHClient:
        p = self.p
        if not os.path.isfile(p.known_hosts):
            raise SshError(f"{p.where}: known_hosts file {p.known_hosts} does not exist; host keys are "
                           "verified against it (add the nodes' keys, e.g. with ssh-keyscan, after checking them)")
        client = paramiko.SSHClient()
        client.load_system_host_keys(p.known_hosts)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(p.host, port=p.port, username=p.user, key_filename=p.key, timeout=p.timeout,
                           banner_timeout=p.timeout, auth_timeout=p.timeout, look_for_keys=p.key is None)
        except paramiko.BadHostKeyException as e:
            client.close()
            raise SshError(f"{p.where}: host key mismatch: the server offered {_fingerprint(e.key)}, "
                           f"{p.known_hosts} has {_fingerprint(e.expected_key)}; refusing to connect") from None
        except paramiko.AuthenticationException as e:
            client.close()
            raise SshError(f"{p.where}: authentication failed ({e}); check user and key"
                           f"{' ' + p.key if p.key else ''}") from None
        except paramiko.SSHException as e:
            client.close()
            msg = str(e)
            if "not found in known_hosts" in msg:
                raise SshError(f"{p.where}: host key not in {p.known_hosts}; add it after checking its "
                               "fingerprint (nestlab never accepts unknown host keys)") from None
            raise SshError(f"{p.where}: SSH failed: {msg}") from None
        except (OSError, EOFError) as e:
            client.close()
            why = "timed out" if isinstance(e, TimeoutError | socket.timeout) else (e.strerror or str(e))
            raise SshError(f"{p.where}: cannot connect: {why}") from None
        transport = client.get_transport()
        transport.set_keepalive(15)
        return client

    def connect(self) -> None:
        with self.lock:
            if not self.clients:
                self.clients.append((self._client(), []))

    def open(self, long_lived: bool = False) -> paramiko.Channel:
        """A new session channel, on a connection with room for it."""
        with self.lock:
            for attempt in range(2):
                for client, chans in self.clients:
                    chans[:] = [c for c in chans if not c.closed]
                    if len(chans) < CHANNELS_PER_CONNECTION:
                        try:
                            chan = client.get_transport().open_session(timeout=self.p.timeout)
                        except paramiko.ChannelException:
                            continue   # this connection is at sshd's MaxSessions: try another
                        except (paramiko.SSHException, OSError, EOFError) as e:
                            raise RuntimeError(f"{self.p.where}: connection lost: {e}") from None
                        if long_lived:
                            chans.append(chan)
                        return chan
                if attempt == 0:
                    self.clients.append((self._client(), []))
            raise RuntimeError(f"{self.p.where}: no SSH session could be opened")

    def exec(self, command: str, input: str | bytes | None = None, timeout: float = 30.0) -> tuple[int, str, str]:
        chan = self.open()
        try:
            chan.exec_command(command)
            if input is not None:
                chan.sendall(input.encode() if isinstance(input, str) else input)
            chan.shutdown_write()
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout
            while True:
                while chan.recv_ready():
                    out += chan.recv(65536)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                if (chan.eof_received and chan.exit_status_ready()) or chan.closed:
                    if not chan.recv_ready() and not chan.recv_stderr_ready():
                        break
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(command, timeout, bytes(out), bytes(err))
                select.select([chan], [], [], min(left, 0.05))
            return chan.recv_exit_status(), out.decode(errors="replace"), err.decode(errors="replace")
        finally:
            chan.close()

    @property
    def sftp(self) -> paramiko.SFTPClient:
        with self.lock:
            if self._sftp is None:
                self._sftp = self.clients[0][0].open_sftp()
            return self._sftp

    def close(self) -> None:
        with self.lock:
            if self._sftp is not None:
                try:
                    self._sftp.close()
                except Exception:  # noqa: BLE001
                    pass
                self._sftp = None
            for client, _ in self.clients:
                client.close()
            self.clients = []


def connect_all(params: dict[str, SshParams]) -> dict[str, Connection]:
    """Connect to every node at once; the first failure (in node order) is raised, nothing is left open."""
    conns = {n: Connection(p) for n, p in params.items()}
    with ThreadPoolExecutor(max_workers=min(16, len(conns)) or 1) as pool:
        results = {n: pool.submit(c.connect) for n, c in conns.items()}
    errors = [f.exception() for f in results.values() if f.exception() is not None]
    if errors:
        for c in conns.values():
            c.close()
        err = errors[0]
        raise err if isinstance(err, UserError) else SshError(str(err))
    return conns


# ---- nodes ---------------------------------------------------------------------------------------

@dataclass
class RemoteProc(Proc):
    start_time: str = ""            # field 22 of /proc/pid/stat: with the pid, the process's identity
    remote_log: str | None = None
    node_ref: SshNode | None = None
    code: int | None = None

    def poll(self) -> int | None:
        if self.code is None and self.node_ref is not None:
            self.code = self.node_ref.exit_code(self.pid)
        return self.code


class SshNode:
    def __init__(self, name: str, conn: Connection, ledger: Ledger | None, workdir: str):
        self.name, self.conn, self.ledger = name, conn, ledger
        self.p = conn.p
        self.workdir = workdir
        self.procs: dict[int, RemoteProc] = {}
        self.use_server = False        # set once the node is known to have Python
        self._server: paramiko.Channel | None = None
        self._server_buf = b""
        self._events = b""
        self._exits: dict[int, int] = {}
        self._spawned: dict[int, str] = {}   # pid -> start time: started by the current server, still running
        self._server_lock = threading.RLock()
        self._seq = 0

    # -- commands ------------------------------------------------------------------------------
    def command(self, argv: list[str], sudo: bool = True) -> str:
        argv = [str(a) for a in argv]
        return shlex.join(["sudo", "-n", *argv] if sudo and self.p.sudo else argv)

    def run(self, argv, check=True, timeout=30.0, input=None, sudo=True, server=True) -> subprocess.CompletedProcess:
        """Run argv on the node: through the command server (privileged) once it is up, except for
        commands that must run as the login user (sudo=False) or off the main thread (server=False)."""
        argv = [str(a) for a in argv]
        if self.use_server and server and (sudo or not self.p.sudo):
            a = self._request({"op": "run", "argv": argv, "input": input, "timeout": timeout}, timeout + 10)
            if a.get("rc", 0) is None:
                raise subprocess.TimeoutExpired(argv, timeout)
            rc, out, err = a["rc"], a["out"], a["err"]
        else:
            rc, out, err = self.conn.exec(self.command(argv, sudo), input, timeout)
        if check and rc != 0:
            raise RuntimeError(f"{self.name}: {shlex.join(argv)} failed ({rc}): {(err or out).strip()}")
        return subprocess.CompletedProcess(argv, rc, out, err)

    def _request(self, q: dict, timeout: float = 30.0) -> dict:
        with self._server_lock:
            if self._server is None or self._server.closed:
                self._start_server()
            chan = self._server
            self._seq += 1
            q = {**q, "id": self._seq}
            chan.sendall(json.dumps(q).encode() + b"\n")
            deadline = time.monotonic() + timeout
            while True:
                # An answer to an earlier request that was interrupted (Ctrl-C) is skipped.
                while b"\n" in self._server_buf:
                    line, _, self._server_buf = self._server_buf.partition(b"\n")
                    a = json.loads(line)
                    if a.get("id") == q["id"]:
                        break
                else:
                    a = None
                if a is not None:
                    break
                if chan.recv_ready():
                    self._server_buf += chan.recv(1 << 16)
                    continue
                self._drain_events()
                if chan.exit_status_ready() or chan.closed or time.monotonic() > deadline:
                    chan.close()
                    self._server = None
                    raise RuntimeError(f"{self.name}: the command server stopped ({self._events.decode(errors='replace')[-300:].strip() or 'no answer'}) "
                                       f"during {q['op']} {shlex.join(q.get('argv', []))}")
                select.select([chan], [], [], 0.05)
        if "error" in a:
            raise RuntimeError(f"{self.name}: {q['op']} {shlex.join(q.get('argv', []))}: {a['error']}")
        return a

    def _start_server(self) -> None:
        """Start a command server; if it replaces one (that stopped answering), end what that one
        started: its exit reports are lost with it, and a process nobody can watch is not left running."""
        chan = self.conn.open(long_lived=True)
        chan.exec_command(self.command([self.p.python, "-u", "-c", SERVER_SOURCE, "nestlab-node-server"]))
        self._server, self._server_buf, self._events = chan, b"", b""
        orphans, self._spawned = {p: t for p, t in self._spawned.items() if p not in self._exits}, {}
        if orphans:
            self._end_orphans(orphans)

    def _end_orphans(self, orphans: dict[int, str]) -> None:
        """SIGTERM the groups of processes a previous server started, SIGKILL what is left after 2 s;
        their exit codes are unknown (-1), so that polling them ends."""
        try:
            left = {p: t for p, t in orphans.items() if self.kill(p, t, signal.SIGTERM)}
            deadline = time.monotonic() + 2.0
            while left and time.monotonic() < deadline:
                time.sleep(0.05)
                left = {p: t for p, t in left.items() if self.kill(p, t, 0)}
            for p, t in left.items():
                self.kill(p, t, signal.SIGKILL)
        finally:
            for p in orphans:
                self._exits.setdefault(p, -1)

    def _drain_events(self) -> None:
        """Read the server's exit reports ("exit <pid> <code>" lines on its stderr)."""
        chan = self._server
        if chan is None:
            return
        while chan.recv_stderr_ready():
            self._events += chan.recv_stderr(1 << 16)
        *lines, self._events = self._events.split(b"\n")
        for line in lines:
            f = line.split()
            if len(f) == 3 and f[0] == b"exit":
                self._exits[int(f[1])] = int(f[2])
                self._spawned.pop(int(f[1]), None)

    def exit_code(self, pid: int) -> int | None:
        with self._server_lock:
            self._drain_events()
            if pid not in self._exits and (self._server is None or self._server.closed):
                return -1          # the server (and with it the exit report) is gone: unknown
            return self._exits.get(pid)

    def log_path(self, log: Path) -> str:
        return f"{self.workdir}/logs/{log.name}"

    def start(self, argv, log: Path | None, env=None) -> Proc:
        argv = [str(a) for a in argv]
        remote_log = self.log_path(log) if log else None
        a = self._request({"op": "spawn", "argv": argv, "cwd": self.workdir, "log": remote_log, "env": env or {}})
        proc = RemoteProc(self.name, int(a["pid"]), argv, log, monotonic(), None,
                          start_time=a["start"] or "", remote_log=remote_log, node_ref=self)
        self.procs[proc.pid] = proc
        self._spawned[proc.pid] = proc.start_time
        if self.ledger:
            self.ledger.add_remote_process(self.name, proc.pid, proc.start_time, f"{self.name}: {shlex.join(argv)}")
        return proc

    def kill(self, pid: int, start_time: str, sig: int, group: bool = True) -> bool:
        """Signal the process group pid (and pid; only pid if not group), if pid is still the process
        started at start_time; once that process has exited, the members left in its group, if the
        command server knows the group (nodeserver.py). sig 0: True while something is left."""
        q = {"op": "kill", "pid": pid, "start": start_time, "sig": int(sig), "group": group}
        return self._request(q)["sent"]

    def signal(self, proc: Proc, sig: int, group: bool = True) -> None:
        self.kill(proc.pid, proc.start_time, sig, group)

    def stop(self, proc: Proc, timeout: float = 3.0) -> int | None:
        if proc.poll() is None:
            self.kill(proc.pid, proc.start_time, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
        # The leader may be gone while others in its group live on: sweep the group either way.
        self.kill(proc.pid, proc.start_time, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        self.procs.pop(proc.pid, None)
        if self.ledger:
            self.ledger.drop_remote_process(self.name, proc.pid)
        return proc.poll()

    # -- files ---------------------------------------------------------------------------------
    def put(self, local: Path, remote: str) -> None:
        self.conn.sftp.put(str(local), remote)

    def get(self, remote: str, local: Path) -> None:
        self.conn.sftp.get(remote, str(local))

    def exists(self, remote: str) -> bool:
        try:
            self.conn.sftp.stat(remote)
            return True
        except OSError:
            return False

    # -- clock ---------------------------------------------------------------------------------
    def monotonic(self) -> float:
        return self.clock_sample()[1]

    def clock_sample(self) -> tuple[float, float, float]:
        """(runner clock before, node clock, runner clock after) of one round trip to the command
        server (it reads the clock in-process: no program is started for it)."""
        t0 = monotonic()
        t = self._request({"op": "clock"})["t"]
        return t0, t, monotonic()

    def measure_clock(self, rounds: int = CLOCK_ROUNDS) -> tuple[float, float]:
        """(node clock - runner clock, round trip) of the fastest of `rounds` round trips."""
        best = None
        for _ in range(rounds):
            t0, t, t1 = self.clock_sample()
            if best is None or t1 - t0 < best[1]:
                best = (t - (t0 + t1) / 2, t1 - t0)
        return best

    def close(self) -> None:
        with self._server_lock:
            if self._server is not None:
                try:
                    self._server.shutdown_write()   # the server ends at the end of its input
                except Exception:  # noqa: BLE001
                    pass
                self._server.close()
                self._server = None


# ---- the backend ---------------------------------------------------------------------------------

_BUNDLE: bytes | None = None


def bundle() -> bytes:
    """This package and pyroute2 (pure Python; the collector needs it) as a .tar.gz for the monitored
    node: sources only, the interceptor is built there with make."""
    global _BUNDLE
    if _BUNDLE is None:
        import pyroute2

        import harness

        def keep(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
            if "__pycache__" in ti.name or ti.name.endswith((".pyc", ".so", ".o", ".tmp")):
                return None
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            return ti

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for pkg in (harness, pyroute2):
                root = Path(pkg.__file__).resolve().parent
                tar.add(root, arcname=root.name, filter=keep)
        _BUNDLE = buf.getvalue()
    return _BUNDLE


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


# $1: the directory just made. Prints its owner's uid and type, then the uid commands run as.
OWNER_SCRIPT = 'stat -c "%u %F" -- "$1" && id -u'


def make_private_dir(node: SshNode, path: str, sudo: bool = True) -> None:
    """Create directory `path` (mode 700) on the node as the user commands run as (root with sudo,
    else the login user). Whatever is there already is refused, never reused: in a shared directory
    (/tmp, /dev/shm) another local user could have made it, and root would then run or preload code
    from it. Recorded in the ledger first (dropped again if it was not made here)."""
    if node.ledger:
        node.ledger.add_remote_path(node.name, path)
    r = node.run(["mkdir", "-m", "700", "--", path], check=False, sudo=sudo)
    problem = None
    if r.returncode != 0:
        problem = f"cannot create it ({(r.stderr or r.stdout).strip()})"
        if "exists" in problem:
            problem = ("it exists already (not made by this run: another user may have made it); "
                       "nestlab only uses a directory it has just created")
    else:
        out = node.run(["sh", "-c", OWNER_SCRIPT, "sh", path], check=False, sudo=sudo).stdout.split()
        if len(out) < 3 or out[1:-1] != ["directory"] or out[0] != out[-1]:
            problem = f"it is not a directory owned by uid {out[-1] if out else '?'} (stat: {' '.join(out[:-1])})"
    if problem:
        if node.ledger:
            node.ledger.drop_remote_path(node.name, path)
        raise SshError(f"{node.p.where}: scratch directory {path}: {problem}")


class SshBackend:
    kind = "ssh"
    remote = True

    def __init__(self, topology: Topology, ledger: Ledger | None, spec, run_id: str):
        self.topology, self.ledger, self.spec, self.run_id = topology, ledger, spec, run_id
        self.params = ssh_params(topology)
        self.defaults = topology.spec.ssh
        self.conns: dict[str, Connection] = {}
        self.nodes: dict[str, SshNode] = {}
        self._interfaces: dict[str, list[Interface]] = {}
        self.control: dict[str, str | None] = {}
        self._clocks: Clocks | None = None
        self.shm_dirs: dict[str, str] = {}
        self.pkg: dict[str, str] = {}
        self.node_info: dict[str, dict] = {}
        self.collector_db: str | None = None

    # -- what each node is for -----------------------------------------------------------------
    def _programs(self) -> dict[str, set[str]]:
        spec = self.spec
        need = {n: {"python3", *BASE_PROGRAMS} for n in self.topology.spec.nodes}
        for w in spec.workloads:
            need[w.host].add({"wget": "wget", "iperf": "iperf"}[w.kind])
            need[w.server] |= {"lighttpd", "truncate"} if w.kind == "wget" else {"iperf"}
            need[w.server].add("ss")
        for f in spec.faults:
            if f.at:
                need[f.at] |= {"iptables", "iptables-restore"}
        need[spec.monitor] |= {"tar"} | ({"make", "gcc"} if spec.interceptor else set())
        for n in {w.host for w in spec.workloads} | {w.server for w in spec.workloads}:
            need[n].add("sysctl")
        return need

    # -- preflight and build -------------------------------------------------------------------
    def preflight(self) -> None:
        """Connect to every node (nothing is created on them yet): unreachable nodes, unknown or wrong
        host keys and refused logins end the run here with one line."""
        self.conns = connect_all(self.params)
        for name, conn in self.conns.items():
            base = f"{(self.defaults.workdir if self.defaults else '/tmp').rstrip('/')}"
            self.nodes[name] = SshNode(name, conn, self.ledger, f"{base}/nestlab-{self.run_id}-{_safe(name)}")
        if self.ledger:
            for name, p in self.params.items():
                self.ledger.add_remote_node(name, p.as_dict())

    def build(self) -> None:
        self._check_nodes()
        with ThreadPoolExecutor(max_workers=2) as pool:   # the interceptor builds while the network is checked
            steps = [pool.submit(self._install), pool.submit(self._verify_network)]
        for f in steps:
            if f.exception() is not None:
                raise f.exception()
        self._set_congestion_control()
        self._measure_clocks()

    def _check_nodes(self) -> None:
        """Linux, the programs each node needs (installed with apt-get if allowed), sudo where needed."""
        need = self._programs()

        def check(name: str) -> None:
            node = self.nodes[name]
            lines, missing = self._probe(node, need[name])
            uname = lines[0].split()
            if not uname or uname[0] != "Linux":
                raise SshError(f"{node.p.where}: not a Linux node ({lines[0].strip() or 'uname failed'})")
            self.node_info[name] = {"kernel": uname[1] if len(uname) > 1 else "", "os": lines[1],
                                    "ssh_server_address": (lines[2].split() + ["", "", ""])[2]}
            if missing and (self.defaults is None or self.defaults.install):
                self._apt_install(node, missing)
                missing = self._probe(node, need[name])[1]
            if missing:
                raise SshError(f"{node.p.where}: missing program(s) {', '.join(missing)} (Debian/Ubuntu "
                               f"packages: {' '.join(sorted({PACKAGES.get(m, m) for m in missing}))})")
            node.use_server = True

        self._each(check)

    @staticmethod
    def _probe(node: SshNode, programs: set[str]) -> tuple[list[str], list[str]]:
        """One login-shell command: kernel, OS, the SSH session's addresses, and which programs are
        not on root's PATH (under sudo -n when not root: iptables and sysctl live in sbin)."""
        r = node.run(["sh", "-c", PROBE_SCRIPT, "sh", "sudo" if node.p.sudo else "-", *sorted(programs)],
                     sudo=False, check=False)
        lines = r.stdout.splitlines()
        if "checked" not in lines:
            if node.p.sudo:
                raise SshError(f"{node.p.where}: `sudo -n` failed ({r.stderr.strip()}); the harness needs "
                               "passwordless sudo on testbed nodes (or log in as root)")
            raise SshError(f"{node.p.where}: cannot run commands: {r.stderr.strip() or r.stdout.strip()}")
        missing = [line.split()[1] for line in lines if line.startswith("missing ")]
        return lines[:3] + ["", "", ""], missing

    @staticmethod
    def _apt_install(node: SshNode, programs: list[str]) -> None:
        pkgs = sorted({pkg for m in programs for pkg in PACKAGES.get(m, m).split()})
        env = ["env", "DEBIAN_FRONTEND=noninteractive"]
        install = [*env, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *pkgs]
        r = node.run(install, check=False, timeout=900)
        if r.returncode != 0:   # stale package lists: update once and try again
            node.run([*env, "apt-get", "update", "-qq"], check=False, timeout=900)
            r = node.run(install, check=False, timeout=900)
        if r.returncode != 0:
            raise SshError(f"{node.p.where}: apt-get install {' '.join(pkgs)} failed: "
                           f"{((r.stderr or r.stdout).strip().splitlines() or [''])[-1]}")
        if "lighttpd" in pkgs:   # the package starts a server on port 80; ours binds there
            node.run(["systemctl", "disable", "--now", "lighttpd"], check=False)

    def _verify_network(self) -> None:
        """The named data interfaces exist and have addresses; routers forward; each client reaches
        its server through its data interface; the monitor's SSH does not use its data interface."""
        topo = self.topology
        real: dict[str, list[tuple[str, str, int, int]]] = {}   # node -> [(ifname, address, prefixlen, link)]

        def inspect(name: str) -> None:
            node = self.nodes[name]
            addrs = json.loads(node.run(["ip", "-j", "-4", "addr", "show"], sudo=False).stdout or "[]")
            by_if = {a["ifname"]: [(i["local"], i["prefixlen"]) for i in a.get("addr_info", [])
                                   if i.get("family") == "inet"] for a in addrs}
            names = self.topology.spec.nodes[name].ssh.interfaces
            mine = []
            for j, intf in enumerate(topo.interfaces[name]):
                link = topo.spec.links[intf.link]
                what = f"link {intf.link} ({link.a}-{link.b})"
                if names is not None:
                    ifname = names[j]
                    if ifname not in by_if:
                        raise SshError(f"{node.p.where}: interface {ifname} for {what} does not exist "
                                       f"(IPv4 interfaces: {', '.join(sorted(by_if)) or 'none'})")
                    if not by_if[ifname]:
                        raise SshError(f"{node.p.where}: interface {ifname} for {what} has no IPv4 address")
                else:
                    found = [i for i, a in by_if.items() if any(x == intf.address for x, _ in a)]
                    if not found:
                        raise SshError(f"{node.p.where}: no interface has {intf.address}, the address nestlab "
                                       f"derives for {what}; name the interfaces in 'ssh: {{interfaces: [...]}}'")
                    ifname = found[0]
                address, prefixlen = by_if[ifname][0]
                mine.append((ifname, address, prefixlen, intf.link))
            real[name] = mine
            server_ip = self.node_info.get(name, {}).get("ssh_server_address")
            self.control[name] = next((i for i, a in by_if.items() if any(x == server_ip for x, _ in a)), None)
            if topo.is_router(name):
                fwd = node.run(["cat", "/proc/sys/net/ipv4/ip_forward"], sudo=False).stdout.strip()
                if fwd != "1":
                    raise SshError(f"{node.p.where}: {name} is a router in the topology but does not forward "
                                   "IPv4 (net.ipv4.ip_forward = 0); use static routing in the testbed profile "
                                   "(nestlab export does) or enable forwarding")

        self._each(inspect)
        for name, mine in real.items():
            self._interfaces[name] = []
            for ifname, address, prefixlen, k in mine:
                link = topo.spec.links[k]
                peer = link.b if link.a == name else link.a
                peer_addr = next(a for _, a, _, kk in real[peer] if kk == k)
                self._interfaces[name].append(Interface(name, ifname, address, prefixlen, peer, peer_addr, k))
        mon = self.spec.monitor
        if self.control.get(mon) and self.control[mon] in {i.name for i in self._interfaces[mon]}:
            raise SshError(f"{self.params[mon].where}: the runner's SSH connection arrives on {self.control[mon]}, "
                           "the monitored host's data interface: its own traffic would be measured and an "
                           "ip_drop would cut it off; connect through the control network")

        def route_check(pair: tuple[str, str]) -> None:
            host, server = pair
            data_if = self._interfaces[host][0].name
            dst = self.address(server)
            out = self.nodes[host].run(["ip", "-j", "route", "get", dst], sudo=False, check=False).stdout
            dev = (json.loads(out or "[{}]") or [{}])[0].get("dev")
            if dev != data_if:
                raise SshError(f"{self.params[host].where}: {host} reaches {server} ({dst}) through "
                               f"{dev or 'no route'}, not its data interface {data_if}: the traffic would "
                               "bypass the topology's routers")

        pairs = {(w.host, w.server) for w in self.spec.workloads}
        pairs |= {(w.server, w.host) for w in self.spec.workloads}
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(route_check, sorted(pairs)))

    def _each(self, fn) -> None:
        """fn(node) for every node at once; the first failure (in node order) is raised."""
        with ThreadPoolExecutor(max_workers=min(16, len(self.nodes)) or 1) as pool:
            futures = {n: pool.submit(fn, n) for n in self.nodes}
        for f in futures.values():
            if f.exception() is not None:
                raise f.exception()

    def _install(self) -> None:
        """Scratch directory on every node (logs, served files); this package, pyroute2 and the
        interceptor (built with make) on the monitored host."""
        def scratch(name: str) -> None:
            node = self.nodes[name]
            # Made as the login user (files are copied in over SFTP as that user); commands run with
            # sudo write into it as root.
            make_private_dir(node, node.workdir, sudo=False)
            node.run(["mkdir", f"{node.workdir}/logs"], sudo=False)

        self._each(scratch)
        mon = self.nodes[self.spec.monitor]
        pkg = f"{mon.workdir}/pkg"
        mon.run(["mkdir", pkg], sudo=False)
        with mon.conn.sftp.open(f"{mon.workdir}/nestlab.tar.gz", "wb") as f:
            f.write(bundle())
        mon.run(["tar", "-xzf", f"{mon.workdir}/nestlab.tar.gz", "-C", pkg], sudo=False)
        r = mon.run([mon.p.python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], sudo=False)
        version = r.stdout.strip()
        if tuple(int(x) for x in version.split(".")) < MIN_PYTHON:
            raise SshError(f"{mon.p.where}: {mon.p.python} is Python {version}; the collector needs "
                           f"{'.'.join(map(str, MIN_PYTHON))} or later (set ssh: {{python: ...}} in the topology)")
        self.node_info[mon.name]["python"] = version
        if self.spec.interceptor:
            r = mon.run(["make", "-s", "-C", f"{pkg}/harness/interceptor"], check=False, sudo=False, timeout=300)
            if r.returncode != 0:
                raise SshError(f"{mon.p.where}: building the interceptor failed: {r.stderr.strip()[-300:]}")
        self.pkg[mon.name] = pkg

    def _set_congestion_control(self) -> None:
        """The spec's congestion control on the experiment's flows only: a host route to each peer
        (client -> server and back) with `congctl`, as the Mininet backend does, removed at the end.
        The node's default and its other routes stay as they are."""
        cc = self.spec.congestion_control
        wanted: dict[str, set[str]] = {}
        for w in self.spec.workloads:
            wanted.setdefault(w.host, set()).add(self.address(w.server))
            wanted.setdefault(w.server, set()).add(self.address(w.host))

        def set_cc(name: str) -> None:
            node = self.nodes[name]
            self.node_info[name]["congestion_control_default"] = node.run(
                ["cat", "/proc/sys/net/ipv4/tcp_congestion_control"]).stdout.strip()
            for peer in sorted(wanted[name]):
                route = (json.loads(node.run(["ip", "-j", "route", "get", peer]).stdout or "[{}]") or [{}])[0]
                where = [*(["via", route["gateway"]] if route.get("gateway") else []), "dev", route.get("dev", "")]
                if self.ledger:
                    self.ledger.add_undo(name, ["ip", "route", "del", f"{peer}/32", *where],
                                         f"remove the route to {peer} with congctl {cc}")
                r = node.run(["ip", "route", "add", f"{peer}/32", *where, "congctl", cc], check=False)
                if r.returncode != 0:
                    if self.ledger:
                        self.ledger.drop_undo({"node": name, "argv": ["ip", "route", "del", f"{peer}/32", *where],
                                               "what": f"remove the route to {peer} with congctl {cc}"})
                    why = r.stderr.strip()
                    if "exists" in why:
                        why = f"a route to {peer}/32 exists already"
                    raise SshError(f"{node.p.where}: congestion_control {cc!r} cannot be set on the route to "
                                   f"{peer}: {why}")

        with ThreadPoolExecutor(max_workers=8) as pool:
            for f in [pool.submit(set_cc, n) for n in sorted(wanted)]:
                f.result()

    def _measure_clocks(self) -> None:
        self._clocks = self.measure_clocks()

    def measure_clocks(self) -> Clocks:
        """Every node's and the runner's offset to the monitored host's clock, measured now."""
        mon = self.spec.monitor
        measured: dict[str, tuple[float, float]] = {}

        def measure(name: str) -> None:
            measured[name] = self.nodes[name].measure_clock()

        self._each(measure)
        d_mon, rtt_mon = measured[mon]
        method = f"best of {CLOCK_ROUNDS} round trips"
        clocks = Clocks(mon, runner=ClockOffset(d_mon, rtt_mon, CLOCK_ROUNDS, method))
        for name in self.nodes:
            d, rtt = measured[name]
            clocks.nodes[name] = (ClockOffset(0.0, 0.0, CLOCK_ROUNDS, "reference") if name == mon else
                                  ClockOffset(d_mon - d, rtt + rtt_mon, CLOCK_ROUNDS, method))
        return clocks

    # -- what the runner asks ------------------------------------------------------------------
    def node(self, name: str) -> SshNode:
        return self.nodes[name]

    def interfaces(self, name: str) -> list[Interface]:
        return self._interfaces[name]

    def address(self, name: str) -> str:
        return self._interfaces[name][0].address

    def clocks(self, reference: str) -> Clocks:
        assert reference == self._clocks.reference
        return self._clocks

    def python(self, name: str) -> list[str]:
        """argv prefix that runs this package's modules on the node."""
        return ["env", f"PYTHONPATH={self.pkg[name]}", self.params[name].python]

    def agent(self, name: str, *args: str, timeout: float = 30.0, server: bool = True):
        r = self.nodes[name].run([*self.python(name), "-m", "harness.agent", *map(str, args)],
                                 check=False, timeout=timeout, server=server)
        try:
            out = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RuntimeError(f"{name}: agent {' '.join(map(str, args))}: {(r.stderr or r.stdout).strip()}") from None
        if r.returncode != 0 or isinstance(out, dict) and "error" in out:
            raise RuntimeError(f"{name}: agent {args[0]}: {out.get('error') if isinstance(out, dict) else out}")
        return out

    def tcp_connections(self, node: str, pid: int) -> list[dict]:
        return self.agent(node, "conns", pid)

    def pause(self, node: str, shm_dir: str, pid: int) -> PauseState:
        return PauseState(**self.agent(node, "pause", shm_dir, pid))

    def resume(self, node: str, shm_dir: str, pid: int) -> PauseState:
        return PauseState(**self.agent(node, "resume", shm_dir, pid))

    def interceptor(self, name: str) -> tuple[str, dict[str, str]]:
        """A shared-memory directory for the interceptor on the node, and the clients' environment."""
        from harness.interceptor import ENV_SHM_DIR, LIBRARY_NAME

        node = self.nodes[name]
        base = "/dev/shm" if node.exists("/dev/shm") else node.workdir
        shm = f"{base}/nestlab-{self.run_id}-{_safe(name)}"
        make_private_dir(node, shm)
        self.shm_dirs[name] = shm
        lib = f"{self.pkg[name]}/harness/interceptor/{LIBRARY_NAME}"
        return shm, {"LD_PRELOAD": lib, ENV_SHM_DIR: shm}

    def create_db(self, name: str) -> str:
        """run.db for the collector on the node, with the run-store schema."""
        db = f"{self.nodes[name].workdir}/run.db"
        self.agent(name, "initdb", db)
        self.collector_db = db
        if self.ledger:
            self.ledger.set_salvage(name, db, f"{self.nodes[name].workdir}/logs")
        return db

    def snapshots(self, name: str, server: bool = True) -> int:
        """Snapshots recorded so far (the progress thread passes server=False: the command server is
        the main thread's)."""
        return int(self.agent(name, "count", self.collector_db, timeout=10, server=server))

    def bring_back(self, db: sqlite3.Connection, run_dir: Path) -> None:
        """Copy the collector's run.db into the local one, and every node's logs into logs/."""
        errors = []
        if self.collector_db:
            mon = self.spec.monitor
            try:
                fetch_collector_db(self.nodes[mon], self.collector_db, run_dir, db,
                                   checkpoint=lambda: self.agent(mon, "checkpoint", self.collector_db))
            except Exception as e:  # noqa: BLE001 - still fetch the logs
                errors.append(f"run.db from {mon}: {e}")
        for name, node in self.nodes.items():
            try:
                fetch_logs(node, f"{node.workdir}/logs", run_dir / "logs")
            except Exception as e:  # noqa: BLE001
                errors.append(f"logs from {name}: {e}")
        if errors:
            raise RuntimeError("; ".join(errors))

    def node_records(self) -> dict[str, dict]:
        """What the manifest records about each node."""
        out = {}
        for name, p in self.params.items():
            out[name] = {"host": p.host, "port": p.port, "user": p.user, "control_interface": self.control.get(name),
                         "interfaces": [i.name for i in self._interfaces.get(name, [])],
                         **self.node_info.get(name, {})}
        return out

    def versions(self) -> dict[str, str]:
        def first_line(node: str | None, argv: list[str]) -> str:
            if node is None:
                return "unused"
            r = self.nodes[node].run(argv, check=False, sudo=False)
            return ((r.stdout or r.stderr).strip().splitlines() or ["unavailable"])[0]

        spec = self.spec
        mon = spec.monitor
        servers = [w.server for w in spec.workloads]
        web = next((w.server for w in spec.workloads if w.kind == "wget"), None)
        router = next((f.at for f in spec.faults if f.at), None)
        out = {"kernel": self.node_info[mon].get("kernel", ""), "python": self.node_info[mon].get("python", ""),
               "iperf": first_line(mon if any(w.kind == "iperf" for w in spec.workloads) else
                                   (servers[0] if servers else None), ["iperf", "-v"]),
               "wget": first_line(mon, ["wget", "--version"]),
               "lighttpd": first_line(web, ["lighttpd", "-v"]),
               "iptables": first_line(router, ["iptables", "--version"] if router else [])}
        return out

    @property
    def link_model(self) -> list[dict]:
        """The testbed shapes the links (its delay nodes, as the exported NS file or profile asks);
        nestlab neither sets nor reads their queues and leaves the nodes' offloads as they are."""
        return [{"link": k, "a": lk.a, "b": lk.b, "bw": lk.bw, "queue": lk.queue_packets,
                 "shaped_by": "the testbed (docs/ssh-backend.md)"} for k, lk in enumerate(self.topology.spec.links)]

    def queue_stats(self) -> list[dict]:
        return []   # the queues are on the testbed's delay nodes, which nestlab does not reach

    # -- teardown ------------------------------------------------------------------------------
    def teardown(self) -> None:
        errors = []
        for name, node in self.nodes.items():
            for proc in list(node.procs.values()):   # anything the runner did not stop
                try:
                    node.stop(proc, timeout=1.0)
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{name}: stopping pid {proc.pid}: {e}")
        if self.ledger:
            for entry in list(self.ledger.data.get("remote", {}).get("undo", [])):
                node = self.nodes.get(entry["node"])
                if node is None:
                    continue
                try:
                    node.run(entry["argv"], check=True)
                    self.ledger.drop_undo(entry)
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{entry['node']}: {entry['what']}: {e}")
            for entry in list(self.ledger.data.get("remote", {}).get("paths", [])):
                node = self.nodes.get(entry["node"])
                if node is None:
                    continue
                try:
                    node.run(["rm", "-rf", "--", entry["path"]])
                    self.ledger.drop_remote_path(entry["node"], entry["path"])
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{entry['node']}: removing {entry['path']}: {e}")
        for node in self.nodes.values():
            node.close()
        for conn in self.conns.values():
            conn.close()
        if self.ledger and not errors:
            self.ledger.drop_remote_nodes()
        if errors:
            raise RuntimeError("; ".join(errors) + " (the ledger keeps them: run `nestlab cleanup`)")


# ---- bringing data back (also used by `nestlab cleanup` for a killed run) ------------------------

COLLECTOR_TABLES = ("modules", "edges", "snapshots", "counters", "tcp_info")


def fetch_collector_db(node: SshNode, remote_db: str, run_dir: Path, db: sqlite3.Connection,
                       checkpoint=None) -> int:
    """Copy the collector's database from the node and merge its tables into the local run.db
    (whose processes, faults and events the runner wrote). Returns the snapshots merged."""
    if checkpoint is not None:
        try:
            checkpoint()
        except Exception:  # noqa: BLE001 - the -wal file is copied along instead
            pass
    tmp = run_dir / "collector.db"
    for suffix in ("", "-wal"):
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)
        if suffix == "" or node.exists(remote_db + suffix):
            node.get(remote_db + suffix, Path(f"{tmp}{suffix}"))
    try:
        return merge_collector_db(db, tmp)
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)


def merge_collector_db(db: sqlite3.Connection, path: Path) -> int:
    if db.in_transaction:
        db.commit()
    db.execute("ATTACH DATABASE ? AS c", (str(path),))
    try:
        for table in COLLECTOR_TABLES:
            db.execute(f"INSERT INTO main.{table} SELECT * FROM c.{table}")
        db.commit()
        n = db.execute("SELECT count(*) FROM c.snapshots").fetchone()[0]
    finally:
        db.execute("DETACH DATABASE c")
    ensure_indexes(db)
    return n


def fetch_logs(node: SshNode, remote_dir: str, local_dir: Path) -> int:
    local_dir.mkdir(parents=True, exist_ok=True)
    try:
        names = node.conn.sftp.listdir(remote_dir)
    except OSError:
        return 0
    for name in names:
        node.get(f"{remote_dir}/{name}", local_dir / name)
    return len(names)


CHECKPOINT = ("import pathlib, sqlite3, sys; "
              "c = sqlite3.connect(pathlib.Path(sys.argv[1]).as_uri() + '?mode=rw', uri=True, timeout=10); "
              "c.execute('PRAGMA wal_checkpoint(TRUNCATE)').fetchall(); c.close()")
STOP_WAIT_S = 10.0   # how long `cleanup` gives the recorded processes to end after SIGTERM


def stop_recorded(nodes: dict[str, SshNode], processes: list[dict], say) -> int:
    """SIGTERM every recorded process group that is still the one recorded (the collector then commits
    and closes its run.db), wait until they are gone, SIGKILL what is left. Returns the groups
    signalled."""
    live: list[dict] = []
    for p in reversed(processes):
        node = nodes.get(p["node"])
        if node is None:
            continue
        try:
            if node.kill(p["pid"], p["start"], signal.SIGTERM):
                live.append(p)
        except Exception as e:  # noqa: BLE001
            say(f"cleanup: {p['node']}: pid {p['pid']}: {e}")
    signalled = len(live)
    deadline = time.monotonic() + STOP_WAIT_S
    while live and time.monotonic() < deadline:
        time.sleep(0.1)
        still = []
        for p in live:
            try:
                if nodes[p["node"]].kill(p["pid"], p["start"], 0):
                    still.append(p)
            except Exception:  # noqa: BLE001 - SIGKILLed below
                still.append(p)
        live = still
    for p in live:
        try:
            nodes[p["node"]].kill(p["pid"], p["start"], signal.SIGKILL)
        except Exception as e:  # noqa: BLE001
            say(f"cleanup: {p['node']}: pid {p['pid']}: {e}")
    return signalled


def cleanup_remote(data: dict, say) -> bool:
    """Undo what a killed run left on its testbed nodes (its ledger's `remote` part): stop its
    processes (the collector first commits and closes its run.db), bring back that run.db and the
    logs, undo its changes (the fault chain, the congestion-control routes), remove its directories.
    Returns True when every node was reached and everything is gone."""
    remote = data.get("remote") or {}
    params = {n: SshParams(**p) for n, p in (remote.get("nodes") or {}).items()}
    if not params:
        return True
    nodes: dict[str, SshNode] = {}
    complete = True
    for name, p in params.items():
        conn = Connection(p)
        try:
            conn.connect()
        except UserError as e:
            say(f"cleanup: {e}; run `nestlab cleanup` again when it is reachable")
            complete = False
            continue
        nodes[name] = SshNode(name, conn, None, "/")
        nodes[name].use_server = True
    # Stopped before anything is copied: a run.db copied while the collector writes can be stale or torn.
    killed = stop_recorded(nodes, remote.get("processes", []), say)
    run_dir = Path(data["run_dir"])
    salvage = remote.get("salvage")
    mon = nodes.get(salvage["node"]) if salvage else None
    if mon is not None and (run_dir / "run.db").exists():
        try:
            db = sqlite3.connect(str(run_dir / "run.db"), timeout=10)
            try:
                if db.execute("SELECT count(*) FROM snapshots").fetchone()[0] == 0:
                    n = fetch_collector_db(mon, salvage["db"], run_dir, db, checkpoint=lambda: mon.run(
                        [mon.p.python, "-c", CHECKPOINT, salvage["db"]]))
                    say(f"cleanup: brought back {n} snapshot(s) from {salvage['node']}")
            finally:
                db.close()
        except Exception as e:  # noqa: BLE001
            say(f"cleanup: could not bring back run.db from {salvage['node']}: {e}")
    if mon is not None:
        try:
            fetch_logs(mon, salvage["logs"], run_dir / "logs")
        except Exception:  # noqa: BLE001
            pass
    for entry in remote.get("undo", []):
        node = nodes.get(entry["node"])
        if node is not None:
            node.run(entry["argv"], check=False)
    for entry in remote.get("paths", []):
        node = nodes.get(entry["node"])
        if node is not None:
            node.run(["rm", "-rf", "--", entry["path"]], check=False)
    for node in nodes.values():
        node.close()
        node.conn.close()
    say(f"cleanup: run {data['run_id']}: {killed} remote process group(s) killed on "
        f"{', '.join(sorted(nodes)) or 'no node'}")
    return complete
