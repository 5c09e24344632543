"""Our streams accuracy against a streams seed table (thesis Table 4.3, analysis/seeds/thesis-4.3.yaml):
a row per processing graph plus Totals, ours beside the thesis's (docs/streams.md, docs/seeds-tables.md).

`nestlab accuracy streams-4.3 --against thesis-4.3` ends here. Our rows: the counts of each variant
over the stream connections (modules of kind `sconn`, direction `out`, the only one they have) of
the runs whose experiment the seed row names (its `experiment`: complextree, ..., the names of
experiments/streams-4.3.yaml; a run's experiment is its manifest's, else its parent directory's
name); Totals is the sum of the graph rows, as in the thesis. Runs of other experiments are counted
nowhere and named in a note.

Each rate has our interval: across runs (analysis.score.accuracy.bootstrap_pooled, whole runs resampled) when
at least two runs of the row define it, else Wilson's per snapshot; `beyond` says their printed
value, give or take its print precision, lies outside it.

Files: against-<name>.md (a table per variant, each graph on two lines: ours, then the thesis's),
against-<name>.csv (cell by cell: variant, row, experiment, runs, metric, unit, ours, theirs, diff,
lo, hi, interval, beyond) and against-<name>.tex.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.render.against import ACROSS, WILSON, SeedTable
from analysis.render.tables import md_table, slug, tex
from analysis.score.accuracy import bootstrap_pooled, rates
from analysis.score.table_layout import COUNTS, RATE_DEF, RATES
from rundir.layout import fresh, output_dir
from rundir.manifest import read_manifest_quietly

TOTALS = "Totals"
_IDX = {"TP": 0, "TN": 1, "FP": 2, "FN": 3}


def run_experiment(run: str | Path) -> str:
    """A run's experiment: its manifest's, else the name of the directory holding it."""
    m = read_manifest_quietly(Path(run))
    return (m.experiment if m is not None and m.experiment else None) or Path(run).parent.name


def row_experiments(seed: SeedTable) -> dict[str, str | None]:
    """Printed row -> the experiment whose runs it stands for (None: Totals)."""
    return {str(r): (spec.get("experiment") if isinstance(spec, dict) else None) for r, spec in seed.raw["rows"].items()}


def _run_sums(counts: pd.DataFrame, variant: str) -> pd.DataFrame:
    """Per run: TP, TN, FP, FN over its stream connections (direction out) under `variant`."""
    c = counts[(counts["variant"] == variant) & (counts["kind"] == "sconn") & (counts["dir"] == "out")]
    return c.groupby(c["run"].astype(str))[["TP", "TN", "FP", "FN"]].sum()


def streams_table(counts: pd.DataFrame, variant: str, seed: SeedTable,
                  experiments: dict[str, str] | None = None) -> pd.DataFrame:
    """Index: the seed's rows; columns runs, COUNTS, RATES (fractions), <rate>_lo/_hi (%) and
    <rate>_interval. `experiments`: run -> experiment (default: read from the runs)."""
    return graph_table(counts, variant, row_experiments(seed), experiments)


def graph_table(counts: pd.DataFrame, variant: str, mapping: dict[str, str | None],
                experiments: dict[str, str] | None = None) -> pd.DataFrame:
    """streams_table with its rows given: printed row -> the experiment whose runs it counts (None:
    Totals, the sum of the others)."""
    per_run = _run_sums(counts, variant)
    exp = {r: (experiments or {}).get(r) or run_experiment(r) for r in per_run.index}
    records = []
    member: dict[str, list[str]] = {}
    for row, e in mapping.items():
        member[row] = [r for r in per_run.index if e is not None and exp[r] == e]
    member[TOTALS] = [r for row, rs in member.items() if row != TOTALS for r in rs]
    for row in mapping:
        runs = member.get(row, [])
        sums = per_run.loc[runs].to_numpy(np.int64) if runs else np.zeros((0, 4), dtype=np.int64)
        tp, tn, fp, fn = (int(v) for v in sums.sum(axis=0)) if len(sums) else (0, 0, 0, 0)
        rec = {"row": row, "experiment": mapping[row], "runs": len(runs), "Total": tp + tn + fp + fn,
               "AP": tp + fn, "AN": tn + fp, "TP": tp, "TN": tn, "FP": fp, "FN": fn}
        for r, v in rates(tp, tn, fp, fn).items():
            rec[r] = math.nan if v is None else v[0]
            lo, hi, how = (math.nan, math.nan, "") if v is None else (100 * v[1], 100 * v[2], WILSON)
            num, den = RATE_DEF[r]
            k = sums[:, _IDX[num]] if len(sums) else np.zeros(0)
            n = sum(sums[:, _IDX[t]] for t in den) if len(sums) else np.zeros(0)
            keep = n > 0
            if keep.sum() >= 2:
                xlo, xhi = bootstrap_pooled(k[keep][None, :], n[keep][None, :])
                if not (math.isnan(xlo[0]) or math.isnan(xhi[0])):
                    lo, hi, how = 100 * xlo[0], 100 * xhi[0], ACROSS
            rec[f"{r}_lo"], rec[f"{r}_hi"], rec[f"{r}_interval"] = lo, hi, how
        records.append(rec)
    return pd.DataFrame.from_records(records).set_index("row")


def unmapped_runs(counts: pd.DataFrame, seed: SeedTable, experiments: dict[str, str] | None = None) -> list[str]:
    """Runs (with stream connections) whose experiment no seed row names."""
    names = {e for e in row_experiments(seed).values() if e}
    runs = sorted(set(counts.loc[counts["kind"] == "sconn", "run"].astype(str)))
    return [r for r in runs if ((experiments or {}).get(r) or run_experiment(r)) not in names]


def against_streams(tables: dict[str, pd.DataFrame], seed: SeedTable) -> pd.DataFrame:
    """Cell by cell, every variant's streams_table against the seed's printed values."""
    recs = []
    for variant, t in tables.items():
        for row, theirs_row in seed.cells.iterrows():
            o = t.loc[row]
            for metric in seed.cells.columns:
                theirs = float(theirs_row[metric])
                rate = metric in RATES
                value = 100.0 * float(o[metric]) if rate else float(o[metric])
                lo, hi, how = (o[f"{metric}_lo"], o[f"{metric}_hi"], o[f"{metric}_interval"]) if rate else (
                    math.nan, math.nan, "")
                beyond = None
                if how and not (math.isnan(theirs) or math.isnan(value)):
                    beyond = bool(theirs + seed.precision < lo or theirs - seed.precision > hi)
                recs.append({"variant": variant, "row": row, "experiment": o["experiment"], "runs": int(o["runs"]),
                             "metric": metric, "unit": "%" if rate else "count", "ours": value, "theirs": theirs,
                             "diff": value - theirs, "lo": lo, "hi": hi, "interval": how, "beyond": beyond})
    return pd.DataFrame.from_records(recs, columns=["variant", "row", "experiment", "runs", "metric", "unit", "ours",
                                                    "theirs", "diff", "lo", "hi", "interval", "beyond"])


def _cell(v: float, metric: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(int(round(v))) if metric in COUNTS else f"{v:.1f}"


def graph_rows(frame: pd.DataFrame, seed: SeedTable, variant: str) -> list[list[str]]:
    """Per graph two rows, ours then the thesis's: [graph, who, *cells]; `*` marks a rate beyond our interval."""
    f = frame[frame["variant"] == variant]
    out = []
    for row in seed.cells.index:
        cells = f[f["row"] == row].set_index("metric")
        runs = int(cells["runs"].iloc[0]) if len(cells) else 0
        ours = [_cell(cells.at[m, "ours"], m) if runs else "" for m in seed.cells.columns]
        mark = ["*" if runs and cells.at[m, "beyond"] is True else "" for m in seed.cells.columns]
        out.append([row, f"ours ({runs} run{'s' if runs != 1 else ''})" if runs else "ours (no runs)",
                    *(o + s for o, s in zip(ours, mark, strict=True))])
        out.append(["", "thesis", *(_cell(seed.cells.at[row, m], m) for m in seed.cells.columns)])
    return out


def streams_markdown(frame: pd.DataFrame, seed: SeedTable, variants: list[str], title: str = "",
                     unmapped: list[str] | None = None) -> str:
    parts = [f"### {title or f'Against {seed.name}'}", "",
             f"Theirs: {seed.title} — {seed.source()}. Corresponds to our {seed.variant}. Provenance and notes: "
             f"analysis/seeds/{seed.name}.yaml, docs/seeds-tables.md. Ours: stream connections (direction out) of "
             "the runs of each graph's experiment; Totals = the sum of the graph rows.", ""]
    header = ["Graph", "", *seed.cells.columns]
    for v in variants:
        parts += [f"#### {v}", "", md_table(header, graph_rows(frame, seed, v), ["l", "l"] + ["r"] * len(seed.cells.columns)),
                  ""]
    beyond = frame[(frame["beyond"] == True) & frame["metric"].isin(("TPR", "FPR", "PPV", "NPV"))]  # noqa: E712
    n = frame["interval"].value_counts()
    parts.append(f"Rates in %, one decimal; blank = undefined. *: their printed value (give or take {seed.precision:g}) "
                 f"lies outside our 95% interval (across runs where a row has 2 or more runs defining the rate: "
                 f"{int(n.get(ACROSS, 0))} rates; else Wilson per snapshot: {int(n.get(WILSON, 0))}). Every cell "
                 f"with its interval: against-{slug(seed.name)}.csv.")
    parts += ["", f"Rates beyond our interval ({len(beyond)}; TNR and FNR mirror FPR and TPR):"]
    parts += [f"- {r.variant} {r.row} {r.metric}: ours {r.ours:.1f} [{r.lo:.1f}, {r.hi:.1f}] ({r.interval}), "
              f"theirs {r.theirs:.1f}" for r in beyond.itertuples(index=False)] or ["- none"]
    if unmapped:
        parts += ["", f"Not in this table ({len(unmapped)} runs of experiments no row names): "
                  + ", ".join(unmapped)]
    return "\n".join(parts)


def streams_latex(frame: pd.DataFrame, seed: SeedTable, variants: list[str], caption: str) -> str:
    cols = list(seed.cells.columns)
    lines = [r"\begin{table}[htbp]", r"\centering", r"\small", r"\begin{tabular}{ll" + "r" * len(cols) + "}",
             r"\hline", " & ".join(["Graph", ""] + cols) + r" \\", r"\hline"]
    for v in variants:
        lines += [rf"\multicolumn{{{len(cols) + 2}}}{{l}}{{{tex(v)}}} \\", r"\hline"]
        lines += [" & ".join(tex(c) for c in r) + r" \\" for r in graph_rows(frame, seed, v)]
        lines.append(r"\hline")
    lines += [r"\end{tabular}", rf"\caption{{{tex(caption)}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def streams_vs_seed(ev, seed: SeedTable, variants: list[str],
                    experiments: dict[str, str] | None = None) -> pd.DataFrame:
    """against_streams of an evaluation's counts (analysis.evaluation.Evaluation) for `variants`."""
    return against_streams({v: streams_table(ev.counts, v, seed, experiments) for v in variants}, seed)


def write_streams_against(ev, seed: SeedTable, variants: list[str], out: Path, title: str = "",
                          experiments: dict[str, str] | None = None) -> tuple[str, list[Path]]:
    """against-<name>.md/.csv/.tex of an evaluation's runs (analysis.evaluation.Evaluation) into `out`;
    returns (markdown, files)."""
    frame = streams_vs_seed(ev, seed, variants, experiments)
    md = streams_markdown(frame, seed, variants, title, unmapped_runs(ev.counts, seed, experiments))
    out = output_dir(Path(out))
    stem = f"against-{slug(seed.name)}"
    files = [out / f"{stem}.md", out / f"{stem}.csv", out / f"{stem}.tex"]
    fresh(files[0]).write_text(md + "\n")
    frame.round(4).to_csv(fresh(files[1]), index=False, na_rep="")
    fresh(files[2]).write_text(streams_latex(frame, seed, variants, f"{title or 'Ours against ' + seed.name}. "
                                                                    f"Theirs: {seed.source()}."))
    return md, files
