"""What every backend gives the runner: a built network of nodes it can run commands on.

A Node runs a command to completion, starts a background process in its own process group (so the
whole group can be signalled and reaped), signals processes, copies files, and reads the monotonic
clock. The Mininet backend implements it with mnexec in the node's namespaces (every node shares this
machine's files and clock); the SSH backend over paramiko on testbed nodes (docs/ssh-backend.md).

A Backend builds (Mininet) or verifies (SSH) the network, says which address and interface each node
really has, how each node's clock relates to the monitored host's, and does the host-local operations
the runner needs where a process runs (its TCP connections, the interceptor pause handshake). It also
answers everything else in which a run on this machine and one on testbed nodes differ: what the
manifest records, where the collector writes and how its progress is read, and what must be brought
back at the end; the runner asks, and never branches on the kind (harness/backends/__init__.py lists
the kinds).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from harness.interceptor.pause import PauseState
from harness.topology import Interface, Topology

if TYPE_CHECKING:
    from rundir.recorder import RunRecorder


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
    """Everything the runner asks of a backend, in the order of a run. Every backend is made the same
    way: `Backend(topology, ledger, spec, run_id)` (harness.backends.make_backend); the runner never
    asks which kind it has."""

    kind: str                    # 'mininet' | 'ssh': the manifest's backend
    topology: Topology
    # The collector's run.db lives on the monitored node, not here, and the fault chain is removed by
    # the backend's ledger entries after a killed run (harness/faults/iptables.py records them).
    remote: bool

    @classmethod
    def check_runner(cls) -> None:
        """What the runner's own machine needs, checked before a run directory is made (UserError)."""
        ...

    # -- setting up ----------------------------------------------------------------------------
    def announce(self, step: str) -> str | None:
        """What the console says before `step` ('preflight' or 'build'), if anything."""
        ...

    def preflight(self, programs: Callable[[], None] | None = None) -> None:
        """Everything that can fail before anything is created: programs, permissions, connections.
        `programs`: the lab's check of the programs its workloads run on this machine (the lab's, which
        stands above the backends), called by a backend whose nodes run this machine's programs."""
        ...

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

    # -- what the manifest records -------------------------------------------------------------
    def versions(self) -> dict[str, str | dict]:
        """The software the run used, where it ran (the manifest's `versions`, after `nestlab`)."""
        ...

    def manifest_monitor(self, name: str) -> dict:
        """Keys the manifest's `monitor` gets besides host, address and interface."""
        ...

    def manifest_extra(self) -> dict:
        """Top-level manifest keys only this backend records (SSH: `nodes`)."""
        ...

    # The link model as built and verified (docs/link-model.md), for the manifest: per topology link,
    # its rate and queue and, per end, the interface, qdisc, limit and offloads.
    link_model: list[dict]

    # -- the collector and the workloads -------------------------------------------------------
    def python(self, name: str) -> list[str]:
        """argv prefix that runs this package's modules on the node."""
        ...

    def interceptor(self, name: str) -> tuple[str, dict[str, str]]:
        """A shared-memory directory for the interceptor on the node, and the clients' environment."""
        ...

    def pythonpath(self, name: str) -> str:
        """Where this package is on the node (a service's app is imported from there)."""
        ...

    def separate_collectors(self) -> bool:
        """Whether each monitored host gets a collector of its own (testbed nodes: one machine's
        collector cannot reach another's namespaces), merged on one clock at the end; else one
        collector reaches every monitored host."""
        ...

    def trace_db(self, name: str) -> str | None:
        """Where the message drainer on `name` writes (testbed nodes: a database there, merged at the
        end with the node's clock offset); None: the run's own run.db, one drainer for every host."""
        ...

    def check_clocks(self) -> None:
        """Measure the clocks again during the run; a node that lost sync or no longer answers ends the
        run (UserError naming it). Nothing where the nodes share one clock."""
        ...

    def ignored_interfaces(self, name: str) -> list[str]:
        """Interfaces of the node outside the experiment, which its collector leaves out (SSH: the
        control interface carrying the runner's session)."""
        ...

    def collector_db(self, name: str, run_db: RunRecorder) -> str:
        """The run.db the collector on `name` writes: the run's own (Mininet), or a new one on the node
        (SSH; bring_back() merges it into the run's)."""
        ...

    def snapshots(self, name: str, run_db: RunRecorder) -> int:
        """Snapshots the collector on `name` has recorded so far (SSH: a round trip)."""
        ...

    def start_progress(self, name: str) -> None:
        """Once the collector records: keep progress_snapshots() current off the main loop (SSH: a
        thread polling the node; Mininet: nothing to do)."""
        ...

    def progress_snapshots(self, name: str, run_db: RunRecorder) -> int:
        """The snapshot count for the progress line, without waiting on the network."""
        ...

    def stop_progress(self) -> None: ...

    # -- host-local operations of the fault kinds ----------------------------------------------
    def tcp_connections(self, node: str, pid: int) -> list[dict]: ...

    def pause(self, node: str, shm_dir: str, pid: int) -> PauseState: ...

    def resume(self, node: str, shm_dir: str, pid: int) -> PauseState: ...

    def set_sysctls(self, name: str, values: dict[str, str]) -> None:
        """Set sysctls on a node for this run only: gone with its namespace (Mininet) or put back at
        teardown and by `nestlab cleanup` (testbed nodes: the previous values in the ledger)."""
        ...

    def queue_stats(self) -> list[dict]:
        """Per shaped link end: node, interface, and its queue's cumulative sent_packets, sent_bytes,
        drops, overlimits, requeues and current backlog_packets, backlog_bytes ([] when the links
        are shaped by someone else, e.g. a testbed's delay nodes)."""
        ...

    # -- the end -------------------------------------------------------------------------------
    def clocks_end(self) -> Clocks | None:
        """The clocks measured again after the run (how far they drifted apart: the manifest's
        `clock_offsets_end`); None where they share one clock."""
        ...

    def bring_back(self, run_db: RunRecorder, run_dir: Path) -> None:
        """Whatever the run left on the nodes into the run directory: the collector's tables merged
        into `run_db`, every node's logs into logs/ (nothing on Mininet: it is all here already)."""
        ...

    def teardown(self) -> None:
        """Remove everything build() made. Idempotent; safe after a partial build."""
        ...
