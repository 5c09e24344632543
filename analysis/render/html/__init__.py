"""One self-contained HTML report of a run, a set of runs or a suite (docs/report.md).

    build_report(evaluation, out) -> Path

Sections: the runs (status, duration, faults, warnings), the sections the runs' study kind leads with
(analysis.studies: a service run's tiers' latency and causal paths), network health (table and figures), the
accuracy table per variant (thesis Table 3.3; with 2 or more runs the across-runs table), the
variant comparison (paper Table 8 layout; with 2 or more variants), the seeds' numbers beside ours
(thesis-3.3 for flowdiagnoser:theta=2, paper-table-6 for nest-cf, paper-table-8 for nest-cf's
ablations, when those variants were evaluated), for runs with a message trace the causal paths (the
true ones and each black-box algorithm's, analysis.render.html.paths), the thesis chapter 5 figures and stalled-modules
list, and a section per fault. With several runs the figures and faults of each run go in a
collapsible block, within the caps below so that the page stays quick to open.

The file needs nothing from outside: CSS inline, figures as data: URIs, no script, no fonts or links
to fetch. Numbers come from the code that writes accuracy.csv (analysis.score, analysis.render.tables).
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from analysis.evaluation import Evaluation
from analysis.render.html import figures, sections
from analysis.render.html.fabric import fabric_section
from analysis.render.html.faults import faults_part
from analysis.render.html.html import details, esc, note, page, png, section, table
from analysis.render.html.paths import paths_section
from analysis.render.html.service import culprit_section, service_section
from analysis.render.tables import stalled_top
from rundir.faultkinds import LEGACY
from rundir.layout import RunDir, fresh, output_dir

MAX_RUN_FIGURES = 30        # several runs: runs whose diagnosis overview is drawn ...
RUN_FIGURE_DPI = 80         # ... at this resolution (one run: analysis.render.plots.DPI)
MAX_FAULT_SECTIONS = 120    # fault sections in the whole report
OPEN_FAULTS = 10            # one run with at most this many faults: their sections shown open
MAX_STALLED = 20            # rows of the stalled-modules list


def suite_of(runs: Sequence[Path]) -> Path | None:
    """The suite directory whose index names exactly these runs (the runs' common directory or its
    parent), or None."""
    from rundir.runs import common_root
    from rundir.suite_index import suite_members

    if len(runs) < 2:
        return None
    root = common_root(list(runs))
    for d in (root, root.parent):
        members = suite_members(d)
        if members is not None and {m.resolve() for m in members} == {Path(r).resolve() for r in runs}:
            return d
    return None


def default_output(runs: Sequence[Path]) -> Path:
    """<run>/analysis/report.html for one run, <suite>/analysis/report.html for a suite's runs, else
    <the runs' common directory>/analysis/report.html."""
    from rundir.runs import common_root

    return RunDir(suite_of(runs) or common_root(list(runs))).analysis / "report.html"


def _title(ev) -> str:
    if len(ev.runs) == 1:
        return f"nestlab report: {sections.run_name(ev.runs[0])}"
    suite = suite_of(ev.runs)
    if suite is not None:
        return f"nestlab report: suite {suite.name} ({len(ev.runs)} runs)"
    return f"nestlab report: {sections.runs_title(ev)}"


def _figures_of_run(ev, run: Path, files: list[Path] | None, tmp: Path) -> str:
    """One run's thesis chapter 5 figures (analysis.render.plots), drawn into tmp unless `files` has them,
    and its stalled-modules list."""
    from analysis.render import plots

    data, scored, v = ev.data[run], ev.scored[run], ev.variants[0]
    if scored.empty or data.modules.empty:
        return '<p class="note">Nothing was diagnosed in this run: no figures.</p>'
    if files is None:
        files = plots.plot_run(data, scored, v, tmp)
    by_name = {f.name: f for f in files}
    parts = []
    if "diagnosis-overview.png" in by_name:
        parts.append(png(by_name["diagnosis-overview.png"], f"diagnosis overview {v}",
                         f"Diagnosis of every module over time, {v} (docs/analysis.md, Figures): HEALTHY green, "
                         "DONTCARE light blue, BLOCKED yellow, STALLED red, not scored grey; black bar: ground truth "
                         "positive; fault windows as coloured bars above."))
    if len(ev.variants) > 1:   # one overview: drawing is most of the report's time
        parts.append(note(f"The figures are those of {v}; another variant's: nestlab plots RUN --variant V. "
                          "What every variant said around each fault: the Faults section."))
    if "module-timeline.png" in by_name:
        parts.append(png(by_name["module-timeline.png"], "module timeline",
                         "Thesis Figure 5.1: lifespans of the client processes (top) and the first workload's "
                         "applications, sockets and TCP connections (bottom); fault windows shaded."))
    for f in files:
        if f.name.startswith("subgraph-"):
            parts.append(png(f, f.stem, f"Thesis Figures 3.6-3.8 for module {f.stem.split('-', 1)[1]}: counter "
                                        f"heatmap of its subgraph and the diagnosis timelines ({v})."))
    st, total = stalled_top(data, scored, v, MAX_STALLED)
    parts.append(f"<h3>Stalled modules ({esc(v)}), most STALLED snapshots first</h3>")
    if st.empty:
        parts.append('<p class="note">No module was diagnosed STALLED.</p>')
    else:
        cols = [c for c in st.columns if c != "name"]
        rows = [[_cell(x) for x in r] for r in st[cols].astype(object).itertuples(index=False)]
        parts.append(table(cols, rows, cap=MAX_STALLED, total=total, sep_col=None,
                           rest="all of them: stalled.csv (nestlab plots RUN)"))
    return "\n".join(parts)


def _cell(x) -> str:
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return ""
    return f"{x:g}" if isinstance(x, float) else str(x)


def _overview_png(ev, run: Path, tmp: Path) -> str:
    from analysis.render import plots

    data, scored, v = ev.data[run], ev.scored[run], ev.variants[0]
    if scored.empty or data.modules.empty:
        return '<p class="note">Nothing was diagnosed in this run.</p>'
    f = plots.diagnosis_overview(data, scored, v, tmp / f"overview-{run.parent.name}-{run.name}.png",
                                 dpi=RUN_FIGURE_DPI)
    return png(f, f"diagnosis overview {sections.run_name(run)}", f"Diagnosis of every module over time, {v}.")


def _runs_detail(ev, tmp: Path | None) -> str:
    """Several runs: per run a collapsed block with its diagnosis overview (none without `tmp`) and
    its faults."""
    budget = MAX_FAULT_SECTIONS
    parts = []
    for k, run in enumerate(ev.runs):
        data, scored = ev.data[run], ev.scored[run]
        h = ev.health.get(run)
        sil = "" if h is None or h.silence_rate is None else f" · silence {100 * h.silence_rate:.2f}%"
        summary = (f"{esc(sections.run_name(run))} <span class=\"meta\">{esc(data.info.status)} · "
                   f"{len(data.faults)} faults{esc(sil)}</span>")
        body = [] if tmp is None else [
            _overview_png(ev, run, tmp) if k < MAX_RUN_FIGURES else
            note(f"No figure (only the first {MAX_RUN_FIGURES} runs get one): nestlab report {run}")]
        fp, used = faults_part(data, scored, ev.variants, budget)
        budget -= used
        body.append(fp)
        parts.append(details(summary, "\n".join(body), attrs={"id": f"run-{run.parent.name}-{run.name}"}))
    return "\n".join(parts)


def build_report(ev: Evaluation, out: str | Path, *, figures_of: dict | None = None, draw: bool = True) -> Path:
    """Write the report of an evaluation (analysis.pipeline.evaluate with keep=True: its runs,
    variants and policy) to `out` and return its path (module docstring). `figures_of`: {run path:
    files plot_run already drew} to embed instead of drawing them again; draw=False: no figures."""
    started = time.monotonic()
    out = Path(out)
    one = len(ev.runs) == 1
    parts, toc = [], []

    def add(anchor: str, title: str, body: str) -> None:
        if body:
            toc.append((anchor, title))
            parts.append(section(anchor, title, body))

    add("runs", "Run" if one else f"Runs ({len(ev.runs)})", sections.runs_section(ev))
    # The sections the study kind leads with (a service run: its tiers' latency, then the causal paths).
    lead = {"service": ("Service tiers: latency", lambda: service_section(ev)),
            "culprit": ("Which tier? Culprit accuracy per fault kind", lambda: culprit_section(ev)),
            "paths": ("Causal paths (black-box: Project5, WAP5)", lambda: paths_section(ev)),
            "fabric": ("Which link? 007 and NetBouncer per link", lambda: fabric_section(ev))}
    for anchor in ev.study.lead:
        add(anchor, lead[anchor][0], lead[anchor][1]())
    # Scratch for figures, next to the report: a report killed half way leaves nothing outside it.
    with tempfile.TemporaryDirectory(prefix=".report-", dir=output_dir(out.parent)) as tmpdir:
        tmp = Path(tmpdir)
        health = sections.health_section(ev)
        if draw and one and ev.runs[0] in ev.data and ev.study.network_health:
            run = ev.runs[0]
            health += png(figures.health_figure(ev.data[run], ev.health.get(run)), "network health over time",
                          "Network health over time: RTT, the busiest queues' backlog and drops, TCP retransmissions.")
        elif draw and ev.health:
            names = [sections.run_name(p) for p in ev.runs]
            health += png(figures.health_runs_figure(names, [ev.health.get(p) for p in ev.runs]),
                          "network health per run", "Network health per run, quiet time.")
        add("health", "Network health", health)
        add("accuracy", "Accuracy", sections.accuracy_section(ev))
        if len(ev.variants) >= 2:
            add("compare", "Variant comparison", sections.compare_section(ev))
        add("against", "Against the seeds", sections.against_section(ev))
        if "paths" not in ev.study.lead:
            add("paths", "Causal paths (black-box: Project5, WAP5)", paths_section(ev))
        if one:
            run = ev.runs[0]
            if draw:
                add("figures", "Figures (thesis chapter 5)",
                    _figures_of_run(ev, run, (figures_of or {}).get(run), tmp))
            data = ev.data[run]
            fp, _ = faults_part(data, ev.scored[run], ev.variants, MAX_FAULT_SECTIONS,
                                open_=len(data.faults) <= OPEN_FAULTS)
            add("faults", f"Faults ({len(data.faults)})", fp)
        else:
            add("detail", "Each run: figure and faults", _runs_detail(ev, tmp if draw else None))
    from rundir import __version__

    meta = (f"Generated {time.strftime('%Y-%m-%d %H:%M:%S %Z')} by nestlab {esc(__version__)} in "
            f"{time.monotonic() - started:.1f} s · ground truth {esc(ev.policy)} · variants "
            f"{esc(', '.join(ev.variants))} · {esc(sections.runs_title(ev))}")
    tmp_out = fresh(out.with_name(out.name + ".part"))
    kinds = dict(LEGACY)   # the runs' fault kinds' infos, over LEGACY's (rundir.faultkinds.kinds_of)
    for data in ev.data.values():
        kinds.update(data.fault_kinds)
    tmp_out.write_text(page(_title(ev), meta, toc, parts, kinds), encoding="utf-8")
    tmp_out.replace(out)
    return out

