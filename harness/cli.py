"""Command-line entry points: `run-experiment SPEC` and `nestlab <subcommand>`.

Subcommands are registered by the packages that own them: the harness adds run/cleanup here, the
analysis adds its own through analysis.cli.register(subparsers).
"""

from __future__ import annotations

import argparse
import sys

from harness.errors import UserError


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nestlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from harness import commands

    commands.register(sub)
    try:
        from analysis import cli as analysis_cli
    except ImportError:  # analysis commands not built yet
        analysis_cli = None
    if analysis_cli is not None and hasattr(analysis_cli, "register"):
        analysis_cli.register(sub)
    return parser


def nestlab_main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def run_experiment_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return nestlab_main(["run", *argv])


if __name__ == "__main__":
    sys.exit(nestlab_main())
