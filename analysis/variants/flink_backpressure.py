"""`flink-backpressure`: the engine's own root-cause reading of back-pressure, as a baseline for
StreamsDiagnoser (issue 22). It reads no FlowDiagnoser counters' rules, only Flink's per-task time
metrics (the run's `stream_tasks` table, docs/streams.md).

The rule (Flink's documentation, "Monitoring Back Pressure": "the source of back pressure is the
first task downstream of back-pressured tasks that is itself not back-pressured and busy"; FLINK-20718
added busy time for exactly this reading; Dhalion's back-pressure initiator is the same idea: the
instance that is not itself back-pressured while its upstream instances are):

1. Per operator (task) and snapshot interval, its back-pressured and busy time in ms per second.
   From Flink's cumulative counters when the run has them for this and the previous snapshot
   (acc_busy_ms, acc_backpressured_ms, acc_idle_ms): each one's increase over the interval, as a
   share of the three increases together (busy + back-pressured + idle is the task's whole time,
   so the share needs no clock), times 1000. Flink derives the busy time as the rest (elapsed -
   back-pressured - idle), so in a run one of them can step back by a few hundred ms while another
   steps over by as much (measured: a task going back-pressured, busy -138 ms and back-pressured
   +1,133 ms in one second); each increase is clipped to [0, the interval's total] first. Otherwise the gauges as sampled at the snapshot
   (busy_ms_per_s, backpressured_ms_per_s: Flink's own moving averages). No value: neither.
2. Back-pressured: back-pressured time >= `bp` ms/s (default 500: Flink's web UI calls more than 50%
   HIGH). Busy: busy time >= `busy` ms/s (default 500, the same level).
3. Root cause (the bottleneck): busy, not back-pressured, and (`upstream=on`, the default) at least
   one upstream operator back-pressured in the same interval. A sink (a task with no downstream)
   qualifies like any other: nothing below it can be back-pressured, and "busy, with back-pressured
   tasks above" is the whole test. `upstream=off` drops the upstream condition (every busy,
   non-back-pressured task is a root cause: the busiest-task reading of FLINK-20718 on its own).
4. Diagnosis per stream connection (module `sconn`, direction `out`): the connections INTO a
   root-cause operator are STALLED (positive); otherwise HEALTHY when tuples were processed out of
   the connection, BLOCKED when its downstream operator is back-pressured, else DONTCARE (idle).
   The `in` direction and modules of other kinds are DONTCARE.

Scored on the same modules and ground truth as streamsdiagnoser. Input: the batch's engine metrics
(Batch.engine_metrics: the loaded run's stream_tasks and connections' ends, analysis.model.engine_metrics),
given as `Batch(stretches, engine_metrics=...)` for stretches made in memory (without them they have no
task metrics, so no root cause). A run whose stream connections have no stream_tasks rows, or stretches
from no run directory (JSON snapshots), is a UserError: the baseline needs the engine's metrics.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.model.batch import Batch
from analysis.model.engine_metrics import EngineMetrics
from analysis.model.stretches import DIRS, KINDS
from analysis.variants.base import BLOCKED, DONTCARE, HEALTHY, STALLED, Param, RuleSystem, on_off
from rundir.errors import UserError

_SCONN = KINDS.index("sconn")
ACC = ("acc_busy_ms", "acc_backpressured_ms", "acc_idle_ms")


def ms_per_s(value: str) -> float:
    v = float(value.strip().lower().removesuffix("ms/s").removesuffix("ms"))
    if not 0 <= v <= 1000:
        raise ValueError("expected ms per second, 0..1000")
    return v


def _inputs(batch: Batch) -> tuple[pd.DataFrame, dict]:
    src = batch.source
    metrics = batch.engine_metrics
    if metrics is None:
        if src is not None:
            raise UserError(f"{src}: flink-backpressure needs a streams run directory (its stream_tasks table); "
                            "stretches without one cannot be diagnosed by it")
        metrics = EngineMetrics()   # stretches made in memory, none given: no task metrics, no root cause
    tasks, ends = metrics.tasks, metrics.ends
    if src is not None and tasks.empty and any(k == "sconn" for st in batch.stretches for k in st.kinds):
        raise UserError(f"{batch.source or 'input'}: flink-backpressure needs the engine's per-task metrics "
                        "(stream_tasks, run format 6); this run has none")
    return tasks, ends


def task_rates(tasks: pd.DataFrame) -> pd.DataFrame:
    """Per (operator, seq): busy and back-pressured ms/s over the interval ending at seq (rule 1)."""
    t = tasks.sort_values(["operator", "seq"], kind="stable").reset_index(drop=True)
    prev = t.groupby("operator", sort=False)[["seq", *ACC]].shift(1)
    d = {c: t[c] - prev[c] for c in ACC}
    total = d["acc_busy_ms"] + d["acc_backpressured_ms"] + d["acc_idle_ms"]
    ok = ((t["seq"] - prev["seq"]) == 1) & total.gt(0)
    for c in ACC:
        ok &= d[c].notna()
    with np.errstate(invalid="ignore", divide="ignore"):
        # Flink derives busy time as the rest (elapsed - back-pressured - idle), so one of the three can
        # step back a little while another steps over: each share is clipped to [0, the interval].
        def share(c):
            return 1000.0 * np.clip(d[c], 0.0, total) / total
        busy = np.where(ok, share("acc_busy_ms"), t["busy_ms_per_s"])
        bp = np.where(ok, share("acc_backpressured_ms"), t["backpressured_ms_per_s"])
    return pd.DataFrame({"operator": t["operator"], "seq": t["seq"], "busy": busy, "bp": bp,
                         "from_acc": ok.to_numpy(bool)})


def operator_cells(batch: Batch, ends: dict, values, dtype) -> np.ndarray:
    """Per cell of the batch: `values(dst, seqs)` for the snapshots of an sconn module whose downstream
    operator `dst` is known (an array as long as seqs); 0 elsewhere."""
    out = np.zeros(batch.n_cells, dtype=dtype)
    for st, off in zip(batch.stretches, batch.offsets[:-1], strict=True):
        for i, (m, k) in enumerate(zip(st.modules, st.kinds, strict=True)):
            dst = ends.get(m, (None, None))[1] if k == "sconn" else None
            if dst is not None:
                out[off + i * st.t: off + (i + 1) * st.t] = values(dst, st.seqs)
    return out


def root_causes(tasks: pd.DataFrame, ends: dict, bp: float = 500.0, busy: float = 500.0,
                upstream: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(root cause, back-pressured): bool frames indexed by seq, a column per operator (rules 2-3)."""
    r = task_rates(tasks)
    if r.empty:
        empty = pd.DataFrame(index=pd.Index([], dtype="int64", name="seq"))
        return empty, empty
    r = r.drop_duplicates(["operator", "seq"], keep="last")
    is_bp = (r["bp"] >= bp).to_numpy(bool)   # NaN: unknown, neither
    is_busy = (r["busy"] >= busy).to_numpy(bool)
    ops = sorted(set(r["operator"]) | {o for e in ends.values() for o in e if o is not None})
    bpf = pd.DataFrame({"seq": r["seq"], "op": r["operator"], "v": is_bp}).pivot(index="seq", columns="op", values="v")
    bsf = pd.DataFrame({"seq": r["seq"], "op": r["operator"], "v": is_busy}).pivot(index="seq", columns="op", values="v")
    bpf = bpf.reindex(columns=ops).astype(float).fillna(0.0).astype(bool)
    bsf = bsf.reindex(columns=ops).astype(float).fillna(0.0).astype(bool)
    ups: dict[str, set[str]] = {o: set() for o in ops}
    for src, dst in ends.values():
        if src is not None and dst is not None and src != dst:
            ups[dst].add(src)
    root = bsf & ~bpf
    if upstream:
        above = pd.DataFrame({o: bpf[sorted(ups[o])].any(axis=1) if ups[o] else False for o in ops}, index=bpf.index)
        root &= above.astype(bool)
    return root, bpf


def diagnose(batch: Batch, bp: float = 500.0, busy: float = 500.0, upstream: bool = True):
    tasks, ends = _inputs(batch)
    root, bpf = root_causes(tasks, ends, bp, busy, upstream)
    n = batch.n_cells
    into_root = np.zeros(n, dtype=bool)
    dst_bp = np.zeros(n, dtype=bool)
    for st, off in zip(batch.stretches, batch.offsets[:-1], strict=True):
        for i, (m, k) in enumerate(zip(st.modules, st.kinds, strict=True)):
            dst = ends.get(m, (None, None))[1] if k == "sconn" else None
            if dst is None or dst not in root.columns:
                continue
            cells = slice(off + i * st.t, off + (i + 1) * st.t)
            into_root[cells] = root[dst].reindex(st.seqs, fill_value=False).to_numpy(bool)
            dst_bp[cells] = bpf[dst].reindex(st.seqs, fill_value=False).to_numpy(bool)
    sconn = batch.kind_codes == _SCONN
    moved = batch.counters("out").tm > 0
    res_out = np.where(~sconn, DONTCARE, np.where(into_root, STALLED, np.where(moved, HEALTHY,
                                                                              np.where(dst_bp, BLOCKED, DONTCARE))))
    res_out = res_out.astype(np.int8)
    res_in = np.full(n, DONTCARE, dtype=np.int8)
    out = {"out": (res_out, res_out == STALLED), "in": (res_in, np.zeros(n, dtype=bool))}
    return {d: out[d] for d in DIRS}


SYSTEM = RuleSystem(
    name="flink-backpressure",
    kind="label",
    summary="the engine's baseline (Flink 'Monitoring Back Pressure', FLINK-20718, Dhalion): an operator busy, not "
            "back-pressured, under a back-pressured upstream is the root cause; the connections into it are "
            "STALLED (stream_tasks; streams runs only)",
    params=(
        Param("bp", 500.0, ms_per_s, "back-pressured when back-pressured time >= this many ms/s (500: Flink's HIGH, > 50%)"),
        Param("busy", 500.0, ms_per_s, "busy when busy time >= this many ms/s"),
        Param("upstream", True, on_off, "a root cause needs a back-pressured upstream operator (off: every busy, "
              "non-back-pressured operator is one)"),
    ),
    diagnose=diagnose,
    presets=("flink-backpressure", "flink-backpressure:bp=100,busy=100"),
)
