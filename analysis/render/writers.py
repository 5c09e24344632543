"""Rendering the scores as files: Markdown (terminal), CSV and LaTeX, and the stalled-modules list
(analysis.render.summary.summarize_run writes them at the end of `run-experiment`). The rows and cells
these tables share with the seed comparisons and the HTML report are made in analysis.render.tables.

Rates print as percentages with one decimal; an undefined rate (zero denominator) prints blank,
never 0 or NaN. The `±` column is the largest half-width, in percentage points, of the row's
Wilson score 95% intervals (analysis.score); `intervals=True` prints each interval instead.
With two or more runs, each variant's table is followed by an "Across runs" table: TPR, FPR and PPV
as `pooled [low, high] (runs)`, the interval a bootstrap over runs (analysis.score.accuracy.ACROSS_INTERVAL);
accuracy.csv has `<rate>_xlo`, `<rate>_xhi`, `<rate>_runs` for every rate (blank with one run), and
per_run.csv the counts and rates of each run.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.evaluation import Evaluation
from analysis.render.streams_tables import streams_accuracy_latex, streams_accuracy_markdown
from analysis.render.tables import (
    ACROSS_HEADER,
    ACROSS_NOTE,
    ACROSS_RATES,
    COMPARE_NOTE,
    HEALTH_HEADER,
    HEALTH_NOTE,
    PM_RATES,
    TABLE_NOTE,
    across_cells,
    compare_cells,
    half_width,
    health_row,
    overlap_note,
    runs_title,
    skipped_note,
    tex,
    warnings_note,
)
from analysis.render.tables import accuracy_cells as _cells
from analysis.render.tables import md_table as _md_table
from analysis.score.accuracy import INTERVAL
from analysis.score.table_layout import COUNTS, RATES, ROWS, SECTIONS
from rundir.layout import fresh, output_dir

# ----------------------------------------------------------------------------- formatting


def accuracy_markdown(t: pd.DataFrame, title: str = "", intervals: bool = False, shown=ROWS) -> str:
    header = ["", "Module", *COUNTS, *RATES, "±"]
    align = ["l", "l"] + ["r"] * (len(COUNTS) + len(RATES) + 1)
    if intervals:
        header, align = header[:-1], align[:-1]
    rows = _cells(t, intervals, shown)
    if intervals:
        rows = [r[:-1] for r in rows]
    parts = [f"### {title}", ""] if title else []
    parts += [_md_table(header, rows, align), "", TABLE_NOTE if not intervals else TABLE_NOTE.split(" ±")[0]
              + f" Intervals: {INTERVAL}."]
    return "\n".join(parts)


def across_markdown(t: pd.DataFrame, x: pd.DataFrame, title: str = "", shown=ROWS) -> str:
    """The "Across runs" table of one variant: per section and row, TPR, FPR, PPV as
    `pooled [low, high] (runs)` from accuracy_table `t` and across_runs `x`."""
    parts = [f"### {title}", ""] if title else []
    parts += [_md_table(ACROSS_HEADER, across_cells(t, x, shown), ["l", "l"] + ["r"] * len(ACROSS_RATES)), "", ACROSS_NOTE]
    return "\n".join(parts)


ACROSS_COLS = tuple(c for r in RATES for c in (f"{r}_xlo", f"{r}_xhi", f"{r}_runs"))


def accuracy_csv_frame(tables: dict[str, pd.DataFrame], policy: str,
                       across: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """One frame for every variant: variant, policy, section, row, counts, rates and intervals in %,
    pm, then the across-run intervals in % and the runs defining each rate (ACROSS_COLS; blank when
    undefined or when `across`, {variant: across_runs frame}, does not have the variant). Column by
    column on arrays: a few dozen small frames' worth of pandas calls per variant otherwise."""
    frames = []
    for variant, t in tables.items():
        n = len(t)
        cols: dict[str, object] = {"variant": [variant] * n, "policy": [policy] * n,
                                   "section": t.index.get_level_values(0), "row": t.index.get_level_values(1)}
        cols.update((k, t[k].to_numpy()) for k in COUNTS)
        for r in RATES:
            for col in (r, f"{r}_lo", f"{r}_hi"):
                cols[col] = np.round(100.0 * t[col].to_numpy(float), 4)
        records = t[[c for r in PM_RATES for c in (r, f"{r}_lo", f"{r}_hi")]].to_dict("records")
        cols["pm"] = [round(100.0 * half_width(row), 4) for row in records]
        x = (across or {}).get(variant)
        if x is not None:
            x = x.reindex(t.index)
        for r in RATES:
            for col in (f"{r}_xlo", f"{r}_xhi"):
                cols[col] = np.full(n, np.nan) if x is None else np.round(100.0 * x[col].to_numpy(), 4)
            cols[f"{r}_runs"] = (pd.array([pd.NA] * n, dtype="Int64") if x is None
                                 else x[f"{r}_runs"].to_numpy(np.int64))
        frames.append(pd.DataFrame(cols))
    out = pd.concat(frames, ignore_index=True)
    order = ["variant", "policy", "section", "row", *COUNTS,
             *(c for r in RATES for c in (r, f"{r}_lo", f"{r}_hi")), "pm", *ACROSS_COLS]
    return out[order]


def per_run_csv_frame(ev: Evaluation) -> pd.DataFrame:
    """Every run's counts and rates (in %), for every variant: variant, policy, run, section, row, ..."""
    frames = []
    for v in ev.variants:
        f = ev.per_run(v)
        f.insert(0, "policy", ev.policy)
        f.insert(0, "variant", v)
        for r in RATES:
            f[r] = (100.0 * f[r]).round(4)
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def accuracy_latex(t: pd.DataFrame, caption_tex: str = "", shown=ROWS) -> str:
    """Thesis Table 3.3 as a LaTeX table (plain tabular, no packages needed); the caption is LaTeX."""
    lines = [r"\begin{table}[htbp]", r"\centering", r"\small",
             r"\begin{tabular}{ll" + "r" * (len(COUNTS) + len(RATES) + 1) + "}", r"\hline",
             r" & & \multicolumn{3}{c}{Correct answers} & \multicolumn{4}{c}{Diagnosis results} & "
             r"\multicolumn{3}{c}{Positive accuracy \%} & \multicolumn{3}{c}{Negative accuracy \%} & \\",
             " & Module & " + " & ".join(COUNTS) + " & " + " & ".join(RATES) + r" & $\pm$ \\", r"\hline"]
    for k, cells in enumerate(_cells(t, False, shown)):
        if k and k % len(shown) == 0:
            lines.append(r"\hline")
        name = cells[1]
        name = rf"\textit{{{tex(name)}}}" if name.startswith("s:") else tex(name)
        lines.append(" & ".join([tex(cells[0]), name, *cells[2:]]) + r" \\")
    lines += [r"\hline", r"\end{tabular}"]
    if caption_tex:
        lines.append(rf"\caption{{{caption_tex}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def compare_markdown(c: pd.DataFrame, variants: list[str], keys=None) -> str:
    """Paper Table 8 layout: per row and direction, each variant's TP, FP, TPR, PPV and, against
    the first variant, the change in TP and FP in % (bold = better, italic = worse, · = no change);
    `keys`: the study's (section, row, shown as) (analysis.render.tables.compare_cells)."""
    header, rows, legend = compare_cells(c, variants, keys)
    align = ["l", "l"] + ["r"] * (len(header) - 2)
    return "\n".join(["Variants: " + "; ".join(legend), "", _md_table(header, rows, align), "", COMPARE_NOTE])


def compare_csv_frame(c: pd.DataFrame, policy: str) -> pd.DataFrame:
    f = c.stack(level="variant", future_stack=True).reset_index()
    f.insert(0, "policy", policy)
    for col in ("TPR", "PPV"):
        f[col] = (100.0 * f[col]).round(4)
    for col in ("dTP%", "dFP%"):
        f[col] = f[col].round(4)
    return f[["policy", "variant", "section", "row", "TP", "FP", "TPR", "PPV", "dTP%", "dFP%"]]


# ----------------------------------------------------------------------------- stalled modules


def stalled_markdown(st: pd.DataFrame, variant: str, limit: int | None = 30) -> str:
    header = ["Module", "Kind", "Name", "Dir", "Stall", "DCare", "Block", "Healthy", "trans", "longest",
              "mean s", "max s", "queued min", "queued max", "FP"]
    rows = []
    shown = st if limit is None else st.head(limit)
    for r in shown.itertuples(index=False):
        def f(v):
            if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
                return ""
            return f"{v:g}" if isinstance(v, float) else str(v)
        rows.append([f"#{r.module}", r.kind, str(r.name), r.dir, str(r.positive), f(r.DONTCARE), f(r.BLOCKED),
                     f(r.HEALTHY), str(r.transient), str(r.longest), f(r.mean_s), f(r.max_s), f(r.queued_min),
                     f(r.queued_max), str(r.FP)])
    align = ["l", "l", "l", "l"] + ["r"] * 11
    title = f"Stalled modules ({variant}), most STALLED snapshots first"
    if not rows:
        return f"{title}: none"
    more = f"\n\n... and {len(st) - len(shown)} more (stalled.csv)" if len(shown) < len(st) else ""
    note = ("\n\ntrans: single-snapshot stalls; longest: most consecutive STALLED snapshots; mean/max s: "
            "duration of the longer stalls; FP: STALLED where the ground truth is negative.")
    return f"{title}\n\n" + _md_table(header, rows, align) + more + note


def write_stalled(data, scored: pd.DataFrame, variant: str, out: Path) -> tuple[pd.DataFrame, list[Path]]:
    """stalled.csv and stalled.md of one run (thesis Table 5.2's list, every module); returns (the list,
    the files). The one writer of both, for the end-of-run summary and `nestlab plots`."""
    from analysis.render.tables import stalled_list

    st = stalled_list(data, scored, variant)
    files = [out / "stalled.md", out / "stalled.csv"]
    st.to_csv(fresh(files[1]), index=False, na_rep="")
    fresh(files[0]).write_text(stalled_markdown(st, variant, limit=None) + "\n")
    return st, files


# ----------------------------------------------------------------------------- writing


def _with_notes(md: str, ev: Evaluation) -> tuple[str, str]:
    """(what is printed, what is written): the skipped runs in both, the runs' warnings (printed on
    stderr as they come) in the file too."""
    skipped, warned = skipped_note(ev), warnings_note(ev)
    shown = md + (f"\n\n{skipped}" if skipped else "")
    return shown, shown + (f"\n\n{warned}" if warned else "")


def health_markdown(ev: Evaluation) -> str:
    """The network health of each run (analysis.health), with its warnings."""
    if not ev.health:
        return ""
    rows, warns = [], []
    for path, h in ev.health.items():
        name = f"{path.parent.name}/{path.name}"
        rows.append(health_row(name, h))
        warns += [f"- {name}: {w}" for w in h.warnings]
    align = ["l"] + ["r"] * (len(HEALTH_HEADER) - 1)
    parts = ["### Network health", "", _md_table(HEALTH_HEADER, rows, align), "", HEALTH_NOTE]
    if warns:
        parts += ["", *warns]
    return "\n".join(parts)


def study_tables(ev: Evaluation) -> dict[str, pd.DataFrame]:
    """Each variant's accuracy table in the rows of the evaluation's study layout (a service run: no
    wget or iperf rows): what accuracy.csv holds."""
    keep = pd.MultiIndex.from_product([SECTIONS, ev.study.layout.rows])
    return {v: ev.table(v).reindex(keep) for v in ev.variants}


def write_accuracy(ev: Evaluation, out: Path, intervals: bool = False) -> tuple[str, list[Path]]:
    """accuracy.md/.csv/.tex and per_run.csv for every variant of an evaluation (with 2 or more runs,
    each variant's "Across runs" table in accuracy.md), the overlap footnote and the runs' network
    health (accuracy.md; health.csv); returns (markdown, files)."""
    output_dir(out)
    shown = ev.study.layout.rows
    tables = study_tables(ev)
    across = {v: ev.across(v) for v in ev.variants}
    md_parts, tex_parts = [], []
    note = overlap_note(ev)
    write_table = TABLES[ev.study.table]
    for v, t in tables.items():
        md, tx = write_table(ev, v, t, across[v], note, intervals, shown)
        md_parts += md
        tex_parts.append(tx)
    health = health_markdown(ev)
    md, written = _with_notes("\n\n".join(md_parts + ([health] if health else [])), ev)
    files = [out / "accuracy.md", out / "accuracy.csv", out / "accuracy.tex", out / "per_run.csv"]
    fresh(files[0]).write_text(written + "\n")
    accuracy_csv_frame(tables, ev.policy, across).to_csv(fresh(files[1]), index=False, na_rep="")
    fresh(files[2]).write_text("\n".join(tex_parts))
    per_run_csv_frame(ev).to_csv(fresh(files[3]), index=False, na_rep="")
    if ev.health:
        rows = [{"run": str(p), **h.as_dict()} for p, h in ev.health.items()]
        for r in rows:
            r["warnings"] = " | ".join(r["warnings"])
        files.append(out / "health.csv")
        pd.DataFrame.from_records(rows).to_csv(fresh(files[-1]), index=False, na_rep="")
    return md, files


def _per_module(ev, v, t, x, note, intervals, shown) -> tuple[list[str], str]:
    """Thesis Table 3.3's layout: per direction and module type (and across runs with 2 or more)."""
    title = f"Accuracy of {v}, ground truth {ev.policy}, {runs_title(ev)}"
    md = [accuracy_markdown(t, title, intervals, shown) + (f"\n{note}" if note else "")]
    if len(ev.runs) >= 2:
        md.append(across_markdown(t, x, f"Across runs: {v}, ground truth {ev.policy}, {runs_title(ev)}", shown))
    return md, accuracy_latex(t, tex(f"Diagnosis accuracy of {v} ({runs_title(ev)}, ground truth "
                                     f"{ev.policy}). Rates in %; blank = undefined. ") + r"$\pm$"
                              + tex(f": larger half-width of the row's TPR and FPR intervals ({INTERVAL}), "
                                    "in percentage points."), shown)


def _per_graph(ev, v, t, x, note, intervals, shown) -> tuple[list[str], str]:
    """Thesis Table 4.3's layout: a row per processing graph (analysis.render.streams_tables)."""
    title = f"Accuracy of {v}, ground truth {ev.policy}, {runs_title(ev)}"
    return ([streams_accuracy_markdown(ev, v, title) + (f"\n{note}" if note else "")],
            streams_accuracy_latex(ev, v, f"Diagnosis accuracy of {v} ({runs_title(ev)}, ground "
                                          f"truth {ev.policy}). Rates in %; blank = undefined."))


# The accuracy table's writers by the layout a study kind names (analysis.studies.base.Study.table).
TABLES = {"thesis-3.3": _per_module, "thesis-4.3": _per_graph}


def breakdown_markdown(b: pd.DataFrame, shown=None) -> str:
    """analysis.score.breakdown's rows: per group of runs and row, each variant's pooled TPR and PPV
    with their 95% interval across runs."""
    def cell(r, rate):
        v = r[rate]
        if v != v:
            return ""
        lo, hi = r[f"{rate}_xlo"], r[f"{rate}_xhi"]
        return f"{100 * v:.1f}" + (f" [{100 * lo:.1f}, {100 * hi:.1f}]" if lo == lo else "")
    header = ["Runs", "Row", "Variant", "TP", "FP", "FN", "TPR", "PPV"]
    rows, last = [], None
    for r in b.to_dict("records"):
        first = (r["group"], r["row"]) != last
        rows.append([f"{r['group']} ({r['runs']})" if first else "", r["row"] if first else "", r["variant"],
                     str(r["TP"]), str(r["FP"]), str(r["FN"]), cell(r, "TPR"), cell(r, "PPV")])
        last = (r["group"], r["row"])
    return "\n".join([_md_table(header, rows, ["l", "l", "l"] + ["r"] * 5), "",
                      (shown[0][2].capitalize() if shown and shown[0][0] != "Total" else "Total section") + "; TPR, PPV in %: pooled [95% interval across runs] (none with fewer than 2 "
                      "runs). Runs grouped by the kinds of fault they hold when there is more than one set: "
                      "compare-breakdown.csv."])


def write_compare(ev: Evaluation, out: Path) -> tuple[str, list[Path]]:
    output_dir(out)
    c = ev.compare()
    study = ev.study
    keys = study.compare_rows or tuple((s, r, r) for s in SECTIONS for r in study.layout.rows)
    parts = [f"### Variant comparison, ground truth {ev.policy}, {runs_title(ev)}\n\n" + compare_markdown(c, ev.variants, keys)]
    b = None
    if len(ev.runs) >= 2:   # each variant's interval across runs beside the pooled figure (issue 35)
        from analysis.score.breakdown import breakdown

        b = breakdown(ev.counts, ev.variants, [str(p) for p in ev.runs], shown=study.breakdown_rows)
        parts.append("### Across runs and by the runs' fault kinds\n\n" + breakdown_markdown(b, study.breakdown_rows))
    md, written = _with_notes("\n\n".join(parts), ev)
    files = [out / "compare.md", out / "compare.csv"]
    fresh(files[0]).write_text(written + "\n")
    compare_csv_frame(c, ev.policy).to_csv(fresh(files[1]), index=False, na_rep="")
    if b is not None:
        files.append(out / "compare-breakdown.csv")
        b.assign(policy=ev.policy).to_csv(fresh(files[-1]), index=False, na_rep="")
    return md, files

