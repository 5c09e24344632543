"""What every backend gives the runner: a built network of nodes it can run commands on.

A Node runs a command to completion, starts a background process in its own process group (so the
whole group can be signalled and reaped), signals processes, copies files, and reads the monotonic
clock. The Mininet backend implements it with mnexec in the node's namespaces (every node shares this
machine's files and clock); the SSH backend over paramiko on testbed nodes (docs/ssh-backend.md).

A Backend builds (Mininet) or verifies (SSH) the network, says which address and interface each node
really has, how each node's clock relates to the monitored host's, and does the host-local operations
the runner needs where a process runs (its TCP connections, the interceptor pause handshake).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from harness.interceptor.pause import PauseState
from harness.topology import Interface, Topology


@dataclass
class Proc:
    """A background process started on a node; pid is also its process-group id."""

    node: str
    pid: int
    argv: list[str]
    log: Path | None
    started: float             # the runner's monotonic clock
    handle: subprocess.Popen | None = None   # local backends keep the Popen to reap it

    def poll(self) -> int | None:
        return self.handle.poll() if self.handle is not None else None


@dataclass
class ClockOffset:
    """How one node's CLOCK_MONOTONIC relates to the reference clock (the monitored host's):
    reference = node + offset, to within +-rtt/2 (the best of several round trips)."""

    offset: float = 0.0
    rtt: float = 0.0
    samples: int = 0
    method: str = "shared clock"

    def as_dict(self) -> dict:
        return {"offset": self.offset, "rtt": self.rtt, "samples": self.samples, "method": self.method}


@dataclass
class Clocks:
    """Offsets to the reference clock of every node and of the runner itself."""

    reference: str
    nodes: dict[str, ClockOffset] = field(default_factory=dict)
    runner: ClockOffset = field(default_factory=ClockOffset)

    def from_node(self, node: str, t: float) -> float:
        """A time read on `node`'s clock, on the reference clock."""
        return t + self.nodes[node].offset

    def from_runner(self, t: float) -> float:
        """A time read on the runner's clock, on the reference clock."""
        return t + self.runner.offset

    def as_dict(self) -> dict:
        return {"reference": f"CLOCK_MONOTONIC of {self.reference}",
                "runner": self.runner.as_dict(), "nodes": {n: o.as_dict() for n, o in self.nodes.items()}}


class Node(Protocol):
    name: str
    # Where this run's files live on the node (served files, logs, run.db); None: the runner's own
    # filesystem, shared with the node (Mininet).
    workdir: str | None

    def run(self, argv: list[str], check: bool = True, timeout: float = 30.0,
            input: str | None = None) -> subprocess.CompletedProcess: ...

    def start(self, argv: list[str], log: Path | None, env: dict[str, str] | None = None) -> Proc: ...

    def signal(self, proc: Proc, sig: int, group: bool = True) -> None: ...

    def stop(self, proc: Proc, timeout: float = 3.0) -> int | None:
        """SIGTERM the process group, SIGKILL it after `timeout`; return the exit code if known."""
        ...

    def monotonic(self) -> float:
        """This node's CLOCK_MONOTONIC, now."""
        ...

    def put(self, local: Path, remote: str) -> None:
        """Copy a file of the runner's to the node."""
        ...

    def get(self, remote: str, local: Path) -> None:
        """Copy a file of the node's to the runner."""
        ...

    def log_path(self, log: Path) -> str:
        """Where a process on this node writes the log the runner calls `log` (fetched back at the end)."""
        ...


class Backend(Protocol):
    kind: str                    # 'mininet' | 'ssh': the manifest's backend
    topology: Topology
    remote: bool                 # the collector's run.db lives on the monitored node, not here

    def preflight(self) -> None: ...

    def build(self) -> None: ...

    def node(self, name: str) -> Node: ...

    def interfaces(self, name: str) -> list[Interface]:
        """The node's data-plane interfaces as they really are, in the order of its links."""
        ...

    def address(self, name: str) -> str:
        """The node's main address (a host's only interface; a router's first)."""
        ...

    def clocks(self, reference: str) -> Clocks:
        """Every node's and the runner's clock against `reference`'s (the monitored host)."""
        ...

    def tcp_connections(self, node: str, pid: int) -> list[dict]: ...

    def pause(self, node: str, shm_dir: str, pid: int) -> PauseState: ...

    def resume(self, node: str, shm_dir: str, pid: int) -> PauseState: ...

    # The link model as built and verified (docs/link-model.md), for the manifest: per topology link,
    # its rate and queue and, per end, the interface, qdisc, limit and offloads.
    link_model: list[dict]

    def queue_stats(self) -> list[dict]:
        """Per shaped link end: node, interface, and its queue's cumulative sent_packets, sent_bytes,
        drops, overlimits, requeues and current backlog_packets, backlog_bytes ([] when the links
        are shaped by someone else, e.g. a testbed's delay nodes)."""
        ...

    def teardown(self) -> None:
        """Remove everything build() made. Idempotent; safe after a partial build."""
        ...

    def versions(self) -> dict[str, str]: ...
