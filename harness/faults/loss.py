"""loss: a share (`rate`) of a host's traffic (`host`, default the monitored one), of one
connection (`target`) or of every packet crossing one link (`link: [A, B]`, harness/faults/link.py),
dropped at random, per packet, both directions, on a router (iptables `-m statistic`,
harness.faults.iptables). The culprit is that of the full drop of the same target (the ip+eth, the
connection, the link), under the same impact criterion (docs/faults.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from pydantic import Field

from harness.faults.iptables import Rule, _Drop, connection_target, host_target
from harness.faults.link import check_link_field, link_error, link_footprint, link_target
from harness.faults.spec import FaultSpec, FaultTarget, Footprint, Loc, SpecView, host_footprint, monitor_host
from harness.units import Percent
from rundir.faultkinds import FaultKindInfo

INFO = FaultKindInfo("loss", colour="#fdae6b", order=4)


class LossSpec(FaultSpec):
    target_on_monitor: ClassVar[bool] = True

    at: str | None = Field(default=None, description="router that drops (network faults)")
    host: str | None = Field(default=None, description="ip_drop, loss: whose traffic (default: the monitor)")
    target: FaultTarget | None = None
    rate: Percent | None = Field(default=None, description="loss: the share of packets dropped, e.g. '5%'")
    link: list[str] | None = Field(default=None, description="loss, link_down: the link's two nodes, e.g. [a1, c1]")

    def check(self) -> None:
        if self.link is not None:
            check_link_field(self.link)
            if self.host is not None or self.target is not None:
                raise ValueError("loss drops a share of a link's packets ('link') or of a host's ('host') or a "
                                 "connection's ('target'), one of them")
        elif self.at is None:
            raise ValueError("loss needs 'at': the router that drops the packets")
        if self.host is not None and self.target is not None:
            raise ValueError("loss drops either a host's traffic ('host') or one connection ('target'), not both")
        if self.rate is None:
            raise ValueError("loss needs 'rate', e.g. '5%'")
        if not 0 < self.rate < 100:
            raise ValueError("loss rate must be above 0% and below 100% (100%: use ip_drop or tcp_drop)")

    def check_against(self, spec: SpecView, topology) -> tuple[Loc, str] | None:
        return link_error(self, topology) if self.link is not None else None

    def same_action(self, other: FaultSpec) -> bool:
        if self.link is not None or getattr(other, "link", None) is not None:
            return sorted(self.link or ()) == sorted(getattr(other, "link", None) or ())
        return FaultSpec.same_action(self, other)

    def footprint(self, spec: SpecView) -> Footprint:
        """A connection's loss stalls its workload; a host's, like an ip_drop, the host's workloads;
        a link's, whatever crosses it (every workload)."""
        if self.link is not None:
            return link_footprint(spec)
        if self.target is not None:
            return FaultSpec.footprint(self, spec)
        return host_footprint(spec, self.host or monitor_host(spec))


class Loss(_Drop):
    """A share (`rate`) of a host's traffic (`host`, default the monitored one) or of one connection
    (`target`), dropped at random, per packet, both directions."""

    info = INFO
    spec = LossSpec

    def _target(self, fault: FaultSpec) -> tuple[str, Callable[[str], Rule]]:
        if fault.link is not None:
            return link_target(self.env, fault)
        return (connection_target if fault.target is not None else host_target)(self.env, fault)
