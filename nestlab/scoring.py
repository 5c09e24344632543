"""`nestlab.score(runs, predictions)`: the accuracy table of predictions made anywhere (another tool,
a notebook, R), scored against the lab's ground truth exactly as `nestlab accuracy` scores a variant.

The scikit-learn analogy (docs/api.md): a run's labels (`run.labels()`, a labelling policy) are y_true,
the predictions y_pred, and score() is the scorer; a rule system (docs/plugins.md) is the estimator,
whose predictions the lab makes itself.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import studies
from analysis.evaluation import Evaluation
from analysis.labels import parse_policy
from analysis.render.writers import accuracy_csv_frame, per_run_csv_frame, study_tables
from analysis.score.counting import join_labels, module_counts
from analysis.variants import LABELS
from rundir.errors import UserError

KEYS = ("dir", "module", "seq")


def score(runs, predictions: pd.DataFrame, policy: str | None = None, per_run: bool = False,
          name: str = "predictions") -> pd.DataFrame:
    """The accuracy table (accuracy.csv's rows; per_run=True: per_run.csv's) of `predictions`, a frame of
    `dir` ('in' | 'out'), `module` (run.db id), `seq` and either `positive` (bool) or `label` (one of
    HEALTHY, DONTCARE, BLOCKED, STALLED; positive = STALLED); with `run` (a run's directory or name; one several runs share is refused)
    when there are several runs, and `variant` to score several predictors at once (default: `name`).
    A row of a run's counters with no prediction counts as predicted negative (how many: the
    frame's attrs["unpredicted"]); the rows the lab leaves out of every score (invalid deltas, the
    policy's exclusions) are left out here too."""
    from nestlab.api import _runs

    runs = _runs(runs)
    pol = parse_policy(policy if policy is not None else studies.of_runs([r.path for r in runs]).policy)
    p = _checked(predictions, len(runs), name)
    by_key: dict[str, list] = {}   # a run by its directory, name (experiment/run) or directory's name
    for r in runs:
        for k in {str(r.path), r.name, r.path.name}:
            by_key.setdefault(k, []).append(r)
    if "run" in p:
        named = set(p["run"].astype(str))
        unknown = sorted(named - set(by_key))
        if unknown:
            raise UserError(f"predictions: run {unknown[0]!r} is none of the runs given "
                            f"({', '.join(r.name for r in runs)})")
        ambiguous = sorted(k for k in named if len(by_key[k]) > 1)
        if ambiguous:   # e.g. r0 of two experiments: which one is not for us to guess
            raise UserError(f"predictions: run {ambiguous[0]!r} names {len(by_key[ambiguous[0]])} of the runs given "
                            f"({', '.join(r.name for r in by_key[ambiguous[0]])}); name it by its directory")
        p["run"] = [str(by_key[k][0].path) for k in p["run"].astype(str)]
    else:
        p["run"] = str(runs[0].path)
    variants = list(dict.fromkeys(p["variant"]))
    parts, unpredicted, unmatched = [], 0, 0
    for r in runs:
        labels, counts = _labels(r, pol), []
        mine = p[p["run"] == str(r.path)]
        for v in variants:
            pv = mine[mine["variant"] == v]
            diag, missing, extra = _aligned(labels, pv, v)
            unpredicted += missing
            unmatched += extra
            counts.append(module_counts(join_labels(diag, labels)))
        c = pd.concat(counts, ignore_index=True)
        c["run"] = str(r.path)
        c["kind"] = r.modules["kind"].reindex(c["module"]).to_numpy()
        c["rows"] = r.modules["rows"].reindex(c["module"]).to_numpy()
        parts.append(c)
    cols = ["run", "variant", "dir", "module", "kind", "rows", "TP", "TN", "FP", "FN"]
    ev = Evaluation(pd.concat(parts, ignore_index=True)[cols], variants, pol.name, [r.path for r in runs])
    if per_run:
        out = per_run_csv_frame(ev)
    else:
        out = accuracy_csv_frame(study_tables(ev), pol.name, {v: ev.across(v) for v in variants})
    out.attrs["unpredicted"] = unpredicted
    out.attrs["unmatched"] = unmatched
    return out


def _checked(predictions, n_runs: int, name: str) -> pd.DataFrame:
    if not isinstance(predictions, pd.DataFrame):
        raise UserError(f"predictions: expected a pandas DataFrame, got {type(predictions).__name__}")
    missing = [c for c in KEYS if c not in predictions]
    if missing or not ({"positive", "label"} & set(predictions)):
        raise UserError(f"predictions: needs columns {', '.join(KEYS)} and positive or label; missing "
                        f"{', '.join(missing + ([] if {'positive', 'label'} & set(predictions) else ['positive|label']))}")
    if n_runs > 1 and "run" not in predictions:
        raise UserError(f"predictions: a column `run` is needed with {n_runs} runs")
    p = predictions.copy()
    if "positive" in p:
        pos = p["positive"]
        if pos.isna().any():
            raise UserError("predictions: `positive` has missing values")
        if not _truth_values(pos):   # astype(bool) would make the text "False" positive
            raise UserError(f"predictions: `positive` must be True/False (or 1/0), not {pos.dtype} values "
                            f"such as {pos.iloc[0]!r}")
        p["positive"] = pos.astype(bool)
    else:
        bad = sorted(set(p["label"].dropna().astype(str)) - set(LABELS)) or (["<missing>"] if p["label"].isna().any() else [])
        if bad:
            raise UserError(f"predictions: label {bad[0]!r} is not one of {', '.join(LABELS)}")
        p["positive"] = p["label"].astype(str).to_numpy() == "STALLED"
    if not p["dir"].astype(str).isin(["in", "out"]).all():
        raise UserError("predictions: `dir` must be 'in' or 'out'")
    p["dir"] = p["dir"].astype(str)
    for col in ("module", "seq"):   # run.db ids and snapshot numbers: whole numbers, nothing else
        v = pd.to_numeric(p[col], errors="coerce")
        if v.isna().any() or not (v == v.round()).all():
            bad = p[col][v.isna() | (v != v.round())].iloc[0]
            raise UserError(f"predictions: `{col}` must be whole numbers (run.db ids, snapshot seqs), not {bad!r}")
        p[col] = v.astype("int64")
    p["variant"] = p["variant"].astype(str) if "variant" in p else name
    return p


def _truth_values(col: pd.Series) -> bool:
    if pd.api.types.is_bool_dtype(col):
        return True
    if pd.api.types.is_integer_dtype(col) or pd.api.types.is_float_dtype(col):
        return bool(col.isin([0, 1]).all())
    return bool(col.map(lambda v: isinstance(v, bool | np.bool_)).all())


def _labels(run, pol) -> pd.DataFrame:
    """The run's counters with the policy's labels, its unscored rows (a damaged run) excluded, as the
    pipeline labels them (analysis.pipeline.diagnose_label_score)."""
    data = run.data
    labels = pol.label(data)
    unscored = getattr(data, "unscored", None)
    if unscored is not None and unscored.any():
        labels = labels.assign(exclude=labels["exclude"].to_numpy(bool) | unscored)
    return data.counters.join(labels)


def _aligned(labels: pd.DataFrame, pv: pd.DataFrame, variant: str) -> tuple[pd.DataFrame, int, int]:
    """A diagnosis-like frame (variant, dir, module, seq, positive, invalid) on the labels' rows, with
    the predictions' positives; (frame, rows without a prediction, predictions on no row)."""
    keys = pd.MultiIndex.from_arrays([labels["dir"].astype(str), labels["module"].to_numpy(np.int64),
                                      labels["seq"].to_numpy(np.int64)])
    pk = pd.MultiIndex.from_arrays([pv["dir"], pv["module"].to_numpy(np.int64), pv["seq"].to_numpy(np.int64)])
    if pk.has_duplicates:
        first = pk[pk.duplicated()][0]
        raise UserError(f"predictions: two rows for {variant} dir={first[0]} module={first[1]} seq={first[2]}")
    at = pk.get_indexer(keys)
    found = at >= 0
    positive = np.zeros(len(labels), dtype=bool)
    positive[found] = pv["positive"].to_numpy(bool)[at[found]]
    diag = pd.DataFrame({"variant": variant, "dir": labels["dir"].to_numpy(), "module": labels["module"].to_numpy(),
                         "seq": labels["seq"].to_numpy(), "positive": positive,
                         "invalid": labels["invalid"].to_numpy(bool)})
    return diag, int((~found).sum()), int(len(pv) - found.sum())
