"""Ground truth of a streams run (thesis 4.6.3), the labelling policies' answer for runs whose modules
are stream connections (the streams study kind names `label` as its ground truth, analysis.studies.streams;
docs/streams.md, "Ground truth").

- **Positive** exactly for the connections into a throttle at rate 0 (fault rows of kind `throttle`
  whose target JSON has `"rate": 0`; the collector writes one row per connection into the operator),
  in direction `out`, while that fault is active: "all connections leading to the DynamicThrottle's
  input port should be marked as STALLED when the throttle is set to 0" (4.6.3).
- **Negative** everywhere else: a throttle at another rate (1, 100, 1000 tuples/s limit a rate, they
  do not stop it), a dropper (it reads and discards: filtering, normal behaviour, 4.2.1; never a
  positive), every other connection, and the barrier's other inputs when a throttle starves it
  (4.6.3.1: "correct behavior ... not counted as an Actual Positive").
- **Intervals that straddle a fault's start or end are left out** (cause `straddle`; the accuracy
  table's footnote counts them, as it counts `overlap`). A snapshot covers the interval (previous
  snapshot, this snapshot]; it is positive when the interval lies within the fault's [start, end]
  (start and end are the operator's acknowledgements of the change and of its undo). The thesis
  chose 5-s snapshots and faults of 5, 10 or 20 s "to ensure that it covers an entire snapshot";
  with our 1-s snapshots the interval in which the throttle stops (or starts reading again) is part
  fault, part not: the downstream PE processed tuples in it, so Δtotal_msgs > 0 and no rule can call
  it STALLED, yet calling it negative would count the fault's own onset against the diagnoser when
  it does say STALLED. Neither label is right, so it is not scored. Only the target's rows are
  affected: only the target can be positive. A fault without a recorded end is active until the
  last snapshot (analysis.load fills it in).
- Rows without a valid counter delta (the first snapshot, the `in` direction, which has no counters)
  are excluded (cause `invalid`), and, with `after_end=exclude` (the default), snapshots that end after
  the run's `run_end` event.

The policies' other parameters (lookback, direction, retrans, oneway, collateral, overlap, tail)
are about network faults and do not apply: `impact` and `window` label a streams run the same way.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rundir import facts

STRADDLE = "straddle"


def stall_faults(data) -> list[tuple[int, int, float, float]]:
    """(fault id, target module, start, end) of the faults that stall their target (their kind's
    `stalls`, rundir.faultkinds: the throttles at rate 0), took effect and have a target."""
    out = []
    kinds = data.fault_kinds
    for f in facts.took_effect(data.faults).itertuples(index=False):
        if f.target_module is pd.NA or pd.isna(f.target_module) or pd.isna(f.end):
            continue
        if f.kind in kinds and kinds[f.kind].culprit(f.target):
            out.append((int(f.id), int(f.target_module), float(f.start), float(f.end)))
    return out


def label(data, values: dict, causes: tuple[str, ...]) -> pd.DataFrame:
    """Aligned with data.counters: actual, exclude, cause (categories `causes`), fault (module docstring)."""
    c = data.counters
    n = len(c)
    module = c["module"].to_numpy(np.int64)
    out = (c["dir"] == "out").to_numpy(bool)
    seq = c["seq"].to_numpy(np.int64)
    t_end = data.snapshots["mono"].reindex(seq).to_numpy(float)
    t_start = data.snapshots["start"].reindex(seq).to_numpy(float)
    invalid = c["invalid"].to_numpy(bool)
    actual = np.zeros(n, dtype=bool)
    straddle = np.zeros(n, dtype=bool)
    fault = np.full(n, -1, dtype=np.int64)
    for fid, target, f0, f1 in stall_faults(data):
        rows = (module == target) & out & ~np.isnan(t_start)
        within = rows & (t_start >= f0) & (t_end <= f1)
        touches = rows & (t_end > f0) & (t_start < f1)
        actual |= within
        fault[within & (fault < 0)] = fid
        straddle |= touches & ~within
    straddle &= ~actual   # a row inside one fault and across the edge of another is the first's
    exclude = invalid | straddle
    code = {k: i for i, k in enumerate(causes)}
    cause = np.zeros(n, dtype=np.int8)
    cause[actual] = code["fault"]
    cause[straddle] = code[STRADDLE]
    stop = getattr(data, "stop", None)
    if values.get("after_end", "exclude") == "exclude" and stop is not None:
        after = t_end > stop
        exclude |= after
        cause[after & ~invalid] = code["after_end"]
    cause[invalid] = code["invalid"]
    return pd.DataFrame({
        "actual": actual,
        "exclude": exclude,
        "cause": pd.Categorical.from_codes(cause, list(causes)),
        "fault": pd.Series(fault, index=c.index).where(fault >= 0).astype("Int64"),
    }, index=c.index)
