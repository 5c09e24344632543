"""Scores: confusion matrices and rates per module type and direction (thesis Table 3.3), and the
change in TP and FP between rule variants (NeST paper Table 8).

Every module, direction and snapshot that is not excluded by the labelling policy (and has a valid
counter delta) is one diagnosis: TP (diagnosed positive, actually positive), FP, TN or FN. Counts are
kept per run, variant, direction and module (`evaluate(...).counts`) and summed into table rows:

  iperf, wget      applications of iperf / wget workloads
  socket           every socket; s:iperf, s:wget: the sockets of iperf / wget workloads
  TCP, ip+eth      TCP connections; the interface module
  all modules      every module (applications of other programs included)

in sections Inbound, Outbound and Total (both directions). Rates:
  TPR = TP/AP, FPR = FP/AN, PPV = TP/(TP+FP), TNR = TN/AN, FNR = FN/AP, NPV = TN/(TN+FN)
A rate whose denominator is zero is undefined (None; printed blank).

Uncertainty: the Wilson score interval at 95% for each rate, a binomial proportion k/n. It treats
snapshots as independent trials, which consecutive snapshots are not (a stall lasts many), so read
it as a lower bound on the real uncertainty; the spread over repeated runs is the honest measure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.variants import DEFAULT_VARIANT

ROWS = ("iperf", "wget", "socket", "s:iperf", "s:wget", "TCP", "ip+eth", "all modules")
SECTIONS = ("Inbound", "Outbound", "Total")
SECTION_DIR = {"Inbound": ("in",), "Outbound": ("out",), "Total": ("in", "out")}
COUNTS = ("Total", "AP", "AN", "TP", "TN", "FP", "FN")
RATES = ("TPR", "FPR", "PPV", "TNR", "FNR", "NPV")
# rate -> (numerator, denominator terms)
RATE_DEF = {
    "TPR": ("TP", ("TP", "FN")),
    "FPR": ("FP", ("FP", "TN")),
    "PPV": ("TP", ("TP", "FP")),
    "TNR": ("TN", ("TN", "FP")),
    "FNR": ("FN", ("TP", "FN")),
    "NPV": ("TN", ("TN", "FN")),
}
CONFIDENCE = 0.95
Z = 1.959963984540054  # two-sided 95% normal quantile
INTERVAL = "Wilson score interval, 95%"


def wilson(k: float, n: float, z: float = Z) -> tuple[float, float, float] | None:
    """(p, low, high) of k successes in n trials; None when n == 0 (the rate is undefined)."""
    if n <= 0:
        return None
    p = k / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    lo = 0.0 if k <= 0 else min(p, max(0.0, centre - half))
    hi = 1.0 if k >= n else max(p, min(1.0, centre + half))
    return p, lo, hi


def rates(tp: float, tn: float, fp: float, fn: float) -> dict[str, tuple[float, float, float] | None]:
    """Each rate of RATES as (value, low, high) fractions, or None when undefined."""
    c = {"TP": tp, "TN": tn, "FP": fp, "FN": fn}
    return {r: wilson(c[num], sum(c[t] for t in den)) for r, (num, den) in RATE_DEF.items()}


def confusion(actual: Iterable[bool], positive: Iterable[bool]) -> dict[str, int]:
    """Counts of one set of diagnoses: Total, AP, AN, TP, TN, FP, FN."""
    a = np.asarray(list(actual) if not isinstance(actual, np.ndarray) else actual, dtype=bool)
    p = np.asarray(list(positive) if not isinstance(positive, np.ndarray) else positive, dtype=bool)
    tp = int(np.sum(a & p))
    fn = int(np.sum(a & ~p))
    fp = int(np.sum(~a & p))
    tn = int(np.sum(~a & ~p))
    return {"Total": tp + fn + fp + tn, "AP": tp + fn, "AN": fp + tn, "TP": tp, "TN": tn, "FP": fp, "FN": fn}


# ----------------------------------------------------------------------------- from runs


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


@dataclass
class Evaluation:
    """Per-module counts of one or more runs, variants and one labelling policy."""

    counts: pd.DataFrame               # run, variant, dir, module, kind, rows, TP, TN, FP, FN
    variants: list[str]
    policy: str
    runs: list[Path]
    warnings: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)     # run path -> RunData, when kept
    scored: dict = field(default_factory=dict)   # run path -> join_labels frame, when kept
    health: dict = field(default_factory=dict)   # run path -> analysis.health.Health
    overlap_rows: int = 0   # module-snapshots left out: a target under another fault's collateral
    skipped: list = field(default_factory=list)       # (run path, why) of runs that could not be analysed
    run_warnings: dict = field(default_factory=dict)  # run path -> what was wrong with it (warnings)

    def table(self, variant: str | None = None) -> pd.DataFrame:
        return accuracy_table(self.counts, variant or self.variants[0])

    def compare(self, variants: Sequence[str] | None = None) -> pd.DataFrame:
        return compare_table(self.counts, list(variants or self.variants))


def evaluate(runs: Iterable[str | Path], variants: Sequence[str] = (DEFAULT_VARIANT,),
             policy=None, keep: bool = False, on_warning=None, skip_bad: bool = False) -> Evaluation:
    """Diagnose, label and count each run. keep=True keeps each run's data and scored frame (plots).

    on_warning(run_name, message) is called for each warning about a run (default: collected only).
    skip_bad=True skips a run that cannot be analysed (no snapshots, no run.db, a damaged file, or any
    failure the analysis did not expect) with a warning instead of raising UserError (Evaluation.skipped);
    UserError is still raised when no run at all could be analysed. Every failure of a run is one
    line (analysis.runs.guarded), never a traceback.
    """
    from analysis.diagnose import as_variants
    from analysis.labels import parse_policy
    from analysis.runs import guarded, load_run_data, open_run
    from harness.errors import UserError

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
            info = guarded(r, open_run, r)
            data = guarded(r, load_run_data, info)
            for w in data.warnings:
                warn(info.name, w)
            counts, scored, overlap, health = guarded(r, _score_run, data, vs, pol, warn)
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


def _score_run(data, vs, pol, warn):
    """(counts, scored, overlap rows, health or None) of one run read by load_run_data."""
    from analysis.diagnose import diagnose_run
    from analysis.health import network_health

    name = data.info.name
    if data.run.stretches:
        diag = diagnose_run(data.run, vs)
    else:  # snapshots but no counters: nothing to diagnose (the engine needs at least one stretch)
        diag = _empty_diagnosis()
        warn(name, "no module counters recorded; every count is 0")
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


# ----------------------------------------------------------------------------- tables


def _row_sums(counts: pd.DataFrame, variant: str) -> dict[tuple[str, str], np.ndarray]:
    """(dir, row) -> [TP, TN, FP, FN] summed over modules and runs."""
    c = counts[counts["variant"] == variant]
    out: dict[tuple[str, str], np.ndarray] = {(d, r): np.zeros(4, dtype=np.int64) for d in ("in", "out") for r in ROWS}
    if c.empty:
        return out
    ex = c[["dir", "rows", "TP", "TN", "FP", "FN"]].explode("rows")
    ex = ex[ex["rows"].isin(ROWS)]
    g = ex.groupby(["dir", "rows"])[["TP", "TN", "FP", "FN"]].sum()
    for (d, r), v in g.iterrows():
        out[(d, r)] = v.to_numpy(np.int64)
    return out


def accuracy_table(counts: pd.DataFrame, variant: str) -> pd.DataFrame:
    """Thesis Table 3.3 for one variant: index (section, row); COUNTS, RATES (fractions or NaN for
    undefined) and, per rate, `<rate>_lo` and `<rate>_hi` (Wilson 95%)."""
    sums = _row_sums(counts, variant)
    records = []
    for section in SECTIONS:
        for row in ROWS:
            tp, tn, fp, fn = sum(sums[(d, row)] for d in SECTION_DIR[section])
            rec = {"section": section, "row": row, "Total": tp + tn + fp + fn, "AP": tp + fn, "AN": tn + fp,
                   "TP": tp, "TN": tn, "FP": fp, "FN": fn}
            for r, v in rates(tp, tn, fp, fn).items():
                rec[r], rec[f"{r}_lo"], rec[f"{r}_hi"] = v if v is not None else (np.nan, np.nan, np.nan)
            records.append(rec)
    t = pd.DataFrame.from_records(records).set_index(["section", "row"])
    for k in COUNTS:
        t[k] = t[k].astype(np.int64)
    return t


def change_pct(new: float, base: float) -> float:
    """Percentage change against a baseline; NaN (undefined) when the baseline is 0 and new is not."""
    if base == 0:
        return 0.0 if new == 0 else np.nan
    return (new - base) / base * 100.0


def compare_table(counts: pd.DataFrame, variants: list[str]) -> pd.DataFrame:
    """NeST paper Table 8 for variants[1:] against variants[0]: index (section, row); columns
    (variant, metric) with metric TP, FP, TPR, PPV, dTP%, dFP% (NaN = undefined)."""
    base = accuracy_table(counts, variants[0])
    cols = {}
    for v in variants:
        t = base if v == variants[0] else accuracy_table(counts, v)
        cols[(v, "TP")] = t["TP"]
        cols[(v, "FP")] = t["FP"]
        cols[(v, "TPR")] = t["TPR"]
        cols[(v, "PPV")] = t["PPV"]
        cols[(v, "dTP%")] = pd.Series([change_pct(n, b) for n, b in zip(t["TP"], base["TP"], strict=True)],
                                      index=t.index)
        cols[(v, "dFP%")] = pd.Series([change_pct(n, b) for n, b in zip(t["FP"], base["FP"], strict=True)],
                                      index=t.index)
    out = pd.DataFrame(cols)
    out.columns = pd.MultiIndex.from_tuples(out.columns, names=["variant", "metric"])
    return out
