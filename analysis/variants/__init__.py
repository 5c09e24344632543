"""Rule variants: a rule system plus parameters, written `name:key=value,key=value`.

SYSTEMS is the registry of rule systems by name (a mapping, looked up with rundir.errors.named like
every registry of the project): the entry points of the group `nestlab.variants` and the plug-in
files (analysis.plugins). The built-ins are the project's own entry points (pyproject.toml), so a
built-in is loaded the way a plug-in is. Adding a system: a module with `SYSTEM = RuleSystem(...)`
(analysis.variants.base) and its entry point in pyproject.toml (and BUILTINS, for an older install);
from outside the package: docs/plugins.md.
"""

from __future__ import annotations

import itertools
import re

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
from rundir.errors import UserError

# The project's own entry points (pyproject.toml [project.entry-points] group nestlab.variants), for an
# install older than them (tests/test_plugins.py keeps the two the same).
BUILTINS = (
    ("flowdiagnoser", "analysis.variants.flowdiagnoser:SYSTEM"),
    ("nest-cf", "analysis.variants.nest_cf:SYSTEM"),
    ("peer", "analysis.variants.peer:SYSTEM"),
    ("streamsdiagnoser", "analysis.variants.streamsdiagnoser:SYSTEM"),
    ("flink-backpressure", "analysis.variants.flink_backpressure:SYSTEM"),
    ("ds2", "analysis.variants.ds2:SYSTEM"),
    ("whoseturn", "analysis.variants.whoseturn:SYSTEM"),
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


_RANGE = re.compile(r"^(-?[\d.]+)\.\.(-?[\d.]+)(?:/([\d.]+))?$")


def expand_values(text: str) -> list[str]:
    """'1..4' -> 1,2,3,4; '0..0.4/0.1' -> 0,0.1,...,0.4; 'on,off' -> on,off; '3' -> 3."""
    out = []
    for part in text.split(","):
        part = part.strip()
        m = _RANGE.match(part)
        if not m:
            out.append(part)
            continue
        a, b, step = m.group(1), m.group(2), m.group(3)
        is_int = all(re.fullmatch(r"-?\d+", x) for x in (a, b)) and (step is None or re.fullmatch(r"\d+", step))
        if is_int:
            lo, hi, st = int(a), int(b), int(step or 1)
            if st <= 0 or hi < lo:
                raise UserError(f"range {part!r}: expected low..high with low <= high")
            out += [str(v) for v in range(lo, hi + 1, st)]
        else:
            lo, hi, st = float(a), float(b), float(step or 1)
            if st <= 0 or hi < lo:
                raise UserError(f"range {part!r}: expected low..high/step with low <= high, step > 0")
            n = int(round((hi - lo) / st))
            out += [f"{lo + k * st:g}" for k in range(n + 1)]
    return out


def expand_variant(spec: str) -> list[str]:
    """'flowdiagnoser:theta=1..3' -> three variants; other specs are returned as they are."""
    name, sep, rest = spec.partition(":")
    if not sep or ".." not in rest:
        return [spec]
    items = [s.strip() for s in rest.split(",") if s.strip()]
    choices = []
    for it in items:
        key, eq, value = it.partition("=")
        choices.append([f"{key}={v}" for v in expand_values(value)] if eq and ".." in value else [it])
    return [f"{name}:{','.join(combo)}" for combo in itertools.product(*choices)]



def variant_specs(variants) -> list[tuple[str, Variant]]:
    """The one way variants are given, everywhere (API and command line): one or many (nested lists
    flattened), names ('flowdiagnoser:theta=2', ranges expanded: 'flowdiagnoser:theta=1..3'), Variant or
    RuleSystem objects (a system at its defaults). Returns (as written, Variant) pairs, one per
    canonical name (the first spelling kept). A value of another type is a UserError naming it."""
    out: list[tuple[str, Variant]] = []
    seen: set[str] = set()

    def add(item, depth: int = 0) -> None:
        if isinstance(item, str):
            pairs = [(spec, parse_variant(spec)) for spec in expand_variant(item)]
        elif isinstance(item, Variant):
            pairs = [(item.name, item)]
        elif isinstance(item, RuleSystem):
            v = Variant(item, {p.name: p.default for p in item.params})
            pairs = [(v.name, v)]
        elif depth < 3 and hasattr(item, "__iter__") and not isinstance(item, bytes | dict):
            for x in item:
                add(x, depth + 1)
            return
        else:
            raise UserError(f"variants: expected a name such as {DEFAULT_VARIANT!r}, a Variant, a RuleSystem or a "
                            f"list of them; got {type(item).__name__} {item!r:.60}")
        for written, v in pairs:
            if v.name not in seen:
                seen.add(v.name)
                out.append((written, v))

    add(variants)
    return out


# What `nestlab diagnose` runs when no variant is named: one of each rule system.
DEFAULT_VARIANTS = ("flowdiagnoser", "nest-cf")
# The variant accuracy tables, comparisons and run summaries use when none is named: the thesis's NeST.
DEFAULT_VARIANT = "flowdiagnoser:theta=2"
# The lab's own best variant, for runs recorded with the collector's probes (docs/probes.md): shown beside
# the seeds' in the end-of-run summary and the report of such a run.
PROBE_VARIANT = "flowdiagnoser:probe=on"


__all__ = ["BLOCKED", "BUILTINS", "DEFAULT_VARIANT", "DEFAULT_VARIANTS", "DONTCARE", "PROBE_VARIANT", "HEALTHY", "LABELS", "STALLED", "SYSTEMS",
           "Param", "RuleSystem", "Variant", "expand_values", "expand_variant", "parse_named", "parse_variant", "systems",
           "variant_specs"]
