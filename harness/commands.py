"""The harness's subcommands: run, cleanup."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run an experiment spec (same as run-experiment)")
    p.add_argument("spec", help="experiment YAML, e.g. experiments/net_fault.yaml")
    p.add_argument("--results", default="results", help="results root directory (default: results)")
    p.add_argument("--topology", help="run on this topology file instead of the spec's, e.g. the same shape "
                   "placed on testbed nodes (topologies/dumbbell-ssh.yaml; docs/ssh-backend.md)")
    p.set_defaults(func=_run)

    p = sub.add_parser("cleanup", help="remove what a killed run left behind (namespaces, links, rules, processes)")
    p.set_defaults(func=_cleanup)


def _run(args: argparse.Namespace) -> int:
    from harness.runner import run_spec_file

    return run_spec_file(args.spec, results_root=args.results, topology=args.topology)


def _cleanup(args: argparse.Namespace) -> int:
    from harness.clean import cleanup

    return cleanup(verbose=True)
