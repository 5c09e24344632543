"""Command-line entry points: `run-experiment SPEC` and `nestlab <subcommand>`.

Subcommands are registered by the modules that own them: harness.commands (run, cleanup) and the
analysis command modules listed in COMMAND_MODULES, each with a register(subparsers) function.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from harness.errors import UserError

COMMAND_MODULES = ("harness.commands", "harness.export", "analysis.cli", "analysis.report_cli", "analysis.top")


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nestlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue  # an optional command module that is not there
        module.register(sub)
    return parser


def nestlab_main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # an unwritable --out, a missing file: the user's to fix, no traceback
        where = f": {e.filename}" if e.filename else ""
        print(f"error: {e.strerror or e}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def run_experiment_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return nestlab_main(["run", *argv])


if __name__ == "__main__":
    sys.exit(nestlab_main())
