"""Scoring a black-box algorithm's inferred paths against the truth (Maketrace's paths, a Jaeger
export's parent links, a service run's `requests`).

- **Patterns** (`pattern_scores`): a true pattern is *common* when it makes up at least `share`
  (1%) of the requests, else *rare*; an inferred pattern is common when it makes up at least `share`
  of the inferred count. Recall of common patterns: the share of the true common patterns found
  among the inferred patterns making up at least `share / 2` (an inferred count may fall a little
  under the threshold the true one passes); precision: the share of the inferred common patterns
  that truly occurred (any number of times). The rare ones separately: recall, the share of the
  true rare patterns inferred at all; precision, the share of inferred rare patterns that occurred.
  Also the share of requests whose (common) pattern was found, and the count error of the found ones.
  An inferred pattern's share is taken over all the paths the algorithm inferred, those of the
  patterns beyond the kept list (MAX_PATTERNS) too (PathsResult.total).
- **Requests** (`accuracy.request_scores`): request_accuracy, the share of requests whose whole
  inferred tree is the true one, and mapping_accuracy, the share of caused messages whose inferred
  cause is the true one (accuracy.py).
- **Delays** (`delay_scores`): for each found common pattern and each node in it, the inferred mean
  node delay (PathPattern.node_delays: a node's delays summed over its visits in one path, mean over
  the pattern's paths) against the true mean of the same sum (Truth.node_delay, or from the causes),
  weighted by the pattern's true count: mean absolute error in ms and in % of the true mean.
- **Node delays** (`node_delay_scores`): the result's node_delays frame (mean_s: per link, from a
  message's arrival to the departure of one it caused) against the true mean per link, weighted by
  the true number of links: `node_delay_error_ms`, `node_delay_error_pct`.
- **Diagnosis** (`culprit_scores`): in each fault window, the algorithm is run on the messages sent
  in the window and on those sent outside every window; the nodes are ranked by how much their mean
  delay per link (the result's node_delays frame, mean_s) rose; the fault's target first (top-1) or
  among the first three (top-3), over the windows.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from analysis.paths.accuracy import request_scores
from analysis.paths.model import PathsResult, Trace, true_patterns

SHARE = 0.01
SCORE_COLUMNS = ("algorithm", "pattern_recall", "pattern_precision", "rare_recall", "rare_precision",
                 "request_recall", "request_accuracy", "mapping_accuracy", "call_accuracy", "count_error_pct", "delay_error_ms", "delay_error_pct",
                 "node_delay_error_ms", "node_delay_error_pct",
                 "culprit_top1", "culprit_top3", "fault_windows", "true_patterns", "inferred_patterns")


def _ratio(num: float, den: float) -> float:
    return float(num) / den if den else float("nan")


def pattern_scores(result: PathsResult, true: pd.DataFrame, share: float = SHARE) -> dict[str, float]:
    """Recall and precision of common and rare patterns (see the module's docstring). `true`: one
    row per request with its pattern (model.true_patterns)."""
    t_counts = true["pattern"].value_counts()
    t_share = t_counts / max(len(true), 1)
    t_common = set(t_share.index[t_share >= share])
    t_rare = set(t_share.index[t_share < share])
    inferred = pd.Series({p.pattern: p.count for p in result.patterns}, dtype="float64")
    inferred = inferred.groupby(level=0).sum()
    # shares over every inferred path, those of patterns beyond the kept list too (result.total)
    total = float(result.total) if result.total else float(inferred.sum())
    i_share = inferred / total if total > 0 else inferred * 0
    i_common = set(i_share.index[i_share >= share])
    i_rare = set(i_share.index[(i_share < share) & (inferred > 0)])
    found = t_common & set(i_share.index[i_share >= share / 2])
    errors = [abs(inferred[p] - t_counts[p]) / t_counts[p] for p in found]
    return {
        "pattern_recall": _ratio(len(found), len(t_common)),
        "pattern_precision": _ratio(len(i_common & set(t_counts.index)), len(i_common)),
        "rare_recall": _ratio(len(t_rare & set(inferred.index[inferred > 0])), len(t_rare)),
        "rare_precision": _ratio(len(i_rare & set(t_counts.index)), len(i_rare)),
        "request_recall": _ratio(float(sum(t_counts[p] for p in found)), float(sum(t_counts[p] for p in t_common))),
        "count_error_pct": 100 * float(np.mean(errors)) if errors else float("nan"),
        "true_patterns": len(t_counts),
        "inferred_patterns": len(inferred),
        # numerators and denominators, for pooling over runs (analysis.paths.versus)
        "n_found": len(found), "n_true_common": len(t_common),
        "n_inferred_common_true": len(i_common & set(t_counts.index)), "n_inferred_common": len(i_common),
        "n_rare_found": len(t_rare & set(inferred.index[inferred > 0])), "n_true_rare": len(t_rare),
        "n_inferred_rare_true": len(i_rare & set(t_counts.index)), "n_inferred_rare": len(i_rare),
    }


def true_node_delays(trace: Trace) -> pd.DataFrame:
    """Per (pattern, node): the true mean of the node's delays summed over its visits in one path
    (mean_s), and how many requests had that pattern (requests)."""
    if trace.truth is None:
        raise ValueError(f"{trace.source or 'trace'}: no true paths to compare with")
    t, m = trace.truth, trace.messages
    delay = t.node_delay
    if delay is None:
        cause = t.cause
        has = cause >= 0
        delay = np.full(len(m), np.nan)
        delay[has] = m["t_send"].to_numpy()[has] - m["t_recv"].to_numpy()[cause[has]]
    rows = pd.DataFrame({"request": t.request, "node": m["src"].astype(str).to_numpy(), "delay": delay})
    rows = rows[(rows["request"] >= 0) & rows["delay"].notna()]
    per_path = rows.groupby(["request", "node"], sort=False)["delay"].sum().reset_index()
    pats = true_patterns(trace)
    per_path = per_path.merge(pats[["request", "pattern"]], on="request")
    out = per_path.groupby(["pattern", "node"])["delay"].mean().rename("mean_s").reset_index()
    out["requests"] = out["pattern"].map(pats["pattern"].value_counts())
    return out


def delay_scores(result: PathsResult, truth_delays: pd.DataFrame, true: pd.DataFrame,
                 share: float = SHARE) -> dict[str, float]:
    """Count-weighted mean absolute error of the per-node delays in the found common patterns."""
    t_share = true["pattern"].value_counts() / max(len(true), 1)
    common = set(t_share.index[t_share >= share])
    inferred = {p.pattern: p.node_delays for p in result.patterns}
    err_ms, err_pct, weight = [], [], []
    for row in truth_delays.itertuples(index=False):
        if row.pattern not in common or row.pattern not in inferred or row.mean_s <= 0:
            continue
        got = float(inferred[row.pattern].get(row.node, 0.0))
        err_ms.append(abs(got - row.mean_s) * 1000)
        err_pct.append(abs(got - row.mean_s) / row.mean_s * 100)
        weight.append(row.requests)
    if not weight:
        return {"delay_error_ms": float("nan"), "delay_error_pct": float("nan"), "n_delay_pct": 0.0,
                "n_delay_weight": 0.0}
    return {"delay_error_ms": float(np.average(err_ms, weights=weight)),
            "delay_error_pct": float(np.average(err_pct, weights=weight)),
            "n_delay_pct": float(np.dot(err_pct, weight)), "n_delay_weight": float(np.sum(weight))}


def true_link_delays(trace: Trace) -> pd.Series:
    """Per node, the true mean delay per link (from receiving a message to sending one it caused),
    over the messages of requests: what a result's node_delays frame reports as mean_s."""
    t, m = trace.truth, trace.messages
    delay = t.node_delay
    if delay is None:
        has = t.cause >= 0
        delay = np.full(len(m), np.nan)
        delay[has] = m["t_send"].to_numpy()[has] - m["t_recv"].to_numpy()[t.cause[has]]
    rows = pd.DataFrame({"node": m["src"].astype(str).to_numpy(), "delay": delay})
    rows = rows[(t.request >= 0) & rows["delay"].notna().to_numpy()]
    return rows.groupby("node")["delay"].agg(["mean", "count"])


def node_delay_scores(result: PathsResult, trace: Trace) -> dict[str, float]:
    """The result's per-node mean delay per link against the truth's, weighted by the true number of
    links; a node the result does not report counts as 0 (a 100% error)."""
    true = true_link_delays(trace)
    true = true[true["mean"] > 0]
    if true.empty:
        return {"node_delay_error_ms": float("nan"), "node_delay_error_pct": float("nan")}
    got = _node_means(result).reindex(true.index).fillna(0.0)
    err = (got - true["mean"]).abs()
    return {"node_delay_error_ms": float(np.average(err * 1000, weights=true["count"])),
            "node_delay_error_pct": float(np.average(err / true["mean"] * 100, weights=true["count"]))}


def _window_mask(t: np.ndarray, faults: pd.DataFrame) -> np.ndarray:
    inside = np.zeros(len(t), dtype=bool)
    for f in faults.itertuples(index=False):
        inside |= (t >= f.start) & (t < f.stop)
    return inside


def _node_means(result: PathsResult) -> pd.Series:
    nd = result.node_delays
    if nd is None or nd.empty:
        return pd.Series(dtype="float64")
    return nd.set_index(nd["node"].astype(str))["mean_s"].astype(float)


def culprit_ranking(trace: Trace, infer: Callable[[pd.DataFrame], PathsResult]) -> pd.DataFrame:
    """Per fault window: target, the nodes ranked by their delay's rise (ranking, list), and the
    rise of the first (s). Empty when the trace has no fault windows."""
    cols = ["window", "node", "start", "stop", "ranking", "rise_s"]
    faults = trace.faults
    if faults is None or faults.empty:
        return pd.DataFrame(columns=cols)
    m = trace.messages
    t = m["t_send"].to_numpy()
    outside = ~_window_mask(t, faults)
    base = _node_means(infer(m[outside].reset_index(drop=True))) if outside.any() else pd.Series(dtype=float)
    rows = []
    for i, f in enumerate(faults.itertuples(index=False)):
        sel = (t >= f.start) & (t < f.stop)
        if not sel.any():
            rows.append((i, f.node, f.start, f.stop, [], float("nan")))
            continue
        now = _node_means(infer(m[sel].reset_index(drop=True)))
        rise = (now - base.reindex(now.index).fillna(0.0)).sort_values(ascending=False, kind="stable")
        rows.append((i, f.node, f.start, f.stop, [str(n) for n in rise.index],
                     float(rise.iloc[0]) if len(rise) else float("nan")))
    return pd.DataFrame(rows, columns=cols)


def culprit_scores(ranking: pd.DataFrame) -> dict[str, float]:
    """Top-1 and top-3 over the windows of a ranking (columns node: the culprit, ranking: a list,
    first the most suspected); also their hit counts (n_top1, n_top3)."""
    if ranking.empty:
        return {"culprit_top1": float("nan"), "culprit_top3": float("nan"), "fault_windows": 0,
                "n_top1": 0, "n_top3": 0}
    top1 = [bool(r) and r[0] == n for r, n in zip(ranking["ranking"], ranking["node"], strict=True)]
    top3 = [n in r[:3] for r, n in zip(ranking["ranking"], ranking["node"], strict=True)]
    return {"culprit_top1": float(np.mean(top1)), "culprit_top3": float(np.mean(top3)),
            "fault_windows": len(ranking), "n_top1": int(np.sum(top1)), "n_top3": int(np.sum(top3))}


def score(result: PathsResult, trace: Trace,
          infer: Callable[[pd.DataFrame], PathsResult] | None = None,
          share: float = SHARE) -> dict[str, object]:
    """One row of paths-score.csv (SCORE_COLUMNS). `infer` (the algorithm with its parameters) is
    needed for the diagnosis, which reruns it per fault window; without it the culprit columns are
    NaN."""
    row = score_parts(result, trace, infer, share)
    return {c: row.get(c, float("nan")) for c in SCORE_COLUMNS}


def score_parts(result: PathsResult, trace: Trace,
                infer: Callable[[pd.DataFrame], PathsResult] | None = None,
                share: float = SHARE, ranking: pd.DataFrame | None = None) -> dict[str, object]:
    """score's row with each rate's numerator and denominator beside it (keys n_*), which pool over
    runs; `ranking` (culprit_ranking's) when already made."""
    true = true_patterns(trace)
    row: dict[str, object] = {"algorithm": result.algorithm}
    row.update(pattern_scores(result, true, share))
    row.update(request_scores(result, trace))
    row.update(delay_scores(result, true_node_delays(trace), true, share))
    row.update(node_delay_scores(result, trace))
    if ranking is None:
        ranking = culprit_ranking(trace, infer) if infer is not None else pd.DataFrame()
    row.update(culprit_scores(ranking))
    return row
