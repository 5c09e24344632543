"""The service view of `nestlab accuracy` and `nestlab compare` (issue 42 item 4; docs/service.md): runs
of the service study lead with their tiers' latency in quiet time and the culprit table (which tier
each diagnoser names first per fault window, analysis.score.culprit), before the accuracy table or
the variant comparison. One run: its tiers as the end-of-run summary prints them (analysis.service_health);
several: the hops of every run's quiet time pooled per tier (percentiles of the pooled hops, each run's
fault windows and recovery left out by its own clock).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.health import fault_spans
from analysis.service_health import health_from, service_health, service_markdown
from rundir.requests import read_requests


def quiet_hops(run: str | Path, data) -> pd.DataFrame:
    """The run's requests rows outside every fault window and its recovery (empty: no requests)."""
    req = read_requests(run, [])
    if req.empty:
        return req
    start, end = req["start"].to_numpy(float), req["end"].to_numpy(float)
    quiet = np.ones(len(req), dtype=bool)
    for a, b in fault_spans(data):
        quiet &= ~((end > a) & (start < b))
    return req[quiet]


class TierLatency:
    """Collects each run's tiers as the culprit pass loads the run (its on_data hook)."""

    def __init__(self) -> None:
        self.hops: list[pd.DataFrame] = []
        self.one = None          # the single run's ServiceHealth (its load line and warnings)
        self.runs = 0

    def __call__(self, run, data) -> None:
        hops = quiet_hops(run, data)
        if hops.empty:
            return
        self.runs += 1
        self.hops.append(hops)
        if self.runs == 1:
            self.one = service_health(run, data)

    def markdown(self) -> str:
        if not self.runs:
            return "### Service tiers: latency\n\nNo requests recorded in these runs."
        if self.runs == 1 and self.one is not None:
            return "### Service tiers: latency\n\n" + service_markdown(self.one)
        h = health_from(pd.concat(self.hops, ignore_index=True), [], {})
        table = service_markdown(h).split("\n\n")[0]
        return (f"### Service tiers: latency ({self.runs} runs)\n\n{table}\n\nHop latencies in quiet time "
                "(outside every fault window and its recovery), pooled over the runs.")


def service_view(runs: Sequence[str | Path], variants: Sequence[str], names: Sequence[str], out: Path,
                 warn: Callable[[str, str], None] | None = None, known: dict | None = None) -> tuple[str, list[Path]]:
    """The tiers' latency and the culprit table of `runs` (their service runs), as Markdown, and the
    culprit files written to `out` (compare-culprit.csv and its windows). known: the black-box
    rankings compare_blackbox made of these runs."""
    from analysis.score.culprit import compare_culprit, write_culprit

    tiers = TierLatency()
    per, table, notes = compare_culprit(runs, variants, names, warn, on_data=tiers, known=known)
    md, files = write_culprit(per, table, notes, out)
    return tiers.markdown() + "\n\n" + md, files
