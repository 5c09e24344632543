"""`nestlab dump RUNS -o DIR [--format parquet|csv] [--variant V]...`: stored runs as files other tools
load directly (pandas, R, DuckDB): per run, its modules, snapshots, counters, faults, edges and
processes, the diagnoses of the chosen variants and the ground truth (docs/api.md). The frames are
those of the Python API (nestlab.api); a dict or tuple in a cell (attrs, target, table rows) is
written as JSON text.

What it writes stays under DIR: every directory it makes below DIR is checked not to be a symbolic
link (not only the last), and a link planted at a file's name is replaced, never followed. In CSV, a
text cell that a spreadsheet would take for a formula (it begins with =, +, -, @, a tab or a carriage
return: a module named `=HYPERLINK(...)`) is written with a leading single quote, as OWASP's advice
on CSV injection says; Parquet keeps every value as it is (its readers do not evaluate cells).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pandas as pd

FORMATS = ("parquet", "csv")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dump", help="stored runs as Parquet or CSV files for other tools (docs/api.md)")
    p.add_argument("runs", nargs="+", metavar="RUNS", help="run directories, directories of runs, quoted globs, "
                                                           "experiment or suite names (under --results)")
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="write <experiment>/<run>/<table>.<format> here")
    p.add_argument("--format", choices=FORMATS, default="parquet")
    p.add_argument("--variant", action="append", default=None, metavar="V",
                   help="diagnose with this variant (repeat; default the runs' study kind's: flowdiagnoser:theta=2, "
                        "streamsdiagnoser for streams runs)")
    p.add_argument("--policy", default=None, metavar="P", help="ground-truth labelling policy (default impact)")
    p.add_argument("--results", default="results", metavar="DIR", help="results root for names (default: results)")
    p.set_defaults(func=_dump)


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """Cells that are dicts, lists or tuples as JSON text; the index as columns."""
    frame = frame.reset_index() if frame.index.name is not None else frame.copy()
    for col in frame.columns:
        if frame[col].dtype == object and frame[col].map(lambda v: isinstance(v, dict | list | tuple)).any():
            frame[col] = frame[col].map(lambda v: json.dumps(v) if isinstance(v, dict | list | tuple) else v)
    return frame


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _no_formulas(frame: pd.DataFrame) -> pd.DataFrame:
    """Text cells a spreadsheet would evaluate, with a leading single quote (OWASP, CSV injection)."""
    frame = frame.copy()
    for col in frame.columns:
        if frame[col].dtype == object or isinstance(frame[col].dtype, pd.CategoricalDtype | pd.StringDtype):
            frame[col] = frame[col].map(lambda v: "'" + v if isinstance(v, str) and v.startswith(FORMULA_START)
                                        else v).astype(object)
    return frame


def run_out_dir(base: Path, *parts: str) -> Path:
    """base/parts..., each directory below `base` made if missing and refused (UserError) when it is a
    symbolic link or not a directory: what dump writes stays under `base`."""
    from rundir.errors import UserError
    from rundir.layout import output_dir

    path = output_dir(base)
    for part in parts:
        if part in ("", ".", "..") or "/" in part:
            raise UserError(f"{path / part}: not a directory name dump makes; refusing to write there")
        path = path / part
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        if path.is_symlink() or not path.is_dir():
            raise UserError(f"{path}: is a symbolic link or not a directory; refusing to write through it")
    return path


def tables(run, variants: list[str], policy: str | None) -> dict[str, pd.DataFrame]:
    """The frames one run is dumped as, by file name: nestlab.frames.dump_frames (a `run` column in
    every table, one dtype per column; the evidence tables tcp_info and probes too)."""
    from nestlab.frames import dump_frames

    return dump_frames(run, variants, policy)


def _dump(args: argparse.Namespace) -> int:
    from analysis import studies
    from nestlab.api import open_runs
    from rundir.layout import fresh

    runs = [r for spec in args.runs for r in open_runs(spec, args.results)]
    variants = args.variant or [studies.of_runs([r.path for r in runs]).variant]   # the runs' study kind's
    for run in runs:
        out = run_out_dir(Path(args.out), run.path.parent.name, run.path.name)
        for name, frame in tables(run, variants, args.policy).items():
            path = fresh(out / f"{name}.{args.format}")
            frame = _plain(frame)
            if args.format == "parquet":
                frame.to_parquet(path, index=False)
            else:
                _no_formulas(frame).to_csv(path, index=False)
        print(f"{run.name}: {out}")
    return 0
