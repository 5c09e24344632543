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
        runs = json.loads(index.read_text()).get("runs", [])
    except (OSError, ValueError) as e:
        raise UserError(f"{index}: unreadable suite index ({e})") from None
    return [root / r["run"] for r in runs if r.get("run") and is_run_dir(root / r["run"])]


def complete_runs(root: Path) -> dict[tuple[str, int, str], Path]:
    """(experiment, repetition, spec digest) -> the newest complete run under a suite directory."""
    found: dict[tuple[str, int, str], Path] = {}
    for manifest in sorted(root.glob("*/*/manifest.json")):
        try:
            m = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue   # a damaged run is not one to keep
        if m.get("status") == "complete" and m.get("spec_digest"):
            found[(m.get("experiment"), m.get("repetition"), m["spec_digest"])] = manifest.parent
    return found
