"""What `run-experiment` writes at the end of one run (the render step of analysis.pipeline for one run):
the run evaluated (analysis.pipeline.evaluate) with its accuracy tables, network health, stalled list,
figures (analysis.render.plots) and HTML report (analysis.render.html) written into <run>/analysis/."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from analysis import studies
from analysis.diagnose import as_variants
from analysis.evaluation import Evaluation
from analysis.pipeline import evaluate
from analysis.render.writers import write_accuracy, write_stalled
from analysis.service_health import service_health, service_markdown
from analysis.variants import DEFAULT_VARIANT
from rundir.errors import UserError
from rundir.layout import RunDir, fresh


def say(text: str, file=None) -> None:
    print(text, file=file or sys.stdout, flush=True)



def _say_fabric(run_dir, out: Path, say) -> None:
    """The fabric view of this run (analysis.fabric.view): 007 and NetBouncer per window, scored."""
    from analysis.fabric.view import fabric_view, markdown, write_view

    try:
        view = fabric_view([run_dir])
        write_view(view, out)
    except UserError as e:   # no fabric.json: the run stopped before the end
        say(f"warning: no fabric view: {e}", sys.stderr)
        return
    say("")
    say(markdown(view))


def _say_service(service, out: Path) -> None:
    """A service workload's tiers (docs/service.md): service_health.csv, and printed."""
    service.tiers.to_csv(fresh(out / "service_health.csv"), index=False, na_rep="")
    say("\n### Service health\n")
    say(service_markdown(service))
    for w in service.warnings:
        say(f"warning: {w}", sys.stderr)


def summarize_run(run_dir: str | Path, variants: Sequence[str] = (DEFAULT_VARIANT,), policy=None,
                  figures: bool = True, out: str | Path | None = None) -> Path:
    """summarize (below), returning the directory the files went to."""
    return summarize(run_dir, variants, policy, figures, out).out


def summarize(run_dir: str | Path, variants: Sequence[str] = (DEFAULT_VARIANT,), policy=None,
              figures: bool = True, out: str | Path | None = None) -> Evaluation:
    """The end of `run-experiment` for one run: prints the run's accuracy table (one per variant) and
    network health, and writes into <run_dir>/analysis/: accuracy.md, accuracy.csv, accuracy.tex,
    per_run.csv, health.csv, health.json, stalled.md, stalled.csv, the figures of
    analysis.render.plots (PNG) and report.html (the HTML report, analysis.render.html: the same as
    `nestlab report RUN`, so with the report's variants besides `variants`). Prints where they went
    and returns the evaluation (`variants` only; its `out` attribute is the directory). Raises
    UserError when the run cannot be analysed; a figure or a report that fails is reported as a
    warning line and does not stop the rest."""
    # The figures and the report (matplotlib, the HTML parts) are imported here: a table needs neither.
    from analysis.render import html as html_report
    from analysis.render import plots

    run_dir = Path(run_dir)
    # The tables are those of `variants`; the report (the same as `nestlab report RUN`) also has the
    # report's own variants, diagnosed in the same pass (labels and counters are read once).
    base = list(dict.fromkeys(v.name for v in as_variants(variants)))
    report = studies.of_runs([run_dir]).report_variants()   # the run's study kind's (analysis.studies)
    extra = [v for v in dict.fromkeys(x.name for x in as_variants(report)) if v not in base]
    full = evaluate([run_dir], base + extra, policy, keep=True)
    ev = dataclasses.replace(full, variants=base)
    for w in ev.warnings:
        say(f"warning: {w}", sys.stderr)
    out = Path(out) if out is not None else RunDir(run_dir).analysis
    md, _ = write_accuracy(ev, out)
    data = ev.data[ev.runs[0]]
    scored = ev.scored[ev.runs[0]]
    variant = ev.variants[0]
    service = service_health(run_dir, data)
    lead = "service" in ev.study.lead   # a service run's summary leads with its tiers' latency
    if service is not None and lead:
        _say_service(service, out)
    if "fabric" in ev.study.lead:   # a fabric run's summary leads with which link each diagnoser names
        _say_fabric(run_dir, out, say)
    say("")
    say(md)
    health = ev.health.get(ev.runs[0])
    if health is not None:   # the runner copies it into the manifest
        fresh(out / "health.json").write_text(json.dumps(health.as_dict(), indent=2) + "\n")
        for w in health.warnings:
            say(f"warning: {w}", sys.stderr)
    if service is not None and not lead:
        _say_service(service, out)
    write_stalled(data, scored, variant, out)
    drawn = None
    if figures:
        try:
            drawn = plots.plot_run(data, scored, variant, out)
            if not drawn:
                say("note: nothing was diagnosed, so no figures", sys.stderr)
        except Exception as e:  # a figure must not hide the table a run ended with
            say(f"warning: figures not drawn: {type(e).__name__}: {e}", sys.stderr)
    report = None
    try:
        report = html_report.build_report(full, out / "report.html", draw=figures,
                                          figures_of={ev.runs[0]: drawn} if drawn else None)
    except Exception as e:  # noqa: BLE001 - the report must not hide the tables a run ended with
        say(f"warning: report not written: {type(e).__name__}: {e}", sys.stderr)
    say(f"\nanalysis: tables and figures written to {out}")
    if report is not None:
        say(f"report: {report}")
    ev.out = out
    return ev
