"""Rule variants: a rule system plus parameters, written `name:key=value,key=value`.

SYSTEMS is the registry of rule systems by name, as every registry of the project is (backends,
fault kinds, labelling policies): a dict built from its members, looked up with rundir.errors.named.
Adding a system: a module with `SYSTEM = RuleSystem(...)` (analysis.variants.base) and its entry here.
"""

from __future__ import annotations

from analysis.variants import flink_backpressure, flowdiagnoser, nest_cf, peer, streamsdiagnoser
from analysis.variants.base import (
    BLOCKED,
    DONTCARE,
    HEALTHY,
    LABELS,
    STALLED,
    Param,
    RuleSystem,
    Variant,
    parse_named,
)

SYSTEMS: dict[str, RuleSystem] = {s.name: s for s in (flowdiagnoser.SYSTEM, nest_cf.SYSTEM, peer.SYSTEM,
                                                      streamsdiagnoser.SYSTEM, flink_backpressure.SYSTEM)}


def systems() -> dict[str, RuleSystem]:
    """Every rule system, by name."""
    return SYSTEMS


def parse_variant(spec: str) -> Variant:
    """'flowdiagnoser:theta=3', 'nest-cf:anw=off,ign=off' -> Variant (UserError on a bad spec)."""
    system, values = parse_named(spec, "variant", systems())
    return Variant(system, {p.name: p.default for p in system.params} | values)


# What `nestlab diagnose` runs when no variant is named: one of each rule system.
DEFAULT_VARIANTS = ("flowdiagnoser", "nest-cf")
# The variant accuracy tables, comparisons and run summaries use when none is named: the thesis's NeST.
DEFAULT_VARIANT = "flowdiagnoser:theta=2"


__all__ = ["BLOCKED", "DEFAULT_VARIANT", "DEFAULT_VARIANTS", "DONTCARE", "HEALTHY", "LABELS", "STALLED", "SYSTEMS",
           "Param", "RuleSystem", "Variant", "parse_named", "parse_variant", "systems"]
