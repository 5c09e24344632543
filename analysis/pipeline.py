"""The analysis pipeline: load -> diagnose -> label -> score -> render.

    evaluate(runs, variants, policy) -> Evaluation
        for each run: load (analysis.load: rundir's readers, stretches and frames), diagnose
        (analysis.diagnose: every variant over the stretches), label (analysis.labels: the ground
        truth of a policy), score (analysis.score.counting: join the two, count TP/TN/FP/FN per module;
        analysis.score.accuracy turns the counts into the table rows of analysis.score.table_layout).
        The Evaluation holds the counts of every run.
    then render: analysis.render.summary.summarize(run) evaluates one run and writes its tables as
        Markdown/CSV/LaTeX, its figures and the HTML report into <run>/analysis/ (analysis.render).

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

Scoring without keep counts TP/TN/FP/FN straight from the variants' arrays (analysis.score.counting:
the labels are aligned with the counters row for row) instead of joining a long frame of every
variant's rows; the counts are the same frame module_counts(join_labels(...)) gives, row for row.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import signal
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from analysis import plugins, studies
from analysis.diagnose import as_variants, diagnose_run, diagnose_stretches, empty_diagnosis
from analysis.evaluation import Evaluation
from analysis.health import network_health
from analysis.labels import POLICIES, parse_policy
from analysis.load import load_run_data
from analysis.score.counting import fast_counts, join_labels, module_counts
from analysis.variants import DEFAULT_VARIANT, SYSTEMS, Variant
from rundir.errors import UserError
from rundir.runs import guarded, open_run

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

    jobs > 1 analyses the runs in that many worker processes (module docstring; not with keep=True, nor
    with a variant or policy defined in the caller's script, which a worker never imports);
    on_run(k, n, run) is called as the k-th of n runs is done (in the order they finish).
    """
    vs = as_variants(variants)
    names = [v.name for v in vs]
    runs = list(runs)
    # policy None: the runs' study kind's (analysis.studies; a service run's differs from the thesis's)
    pol = parse_policy(policy if policy is not None else studies.of_runs(runs).policy)
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

    if keep or jobs == 1 or not all(_travels(x) for x in (*vs, pol)):
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
    return i, evaluate_one(run, [_by_name(v) for v in vs], _by_name(pol))


def _named(thing):
    """A variant or policy as a worker finds it: by its registry name and parameter values when it is
    a registered one (a plug-in's objects never travel by pickle: the worker loads the plug-ins itself),
    else the object itself."""
    if isinstance(thing, Variant) and SYSTEMS.is_registered(thing.system):
        return ("variant", thing.system.name, dict(thing.params))
    if POLICIES.is_registered(type(thing)) and hasattr(thing, "values"):
        return ("policy", type(thing).system, dict(thing.values))
    return thing


def _by_name(thing):
    if isinstance(thing, tuple) and len(thing) == 3 and thing[0] == "variant":
        return Variant(SYSTEMS[thing[1]], thing[2])
    if isinstance(thing, tuple) and len(thing) == 3 and thing[0] == "policy":
        return POLICIES[thing[1]](**thing[2])
    return thing


def _travels(thing) -> bool:
    """A worker can have it: registered (found by name), or an object defined in an importable module
    (never in the caller's script, which a worker does not import)."""
    if _named(thing) is not thing:
        return True
    fn = thing.system.diagnose if isinstance(thing, Variant) else type(thing)
    fn = getattr(fn, "rule", fn)   # a rule on the simple interface (analysis.variants.simple)
    module = getattr(fn, "__module__", None) or getattr(type(fn), "__module__", "__main__")
    return module not in ("__main__", "__mp_main__") and "<lambda>" not in getattr(fn, "__qualname__", "")


@contextlib.contextmanager
def _main_not_imported():
    """Workers that never import the caller's script: multiprocessing re-runs a script's top level in
    each worker (as __mp_main__) when __main__ has a file or a module spec, which respawns workers
    without end from a script that lacks an `if __name__ == "__main__"` guard. What a worker needs
    (the analysis, the plug-ins) it loads itself."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        for k in saved:
            if k == "__spec__":
                main.__spec__ = None
            else:
                del main.__dict__[k]
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)


def _quiet_worker(plugin_files: list[str]) -> None:
    plugins.quiet()   # the parent reports the plug-ins' problems
    plugins.add_files(plugin_files)
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
    with _main_not_imported():
        pool = ctx.Pool(jobs, initializer=_quiet_worker, initargs=([str(p) for p in plugins.files()],))
    try:
        tasks = [(i, r, [_named(v) for v in vs], _named(pol)) for i, r in enumerate(runs)]
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
    None unless keep (the counts then come from fast_counts where it applies)."""
    name = data.info.name
    # diagnose
    diags = diag = None
    if data.run.stretches:
        if keep:
            diag = diagnose_run(data.run, vs)
        else:
            diags = diagnose_stretches(data.run, vs)
    else:  # snapshots but no counters: nothing to diagnose (the engine needs at least one stretch)
        diag = empty_diagnosis()
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
    counts = fast_counts(data, diags, [v.name for v in vs], labels) if diags is not None else None
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
