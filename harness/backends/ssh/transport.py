"""The SSH transport to testbed nodes (paramiko): how to reach each node, and pooled connections.

Host keys are checked against known_hosts and never added (RejectPolicy); every way a connection can
fail is one line (SshError, exit status 2). sshd limits the session channels of one connection
(MaxSessions), so a node's Connection is a pool that opens another connection when one is full.
"""

from __future__ import annotations

import getpass
import logging
import os
import select
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import paramiko

from harness.topology import Topology
from rundir.errors import UserError

# paramiko logs transport errors itself; our errors are one line each (UserError), so keep it quiet.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False

CHANNELS_PER_CONNECTION = 8    # sshd's MaxSessions defaults to 10 per connection; keep room for commands


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

