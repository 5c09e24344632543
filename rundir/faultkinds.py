"""What the analysis needs to know about a fault kind, recorded with the run: its report colour and
label, its rank in the report, and its targets and culprit as data. Standard library only.

A fault kind is one module of the lab (harness/faults/<kind>.py; a streams kind in harness/streams/)
that declares its `FaultKindInfo` beside its spec fields and injection. The runner records the infos
of the kinds a run uses in the manifest (`fault_kinds`); every reader (rundir.targets, the analysis'
labels, figures and report) takes them from there, through `kinds_of(manifest)`, so a kind added
later needs no edit here nor in analysis/. `LEGACY` holds the infos of the kinds that existed before
infos were recorded, for the runs recorded then (and a run's own infos win over them).
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class FaultKindInfo:
    """A fault kind as the run directory's readers see it (docs/faults.md, "Adding a fault kind")."""

    name: str
    # Reports: the colour of its windows in figures (None: the figure's neutral grey), the text its
    # legend names it by (empty: the name), and its rank when the report picks one module's subgraph
    # per kind to draw (lower first; None: its faults pick none).
    colour: str | None = None
    label: str = ""
    order: int | None = 100
    # Which module's subgraph shows it: "above" the application above its target, "workload" the first
    # workload's application (for a target every workload shares, such as the monitored interface).
    subgraph: str = "above"
    # Targets beyond the one in its row: the target's children of this module kind (app_pause: the
    # application's sockets, which stall with it). Collateral (what the labelling policy may exclude)
    # is then the targets' neighbours in the module graph, for every kind alike.
    children: str | None = None
    # When its targets are culprits (positives): when the row's target JSON holds these values ({}:
    # always; None: never, e.g. a streams dropper, which filters as a PE may). A throttle: {"rate": 0}.
    stalls: dict[str, Any] | None = field(default_factory=dict)
    # Runs recorded before faults rows named their module (`module_key` in the target JSON): the key
    # made from the target's fields, e.g. "tcp:{inode}" (also {monitor_if}, the monitored interface);
    # with key_host, only when the target's `host` (absent: the monitored one) is the monitored host.
    # A kind that records module_key (every kind since) leaves it None.
    key: str | None = None
    key_host: bool = False

    @property
    def shown(self) -> str:
        return self.label or self.name

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def culprit(self, target: Any) -> bool:
        """Whether a fault of this kind with this target JSON (a dict) stalls its targets. Numbers
        compare as numbers (a JSON true is not 1)."""
        if self.stalls is None:
            return False
        if not self.stalls:
            return True
        if not isinstance(target, Mapping):
            return False
        return all(_same(target.get(k), v) for k, v in self.stalls.items())

    def module_key(self, target: Mapping[str, Any], monitor: str | None, monitor_if: str | None) -> str | None:
        """The collector key of the module a target names by the `key` rule (None: not observed)."""
        if self.key is None:
            return None
        if self.key_host and target.get("host", monitor) != monitor:
            return None
        values = {**target, "monitor_if": monitor_if}
        fields = [f for _, f, _, _ in string.Formatter().parse(self.key) if f]
        if any(values.get(f) in (None, "") for f in fields):
            return None
        return self.key.format_map(values)


def _same(value: Any, want: Any) -> bool:
    if isinstance(want, int | float) and not isinstance(want, bool):
        return isinstance(value, int | float) and not isinstance(value, bool) and value == want
    return value == want


# The kinds of the runs recorded before the manifest held their infos (format 5 and older).
LEGACY: dict[str, FaultKindInfo] = {info.name: info for info in (
    FaultKindInfo("ip_drop", colour="#6baed6", order=5, subgraph="workload", key="ipeth:{monitor_if}", key_host=True),
    FaultKindInfo("tcp_drop", colour="#74c476", order=1, key="tcp:{inode}"),
    FaultKindInfo("app_pause", colour="#fb6a4a", order=0, children="socket", key="app:{pid}"),
    FaultKindInfo("path_blackhole", colour="#9e9ac8", order=2),
    FaultKindInfo("loss", colour="#fdae6b", order=4),
    FaultKindInfo("server_pause", colour="#c994c7", order=3),
    FaultKindInfo("throttle", order=None, stalls={"rate": 0}),
    FaultKindInfo("dropper", order=None, stalls=None),
)}


def kinds_of(manifest: Any) -> dict[str, FaultKindInfo]:
    """The fault kinds a run may hold: LEGACY, and over them the infos its manifest (a
    rundir.manifest.Manifest, or None) recorded."""
    recorded = getattr(manifest, "fault_kinds", None) or {}
    return {**LEGACY, **recorded}
