"""Rule variants: a rule system plus parameters, written `name:key=value,key=value`.

SYSTEMS is the registry of rule systems by name (a mapping, looked up with rundir.errors.named like
every registry of the project): the entry points of the group `nestlab.variants` and the plug-in
files (analysis.plugins). The built-ins are the project's own entry points (pyproject.toml), so a
built-in is loaded the way a plug-in is. Adding a system: a module with `SYSTEM = RuleSystem(...)`
(analysis.variants.base) and its entry point in pyproject.toml (and BUILTINS, for an older install);
from outside the package: docs/plugins.md.
"""

from __future__ import annotations

from analysis.plugins import Registry, check_contract, check_name
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

# The project's own entry points (pyproject.toml [project.entry-points] group nestlab.variants), for an
# install older than them (tests/test_plugins.py keeps the two the same).
BUILTINS = (
    ("flowdiagnoser", "analysis.variants.flowdiagnoser:SYSTEM"),
    ("nest-cf", "analysis.variants.nest_cf:SYSTEM"),
    ("peer", "analysis.variants.peer:SYSTEM"),
    ("streamsdiagnoser", "analysis.variants.streamsdiagnoser:SYSTEM"),
    ("flink-backpressure", "analysis.variants.flink_backpressure:SYSTEM"),
)


def check_system(obj, builtin: bool) -> str | None:
    """What is wrong with a rule system's definition, or None."""
    if not isinstance(obj, RuleSystem):
        return f"not a RuleSystem but {type(obj).__name__}"
    problem = check_name(obj.name) or check_contract(obj, builtin)
    if problem:
        return problem
    if obj.kind not in ("label", "cf"):
        return f"kind {obj.kind!r} is neither 'label' nor 'cf'"
    if not callable(obj.diagnose):
        return "its diagnose is not callable"
    if not all(isinstance(p, Param) for p in obj.params):
        return "its params are not all Param objects"
    names = [p.name for p in obj.params]
    if len(set(names)) != len(names):
        return "two params have the same name"
    return None


SYSTEMS: Registry = Registry("variant", "variants", check_system, lambda s: s.name,
                             lambda: list(BUILTINS))


def systems() -> Registry:
    """Every rule system, by name (a mapping; SYSTEMS.origin(name) says where one came from)."""
    return SYSTEMS


def parse_variant(spec: str) -> Variant:
    """'flowdiagnoser:theta=3', 'nest-cf:anw=off,ign=off' -> Variant (UserError on a bad spec)."""
    system, values = parse_named(spec, "variant", systems())
    return Variant(system, {p.name: p.default for p in system.params} | values)


# What `nestlab diagnose` runs when no variant is named: one of each rule system.
DEFAULT_VARIANTS = ("flowdiagnoser", "nest-cf")
# The variant accuracy tables, comparisons and run summaries use when none is named: the thesis's NeST.
DEFAULT_VARIANT = "flowdiagnoser:theta=2"


__all__ = ["BLOCKED", "BUILTINS", "DEFAULT_VARIANT", "DEFAULT_VARIANTS", "DONTCARE", "HEALTHY", "LABELS", "STALLED", "SYSTEMS",
           "Param", "RuleSystem", "Variant", "parse_named", "parse_variant", "systems"]
