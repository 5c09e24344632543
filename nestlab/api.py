"""The public Python API: a stored run as pandas frames, diagnosed, labelled and scored by the same
code as the command line (docs/api.md).

    import nestlab
    run = nestlab.open_run("results/net_fault/<stamp>-r0")    # or nestlab.open_runs("thesis-3.3")
    run.modules, run.snapshots, run.counters, run.faults       # pandas DataFrames
    run.diagnose("flowdiagnoser:theta=2")                       # one row per variant, direction, module, snapshot
    run.labels()                                                # the ground truth, with its cause
    run.accuracy(["flowdiagnoser:theta=2", "nest-cf"])          # thesis Table 3.3 rows, as accuracy.csv has them

Read-only (nothing is written into the run), no root. A run is read once, when a frame is first asked
for; a damaged run reads as the analysis reads it (its warnings in `run.warnings`), and what cannot
be read at all raises rundir.errors.UserError with the one line the command line prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import pandas as pd

from analysis.diagnose import diagnose_run
from analysis.labels import label_run
from analysis.load import RunData, load_run_data
from analysis.pipeline import evaluate
from analysis.render.writers import accuracy_csv_frame
from analysis.variants import DEFAULT_VARIANT
from rundir.manifest import Manifest
from rundir.runs import RunInfo, find_runs, guarded
from rundir.runs import open_run as check_run


class StoredRun:
    """One stored run directory (see the module docstring)."""

    def __init__(self, path: str | Path):
        self.path = Path(path).resolve()
        self.info: RunInfo = guarded(self.path, check_run, self.path)

    def __repr__(self) -> str:
        return f"StoredRun({str(self.path)!r}, {self.info.status})"

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def manifest(self) -> Manifest | None:
        return self.info.manifest

    @cached_property
    def data(self) -> RunData:
        """Everything the analysis reads of the run (analysis.load.RunData)."""
        return guarded(self.path, load_run_data, self.info)

    @property
    def warnings(self) -> list[str]:
        return self.data.warnings

    @property
    def modules(self) -> pd.DataFrame:
        """By module id: kind, name, key, attrs, born, died, workload, wl_kind, oneway, table rows."""
        return self.data.modules

    @property
    def snapshots(self) -> pd.DataFrame:
        """By seq: mono (the monitored host's CLOCK_MONOTONIC), start (the previous snapshot's)."""
        return self.data.snapshots

    @property
    def counters(self) -> pd.DataFrame:
        """Counter deltas: one row per module, direction and snapshot (thesis 3.4 applied)."""
        return self.data.counters

    @property
    def faults(self) -> pd.DataFrame:
        """One row per fault part: kind, target (dict), target_module, start, end, description."""
        return self.data.faults

    def diagnose(self, *variants: str) -> pd.DataFrame:
        """Every variant's result per direction, module and snapshot (default: analysis.variants.DEFAULT_VARIANT)."""
        return guarded(self.path, diagnose_run, self.data.run, list(variants) or [DEFAULT_VARIANT])

    def labels(self, policy: str | None = None) -> pd.DataFrame:
        """The counters with the ground truth of a labelling policy joined on: actual, exclude, cause,
        fault (default policy: impact, the seeds' criteria)."""
        return guarded(self.path, label_run, self.data, policy)

    def accuracy(self, variants: Sequence[str] | str = (DEFAULT_VARIANT,), policy: str | None = None,
                 ) -> pd.DataFrame:
        """Thesis Table 3.3 for each variant, the rows and columns of `nestlab accuracy`'s accuracy.csv."""
        return accuracy_of([self], variants, policy)


def accuracy_of(runs: Sequence[StoredRun], variants: Sequence[str] | str = (DEFAULT_VARIANT,),
                policy: str | None = None) -> pd.DataFrame:
    """accuracy.csv's rows for a set of runs (with 2 or more, the across-run intervals too)."""
    variants = [variants] if isinstance(variants, str) else list(variants)
    ev = evaluate([r.path for r in runs], variants, policy)
    return accuracy_csv_frame({v: ev.table(v) for v in ev.variants}, ev.policy,
                              {v: ev.across(v) for v in ev.variants})


def open_run(path: str | Path) -> StoredRun:
    """A stored run directory; UserError (one line) when it is not one that can be read."""
    return StoredRun(path)


def open_runs(spec: str | Path, results: str | Path = "results") -> list[StoredRun]:
    """The runs a name stands for, as the command line takes it: a run or a directory of runs, a glob,
    an experiment or a suite name under `results` (a suite's runs are those its index names)."""
    return [StoredRun(p) for p in find_runs([str(spec)], results)]
