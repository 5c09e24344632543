"""Command-line entry points: `run-experiment SPEC` and `nestlab <subcommand>`.

Each subcommand module of nestlab.commands has a register(subparsers) function; the lab (harness/) and
the analysis (analysis/) know nothing of the command line.
"""

from __future__ import annotations

import argparse
import gc
import sys

# Importing the commands (numpy, pandas, pyarrow, pydantic) makes some 130,000 objects that live as long
# as the process, and no garbage: the cyclic collector would run about 190 times over them (~35 ms of a
# command's start). Off while they load; then they are frozen (left out of every later collection) and
# the collector is on again for the command.
gc.disable()
from nestlab.commands import diagnose, dump, export, paths, run, tables, top  # noqa: E402
from rundir.errors import UserError  # noqa: E402

gc.freeze()
gc.enable()

COMMAND_MODULES = (run, export, diagnose, tables, top, dump, paths)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nestlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
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
