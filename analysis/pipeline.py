"""The analysis pipeline: load -> diagnose -> label -> score -> render.

    evaluate(runs, variants, policy) -> Evaluation
        for each run: load (analysis.load: rundir's readers, stretches and frames), diagnose
        (analysis.diagnose: every variant over the stretches), label (analysis.labels: the ground
        truth of a policy), score (join the two, count TP/TN/FP/FN per module; analysis.score turns
        counts into the table rows of analysis.rows). The Evaluation holds the counts of every run.
    summarize(run) -> Evaluation, summarize_run(run) -> Path
        the same for one run, then render (analysis.render: tables as Markdown/CSV/LaTeX, figures,
        the HTML report) into <run>/analysis/.

Many runs at once: evaluate(..., jobs=N) analyses the runs in N worker processes (each takes one run
at a time and keeps nothing of it once done, so memory stays bounded by one loaded run per worker).
The workers come from a fork server (multiprocessing's forkserver, this module preloaded), never
from a fork of the calling process: a process that has threads (pyarrow's pool, a caller's) may
hold a lock at the fork, which a forked child would wait for forever (seen in the test suite). A
worker hands back what the serial path keeps of a run (its counts, health, warnings), never the
loaded run, and the results are assembled in the order of the runs, so the Evaluation is the serial
one. (A fresh process per run, maxtasksperchild=1, measured 1.5-2x slower here on 15-minute runs
for the same peak: a process's first run costs more than its next ones.) keep=True (figures,
reports: they need each run's frames) is always serial.

Scoring without keep counts TP/TN/FP/FN straight from the variants' arrays (_fast_counts: the
labels are aligned with the counters row for row) instead of joining a long frame of every
variant's rows; the counts are the same frame module_counts(join_labels(...)) gives, row for row.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import signal
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.diagnose import as_variants, diagnose_run, diagnose_stretches
from analysis.evaluation import Evaluation
from analysis.health import network_health
from analysis.labels import parse_policy
from analysis.load import load_run_data
from analysis.model.long_frame import in_series_order
from analysis.model.stretches import DIRS
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
             policy=None, keep: bool = False, on_warning=None, skip_bad: bool = False, jobs: int = 1,
             on_run=None) -> Evaluation:
    """Diagnose, label and count each run. keep=True keeps each run's data and scored frame (plots).

    on_warning(run_name, message) is called for each warning about a run (default: collected only).
    skip_bad=True skips a run that cannot be analysed (no snapshots, no run.db, a damaged file, or any
    failure the analysis did not expect) with a warning instead of raising UserError (Evaluation.skipped);
    UserError is still raised when no run at all could be analysed. Every failure of a run is one
    line (rundir.runs.guarded), never a traceback.

    jobs > 1 analyses the runs in that many worker processes (module docstring; not with keep=True);
    on_run(k, n, run) is called as the k-th of n runs is done (in the order they finish).
    """
    vs = as_variants(variants)
    names = [v.name for v in vs]
    pol = parse_policy(policy)
    runs = list(runs)
    jobs = max(1, min(int(jobs or 1), len(runs)))

    def done(k: int, r, res: RunResult) -> bool:
        """Say what a run warned as it is done; False: stop (a run failed and skip_bad is off)."""
        if on_warning:
            for name, message in res.warnings:
                on_warning(name, message)
            if res.error is not None and skip_bad:
                on_warning(str(r), f"skipped: {_skip_text(r, res.error)}")
        if on_run:
            on_run(k, len(runs), r)
        return res.error is None or skip_bad

    if keep or jobs == 1:
        results = _serial(runs, vs, pol, keep, done)
    else:
        results = _parallel(runs, vs, pol, jobs, done)
    parts, paths, warnings = [], [], []
    ev = Evaluation(pd.DataFrame(), names, pol.name, paths, warnings)
    for r, res in zip(runs, results, strict=False):
        warnings += [f"{name}: {message}" for name, message in res.warnings]
        if res.error is not None:
            if not skip_bad:
                raise UserError(res.error)
            msg = _skip_text(r, res.error)
            warnings.append(f"{r}: skipped: {msg}")
            ev.skipped.append((Path(r), msg))
            continue
        ev.overlap_rows += res.overlap
        ev.straddle_rows += int(res.counts.attrs.get("straddle", 0))
        if res.health is not None:
            ev.health[res.path] = res.health
        ev.run_warnings[res.path] = [m for _, m in res.warnings]
        parts.append(res.counts)
        paths.append(res.path)
        if keep:
            ev.data[res.path] = res.data
            ev.scored[res.path] = res.scored
    if skip_bad and runs and not parts:
        raise UserError(f"none of the {len(runs)} runs could be analysed")
    cols = ["run", "variant", "dir", "module", "kind", "rows", "TP", "TN", "FP", "FN"]
    ev.counts = pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)
    return ev


@dataclasses.dataclass
class RunResult:
    """What evaluate keeps of one run: small (a worker process sends it back), plus the run's data
    and scored frame with keep=True."""

    path: Path | None = None
    counts: pd.DataFrame | None = None
    overlap: int = 0
    health: object = None
    warnings: list = dataclasses.field(default_factory=list)   # (run name, message)
    error: str | None = None    # the one line of a run that could not be analysed
    data: object = None
    scored: object = None


def evaluate_one(r, vs, pol, keep: bool = False) -> RunResult:
    """Load, diagnose, label and score one run (the serial path and each worker call this)."""
    res = RunResult()

    def warn(name: str, message: str) -> None:
        res.warnings.append((name, message))

    try:
        info = guarded(r, open_run, r)
        data = guarded(r, load_run_data, info)
        for w in data.warnings:
            warn(info.name, w)
        counts, scored, overlap, health = guarded(r, diagnose_label_score, data, vs, pol, warn, keep)
    except UserError as e:
        res.error = str(e)
        return res
    res.path, res.counts, res.overlap, res.health = info.path, counts, overlap, health
    if keep:
        res.data, res.scored = data, scored
    return res


def _skip_text(r, error: str) -> str:
    return error.removeprefix(f"{r}: ").removeprefix(f"{Path(r)}: ")


def _serial(runs, vs, pol, keep, done) -> list[RunResult]:
    out = []
    for k, r in enumerate(runs, 1):
        out.append(evaluate_one(r, vs, pol, keep))
        if not done(k, r, out[-1]):
            break
    return out


def _work(task: tuple) -> tuple[int, RunResult]:
    i, run, vs, pol = task
    return i, evaluate_one(run, vs, pol)


def _quiet_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's: it ends the pool
    # Pool.terminate() ends the workers with SIGTERM: a forked worker must not keep a handler of the
    # parent's (a runner's or a suite's, which only note the signal) nor a mask that holds it, or
    # terminate() waits for it forever (seen: a test session hung in Pool.join).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _parallel(runs, vs, pol, jobs: int, done) -> list[RunResult]:
    """The runs in `jobs` worker processes, each analysing one run at a time; results in the runs'
    order, up to the first that failed when done() says stop (the rest are not waited for)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["analysis.pipeline"])
    out: list[RunResult | None] = [None] * len(runs)
    pool = ctx.Pool(jobs, initializer=_quiet_worker)
    try:
        tasks = [(i, r, vs, pol) for i, r in enumerate(runs)]
        for k, (i, res) in enumerate(pool.imap_unordered(_work, tasks), 1):
            out[i] = res
            if not done(k, runs[i], res):
                return [res]   # evaluate raises its error
        pool.close()
    finally:
        pool.terminate()   # closed: the workers have exited; else (an error, Ctrl-C): end them now
        pool.join()
    return out   # type: ignore[return-value]


def diagnose_label_score(data, vs, pol, warn, keep: bool = True):
    """(counts, scored, overlap rows, health or None) of one run read by load_run_data; scored is
    None unless keep (the counts then come from _fast_counts where it applies)."""
    name = data.info.name
    # diagnose
    diags = diag = None
    if data.run.stretches:
        if keep:
            diag = diagnose_run(data.run, vs)
        else:
            diags = diagnose_stretches(data.run, vs)
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
    scored = None
    counts = _fast_counts(data, diags, [v.name for v in vs], labels) if diags is not None else None
    if counts is None:
        if diag is None:
            diag = diagnose_run(data.run, vs)
        scored = join_labels(diag, data.counters.join(labels))
        counts = module_counts(scored)
    mods = data.modules
    counts.attrs["straddle"] = int((labels["cause"] == "straddle").sum())   # streams: analysis.labels_streams
    counts["run"] = str(data.info.path)
    counts["kind"] = mods["kind"].reindex(counts["module"]).to_numpy()
    counts["rows"] = mods["rows"].reindex(counts["module"]).to_numpy()
    return counts, (scored if keep else None), overlap, health


def _fast_counts(data, diags, names: list[str], labels: pd.DataFrame) -> pd.DataFrame | None:
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


def _empty_diagnosis() -> pd.DataFrame:
    return pd.DataFrame({"variant": pd.Categorical([]), "dir": pd.Categorical([], categories=["in", "out"]),
                         "module": pd.Series([], dtype=np.int64), "kind": pd.Categorical([]),
                         "seq": pd.Series([], dtype=np.int64), "label": pd.Categorical([]),
                         "cf": pd.Series([], dtype=float), "positive": pd.Series([], dtype=bool),
                         "invalid": pd.Series([], dtype=bool)})


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
    # The figures and the report (matplotlib, the HTML parts) are imported here: a table needs neither.
    from analysis.render import html as html_report
    from analysis.render import plots

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
