"""ip_drop: all IP traffic of a host (default: the monitored one) dropped on a router, both
directions (an iptables DROP rule, harness.faults.iptables). The culprit is the monitored interface's
ip+eth module; an ip_drop of another host targets no module (it is not observed).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import Field

from harness.faults.iptables import Rule, _Drop, host_target
from harness.faults.spec import FaultSpec, FaultTarget, Footprint, SpecView, host_footprint, monitor_host
from rundir.faultkinds import FaultKindInfo

INFO = FaultKindInfo("ip_drop", colour="#6baed6", order=5, subgraph="workload", key="ipeth:{monitor_if}",
                     key_host=True)


class IpDropSpec(FaultSpec):
    at: str | None = Field(default=None, description="router that drops (network faults)")
    host: str | None = Field(default=None, description="ip_drop, loss: whose traffic (default: the monitor)")
    target: FaultTarget | None = None   # taken and not used by the injection; it narrows the footprint

    def check(self) -> None:
        if self.at is None:
            raise ValueError("ip_drop needs 'at': the router that drops the packets")

    def footprint(self, spec: SpecView) -> Footprint:
        """The host's traffic stalls every workload that runs on it or is served by it."""
        if self.target is not None:
            return FaultSpec.footprint(self, spec)
        return host_footprint(spec, self.host or monitor_host(spec))


class IpDrop(_Drop):
    """All IP traffic of a host (default: the monitored one), both directions."""

    info = INFO
    spec = IpDropSpec

    def _target(self, fault: FaultSpec) -> tuple[str, Callable[[str], Rule]]:
        return host_target(self.env, fault)
