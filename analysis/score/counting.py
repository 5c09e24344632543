"""Counting: TP, TN, FP and FN per variant, direction and module of one run, from its diagnosis and
its labels (the score step of analysis.pipeline; analysis.score.accuracy turns the counts into rates and
table rows).

Two ways, the same counts row for row:
- `module_counts(join_labels(diagnose_run(...), labels))`: the variants' long frame joined with the
  labels (kept when a caller wants the scored frame: figures, reports);
- `fast_counts(data, diags, names, labels)`: straight from the variants' arrays, the labels being
  aligned with the counters row for row (no long frame of every variant's rows).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.model.long_frame import in_series_order
from analysis.model.stretches import DIRS


def fast_counts(data, diags, names: list[str], labels: pd.DataFrame) -> pd.DataFrame | None:
    """module_counts(join_labels(diagnose_run(...), labels)) without the long frame: the counters'
    rows (analysis.load.counters_frame) and every variant's arrays are both stretch by stretch,
    direction by direction, module by module, snapshot by snapshot, so labels[i] is the label of
    each variant's i-th cell. None (use the join) when that alignment cannot be shown here: rows
    that are not the stretches' cells one to one, or a cell that occurs twice.

    A segment is one module's snapshots in one stretch and direction (contiguous rows); a group is a
    direction and module. Per group, the rows kept (a sum per segment), and per variant its positives
    and the actual positives among the rows kept, counted at those rows alone; TN is the rest."""
    stretches = [sd.stretch for sd in diags]
    if not stretches:
        return None
    if not in_series_order(stretches):   # else a cell could occur twice
        return None
    nd = len(DIRS)
    seg_mod = np.concatenate([np.asarray(st.modules, dtype=np.int64) for st in stretches for _ in DIRS])
    seg_len = np.concatenate([np.full(st.n, st.t, dtype=np.int64) for st in stretches for _ in DIRS])
    seg_dir = np.concatenate([np.full(st.n, di, dtype=np.int64) for st in stretches for di in range(nd)])
    seg_k = np.concatenate([np.full(st.n, k, dtype=np.int64) for k, st in enumerate(stretches) for _ in DIRS])
    seg_i = np.concatenate([np.arange(st.n, dtype=np.int64) for st in stretches for _ in DIRS])
    total = int(seg_len.sum())
    if len(labels) != total:
        return None
    own = data.counter_stretches()
    mine, theirs = ([st for st in x if st.n * st.t] for x in (own or [], stretches))
    if own is None or len(mine) != len(theirs) or any(a is not b for a, b in zip(mine, theirs, strict=True)):
        # The counters' rows are a frame given or made apart from these stretches: show the alignment.
        c = data.counters
        if len(c) != total:
            return None
        dir_codes = c["dir"].cat.codes if isinstance(c["dir"].dtype, pd.CategoricalDtype) and \
            list(c["dir"].cat.categories) == list(DIRS) else pd.Categorical(c["dir"], categories=list(DIRS)).codes
        if not (np.array_equal(np.repeat(seg_mod, seg_len), c["module"].to_numpy(np.int64))
                and np.array_equal(np.concatenate([np.tile(st.seqs, st.n) for st in stretches for _ in DIRS]),
                                   c["seq"].to_numpy(np.int64))
                and np.array_equal(np.repeat(seg_dir, seg_len), np.asarray(dir_codes, dtype=np.int64))):
            return None
    # else the rows are counters_frame(these stretches), made when first asked for: aligned as made
    ids = np.unique(seg_mod)
    seg_group = seg_dir * len(ids) + np.searchsorted(ids, seg_mod)
    ngroups = nd * len(ids)
    invalid = np.concatenate([st.counters[d].invalid.ravel() for st in stretches for d in DIRS])
    kept = ~(labels["exclude"].to_numpy(bool) | invalid)
    actual = labels["actual"].to_numpy(bool)
    starts = np.concatenate([[0], np.cumsum(seg_len)[:-1]])
    nonempty = seg_len > 0
    seg_any = np.zeros(len(seg_len), dtype=bool)
    seg_any[nonempty] = np.logical_or.reduceat(kept, starts[nonempty]) if total else False
    present, first = np.unique(seg_group[seg_any], return_index=True)   # a group's first segment with a row kept
    if not len(present):
        return module_counts(pd.DataFrame({"variant": pd.Series([], dtype=str), "dir": pd.Series([], dtype=str),
                                           "module": pd.Series([], dtype=np.int64),
                                           "actual": pd.Series([], dtype=bool), "positive": pd.Series([], dtype=bool),
                                           "exclude": pd.Series([], dtype=bool)}))
    where = np.flatnonzero(seg_any)[first]
    # Per group: the rows kept, and among them the positives and the actual positives, counted where they
    # are; TN is what remains. Each row's group (segments are consecutive rows) in 32 bits.
    row_group = np.repeat(seg_group.astype(np.int32), seg_len)

    def per_group(rows: np.ndarray) -> np.ndarray:
        """How many of `rows` each group present has."""
        return np.bincount(row_group[rows], minlength=ngroups)[present]

    kept_per_seg = np.add.reduceat(kept, starts[nonempty], dtype=np.int64) if total else np.zeros(0, np.int64)
    kept_n = np.bincount(seg_group[nonempty], weights=kept_per_seg, minlength=ngroups).astype(np.int64)[present]
    act = actual & kept
    cols = {"TP": [], "TN": [], "FP": [], "FN": []}
    for name in names:
        pos = np.concatenate([sd.results[name][d][1].ravel() for sd in diags for d in DIRS]) & kept
        hit = np.flatnonzero(pos)
        yes = actual[hit]
        tp, fp = per_group(hit[yes]), per_group(hit[~yes])
        fn = per_group(np.flatnonzero(act & ~pos))
        cols["TP"].append(tp)
        cols["FP"].append(fp)
        cols["FN"].append(fn)
        cols["TN"].append(kept_n - tp - fp - fn)
    # The join's groups come in the order of their first row in diagnose_run's frame: stretch, variant,
    # direction, module (the module's first segment with a row kept, in the counters' order).
    nv, ng = len(names), len(present)
    vi = np.repeat(np.arange(nv), ng)
    g_dir, g_mod = present // len(ids), ids[present % len(ids)]
    order = np.lexsort((np.tile(seg_i[where], nv), np.tile(g_dir, nv), vi, np.tile(seg_k[where], nv)))
    frame = pd.DataFrame({
        "variant": np.asarray(names, dtype=object)[vi][order],
        "dir": np.asarray(DIRS, dtype=object)[np.tile(g_dir, nv)][order],
        "module": np.tile(g_mod, nv)[order].astype(np.int64),
        **{col: np.concatenate(v).astype(np.int64)[order] for col, v in cols.items()}})
    return frame   # one row per variant, direction and module (`present` holds each group once)


JOIN_CHUNK = 1 << 18   # diag's rows looked up at a time: the temporaries stay small (a report's has millions)


def join_labels(diag: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """diagnose_run's frame with the labels (actual, exclude, cause, fault) of its rows added: each
    row takes the first labels row of its module, snapshot and direction (none: not actual,
    excluded, cause "invalid")."""
    if diag.empty:
        return diag.assign(actual=pd.Series(dtype=bool), exclude=pd.Series(dtype=bool))
    seq_span = int(max(diag["seq"].max(), labels["seq"].max() if len(labels) else 0)) + 1

    def key(module, seq, out):
        return (module * seq_span + seq) * 2 + out

    out = diag.copy(deep=False)   # copy on write: the new columns never reach diag
    if not len(labels):
        out["actual"] = False
        out["exclude"] = True
        if "cause" in labels:   # as the general case would (an empty labels' value taken: IndexError)
            out["cause"] = pd.Categorical(labels["cause"].astype(str).to_numpy()[np.zeros(len(diag), np.intp)])
        return out
    lk = key(labels["module"].to_numpy(np.int64), labels["seq"].to_numpy(np.int64), _is_out(labels["dir"]))
    # stable: a key twice is its first row; and the labels come as runs of rising keys (a module's
    # snapshots), which numpy's stable sort (timsort) takes 5x quicker than quicksort
    order = np.argsort(lk, kind="stable")
    lk = lk[order]
    actual_s = labels["actual"].to_numpy(bool)[order]
    exclude_s = labels["exclude"].to_numpy(bool)[order]
    cause = None
    if "cause" in labels:
        codes, uniq = pd.factorize(labels["cause"], use_na_sentinel=False)
        codes = codes.astype(np.int8 if len(uniq) < 127 else np.int32)[order]
        cause = np.empty(len(diag), dtype=codes.dtype)
    n, last = len(diag), len(lk) - 1
    mod, seq = diag["module"].to_numpy(np.int64), diag["seq"].to_numpy(np.int64)
    dout, invalid = _is_out(diag["dir"]), diag["invalid"].to_numpy(bool)
    actual, exclude = np.empty(n, dtype=bool), np.empty(n, dtype=bool)
    for a in range(0, n, JOIN_CHUNK):
        b = min(n, a + JOIN_CHUNK)
        dk = key(mod[a:b], seq[a:b], dout[a:b])
        pos = np.minimum(np.searchsorted(lk, dk), last)
        found = lk[pos] == dk
        actual[a:b] = found & actual_s[pos]
        exclude[a:b] = ~found | exclude_s[pos] | invalid[a:b]
        if cause is not None:
            cause[a:b] = np.where(found, codes[pos], len(uniq))
    out["actual"] = actual
    out["exclude"] = exclude
    if cause is not None:
        out["cause"] = _cause(labels["cause"], uniq, cause)
    return out


def _is_out(d: pd.Series) -> np.ndarray:
    """True where a direction is "out" (by codes when it is the usual categorical)."""
    if isinstance(d.dtype, pd.CategoricalDtype) and "out" in d.cat.categories:
        return d.cat.codes.to_numpy() == d.cat.categories.get_loc("out")
    return (d == "out").to_numpy(bool)


def _cause(cause: pd.Series, uniq, idx: np.ndarray) -> pd.Categorical:
    """pd.Categorical of the rows' causes as strings (cause.astype(str)), idx: each row's index into
    `uniq` (cause's distinct values), len(uniq) for "invalid". The strings are made for the distinct
    values only, and the categories (those seen, sorted) by the same constructor from one of each."""
    k = len(uniq)
    strs = pd.Series(uniq, dtype=cause.dtype).astype(str).to_numpy()
    # each distinct value, then "invalid", made as a per-row np.where(found, strings, "invalid") would
    values = np.where(np.arange(k + 1) < k, np.concatenate([strs, strs[:1]]), "invalid")
    seen = np.flatnonzero(np.bincount(idx, minlength=k + 1))
    small = pd.Categorical(values[seen])
    remap = np.full(k + 1, -1, dtype=idx.dtype)
    remap[seen] = small.categories.get_indexer(values[seen])
    return pd.Categorical.from_codes(remap[idx], dtype=small.dtype, validate=False)


def module_counts(scored: pd.DataFrame) -> pd.DataFrame:
    """TP, TN, FP, FN per variant, direction and module, from join_labels' frame (excluded rows out):
    the groups in the order of their first row, as a groupby that keeps order gives them. By codes on
    the columns' arrays (a report's frame has millions of rows per variant: no strings per row, no
    copy of the frame)."""
    keep = ~scored["exclude"].to_numpy(bool)
    a = scored["actual"].to_numpy(bool)[keep]
    p = scored["positive"].to_numpy(bool)[keep]
    codes, names = [], []
    for col in ("variant", "dir", "module"):
        c, u = pd.factorize(scored[col], sort=False)
        codes.append(c[keep].astype(np.int64))
        names.append(u)
    key = (codes[0] * len(names[1]) + codes[1]) * len(names[2]) + codes[2]
    del codes
    group, keys = pd.factorize(key, sort=False)   # groups by their first row kept
    del key
    keys = np.asarray(keys, dtype=np.int64)
    n = len(keys)
    c4 = np.bincount(group * 4 + (a * 2 + p), minlength=4 * n).reshape(n, 4)   # actual * 2 + positive
    mod = keys % len(names[2])
    vd = keys // len(names[2])
    return pd.DataFrame({"variant": np.array([str(x) for x in names[0]], dtype=object)[vd // len(names[1])],
                         "dir": np.array([str(x) for x in names[1]], dtype=object)[vd % len(names[1])],
                         "module": np.asarray(names[2], dtype=np.int64)[mod],
                         **{k: c4[:, i].astype(np.int64) for k, i in (("TP", 3), ("TN", 0), ("FP", 1), ("FN", 2))}})
