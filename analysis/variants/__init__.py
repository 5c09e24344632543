"""Rule variants: a rule system plus parameters, written `name:key=value,key=value`.

Each module in this package that defines `SYSTEM = RuleSystem(...)` is a rule system; it is found
by name, so adding one means adding one module. A system's `diagnose(batch, **params)` gets every
module-snapshot cell of the stretches to diagnose (analysis.cells.Batch) and returns, per
direction, a (result, positive) pair of flat per-cell arrays:
- label systems (`kind="label"`): result is an int8 code into LABELS;
- certainty-factor systems (`kind="cf"`): result is the certainty factor (float64, -1..+1).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.errors import UserError

LABELS = ("HEALTHY", "DONTCARE", "BLOCKED", "STALLED")
HEALTHY, DONTCARE, BLOCKED, STALLED = range(4)

_TRUE = {"on", "true", "yes", "1"}
_FALSE = {"off", "false", "no", "0"}


def on_off(text: str) -> bool:
    t = text.strip().lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise ValueError("expected on or off")


def positive_int(text: str) -> int:
    v = int(text)
    if v < 1:
        raise ValueError("expected an integer >= 1")
    return v


def non_negative_int(text: str) -> int:
    v = int(text)
    if v < 0:
        raise ValueError("expected an integer >= 0")
    return v


def certainty(text: str) -> float:
    v = float(text)
    if not -1.0 <= v < 1.0:
        raise ValueError("expected a number in [-1, 1)")
    return v


@dataclass(frozen=True)
class Param:
    name: str
    default: Any
    parse: Callable[[str], Any]
    help: str
    shown: bool = False  # always part of the variant's name, even at its default

    def text(self, value: Any) -> str:
        if isinstance(value, bool):
            return "on" if value else "off"
        return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class RuleSystem:
    name: str
    kind: str                      # "label" | "cf"
    summary: str
    params: tuple[Param, ...]
    diagnose: Callable[..., dict[str, tuple[np.ndarray, np.ndarray]]]
    # Optional rule over consecutive snapshots: params -> None, or a function
    # (module ids, seqs, positive, kinds), flat arrays of one direction -> positive (kinds: index
    # into analysis.stretches.KINDS, -1 if unknown).
    over_time: Callable[..., Callable[..., np.ndarray] | None] | None = None
    presets: tuple[str, ...] = ()  # notable variants, listed by `nestlab variants`


@dataclass(frozen=True)
class Variant:
    system: RuleSystem
    params: dict[str, Any] = field(hash=False)

    @property
    def name(self) -> str:
        """Canonical name: shown parameters and those that differ from their defaults (a parameter
        missing from `params` is at its default, so code written before a parameter existed keeps
        naming and running its variants as before)."""
        values = {p.name: self.params.get(p.name, p.default) for p in self.system.params}
        parts = [f"{p.name}={p.text(values[p.name])}" for p in self.system.params
                 if p.shown or values[p.name] != p.default]
        return self.system.name + (":" + ",".join(parts) if parts else "")

    @property
    def kind(self) -> str:
        return self.system.kind

    def diagnose(self, batch) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per direction (result, positive), flat over the batch's cells."""
        return self.system.diagnose(batch, **self.params)


_SYSTEMS: dict[str, RuleSystem] | None = None


def systems() -> dict[str, RuleSystem]:
    """Every rule system in this package, by name."""
    global _SYSTEMS
    if _SYSTEMS is None:
        found = {}
        for info in pkgutil.iter_modules(__path__):
            mod = importlib.import_module(f"{__name__}.{info.name}")
            system = getattr(mod, "SYSTEM", None)
            if isinstance(system, RuleSystem):
                found[system.name] = system
        _SYSTEMS = dict(sorted(found.items()))
    return _SYSTEMS


def parse_named(spec: str, what: str, known: dict) -> tuple[Any, dict[str, Any]]:
    """'name:key=value,key=value' -> (known[name], {key: parsed value}) for anything that is a name
    plus Params (rule variants, labelling policies). UserError names the spec and the problem."""
    name, _, rest = spec.strip().partition(":")
    thing = known.get(name.strip())
    if thing is None:
        raise UserError(f"unknown {what} {name!r} (known: {', '.join(known)})")
    byname = {p.name: p for p in thing.params}
    values = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if key not in byname:
            raise UserError(f"{what} {spec!r}: unknown parameter {key!r} (known: {', '.join(byname) or 'none'})")
        if not eq:
            raise UserError(f"{what} {spec!r}: expected {key}=value")
        try:
            values[key] = byname[key].parse(value.strip())
        except ValueError as e:
            raise UserError(f"{what} {spec!r}: {key}={value}: {e}") from None
    return thing, values


def parse_variant(spec: str) -> Variant:
    """'flowdiagnoser:theta=3', 'nest-cf:anw=off,ign=off' -> Variant (UserError on a bad spec)."""
    system, values = parse_named(spec, "variant", systems())
    return Variant(system, {p.name: p.default for p in system.params} | values)


# What `nestlab diagnose` runs when no variant is named: one of each rule system.
DEFAULT_VARIANTS = ("flowdiagnoser", "nest-cf")
# The variant accuracy tables, comparisons and run summaries use when none is named: the thesis's NeST.
DEFAULT_VARIANT = "flowdiagnoser:theta=2"
