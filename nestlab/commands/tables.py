"""Analysis subcommands for `nestlab`: accuracy, compare, plots, report, policies (docs/analysis.md); with
--against, our table against a seed table (docs/seeds-tables.md); report: one HTML file (docs/report.md).

RUNS arguments name stored runs: a run directory, a directory of runs (an experiment's directory, a
whole results tree), a quoted glob, or an experiment name under --results.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

from analysis.variants import DEFAULT_VARIANT, expand_values, expand_variant  # noqa: F401 - the CLI's names for them
from nestlab.commands.jobs import cores
from rundir.errors import UserError
from rundir.layout import RunDir


def register(subparsers) -> None:
    common_help = ("runs: run directories, directories of runs, quoted globs or experiment names "
                   "(under --results)")

    def runs_args(p, nargs="+", out=True):
        p.add_argument("runs", nargs=nargs, metavar="RUNS", help=common_help)
        p.add_argument("--results", default="results", metavar="DIR",
                       help="results root for experiment names (default: results)")
        p.add_argument("--policy", default=None, metavar="P",
                       help="ground-truth labelling policy (default: impact, the seeds' criteria); "
                            "see `nestlab policies`")
        if out:
            p.add_argument("--out", metavar="DIR", help="where files go (default: <the runs' common directory>/analysis)")

    def jobs_arg(p):
        p.add_argument("--jobs", "-j", type=_jobs, default=None, metavar="N",
                       help=f"analyse the runs in N processes at once, one run each (default: every core, "
                            f"here {cores()}); 1: one after the other in this process")

    p = subparsers.add_parser(
        "accuracy", help="accuracy table (thesis Table 3.3) of stored runs: Markdown, CSV, LaTeX",
        description="Diagnose stored runs, label them with the ground-truth policy and print the accuracy "
                    "table per variant (rows iperf, wget, socket, s:iperf, s:wget, TCP, ip+eth, all modules; "
                    "sections Inbound, Outbound, Total). Writes accuracy.md, accuracy.csv and accuracy.tex.")
    runs_args(p)
    jobs_arg(p)
    p.add_argument("--variant", action="append", metavar="V",
                   help=f"rule variant (repeatable; ranges expand, e.g. theta=1..3; default {DEFAULT_VARIANT})")
    p.add_argument("--intervals", action="store_true",
                   help="print each rate with its Wilson 95%% interval instead of the ± column")
    p.add_argument("--against", metavar="NAME",
                   help="then compare cell by cell with a seed accuracy table (thesis-3.3, paper-table-6, or a "
                        "YAML file); default variant: the one the table corresponds to. Writes "
                        "against-NAME.md/.csv/.tex")
    p.set_defaults(func=_accuracy)

    p = subparsers.add_parser(
        "compare", help="compare rule variants on the same runs (NeST paper Table 8 layout)",
        description="Per row and direction: each variant's TP, FP, TPR and PPV and the change in TP and FP in "
                    "percent against the first variant. Writes compare.md and compare.csv.")
    runs_args(p)
    jobs_arg(p)
    p.add_argument("--variant", action="append", metavar="V",
                   help="rule variant, the first is the baseline (repeatable; ranges expand: "
                        "flowdiagnoser:theta=1..4)")
    p.add_argument("--sweep", action="append", metavar="PARAM=VALUES",
                   help="vary a parameter of the (first) variant: theta=1..4, threshold=0..0.4/0.1, "
                        "anw=on,off (repeatable: every combination)")
    p.add_argument("--ablations", action="store_true",
                   help="the variants of paper Table 8: nest-cf, then each feature removed (unless --variant "
                        "or --sweep)")
    p.add_argument("--against", metavar="NAME",
                   help="then compare cell by cell with a seed ablation table (paper-table-8, or a YAML file); "
                        "implies --ablations when no variant is given. Writes against-NAME.md/.csv/.tex")
    p.add_argument("--blackbox", default="nesting,convolution,linking", metavar="A[,B]",
                   help="runs with a messages table (service runs): these black-box algorithms beside NeST's "
                        "variants on the same faults, written to compare-blackbox.csv (default all three; "
                        "'none': skip; docs/blackbox.md)")
    p.set_defaults(func=_compare)

    p = subparsers.add_parser(
        "plots", help="figures of a run: diagnosis overview, counter heatmap with diagnosis timelines, "
                      "module timeline; stalled-modules list",
        description="Draw a run's figures (PNG) and its stalled-modules list (thesis Table 5.2 style) into "
                    "<run>/analysis/ (or --out).")
    runs_args(p)
    p.add_argument("--variant", default=None, metavar="V", help=f"rule variant (default {DEFAULT_VARIANT}; streamsdiagnoser for streams runs)")
    p.add_argument("--module", action="append", metavar="M",
                   help="draw the subgraph figure of this module: run.db id or key such as tcp:65562 "
                        "(repeatable; default: the modules the run's faults target)")
    p.set_defaults(func=_plots)

    p = subparsers.add_parser(
        "report", help="one self-contained HTML report of runs: tables, seeds, health, figures, faults",
        description="Write one HTML file that needs nothing else to open (figures embedded): the runs, their "
                    "network health, the accuracy table per variant, the variant comparison, the seeds' numbers "
                    "beside ours, the thesis chapter 5 figures and a section per fault (docs/report.md). Prints "
                    "the file's path.")
    runs_args(p, out=False)
    p.add_argument("-o", "--out", metavar="FILE",
                   help="the HTML file (default: <run>/analysis/report.html for one run, <the runs' common "
                        "directory>/analysis/report.html for more)")
    p.add_argument("--variant", action="append", metavar="V",
                   help="rule variant (repeatable; ranges expand; default flowdiagnoser:theta=2 and nest-cf, the seeds' "
                        "two systems, and flowdiagnoser:probe=on when the runs recorded probes)")
    p.set_defaults(func=_report)

    p = subparsers.add_parser("policies", help="list ground-truth labelling policies and their parameters")
    p.set_defaults(func=_policies)


# ----------------------------------------------------------------------------- variants


def _study(args):
    """The study kind of the runs named (analysis.studies; the general one when the runs cannot be
    found yet: the run reader says why later)."""
    from analysis import studies
    from rundir.runs import find_runs

    runs_named = getattr(args, "runs", None)
    try:
        return studies.of_runs(find_runs(runs_named, getattr(args, "results", None), []) if runs_named else [])
    except UserError:
        return studies.of_runs([])


def _default_variant(args) -> str:
    """The variant of the runs' study kind: streamsdiagnoser for streams runs, flowdiagnoser:theta=2
    otherwise."""
    return _study(args).variant


def variants_from(args, sweep: list[str] | None = None) -> list[str]:
    base = [v for spec in (args.variant or []) for v in expand_variant(spec)]
    default = DEFAULT_VARIANT if base else _default_variant(args)
    if sweep:
        first = base[0] if base else default.split(":")[0]
        name, _, rest = first.partition(":")
        fixed = [s for s in rest.split(",") if s.strip()]
        axes = []
        for sw in sweep:
            key, eq, values = sw.partition("=")
            if not eq or not key.strip() or not values.strip():
                raise UserError(f"--sweep {sw!r}: expected PARAM=VALUES, e.g. theta=1..4")
            key = key.strip()
            fixed = [f for f in fixed if f.split("=")[0].strip() != key]
            axes.append([f"{key}={v}" for v in expand_values(values)])
        swept = [f"{name}:{','.join(fixed + list(combo))}" for combo in itertools.product(*axes)]
        base = base[1:] if base else []
        base = swept + base
    from analysis.diagnose import as_variants

    names = [v.name for v in as_variants(base or [default])]  # UserError on a bad spec
    return names


# ----------------------------------------------------------------------------- commands


def _warn(run: str, message: str) -> None:
    print(f"warning: {run}: {message}", file=sys.stderr, flush=True)


def _jobs(text: str) -> int:
    import argparse

    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a number of processes >= 1, got {text!r}")
    return n


def _evaluate(args, variants, keep=False):
    from analysis.labels import parse_policy
    from analysis.pipeline import evaluate
    from rundir.runs import find_runs

    parse_policy(args.policy)  # a bad policy fails before any run is read
    notes: list[str] = []
    runs = find_runs(args.runs, args.results, notes)
    for note in notes:
        print(f"note: {note}", file=sys.stderr, flush=True)
    jobs = 1 if keep else (getattr(args, "jobs", None) or cores())
    jobs = min(jobs, len(runs))
    if len(runs) > 1 and jobs > 1:
        print(f"{len(runs)} runs in {jobs} processes", file=sys.stderr, flush=True)

    def progress(k: int, n: int, r) -> None:
        if n > 1:
            print(f"[{k}/{n}] {r}", file=sys.stderr, flush=True)

    return runs, evaluate(runs, variants, args.policy, keep=keep, on_warning=_warn, skip_bad=len(runs) > 1,
                          jobs=jobs, on_run=progress)


def _out_dir(args, runs: list[Path]) -> Path:
    from rundir.runs import common_root

    return Path(args.out) if args.out else RunDir(common_root(runs)).analysis


def _seed(name: str | None, kind: str):
    """The seed table named by --against (None without it); UserError for a bad name or the wrong kind."""
    if not name:
        return None
    from analysis.render.against import load_seed_table

    seed = load_seed_table(name)
    if seed.kind != kind and not (kind == "accuracy" and seed.kind == "streams"):
        use = "nestlab accuracy RUNS --against" if seed.kind in ("accuracy", "streams") else "nestlab compare RUNS --against"
        raise UserError(f"{seed.name} is an {seed.kind} table, not an {kind} table: use `{use} {name}`")
    return seed


def _against(frame, seed, ev, out: Path, title: str) -> list[Path]:
    """Print and write ours against a seed table (analysis.render.against); `title` has a {runs} slot."""
    from analysis.render.against import write_against
    from analysis.render.tables import runs_title

    md, files = write_against(frame, seed, out, title.format(runs=f"{runs_title(ev)}, ground truth {ev.policy}"))
    print(f"\n{md}")
    return files


def _accuracy(args) -> int:
    from analysis.render.writers import write_accuracy

    seed = _seed(args.against, "accuracy")
    # Without --variant, the variant the seed table corresponds to; with one, the one asked (warned).
    variants = variants_from(args) if args.variant or seed is None else [seed.variant]
    if seed is not None and seed.kind == "streams":   # thesis Table 4.3: a row per graph, every variant given
        return _accuracy_streams(args, seed, variants)
    if seed is not None:   # seed table variant names are canonical (analysis.render.against)
        variant = seed.variant if seed.variant in variants else variants[0]
        if variant != seed.variant:
            print(f"warning: {seed.name} corresponds to {seed.variant}; comparing {variant} with it",
                  file=sys.stderr)
    runs, ev = _evaluate(args, variants)
    out = _out_dir(args, runs)
    md, files = write_accuracy(ev, out, intervals=args.intervals)
    if "service" in ev.study.lead:   # a service run: its tiers' latency and the culprit table first
        files = _service_view(runs, variants, out) + files
    if "fabric" in ev.study.lead:    # a fabric run: which link, first
        files = _fabric_view(runs, out) + files
    print(md)
    if seed is not None:
        from analysis.render.against import accuracy_vs_seed

        files += _against(accuracy_vs_seed(ev.counts, variant, seed), seed, ev, out, f"{variant} ({{runs}}) against {seed.name}")
    print(f"\nwritten: {', '.join(str(f) for f in files)}")
    return 0


def _accuracy_streams(args, seed, variants: list[str]) -> int:
    """--against a streams table (thesis-4.3): the accuracy tables, then ours beside the thesis's, a row per
    graph (analysis.render.against_streams)."""
    from analysis.render.against_streams import write_streams_against
    from analysis.render.tables import runs_title
    from analysis.render.writers import write_accuracy

    runs, ev = _evaluate(args, variants)
    out = _out_dir(args, runs)
    md, files = write_accuracy(ev, out, intervals=args.intervals)
    print(md)
    title = f"Ours ({runs_title(ev)}, ground truth {ev.policy}) against {seed.name}"
    md, more = write_streams_against(ev, seed, variants, out, title)
    print(f"\n{md}")
    print(f"\nwritten: {', '.join(str(f) for f in files + more)}")
    return 0


def _compare(args) -> int:
    from analysis.render.writers import write_compare

    seed = _seed(args.against, "ablation")
    if (args.ablations or seed is not None) and not args.variant and not args.sweep:
        from analysis.render.against import ablation_variants, load_seed_table

        variants = ablation_variants(seed or load_seed_table("paper-table-8"))
    else:
        variants = variants_from(args, args.sweep)
    blackbox = _blackbox_runs(args)
    lead = _study(args).lead
    if len(variants) < 2 and (blackbox or "fabric" in lead) and not args.variant and not args.sweep:   # the study's report variants
        variants = variants_from(argparse_ns(variant=list(_study(args).report_variants())))
    if len(variants) < 2:
        raise UserError("compare needs at least two variants: --variant A --variant B, --sweep theta=1..4 "
                        "or --ablations")
    if seed is not None:   # before the runs are read: a mismatch is the user's to see first
        mapped = [v for _, v in seed.ablations if v]
        if not set(mapped) & set(variants[1:]):
            raise UserError(f"none of {seed.name}'s columns has its variant here ({', '.join(mapped)}); "
                            "try --ablations")
        if variants[0] != seed.variant:
            print(f"warning: {seed.name}'s baseline is {seed.variant}; the baseline here is "
                  f"{variants[0]}", file=sys.stderr)
    runs, ev = _evaluate(args, variants)
    out = _out_dir(args, runs)
    md, files = write_compare(ev, out)
    service = "service" in ev.study.lead
    names = _algorithm_names(args)
    versus, known = None, {}
    if blackbox:   # first, so that the culprit table reuses the algorithms' rankings
        from analysis.paths.versus import compare_blackbox, write_versus
        from rundir.runs import guarded

        per_run, table = guarded(out, compare_blackbox, [str(r) for r in blackbox], variants, names, None, _warn,
                                 known)
        versus, more = write_versus(per_run, table, out)
        files += more
    if service:   # a service run: its tiers' latency and the culprit table first
        files = _service_view(runs, variants, out, names, known) + files
    if "fabric" in ev.study.lead:    # a fabric run: which link, first
        files = _fabric_view(runs, out) + files
    print(md)
    if seed is not None:
        from analysis.render.against import ablation_vs_seed

        files += _against(ablation_vs_seed(ev.counts, variants, seed), seed, ev, out,
                          f"Ablations against {seed.name} ({{runs}})")
    if versus is not None:
        print(f"\n{versus}")
        if not service:   # runs of several kinds: the culprit table after (issue 42)
            from analysis.score.culprit import culprit_files

            files += guarded(out, culprit_files, [str(r) for r in runs], variants, names, out, _warn)
    print(f"\nwritten: {', '.join(str(f) for f in files)}")
    return 0


def _algorithm_names(args) -> list[str]:
    names = getattr(args, "blackbox", "none")
    return [] if names.strip().lower() in ("none", "") else [a.strip() for a in names.split(",") if a.strip()]


def _fabric_view(runs: list[Path], out: Path) -> list[Path]:
    """Print a fabric study's lead (analysis.fabric.view): 007 and NetBouncer per link and window,
    scored; compare-fabric.csv and its companions written."""
    from analysis.fabric.view import fabric_view, markdown, write_view
    from rundir.runs import guarded

    view = guarded(out, fabric_view, [str(r) for r in runs])
    print(markdown(view) + "\n")
    return guarded(out, write_view, view, out)


def _service_view(runs: list[Path], variants: list[str], out: Path, names=None, known=None) -> list[Path]:
    """Print a service study's lead (analysis.render.service_view): the tiers' latency and the culprit
    table; the culprit files written. names: the black-box algorithms ranked beside NeST (None: all);
    known: their rankings already made (analysis.paths.versus.compare_blackbox)."""
    from analysis.render.service_view import service_view
    from analysis.score.culprit import ALGORITHMS
    from rundir.runs import guarded

    md, files = guarded(out, service_view, [str(r) for r in runs], variants,
                        ALGORITHMS if names is None else names, out, _warn, known)
    print(md + "\n")
    return files


def _blackbox_runs(args) -> list[Path]:
    """The runs named that have a message trace, when --blackbox is not 'none' (their algorithms'
    names checked first: a bad name is one line before any run is read)."""
    if args.blackbox.strip().lower() in ("none", ""):
        return []
    from analysis.paths.algorithms import algorithm
    from analysis.paths.versus import has_messages
    from rundir.runs import find_runs

    for name in (a.strip() for a in args.blackbox.split(",")):
        if name:
            algorithm(name)
    return [r for r in find_runs(args.runs, args.results, []) if has_messages(r)]


def _module_id(data, text: str) -> int:
    mods = data.modules
    if text.isdigit() and int(text) in mods.index:
        return int(text)
    hit = mods.index[mods["key"] == text]
    if len(hit):
        return int(hit[-1])
    raise UserError(f"{data.path}: no module {text!r} (give a run.db module id or a key such as "
                    f"{mods['key'].iloc[0] if len(mods) else 'tcp:<inode>'})")


def _plots(args) -> int:
    from analysis.render.plots import plot_run
    from analysis.render.writers import stalled_markdown, write_stalled
    from rundir.runs import guarded

    variants = variants_from(argparse_ns(variant=[args.variant] if args.variant else None, runs=args.runs,
                                         results=args.results))
    runs, ev = _evaluate(args, variants, keep=True)
    if args.out and len(runs) > 1:
        raise UserError("--out goes with a single run (each run's figures go to <run>/analysis otherwise)")
    drawn = 0
    for run in ev.runs:
        data, scored = ev.data[run], ev.scored[run]
        out = Path(args.out) if args.out else RunDir(run).analysis
        modules = [_module_id(data, m) for m in args.module] if args.module else None

        def draw(data=data, scored=scored, out=out, modules=modules):
            files = plot_run(data, scored, variants[0], out, modules)
            st, written = write_stalled(data, scored, variants[0], out)
            return files + written, st

        try:
            files, st = guarded(run, draw)
        except UserError as e:
            if len(runs) == 1:
                raise
            _warn(str(run), f"skipped: {str(e).removeprefix(f'{run}: ')}")
            continue
        drawn += 1
        print(stalled_markdown(st, variants[0], limit=20))
        print(f"\nwritten: {', '.join(str(f) for f in files)}")
    if not drawn:
        raise UserError(f"no figures drawn for any of the {len(runs)} runs")
    return 0


def _report(args) -> int:
    from analysis.render.html import build_report, default_output

    if args.out and Path(args.out).is_dir():
        raise UserError(f"{args.out}: is a directory; -o names the HTML file to write")
    if args.variant:
        variants = variants_from(args)
    else:   # the study kind's (the seeds' two systems; with probes recorded, the lab's probe variant beside them)
        from analysis import studies
        from nestlab.observers import records_probes
        from rundir.runs import find_runs

        found = find_runs(args.runs, args.results)
        names = studies.of_runs(found).report_variants(any(records_probes(r) for r in found))
        variants = variants_from(argparse_ns(variant=list(names)))
    runs, ev = _evaluate(args, variants, keep=True)
    out = Path(args.out) if args.out else default_output(ev.runs)
    print(build_report(ev, out))
    return 0


def argparse_ns(**kw):
    import argparse

    return argparse.Namespace(**kw)


def _policies(args) -> int:
    from analysis.labels import DEFAULT_POLICY, POLICIES

    for name, cls in POLICIES.items():
        print(f"{name}{'  (default)' if name == DEFAULT_POLICY else ''}  ({POLICIES.origin(name)})  "
              f"{getattr(cls, 'summary', '')}")
        for p in cls.params:
            print(f"    {p.name + '=' + p.text(p.default):<22} {p.help}")
        print()
    for line in POLICIES.problems:
        print(f"left out: {line}")
    return 0
