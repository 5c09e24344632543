"""The backends: where a run's nodes live, by the name a topology gives (Topology.backend).

    base.py      the interfaces: Node, Backend (everything the runner asks), Proc, Clocks
    mininet.py   MininetBackend: the topology as Mininet hosts on this machine (the default)
    ssh/         SshBackend: testbed nodes over SSH (docs/ssh-backend.md)

BACKENDS maps each kind to a loader of its class, as Mininet's TOPOS maps a name to a constructor (a
registry like every other of the project: a dict by name, looked up with rundir.errors.named); the
loaders import on call, so that importing this registry imports neither Mininet nor paramiko.
Every backend is made with the same arguments: make_backend(kind, topology, ledger, spec, run_id).
Adding a backend: a class following base.Backend and its entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rundir.errors import named

if TYPE_CHECKING:
    from harness.backends.base import Backend
    from harness.ledger import Ledger
    from harness.topology import Topology


def _mininet() -> type[Backend]:
    from harness.backends.mininet import MininetBackend

    return MininetBackend


def _ssh() -> type[Backend]:
    from harness.backends.ssh import SshBackend

    return SshBackend


BACKENDS: dict[str, Callable[[], type[Backend]]] = {
    "mininet": _mininet,
    "ssh": _ssh,
}


def backend_class(kind: str) -> type[Backend]:
    return named(BACKENDS, kind, "backend")()


def make_backend(kind: str, topology: Topology, ledger: Ledger | None, spec: Any, run_id: str) -> Backend:
    """The backend `kind` for a run of `spec` (harness.spec.Spec, which stands above the backends;
    run id `run_id`) on `topology`; what it changes goes to `ledger` first."""
    return backend_class(kind)(topology, ledger, spec, run_id)


def check_runner(kind: str) -> None:
    """What backend `kind` needs of the runner's machine (e.g. root), before anything is made (a
    study kind's lab half asks it, harness.studies)."""
    backend_class(kind).check_runner()
