"""A streams processing graph (thesis 4.1): PEs with input and output ports, joined by stream
connections. Loaded from a graph file (graphs/*.yaml, docs/streams.md), checked, and written out as
the Flink job's plain-text graph (harness/streams/job/NestlabStreamsJob.java).

    graph: mergetree
    operators:
      beacon: {kind: beacon}
      pre:    {kind: throttle, in: [beacon]}          # one input port, fed by beacon's out0
      split:  {kind: dropper, in: [pre]}              # out0 fans out to three connections
      n10:    {kind: throttle, in: [split]}
      merge:  {kind: pass, in: [[n10, n11, n12]]}     # one input port with three connections (fan-in)
      sink:   {kind: throttle, in: [merge], outputs: 0}

`in` lists a PE's input ports; each is a connection (`NAME` for NAME's out0, `NAME.outJ`) or a list of
them (fan-in). `outputs` is the number of output ports (default 1; 0 for a sink). A port referred to
by several inputs fans out: Flink copies each tuple to every consumer, as Streams does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field

from harness.yamlload import YamlDoc

KINDS = ("beacon", "pass", "throttle", "dropper", "barrier", "join", "aggregate", "sink")
# The PEs whose behaviour the harness drives: their settings are faults (docs/streams.md).
CONTROLLED = ("throttle", "dropper")
_NAME = r"[a-z][a-z0-9_]{0,30}"
_REF = re.compile(rf"^({_NAME})(?:\.out(\d+))?$")


class OperatorModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["beacon", "pass", "throttle", "dropper", "barrier", "join", "aggregate", "sink"]
    inputs: list[str | list[str]] = Field(default_factory=list, alias="in")
    outputs: int | None = Field(default=None, ge=0, le=16)


class GraphModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    graph: str = Field(pattern=rf"^{_NAME}$")
    description: str = ""
    operators: dict[str, OperatorModel]


@dataclass(frozen=True)
class Pe:
    name: str
    kind: str
    n_in: int
    n_out: int


@dataclass(frozen=True)
class Connection:
    """A stream connection SRC:outI -> DST:inJ: a module of the StreamsDiagnoser graph (4.2.3)."""

    src: str
    src_port: int
    dst: str
    dst_port: int

    @property
    def name(self) -> str:
        return f"{self.src}:out{self.src_port}>{self.dst}:in{self.dst_port}"


@dataclass
class Graph:
    name: str
    description: str
    pes: dict[str, Pe]              # in topological order: upstream PEs first
    connections: list[Connection]
    path: Path

    def into(self, pe: str) -> list[Connection]:
        """The connections into a PE's input ports: a throttle's or dropper's fault targets."""
        return [c for c in self.connections if c.dst == pe]

    def job_text(self, rate: float, payload: int, control: Path, aggregate: int) -> str:
        """The graph file the Flink job reads (NestlabStreamsJob.main)."""
        lines = [f"rate {rate:g}", f"payload {payload}", f"control {control}", f"aggregate {aggregate}"]
        lines += [f"op {p.name} {p.kind} {p.n_in} {p.n_out}" for p in self.pes.values()]
        lines += [f"conn {c.src} {c.src_port} {c.dst} {c.dst_port}" for c in self.connections]
        return "\n".join(lines) + "\n"

    def module_edges(self) -> list[tuple[int, int]]:
        """Parent -> child between connections (indexes into `connections`): the parent's
        downstream PE is the child's upstream PE (thesis 4.2.3: PEs become the edges)."""
        return [(i, j) for i, a in enumerate(self.connections) for j, b in enumerate(self.connections)
                if a.dst == b.src]


def load_graph(path: Path | str) -> Graph:
    """Load and check a graph file; a mistake is one SpecError naming the file, line and field."""
    path = Path(path)
    doc = YamlDoc(path)
    model = doc.parse(GraphModel)
    ops = model.operators
    for name in ops:
        if not re.fullmatch(_NAME, name):
            raise doc.error(("operators", name), f"operator name {name!r}: lower-case letters, digits and _")
    n_out = {n: (o.outputs if o.outputs is not None else (0 if o.kind == "sink" else 1)) for n, o in ops.items()}
    conns: list[Connection] = []
    dag = nx.DiGraph()
    dag.add_nodes_from(ops)
    for name, op in ops.items():
        loc = ("operators", name)
        if op.kind == "beacon" and op.inputs:
            raise doc.error(loc + ("in",), "a beacon is a source: it has no input ports")
        if op.kind != "beacon" and not op.inputs:
            raise doc.error(loc, f"a {op.kind} needs at least one input port (`in`)")
        if op.kind == "barrier" and len(op.inputs) < 2:
            raise doc.error(loc + ("in",), "a barrier reads one tuple from each of at least two input ports")
        if op.kind == "sink" and n_out[name]:
            raise doc.error(loc + ("outputs",), "a sink has no output ports")
        for j, port in enumerate(op.inputs):
            refs = [port] if isinstance(port, str) else port
            if not refs:
                raise doc.error(loc + ("in", j), "an input port needs at least one connection")
            for ref in refs:
                m = _REF.match(ref)
                if not m or m.group(1) not in ops:
                    raise doc.error(loc + ("in", j), f"{ref!r} is not an operator's output port "
                                                     f"(NAME or NAME.outJ; operators: {', '.join(ops)})")
                src, i = m.group(1), int(m.group(2) or 0)
                if i >= n_out[src]:
                    raise doc.error(loc + ("in", j), f"{src} has {n_out[src]} output port(s); no out{i}")
                conn = Connection(src, i, name, j)
                if conn in conns:
                    raise doc.error(loc + ("in", j), f"{conn.name} is listed twice")
                conns.append(conn)
                dag.add_edge(src, name)
    if not nx.is_directed_acyclic_graph(dag):
        cycle = " -> ".join(a for a, _ in nx.find_cycle(dag))
        raise doc.error(("operators",), f"the graph has a cycle ({cycle}); streams graphs here are acyclic")
    used = {(c.src, c.src_port) for c in conns}
    for name in ops:
        for i in range(n_out[name]):
            if (name, i) not in used:
                raise doc.error(("operators", name), f"{name}.out{i} feeds no operator (add a sink, or fewer outputs)")
    if not any(o.kind == "beacon" for o in ops.values()):
        raise doc.error(("operators",), "the graph needs a beacon (its source)")
    order = list(nx.lexicographical_topological_sort(dag, key=list(ops).index))
    pes = {n: Pe(n, ops[n].kind, len(ops[n].inputs), n_out[n]) for n in order}
    conns.sort(key=lambda c: (order.index(c.dst), c.dst_port, order.index(c.src), c.src_port))
    return Graph(model.graph, model.description, pes, conns, path)
