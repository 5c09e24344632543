"""Plain per-snapshot references of the streams rule systems (analysis.variants.streamsdiagnoser and
analysis.variants.flink_backpressure), written from thesis 4.4 and the Flink documentation with
dicts and loops, sharing no code with the variants. Importing this module registers them in
tests.support.reference.REFERENCE (tests/conftest.py imports it).

- `ref_streamsdiagnoser`: on a stream-connection stretch (every module `sconn`, a queue counter and
  no wait counter everywhere in direction `out`, no cycle: a processing graph is a DAG), thesis 4.4
  read literally per connection: HEALTHY if Δtotal_msgs > 0, else DONTCARE if queued <= 0, else
  BLOCKED if some child connection is inactive with queued > 0 (Table 2.2 (e)), else STALLED.
  Any other stretch (the property tests' random graphs) is FlowDiagnoser Θ = 1, queues=on, which is
  what the system says it is (the chapter 2 reference, tests.support.reference.ref_flowdiagnoser).
  The `in` direction of sconn modules is DONTCARE, never positive.
- `ref_flink_backpressure(stretch, tasks, ends, ...)`: the baseline from stream_tasks rows given as
  {(operator, seq): row dict}; with none (REFERENCE's entry, stretches made in memory) no operator
  is a root cause.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from analysis.model.stretches import DIRS, Stretch
from analysis.variants import BLOCKED, DONTCARE, HEALTHY, STALLED
from tests.support import reference as _reference


def streams_shaped(stretch: Stretch) -> bool:
    c = stretch.counters["out"]
    g = nx.DiGraph(stretch.edges)
    g.add_nodes_from(range(stretch.n))
    return (all(k == "sconn" for k in stretch.kinds) and bool(c.has_queue.all()) and not c.has_wait.any()
            and nx.is_directed_acyclic_graph(g))


def _plain(stretch: Stretch) -> np.ndarray:
    c = stretch.counters["out"]
    children = {m: [ch for p, ch in stretch.edges if p == m] for m in range(stretch.n)}
    res = np.zeros((stretch.n, stretch.t), dtype=np.int8)
    for t in range(stretch.t):
        for m in range(stretch.n):
            if c.tm[m, t] > 0:
                res[m, t] = HEALTHY
            elif c.queued[m, t] <= 0:
                res[m, t] = DONTCARE
            elif any(c.tm[ch, t] == 0 and c.queued[ch, t] > 0 for ch in children[m]):
                res[m, t] = BLOCKED
            else:
                res[m, t] = STALLED
    return res


def ref_streamsdiagnoser(stretch: Stretch, engine: bool = False, bp: float = 500.0, busy: float = 500.0,
                         tasks: dict | None = None, ends: dict | None = None) -> dict:
    """engine=on: where the plain rule says BLOCKED or STALLED on a stream connection, the downstream PE's
    rates over the interval decide when both are known: back-pressured BLOCKED, else busy STALLED, else
    (idle, waiting for another input) BLOCKED."""
    if streams_shaped(stretch):
        out = {"out": _plain(stretch), "in": None}
    else:
        fd = _reference.ref_flowdiagnoser(stretch, theta=1, queues=True)
        out = {d: fd[d][0].copy() for d in DIRS}
    if engine:
        tasks, ends = tasks or {}, ends or {}
        for m, k in enumerate(stretch.kinds):
            dst = ends.get(stretch.modules[m], (None, None))[1] if k == "sconn" else None
            for t, seq in enumerate(stretch.seqs.tolist()):
                if dst is None or out["out"][m, t] not in (BLOCKED, STALLED):
                    continue
                b, p = _rates(tasks, dst, seq)
                if b is None or p is None or b != b or p != p:
                    continue
                out["out"][m, t] = BLOCKED if p >= bp else STALLED if b >= busy else BLOCKED
    res_in = out["in"] if out["in"] is not None else np.full((stretch.n, stretch.t), DONTCARE, dtype=np.int8)
    for m, k in enumerate(stretch.kinds):
        if k == "sconn":
            res_in[m, :] = DONTCARE
    out["in"] = res_in
    return {d: (out[d], out[d] == STALLED) for d in DIRS}


def _rates(tasks: dict, op: str, seq: int) -> tuple[float | None, float | None]:
    """(busy, back-pressured) ms/s of an operator over the interval ending at seq."""
    row, prev = tasks.get((op, seq)), tasks.get((op, seq - 1))
    if row is None:
        return None, None
    acc = ("acc_busy_ms", "acc_backpressured_ms", "acc_idle_ms")
    if prev is not None and all(row.get(a) is not None and prev.get(a) is not None for a in acc):
        d = [row[a] - prev[a] for a in acc]
        total = sum(d)
        if total > 0:
            return (1000.0 * min(max(d[0], 0.0), total) / total, 1000.0 * min(max(d[1], 0.0), total) / total)
    return row.get("busy_ms_per_s"), row.get("backpressured_ms_per_s")


def ref_flink_backpressure(stretch: Stretch, tasks: dict | None = None, ends: dict | None = None,
                           bp: float = 500.0, busy: float = 500.0, upstream: bool = True) -> dict:
    tasks, ends = tasks or {}, ends or {}
    c = stretch.counters["out"]
    res = np.full((stretch.n, stretch.t), DONTCARE, dtype=np.int8)

    def is_bp(op, seq):
        v = _rates(tasks, op, seq)[1]
        return v is not None and v == v and v >= bp

    def root(op, seq):
        b = _rates(tasks, op, seq)[0]
        if b is None or b != b or b < busy or is_bp(op, seq):
            return False
        if not upstream:
            return True
        ups = {s for s, d in ends.values() if d == op and s is not None and s != op}
        return any(is_bp(u, seq) for u in ups)

    for m, k in enumerate(stretch.kinds):
        if k != "sconn":
            continue
        dst = ends.get(stretch.modules[m], (None, None))[1]
        for t, seq in enumerate(stretch.seqs.tolist()):
            if dst is not None and root(dst, seq):
                res[m, t] = STALLED
            elif c.tm[m, t] > 0:
                res[m, t] = HEALTHY
            elif dst is not None and is_bp(dst, seq):
                res[m, t] = BLOCKED
    res_in = np.full((stretch.n, stretch.t), DONTCARE, dtype=np.int8)
    return {"out": (res, res == STALLED), "in": (res_in, np.zeros_like(res_in, dtype=bool))}


def ref_ds2(stretch: Stretch, min_ms: float = 10.0, ratio: float = 1.0, bp: float = 500.0,
            tasks: dict | None = None, ends: dict | None = None) -> dict:
    """DS2 (OSDI 2018) per operator and interval with loops: true processing rate Δrecords_in per busy
    share, offered rate the upstreams' Δrecords_out per share not back-pressured (unbounded below
    min_ms); the connections into an operator whose rate x ratio is below what it is offered STALLED."""
    tasks, ends = tasks or {}, ends or {}

    def delta(op, seq, col):
        row, prev = tasks.get((op, seq)), tasks.get((op, seq - 1))
        if row is None or prev is None or row.get(col) is None or prev.get(col) is None:
            return None
        d = row[col] - prev[col]
        return None if d != d else max(d, 0.0)

    def known(v):
        return v is not None and v == v

    def bottleneck(op, seq):
        ups = {s for s, d in ends.values() if d == op and s is not None and s != op}
        b, _ = _rates(tasks, op, seq)
        din = delta(op, seq, "records_in")
        if not ups or not known(b) or din is None or b < min_ms:
            return False
        offered = 0.0
        for u in ups:
            _, p = _rates(tasks, u, seq)
            dout = delta(u, seq, "records_out")
            if not known(p) or dout is None:
                return False
            free = 1.0 - p / 1000.0
            offered += float("inf") if free * 1000.0 < min_ms else dout / free
        return din / (b / 1000.0) * ratio < offered

    c = stretch.counters["out"]
    res = np.full((stretch.n, stretch.t), DONTCARE, dtype=np.int8)
    for m, k in enumerate(stretch.kinds):
        if k != "sconn":
            continue
        dst = ends.get(stretch.modules[m], (None, None))[1]
        for t, seq in enumerate(stretch.seqs.tolist()):
            p = _rates(tasks, dst, seq)[1] if dst is not None else None
            if dst is not None and bottleneck(dst, seq):
                res[m, t] = STALLED
            elif c.tm[m, t] > 0:
                res[m, t] = HEALTHY
            elif known(p) and p >= bp:
                res[m, t] = BLOCKED
    res_in = np.full((stretch.n, stretch.t), DONTCARE, dtype=np.int8)
    return {"out": (res, res == STALLED), "in": (res_in, np.zeros_like(res_in, dtype=bool))}


_reference.REFERENCE["streamsdiagnoser"] = ref_streamsdiagnoser
_reference.REFERENCE["ds2"] = ref_ds2
_reference.REFERENCE["flink-backpressure"] = ref_flink_backpressure
