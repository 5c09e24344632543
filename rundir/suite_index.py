"""A suite's index, results/<suite>/suite.json: every planned run (experiment, repetition, seed, spec
digest), the run directory that holds it and its status, rewritten after each run by the suite's
runner (harness.suiterun). Readers take a suite's runs from it, so a run that --resume replaced stays
on disk and out of the tables (docs/suites.md).

A suite split over machines (`run-experiment SUITE --shard K/N`) writes one index per shard,
results/<suite>/suite-shard-K-of-N.json, listing that shard's runs with their position in the whole
plan. A suite directory holding shard indexes (copied back from the machines, next to their runs) is
read as one suite: the union of its shard indexes, in plan order (union_entries), checked to be
shards of one split of one plan. A directory never holds both suite.json and shard indexes (the
runner refuses to make such a mix, and the reader to read one).
"""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path
from typing import Any

from rundir.errors import UserError
from rundir.layout import RunDir

INDEX = "suite.json"
SHARD_INDEX = re.compile(r"^suite-shard-([1-9][0-9]*)-of-([1-9][0-9]*)\.json$")


def index_name(shard: tuple[int, int] | None = None) -> str:
    """The index file of the whole suite (None) or of shard (K, N)."""
    return INDEX if shard is None else f"suite-shard-{shard[0]}-of-{shard[1]}.json"


def shard_indexes(root: Path) -> dict[tuple[int, int], Path]:
    """(K, N) -> the shard indexes in the suite directory `root`."""
    out = {}
    if root.is_dir():
        for p in sorted(root.iterdir()):
            m = SHARD_INDEX.match(p.name)
            if m and p.is_file():
                out[(int(m.group(1)), int(m.group(2)))] = p
    return out


def is_run_dir(p: Path) -> bool:
    rd = RunDir(p)
    return rd.db.is_file() or rd.manifest_path.is_file()


def read_index(root: Path, name: str = INDEX) -> dict | None:
    """The index `name` of the suite directory `root`, None when there is none; UserError when unreadable."""
    try:
        return json.loads((root / name).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as e:
        e = e if not isinstance(e, RecursionError) else "nested deeper than an index can be"
        raise UserError(f"{root / name}: unreadable suite index ({e}); move it away to start the suite "
                        "again") from None


def write_index(root: Path, data: dict[str, Any], name: str = INDEX) -> None:
    """Write the index (write-then-rename: a reader never sees half of it)."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, root / name)


def set_aside(root: Path, stamp: str, name: str = INDEX) -> Path:
    """Keep a finished or abandoned index as <its name>-<stamp>.json, e.g. suite-<stamp>.json (its
    runs stay on disk; readers no longer see it)."""
    kept = root / f"{name.removesuffix('.json')}-{stamp}.json"
    os.replace(root / name, kept)
    return kept


def suite_members(root: Path, notes: list[str] | None = None) -> list[Path] | None:
    """The runs a suite directory's index names (its current runs, in plan order: a run that
    --resume replaced is not among them), or None when `root` holds no suite index. With shard
    indexes, the runs of all of them (union_entries); what is missing of the split is said in `notes`."""
    entries = union_entries(root, notes)
    if entries is None:
        return None
    return [root / e["run"] for e in entries if e.get("run") and is_run_dir(root / e["run"])]


def union_entries(root: Path, notes: list[str] | None = None) -> list[dict] | None:
    """The entries (experiment, repetition, seed, digest, run, status, ...) of a suite directory's
    index, or of all its shard indexes in plan order; None without an index. UserError (one line)
    for a directory that mixes suite.json with shard indexes, shards of different splits, or shards
    of different plans (the suite file or --scale differed between the machines)."""
    shards = shard_indexes(root)
    if (root / INDEX).is_file():
        if shards:
            raise UserError(f"{root}: holds both the whole suite's index ({INDEX}) and shard indexes "
                            f"({', '.join(p.name for p in shards.values())}); move one or the other away")
        data = read_index(root)
        runs = member_runs(root / INDEX, data)
        return [{**e, "run": run} for e, run in zip(data["runs"], runs, strict=True)]
    if not shards:
        return None
    splits = sorted({n for _, n in shards})
    if len(splits) > 1:
        raise UserError(f"{root}: shard indexes of different splits ({', '.join(p.name for p in shards.values())}); "
                        "keep those of one split (one N) in a suite directory")
    n = splits[0]
    over = [p.name for (k, _), p in shards.items() if k > n]
    if over:
        raise UserError(f"{root / over[0]}: shard {over[0].split('-')[2]} of {n}: K must be between 1 and N; "
                        "not a shard index nestlab wrote")
    entries, plans = [], {}
    for (k, _), path in sorted(shards.items()):
        data = read_index(root, path.name)
        runs = member_runs(path, data)
        plans.setdefault((data.get("suite"), data.get("scale"), data.get("plan")), []).append(k)
        _check_split(path, data, k, n)
        for e, run in zip(data["runs"], runs, strict=True):
            entries.append({**e, "run": run, "shard": k})
    if len(plans) > 1:
        what = "; ".join(f"shard{'s' if len(ks) > 1 else ''} {', '.join(map(str, ks))}: suite {s}, scale {sc}, "
                         f"plan {pl}" for (s, sc, pl), ks in plans.items())
        raise UserError(f"{root}: the shard indexes are of different plans ({what}): the suite file or --scale "
                        "differed between the machines; run every shard from the same suite file")
    _check_once(root, entries)
    have = sorted(k for k, _ in shards)
    if len(have) < n and notes is not None:
        # Counted, not listed: N comes from a file name, and a crafted one may be 10^11.
        missing = list(itertools.islice((k for k in range(1, n + 1) if (k, n) not in shards), 4))
        gone = n - len(have)
        listed = ", ".join(map(str, missing[:3])) + (f", ... ({gone} in all)" if gone > 3 else "")
        notes.append(f"{root}: shard{'s' if gone > 1 else ''} {listed} of {n} not here (no "
                     f"{index_name((missing[0], n))}): reading shard{'s' if len(have) > 1 else ''} "
                     f"{', '.join(map(str, have))} only, {len(entries)} of the suite's runs")
    entries.sort(key=lambda e: (e.get("position") if isinstance(e.get("position"), int) else 1 << 30))
    return entries


def _check_split(path: Path, data: dict, k: int, n: int) -> None:
    """UserError (one line) for a shard index whose split cannot be of its plan: more shards than the
    plan has runs ("planned", where the index says), or a run at a position that is not shard k's."""
    planned = data.get("planned")
    if isinstance(planned, int) and not isinstance(planned, bool) and n > max(planned, 1):
        raise UserError(f"{path}: a split into {n} shards of a plan of {planned} runs; not a shard index nestlab "
                        "wrote")
    for i, e in enumerate(data["runs"]):
        pos = e.get("position")
        if isinstance(pos, int) and not isinstance(pos, bool) and (
                pos < 0 or pos % n != k - 1 or (isinstance(planned, int) and pos >= planned)):
            raise UserError(f"{path}: runs[{i}]: position {pos} is not one of shard {k} of {n}'s; not a shard "
                            "index nestlab wrote")


def _check_once(root: Path, entries: list[dict]) -> None:
    """UserError when two entries of the shards hold one position of the plan or one run directory:
    the pooled tables would count that run twice."""
    seen: dict = {}
    for e in entries:
        for what in ("position", "run"):
            v = e.get(what)
            if v is None or isinstance(v, bool) or not isinstance(v, int | str):
                continue
            if (what, v) in seen:
                raise UserError(f"{root}: {what} {v!r} is in shard {seen[what, v]}'s index and shard "
                                f"{e.get('shard')}'s: the suite's tables would count it twice; not shard indexes "
                                "nestlab wrote")
            seen[what, v] = e.get("shard")


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
        if run and (Path(run).is_absolute() or ".." in Path(run).parts or not _inside(index.parent, run)):
            raise UserError(f"{index}: runs[{k}]: {run!r} is outside the suite; refused")
        out.append(run or None)
    return out


def _inside(root: Path, run: str) -> bool:
    """`root / run`, symbolic links resolved, is inside `root` (a symlinked subdirectory is not)."""
    base = os.path.realpath(root)
    return os.path.commonpath([base, os.path.realpath(root / run)]) == base


def resumable_runs(root: Path, name: str = INDEX) -> dict[tuple[str, int, str], Path]:
    """The complete runs --resume may keep: those the suite's current index `name` names (after
    --restart, the runs of the index set aside are not brought back), or, without an index, every
    complete run under the suite directory."""
    index = read_index(root, name)
    if index is None:
        return complete_runs(root)
    return complete_runs(root, {(root / run).resolve() for run in member_runs(root / name, index) if run})


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
