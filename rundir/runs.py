"""Finding stored runs and checking what each holds.

`find_runs(specs, results_root)` turns what a user types into run directories. Each spec may be
- a run directory (holds run.db; manifest.json expected),
- a directory tree holding runs at any depth (an experiment's directory, a whole results/ tree),
- a glob ('results/net_fault/2026*', quoted so the shell leaves it alone),
- an experiment name: the directory of that name under the results root.
A suite directory's runs are those its index names, or the union of its shard indexes' (a suite
split over machines; rundir.suite_index).

`open_run(path)` checks a run directory and says, in one line each, what is wrong with it: a run
still recording or whose machine died (status `running`), an interrupted or failed run, a missing
manifest, an older or newer `format_version`, missing tables, a run.db cut short or holding fewer
snapshots than the manifest counts (a lost WAL). What cannot be read at all raises
rundir.errors.UserError; what can be read partly is, with a warning. `guarded(run, fn, ...)` turns any
failure of one run into one line.

The manifest is read once, as a rundir.manifest.Manifest; readers use its attributes.
"""

from __future__ import annotations

import glob
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rundir import read, repair
from rundir.db import FORMAT_VERSION
from rundir.errors import UserError
from rundir.manifest import Manifest, ManifestError, Monitor, RunSpec, read_manifest
from rundir.suite_index import INDEX as SUITE_INDEX
from rundir.suite_index import SHARD_INDEX, is_run_dir, suite_members

REQUIRED_TABLES = ("modules", "snapshots", "counters")
OPTIONAL_TABLES = ("edges", "processes", "faults", "events")
HEALTH_TABLES = ("tcp_info", "queue_stats")   # format 3; older runs have no network health data
GLOB_CHARS = set("*?[")
T = TypeVar("T")


@dataclass
class RunInfo:
    """A run directory that can be analysed, with what is known about its state."""

    path: Path
    manifest: Manifest | None         # None: no manifest.json, or one that could not be read
    status: str                       # complete | interrupted | failed | running | unknown
    format_version: int | None
    tables: set[str]
    warnings: list[str] = field(default_factory=list)

    @property
    def experiment(self) -> str:
        return (self.manifest.experiment if self.manifest is not None else None) or self.path.parent.name

    @property
    def spec(self) -> RunSpec:
        """The manifest's resolved spec (empty without a manifest)."""
        return self.manifest.spec if self.manifest is not None else RunSpec()

    @property
    def monitor(self) -> Monitor:
        """The manifest's monitored host (empty without a manifest)."""
        return self.manifest.monitor if self.manifest is not None else Monitor()

    @property
    def name(self) -> str:
        return f"{self.experiment}/{self.path.name}"


# ----------------------------------------------------------------------------- finding runs


def _runs_under(root: Path, notes: list[str] | None = None) -> list[Path]:
    if is_run_dir(root):
        return [root]
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("analysis", "logs") and not d.startswith("."))
        if SUITE_INDEX in filenames or any(SHARD_INDEX.match(f) for f in filenames):
            found += suite_members(Path(dirpath), notes) or []
            dirnames[:] = []  # a suite's runs are the ones its index names
        elif "run.db" in filenames or "manifest.json" in filenames:
            found.append(Path(dirpath))
            dirnames[:] = []  # a run does not hold runs
    return found


def find_runs(specs: list[str] | tuple[str, ...], results_root: str | Path = "results",
              notes: list[str] | None = None) -> list[Path]:
    """Run directories named by `specs` (see the module docstring), in order, without duplicates.
    `notes` gets what the user should know of what was found (a suite's shards that are not there)."""
    if not specs:
        raise UserError("name at least one run: a run directory, a directory of runs, a glob, "
                        "or an experiment name")
    out: list[Path] = []
    for spec in specs:
        p = Path(spec)
        if p.is_file() and p.name in ("run.db", "manifest.json"):
            paths = [p.parent]
        elif p.is_dir():
            paths = _runs_under(p, notes)
            if not paths:
                raise UserError(f"{spec}: no runs here (no run.db or manifest.json at any depth)")
        elif GLOB_CHARS & set(spec):
            matches = sorted(glob.glob(spec))
            if not matches:
                raise UserError(f"{spec}: the glob matches nothing")
            paths = [r for m in matches if Path(m).is_dir() for r in _runs_under(Path(m), notes)]
            if not paths:
                raise UserError(f"{spec}: the glob matches no run directories")
        elif (Path(results_root) / spec).is_dir() and "/" not in spec:
            paths = _runs_under(Path(results_root) / spec, notes)
            if not paths:
                raise UserError(f"{spec}: experiment directory {Path(results_root) / spec} holds no runs yet")
        else:
            known = sorted(d.name for d in Path(results_root).iterdir() if d.is_dir()) \
                if Path(results_root).is_dir() else []
            hint = f" (experiments under {results_root}/: {', '.join(known)})" if known else ""
            raise UserError(f"{spec}: not a run directory, a directory of runs, a glob or an "
                            f"experiment name{hint}")
        for r in paths:
            r = r.resolve()
            if r not in out:
                out.append(r)
    return out


def common_root(paths: list[Path]) -> Path:
    """The deepest directory holding every path (the run itself for one run)."""
    return Path(os.path.commonpath([str(p.resolve()) for p in paths]))

# ----------------------------------------------------------------------------- checking a run


def _db_version(value: Any, warnings: list[str]) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        warnings.append(f"run.db meta: format_version {repair.shown(value)} is not a number; ignored")
        return None


def open_run(path: str | Path) -> RunInfo:
    """Check a run directory (module docstring); raises UserError when nothing can be analysed."""
    path = Path(path)
    warnings: list[str] = []
    try:
        manifest = read_manifest(path / "manifest.json")
    except ManifestError as e:
        manifest = None
        warnings.append(f"manifest.json {e.detail}; workloads and fault plan unknown")
    else:
        if manifest is None:
            warnings.append("no manifest.json (incomplete run); workloads are guessed from command lines")
    with read.run_db(path) as conn:
        tables = read.tables(conn)
        db_version = None
        if "meta" in tables:
            row = read.meta_value(conn, "format_version")
            db_version = _db_version(row[0], warnings) if row else None
        if manifest is not None and "snapshots" in tables:
            lost = read.counts_warning(conn, manifest.counts)
            if lost:
                warnings.append(lost)
    if manifest is not None:
        for what, v, instead in (("t0", manifest.t0, "the time origin is the first snapshot"),
                                 ("spec.duration", manifest.spec.duration, "the run's end is its run_end event")):
            if v is not None and not (repair.is_number(v) and v >= 0):
                warnings.append(f"manifest.json: {what} {repair.shown(v)} is not a time; {instead}")
    version = manifest.format_version if manifest is not None else db_version
    if version is not None and version > FORMAT_VERSION:
        raise UserError(f"{path}: format_version {version} is newer than this nestlab reads "
                        f"({FORMAT_VERSION}); update nestlab")
    if version is None:
        warnings.append(f"no format_version recorded; reading it as version {FORMAT_VERSION}")
    elif version < FORMAT_VERSION:
        warnings.append(f"older format_version {version} (current {FORMAT_VERSION}); reading what it holds")
    missing = [t for t in REQUIRED_TABLES if t not in tables]
    if missing:
        raise UserError(f"{path}: run.db has no {', '.join(missing)} table; not a nestlab run, or a format "
                        "too old to analyse")
    lacking = [t for t in OPTIONAL_TABLES if t not in tables]
    if lacking:
        warnings.append(f"run.db has no {', '.join(lacking)} table; analysing without it")
    status = manifest.status if manifest is not None else "unknown"
    reason = manifest.reason if manifest is not None else None
    if status == "running":
        warnings.append("status 'running': still recording, or the machine died; analysing what was recorded")
    elif status in ("interrupted", "failed"):
        warnings.append(f"run {status}{': ' + str(reason) if reason else ''}; analysing what was recorded")
    return RunInfo(path, manifest, status, version, tables, warnings)


DEBUG_ENV = "NESTLAB_DEBUG"   # set: a run that fails unexpectedly raises with its traceback


def guarded(run: str | Path, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    """fn(*args) for one run, with every failure as one line (UserError): a run.db SQLite cannot read,
    or anything the analysis did not expect of a damaged run (its type and message; the traceback
    with NESTLAB_DEBUG=1). UserError and OSError pass as they are (nestlab.cli prints them)."""
    try:
        return fn(*args, **kw)
    except (UserError, OSError):   # OSError: a file the user names or writes (nestlab's one line)
        raise
    except sqlite3.Error as e:
        raise read.db_error(Path(run), e) from None
    except Exception as e:   # noqa: BLE001 - a damaged run must not end in a traceback
        if os.environ.get(DEBUG_ENV):
            raise
        text = " ".join(str(e).split())
        raise UserError(f"{run}: cannot be analysed: {type(e).__name__}: {text[:200]} (a damaged run? "
                        f"{DEBUG_ENV}=1 shows where)") from None

