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
from analysis import plugins  # noqa: E402
from nestlab.commands import diagnose, dump, export, new_variant, paths, run, tables, top  # noqa: E402
from rundir.errors import UserError  # noqa: E402

gc.freeze()
gc.enable()

COMMAND_MODULES = (run, export, diagnose, tables, top, dump, paths, new_variant)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nestlab", description=__doc__.splitlines()[0],
                                     epilog=f"Plug-ins: installed packages' entry points (nestlab.variants, "
                                            f"nestlab.policies), --plugin FILE.py and {plugins.ENV}=FILE.py:... "
                                            f"(docs/plugins.md).")
    parser.add_argument("--plugin", action="append", metavar="FILE.py", default=[],
                        help="load rule systems and policies from this file (its lists `variants` and "
                             "`policies`; repeatable; also accepted after the command)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    # `nestlab COMMAND --help` opens with what the command does: its one-line help where it has no
    # longer description
    helps = {a.dest: a.help for a in sub._choices_actions}
    for name, command in sub.choices.items():
        if not command.description and helps.get(name):
            command.description = helps[name][0].upper() + helps[name][1:] + "."
    return parser


def _plugin_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(argv without them, the files of every --plugin FILE / --plugin=FILE, wherever they are)."""
    rest, found, it = [], [], iter(argv)
    for a in it:
        if a == "--":
            rest += [a, *it]
        elif a == "--plugin":
            found.append(next(it, ""))
        elif a.startswith("--plugin="):
            found.append(a.split("=", 1)[1])
        else:
            rest.append(a)
    return rest, found


def nestlab_main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    argv, files = _plugin_args(list(sys.argv[1:] if argv is None else argv))
    if any(not f for f in files):
        parser.error("--plugin needs a file")
    args = parser.parse_args(argv)
    plugins.add_files(files)   # this process's registries and, through the environment, its children's
    try:
        plugins.check_trusted()    # root runs no plug-in file another user could have written
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
