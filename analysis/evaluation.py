"""An evaluation: the per-module counts of one or more runs under one or more variants and one
labelling policy (what analysis.pipeline.evaluate returns), and its tables (analysis.score)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from analysis import studies
from analysis.score.accuracy import accuracy_table, across_runs, compare_table, per_run_table


@dataclass
class Evaluation:
    """Per-module counts of one or more runs, variants and one labelling policy."""

    counts: pd.DataFrame               # run, variant, dir, module, kind, rows, TP, TN, FP, FN
    variants: list[str]
    policy: str
    runs: list[Path]
    warnings: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)     # run path -> RunData, when kept
    scored: dict = field(default_factory=dict)   # run path -> join_labels frame, when kept
    health: dict = field(default_factory=dict)   # run path -> rundir.manifest.RunHealth (analysis.health)
    overlap_rows: int = 0   # module-snapshots left out: a target under another fault's collateral
    straddle_rows: int = 0  # module-snapshots left out: a streams interval across a fault's start or end
    skipped: list = field(default_factory=list)       # (run path, why) of runs that could not be analysed
    run_warnings: dict = field(default_factory=dict)  # run path -> what was wrong with it (warnings)
    out: Path | None = None   # where summarize_run wrote its files

    @cached_property
    def study(self) -> studies.Study:
        """The study kind whose view these runs get (analysis.studies)."""
        return studies.of_evaluation(self)

    def table(self, variant: str | None = None) -> pd.DataFrame:
        return accuracy_table(self.counts, variant or self.variants[0])

    def compare(self, variants: Sequence[str] | None = None) -> pd.DataFrame:
        return compare_table(self.counts, list(variants or self.variants))

    def per_run(self, variant: str | None = None) -> pd.DataFrame:
        return per_run_table(self.counts, variant or self.variants[0], [str(p) for p in self.runs])

    def across(self, variant: str | None = None) -> pd.DataFrame:
        return across_runs(self.counts, variant or self.variants[0], [str(p) for p in self.runs])
