"""A service run's health (docs/service.md): per tier, the hops' latency percentiles and errors in
quiet time (hops outside every fault window and its recovery margin), beside the network health;
and warnings when the service itself is the bottleneck, so that a run whose tiers cannot keep up with
the offered load is not read as a fault's effect.

The service is the bottleneck when
- arrivals were refused: they found `concurrency` requests in flight (an open-loop generator never
  waits for the service, so a refused arrival is load the service did not take);
- the answered rate is below 90% of the offered rate (these two are the load generator's counts over
  the whole run, and say so when the run has faults: a paused tier makes arrivals pile up);
- more than 1% of a tier's quiet hops failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.health import fault_spans
from rundir.messages import drop_warnings
from rundir.requests import read_requests

TIERS = ("client", "web", "app", "cache", "db")
ACHIEVED_WARN = 0.9      # answered / offered below this: the service did not keep up
ERRORS_WARN = 0.01       # failed hops of a tier in quiet time, above this share


@dataclass
class ServiceHealth:
    tiers: pd.DataFrame                     # tier, hops, errors, p50_ms, p90_ms, p99_ms, max_ms (quiet time)
    types: dict[str, int]                   # requests by the path they took (hit, miss, write)
    load: dict                              # the load generator's summary (the manifest's `service`)
    warnings: list[str] = field(default_factory=list)
    trace: dict | None = None               # the manifest's `trace` (a run with `trace: messages`)


def service_health(run_dir: str | Path, data) -> ServiceHealth | None:
    """The health of a run's service workload (`data`: the run's analysis.load.RunData, for its fault
    windows and manifest), None for a run without one (no requests rows)."""
    warnings: list[str] = []
    req = read_requests(run_dir, warnings)
    if req.empty:
        return None
    manifest = data.info.manifest
    loads = getattr(manifest, "service", None) or {}
    load = next(iter(loads.values())).model_dump() if loads else {}
    h = health_from(req, fault_spans(data), load)
    h.warnings[:0] = warnings
    trace = getattr(manifest, "trace", None)   # `trace: messages`: events its rings dropped or lost
    if trace is not None:
        h.trace = trace.model_dump()
        h.warnings += drop_warnings(h.trace)
    return h


def health_from(req: pd.DataFrame, spans: list[tuple[float, float]], load: dict) -> ServiceHealth:
    """Per-tier figures of the requests rows (rundir.db.REQUEST_COLUMNS) outside `spans`, and the
    warnings of a service that is itself the bottleneck (`load`: the load generator's summary)."""
    warnings: list[str] = []
    start, end = req["start"].to_numpy(float), req["end"].to_numpy(float)
    quiet = np.ones(len(req), dtype=bool)
    for a, b in spans:
        quiet &= ~((end > a) & (start < b))
    q = req[quiet]
    rows = []
    for tier in [t for t in TIERS if t in set(req["tier"])] + sorted(set(req["tier"]) - set(TIERS)):
        hops = q[q["tier"] == tier]
        ms = (hops["end"] - hops["start"]).to_numpy(float) * 1000
        errors = int((hops["outcome"] != "ok").sum())
        pct = np.percentile(ms, [50, 90, 99]) if len(ms) else [np.nan] * 3
        rows.append({"tier": tier, "hops": len(hops), "errors": errors, "p50_ms": pct[0], "p90_ms": pct[1],
                     "p99_ms": pct[2], "max_ms": ms.max() if len(ms) else np.nan})
        if len(hops) and errors / len(hops) > ERRORS_WARN:
            warnings.append(f"service: {errors} of {len(hops)} {tier} hops failed in quiet time "
                            f"({100 * errors / len(hops):.1f}%): the service, not a fault, lost requests")
    clients = req[req["tier"] == "client"].drop_duplicates("request")
    types = {str(k): int(v) for k, v in clients["type"].value_counts().items()}
    # The load generator counts over the whole run: with faults, their windows are in these figures.
    during = " (over the whole run, fault windows included)" if spans else ""
    offered, refused, sent = load.get("offered_rate"), load.get("refused") or 0, load.get("sent") or 0
    if refused:
        warnings.append(f"service: {refused} of {refused + sent} arrivals found {load.get('concurrency')} requests "
                        f"in flight and were not sent{during}: the service is the bottleneck (raise concurrency "
                        "or lower rate)")
    achieved = load.get("achieved_rate")
    if offered and achieved is not None and achieved < ACHIEVED_WARN * offered:
        warnings.append(f"service: {achieved:g} requests/s answered of {offered:g}/s offered{during}: "
                        "the service is the bottleneck")
    return ServiceHealth(pd.DataFrame(rows), types, load, warnings)


def service_markdown(h: ServiceHealth) -> str:
    """The service's health as a Markdown table and a line on its load."""
    lines = ["| tier | hops | errors | p50 ms | p90 ms | p99 ms | max ms |", "|---|--:|--:|--:|--:|--:|--:|"]
    for r in h.tiers.itertuples():
        lines.append(f"| {r.tier} | {r.hops} | {r.errors} | {r.p50_ms:.2f} | {r.p90_ms:.2f} | {r.p99_ms:.2f} "
                     f"| {r.max_ms:.2f} |")
    types = ", ".join(f"{k} {v}" for k, v in sorted(h.types.items()))
    load = h.load
    rate = (f"offered {load['offered_rate']:g}/s, answered {load['achieved_rate']:g}/s, refused "
            f"{load.get('refused', 0)}, errors {load.get('errors', 0)}; " if load.get("offered_rate") else "")
    traced = ""
    if h.trace:
        t = h.trace
        traced = (f" Message trace: {t['events']:,} events from {t['processes']} processes, {t['dropped']} dropped, "
                  f"{t['lost']} lost.")
    return "\n".join(lines) + f"\n\nService load: {rate}requests by path: {types}. Hop latencies in quiet time.{traced}"
