"""`nestlab paths RUNS | --trace FILE | --jaeger PATH... | --otlp PATH... [-a A]... [--export FILE]`: black-box
causal path inference from message traces (docs/blackbox.md). `-a` is repeatable, takes
comma-separated names, and `all`; `--jaeger`/`--otlp` take one trace set (a file or a directory of
them) per PATH. `--jobs N` (default the machine's cores) runs work at once in forked processes, what
is printed and written unchanged: with one trace, its algorithms after one import; with several
(runs, or several PATHs), the traces, each imported and analysed whole in one worker.

Prints each trace's dominant path patterns as call trees with their delays (WAP5 figure 9) and
writes paths.csv (source, algorithm, rank, pattern, count, share, <node>_ms per node) and, where the
trace carries its truth (Maketrace, a Jaeger export, a run with `requests`), paths-score.csv (source
and analysis.paths.score.SCORE_COLUMNS: algorithm, pattern_recall, pattern_precision, rare_recall,
rare_precision, request_recall, request_accuracy, mapping_accuracy, call_accuracy, count_error_pct, delay_error_ms,
delay_error_pct, node_delay_error_ms, node_delay_error_pct, culprit_top1, culprit_top3, ...) and
paths-services.csv (source, algorithm, service, messages, mapping_accuracy: per sending service).
Warnings about the input (damaged rows, unpaired messages) go to stderr.

What it writes goes through the project's output guards (as `compare` and `dump` write): the output
directory is refused when it is a symbolic link (a run whose analysis/ links elsewhere), a link
planted at a file's name is replaced, never followed, and a CSV text cell a spreadsheet would take for
a formula gets a leading quote (dump's guard). Node names and labels reach the terminal with control
characters escaped and rich markup shown as written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pandas as pd
from rich.console import Console

from analysis.paths.accuracy import service_mapping
from analysis.paths.algorithms import ALGORITHMS, algorithm, parse_params
from analysis.paths.export import write_export
from analysis.paths.model import Trace
from analysis.paths.parallel import COST, iter_tasks
from analysis.paths.readers import read_faults_file, read_jaeger, read_otlp, read_run, read_trace_file
from analysis.paths.render import call_tree, paths_frame, plain_text, shown_text
from analysis.paths.score import SCORE_COLUMNS, score
from nestlab.commands.dump import FORMULA_START, _no_formulas
from nestlab.commands.jobs import cores
from rundir.errors import UserError
from rundir.layout import RunDir, fresh, output_dir
from rundir.runs import common_root, find_runs, guarded


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "paths", help="black-box causal paths from message traces: Project5 nesting and convolution, WAP5 "
                      "linking (docs/blackbox.md)",
        description="Infer the causal path patterns and per-node delays of a distributed application from "
                    "its message trace; print the dominant patterns as call trees; write paths.csv and, "
                    "where the truth is known, paths-score.csv.")
    p.add_argument("runs", nargs="*", metavar="RUNS",
                   help="run directories (with a messages table), directories of runs, globs or experiment names")
    p.add_argument("--trace", metavar="FILE", help="a message trace: CSV or Parquet (time, sender, receiver, "
                                                   "optionally kind call/return and a message id)")
    p.add_argument("--jaeger", metavar="PATH", nargs="+", action="extend",
                   help="Jaeger JSON exports: per PATH one trace, a file or a directory of them")
    p.add_argument("--otlp", metavar="PATH", nargs="+", action="extend",
                   help="OpenTelemetry OTLP JSON exports: per PATH one trace, a file or a directory of them")
    p.add_argument("--faults", metavar="FILE",
                   help="fault windows for --trace/--jaeger (CSV: node, start, stop in the trace's seconds; "
                        "for --jaeger the spans' epoch seconds): "
                        "scores the culprit question")
    p.add_argument("--algorithm", "-a", action="append", metavar="A[,B]",
                   help=f"one or more of {', '.join(ALGORITHMS)}, or all (repeatable, or comma-separated; "
                        "default nesting)")
    p.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="an algorithm parameter, named as the seeds name it (repeatable)")
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="work run at once in forked processes: several traces, each in one process; one "
                        "trace, its algorithms after one import (default: this machine's cores; 1: one "
                        "after another, in this process)")
    p.add_argument("--granularity", choices=("host", "process"), default="host",
                   help="runs: a node per host (default) or per process (host/pid), WAP5 2.5")
    p.add_argument("--top", type=int, default=5, metavar="N", help="call trees to print per trace (5)")
    p.add_argument("--no-score", action="store_true", help="do not score against the truth (faster)")
    p.add_argument("--results", default="results", metavar="DIR", help="results root for experiment names")
    p.add_argument("--export", metavar="DIR",
                   help="also write the true request paths (<source>-truth.json) and each algorithm's inferred "
                        "paths (<source>-<algorithm>.json) as span exports Jaeger's UI opens")
    p.add_argument("--export-format", choices=("jaeger", "otlp"), default="jaeger",
                   help="the exports' format: Jaeger JSON (default) or OTLP JSON")
    p.add_argument("--out", metavar="DIR",
                   help="where paths.csv and paths-score.csv go (default: the runs' common directory/analysis, "
                        "or the current directory for --trace/--jaeger)")
    p.set_defaults(func=_paths)


def _traces(args: argparse.Namespace) -> tuple[list[tuple[str, Callable[[], Trace]]], Path]:
    given = [bool(args.runs), args.trace is not None, args.jaeger is not None, args.otlp is not None]
    if sum(given) != 1:
        raise UserError("name the trace to analyse: RUNS, or --trace FILE, or --jaeger PATH, or --otlp PATH "
                        "(one of them)")
    if args.trace is not None:
        return [(args.trace, partial(guarded, args.trace, read_trace_file, args.trace))], Path(args.out or ".")
    for paths, reader in ((args.jaeger, read_jaeger), (args.otlp, read_otlp)):
        if paths is not None:
            return [(p, partial(guarded, p, reader, p)) for p in paths], Path(args.out or ".")
    runs = find_runs(args.runs, args.results)
    out = Path(args.out) if args.out else RunDir(common_root(runs)).analysis
    return [(str(r), partial(guarded, r, read_run, r, args.granularity)) for r in runs], out


def _paths(args: argparse.Namespace) -> int:
    if args.top < 0:
        raise UserError(f"--top {args.top}: give 0 or more")
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs {args.jobs}: give 1 or more")
    jobs = cores() if args.jobs is None else args.jobs
    names = algorithm_names(args.algorithm or ["nesting"])
    chosen = []
    for name in names:
        infer, defaults = algorithm(name)
        chosen.append((name, infer, defaults))
    known = set().union(*(d for _, _, d in chosen))
    for item in args.param or ():
        key = item.partition("=")[0].strip()
        if known and key not in known:
            raise UserError(f"--param {key}: no such parameter of {', '.join(names)} "
                            f"(known: {', '.join(sorted(known))})")
    params = {name: parse_params(args.param, defaults, name) for name, _, defaults in chosen}
    sources, out = _traces(args)
    output_dir(out)          # refused before any work when it is a symbolic link
    if args.export:
        output_dir(args.export)
    windows = read_faults_file(args.faults) if args.faults else None
    if windows is not None and args.runs:
        raise UserError("--faults goes with --trace, --jaeger or --otlp (a run's faults come from its faults "
                        "table)")
    console = Console(highlight=False, soft_wrap=True)   # long patterns and score lines stay whole
    path_rows, score_rows, service_rows = [], [], []
    run = partial(_analyse, chosen=chosen, params=params, windows=windows, scored=not args.no_score,
                  export=args.export, fmt=args.export_format, several=len(sources) > 1)
    if jobs > 1 and len(sources) > 1:
        # several traces: each imported and analysed whole in one worker, the largest started first
        done = (out for out, _ in iter_tasks([partial(run, label, load) for label, load in sources], jobs,
                                             [_size(label) for label, _ in sources]))
    else:
        done = (run(label, load, jobs=jobs, lazy=True) for label, load in sources)
    for (label, _), (warnings, n_messages, results) in zip(sources, done, strict=True):
        where = f"{label}: " if args.runs else ""     # a file's warnings name the file already
        for w in warnings:
            print(plain_text(f"warning: {where}{w}"), file=sys.stderr)
        where = f"{label}: " if args.runs or len(sources) > 1 else ""
        for (name, _, _), (result, row, services) in zip(chosen, results, strict=True):
            for w in result.warnings:
                print(plain_text(f"warning: {where}{name}: {w}"), file=sys.stderr)
            _show(console, label, name, result, args.top, n_messages)
            path_rows.append(paths_frame(result, label))
            if row is not None:
                score_rows.append({"source": label, **row})
                service_rows.append(services.assign(source=label, algorithm=name))
    output_dir(out)
    frames = [f for f in path_rows if not f.empty]
    paths = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["source", "algorithm", "rank", "pattern", "count", "share"])
    _csv_safe(paths).to_csv(fresh(out / "paths.csv"), index=False, float_format="%.6g")
    written = [out / "paths.csv"]
    if score_rows:
        _csv_safe(pd.DataFrame(score_rows, columns=["source", *SCORE_COLUMNS])).to_csv(
            fresh(out / "paths-score.csv"), index=False, float_format="%.6g")
        written.append(out / "paths-score.csv")
        services = [f for f in service_rows if not f.empty]
        if services:
            frame = pd.concat(services, ignore_index=True)[["source", "algorithm", "service", "messages",
                                                             "mapping_accuracy"]]
            _csv_safe(frame).to_csv(fresh(out / "paths-services.csv"), index=False, float_format="%.6g")
            written.append(out / "paths-services.csv")
        _show_scores(console, score_rows)
    console.print("wrote " + ", ".join(shown_text(w) for w in written))
    return 0


def _analyse(label: str, load: Callable[[], Trace], *, chosen, params, windows, scored: bool, export, fmt: str,
             several: bool, jobs: int = 1, lazy: bool = False):
    """(the trace's warnings, its message count, per algorithm (result, score row, per-service
    mapping)) of one trace: imported, exported (--export), each algorithm run (in `jobs` forked
    workers, else here) and its inferred paths exported. `lazy`: the results an iterator, each
    algorithm run as the caller asks for its result (printed as they come: a failure leaves the ones
    before printed); else a list (a --jobs worker's, analysing one trace among several whole)."""
    trace: Trace = load()
    if windows is not None:
        # a span export's times count from its first whole second; the windows are epoch seconds
        trace.faults = windows.assign(start=windows["start"] - trace.time_base,
                                      stop=windows["stop"] - trace.time_base)
    stem = _stem(label) if several else "paths"
    if export and trace.truth is not None:
        write_export(trace, trace.truth.cause, Path(export) / f"{stem}-truth.json", fmt)
    tasks = [partial(_one, label, partial(infer, **params[name]), trace, scored) for name, infer, _ in chosen]
    done = iter_tasks(tasks, jobs, [COST.get(name, 1.0) for name, _, _ in chosen])

    def results():
        for (name, _, _), (out, _) in zip(chosen, done, strict=True):
            if export and out[0].parent is not None:
                write_export(trace, out[0].parent, Path(export) / f"{stem}-{name}.json", fmt)
            yield out

    return trace.warnings, len(trace.messages), results() if lazy else list(results())


def _size(path: str) -> float:
    """Bytes of a trace's file, or of the files in its directory (a run's too): the cost hint that
    starts the largest traces first."""
    try:
        p = Path(path)
        return float(sum(f.stat().st_size for f in p.iterdir() if f.is_file()) if p.is_dir() else p.stat().st_size)
    except OSError:
        return 0.0


def _one(label: str, run: Callable, trace: Trace, scored: bool):
    """(result, its paths-score.csv row, its per-service mapping) of one algorithm on one trace (no
    score where the trace has no truth or scoring is off); run here or in a --jobs worker."""
    # whatever an algorithm did not expect of a damaged trace is one line, not a traceback
    result = guarded(label, run, trace.messages)
    if trace.truth is None or not scored:
        return result, None, None
    return result, guarded(label, score, result, trace, run), service_mapping(result, trace)


def _stem(label: str) -> str:
    """A file-name stem for a source: its last two path parts, joined by '-', safe characters only."""
    parts = Path(label).parts[-2:]
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in "-".join(parts)) or "source"


def algorithm_names(given: list[str]) -> list[str]:
    """The algorithms named by repeated and comma-separated -a values, in order, once each; `all`:
    every algorithm the lab has."""
    names: list[str] = []
    for value in given:
        for name in (a.strip() for a in value.split(",")):
            for one in (list(ALGORITHMS) if name == "all" else [name] if name else []):
                if one not in names:
                    names.append(one)
    if not names:
        raise UserError("--algorithm: name at least one algorithm")
    return names


def _csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """dump's formula guard on the cells and on the header too (paths.csv names a column per node)."""
    frame = _no_formulas(frame)
    frame.columns = ["'" + c if isinstance(c, str) and c.startswith(FORMULA_START) else c for c in frame.columns]
    return frame


def _show(console: Console, label: str, name: str, result, top: int, n_messages: int) -> None:
    total = sum(p.count for p in result.patterns)
    console.print(f"[bold]{shown_text(label)}[/] — {name}: {len(result.patterns)} patterns, {total:,.0f} paths "
                  f"from {n_messages:,} messages")
    for p in result.patterns[:top]:
        console.print(call_tree(p, total))


def _show_scores(console: Console, rows: list[dict]) -> None:
    def pct(v) -> str:
        return "-" if v is None or v != v else f"{100 * v:.0f}%"

    for r in rows:
        err = r["delay_error_pct"]
        console.print(f"score {shown_text(r['source'])} {r['algorithm']}: requests {pct(r['request_accuracy'])} "
                      f"exactly right (mappings {pct(r['mapping_accuracy'])}), patterns recall {pct(r['pattern_recall'])} "
                      f"precision {pct(r['pattern_precision'])} (rare: {pct(r['rare_recall'])}), delay error "
                      f"{'-' if err != err else f'{err:.1f}%'}, culprit top-1 {pct(r['culprit_top1'])} "
                      f"top-3 {pct(r['culprit_top3'])} over {r['fault_windows']} fault windows")
