"""The black-box rivals beside NeST on the same runs (issue 31 items 4 and 5; docs/blackbox.md,
"NeST beside the black-box algorithms"): `nestlab compare` of runs with a `messages` table.

Per run: each black-box algorithm is run on the run's reconciled trace and scored against its
`requests` (analysis.paths.score.score_parts: patterns common and rare, per-node delay error,
culprit top-1/top-3 in the fault windows); each NeST variant's culprit in the same windows comes from
its diagnosis (analysis.paths.nest_culprit). Over runs every figure is pooled as its summed
numerator over its summed denominator (found patterns over true common patterns, hits over fault
windows, the count-weighted delay error over its weight), with the 95% interval across runs of
analysis.score.accuracy (a bootstrap over runs of the pooled figure, ACROSS_INTERVAL; defined with 2
or more runs where the figure is).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.paths.algorithms import algorithm
from analysis.paths.readers import read_run
from analysis.paths.score import culprit_ranking, culprit_scores, score_parts
from analysis.score.accuracy import bootstrap_pooled
from rundir import read

ALGORITHMS = ("nesting", "convolution", "linking")
# figure -> (numerator, denominator) keys of score_parts / culprit_scores
FIGURES = {
    "pattern_recall": ("n_found", "n_true_common"),
    "pattern_precision": ("n_inferred_common_true", "n_inferred_common"),
    "rare_recall": ("n_rare_found", "n_true_rare"),
    "rare_precision": ("n_inferred_rare_true", "n_inferred_rare"),
    "request_accuracy": ("n_requests_right", "n_requests"),
    "mapping_accuracy": ("n_mapped_right", "n_mapped"),
    "call_accuracy": ("n_call_requests_right", "n_requests"),
    "delay_error_pct": ("n_delay_pct", "n_delay_weight"),
    "culprit_top1": ("n_top1", "fault_windows"),
    "culprit_top3": ("n_top3", "fault_windows"),
}
PERCENT = ("delay_error_pct",)   # already in %; the others are fractions
PARTS = sorted({k for pair in FIGURES.values() for k in pair})
TABLE_COLUMNS = ["diagnoser", "family", "runs", *[c for f in FIGURES for c in (f, f"{f}_xlo", f"{f}_xhi")]]


def has_messages(run: str | Path) -> bool:
    """Whether a run directory's run.db has a messages table (a message trace)."""
    try:
        with read.run_db(Path(run)) as conn:
            return "messages" in read.tables(conn)
    except Exception:   # noqa: BLE001 - an unreadable run is the NeST reader's to report
        return False


def run_rows(run: str | Path, algorithms: Sequence[tuple[str, Callable]], variants: Sequence[str],
             warn: Callable[[str], None] | None = None, data=None) -> tuple[list[dict], dict]:
    """One row per diagnoser of one run: diagnoser, family (black-box or NeST), run, and the PARTS
    (numerators and denominators). Also what the report draws: {"trace", "results", "rankings"}.
    data: the run's analysis.load.RunData when already loaded (NeST's side)."""
    trace = read_run(run)
    for w in trace.warnings:
        if warn:
            warn(w)
    rows, results, ranks = [], {}, {}
    for name, infer in algorithms:
        result = infer(trace.messages)
        results[name] = result
        ranking = culprit_ranking(trace, infer)
        ranks[name] = ranking
        if trace.truth is not None:
            parts = score_parts(result, trace, infer, ranking=ranking)
        else:
            parts = culprit_scores(ranking)
        rows.append({"diagnoser": name, "family": "black-box", "run": str(run),
                     **{k: parts.get(k, 0) for k in PARTS}})
    if variants:
        from analysis.load import load_run_data
        from analysis.paths.nest_culprit import rankings

        nest = rankings(load_run_data(run) if data is None else data, trace.faults, list(variants))
        for v in variants:
            parts = culprit_scores(nest[v])
            ranks[v] = nest[v]
            rows.append({"diagnoser": v, "family": "NeST", "run": str(run),
                         **{k: parts.get(k, 0) if k in ("n_top1", "n_top3", "fault_windows") else 0
                            for k in PARTS}})
    return rows, {"trace": trace, "results": results, "rankings": ranks}


def chosen_algorithms(names: Sequence[str], params: dict[str, dict] | None = None) -> list[tuple[str, Callable]]:
    """(name, infer with its parameters) for each algorithm name."""
    out = []
    for name in names:
        infer, _ = algorithm(name)
        out.append((name, partial(infer, **(params or {}).get(name, {}))))
    return out


def pooled(per_run: pd.DataFrame) -> pd.DataFrame:
    """Per diagnoser (in order of appearance): each figure pooled over runs and its interval across
    runs (TABLE_COLUMNS; fractions, delay error in %; NaN where undefined)."""
    out = []
    for name, g in per_run.groupby("diagnoser", sort=False):
        rec = {"diagnoser": name, "family": g["family"].iloc[0], "runs": len(g)}
        for fig, (num, den) in FIGURES.items():
            k, n = g[num].to_numpy(float), g[den].to_numpy(float)
            keep = n > 0
            rec[fig] = k[keep].sum() / n[keep].sum() if keep.any() else np.nan
            lo = hi = np.nan
            if keep.sum() >= 2:
                lo_a, hi_a = bootstrap_pooled(k[keep][None, :], n[keep][None, :])
                lo, hi = float(lo_a[0]), float(hi_a[0])
            rec[f"{fig}_xlo"], rec[f"{fig}_xhi"] = lo, hi
        out.append(rec)
    return pd.DataFrame.from_records(out, columns=TABLE_COLUMNS)


def _cell(r, fig: str) -> str:
    v = r[fig]
    if v != v:
        return "–"
    scale = 1 if fig in PERCENT else 100
    text = f"{v * scale:.1f}" if fig in PERCENT else f"{v * scale:.0f}"
    lo, hi = r[f"{fig}_xlo"], r[f"{fig}_xhi"]
    if lo == lo and hi == hi:
        text += f" [{lo * scale:.1f}, {hi * scale:.1f}]" if fig in PERCENT else f" [{lo * scale:.0f}, {hi * scale:.0f}]"
    return text


def versus_markdown(table: pd.DataFrame, windows: int, runs: int) -> str:
    """The side-by-side table: a row per diagnoser, figures in % with [interval across runs]."""
    heads = ["diagnoser", "common recall", "common precision", "rare recall", "rare precision",
             "request accuracy", "mapping accuracy", "delay error %", "culprit top-1", "culprit top-3"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in table.to_dict("records"):
        label = r["diagnoser"] if r["family"] == "black-box" else f"NeST {r['diagnoser']}"
        lines.append("| " + " | ".join([label, *(_cell(r, f) for f in FIGURES)]) + " |")
    note = (f"{runs} run{'s' if runs != 1 else ''}, {windows} fault window{'s' if windows != 1 else ''} with a "
            "tier culprit. Figures in % pooled over the runs, [95% interval across runs: bootstrap over runs "
            "(BCa)] with 2 or more runs. Patterns and delays: the black-box algorithms' inferred paths against "
            "the requests table (common: at least 1% of requests); request accuracy: the requests whose whole "
            "inferred tree is the true one, mapping accuracy: the caused messages whose inferred cause is "
            "the true one (convolution links no messages: –). Culprit: the tier host first (top-1) or among "
            "the first three (top-3) in each fault window; the black-box algorithms rank nodes by the rise of "
            "their delay per link, NeST's variants hosts by the rise of their STALLED modules (docs/blackbox.md).")
    return "\n".join(lines) + "\n\n" + note


def compare_blackbox(runs: Sequence[str | Path], variants: Sequence[str], names: Sequence[str] = ALGORITHMS,
                     params: dict[str, dict] | None = None,
                     warn: Callable[[str, str], None] | None = None,
                     rankings: dict | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-run rows, pooled table) of the runs with a messages table (the others are left out, and
    so is a run whose trace cannot be read, with a warning). rankings: filled with {run: {"windows":
    the fault windows ranked, algorithm: its culprit ranking}} (the culprit table reuses them)."""
    from rundir.errors import UserError
    from rundir.runs import guarded

    algos = chosen_algorithms(names, params)
    rows: list[dict] = []
    for run in runs:
        if not has_messages(run):
            continue
        try:
            got, drawn = guarded(run, run_rows, run, algos, variants,
                                 (lambda m, run=run: warn(str(run), m)) if warn else None)
        except UserError as e:   # a run whose trace cannot be read is left out, said, as accuracy does
            if warn:
                warn(str(run), f"left out of the black-box comparison: {str(e).removeprefix(f'{run}: ')}")
            continue
        rows += got
        if rankings is not None and drawn["trace"].faults is not None:
            rankings[str(run)] = {"windows": drawn["trace"].faults[["node", "start", "stop"]],
                                  **{name: drawn["rankings"][name] for name, _ in algos}}
    per_run = pd.DataFrame.from_records(rows, columns=["diagnoser", "family", "run", *PARTS])
    return per_run, pooled(per_run)


def write_versus(per_run: pd.DataFrame, table: pd.DataFrame, out: Path) -> tuple[str, list[Path]]:
    """Markdown of the side-by-side table, and compare-blackbox.csv (the pooled table, figures as
    fractions, delay error in %) and compare-blackbox-runs.csv (per run and diagnoser, the numerators
    and denominators) in `out`."""
    from rundir.layout import fresh, output_dir

    output_dir(out)
    files = [out / "compare-blackbox.csv", out / "compare-blackbox-runs.csv"]
    table.to_csv(fresh(files[0]), index=False, na_rep="", float_format="%.6g")
    per_run.to_csv(fresh(files[1]), index=False, na_rep="", float_format="%.6g")
    first = per_run.drop_duplicates("run") if len(per_run) else per_run
    windows = int(per_run[per_run["diagnoser"] == per_run["diagnoser"].iloc[0]]["fault_windows"].sum()) \
        if len(per_run) else 0
    md = ("### NeST beside the black-box algorithms (WAP5 linking, Project5 nesting and convolution)\n\n"
          + versus_markdown(table, windows, len(first)))
    return md, files
