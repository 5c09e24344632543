"""What every rule system is made of: its labels, its parameters (Param) and the RuleSystem itself,
a Variant (a system plus parameter values), and the `name:key=value,...` parser variants and
labelling policies share (analysis.variants is the registry). A system's `diagnose(batch, **params)` gets every
module-snapshot cell of the stretches to diagnose (analysis.model.batch.Batch) and returns, per
direction, a (result, positive) pair of flat per-cell arrays:
- label systems (`kind="label"`): result is an int8 code into LABELS;
- certainty-factor systems (`kind="cf"`): result is the certainty factor (float64, -1..+1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rundir.errors import UserError, named

LABELS = ("HEALTHY", "DONTCARE", "BLOCKED", "STALLED")
HEALTHY, DONTCARE, BLOCKED, STALLED = range(4)


def stalled_positive(results: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A label system's return value from its label codes per direction: (result, positive), positive
    = STALLED (the systems that rewrite flowdiagnoser's labels: peer, whoseturn)."""
    return {d: (res, res == STALLED) for d, res in results.items()}


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


def seconds(text: str) -> float:
    """A duration in seconds, >= 0 ('1', '0.5', '500ms')."""
    t = text.strip().lower()
    v = float(t[:-2]) / 1000 if t.endswith("ms") else float(t[:-1] if t.endswith("s") else t)
    if not v >= 0 or v == float("inf"):
        raise ValueError("expected a duration in seconds >= 0")
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
    # into analysis.model.stretches.KINDS, -1 if unknown).
    over_time: Callable[..., Callable[..., np.ndarray] | None] | None = None
    presets: tuple[str, ...] = ()  # notable variants, listed by `nestlab variants`
    # The plug-in contract version the system is written for (analysis.plugins.CONTRACT, docs/plugins.md):
    # a plug-in must state it, and the lab refuses another; the built-ins go with the lab.
    contract: int | None = None


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


def parse_named(spec: str, what: str, known: dict) -> tuple[Any, dict[str, Any]]:
    """'name:key=value,key=value' -> (known[name], {key: parsed value}) for anything that is a name
    plus Params (rule variants, labelling policies). UserError names the spec and the problem."""
    name, _, rest = spec.strip().partition(":")
    thing = named(known, name.strip(), what)
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


