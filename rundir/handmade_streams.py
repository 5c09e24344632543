"""Hand-made streams run directories in the contract of docs/streams.md (run format 6), for the
streams analysis tests: StreamsDiagnoser, the engine baseline, the ground truth and the tables.

    g = Graph({"src": "beacon", "t": "throttle", "snk": "sink"}, ["src:out0>t:in0", "t:out0>snk:in0"])
    run = StreamsRun(g, experiment="mergetree")
    run.step({"src:out0>t:in0": (5, 5), "t:out0>snk:in0": (5, 5)})     # per connection: (processed, submitted)
    run.step({"src:out0>t:in0": (0, 5)}, repeat=3)                     # deltas over one interval; absent = (0, 0)
    run.fault("throttle", "t", start=2.0, end=4.0, rate=0)             # seconds after the first snapshot
    run.task(1, "t", busy=0, backpressured=0, idle=1000)
    run.write(tmp_path / "r0")

Counters are written as the collector writes them: direction `out` only, `total_msgs` = cumulative
processed, `queued` = cumulative submitted - processed, wait_ms/errors/bytes NULL, a row per
connection and snapshot. Snapshot k is taken at MONO0 + k * interval; the first is a baseline (its
deltas are invalid, as for every run). The manifest has `backend: "flink"`, written through
rundir.layout.RunDir (checked against the schema).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rundir.db import FORMAT_VERSION, create_db
from rundir.layout import RunDir

MONO0 = 100.0


@dataclass
class Graph:
    """Operators (name -> kind: beacon, pass, throttle, dropper, barrier, join, aggregate, sink) and
    stream connections named 'SRC:outI>DST:inJ'."""

    operators: dict[str, str]
    conns: list[str]

    def parts(self, name: str) -> tuple[str, int, str, int]:
        src, dst = name.split(">")
        (a, op), (b, ip) = src.split(":"), dst.split(":")
        return a, int(op.removeprefix("out")), b, int(ip.removeprefix("in"))

    def edges(self) -> list[tuple[str, str]]:
        """(parent, child) connections: the parent's downstream PE is the child's upstream PE."""
        return [(p, c) for p in self.conns for c in self.conns if self.parts(p)[2] == self.parts(c)[0]]

    def into(self, operator: str) -> list[str]:
        return [c for c in self.conns if self.parts(c)[2] == operator]


def chain(*ops: tuple[str, str]) -> Graph:
    """A straight chain of (name, kind) operators, one connection between neighbours."""
    names = [n for n, _ in ops]
    return Graph(dict(ops), [f"{a}:out0>{b}:in0" for a, b in zip(names, names[1:], strict=False)])


@dataclass
class StreamsRun:
    graph: Graph
    experiment: str = "streams"
    interval: float = 1.0
    status: str = "complete"
    deltas: list[dict[str, tuple[int, int]]] = field(default_factory=list)
    faults: list[tuple] = field(default_factory=list)
    tasks: list[tuple] = field(default_factory=list)
    stop: float | None = None   # run_end event, seconds after the first snapshot (None: none)

    def step(self, per_conn: dict[str, tuple[int, int]] | None = None, repeat: int = 1) -> StreamsRun:
        """`repeat` more snapshots, each with these (processed, submitted) deltas per connection."""
        for _ in range(repeat):
            self.deltas.append(dict(per_conn or {}))
        return self

    def fault(self, kind: str, operator: str, start: float, end: float | None, rate: float | None = 0,
              on: bool = True) -> StreamsRun:
        """A throttle (rate R tuples/s; 0 is the fault) or dropper on `operator`, seconds after the
        first snapshot (end None: no recorded end)."""
        self.faults.append((kind, operator, start, end, rate, on))
        return self

    def task(self, seq: int, operator: str, busy: float | None = None, backpressured: float | None = None,
             idle: float | None = None, acc: tuple[float, float, float] | None = None,
             records: tuple[int, int] | None = None) -> StreamsRun:
        """A stream_tasks row: gauges in ms/s, acc = cumulative (busy, backpressured, idle) ms."""
        a = acc or (None, None, None)
        r = records or (None, None)
        self.tasks.append((seq, operator, busy, backpressured, idle, *a, *r))
        return self

    def mono(self, seq: int) -> float:
        return MONO0 + seq * self.interval

    @property
    def n_snapshots(self) -> int:
        return len(self.deltas) + 1   # snapshot 0 is the baseline (all zero)

    def ids(self) -> dict[str, int]:
        return {c: i + 1 for i, c in enumerate(self.graph.conns)}

    def write(self, path: Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True)
        ids = self.ids()
        g = self.graph
        conn = create_db(path / "run.db")
        conn.executemany("INSERT INTO snapshots VALUES (?,?,?)",
                         [(s, self.mono(s), 1.7e9 + s * self.interval) for s in range(self.n_snapshots)])
        mods = []
        for c, i in ids.items():
            a, op, b, ip = g.parts(c)
            attrs = {"src": a, "src_port": op, "dst": b, "dst_port": ip,
                     "src_kind": g.operators[a], "dst_kind": g.operators[b]}
            mods.append((i, "sconn", c, f"sconn:{c}", json.dumps(attrs), self.mono(0), None))
        conn.executemany("INSERT INTO modules VALUES (?,?,?,?,?,?,?)", mods)
        conn.executemany("INSERT INTO edges VALUES (?,?,?,?)", [(ids[p], ids[c], self.mono(0), None)
                                                                for p, c in g.edges()])
        rows = []
        proc = {c: 0 for c in ids}
        sub = {c: 0 for c in ids}
        for s in range(self.n_snapshots):
            if s:
                for c, (dp, ds) in self.deltas[s - 1].items():
                    proc[c] += dp
                    sub[c] += ds
            rows += [(s, ids[c], "out", proc[c], None, sub[c] - proc[c], None, None) for c in ids]
        conn.executemany("INSERT INTO counters VALUES (?,?,?,?,?,?,?,?)", rows)
        fid = 0
        spec_faults = []
        for k, (kind, op, start, end, rate, on) in enumerate(self.faults):
            target = {"operator": op, "rate": rate} if kind == "throttle" else {"operator": op, "on": on}
            spec_faults.append({"kind": kind, "operator": op, **({"rate": rate} if kind == "throttle" else {"on": on})})
            for c in g.into(op):
                fid += 1
                conn.execute("INSERT INTO faults VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                             (fid, k, kind, op, ids[c], json.dumps(target), start, None if end is None else end - start,
                              MONO0 + start, None if end is None else MONO0 + end, f"{kind} {op} {target}"))
        conn.executemany("INSERT INTO stream_tasks VALUES (?,?,?,?,?,?,?,?,?,?)", self.tasks)
        if self.stop is not None:
            conn.execute("INSERT INTO events (mono, kind) VALUES (?, 'run_end')", (MONO0 + self.stop,))
        conn.commit()
        conn.close()
        RunDir(path, {
            "format_version": FORMAT_VERSION, "experiment": self.experiment, "status": self.status,
            "backend": "flink", "t0": MONO0, "snapshot_interval": self.interval,
            "spec": {"name": self.experiment, "graph": self.experiment, "rate": 100,
                     "snapshot_interval": self.interval, "faults": spec_faults}}).write_manifest()
        return path
