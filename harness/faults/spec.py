"""A fault kind's part of the spec language (docs/faults.md, "Adding a fault kind").

Every fault of a spec has a `kind` and a `schedule`; the rest are the kind's own fields. A kind
declares them in a FaultSpec subclass, with its rules: `check` (the fields, one line per mistake),
`check_against` (the fault against the experiment's topology), `footprint` (what it stalls, for the
scheduler), `same_action` and `node`. `fault_model(kinds)` makes the spec's one `Fault` model from
the registered kinds: every kind's fields (a field another kind declares is None), `kind` one of
theirs, and each fault checked by its own kind's rules, so a new kind edits no other module.

This module imports nothing of harness.spec, which builds on it: kinds import from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from harness.units import Duration

if TYPE_CHECKING:
    from harness.topology import Topology

Loc = tuple[str | int, ...]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FaultTarget(Strict):
    """What a fault acts on: a workload (`{workload: N}`, and an instance), or a host (`{host: app2}`:
    for a kind with a `host` field the same as `host: app2`; tcp_drop and app_pause: the service
    tier's processes on that host, docs/faults.md "Faults at tier hosts")."""

    workload: int | None = Field(default=None, ge=0)
    instance: int | None = Field(default=None, ge=0, description="which instance; default: chosen by the seed")
    host: str | None = Field(default=None, description="a host of the topology (a service tier's), instead of a workload")

    @model_validator(mode="after")
    def _one(self):
        if (self.workload is None) == (self.host is None):
            raise ValueError("a target names either a workload ({workload: N}) or a host ({host: H}), one of them")
        if self.host is not None and self.instance is not None:
            raise ValueError("'instance' goes with a workload target, not a host")
        return self


class RandomSchedule(Strict):
    count: int = Field(ge=1)
    duration: tuple[Duration, Duration]
    gap: tuple[Duration, Duration]

    @model_validator(mode="after")
    def _ranges(self):
        for name in ("duration", "gap"):
            lo, hi = getattr(self, name)
            if lo > hi:
                raise ValueError(f"{name}: [min, max] with min <= max")
        if self.duration[0] <= 0:
            raise ValueError("duration: faults must last more than 0 s")
        return self


class Schedule(Strict):
    at: list[Duration] | None = None
    duration: Duration | None = None
    random: RandomSchedule | None = None

    @model_validator(mode="after")
    def _one_kind(self):
        if (self.random is None) == (self.at is None):
            raise ValueError("give either 'random: {count, duration, gap}' or 'at: [...]' with 'duration'")
        if self.at is not None and not self.duration:
            raise ValueError("'at' needs a 'duration' greater than 0")
        return self


@dataclass(frozen=True)
class Footprint:
    """What a fault touches beyond its own target: hosts whose whole IP traffic it drops, and the
    workloads (instance, or None for every instance) whose connections or processes it stalls."""

    hosts: frozenset[str]
    workloads: frozenset[tuple[int, int | None]]

    def touches(self, other: Footprint) -> bool:
        if self.hosts & other.hosts:
            return True
        return any(w == w2 and (i is None or i2 is None or i == i2)
                   for w, i in self.workloads for w2, i2 in other.workloads)


def host_footprint(spec: SpecView, host: str) -> Footprint:
    """A host's whole traffic: the host, and every workload that runs on it or is served by it."""
    return Footprint(frozenset({host}), frozenset((i, None) for i, w in enumerate(spec.workloads)
                                                  if host in getattr(w, "hosts", (w.host, w.server))))


def monitored_hosts(spec: SpecView) -> tuple[str, ...]:
    """Every monitored host of a spec (`monitor`: one host or a list), the first the reference clock's."""
    m = spec.monitor
    return (m,) if isinstance(m, str) else tuple(m)


def monitor_host(spec: SpecView) -> str:
    """The first monitored host: its CLOCK_MONOTONIC is the run's reference clock."""
    return monitored_hosts(spec)[0]


class SpecView(Protocol):
    """What a fault kind reads of the experiment's spec (harness.spec.Spec)."""

    monitor: str | list[str]      # one host or several: monitored_hosts(spec), monitor_host(spec)
    interceptor: bool
    workloads: Sequence[Any]     # harness.spec.Workload: kind, host, server, instances
    faults: Sequence[Any]


class FaultSpec(Strict):
    """A kind's own fields (each defaulting to None: a missing one is `check`'s to report)
    and its rules. The rules are called with the spec's fault (fault_model's model), which has every
    kind's fields: read a field this kind does not declare only through getattr(self, name, None).
    The defaults suit a kind whose faults act on a `target` workload."""

    # A target workload must run on the monitored host: the fault's target is one of its modules.
    target_on_monitor: ClassVar[bool] = False
    # Its `target` may name a host ({host: H}) instead of a workload (a kind with a `host` field takes
    # that spelling as `host: H` instead).
    host_targets: ClassVar[bool] = False

    def check(self) -> None:
        """Raise ValueError (one line) for a mistake in the fault's fields. A field only other kinds
        take is refused after this, with a message naming them."""

    def check_against(self, spec: SpecView, topology: Topology) -> tuple[Loc, str] | None:
        """A mistake of the fault in this experiment, as (field path under the fault, message), before
        the common checks (`at` a router, `host` a host, `target` a workload of the spec)."""
        return None

    def footprint(self, spec: SpecView) -> Footprint:
        """What the fault stalls, for isolation (docs/schedules.md): by default its target workload (a
        host target: the host and every workload on it)."""
        t = self.target
        if t.host is not None:
            return host_footprint(spec, t.host)
        return Footprint(frozenset(), frozenset({(t.workload, t.instance)}))

    def same_action(self, other: FaultSpec) -> bool:
        """Whether two faults of this kind act on the same thing (they can never both be in force)."""
        at, host, target = (getattr(self, n, None) for n in ("at", "host", "target"))
        o_at, o_host, o_target = (getattr(other, n, None) for n in ("at", "host", "target"))
        if target is None or o_target is None:
            return at == o_at and host == o_host and target is o_target
        return (target.workload, target.host) == (o_target.workload, o_target.host)

    def node(self, spec: SpecView) -> str:
        """Where the fault acts (the faults row's at_node): its router `at`, else the monitored host."""
        at = getattr(self, "at", None)
        return at if at is not None else monitor_host(spec)


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


class AnyFault(FaultSpec):
    """The spec's fault: the base of fault_model's model, which adds every kind's fields; its rules
    are those of its kind."""

    kinds: ClassVar[Mapping[str, type[FaultSpec]]] = {}   # the fields `kind` and `schedule` come with them

    @property
    def rules(self) -> type[FaultSpec]:
        return self.kinds[self.kind]

    @model_validator(mode="after")
    def _by_kind(self):
        rules = self.rules
        self._host_target(rules)
        rules.check(self)
        for name in type(self).model_fields:
            if name not in ("kind", "schedule") and name not in rules.model_fields and getattr(self, name) is not None:
                takers = [k for k, s in self.kinds.items() if name in s.model_fields]
                raise ValueError(f"'{name}' applies to {_listed(takers)} only")
        return self

    def _host_target(self, rules: type[FaultSpec]) -> None:
        """`target: {host: H}` (issue 33's spelling) is `host: H` for a kind that has a `host` field."""
        t = getattr(self, "target", None)
        if t is None or t.host is None:
            return
        if "host" in rules.model_fields:
            if self.host is not None and self.host != t.host:
                raise ValueError(f"'host: {self.host}' and 'target: {{host: {t.host}}}' name two hosts; give one")
            self.host, self.target = t.host, None
        elif not rules.host_targets:
            raise ValueError(f"{self.kind} takes 'target: {{workload: N}}', not a host")

    def check_against(self, spec: SpecView, topology: Topology) -> tuple[Loc, str] | None:
        return self.rules.check_against(self, spec, topology)

    def footprint(self, spec: SpecView) -> Footprint:
        return self.rules.footprint(self, spec)

    def same_action(self, other: FaultSpec) -> bool:
        return self.kind == other.kind and self.rules.same_action(self, other)

    def node(self, spec: SpecView) -> str:
        return self.rules.node(self, spec)


def fault_model(kinds: Mapping[str, Any], module: str = __name__) -> type[AnyFault]:
    """The spec's Fault for the registered kinds (name -> a class whose `spec` is its FaultSpec): their
    fields in the order the registry first names them, a field of the same name the same in each.
    `module`: where the model is found by its name `Fault` (pickle)."""
    specs = {name: cls.spec for name, cls in kinds.items()}
    fields: dict[str, Any] = {"kind": (Literal[tuple(specs)], ...)}
    for name, spec in specs.items():
        for field, info in spec.model_fields.items():
            if info.is_required() or info.get_default() is not None:
                raise TypeError(f"fault kind {name}: field {field!r} must default to None (faults of the other "
                                "kinds have it too); apply a default where the kind reads it")
            if field in fields and fields[field][0] != info.annotation:
                raise TypeError(f"fault kind {name}: field {field!r} is {info.annotation}, another kind's is "
                                f"{fields[field][0]}; a field of the same name must be the same")
            fields.setdefault(field, (info.annotation, info))
    fields["schedule"] = (Schedule, ...)
    model = create_model("Fault", __base__=AnyFault, __module__=module, __doc__="A fault of the spec "
                         "(docs/faults.md): its kind, where and on what it acts, and when.", **fields)
    model.kinds = specs
    return model
