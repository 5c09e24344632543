"""tcp_drop: one live TCP connection of a workload (instance) to its server, chosen with the run's
seed, dropped on a router in both directions (an iptables DROP rule on its 5-tuple,
harness.faults.iptables); or, with `target: {host: H}`, one connection of the service tier on H to
another host. The culprit is that connection's TCP module (on H when H is monitored).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from harness.faults.iptables import Rule, _Drop, connection_target
from harness.faults.spec import FaultSpec, FaultTarget, Loc, SpecView
from harness.faults.tier_hosts import not_a_tier
from rundir.faultkinds import FaultKindInfo

if TYPE_CHECKING:
    from harness.topology import Topology

INFO = FaultKindInfo("tcp_drop", colour="#74c476", order=1, key="tcp:{inode}")


class TcpDropSpec(FaultSpec):
    target_on_monitor: ClassVar[bool] = True
    host_targets: ClassVar[bool] = True   # {host: H}: a connection of the service tier on H

    at: str | None = Field(default=None, description="router that drops (network faults)")
    target: FaultTarget | None = None

    def check(self) -> None:
        if self.at is None:
            raise ValueError("tcp_drop needs 'at': the router that drops the packets")
        if self.target is None:
            raise ValueError("tcp_drop needs 'target: {workload: N}' or 'target: {host: H}' (a tier's host)")

    def check_against(self, spec: SpecView, topology: Topology) -> tuple[Loc, str] | None:
        if self.target.host is not None:
            problem = not_a_tier(spec, self.target.host)
            return None if problem is None else (("target", "host"), problem)
        return None


class TcpDrop(_Drop):
    """One live TCP connection of a workload (instance) to its server, both directions."""

    info = INFO
    spec = TcpDropSpec

    def _target(self, fault: FaultSpec) -> tuple[str, Callable[[str], Rule]]:
        return connection_target(self.env, fault)
