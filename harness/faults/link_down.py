"""link_down: every packet crossing one link of the topology (`link: [A, B]`), both directions,
dropped on a router end of it (harness/faults/link.py): a failed link that routing has not noticed,
so the connections hashed onto it stall while the others run on. Its culprit is the link."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import Field

from harness.faults.iptables import Rule, _Drop
from harness.faults.link import check_link_field, link_error, link_footprint, link_target
from harness.faults.spec import FaultSpec, Footprint, Loc, SpecView
from rundir.faultkinds import FaultKindInfo

INFO = FaultKindInfo("link_down", colour="#636363", order=None)


class LinkDownSpec(FaultSpec):
    at: str | None = Field(default=None, description="router that drops (network faults)")
    link: list[str] | None = Field(default=None, description="loss, link_down: the link's two nodes, e.g. [a1, c1]")

    def check(self) -> None:
        if self.link is None:
            raise ValueError("link_down needs 'link': the link's two nodes, e.g. [a1, c1]")
        check_link_field(self.link)

    def check_against(self, spec: SpecView, topology) -> tuple[Loc, str] | None:
        return link_error(self, topology)

    def footprint(self, spec: SpecView) -> Footprint:
        return link_footprint(spec)

    def same_action(self, other: FaultSpec) -> bool:
        return sorted(self.link or ()) == sorted(getattr(other, "link", None) or ())


class LinkDown(_Drop):
    info = INFO
    spec = LinkDownSpec

    def _target(self, fault: FaultSpec) -> tuple[str, Callable[[str], Rule]]:
        return link_target(self.env, fault)
