"""Fault injection: the kinds of fault (nemeses) and the registry the runner dispatches through.

    base.py          the interface (FaultKind: setup, inject, heal, describe, teardown), Part, FaultEnv
    iptables.py      ip_drop, tcp_drop, loss: DROP rules in the NESTLAB chain on a router (Firewall, Rule)
    path.py          path_blackhole: one link of a router's bundle of parallel links (ECMP) dropped
    app_pause.py     app_pause: the interceptor's pause/resume handshake with a workload's processes
    server_pause.py  server_pause: the remote server of a workload stopped and continued

KINDS is the registry (a dict by name, looked up with rundir.errors.named, like every registry of the
project). Adding a kind: a module with a class following FaultKind, its entry in KINDS, and the name
in the spec's `Fault.kind` (harness/spec.py). The runner never names a kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.faults.app_pause import AppPause
from harness.faults.base import FaultEnv, FaultKind, NoTarget, Part, target_json
from harness.faults.iptables import (
    CHAIN,
    Firewall,
    IpDrop,
    Loss,
    Rule,
    TcpDrop,
    chain_teardown_argv,
    chain_teardown_steps,
    ip_drop_rule,
    tcp_drop_rule,
)
from harness.faults.path import PathBlackhole
from harness.faults.server_pause import ServerPause
from rundir.errors import named

if TYPE_CHECKING:
    from harness.spec import Window

KINDS: dict[str, type[FaultKind]] = {
    "ip_drop": IpDrop,
    "tcp_drop": TcpDrop,
    "app_pause": AppPause,
    "path_blackhole": PathBlackhole,
    "loss": Loss,
    "server_pause": ServerPause,
}


class Faults:
    """The run's fault kinds composed into one (Jepsen's compose): one object per kind the spec
    uses, in the order of its first use; `of(window)` is the kind that injects that window."""

    def __init__(self, env: FaultEnv):
        self.env = env
        names = dict.fromkeys(f.kind for f in env.spec.faults)
        self.kinds: dict[str, FaultKind] = {name: named(KINDS, name, "fault kind")(env) for name in names}

    def setup(self) -> None:
        for name, kind in self.kinds.items():
            kind.setup([f for f in self.env.spec.faults if f.kind == name])

    def of(self, window: Window) -> FaultKind:
        return self.kinds[self.env.spec.faults[window.spec_index].kind]

    def teardown(self) -> None:
        for kind in self.kinds.values():
            kind.teardown()


__all__ = ["CHAIN", "KINDS", "AppPause", "FaultEnv", "FaultKind", "Faults", "Firewall", "IpDrop", "Loss",
           "NoTarget", "Part", "PathBlackhole", "Rule", "ServerPause", "TcpDrop", "chain_teardown_argv", "chain_teardown_steps", "ip_drop_rule",
           "target_json", "tcp_drop_rule"]
