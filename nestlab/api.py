"""The public Python API: a stored run as pandas frames, diagnosed, labelled and scored by the same
code as the command line (docs/api.md).

    import nestlab
    run = nestlab.open_run("results/net_fault/<stamp>-r0")    # or nestlab.open_runs("thesis-3.3")
    run.modules, run.snapshots, run.counters, run.faults       # pandas DataFrames
    run.probes, run.tcp_info                                    # the evidence tables a probe or TCP-state idea reads
    run.diagnose("flowdiagnoser:theta=2")                       # one row per variant, direction, module, snapshot
    run.labels()                                                # the ground truth, with its cause
    run.accuracy(["flowdiagnoser:theta=2", "nest-cf"])          # thesis Table 3.3 rows, as accuracy.csv has them
    nestlab.score(runs, predictions)                            # the same table for predictions made anywhere

Variants are given one way everywhere (analysis.variants.variant_specs): one or many, names or objects
(Variant, RuleSystem), ranges expanded ('flowdiagnoser:theta=1..3'). A diagnosis keeps the name as it
was written (column `asked`) beside the canonical one (`variant`); an accuracy frame, whose columns
are the files', maps them in frame.attrs["asked"].

Read-only (nothing is written into the run), no root. A run is read once, when a frame is first asked
for; a damaged run reads as the analysis reads it (its warnings in `run.warnings`), and what cannot
be read at all raises rundir.errors.UserError with the one line the command line prints.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import pandas as pd

from analysis import studies
from analysis.diagnose import diagnose_run
from analysis.labels import label_run, parse_policy
from analysis.load import RunData, load_run_data
from analysis.pipeline import evaluate
from analysis.render.writers import accuracy_csv_frame, per_run_csv_frame, study_tables
from analysis.variants import DEFAULT_VARIANT, variant_specs
from rundir import read
from rundir.db import connect
from rundir.errors import UserError
from rundir.layout import RunDir
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

    @cached_property
    def tcp_info(self) -> pd.DataFrame | None:
        """The collector's tcp_info rows (a row when they change, carried forward): seq, module, rtt_us,
        rttvar_us, the TCP state (backoff, ca_state, retransmits, probes, rto_us, data_sent_at,
        data_recv_at, ack_recv_at: format 4 on), rcv_rtt_us (format 5 on); None: not recorded."""
        return self.data.tcp_info

    @cached_property
    def probes(self) -> pd.DataFrame:
        """The collector's half-open probes (docs/probes.md): id, burst, module, remote, sport, kind, seq,
        sent, done, outcome, rtt_ms; no rows for a run recorded without them (format < 5, probe: off)."""
        def rows() -> pd.DataFrame:
            conn = connect(RunDir(self.path).db, readonly=True)
            try:
                frame = read.read_probes(conn, [])
            finally:
                conn.close()
            # whole numbers as integers, as in run.db (the reader keeps them float to check them)
            return frame.astype({"burst": "int64", "module": "int64", "seq": "int64", "sport": "Int64"})
        return guarded(self.path, rows)

    def diagnose(self, *variants) -> pd.DataFrame:
        """Every variant's result per direction, module and snapshot (default:
        analysis.variants.DEFAULT_VARIANT). Variants one or many, names or objects, ranges expanded;
        column `asked` is each variant as written, `variant` its canonical name."""
        specs = _specs(variants, [self.path])
        frame = guarded(self.path, diagnose_run, self.data.run, [v for _, v in specs])
        return _with_asked(frame, specs)

    def labels(self, policy: str | None = None) -> pd.DataFrame:
        """The counters with the ground truth of a labelling policy joined on: actual, exclude, cause,
        fault (default policy: the run's study kind's: impact, the seeds' criteria; a service run's
        requests, docs/studies.md)."""
        return guarded(self.path, label_run, self.data, policy)

    def accuracy(self, variants=None, policy: str | None = None, per_run: bool = False,
                 ) -> pd.DataFrame:
        """Thesis Table 3.3 for each variant, the rows and columns of `nestlab accuracy`'s accuracy.csv
        (per_run=True: per_run.csv's, with the run's path in column `run`)."""
        return accuracy_of([self], variants, policy, per_run=per_run)


def _specs(variants, paths=()) -> list[tuple[str, object]]:
    """(as written, Variant) of variants given one or many, as names or objects (a usage error names
    the usage, never a run); none: the variant of these runs' study kind (analysis.studies:
    streamsdiagnoser for streams runs, DEFAULT_VARIANT otherwise)."""
    if len(variants) == 1:
        variants = variants[0]
    return variant_specs(variants) or variant_specs(studies.of_runs(paths).variant if paths else DEFAULT_VARIANT)


def _with_asked(frame: pd.DataFrame, specs) -> pd.DataFrame:
    asked = {v.name: written for written, v in specs}
    frame.insert(1, "asked", frame["variant"].astype(str).map(asked).astype("category"))
    return frame


def _runs(runs) -> list[StoredRun]:
    if isinstance(runs, StoredRun | str | Path):
        runs = [runs]
    out = []
    for r in runs:
        if isinstance(r, StoredRun):
            out.append(r)
        elif isinstance(r, str | Path):
            out.append(StoredRun(r))
        else:
            raise UserError(f"runs: expected StoredRun objects or run directories; got {type(r).__name__} {r!r:.60}")
    if not out:
        raise UserError("runs: none given (nestlab.open_runs(NAME) finds them)")
    return out


def accuracy_of(runs, variants=None, policy: str | None = None, per_run: bool = False,
                jobs: int = 1) -> pd.DataFrame:
    """accuracy.csv's rows for a set of runs (with 2 or more, the across-run intervals too); per_run=True:
    per_run.csv's rows (column `run`). Runs: StoredRun objects or run directories, one or many.
    jobs > 1 analyses the runs in that many processes (each loads the plug-ins itself). Variants
    None: the system under test's (DEFAULT_VARIANT; streamsdiagnoser for streams runs)."""
    paths = [r.path for r in _runs(runs)]
    specs = _specs((variants,) if variants is not None else (), paths)
    parse_policy(policy)   # a bad policy is a usage error, before any run is read
    ev = evaluate(paths, [v for _, v in specs], policy, jobs=jobs)
    if per_run:
        frame = per_run_csv_frame(ev)
    else:
        frame = accuracy_csv_frame(study_tables(ev), ev.policy, {v: ev.across(v) for v in ev.variants})
    # the columns stay the files' (cell by cell); the names as written map to the canonical ones here
    frame.attrs["asked"] = {written: v.name for written, v in specs}
    return frame


def open_run(path: str | Path) -> StoredRun:
    """A stored run directory; UserError (one line) when it is not one that can be read."""
    return StoredRun(path)


def open_runs(spec: str | Path, results: str | Path = "results") -> list[StoredRun]:
    """The runs a name stands for, as the command line takes it: a run or a directory of runs, a glob,
    an experiment or a suite name under `results` (a suite's runs are those its index names). A
    relative `results` is taken from the working directory (the error says which directory that was)."""
    try:
        return [StoredRun(p) for p in find_runs([str(spec)], results)]
    except UserError as e:
        root = Path(results)
        if root.is_absolute() or Path(spec).exists():
            raise
        raise UserError(f"{e} [results root: {root.resolve()}, from the working directory {Path.cwd()}; "
                        f"pass results=... or a run's path]") from None
