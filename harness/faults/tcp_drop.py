"""tcp_drop: one live TCP connection of a workload (instance) to its server, chosen with the run's
seed, dropped on a router in both directions (an iptables DROP rule on its 5-tuple,
harness.faults.iptables). The culprit is that connection's TCP module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from pydantic import Field

from harness.faults.iptables import Rule, _Drop, connection_target
from harness.faults.spec import FaultSpec, FaultTarget
from rundir.faultkinds import FaultKindInfo

INFO = FaultKindInfo("tcp_drop", colour="#74c476", order=1, key="tcp:{inode}")


class TcpDropSpec(FaultSpec):
    target_on_monitor: ClassVar[bool] = True

    at: str | None = Field(default=None, description="router that drops (network faults)")
    target: FaultTarget | None = None

    def check(self) -> None:
        if self.at is None:
            raise ValueError("tcp_drop needs 'at': the router that drops the packets")
        if self.target is None:
            raise ValueError("tcp_drop needs 'target: {workload: N}'")


class TcpDrop(_Drop):
    """One live TCP connection of a workload (instance) to its server, both directions."""

    info = INFO
    spec = TcpDropSpec

    def _target(self, fault: FaultSpec) -> tuple[str, Callable[[str], Rule]]:
        return connection_target(self.env, fault)
