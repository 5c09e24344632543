"""A testbed node over SSH (SshNode, the Node interface of harness/backends/base.py) and its processes.

Commands go to a small command server on the node (nodeserver.py in this package, sent as
`python3 -u -c <source>` over one SSH channel, with sudo where needed) as JSON argv lists and run
without any shell: one round trip each, however slow the login shell's startup files are. The server
also starts background processes (each in a new session, so its pid is the process group to signal),
writing their output to a log on the node, and reports their exits on its stderr, so polling a
process costs no round trip; it also reads the node's clock in-process. The few commands that run
through the login shell (the first check of each node, the command server itself, the progress
reads) are argv lists joined with shlex.join: no spec field ever reaches a shell unquoted.

A request unanswered for ALIVE_AFTER_S asks the node's sshd whether it is there at all (an SSH
keepalive, which sshd answers whatever the command server is busy with): a node that does not answer
that within ALIVE_WAIT_S is gone (NodeGone: one line naming it, exit status 2), and every later
request to it fails at once, so that a dead node holds neither the run loop nor teardown for a
command's whole timeout.
"""

from __future__ import annotations

import json
import select
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko

from harness.backends.base import Proc
from harness.backends.ssh.transport import Connection, SshError
from harness.ledger import Ledger
from rundir.db import monotonic

SCRATCH_MARK = "NESTLAB_SCRATCH"   # in the environment of what a run starts: its scratch directory
CLOCK_ROUNDS = 15              # round trips per node when measuring clock offsets; the fastest is kept
ALIVE_AFTER_S = 2.0            # a request unanswered this long: is the node still there? (an SSH keepalive)
ALIVE_WAIT_S = 4.0             # how long sshd may take to answer the keepalive before the node counts as gone


class NodeGone(SshError):
    """A node stopped answering mid-run (its machine or network gone): one line naming it, exit 2."""


def answers_keepalive(transport, wait: float | None = None) -> bool:
    """Whether the SSH server behind `transport` answers a keepalive within `wait` seconds (OpenSSH's
    own `keepalive@openssh.com`: sshd answers it, with a failure, at once). Asked from a thread: paramiko
    waits for the answer as long as the connection stays open."""
    done, answered = threading.Event(), []

    def ask() -> None:
        try:
            transport.global_request("keepalive@openssh.com", wait=True)
            answered.append(transport.is_active())
        except Exception:  # noqa: BLE001 - no answer
            pass
        finally:
            done.set()

    threading.Thread(target=ask, name="keepalive", daemon=True).start()
    return done.wait(ALIVE_WAIT_S if wait is None else wait) and answered == [True]

SERVER_SOURCE = (Path(__file__).resolve().parent / "nodeserver.py").read_text()


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
        self.gone: str | None = None   # why the node counts as gone (NodeGone): nothing more is asked of it

    # -- commands ------------------------------------------------------------------------------
    def command(self, argv: list[str], sudo: bool = True) -> str:
        argv = [str(a) for a in argv]
        return shlex.join(["sudo", "-n", *argv] if sudo and self.p.sudo else argv)

    def run(self, argv, check=True, timeout=30.0, input=None, sudo=True, server=True) -> subprocess.CompletedProcess:
        """Run argv on the node: through the command server (privileged) once it is up, except for
        commands that must run as the login user (sudo=False) or off the main thread (server=False)."""
        argv = [str(a) for a in argv]
        if self.gone is not None:
            raise NodeGone(self.gone)
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
            if self.gone is not None:
                raise NodeGone(self.gone)
            if self._server is None or self._server.closed:
                self._start_server()
            chan = self._server
            self._seq += 1
            q = {**q, "id": self._seq}
            chan.sendall(json.dumps(q).encode() + b"\n")
            asked = time.monotonic()
            deadline, probe = asked + timeout, asked + ALIVE_AFTER_S
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
                if self.gone is not None:   # found gone meanwhile (the progress thread's check_alive)
                    self._give_up(q, time.monotonic() - asked)
                if time.monotonic() > probe and not chan.closed:   # a slow command, or a node gone?
                    if not answers_keepalive(chan.get_transport()):
                        self._give_up(q, time.monotonic() - asked)
                    probe = time.monotonic() + ALIVE_AFTER_S
                if chan.exit_status_ready() or chan.closed or time.monotonic() > deadline:
                    chan.close()
                    self._server = None
                    raise RuntimeError(f"{self.name}: the command server stopped ({self._events.decode(errors='replace')[-300:].strip() or 'no answer'}) "
                                       f"during {q['op']} {shlex.join(q.get('argv', []))}")
                select.select([chan], [], [], 0.05)
        if "error" in a:
            raise RuntimeError(f"{self.name}: {q['op']} {shlex.join(q.get('argv', []))}: {a['error']}")
        return a

    def _give_up(self, q: dict, waited: float) -> None:
        """The node is gone: NodeGone now and for every later request; its command server counts as
        ended (what it started: exit unknown, -1), so the run's checks name the node."""
        what = f"{q['op']} {shlex.join(q.get('argv', []))}".strip()
        if self._server is not None:
            self._server.close()
            self._server = None
        self._mark_gone(f"{self.p.where}: it stopped answering (no answer for {waited:.1f} s, nor to an SSH "
                        f"keepalive within {ALIVE_WAIT_S:g} s) during {what[:120]}; what was recorded until then is kept")
        raise NodeGone(self.gone)

    def check_alive(self) -> bool:
        """Beside the main thread's requests (the progress thread, every few seconds): an SSH keepalive
        on the node's connection. A node that does not answer it is marked gone: the main thread's
        request to it then fails at once, and what it started counts as ended (exit unknown), which
        the run's checks name."""
        if self.gone is not None:
            return False
        clients = list(getattr(self.conn, "clients", []))
        transport = clients[0][0].get_transport() if clients else None
        if transport is not None and answers_keepalive(transport):
            return True
        self._mark_gone(f"{self.p.where}: it stopped answering (no answer to an SSH keepalive within "
                        f"{ALIVE_WAIT_S:g} s); what was recorded until then is kept")
        return False

    def _mark_gone(self, why: str) -> None:
        """Nothing more is asked of the node; its connections are closed, so that an SFTP call (which
        has no timeout of its own) fails at once rather than never."""
        self.gone = self.gone or why
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001 - closing what is already dead
            pass

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
        if self.gone is not None and pid not in self._exits:
            return -1              # a node gone: its exit will never be reported
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
        # The run's mark on every process it starts (inherited by their children): `nestlab cleanup`
        # finds by it what a runner SIGKILLed between a spawn and its ledger entry left (cleanup.sweep).
        env = {**(env or {}), SCRATCH_MARK: self.workdir}
        a = self._request({"op": "spawn", "argv": argv, "cwd": self.workdir, "log": remote_log, "env": env})
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
        if self.gone is not None:
            raise NodeGone(self.gone)
        self.conn.sftp.put(str(local), remote)

    def get(self, remote: str, local: Path) -> None:
        if self.gone is not None:   # an SFTP read from a node gone would wait for the connection to drop
            raise NodeGone(self.gone)
        self.conn.sftp.get(remote, str(local))

    def exists(self, remote: str) -> bool:
        if self.gone is not None:
            raise NodeGone(self.gone)
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
