"""A streams experiment spec (docs/streams.md): a processing graph, the beacon's rate and the
throttle and dropper settings over time, in the same spec language as the network experiments
(units, one-line errors naming file, line and field; suites list them like any spec).

    name: mergetree
    graph: ../graphs/mergetree.yaml     # relative to this file
    rate: 100                           # the beacon's tuples/s (thesis 4.6.1: 100 and 1,000)
    duration: 150s
    snapshot_interval: 1s               # the thesis: 5 s with Streams' API (4.6.3); 1 s here
    faults:
      - {kind: throttle, operator: n10, rate: 0, schedule: {at: [10s, 70s], duration: 10s}}  # the fault
      - {kind: throttle, operator: n12, rate: 1, schedule: {at: [30s], duration: 10s}}       # a slow PE
      - {kind: dropper, operator: split, schedule: {at: [50s], duration: 10s}}               # filtering

A throttle returns to full rate after its window, a dropper to forwarding (thesis 4.6.2).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.streams.dropper import Dropper
from harness.streams.graph import Graph, load_graph
from harness.streams.throttle import Throttle
from harness.units import Duration
from harness.window import Window
from harness.yamlload import YamlDoc

BACKEND = "flink"

# The streams fault kinds, one line each: a module per kind declares its info (rundir.faultkinds), its
# check and its settings (harness/streams/throttle.py, dropper.py); the runner drives them.
KINDS = {kind.info.name: kind for kind in (
    Throttle,
    Dropper,
)}
KindName = Literal[tuple(KINDS)]


class StreamsSchedule(BaseModel):
    """When a setting holds: from each `at` (run-relative) for `duration` (the network faults' fixed
    schedule, docs/schedules.md)."""

    model_config = ConfigDict(extra="forbid")

    at: list[Duration] = Field(min_length=1)
    duration: Duration = Field(gt=0)


class StreamsFault(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: KindName
    operator: str
    rate: float | None = Field(default=None, ge=0)   # throttle: tuples/s (0 = stop reading)
    schedule: StreamsSchedule


class StreamsSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    description: str = ""
    graph: str
    # The beacon's tuples/s (0: full rate, the thesis's overload batch). A list: repetition k runs at
    # rate[k mod len] (the thesis ran every graph at 100 and at 1,000 tuples/s: `rate: [100, 1000]`
    # with `repetitions: 2`).
    rate: float | list[float] = 100.0
    duration: Duration = Field(default=120.0, gt=0)
    snapshot_interval: Duration = Field(default=1.0, ge=0.2, le=60)
    payload: int = Field(default=64, ge=8, le=65536)
    aggregate: int = Field(default=4, ge=1, le=1000)
    seed: int = 1
    repetitions: int = Field(default=1, ge=1, le=100)
    faults: list[StreamsFault] = []
    workloads: list = []                            # none: the beacon is the workload (suite plan tables)


@dataclass(frozen=True)
class GraphTopology:
    """What a suite asks of an experiment's topology: its backend."""

    backend: str = BACKEND


@dataclass
class StreamsExperiment:
    spec: StreamsSpec
    graph: Graph
    path: Path
    doc: YamlDoc
    seeds: tuple[int, ...] = ()
    topology: GraphTopology = field(default_factory=GraphTopology)
    study: str = "streams"

    def seed_for(self, repetition: int) -> int:
        return self.seeds[repetition] if self.seeds else self.spec.seed + repetition

    def rate_for(self, repetition: int) -> float:
        rate = self.spec.rate
        return rate[repetition % len(rate)] if isinstance(rate, list) else rate

    def plan(self, repetition: int = 0) -> list[Window]:
        return sorted((Window(i, at, f.schedule.duration) for i, f in enumerate(self.spec.faults)
                       for at in f.schedule.at), key=lambda w: (w.start, w.spec_index))

    def digest(self, repetition: int) -> str:
        blob = {"spec": self.spec.model_dump(mode="json", exclude={"repetitions", "seed", "description"}),
                "graph": [p.__dict__ for p in self.graph.pes.values()],
                "connections": [c.name for c in self.graph.connections],
                "repetition": repetition, "seed": self.seed_for(repetition), "rate": self.rate_for(repetition)}
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def is_streams_doc(doc: YamlDoc) -> bool:
    return isinstance(doc.data, dict) and "graph" in doc.data


def streams_experiment_from(doc: YamlDoc, path: Path, scale: int = 1, seeds: tuple[int, ...] = ()) -> StreamsExperiment:
    """A StreamsExperiment from a parsed document (a spec file or a suite's merged entry): its graph
    (relative to `path`) loaded, every fault checked against it. `scale` stretches the run and its
    schedule (suites' --scale)."""
    spec = doc.parse(StreamsSpec)
    rates = spec.rate if isinstance(spec.rate, list) else [spec.rate]
    if not rates or any(r < 0 for r in rates):
        raise doc.error(("rate",), "tuples/s >= 0 (0: full rate), or a non-empty list of them (one per repetition)")
    graph_path = (Path(path).parent / spec.graph).resolve()
    if not graph_path.is_file():
        raise doc.error(("graph",), f"no graph file {graph_path}")
    graph = load_graph(graph_path)
    if scale != 1:
        spec = spec.model_copy(deep=True)
        spec.duration *= scale
        for f in spec.faults:
            f.schedule.at = [a * scale for a in f.schedule.at]
            f.schedule.duration *= scale
    windows: dict[str, list[tuple[float, float]]] = {}
    for i, f in enumerate(spec.faults):
        loc = ("faults", i)
        pe = graph.pes.get(f.operator)
        if pe is None:
            raise doc.error(loc + ("operator",), f"no operator {f.operator!r} in {graph_path.name} "
                                                 f"(its {f.kind}s: {', '.join(_of_kind(graph, f.kind)) or 'none'})")
        if pe.kind != f.kind:
            raise doc.error(loc + ("operator",), f"{f.operator} is a {pe.kind}, not a {f.kind}")
        problem = KINDS[f.kind].check(f)
        if problem is not None:
            raise doc.error(loc + problem[0], problem[1])
        for k, at in enumerate(f.schedule.at):
            end = at + f.schedule.duration
            if end > spec.duration:
                raise doc.error(loc + ("schedule", "at", k), f"ends at {end:g}s, after the run ({spec.duration:g}s)")
            for a, b in windows.get(f.operator, []):
                if at < b and a < end:
                    raise doc.error(loc + ("schedule", "at", k), f"overlaps another setting of {f.operator} "
                                                                 f"({a:g}s-{b:g}s)")
            windows.setdefault(f.operator, []).append((at, end))
    return StreamsExperiment(spec, graph, Path(path), doc, tuple(seeds))


def _of_kind(graph: Graph, kind: str) -> list[str]:
    return [p.name for p in graph.pes.values() if p.kind == kind]
