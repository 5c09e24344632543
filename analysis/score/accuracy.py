"""Scores: confusion matrices and rates per module type and direction (thesis Table 3.3), and the
change in TP and FP between rule variants (NeST paper Table 8).

Every module, direction and snapshot that is not excluded by the labelling policy (and has a valid
counter delta) is one diagnosis: TP (diagnosed positive, actually positive), FP, TN or FN. Counts are
kept per run, variant, direction and module (analysis.pipeline.evaluate(...).counts, counted by
analysis.score.counting) and summed into the table rows of analysis.score.table_layout in sections
Inbound, Outbound and Total (both directions). Rates:
  TPR = TP/AP, FPR = FP/AN, PPV = TP/(TP+FP), TNR = TN/AN, FNR = FN/AP, NPV = TN/(TN+FN)
A rate whose denominator is zero is undefined (None; printed blank).

Uncertainty, two intervals:

- Per snapshot (`accuracy_table`: `<rate>_lo`, `<rate>_hi`): the Wilson score interval at 95% for
  each rate, a binomial proportion k/n. It treats snapshots as independent trials, which consecutive
  snapshots are not (a stall lasts many), so read it as a lower bound on the real uncertainty.
- Across runs (`across_runs`: `<rate>_xlo`, `<rate>_xhi`, `<rate>_runs`; ACROSS_INTERVAL): a cluster
  bootstrap over runs of the pooled rate. Runs are the independent unit (each is a fresh network,
  fresh workloads, its own faults), and the pooled rate (summed numerator over summed denominator,
  what the table prints) is the statistic, so the bootstrap resamples whole runs with replacement
  and recomputes sum(k)/sum(n) over the resample: a run's snapshots stay together, with whatever
  correlation they have, and a run counts with its weight in the pooled rate (its denominator).
  Only the runs where the rate is defined (denominator > 0) take part; with fewer than 2 of them the
  interval is undefined (NaN). scipy.stats.bootstrap (paired over the runs' (k, n), BCa,
  ACROSS_RESAMPLES resamples, a fixed seed so a table is the same every time it is made); where BCa
  is degenerate (e.g. every run has the same rate, so every resample does: BCa's bias correction is
  then infinite) the percentile interval of the same resamples is used, which is then the
  zero-width interval at that rate. With few runs (under ~10) any bootstrap interval is too narrow;
  `per_run_table` gives the rates of each run to look at directly.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from analysis.score.table_layout import COUNTS, RATE_DEF, RATES, ROWS, SECTION_DIR, SECTIONS

CONFIDENCE = 0.95
Z = 1.959963984540054  # two-sided 95% normal quantile
INTERVAL = "Wilson score interval, 95%"
ACROSS_INTERVAL = "bootstrap over runs (BCa), 95%"
ACROSS_RESAMPLES = 2000
ACROSS_SEED = 20260112   # fixed: the same runs give the same interval every time
ACROSS_BATCH = 250       # resamples per batch: keeps the arrays in cache (and memory bounded)


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


# ----------------------------------------------------------------------------- across runs


def _run_sums(counts: pd.DataFrame, variant: str, runs: Sequence[str] | None = None
              ) -> tuple[list[str], np.ndarray]:
    """(runs, array [run, section, row, TP/TN/FP/FN]) summed over each run's modules; runs default to
    those in counts, in order of appearance (a run given but absent from counts has zeros)."""
    c = counts[counts["variant"] == variant]
    names = [str(r) for r in runs] if runs is not None else list(dict.fromkeys(counts["run"].astype(str)))
    arr = np.zeros((len(names), 2, len(ROWS), 4), dtype=np.int64)
    if not c.empty and names:
        # Each module's table rows (a list: ["TCP"], ["app", "wget"], ...) as row indices, one lookup per
        # distinct list; the modules of other runs or directions dropped.
        at = {n: i for i, n in enumerate(names)}
        ri = np.fromiter((at.get(str(r), -1) for r in c["run"].to_numpy(object)), dtype=np.int64, count=len(c))
        di = np.fromiter(({"in": 0, "out": 1}.get(d, -1) for d in c["dir"].to_numpy(object)), dtype=np.int64,
                         count=len(c))
        which = {r: i for i, r in enumerate(ROWS)}
        per_list: dict[tuple, list[int]] = {}
        lists = [per_list.setdefault(tuple(rs), [which[r] for r in rs if r in which])
                 if isinstance(rs, list | tuple) else ([which[rs]] if rs in which else []) for rs in c["rows"]]
        n_rows = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
        rowi = np.fromiter((i for x in lists for i in x), dtype=np.int64, count=int(n_rows.sum()))
        src = np.repeat(np.arange(len(c)), n_rows)
        keep = (ri[src] >= 0) & (di[src] >= 0)
        src, rowi = src[keep], rowi[keep]
        np.add.at(arr, (ri[src], di[src], rowi), c[["TP", "TN", "FP", "FN"]].to_numpy(np.int64)[src])
    sections = np.stack([arr[:, [0] if s == "Inbound" else [1] if s == "Outbound" else [0, 1]].sum(axis=1)
                         for s in SECTIONS], axis=1)
    return names, sections


def _num_den(sums: np.ndarray, rate: str) -> tuple[np.ndarray, np.ndarray]:
    """Numerator and denominator of a rate from [..., TP/TN/FP/FN] sums."""
    idx = {"TP": 0, "TN": 1, "FP": 2, "FN": 3}
    num, den = RATE_DEF[rate]
    return sums[..., idx[num]], sum(sums[..., idx[t]] for t in den)


def per_run_table(counts: pd.DataFrame, variant: str, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """Rates per run: columns run, section, row, COUNTS, RATES (fractions, NaN undefined)."""
    names, sums = _run_sums(counts, variant, runs)
    tp, tn, fp, fn = (sums[..., i].reshape(-1) for i in range(4))
    n = len(names)
    out = pd.DataFrame({
        "run": np.repeat(names, len(SECTIONS) * len(ROWS)),
        "section": np.tile(np.repeat(SECTIONS, len(ROWS)), n), "row": np.tile(ROWS, n * len(SECTIONS)),
        "Total": tp + tn + fp + fn, "AP": tp + fn, "AN": tn + fp, "TP": tp, "TN": tn, "FP": fp, "FN": fn})
    for r in RATES:
        num, den = (a.reshape(-1) for a in _num_den(sums, r))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[r] = np.where(den > 0, num / np.maximum(den, 1), np.nan)
    return out


def _pooled(k: np.ndarray, n: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.sum(k, axis=axis) / np.sum(n, axis=axis)


def bootstrap_pooled(k: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The across-run interval (ACROSS_INTERVAL) of the pooled rate sum(k)/sum(n) of each row of k, n
    (shape [cells, runs], every n > 0, at least 2 runs): (low, high) fractions, one per row."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    from scipy import stats
    from scipy.stats import DegenerateDataWarning

    def run(method: str, k: np.ndarray, n: np.ndarray):
        # a degenerate BCa (0/0 in its acceleration: RuntimeWarning, then DegenerateDataWarning) is
        # expected and handled below: not the user's news
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateDataWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            ci = stats.bootstrap((k, n), _pooled, paired=True, vectorized=True, axis=-1, method=method,
                                 n_resamples=ACROSS_RESAMPLES, batch=ACROSS_BATCH, confidence_level=CONFIDENCE,
                                 rng=np.random.default_rng(ACROSS_SEED)).confidence_interval
        return np.atleast_1d(ci.low).astype(float), np.atleast_1d(ci.high).astype(float)

    lo, hi = run("BCa", k, n)
    bad = np.isnan(lo) | np.isnan(hi)
    if bad.any():   # the same resamples (same seed, same shape), percentile interval
        lo[bad], hi[bad] = run("percentile", k[bad], n[bad])
    return lo, hi


def across_runs(counts: pd.DataFrame, variant: str, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """The across-run interval of each pooled rate: index (section, row) as accuracy_table; per rate
    `<rate>_runs` (runs where it is defined), `<rate>_xlo`, `<rate>_xhi` (fractions; NaN with fewer
    than 2 such runs). Method: the module docstring (ACROSS_INTERVAL)."""
    _, sums = _run_sums(counts, variant, runs)
    cells = len(SECTIONS) * len(ROWS)
    nums, dens = zip(*(_num_den(sums, r) for r in RATES), strict=True)
    num = np.concatenate([a.reshape(len(sums), cells).T for a in nums])    # [rate x section x row, run]
    den = np.concatenate([a.reshape(len(sums), cells).T for a in dens])
    defined = den > 0
    m = defined.sum(axis=1)
    lo = np.full(len(num), np.nan)
    hi = np.full(len(num), np.nan)
    for size in np.unique(m[m >= 2]):   # one batched call per number of runs: rows of equal length
        sel = np.flatnonzero(m == size)
        keep = defined[sel]
        lo[sel], hi[sel] = bootstrap_pooled(num[sel][keep].reshape(len(sel), size),
                                            den[sel][keep].reshape(len(sel), size))
    index = pd.MultiIndex.from_product([SECTIONS, ROWS], names=["section", "row"])
    out = pd.DataFrame(index=index)
    for i, r in enumerate(RATES):
        part = slice(i * cells, (i + 1) * cells)
        out[f"{r}_runs"] = m[part].astype(np.int64)
        out[f"{r}_xlo"] = lo[part]
        out[f"{r}_xhi"] = hi[part]
    return out
