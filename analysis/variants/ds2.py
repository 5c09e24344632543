"""`ds2`: DS2's reading of a stream job (Kalavri et al., "Three steps is all you need: fast, accurate,
automatic scaling decisions for distributed streaming dataflows", OSDI 2018), as a baseline for
StreamsDiagnoser (issue 34), from Flink's per-task metrics (the run's `stream_tasks`, docs/streams.md).

DS2 measures each operator's *true* rates: records per unit of *useful* time, the time the operator
spends processing, not waiting for input or for room downstream (Flink's busy time). An operator
whose true processing rate is below the rate its input is offered at needs more instances than it
has (DS2's parallelism ⌈offered / true processing rate⌉ exceeds 1 here, every task runs alone): it
is the bottleneck. Per operator and snapshot interval:

1. Useful time: the busy share of the interval, and the back-pressured share, as flink-backpressure
   reads them (analysis.variants.flink_backpressure.task_rates: cumulative times over the interval,
   else the gauges). Records: the increase of `records_in` and `records_out` since the previous
   snapshot (none without a row at both).
2. True processing rate λp = Δrecords_in / useful time. An operator with less than `min_ms` ms/s of
   useful time has no measured capacity and is no bottleneck (it is waiting, not working).
3. Offered rate = Σ over its upstream operators of Δrecords_out / the time that operator was not
   back-pressured: the rate it submits at when its output is open, DS2's observed output rate; each
   downstream of a port gets every tuple (Flink copies it). An upstream back-pressured for all but
   `min_ms` ms/s of the interval offers without bound (its output was never open: the tuples wait).
   An operator without upstream operators (a source) has no offered rate and is no bottleneck.
4. Bottleneck: λp × `ratio` < offered rate (`ratio` 1: DS2's rule, more than one instance needed).
5. Diagnosis per stream connection (direction `out`): the connections into a bottleneck are STALLED;
   otherwise HEALTHY when tuples were processed out of it, BLOCKED when its downstream operator is
   back-pressured (>= `bp` ms/s), else DONTCARE; the `in` direction and other kinds DONTCARE
   (flink-backpressure's labels).

Thresholds, set before any run was looked at: `min_ms` 10 ms/s (1% of the interval: a task at 100
tuples/s doing nothing but forwarding is busy a few ms/s, so below 10 it measures nothing), `ratio`
1 (DS2's own rule), `bp` 500 (flink-backpressure's). DS2 finds bottlenecks, not stalls: a throttle at
rate 1 is a bottleneck (λp 1 tuple per useful second against 100 offered), a false positive against
4.6.3's ground truth, by design; so is the slowest operator at full rate.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.model.batch import Batch
from analysis.model.engine_metrics import EngineMetrics
from analysis.model.stretches import DIRS, KINDS
from analysis.variants.base import BLOCKED, DONTCARE, HEALTHY, STALLED, Param, RuleSystem
from analysis.variants.flink_backpressure import ms_per_s, operator_cells, task_rates
from rundir.errors import UserError

_SCONN = KINDS.index("sconn")


def positive_float(text: str) -> float:
    v = float(text)
    if not v > 0 or v == float("inf"):
        raise ValueError("expected a number > 0")
    return v


def operator_rates(tasks: pd.DataFrame) -> pd.DataFrame:
    """Per (operator, seq): busy and bp in ms/s (task_rates) and the records' increases din, dout
    since the previous snapshot (NaN without one)."""
    r = task_rates(tasks).drop_duplicates(["operator", "seq"], keep="last").reset_index(drop=True)
    t = tasks.sort_values(["operator", "seq"], kind="stable").drop_duplicates(["operator", "seq"], keep="last")
    t = t.reset_index(drop=True)
    prev = t.groupby("operator", sort=False)[["seq", "records_in", "records_out"]].shift(1)
    step = (t["seq"] - prev["seq"]) == 1
    rec = pd.DataFrame({"operator": t["operator"], "seq": t["seq"],
                        "din": (t["records_in"] - prev["records_in"]).where(step),
                        "dout": (t["records_out"] - prev["records_out"]).where(step)})
    return r.merge(rec, on=["operator", "seq"], how="left")


def bottlenecks(tasks: pd.DataFrame, ends: dict, min_ms: float = 10.0, ratio: float = 1.0) -> pd.DataFrame:
    """Bool frame indexed by seq, a column per operator: the bottlenecks (rules 1-4)."""
    r = operator_rates(tasks)
    if r.empty:
        return pd.DataFrame(index=pd.Index([], dtype="int64", name="seq"))
    ups: dict[str, set[str]] = {}
    for src, dst in ends.values():
        if src is not None and dst is not None and src != dst:
            ups.setdefault(dst, set()).add(src)
    free = 1.0 - r["bp"] / 1000.0
    # what each operator offers downstream per unit of the interval (NaN: unknown)
    offer = np.where(free * 1000.0 < min_ms, np.inf, r["dout"].clip(lower=0.0) / free)
    offer = np.where(r["bp"].isna() | r["dout"].isna(), np.nan, offer)
    # true processing rate per unit of the interval (NaN: unknown or no measured capacity)
    capacity = np.where(r["busy"] >= min_ms, r["din"].clip(lower=0.0) / (r["busy"] / 1000.0), np.nan)
    wide = pd.DataFrame({"seq": r["seq"], "op": r["operator"], "offer": offer, "cap": capacity})
    offers = wide.pivot(index="seq", columns="op", values="offer")
    caps = wide.pivot(index="seq", columns="op", values="cap")
    out = pd.DataFrame(False, index=caps.index, columns=caps.columns)
    for op, above in ups.items():
        if op not in caps.columns:
            continue
        have = [u for u in sorted(above) if u in offers.columns]
        if len(have) < len(above):
            continue   # an upstream operator without any row: its offer unknown throughout
        offered = offers[have].sum(axis=1, min_count=len(have)).where(offers[have].notna().all(axis=1))
        out[op] = (caps[op] * ratio < offered).fillna(False).astype(bool)
    return out


def _per_cell(frame: pd.DataFrame, batch: Batch, ends: dict) -> np.ndarray:
    """Per cell: frame[downstream operator] at the cell's snapshot (False where unknown)."""
    return operator_cells(batch, ends, lambda dst, seqs: (
        frame[dst].reindex(seqs, fill_value=False).to_numpy(bool) if dst in frame.columns
        else np.zeros(len(seqs), dtype=bool)), bool)


def diagnose(batch: Batch, min_ms: float = 10.0, ratio: float = 1.0, bp: float = 500.0):
    metrics = batch.engine_metrics
    if metrics is None:
        if batch.source is not None:
            raise UserError(f"{batch.source}: ds2 needs a streams run directory (its stream_tasks table)")
        metrics = EngineMetrics()
    if batch.source is not None and metrics.tasks.empty and (batch.kind_codes == _SCONN).any():
        raise UserError(f"{batch.source}: ds2 needs the engine's per-task metrics (stream_tasks, run format 6); "
                        "this run has none")
    tasks, ends = metrics.tasks, metrics.ends
    n = batch.n_cells
    into = dst_bp = np.zeros(n, dtype=bool)
    if not tasks.empty:
        into = _per_cell(bottlenecks(tasks, ends, min_ms, ratio), batch, ends)
        rates = task_rates(tasks).drop_duplicates(["operator", "seq"], keep="last")
        pressed = pd.DataFrame({"seq": rates["seq"], "op": rates["operator"], "v": (rates["bp"] >= bp).to_numpy(bool)})
        dst_bp = _per_cell(pressed.pivot(index="seq", columns="op", values="v").fillna(False).astype(bool), batch, ends)
    sconn = batch.kind_codes == _SCONN
    moved = batch.counters("out").tm > 0
    res = np.where(~sconn, DONTCARE, np.where(into, STALLED, np.where(moved, HEALTHY, np.where(dst_bp, BLOCKED, DONTCARE))))
    res = res.astype(np.int8)
    out = {"out": (res, res == STALLED), "in": (np.full(n, DONTCARE, dtype=np.int8), np.zeros(n, dtype=bool))}
    return {d: out[d] for d in DIRS}


SYSTEM = RuleSystem(
    name="ds2",
    kind="label",
    summary="DS2's reading (OSDI 2018) from stream_tasks: an operator whose true processing rate (records per "
            "busy second) is below its offered rate (upstream records out per second not back-pressured) is the "
            "bottleneck; the connections into it are STALLED (streams runs only)",
    params=(
        Param("min_ms", 10.0, ms_per_s, "less useful (busy) time than this many ms/s: no measured capacity, no "
              "bottleneck; an upstream free of back-pressure for less: offers without bound"),
        Param("ratio", 1.0, positive_float, "bottleneck when true processing rate x ratio < offered rate (1: DS2)"),
        Param("bp", 500.0, ms_per_s, "a connection whose downstream is back-pressured (>= ms/s) is BLOCKED"),
    ),
    diagnose=diagnose,
    presets=("ds2",),
)
