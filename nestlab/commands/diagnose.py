"""Analysis subcommands for `nestlab`: diagnose, variants."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rundir.errors import UserError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "diagnose", help="diagnose snapshots (a JSON file or a run directory) with rule variants",
        description="Diagnose every snapshot with one or more rule variants (docs/diagnosis.md).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--json", metavar="FILE", help="JSON snapshots ('-' = stdin); result JSON on stdout")
    src.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="a run directory: print a summary")
    p.add_argument("--variant", action="append", metavar="V",
                   help="e.g. flowdiagnoser:theta=3 or nest-cf:anw=off (repeatable; default: "
                        "flowdiagnoser and nest-cf); see `nestlab variants`")
    p.add_argument("--csv", metavar="FILE", help="with RUN_DIR: write every diagnosis as CSV")
    p.set_defaults(func=_diagnose)

    v = subparsers.add_parser("variants", help="list rule systems, their parameters and notable variants")
    v.set_defaults(func=_variants)


def _diagnose(args) -> int:
    from analysis.diagnose import as_variants, diagnose_json, diagnose_run
    from analysis.load import read_run
    from analysis.model.stretches import read_json
    from rundir.runs import guarded

    variants = as_variants(args.variant)  # bad variant specs fail before any input is read
    if args.json is not None:
        if args.csv:
            raise UserError("--csv goes with a run directory, not --json")
        if Path(args.json).is_dir():
            raise UserError(f"{args.json}: a directory; --json reads JSON snapshots (docs/diagnosis.md), "
                            f"`nestlab diagnose {args.json}` diagnoses a run directory")
        out = diagnose_json(read_json(args.json), variants, where=args.json)
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    data = read_run(args.run_dir)
    for w in data.warnings:
        print(f"warning: {data.info.name}: {w}", file=sys.stderr, flush=True)
    if not data.run.stretches:
        print(f"warning: {data.info.name}: no module counters recorded; nothing to diagnose", file=sys.stderr)
    guarded(args.run_dir, lambda: _summary(diagnose_run(data.run, variants) if data.run.stretches else None,
                                           args.csv))
    return 0


def _summary(frame, csv: str | None) -> None:
    """The run's diagnoses per variant, direction and kind (valid snapshots), and --csv."""
    import pandas as pd

    cols = ["variant", "dir", "module", "kind", "seq", "label", "cf", "positive", "invalid"]
    frame = frame if frame is not None else pd.DataFrame({c: [] for c in cols})
    if csv:
        frame.to_csv(csv, index=False)
    ok = frame[~frame["invalid"].astype(bool)]
    summary = (ok.groupby(["variant", "dir", "kind"], observed=True)["positive"]
               .agg(snapshots="size", positive="sum").reset_index())
    print(summary.to_string(index=False))


def _variants(args) -> int:
    from analysis.variants import systems

    registry = systems()
    for system in registry.values():
        print(f"{system.name}  [{system.kind}]  ({registry.origin(system.name)})  {system.summary}")
        width = max((len(f"{p.name}={p.text(p.default)}") for p in system.params), default=0)
        for p in system.params:
            print(f"    {p.name + '=' + p.text(p.default):<{width}}  {p.help}")
        if system.presets:
            print("  variants: " + "  ".join(system.presets))
        print()
    for line in registry.problems:
        print(f"left out: {line}")
    from analysis.plugins import CONTRACT
    print(f"Your own: nestlab new-variant NAME, or --plugin FILE.py (plug-in contract {CONTRACT}, docs/plugins.md)")
    return 0
