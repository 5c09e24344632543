"""`streamsdiagnoser`: StreamsDiagnoser (thesis chapter 4, 4.4 and 4.4.2), FlowDiagnoser on stream
connections; `engine=on` asks the engine where the counters are ambiguous (issue 34).

The modules are stream connections (kind `sconn`), PEs the edges, the graph push-oriented (data flows
parent -> child); a connection's counters are `total_msgs` = tuples processed out of it and
`queued` = tuples submitted into it and not yet processed (docs/streams.md). Per connection and
snapshot, 4.4 reduces Table 2.2 to:

- HEALTHY when Δtotal_msgs > 0 (the downstream PE read from it);
- else DONTCARE when queued <= 0 (nothing to read: the upstream PE supplied nothing);
- else BLOCKED when it can pass the blame to a child (Table 2.2 (e), CanPassBlame: a downstream
  connection that is itself inactive with queued > 0: backpressure from further down);
- else STALLED (h): the downstream PE did not read tuples waiting for it, and nothing below it is
  stuck. A positive is STALLED, and it blames the connection's downstream PE (4.4.2).

That is exactly FlowDiagnoser (analysis.variants.flowdiagnoser) with Θ = 1 (the plain CanPassBlame of
Algorithm 5) and queue counters as HasWork (queues=on), on the `out` direction, which is the only one a
stream connection has: HasWork(M) = queued > 0 for a module with a queue counter, so neither roots nor
parents decide it, and a child with queued > 0 under an inactive parent with work takes the blame.
So this system calls that machinery with theta=1, queues=on rather than restating it; the plain
per-snapshot rule above is tests/support/reference_streams.py, and the tests require the two to agree.

`engine=on`: the last two cases (inactive with tuples waiting: BLOCKED or STALLED) are where the
counters cannot tell *why* the downstream PE did not read. Thesis 4.6.3.1: a Barrier waiting on an
empty input stops reading its others (STALLED by the counters: false positives), and a throttle
stopped above an input the Barrier no longer reads passes the blame down (BLOCKED: a false negative).
The engine knows what the downstream PE's task did over the interval (Flink's busy, back-pressured
and idle time: analysis.variants.flink_backpressure.task_rates, the cumulative times where the run has
them, else the gauges). In those cells, by the downstream PE's state:
- back-pressured (>= `bp` ms/s): BLOCKED (it cannot submit: backpressure from further down);
- else busy (>= `busy` ms/s): STALLED (it is doing something other than reading the tuples waiting
  for it: a PE busy, not back-pressured, with tuples queued is the stall, whatever its children say);
- else (idle): BLOCKED (it waits for input elsewhere: a PE that stops reading an input while idle
  waiting on another input is blocked by that input, not stalled).
Where the engine has no value for the PE and interval (no stream_tasks row, no previous row for the
cumulative times and no gauges), the plain rule stands. HEALTHY and DONTCARE cells are never changed.
Thresholds: 500 ms/s for both, as flink-backpressure's (Flink's web UI calls more than 50% HIGH),
set before any run was looked at; a throttle at rate 0 is busy near 1,000 ms/s (Flink counts time in
user code as busy), the tasks above it back-pressured near 1,000, a Barrier waiting idle near 1,000.

The `in` direction of a stream connection has no counters (the collector writes none): its cells
are DONTCARE and never positive (they are invalid, so no table scores them anyway). Modules of other
kinds, if any, get FlowDiagnoser Θ = 1, queues=on in both directions.

The 4.3.2 carry of negative queues into the next Δtotal_msgs and the Appendix A per-connection
recovery are the collector's (the counters arrive corrected); a negative queue recorded here is simply
not work (DONTCARE when inactive).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.model.batch import Batch
from analysis.model.stretches import DIRS, KINDS
from analysis.variants.base import BLOCKED, DONTCARE, STALLED, Param, RuleSystem, on_off
from analysis.variants.flink_backpressure import ms_per_s, operator_cells, task_rates
from analysis.variants.flowdiagnoser import diagnose as flowdiagnoser

_SCONN = KINDS.index("sconn")


def engine_states(batch: Batch, bp: float, busy: float) -> np.ndarray:
    """Per cell: the connection's downstream PE over the cell's interval, 0 unknown, 1 back-pressured,
    2 busy (not back-pressured), 3 idle (neither)."""
    metrics = batch.engine_metrics
    if metrics is None or metrics.tasks.empty:
        return np.zeros(batch.n_cells, dtype=np.int8)
    r = task_rates(metrics.tasks).drop_duplicates(["operator", "seq"], keep="last")
    known = r["busy"].notna() & r["bp"].notna()
    state = np.where(~known, 0, np.where(r["bp"] >= bp, 1, np.where(r["busy"] >= busy, 2, 3))).astype(np.int8)
    wide = pd.DataFrame({"seq": r["seq"], "op": r["operator"], "v": state}).pivot(index="seq", columns="op", values="v")
    wide = wide.fillna(0).astype(np.int8)
    return operator_cells(batch, metrics.ends, lambda dst, seqs: (
        wide[dst].reindex(seqs, fill_value=0).to_numpy(np.int8) if dst in wide.columns
        else np.zeros(len(seqs), dtype=np.int8)), np.int8)


def diagnose(batch: Batch, engine: bool = False, bp: float = 500.0, busy: float = 500.0):
    out = flowdiagnoser(batch, theta=1, queues=True)
    sconn = batch.kind_codes == _SCONN
    if sconn.any():
        res, pos = out["in"]
        res, pos = res.copy(), pos.copy()
        res[sconn], pos[sconn] = DONTCARE, False
        out["in"] = (res, pos)
        if engine:
            res, _ = out["out"]
            state = engine_states(batch, bp, busy)
            ask = sconn & ((res == BLOCKED) | (res == STALLED)) & (state > 0)
            res = np.where(ask, np.where(state == 2, STALLED, BLOCKED), res).astype(np.int8)
            out["out"] = (res, res == STALLED)
    return {d: out[d] for d in DIRS}


SYSTEM = RuleSystem(
    name="streamsdiagnoser",
    kind="label",
    summary="StreamsDiagnoser (thesis ch. 4, 4.4/4.4.2): stream connections, HEALTHY if tuples were processed, "
            "DONTCARE if none queued, BLOCKED if a downstream connection is also inactive with tuples queued, "
            "else STALLED (= FlowDiagnoser with Θ = 1, queues=on, direction out); positive = STALLED. engine=on: "
            "where tuples wait unread, the downstream PE's engine state decides (busy: STALLED; back-pressured "
            "or idle: BLOCKED)",
    params=(
        Param("engine", False, on_off, "ask the engine (stream_tasks) where tuples wait unread: the downstream PE "
              "busy and not back-pressured is the stall, back-pressured or idle is blocked (no metric: the plain rule)"),
        Param("bp", 500.0, ms_per_s, "engine=on: back-pressured when back-pressured time >= this many ms/s"),
        Param("busy", 500.0, ms_per_s, "engine=on: busy when busy time >= this many ms/s"),
    ),
    diagnose=diagnose,
    presets=("streamsdiagnoser", "streamsdiagnoser:engine=on"),
)
