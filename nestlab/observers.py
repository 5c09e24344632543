"""The lab wired to the analysis: the observers (harness.observers) that `run-experiment` hands to a
run and a suite. Here, and only here, the harness's runs meet the analysis's pipeline.

- live: the progress view's second line, the modules STALLED now (nestlab.live_line);
- report: at the end of a run, its tables, figures and HTML report (analysis.render.summary.summarize_run)
  and its network health into its manifest; returns the run's headline scores, as values;
- scores: the headline of a stored run (a suite's runs kept by --resume);
- pooled: a suite's accuracy table over its complete runs, in <suite>/analysis/.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from rich.console import Console

from analysis import studies
from analysis.evaluation import Evaluation
from analysis.pipeline import evaluate
from analysis.render.summary import summarize
from analysis.render.writers import write_accuracy
from harness.observers import Headline, Observers
from nestlab.live_line import LiveProgress
from rundir.errors import UserError
from rundir.layout import RunDir, fresh, output_dir
from rundir.manifest import read_manifest_quietly


def records_probes(run: Path) -> bool:
    """The run was recorded with the collector's probes (its spec's `probe` is on: format 5 on)."""
    m = read_manifest_quietly(RunDir(Path(run)).manifest_path)
    return m is not None and m.spec.probe is not None


def _variants(run: Path) -> tuple[str, ...]:
    """The run's study kind's summary variants (analysis.studies: the seeds' NeST; with probes, the lab's
    probe variant beside it; a streams run's three)."""
    return studies.of_runs([run]).summary_variants(records_probes(run))

console = Console(stderr=True, highlight=False, soft_wrap=True)


def headline(ev: Evaluation) -> Headline:
    """The headline of an evaluation's first variant, both directions: TCP's TPR, FPR and PPV and the
    TPR of each application row that has one, in %."""
    total = ev.table().loc["Total"]

    def pct(row: str, rate: str) -> float | None:
        v = total.at[row, rate]
        return None if v != v else 100.0 * float(v)

    study = ev.study   # its headline row (TCP; a streams run's stream connections) and application rows
    row = study.headline_row
    apps = tuple(v for v in (pct(r, "TPR") for r in study.app_rows) if v is not None)
    return Headline(pct(row, "TPR"), pct(row, "FPR"), pct(row, "PPV"), apps, scope=study.scope)


def report(run: Path, quiet: bool = False) -> Headline | None:
    """A finished run's accuracy table, figures and report, where its files went, and its health into
    its manifest; quiet=True (a suite's runs) writes what it would print into <run>/logs/analysis.log.
    A run that cannot be analysed is one warning line: the run is recorded whatever happens here."""
    try:
        if quiet:
            output_dir(RunDir(run).logs)   # refused when it is a symbolic link
            with open(fresh(RunDir(run).analysis_log), "w") as log, \
                    contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                ev = summarize(run, _variants(run))
        else:
            ev = summarize(run, _variants(run))
        health = ev.health.get(ev.runs[0])
        if health is not None:
            RunDir.open(run).update_manifest(health=health.as_dict())
        return headline(ev)
    except UserError as e:
        console.print("analysis: ", style="yellow", end="")
        console.print(str(e), markup=False)
    except Exception as e:  # noqa: BLE001 - the run is recorded; a report failure must not hide that
        console.print("analysis failed: ", style="yellow", end="")
        console.print(f"{type(e).__name__}: {e} (the run is complete; try `nestlab accuracy {run}`)", markup=False)
    return None


def scores(run: Path) -> Headline | None:
    """A stored run's headline, computed again (nothing written); None when it cannot be analysed."""
    try:
        return headline(evaluate([run], _variants(run)))
    except Exception:  # noqa: BLE001 - a summary cell left blank, the run's own report says why
        return None


def pooled(runs: list[Path], root: Path) -> None:
    """The suite's accuracy table over its complete runs (the default variant), written to
    <suite>/analysis/ like `nestlab accuracy <suite>`, on every core (the files are those of one
    process, analysis.pipeline)."""
    out = RunDir(root).analysis
    study = studies.of_runs(runs)
    try:
        md, _ = write_accuracy(evaluate(runs, study.summary_variants(), skip_bad=True,
                                        jobs=os.cpu_count() or 1), out)
    except Exception as e:  # noqa: BLE001 - the runs are recorded; say how to get the table
        console.print("suite analysis failed: ", style="yellow", end="")
        console.print(f"{type(e).__name__}: {e} (try `nestlab accuracy {root}`)", markup=False)
        return
    seed = f"; `nestlab accuracy {root} --against {study.suite_seed}` puts the thesis's beside them" if study.suite_seed else ""
    print(f"\n{md}\n\nsuite tables written to {out}{seed}", flush=True)


def observers() -> Observers:
    """Everything `run-experiment` shows and writes besides the run itself."""
    return Observers(live=LiveProgress, report=report, scores=scores, pooled=pooled)
