"""Experiment specs: the YAML a user writes, validated, resolved against its topology and planned.

`load_spec(path)` returns an Experiment: the spec model, its Topology, and for each repetition the
fault windows its seed gives. Every mistake is a SpecError naming file, line and field.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, create_model, field_validator, model_validator

from harness.faults import KINDS
from harness.faults.spec import (  # noqa: F401 - the spec's parts, here for their users
    AnyFault,
    FaultTarget,
    Footprint,
    RandomSchedule,
    Schedule,
    fault_model,
)
from harness.faults.spec import Strict as _Strict
from harness.topology import Topology, load_topology
from harness.units import Duration, Percent, PerSecond, Size
from harness.window import Window  # noqa: F401 - a planned fault, here for its users
from harness.yamlload import YamlDoc
from rundir.facts import RECOVERY_EXTRA_S, recovery_after

# Faults are kept this far from the start (workloads ramp up) and the end (so the recovery is seen).
FAULT_MARGIN_S = 2.0


SERVICE_MIX = {"hit": 80.0, "miss": 15.0, "write": 5.0}


class Workload(_Strict):
    kind: Literal["wget", "iperf", "service", "mesh"]
    # wget, iperf: the client's host and its server's. service: set from `client` and `web`.
    host: str | None = None
    server: str | None = None
    role: Literal["foreground", "background"] = "foreground"
    instances: int = Field(default=1, ge=1, le=64, description="parallel copies of the workload")
    start: Duration = 0.0
    # wget: serial downloads of one file; count = downloads per instance (None: repeat to the end).
    file_size: Size = Field(default=100e6, gt=0, le=1e12, description="bytes: a sparse file on the server, "
                                                                     "at most 1 TB")
    count: int | None = Field(default=None, ge=1)
    # iperf (2): upload = the host sends to `iperf -s` on the server; download = `-R`; dual = `-d`,
    # `parallel` upload connections plus as many download connections the server opens back.
    direction: Literal["upload", "download", "dual"] | None = None
    parallel: int = Field(default=1, ge=1, le=128, description="iperf -P: connections per instance")
    # service (harness/service/, docs/service.md): the tiers' hosts and the load generator's.
    client: str | None = None
    web: str | None = None
    apps: list[str] | None = None
    cache: str | None = None
    db: str | None = None
    rate: PerSecond | None = Field(default=None, description="service: Poisson arrivals per second")
    concurrency: int = Field(default=32, ge=1, le=1024, description="service: requests in flight, at most")
    mix: dict[Literal["hit", "miss", "write"], Percent] | None = None
    db_work: int = Field(default=0, ge=0, le=10_000_000,
                         description="service: MD5 evaluations MariaDB makes in each miss's query (BENCHMARK): the "
                                     "database's CPU per query, about 0.4 us each here; 0: an index lookup only")
    # mesh (harness/mesh.py, docs/fabric.md): `flows` connections of `rate` (bits/s, '2Mbit') from each member.
    members: list[str] | None = Field(default=None, description="mesh: the hosts (default: every host)")
    flows: int | None = Field(default=None, ge=1, le=64, description="mesh: connections from each member")

    @model_validator(mode="before")
    @classmethod
    def _mesh_rate(cls, data):
        """A mesh's `rate` is a bit rate ('2Mbit'), a service's arrivals per second: read it as one."""
        if isinstance(data, dict) and data.get("kind") == "mesh" and data.get("rate") is not None:
            from harness.units import parse_rate

            data = {**data, "rate": parse_rate(data["rate"])}
        return data

    @property
    def tier_hosts(self) -> dict[str, str]:
        """service: tier -> host, the app tiers as app1, app2, ... (empty for the other kinds)."""
        if self.kind != "service":
            return {}
        apps = {f"app{i + 1}": a for i, a in enumerate(self.apps or [])}
        return {"client": self.client, "web": self.web, **apps, "cache": self.cache, "db": self.db}

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every host the workload runs on: its client and server, a service's every tier."""
        if self.kind == "mesh":
            return tuple(self.members or ())
        return tuple(dict.fromkeys(self.tier_hosts.values())) if self.kind == "service" else (self.host, self.server)

    @model_validator(mode="after")
    def _by_kind(self):
        service_only = ("client", "web", "apps", "cache", "db", "rate", "mix")
        if self.kind != "service" and self.db_work:
            raise ValueError("db_work applies to kind service only")
        if self.kind == "service":
            return self._service()
        if self.kind == "mesh":
            return self._mesh()
        if self.members is not None or self.flows is not None:
            raise ValueError("members and flows apply to kind mesh only")
        given = [f for f in service_only if getattr(self, f) is not None]
        if given:
            raise ValueError(f"{given[0]} applies to kind service only")
        if self.host is None or self.server is None:
            raise ValueError(f"a {self.kind} workload needs 'host' and 'server'")
        if self.kind == "wget":
            if self.direction not in (None, "download"):
                raise ValueError("wget only downloads (direction: download)")
            if self.parallel != 1:
                raise ValueError("parallel applies to iperf only; use instances for parallel wget")
            self.direction = "download"
        else:
            self.direction = self.direction or "upload"
            if self.count is not None:
                raise ValueError("count applies to wget and service only (iperf runs until the end)")
        return self

    def _service(self):
        if self.host is not None or self.server is not None:
            raise ValueError("a service workload names its hosts with client, web, apps, cache and db, "
                             "not host and server")
        if self.rate is None:
            raise ValueError("a service workload needs 'rate' (requests per second, e.g. 50/s)")
        if self.instances != 1 or self.parallel != 1 or self.direction is not None:
            raise ValueError("instances, parallel and direction do not apply to a service workload")
        self.client, self.web, self.cache, self.db = (self.client or "client", self.web or "web",
                                                      self.cache or "cache", self.db or "db")
        self.apps = self.apps if self.apps is not None else ["app1", "app2"]
        if not self.apps:
            raise ValueError("apps: at least one application host")
        self.mix = self.mix if self.mix is not None else dict(SERVICE_MIX)
        if sum(self.mix.values()) <= 0:
            raise ValueError("mix: the shares must not all be 0")
        self.host, self.server = self.client, self.web
        return self

    def _mesh(self):
        for name in ("host", "server", "client", "web", "apps", "cache", "db", "mix", "count", "direction"):
            if getattr(self, name) is not None:
                raise ValueError(f"{name} does not apply to a mesh (members, flows and rate do)")
        if self.instances != 1 or self.parallel != 1:
            raise ValueError("instances and parallel do not apply to a mesh (flows does)")
        if self.rate is None:
            raise ValueError("a mesh needs 'rate': each connection's bit rate, e.g. 2Mbit")
        if self.members is not None and len(set(self.members)) != len(self.members):
            raise ValueError("members: a host is listed twice")
        self.flows = self.flows or 1
        self.direction = "upload"
        return self


# The spec's fault: every registered kind's fields, each fault checked by its kind's rules
# (harness.faults.spec.fault_model; docs/faults.md, "Adding a fault kind").
Fault = fault_model(KINDS, __name__)


class Isolation(_Strict):
    """How fault windows are kept apart (docs/schedules.md)."""

    overlap: bool = Field(default=False, description="let a fault cover another's target (the labeller "
                                                     "then leaves such rows out by default)")
    recovery: Literal["auto"] | Duration = Field(
        default="auto", description="kept free after each window on what the fault touched; "
                                    f"auto = the window's duration + {RECOVERY_EXTRA_S:g}s")


class Probe(_Strict):
    """The collector's probes of silent connections' remotes (docs/probes.md); `probe: off` turns
    them off. Defaults: a burst of 2 connects after 0.3 s of silence (at most the RTO), again every
    second while it lasts, at most 10 probes/s from the host (007's budget) and 2/s to one remote."""

    after: Duration = Field(default=0.3, description="silence of a busy connection before its first burst "
                                                     "(at most the connection's RTO)")
    every: Duration = Field(default=1.0, description="between bursts while the silence lasts")
    timeout: Duration = Field(default=1.0, description="a probe not answered within this is a timeout")
    count: int = Field(default=2, ge=1, le=10, description="probes per burst, each from a fresh source port")
    host_rate: float = Field(default=10.0, gt=0, le=1000, description="probes per second from the host, at most")
    remote_rate: float = Field(default=2.0, gt=0, le=1000, description="probes per second to one remote, at most")
    hold: Duration = Field(default=10.0, description="a receiver silent for longer is idle, not busy")

    @model_validator(mode="after")
    def _times(self):
        if not 0 < self.after <= 60 or not 0 < self.every <= 60 or not 0.01 <= self.timeout <= 30:
            raise ValueError("probe times: 0 < after <= 60s, 0 < every <= 60s, 10ms <= timeout <= 30s")
        return self


# The most repetitions one spec may ask for. Each repetition is a whole run (`duration` plus setup
# and teardown, a run directory with its run.db), and load_spec plans every repetition's faults
# before the first starts: a thousand 60 s runs already take a day and tens of GB, while a slip
# like 100000 would plan for minutes and then run for months. More: run again with seed + 1000.
MAX_REPETITIONS = 1000


class Spec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    topology: str
    duration: Duration
    snapshot_interval: Duration = 0.1
    seed: int = 0
    repetitions: int = Field(default=1, ge=1)
    # One host, or a list (issue 33 item 2): NeST's collector and the interceptor on each, one snapshot
    # sequence, each module recording its host (docs/run-format.md, "Several monitored hosts").
    monitor: str | list[str]
    congestion_control: str = Field(default="cubic", pattern=r"^[a-z0-9_]+$")
    # Load the LD_PRELOAD interceptor into the monitored host's workload processes: app and socket
    # modules, and the app_pause fault. Off only to measure the harness without it.
    interceptor: bool = True
    probe: Probe | None = Field(default_factory=Probe, description="probes of silent connections; off: none")
    # Message traces (docs/service.md): every completed send and receive of the traced processes (a
    # service's tiers and load generator, and the monitored host's intercepted clients) into the
    # messages table, through the interceptor's message ring. Off (None) by default.
    trace: Literal["messages"] | None = Field(default=None, description="messages: record every send and "
                                              "receive of the traced processes; off: none")
    workloads: list[Workload] = Field(min_length=1)
    faults: list[Fault] = []
    isolation: Isolation = Isolation()

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if name in (".", ".."):   # the name is a directory: results/<name>/<run>/
            raise ValueError(f"{name!r} is not an experiment name: runs go to results/<name>/, and "
                             f"{name!r} is not a directory of its own there")
        return name

    @field_validator("monitor")
    @classmethod
    def _monitor(cls, value: str | list[str]) -> str | list[str]:
        """A list of one host is that host (the spec then reads, runs and digests as `monitor: H`)."""
        if isinstance(value, list):
            if not value:
                raise ValueError("monitor: at least one host")
            twice = next((h for i, h in enumerate(value) if h in value[:i]), None)
            if twice is not None:
                raise ValueError(f"{twice!r} is listed twice")
            if len(value) == 1:
                return value[0]
        return value

    @property
    def monitored(self) -> tuple[str, ...]:
        """Every monitored host, the first being the reference clock's and the collector's."""
        return (self.monitor,) if isinstance(self.monitor, str) else tuple(self.monitor)

    @property
    def monitor_host(self) -> str:
        """The first monitored host: its CLOCK_MONOTONIC is the run's reference clock."""
        return self.monitored[0]

    @field_validator("probe", mode="before")
    @classmethod
    def _probe_switch(cls, value):
        """`probe: off` (YAML reads it as false) or `on`; a mapping sets the probes' parameters."""
        if value is False or (isinstance(value, str) and value.lower() == "off"):
            return None
        if value is True or (isinstance(value, str) and value.lower() == "on"):
            return {}
        return value

    @field_validator("trace", mode="before")
    @classmethod
    def _trace_switch(cls, value):
        """`trace: off` (YAML reads it as false) or `none`: no trace."""
        if value is False or (isinstance(value, str) and value.lower() in ("off", "none")):
            return None
        return value

    @field_validator("repetitions")
    @classmethod
    def _repetitions(cls, n: int) -> int:
        if n > MAX_REPETITIONS:
            raise ValueError(f"at most {MAX_REPETITIONS} repetitions (got {n}): each is a whole run, all "
                             f"planned before the first starts; for more, run the spec again with seed "
                             f"raised by {MAX_REPETITIONS}")
        return n

    @model_validator(mode="after")
    def _times(self):
        if self.duration <= 0:
            raise ValueError("duration must be greater than 0")
        if not 0.01 <= self.snapshot_interval <= 10:
            raise ValueError("snapshot_interval must be between 10ms and 10s")
        if len(self.monitored) > 1 and self.probe is not None and "probe" not in self.model_fields_set:
            self.probe = None   # the default, with several hosts: no probes (docs/probes.md)
        # asked for with several hosts: a testbed's collector per node probes its own connections;
        # Mininet's one collector does not (_check_against_topology)
        return self


def spec_model(kinds: Mapping[str, Any]) -> type[Spec]:
    """The spec's model with the faults of another registry of kinds than KINDS (a test's kind, a
    lab's own): harness.faults.spec.fault_model of those."""
    return create_model("Spec", __base__=Spec, faults=(list[fault_model(kinds)], []))


@dataclass
class Experiment:
    spec: Spec
    topology: Topology
    path: Path
    doc: YamlDoc
    seeds: tuple[int, ...] = ()   # a suite's explicit seed per repetition (else seed + k)
    study: str = "network"        # its study kind (harness.studies): network, or service with a service workload

    def seed_for(self, repetition: int) -> int:
        """Repetition k (0-based) uses seed + k, or the k-th of the suite's `seeds`: every
        repetition differs, each is reproducible."""
        return self.seeds[repetition] if self.seeds else self.spec.seed + repetition

    def digest(self, repetition: int) -> str:
        """What makes a repetition the same run: the resolved spec (after a suite's defaults and
        scale), its topology, its seed and its planned fault windows. `--resume` keeps a complete
        run only when this is unchanged (harness.suite); every manifest records it."""
        # `trace` left out when off: the runs made before it existed keep their digests (--resume)
        off = {"trace"} if self.spec.trace is None else set()
        spec = self.spec.model_dump(mode="json", exclude={"repetitions", "seed", "description", *off})
        for w in spec.get("workloads", ()):   # db_work left out at 0: the same for the runs made before it
            if not w.get("db_work"):
                w.pop("db_work", None)
            for name in ("members", "flows"):   # a mesh's only: other specs keep their digests
                if w.get(name) is None:
                    w.pop(name, None)
        for f in spec.get("faults", ()):   # a link fault's only: other specs keep their digests
            if f.get("link") is None:
                f.pop("link", None)
        blob = {"spec": spec,
                "topology": self.topology.spec.model_dump(mode="json"), "repetition": repetition,
                "seed": self.seed_for(repetition), "plan": [w.__dict__ for w in self.plan(repetition)]}
        text = json.dumps(blob, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def plan(self, repetition: int = 0) -> list[Window]:
        return plan_faults(self.spec, self.doc, self.seed_for(repetition))


def footprint(spec: Spec, fault: AnyFault) -> Footprint:
    """What a fault stalls beyond its target, as its kind says (e.g. an ip_drop of host H every
    workload that runs on H or is served by H; a tcp_drop its target workload instance)."""
    return fault.footprint(spec)


def plan_faults(spec: Spec, doc: YamlDoc, seed: int) -> list[Window]:
    """Fault windows for one repetition, sorted by start (docs/schedules.md).

    Isolation (the default): a window and its recovery margin never overlap the window or margin
    of a fault whose footprint it touches, so no fault masks another. Fixed schedules (`at`) are
    checked: a clash is a spec error. Random schedules are planned after them, entry by entry, each
    from its own seeded stream (adding a fault does not move another entry's draws): a drawn window
    that would clash is moved to the end of the clashing reservation; one that no longer fits before
    the run's end is a spec error. With `isolation: {overlap: true}` only faults acting on the same
    target are kept apart (they cannot both be in force), and no margin is kept.
    """
    latest_end = spec.duration - FAULT_MARGIN_S
    iso = spec.isolation
    prints = [footprint(spec, f) for f in spec.faults]
    planned: list[Window] = []

    def clash(i: int, w: Window) -> Window | None:
        for other in planned:
            if iso.overlap:
                hit = spec.faults[other.spec_index].same_action(spec.faults[i]) and \
                    w.start < other.end and other.start < w.end
            else:
                hit = prints[i].touches(prints[other.spec_index]) and \
                    w.start < other.reserved_until and other.start < w.reserved_until
            if hit:
                return other
        return None

    def describe(other: Window) -> str:
        f = spec.faults[other.spec_index]
        return (f"fault {other.spec_index} ({f.kind}) at {other.start:g}s+{other.duration:g}s"
                + ("" if iso.overlap else f" and its recovery until {other.reserved_until:g}s"))

    def margin(dur: float) -> float:
        return 0.0 if iso.overlap else recovery_after(dur, iso.recovery)

    order = [i for i, f in enumerate(spec.faults) if f.schedule.at is not None] + \
            [i for i, f in enumerate(spec.faults) if f.schedule.at is None]
    for i in order:
        s = spec.faults[i].schedule
        if s.at is not None:
            for k, at in enumerate(sorted(s.at)):
                loc = ("faults", i, "schedule", "at", k)
                if at < FAULT_MARGIN_S or at + s.duration > latest_end:
                    raise doc.error(loc, f"window {at:g}s+{s.duration:g}s must lie within "
                                         f"[{FAULT_MARGIN_S:g}s, duration - {FAULT_MARGIN_S:g}s = {latest_end:g}s]")
                w = Window(i, at, s.duration, margin(s.duration))
                other = clash(i, w)
                if other is not None:
                    same = spec.faults[other.spec_index].same_action(spec.faults[i])
                    hint = ("they act on the same target" if same else
                            "one would mask the other; move it, or allow it with 'isolation: {overlap: true}'")
                    raise doc.error(loc, f"window {at:g}s+{s.duration:g}s clashes with {describe(other)}: {hint}")
                planned.append(w)
            continue
        r, rng, t = s.random, random.Random(seed * 1000 + i), FAULT_MARGIN_S
        for n in range(r.count):
            t += rng.uniform(*r.gap)
            dur = round(rng.uniform(*r.duration), 3)
            w = Window(i, round(t, 3), dur, margin(dur))
            while (other := clash(i, w)) is not None:  # move past the reservation it clashes with
                free = other.end if iso.overlap else other.reserved_until
                start = round(free, 3)   # ms steps, never before `free`
                w = Window(i, start if start >= free else round(start + 0.001, 3), dur, w.recovery)
            if w.end > latest_end:
                raise doc.error(("faults", i, "schedule", "random"),
                                f"only {n} of {r.count} faults fit in {spec.duration:g}s with these gaps"
                                + ("" if iso.overlap else " and the recovery margins of isolated faults")
                                + f" (seed {seed}); lengthen duration or lower count")
            planned.append(w)
            t = w.end
    return sorted(planned, key=lambda w: (w.start, w.spec_index))


def _resolve_topology(spec: Spec, doc: YamlDoc, spec_path: Path) -> Path:
    name = spec.topology
    candidates = []
    if name.endswith((".yaml", ".yml")) or "/" in name:
        candidates.append(spec_path.parent / name)
    else:
        for base in (spec_path.parent.parent / "topologies", spec_path.parent / "topologies",
                     Path.cwd() / "topologies"):
            candidates.append(base / f"{name}.yaml")
    for c in candidates:
        if c.is_file():
            return c
    raise doc.error(("topology",), f"no topology file {name!r} (looked for {', '.join(map(str, candidates))})")


def _check_against_topology(spec: Spec, doc: YamlDoc, topo: Topology) -> None:
    def host(loc, name, router_ok=False, router_only=False):
        if name not in topo.spec.nodes:
            raise doc.error(loc, f"unknown node {name!r} in topology {topo.name} "
                                 f"(nodes: {', '.join(topo.spec.nodes)})")
        if router_only and not topo.is_router(name):
            raise doc.error(loc, f"{name!r} is not a router; network faults are injected on a router")
        if not router_ok and not router_only and topo.is_router(name):
            raise doc.error(loc, f"{name!r} is a router; expected a host")

    for k, name in enumerate(spec.monitored):
        host(("monitor",) if isinstance(spec.monitor, str) else ("monitor", k), name)
    for i, w in enumerate(spec.workloads):
        if w.kind == "service":
            _check_service(doc, i, w, host)
            continue
        if w.kind == "mesh":
            from harness.mesh import members, mesh_error

            problem = mesh_error(w, topo)
            if problem is not None:
                raise doc.error(("workloads", i, *problem[0]), problem[1])
            w.members = members(w, topo)   # every host, when none are listed
            continue
        host(("workloads", i, "host"), w.host)
        host(("workloads", i, "server"), w.server)
        if w.host == w.server:
            raise doc.error(("workloads", i, "server"), "server must be another host than the client")
    # On testbed nodes every fault kind of a service acts on the tier's own node (harness.faults.onnode).
    if topo.backend == "mininet" and len(spec.monitored) > 1 and spec.probe is not None:
        raise doc.error(("probe",), "the collector's probes run with one monitored host (Mininet's one collector "
                                    "of several hosts does not build them; on testbed nodes each node's collector "
                                    "probes its own); with a list under 'monitor', set 'probe: off'")
    for i, f in enumerate(spec.faults):
        problem = f.check_against(spec, topo)   # the kind's own checks first
        if problem is not None:
            raise doc.error(("faults", i, *problem[0]), problem[1])
        at, on_host, target = (getattr(f, name, None) for name in ("at", "host", "target"))
        if at is not None:
            host(("faults", i, "at"), at, router_only=True)
        if on_host is not None:
            host(("faults", i, "host"), on_host)
        if target is not None and target.host is not None:
            host(("faults", i, "target", "host"), target.host)
            if f.rules.target_on_monitor and target.host not in spec.monitored:
                raise doc.error(("faults", i, "target", "host"),
                                f"{target.host!r} is not monitored (monitor: {', '.join(spec.monitored)}); the "
                                f"fault's target modules would not be observed")
        elif target is not None:
            if target.workload >= len(spec.workloads):
                raise doc.error(("faults", i, "target", "workload"),
                                f"no workload {target.workload} (the spec has {len(spec.workloads)})")
            w = spec.workloads[target.workload]
            if target.instance is not None and target.instance >= w.instances:
                raise doc.error(("faults", i, "target", "instance"),
                                f"workload {target.workload} has {w.instances} instance(s)")
            if f.rules.target_on_monitor and w.host not in spec.monitored:
                raise doc.error(("faults", i, "target", "workload"),
                                f"workload {target.workload} runs on {w.host}, not on a monitored host "
                                f"({', '.join(spec.monitored)}); its modules would not be observed")


def _check_service(doc: YamlDoc, i: int, w: Workload, host) -> None:
    """Every tier on a host of the topology, each tier on a host of its own."""
    seen: dict[str, str] = {}
    for tier, name in w.tier_hosts.items():
        field = ("apps", int(tier[3:]) - 1) if tier.startswith("app") else (tier,)
        loc = ("workloads", i, *field)
        host(loc, name)
        if name in seen:
            raise doc.error(loc, f"{name!r} already runs the {seen[name]} tier; each tier needs a host of its own")
        seen[name] = tier


def load_spec(path: Path | str, topology: Path | str | None = None) -> Experiment:
    """Load and check a spec. `topology` overrides the spec's topology file (e.g. the same shape
    placed on testbed nodes: `run-experiment SPEC --topology FILE`)."""
    path = Path(path)
    return experiment_from(YamlDoc(path), path, topology)


def experiment_from(doc: YamlDoc, path: Path, topology: Path | str | None = None, scale: int = 1,
                    seeds: tuple[int, ...] = ()) -> Experiment:
    """An Experiment from a parsed document (a spec file, or a suite's merged entry): validated,
    scaled (scaled()), resolved against its topology (relative to `path`) and planned: the network and
    service studies' spec (harness.studies dispatches a document of any study kind)."""
    spec = scaled(doc.parse(Spec), scale)
    topo = load_topology(topology if topology is not None else _resolve_topology(spec, doc, path))
    _check_against_topology(spec, doc, topo)
    # a service workload makes it the service study's (harness.studies.service claims the same documents)
    study = "service" if any(w.kind == "service" for w in spec.workloads) else "network"
    exp = Experiment(spec, topo, path, doc, tuple(seeds), study)
    for r in range(spec.repetitions):
        exp.plan(r)  # infeasible schedules are spec errors: find them before anything runs
    return exp


def scaled(spec: Spec, factor: int) -> Spec:
    """The spec `factor` times as long: its duration, and the count of every random fault schedule
    (so the faults keep their density; fixed `at` windows stay where they are). A suite's `scale`:
    15 turns 60 s runs into the thesis's 15-minute runs."""
    if factor == 1:
        return spec
    out = spec.model_copy(deep=True)
    out.duration = spec.duration * factor
    for f in out.faults:
        if f.schedule.random is not None:
            f.schedule.random.count *= factor
    return out

