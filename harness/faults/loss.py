"""loss: a share (`rate`) of a host's traffic (`host`, default the monitored one) or of one
connection (`target`), dropped at random, per packet, both directions, on a router (iptables
`-m statistic`, harness.faults.iptables). The culprit is that of the full drop of the same target
(the ip+eth, or the connection), under the same impact criterion (docs/faults.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from pydantic import Field

from harness.faults.iptables import Rule, _Drop, connection_target, host_target
from harness.faults.spec import FaultSpec, FaultTarget, Footprint, SpecView, host_footprint, monitor_host
from harness.units import Percent
from rundir.faultkinds import FaultKindInfo

INFO = FaultKindInfo("loss", colour="#fdae6b", order=4)


class LossSpec(FaultSpec):
    target_on_monitor: ClassVar[bool] = True

    at: str | None = Field(default=None, description="router that drops (network faults)")
    host: str | None = Field(default=None, description="ip_drop, loss: whose traffic (default: the monitor)")
    target: FaultTarget | None = None
    rate: Percent | None = Field(default=None, description="loss: the share of packets dropped, e.g. '5%'")

    def check(self) -> None:
        if self.at is None:
            raise ValueError("loss needs 'at': the router that drops the packets")
        if self.host is not None and self.target is not None:
            raise ValueError("loss drops either a host's traffic ('host') or one connection ('target'), not both")
        if self.rate is None:
            raise ValueError("loss needs 'rate', e.g. '5%'")
        if not 0 < self.rate < 100:
            raise ValueError("loss rate must be above 0% and below 100% (100%: use ip_drop or tcp_drop)")

    def footprint(self, spec: SpecView) -> Footprint:
        """A connection's loss stalls its workload; a host's, like an ip_drop, the host's workloads."""
        if self.target is not None:
            return FaultSpec.footprint(self, spec)
        return host_footprint(spec, self.host or monitor_host(spec))


class Loss(_Drop):
    """A share (`rate`) of a host's traffic (`host`, default the monitored one) or of one connection
    (`target`), dropped at random, per packet, both directions."""

    info = INFO
    spec = LossSpec

    def _target(self, fault: FaultSpec) -> tuple[str, Callable[[str], Rule]]:
        return (connection_target if fault.target is not None else host_target)(self.env, fault)
