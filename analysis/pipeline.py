"""The analysis pipeline: load -> diagnose -> label -> score -> render.

    evaluate(runs, variants, policy) -> Evaluation
        for each run: load (analysis.load: rundir's readers, stretches and frames), diagnose
        (analysis.diagnose: every variant over the stretches), label (analysis.labels: the ground
        truth of a policy), score (join the two, count TP/TN/FP/FN per module; analysis.score turns
        counts into the table rows of analysis.rows). The Evaluation holds the counts of every run.
    summarize(run) -> Evaluation, summarize_run(run) -> Path
        the same for one run, then render (analysis.render: tables as Markdown/CSV/LaTeX, figures,
        the HTML report) into <run>/analysis/.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.diagnose import as_variants, diagnose_run
from analysis.evaluation import Evaluation
from analysis.health import network_health
from analysis.labels import parse_policy
from analysis.load import load_run_data
from analysis.render import html as html_report
from analysis.render import plots
from analysis.render.tables import stalled_list
from analysis.render.writers import stalled_markdown, write_accuracy
from analysis.variants import DEFAULT_VARIANT
from rundir.errors import UserError
from rundir.layout import fresh
from rundir.runs import guarded, open_run


def say(text: str, file=None) -> None:
    print(text, file=file or sys.stdout, flush=True)


# ----------------------------------------------------------------------------- load, diagnose, label, score


def evaluate(runs: Iterable[str | Path], variants: Sequence[str] = (DEFAULT_VARIANT,),
             policy=None, keep: bool = False, on_warning=None, skip_bad: bool = False) -> Evaluation:
    """Diagnose, label and count each run. keep=True keeps each run's data and scored frame (plots).

    on_warning(run_name, message) is called for each warning about a run (default: collected only).
    skip_bad=True skips a run that cannot be analysed (no snapshots, no run.db, a damaged file, or any
    failure the analysis did not expect) with a warning instead of raising UserError (Evaluation.skipped);
    UserError is still raised when no run at all could be analysed. Every failure of a run is one
    line (rundir.runs.guarded), never a traceback.
    """
    vs = as_variants(variants)
    names = [v.name for v in vs]
    pol = parse_policy(policy)
    parts, paths, warnings = [], [], []
    ev = Evaluation(pd.DataFrame(), names, pol.name, paths, warnings)
    tried = 0
    for r in runs:
        tried += 1
        said: list[str] = []

        def warn(name: str, message: str, said: list[str] = said) -> None:
            warnings.append(f"{name}: {message}")
            said.append(message)
            if on_warning:
                on_warning(name, message)

        try:
            # load
            info = guarded(r, open_run, r)
            data = guarded(r, load_run_data, info)
            for w in data.warnings:
                warn(info.name, w)
            counts, scored, overlap, health = guarded(r, diagnose_label_score, data, vs, pol, warn)
        except UserError as e:
            if not skip_bad:
                raise
            msg = str(e).removeprefix(f"{r}: ").removeprefix(f"{Path(r)}: ")
            warnings.append(f"{r}: skipped: {msg}")
            ev.skipped.append((Path(r), msg))
            if on_warning:
                on_warning(str(r), f"skipped: {msg}")
            continue
        ev.overlap_rows += overlap
        if health is not None:
            ev.health[info.path] = health
        ev.run_warnings[info.path] = said
        parts.append(counts)
        paths.append(info.path)
        if keep:
            ev.data[info.path] = data
            ev.scored[info.path] = scored
    if skip_bad and tried and not parts:
        raise UserError(f"none of the {tried} runs could be analysed")
    cols = ["run", "variant", "dir", "module", "kind", "rows", "TP", "TN", "FP", "FN"]
    ev.counts = pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)
    return ev


def diagnose_label_score(data, vs, pol, warn):
    """(counts, scored, overlap rows, health or None) of one run read by load_run_data."""
    name = data.info.name
    # diagnose
    if data.run.stretches:
        diag = diagnose_run(data.run, vs)
    else:  # snapshots but no counters: nothing to diagnose (the engine needs at least one stretch)
        diag = _empty_diagnosis()
        warn(name, "no module counters recorded; every count is 0")
    # label
    labels = pol.label(data)
    unscored = getattr(data, "unscored", None)
    if unscored is not None and unscored.any():   # a damaged run: rows whose ground truth is unknown
        labels = labels.assign(exclude=labels["exclude"].to_numpy(bool) | unscored,
                               cause=labels["cause"].where(~unscored, "invalid"))
    overlap = int((labels["cause"] == "overlap").sum())
    health = None
    try:
        health = network_health(data)
    except Exception as e:  # noqa: BLE001 - health figures must not stop the accuracy table
        warn(name, f"network health not computed: {type(e).__name__}: {e}")
    # score
    scored = join_labels(diag, data.counters.join(labels))
    counts = module_counts(scored)
    mods = data.modules
    counts["run"] = str(data.info.path)
    counts["kind"] = mods["kind"].reindex(counts["module"]).to_numpy()
    counts["rows"] = mods["rows"].reindex(counts["module"]).to_numpy()
    return counts, scored, overlap, health


def _empty_diagnosis() -> pd.DataFrame:
    return pd.DataFrame({"variant": pd.Categorical([]), "dir": pd.Categorical([], categories=["in", "out"]),
                         "module": pd.Series([], dtype=np.int64), "kind": pd.Categorical([]),
                         "seq": pd.Series([], dtype=np.int64), "label": pd.Categorical([]),
                         "cf": pd.Series([], dtype=float), "positive": pd.Series([], dtype=bool),
                         "invalid": pd.Series([], dtype=bool)})


def join_labels(diag: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """diagnose_run's frame with the labels (actual, exclude, cause, fault) of its rows added."""
    if diag.empty:
        return diag.assign(actual=pd.Series(dtype=bool), exclude=pd.Series(dtype=bool))
    seq_span = int(max(diag["seq"].max(), labels["seq"].max() if len(labels) else 0)) + 1

    def key(frame):
        return ((frame["module"].to_numpy(np.int64) * seq_span + frame["seq"].to_numpy(np.int64)) * 2
                + (frame["dir"] == "out").to_numpy(np.int64))

    lk = key(labels)
    order = np.argsort(lk, kind="stable")
    dk = key(diag)
    pos = np.searchsorted(lk[order], dk)
    pos = np.minimum(pos, len(order) - 1) if len(order) else pos
    found = (lk[order][pos] == dk) if len(order) else np.zeros(len(dk), dtype=bool)
    at = order[pos] if len(order) else pos
    out = diag.copy()
    actual = labels["actual"].to_numpy(bool)
    exclude = labels["exclude"].to_numpy(bool)
    out["actual"] = np.where(found, actual[at] if len(order) else False, False)
    out["exclude"] = np.where(found, exclude[at] if len(order) else True, True) | diag["invalid"].to_numpy(bool)
    if "cause" in labels:
        out["cause"] = pd.Categorical(np.where(found, labels["cause"].astype(str).to_numpy()[at], "invalid"))
    return out


def module_counts(scored: pd.DataFrame) -> pd.DataFrame:
    """TP, TN, FP, FN per variant, direction and module, from join_labels' frame (excluded rows out)."""
    s = scored[~scored["exclude"]]
    a = s["actual"].to_numpy(bool)
    p = s["positive"].to_numpy(bool)
    frame = pd.DataFrame({
        "variant": s["variant"].astype(str).to_numpy(), "dir": s["dir"].astype(str).to_numpy(),
        "module": s["module"].to_numpy(np.int64),
        "TP": (a & p).astype(np.int64), "TN": (~a & ~p).astype(np.int64),
        "FP": (~a & p).astype(np.int64), "FN": (a & ~p).astype(np.int64)})
    return frame.groupby(["variant", "dir", "module"], sort=False, as_index=False)[["TP", "TN", "FP", "FN"]].sum()


# ----------------------------------------------------------------------------- render


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
    run_dir = Path(run_dir)
    # The tables are those of `variants`; the report (the same as `nestlab report RUN`) also has the
    # report's own variants, diagnosed in the same pass (labels and counters are read once).
    base = list(dict.fromkeys(v.name for v in as_variants(variants)))
    extra = [v for v in dict.fromkeys(x.name for x in as_variants(html_report.REPORT_VARIANTS)) if v not in base]
    full = evaluate([run_dir], base + extra, policy, keep=True)
    ev = dataclasses.replace(full, variants=base)
    for w in ev.warnings:
        say(f"warning: {w}", sys.stderr)
    out = Path(out) if out is not None else run_dir / "analysis"
    md, _ = write_accuracy(ev, out)
    say("")
    say(md)
    data = ev.data[ev.runs[0]]
    scored = ev.scored[ev.runs[0]]
    variant = ev.variants[0]
    health = ev.health.get(ev.runs[0])
    if health is not None:   # the runner copies it into the manifest
        fresh(out / "health.json").write_text(json.dumps(health.as_dict(), indent=2) + "\n")
        for w in health.warnings:
            say(f"warning: {w}", sys.stderr)
    st = stalled_list(data, scored, variant)
    st.to_csv(fresh(out / "stalled.csv"), index=False, na_rep="")
    fresh(out / "stalled.md").write_text(stalled_markdown(st, variant, limit=None) + "\n")
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
