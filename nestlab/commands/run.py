"""`nestlab run` (`run-experiment`): an experiment spec or a suite, with the analysis's live view and
reports plugged in (nestlab.observers); `nestlab cleanup`."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run an experiment spec or a suite (same as run-experiment)")
    p.add_argument("spec", help="experiment or suite YAML, e.g. experiments/net_fault.yaml, "
                                "experiments/thesis-3.3.yaml (docs/suites.md)")
    p.add_argument("--check", action="store_true",
                   help="validate the spec or every spec of the suite and print the plan and its time; "
                        "runs nothing, needs no root")
    p.add_argument("--resume", action="store_true",
                   help="suite: keep the complete runs whose resolved spec is unchanged, run the rest")
    p.add_argument("--restart", action="store_true",
                   help="suite: start over although an unfinished run of it is there (its runs stay on disk)")
    p.add_argument("--scale", type=int, metavar="N",
                   help="suite: every duration and random fault count times N (15: the thesis's 15-minute "
                        "runs); default: the suite's `scale`")
    p.add_argument("--shard", metavar="K/N",
                   help="suite: run shard K of N, the runs at positions K-1, K-1+N, ... of the plan, with its own "
                        "index (suite-shard-K-of-N.json); N machines given 1/N .. N/N run the suite once between "
                        "them, and the analysis reads the shards' indexes in one results directory as one suite "
                        "(docs/suites.md)")
    p.add_argument("--only", action="append", metavar="NAME",
                   help="suite: run just this experiment (repeatable); the suite's other experiments keep what "
                        "its index has of them")
    p.add_argument("--results", default="results", help="results root directory (default: results)")
    p.add_argument("--topology", help="run on this topology file instead of the spec's, e.g. the same shape "
                   "placed on testbed nodes (topologies/dumbbell-ssh.yaml; docs/ssh-backend.md)")
    p.set_defaults(func=_run)

    p = sub.add_parser("cleanup", help="remove what a killed run left behind (namespaces, links, rules, processes)")
    p.set_defaults(func=_cleanup)


def _run(args: argparse.Namespace) -> int:
    from harness.suite import is_suite_file
    from rundir.errors import UserError

    if is_suite_file(args.spec):
        from harness.suite import parse_shard
        from harness.suiterun import check_suite, run_suite_file

        if args.resume and args.restart:
            raise UserError("--resume and --restart contradict each other: give one")
        shard = parse_shard(args.shard) if args.shard is not None else None
        if args.check:
            return check_suite(args.spec, args.results, args.scale, args.resume, args.topology, shard, args.only)
        return run_suite_file(args.spec, args.results, args.scale, args.resume, args.restart, args.topology,
                              _observers(), shard, args.only)
    for flag in ("resume", "restart", "scale", "shard", "only"):
        if getattr(args, flag) not in (None, False):
            raise UserError(f"{args.spec}: --{flag} applies to suites (a file with `suite:`); this is a spec")
    if args.check:
        from harness.suiterun import check_spec

        return check_spec(args.spec, args.results, args.topology)
    from harness.runner import run_spec_file

    return run_spec_file(args.spec, results_root=args.results, topology=args.topology, observers=_observers())


def _observers():
    """The analysis's views and reports for the run (imported here: --check and cleanup need none)."""
    from nestlab.observers import observers

    return observers()


def _cleanup(args: argparse.Namespace) -> int:
    from harness.clean import cleanup

    return cleanup(verbose=True)
