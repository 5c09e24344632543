"""A suite's index, results/<suite>/suite.json: every planned run (experiment, repetition, seed, spec
digest), the run directory that holds it and its status, rewritten after each run by the suite's
runner (harness.suiterun). Readers take a suite's runs from it, so a run that --resume replaced stays
on disk and out of the tables (docs/suites.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rundir.errors import UserError

INDEX = "suite.json"


def is_run_dir(p: Path) -> bool:
    return (p / "run.db").is_file() or (p / "manifest.json").is_file()


def read_index(root: Path) -> dict | None:
    """The index of the suite directory `root`, None when there is none; UserError when unreadable."""
    try:
        return json.loads((root / INDEX).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise UserError(f"{root / INDEX}: unreadable suite index ({e}); move it away to start the suite "
                        "again") from None


def write_index(root: Path, data: dict[str, Any]) -> None:
    """Write the index (write-then-rename: a reader never sees half of it)."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (INDEX + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, root / INDEX)


def set_aside(root: Path, stamp: str) -> Path:
    """Keep a finished or abandoned index as suite-<stamp>.json (its runs stay on disk)."""
    kept = root / f"suite-{stamp}.json"
    os.replace(root / INDEX, kept)
    return kept


def suite_members(root: Path) -> list[Path] | None:
    """The runs a suite directory's index names (its current runs, in plan order: a run that
    --resume replaced is not among them), or None when `root` holds no suite index."""
    index = root / INDEX
    if not index.is_file():
        return None
    try:
        data = json.loads(index.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{index}: unreadable suite index ({e})") from None
    return [root / run for run in member_runs(index, data) if run and is_run_dir(root / run)]


def member_runs(index: Path, data: Any) -> list[str | None]:
    """Each entry's run directory, relative to the suite directory (None: not made yet), checked:
    UserError (one line) for an index that is not a suite index, an entry that is not an object, or
    a run that is not a relative path inside the suite (a crafted index must not name other runs)."""
    runs = data.get("runs", []) if isinstance(data, dict) else None
    if not isinstance(runs, list):
        raise UserError(f"{index}: not a suite index (no list of runs)")
    out: list[str | None] = []
    for k, entry in enumerate(runs):
        run = entry.get("run") if isinstance(entry, dict) else ...
        if run is ... or not (run is None or isinstance(run, str)):
            raise UserError(f"{index}: runs[{k}] is {'not an object' if run is ... else 'a run that is not a path'}; "
                            "not a suite index nestlab wrote")
        if run and (Path(run).is_absolute() or ".." in Path(run).parts):
            raise UserError(f"{index}: runs[{k}]: {run!r} is outside the suite; refused")
        out.append(run or None)
    return out


def resumable_runs(root: Path) -> dict[tuple[str, int, str], Path]:
    """The complete runs --resume may keep: those the suite's current index names (after --restart,
    the runs of the index set aside are not brought back), or, without an index, every complete run
    under the suite directory."""
    index = read_index(root)
    if index is None:
        return complete_runs(root)
    return complete_runs(root, {(root / run).resolve() for run in member_runs(root / INDEX, index) if run})


def complete_runs(root: Path, among: set[Path] | None = None) -> dict[tuple[str, int, str], Path]:
    """(experiment, repetition, spec digest) -> the newest complete run under a suite directory (of
    the run directories `among`, resolved, if given)."""
    found: dict[tuple[str, int, str], Path] = {}
    for manifest in sorted(root.glob("*/*/manifest.json")):
        if among is not None and manifest.parent.resolve() not in among:
            continue
        try:
            m = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue   # a damaged run is not one to keep
        if m.get("status") == "complete" and m.get("spec_digest"):
            found[(m.get("experiment"), m.get("repetition"), m["spec_digest"])] = manifest.parent
    return found
