"""What every backend gives the runner: a built network of nodes it can run commands on.

A Node runs a command to completion, starts a background process in its own process group (so the
whole group can be signalled and reaped), signals processes, and reads the monotonic clock. The
Mininet backend implements it with mnexec in the node's namespaces; the SSH backend over paramiko.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from harness.topology import Topology


@dataclass
class Proc:
    """A background process started on a node; pid is also its process-group id."""

    node: str
    pid: int
    argv: list[str]
    log: Path | None
    started: float
    handle: subprocess.Popen | None = None   # local backends keep the Popen to reap it

    def poll(self) -> int | None:
        return self.handle.poll() if self.handle is not None else None


class Node(Protocol):
    name: str

    def run(self, argv: list[str], check: bool = True, timeout: float = 30.0,
            input: str | None = None) -> subprocess.CompletedProcess: ...

    def start(self, argv: list[str], log: Path | None, env: dict[str, str] | None = None) -> Proc: ...

    def signal(self, proc: Proc, sig: int, group: bool = True) -> None: ...

    def stop(self, proc: Proc, timeout: float = 3.0) -> int | None:
        """SIGTERM the process group, SIGKILL it after `timeout`; return the exit code if known."""
        ...

    def monotonic(self) -> float: ...


class Backend(Protocol):
    topology: Topology

    def build(self) -> None: ...

    def node(self, name: str) -> Node: ...

    def teardown(self) -> None:
        """Remove everything build() made. Idempotent; safe after a partial build."""
        ...

    def versions(self) -> dict[str, str]: ...
