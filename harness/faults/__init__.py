"""Fault injection: the kinds of fault (nemeses) and the registry the runner dispatches through.

A fault kind is one module that declares everything about it (docs/faults.md, "Adding a fault
kind"): its `INFO` (rundir.faultkinds: report colour and label, targets and culprit as data, recorded
in each run's manifest for the analysis), its spec fields and rules (a harness.faults.spec.FaultSpec:
validation, footprint for the scheduler), and its class (the nemesis: setup, inject, heal, describe,
teardown; harness.faults.base.FaultKind), which carries the other two as `info` and `spec`.

    base.py            the interface (FaultKind), Part, FaultEnv
    spec.py            a kind's part of the spec language (FaultSpec, Footprint) and the spec's Fault
    iptables.py        what the DROP kinds share: the NESTLAB chain on a router (Firewall, Rule)
    ip_drop.py         all IP traffic of a host, dropped on a router
    tcp_drop.py        one live connection of a workload, dropped on a router
    app_pause.py       the interceptor's pause/resume handshake with a workload's processes
    path_blackhole.py  one link of a router's bundle of parallel links (ECMP) dropped
    loss.py            a share of a host's, a connection's or a link's packets, dropped at random
    link_down.py       every packet crossing one link (link.py: what link faults share)
    server_pause.py    the remote server of a workload stopped and continued
    delay.py           the replies of a service's app tier held (docs/service.md)
    tier_pause.py      a service tier's daemons stopped and continued (docs/service.md)
    slow.py            a service tier's processes under a cgroup CPU quota, v2 or v1 (cgroup.py)
    tier_hosts.py      what the kinds aimed at a service tier's host share

KINDS is the registry, one line per kind (a dict by name, looked up with rundir.errors.named, like
every registry of the project); harness.spec makes the spec's `Fault` from it. The runner never
names a kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from harness.faults.app_pause import AppPause
from harness.faults.base import FaultEnv, FaultKind, NoTarget, Part, target_json
from harness.faults.delay import Delay
from harness.faults.ip_drop import IpDrop
from harness.faults.iptables import (
    CHAIN,
    Firewall,
    Rule,
    chain_teardown_argv,
    chain_teardown_steps,
    ip_drop_rule,
    tcp_drop_rule,
)
from harness.faults.link_down import LinkDown
from harness.faults.loss import Loss
from harness.faults.path_blackhole import PathBlackhole
from harness.faults.server_pause import ServerPause
from harness.faults.slow import Slow
from harness.faults.tcp_drop import TcpDrop
from harness.faults.tier_pause import TierPause
from rundir.errors import named

if TYPE_CHECKING:
    from harness.window import Window

KINDS: dict[str, type[FaultKind]] = {kind.info.name: kind for kind in (
    IpDrop,
    TcpDrop,
    AppPause,
    PathBlackhole,
    Loss,
    ServerPause,
    Delay,
    TierPause,
    Slow,
    LinkDown,
)}


def kinds_used(faults: Iterable[Any], kinds: Mapping[str, Any] = KINDS) -> dict[str, dict]:
    """The manifest's `fault_kinds`: the info (rundir.faultkinds) of each kind these faults use, by
    name, in the order of first use; `kinds`: a registry of classes with an `info` (a streams run's:
    harness.streams.spec.KINDS)."""
    return {name: kinds[name].info.as_json() for name in dict.fromkeys(f.kind for f in faults)}


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
           "target_json", "tcp_drop_rule", "kinds_used"]
