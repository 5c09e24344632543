"""The interface every fault kind (a nemesis, in Jepsen's words) gives the runner.

A kind's class also carries what is known of the kind before any run: `info` (rundir.faultkinds:
report colour and label, targets as data, recorded in the manifest) and `spec` (its fields and rules
in the spec language, harness.faults.spec). A kind is made once per run from the FaultEnv (what it acts through). Before t0 the runner calls
`setup` with the run's faults of that kind (shared state: the NESTLAB chain on each router); at each
planned window `inject` puts the fault in force and returns one Part per thing it acts on (a pair
of rules, each paused process), each verified in force; `heal` undoes one part and returns when that
was verified; `describe` is the exact rule or signal text of a part's action; `teardown` removes the
shared state on every exit path. Times are on the run's reference clock (the monitored host's
CLOCK_MONOTONIC): kinds convert their nodes' stamps with env.clocks.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from harness.backends.base import Backend, Clocks
    from harness.faults.spec import FaultSpec, SpecView
    from harness.window import Window
    from rundir.faultkinds import FaultKindInfo


def target_json(**fields) -> str:
    """A faults row's target: a description, the identifiers of what the fault acts on, and
    `module_key`, the collector key of the module it targets (None: not observed), by which the
    runner and the analysis find that module (rundir.targets.fault_target_key)."""
    return json.dumps(fields, sort_keys=True)


class NoTarget(Exception):  # noqa: N818 - reads as what happened: the window is skipped
    """Nothing to act on when the window came (the runner counts it as skipped, with this reason)."""


@dataclass
class FaultEnv:
    """What fault kinds act through, given by the runner once the network, clocks and workloads exist."""

    spec: SpecView                # harness.spec.Spec
    backend: Backend
    clocks: Clocks
    workloads: Any                # harness.workloads.Workloads (it imports harness.spec, which imports the kinds)
    rng: random.Random            # the run's seeded stream (which connection a tcp_drop takes)
    run_id: str
    shm_dir: str | None = None    # the interceptor's directory on the first monitored host (app_pause)
    ledger: Any = None            # the run's ledger: undo entries for what a killed run leaves on testbed nodes
    shared: dict[str, Any] = field(default_factory=dict)   # state several kinds share, by name
    shm_dirs: dict[str, str] | None = None   # the interceptor's directory of each monitored host, by host


@dataclass
class Part:
    """One thing a fault acts on, in force: one row of the faults table."""

    target: str       # the row's target JSON (target_json)
    rule: str         # the exact rule or signal used (the kind's describe(action))
    start: float      # verified in force, on the reference clock
    action: Any       # what heal() undoes (an iptables Rule, a paused process)


class FaultKind(Protocol):
    """A kind of fault. KINDS maps the spec's `kind` to a class whose instances follow this."""

    info: ClassVar[FaultKindInfo]
    spec: ClassVar[type[FaultSpec]]

    def __init__(self, env: FaultEnv) -> None: ...

    def setup(self, faults: Sequence[FaultSpec]) -> None:
        """Before t0: prepare what these faults (the run's of this kind) need."""
        ...

    def inject(self, window: Window, first_id: int) -> list[Part]:
        """Put the fault of `window` in force; its parts' rows get ids first_id, first_id + 1, ...
        Raises NoTarget when there is nothing to act on."""
        ...

    def heal(self, part: Part) -> float:
        """Undo one part; return when that was verified, on the reference clock."""
        ...

    def describe(self, action: Any) -> str:
        """The exact rule or signal text of an action (the faults row's `rule`)."""
        ...

    def teardown(self) -> None:
        """Remove what setup made. Idempotent; safe after a partial setup."""
        ...
