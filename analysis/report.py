"""Rendering the scores: Markdown (terminal), CSV and LaTeX; the stalled-modules list; and
`summarize_run`, the end of `run-experiment`.

Rates print as percentages with one decimal; an undefined rate (zero denominator) prints blank,
never 0 or NaN. The `±` column is the largest half-width, in percentage points, of the row's
Wilson score 95% intervals (analysis.score); `intervals=True` prints each interval instead.
With two or more runs, each variant's table is followed by an "Across runs" table: TPR, FPR and PPV
as `pooled [low, high] (runs)`, the interval a bootstrap over runs (analysis.score.ACROSS_INTERVAL);
accuracy.csv has `<rate>_xlo`, `<rate>_xhi`, `<rate>_runs` for every rate (blank with one run), and
per_run.csv the counts and rates of each run.

    summarize_run(run_dir, variants=("flowdiagnoser:theta=2",), policy=None) -> Path
        Prints the run's accuracy table (one per variant) and network health, and writes into
        <run_dir>/analysis/: accuracy.md, accuracy.csv, accuracy.tex, per_run.csv, health.csv, health.json,
        stalled.md, stalled.csv, and the figures of
        analysis.plots (PNG). Prints where they went and returns that directory. Raises
        harness.errors.UserError when the run cannot be analysed; a figure that fails is reported
        as a warning line and does not stop the rest.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.health import HEADER as HEALTH_HEADER
from analysis.health import HEALTH_NOTE, health_row
from analysis.score import ACROSS_INTERVAL, COUNTS, INTERVAL, RATES, ROWS, SECTIONS, Evaluation, evaluate
from analysis.variants import DEFAULT_VARIANT

DEFAULT_VARIANTS = (DEFAULT_VARIANT,)
TABLE_NOTE = (f"Rates in %; blank = undefined (no cases). ±: larger half-width of the row's TPR and FPR "
              f"intervals ({INTERVAL}; snapshots treated as independent), in percentage points "
              "(FNR, TNR alike; PPV, NPV intervals with --intervals and in accuracy.csv).")
ACROSS_RATES = ("TPR", "FPR", "PPV")
ACROSS_NOTE = ("Rates in %: pooled rate [95% interval across runs] (runs where the rate is defined; no interval "
               f"with fewer than 2); blank = undefined. Interval: {ACROSS_INTERVAL}, whole runs resampled with "
               "replacement and the pooled rate recomputed (runs are the independent unit). The ± column above "
               f"is the per-snapshot {INTERVAL}, which treats snapshots as independent and is usually "
               "narrower. Every run's rates: per_run.csv.")


# ----------------------------------------------------------------------------- formatting


def _pct(v: float, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return f"{100.0 * v:.{digits}f}"


PM_RATES = ("TPR", "FPR")  # FNR, TNR have the same intervals; PPV, NPV with --intervals and in the CSV


def half_width(row: pd.Series, which: Sequence[str] = PM_RATES) -> float:
    """Largest half-width (fraction) of the defined TPR/FPR intervals of one table row; NaN if none."""
    widths = []
    for r in which:
        v, lo, hi = row[r], row[f"{r}_lo"], row[f"{r}_hi"]
        if not math.isnan(v):
            widths.append(max(v - lo, hi - v))
    return max(widths) if widths else math.nan


def _cells(t: pd.DataFrame, intervals: bool) -> list[list[str]]:
    """Table 3.3 rows as strings: section, row, counts, rates, ±."""
    out = []
    for section in SECTIONS:
        first = True
        for row in ROWS:
            r = t.loc[(section, row)]
            rates = []
            for k in RATES:
                cell = _pct(r[k])
                if intervals and cell:
                    cell += f" [{_pct(r[f'{k}_lo'])}, {_pct(r[f'{k}_hi'])}]"
                rates.append(cell)
            out.append([section if first else "", row, *(str(int(r[c])) for c in COUNTS), *rates,
                        _pct(half_width(r))])
            first = False
    return out


def _md_table(header: list[str], rows: list[list[str]], align: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells):
        return "| " + " | ".join(c.rjust(w) if a == "r" else c.ljust(w)
                                 for c, w, a in zip(cells, widths, align, strict=True)) + " |"

    sep = "|" + "|".join(("-" * (w + 1) + ":") if a == "r" else ("-" * (w + 2))
                         for w, a in zip(widths, align, strict=True)) + "|"
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def accuracy_markdown(t: pd.DataFrame, title: str = "", intervals: bool = False) -> str:
    header = ["", "Module", *COUNTS, *RATES, "±"]
    align = ["l", "l"] + ["r"] * (len(COUNTS) + len(RATES) + 1)
    if intervals:
        header, align = header[:-1], align[:-1]
    rows = _cells(t, intervals)
    if intervals:
        rows = [r[:-1] for r in rows]
    parts = [f"### {title}", ""] if title else []
    parts += [_md_table(header, rows, align), "", TABLE_NOTE if not intervals else TABLE_NOTE.split(" ±")[0]
              + f" Intervals: {INTERVAL}."]
    return "\n".join(parts)


def across_markdown(t: pd.DataFrame, x: pd.DataFrame, title: str = "") -> str:
    """The "Across runs" table of one variant: per section and row, TPR, FPR, PPV as
    `pooled [low, high] (runs)` from accuracy_table `t` and across_runs `x`."""
    rows = []
    for section in SECTIONS:
        for k, row in enumerate(ROWS):
            r, xr = t.loc[(section, row)], x.loc[(section, row)]
            cells = [section if k == 0 else "", row]
            for rate in ACROSS_RATES:
                cell = _pct(r[rate])
                if cell:
                    lo, hi = _pct(xr[f"{rate}_xlo"]), _pct(xr[f"{rate}_xhi"])
                    cell += (f" [{lo}, {hi}]" if lo and hi else "") + f" ({int(xr[f'{rate}_runs'])})"
                cells.append(cell)
            rows.append(cells)
    header = ["", "Module", *(f"{r} [95%] (runs)" for r in ACROSS_RATES)]
    parts = [f"### {title}", ""] if title else []
    parts += [_md_table(header, rows, ["l", "l"] + ["r"] * len(ACROSS_RATES)), "", ACROSS_NOTE]
    return "\n".join(parts)


ACROSS_COLS = tuple(c for r in RATES for c in (f"{r}_xlo", f"{r}_xhi", f"{r}_runs"))


def accuracy_csv_frame(tables: dict[str, pd.DataFrame], policy: str,
                       across: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """One frame for every variant: variant, policy, section, row, counts, rates and intervals in %,
    pm, then the across-run intervals in % and the runs defining each rate (ACROSS_COLS; blank when
    undefined or when `across`, {variant: across_runs frame}, does not have the variant)."""
    frames = []
    for variant, t in tables.items():
        f = t.reset_index()
        f.insert(0, "policy", policy)
        f.insert(0, "variant", variant)
        for r in RATES:
            for col in (r, f"{r}_lo", f"{r}_hi"):
                f[col] = (100.0 * f[col]).round(4)
        f["pm"] = [round(100.0 * half_width(row), 4) for _, row in t.iterrows()]
        x = (across or {}).get(variant)
        for r in RATES:
            for col in (f"{r}_xlo", f"{r}_xhi"):
                f[col] = np.nan if x is None else (100.0 * x[col].reindex(t.index).to_numpy()).round(4)
            f[f"{r}_runs"] = (pd.array([pd.NA] * len(f), dtype="Int64") if x is None
                              else x[f"{r}_runs"].reindex(t.index).to_numpy(np.int64))
        frames.append(f)
    out = pd.concat(frames, ignore_index=True)
    cols = ["variant", "policy", "section", "row", *COUNTS,
            *(c for r in RATES for c in (r, f"{r}_lo", f"{r}_hi")), "pm", *ACROSS_COLS]
    return out[cols]


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


_TEX_ESCAPE = {"&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$", "{": r"\{", "}": r"\}",
               "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}


def tex(s: str) -> str:
    return "".join(_TEX_ESCAPE.get(ch, ch) for ch in s)


def accuracy_latex(t: pd.DataFrame, caption_tex: str = "") -> str:
    """Thesis Table 3.3 as a LaTeX table (plain tabular, no packages needed); the caption is LaTeX."""
    lines = [r"\begin{table}[htbp]", r"\centering", r"\small",
             r"\begin{tabular}{ll" + "r" * (len(COUNTS) + len(RATES) + 1) + "}", r"\hline",
             r" & & \multicolumn{3}{c}{Correct answers} & \multicolumn{4}{c}{Diagnosis results} & "
             r"\multicolumn{3}{c}{Positive accuracy \%} & \multicolumn{3}{c}{Negative accuracy \%} & \\",
             " & Module & " + " & ".join(COUNTS) + " & " + " & ".join(RATES) + r" & $\pm$ \\", r"\hline"]
    for k, cells in enumerate(_cells(t, intervals=False)):
        if k and k % len(ROWS) == 0:
            lines.append(r"\hline")
        name = cells[1]
        name = rf"\textit{{{tex(name)}}}" if name.startswith("s:") else tex(name)
        lines.append(" & ".join([tex(cells[0]), name, *cells[2:]]) + r" \\")
    lines += [r"\hline", r"\end{tabular}"]
    if caption_tex:
        lines.append(rf"\caption{{{caption_tex}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def compare_markdown(c: pd.DataFrame, variants: list[str]) -> str:
    """Paper Table 8 layout: per row and direction, each variant's TP, FP, TPR, PPV and, against
    the first variant, the change in TP and FP in % (bold = better, italic = worse, · = no change)."""
    names = [f"V{i + 1}" for i in range(len(variants))]
    header = ["", "Module"]
    for i, n in enumerate(names):
        header += [f"{n} TP", f"{n} FP", f"{n} TPR", f"{n} PPV"]
        if i:
            header += [f"{n} ΔTP%", f"{n} ΔFP%"]
    rows = []
    for section in SECTIONS:
        for k, row in enumerate(ROWS):
            r = c.loc[(section, row)]
            cells = [section if k == 0 else "", row]
            for i, v in enumerate(variants):
                cells += [str(int(r[(v, "TP")])), str(int(r[(v, "FP")])), _pct(r[(v, "TPR")]), _pct(r[(v, "PPV")])]
                if i:
                    cells += [_delta(r[(v, "dTP%")], good_if_up=True), _delta(r[(v, "dFP%")], good_if_up=False)]
            rows.append(cells)
    legend = [f"{n} = {v}" + (" (baseline)" if i == 0 else "") for i, (n, v) in enumerate(zip(names, variants,
                                                                                             strict=True))]
    align = ["l", "l"] + ["r"] * (len(header) - 2)
    note = ("TPR, PPV in %, blank = undefined. ΔTP%, ΔFP%: change against V1 in %; **bold** = better "
            "(more TP, fewer FP), *italic* = worse, · = no change, blank = undefined (V1 has none).")
    return "\n".join(["Variants: " + "; ".join(legend), "", _md_table(header, rows, align), "", note])


def _delta(v: float, good_if_up: bool) -> str:
    if v is None or math.isnan(v):
        return ""
    if v == 0:
        return "·"
    s = f"{v:+.1f}"
    good = (v > 0) == good_if_up
    return f"**{s}**" if good else f"*{s}*"


def compare_csv_frame(c: pd.DataFrame, policy: str) -> pd.DataFrame:
    f = c.stack(level="variant", future_stack=True).reset_index()
    f.insert(0, "policy", policy)
    for col in ("TPR", "PPV"):
        f[col] = (100.0 * f[col]).round(4)
    for col in ("dTP%", "dFP%"):
        f[col] = f[col].round(4)
    return f[["policy", "variant", "section", "row", "TP", "FP", "TPR", "PPV", "dTP%", "dFP%"]]


# ----------------------------------------------------------------------------- stalled modules


def _runs_of(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) of each run of True."""
    if not mask.any():
        return []
    d = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    starts = np.flatnonzero(d == 1)
    ends = np.flatnonzero(d == -1)
    return list(zip(starts.tolist(), (ends - starts).tolist(), strict=True))


def stalled_list(data, scored: pd.DataFrame, variant: str) -> pd.DataFrame:
    """Thesis Table 5.2 for a run: every module/direction ever diagnosed positive, most first.

    Columns: module, kind, name, dir, positive (STALLED count), DONTCARE, BLOCKED, HEALTHY (label
    variants), transient (single-snapshot stalls), longest (most consecutive positive snapshots),
    mean_s / max_s (duration of non-transient stalls, s), queued_min / queued_max (where the module
    has a queue), FP (positives the ground truth calls negative). Excluded rows are not counted.
    """
    s = scored[(scored["variant"] == variant) & ~scored["exclude"]]
    cols = ["module", "kind", "name", "dir", "positive", "DONTCARE", "BLOCKED", "HEALTHY", "transient",
            "longest", "mean_s", "max_s", "queued_min", "queued_max", "FP"]
    ever = s[s["positive"]][["module", "dir"]].drop_duplicates()
    if ever.empty:
        return pd.DataFrame(columns=cols)
    keys = pd.MultiIndex.from_arrays([s["module"], s["dir"].astype(str)])
    s = s[keys.isin(pd.MultiIndex.from_arrays([ever["module"], ever["dir"].astype(str)]))]
    s = s.sort_values(["module", "dir", "seq"], kind="stable")
    label = s["label"].astype(str).to_numpy() if "label" in s else np.full(len(s), "")
    cf = bool(s["label"].isna().all()) if "label" in s else True
    q = data.counters[data.counters["has_queue"]]
    qstats = q.groupby(["module", q["dir"].astype(str)], observed=True)["queued"].agg(["min", "max"])
    mono = data.snapshots["mono"]
    start = data.snapshots["start"].fillna(data.snapshots["mono"])
    mod = s["module"].to_numpy()
    dirs = s["dir"].astype(str).to_numpy()
    pos = s["positive"].to_numpy(bool)
    act = s["actual"].to_numpy(bool)
    seq = s["seq"].to_numpy()
    cut = np.flatnonzero((mod[1:] != mod[:-1]) | (dirs[1:] != dirs[:-1])) + 1
    recs = []
    for a, b in zip(np.r_[0, cut], np.r_[cut, len(s)], strict=True):
        p, sq = pos[a:b], seq[a:b]
        # runs of consecutive positive snapshots (adjacent seqs)
        brk = np.r_[True, ~p[:-1] | (np.diff(sq) != 1)] & p
        run_id = np.cumsum(brk)[p]
        first = sq[p][np.r_[True, run_id[1:] != run_id[:-1]]]
        last = sq[p][np.r_[run_id[1:] != run_id[:-1], True]]
        lengths = np.bincount(run_id)[1:]
        long = lengths > 1
        spans = mono.reindex(last[long]).to_numpy() - start.reindex(first[long]).to_numpy()
        m, d = int(mod[a]), str(dirs[a])
        lab = label[a:b]
        qs = qstats.loc[(m, d)] if (m, d) in qstats.index else None
        recs.append({
            "module": m, "kind": data.modules["kind"].get(m, ""), "name": data.modules["name"].get(m, ""),
            "dir": d, "positive": int(p.sum()),
            "DONTCARE": None if cf else int((lab == "DONTCARE").sum()),
            "BLOCKED": None if cf else int((lab == "BLOCKED").sum()),
            "HEALTHY": None if cf else int((lab == "HEALTHY").sum()),
            "transient": int((lengths == 1).sum()), "longest": int(lengths.max()),
            "mean_s": round(float(np.mean(spans)), 2) if spans.size else None,
            "max_s": round(float(np.max(spans)), 2) if spans.size else None,
            "queued_min": None if qs is None else int(qs["min"]), "queued_max": None if qs is None else int(qs["max"]),
            "FP": int((p & ~act[a:b]).sum()),
        })
    out = pd.DataFrame.from_records(recs, columns=cols)
    for c in ("DONTCARE", "BLOCKED", "HEALTHY", "queued_min", "queued_max"):
        out[c] = out[c].astype("Int64")
    return out.sort_values(["positive", "module"], ascending=[False, True], ignore_index=True)


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


# ----------------------------------------------------------------------------- writing


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")


def runs_title(ev: Evaluation) -> str:
    n = len(ev.runs)
    if n == 0:
        return "no runs"
    if n == 1:
        p = ev.runs[0]
        return f"run {p.parent.name}/{p.name}"
    exps = sorted({p.parent.name for p in ev.runs})
    return f"{n} runs ({', '.join(exps)})"


def overlap_note(ev: Evaluation) -> str:
    """The footnote on rows the labeller left out because faults overlapped (policy overlap=exclude)."""
    if not ev.overlap_rows:
        return ""
    return (f"Left out: {ev.overlap_rows} module-snapshots where a fault's target was also another fault's "
            "collateral (overlapping faults; ground truth ambiguous; policy overlap=exclude).")


def skipped_note(ev: Evaluation) -> str:
    """The runs named but not analysed, and why (the tables do not count them)."""
    if not ev.skipped:
        return ""
    return "\n".join([f"Not analysed ({len(ev.skipped)} of {len(ev.skipped) + len(ev.runs)} runs; not counted "
                      "above):"] + [f"- {p}: {why}" for p, why in ev.skipped])


def warnings_note(ev: Evaluation) -> str:
    """What was wrong with the runs that were analysed (their warnings), for the files written."""
    lines = [f"- {p.parent.name}/{p.name}: {w}" for p, ws in ev.run_warnings.items() for w in ws]
    return "\n".join(["Warnings about the runs (what was wrong, what was left out):", *lines]) if lines else ""


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


def write_accuracy(ev: Evaluation, out: Path, intervals: bool = False) -> tuple[str, list[Path]]:
    """accuracy.md/.csv/.tex and per_run.csv for every variant of an evaluation (with 2 or more runs,
    each variant's "Across runs" table in accuracy.md), the overlap footnote and the runs' network
    health (accuracy.md; health.csv); returns (markdown, files)."""
    out.mkdir(parents=True, exist_ok=True)
    tables = {v: ev.table(v) for v in ev.variants}
    across = {v: ev.across(v) for v in ev.variants}
    md_parts, tex_parts = [], []
    note = overlap_note(ev)
    for v, t in tables.items():
        title = f"Accuracy of {v}, ground truth {ev.policy}, {runs_title(ev)}"
        md_parts.append(accuracy_markdown(t, title, intervals) + (f"\n{note}" if note else ""))
        if len(ev.runs) >= 2:
            md_parts.append(across_markdown(t, across[v], f"Across runs: {v}, ground truth {ev.policy}, "
                                                          f"{runs_title(ev)}"))
        tex_parts.append(accuracy_latex(t, tex(f"Diagnosis accuracy of {v} ({runs_title(ev)}, ground truth "
                                               f"{ev.policy}). Rates in %; blank = undefined. ") + r"$\pm$"
                                        + tex(f": larger half-width of the row's TPR and FPR intervals ({INTERVAL}), "
                                              "in percentage points.")))
    health = health_markdown(ev)
    md, written = _with_notes("\n\n".join(md_parts + ([health] if health else [])), ev)
    files = [out / "accuracy.md", out / "accuracy.csv", out / "accuracy.tex", out / "per_run.csv"]
    files[0].write_text(written + "\n")
    accuracy_csv_frame(tables, ev.policy, across).to_csv(files[1], index=False, na_rep="")
    files[2].write_text("\n".join(tex_parts))
    per_run_csv_frame(ev).to_csv(files[3], index=False, na_rep="")
    if ev.health:
        rows = [{"run": str(p), **h.as_dict()} for p, h in ev.health.items()]
        for r in rows:
            r["warnings"] = " | ".join(r["warnings"])
        files.append(out / "health.csv")
        pd.DataFrame.from_records(rows).to_csv(files[-1], index=False, na_rep="")
    return md, files


def write_compare(ev: Evaluation, out: Path) -> tuple[str, list[Path]]:
    out.mkdir(parents=True, exist_ok=True)
    c = ev.compare()
    md, written = _with_notes(f"### Variant comparison, ground truth {ev.policy}, {runs_title(ev)}\n\n"
                              + compare_markdown(c, ev.variants), ev)
    files = [out / "compare.md", out / "compare.csv"]
    files[0].write_text(written + "\n")
    compare_csv_frame(c, ev.policy).to_csv(files[1], index=False, na_rep="")
    return md, files


def _print(text: str, file=None) -> None:
    print(text, file=file or sys.stdout, flush=True)


def summarize_run(run_dir: str | Path, variants: Sequence[str] = DEFAULT_VARIANTS, policy=None,
                  figures: bool = True, out: str | Path | None = None) -> Path:
    """See the module docstring."""
    run_dir = Path(run_dir)
    ev = evaluate([run_dir], variants, policy, keep=True)
    for w in ev.warnings:
        _print(f"warning: {w}", sys.stderr)
    out = Path(out) if out is not None else run_dir / "analysis"
    md, _ = write_accuracy(ev, out)
    _print("")
    _print(md)
    data = ev.data[ev.runs[0]]
    scored = ev.scored[ev.runs[0]]
    variant = ev.variants[0]
    health = ev.health.get(ev.runs[0])
    if health is not None:   # the runner copies it into the manifest
        (out / "health.json").write_text(json.dumps(health.as_dict(), indent=2) + "\n")
        for w in health.warnings:
            _print(f"warning: {w}", sys.stderr)
    st = stalled_list(data, scored, variant)
    st.to_csv(out / "stalled.csv", index=False, na_rep="")
    (out / "stalled.md").write_text(stalled_markdown(st, variant, limit=None) + "\n")
    if figures:
        try:
            from analysis.plots import plot_run

            if not plot_run(data, scored, variant, out):
                _print("note: nothing was diagnosed, so no figures", sys.stderr)
        except Exception as e:  # a figure must not hide the table a run ended with
            _print(f"warning: figures not drawn: {type(e).__name__}: {e}", sys.stderr)
    _print(f"\nanalysis: tables and figures written to {out}")
    return out
