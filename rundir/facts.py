"""Facts derived from a run that every reader needs, computed once, here: the faults that took
effect, their recovery margins, the run's time origin t0 and when its workloads stopped.

The analysis, the HTML report, the live view and the runner's schedule all take these from here,
so that a fault counts (or not) and a time is measured from the same origin everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rundir.repair import is_number

# The port the iperf servers listen on (thesis 3.7): the harness starts them on it, and the analysis
# tells an iperf connection's direction by it (iperf writes to remote port 5001, reads on local 5001).
IPERF_PORT = 5001

# The automatic recovery margin after a fault window: its duration plus this (see recovery_after).
RECOVERY_EXTRA_S = 1.0


def recovery_after(duration: float, setting: float | str = "auto") -> float:
    """The recovery margin after a fault window of `duration` s: the setting, or for 'auto' the
    window's duration + RECOVERY_EXTRA_S. Why: TCP's retransmission timer doubles while packets are
    dropped (RTO 0.2 s, then 0.4, 0.8, ... s), so the first retransmission after a drop of d seconds
    ends comes at most about d + RTO_min later; the extra second covers RTO_min, the queueing RTT and
    the first round trips after it (measured: 0.2-3.3 s for 1-5 s faults, docs/schedules.md)."""
    return duration + RECOVERY_EXTRA_S if setting == "auto" else float(setting)


def recovery_setting(isolation: Any) -> float | str:
    """The recovery margin a run's faults were scheduled with: the spec's `isolation.recovery`, or
    'auto' when faults were allowed to overlap (no margin was reserved; 'auto' is what TCP needs)."""
    return isolation.recovery if not isolation.overlap else "auto"


def took_effect(faults):
    """The rows of a faults frame (rundir.read.read_fault_rows, checked by rundir.repair.fault_rows)
    of the faults that took effect: a verified start was recorded. A fault without one (skipped, or
    never in force) acted on nothing."""
    return faults[faults["start"].notna()]


def fault_spans(faults, isolation: Any) -> list[tuple[float, float]]:
    """[start, end + recovery margin] of every fault that took effect (monotonic seconds), in the
    frame's order; a fault with no recorded end spans to infinity."""
    setting = recovery_setting(isolation)
    spans = []
    for f in took_effect(faults).itertuples(index=False):
        end = float(f.end) if f.end is not None and f.end == f.end else math.inf
        spans.append((float(f.start), end + recovery_after(end - float(f.start), setting)))
    return spans


def manifest_t0(manifest: Any) -> float | None:
    """The manifest's t0 (when the workloads started) when it is a time, else None."""
    t0 = getattr(manifest, "t0", None) if manifest is not None else None
    return float(t0) if is_number(t0) else None


def time_origin(manifest: Any, first_snapshot: float | None) -> float | None:
    """The run's time origin: the manifest's t0, else the first snapshot's time."""
    t0 = manifest_t0(manifest)
    return t0 if t0 is not None else first_snapshot


def workloads_stopped(run_ends: Sequence[float], manifest: Any) -> float | None:
    """When the runner stopped the workloads: the first run_end event, else t0 + the spec's duration,
    else unknown (None)."""
    if len(run_ends):
        return float(run_ends[0])
    t0 = manifest_t0(manifest)
    duration = manifest.spec.duration if manifest is not None else None
    if t0 is not None and is_number(duration) and duration >= 0:
        return t0 + duration
    return None


def recording_cut_short(last_snapshot: float, stopped: float | None, interval: float | None) -> float | None:
    """How many seconds before the workloads stopped the snapshots stop, when that is more than a
    second (and 10 intervals): the collector died or stopped writing. None: recorded to the end."""
    if stopped is None:
        return None
    gap = stopped - last_snapshot
    return gap if gap > max(1.0, 10 * (interval or 0.1)) else None
