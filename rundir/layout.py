"""The run directory: manifest.json, run.db and logs/, and where a new one goes.

Only rundir/ spells the run directory's names (tests/test_layout.py checks it): everything outside it
takes its paths from RunDir (`RunDir(path).db`, `.logs`, ...; `RunDir.open(path)` reads the manifest too).
Here they are named once (DB, MANIFEST, ...); rundir's readers and writers that must stay light or take a
bare path (rundir.read, requests, streams, columnar, runs, handmade*) spell `run.db` and `manifest.json`
themselves.

The manifest is written here only, as a rundir.manifest.Manifest validated on every write; pydantic
is imported when a manifest is written, so that run.db's writers (rundir.db) stay standard-library
only on testbed nodes.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rundir.errors import UserError

DB = "run.db"
MANIFEST = "manifest.json"
LOGS = "logs"
ANALYSIS = "analysis"        # what the analysis derives (a run's, or a suite's tables)
COLUMNAR = "columnar"        # the analysis's columnar copies (rundir.columnar)
NAMES = (DB, MANIFEST, LOGS, ANALYSIS, COLUMNAR)


def _json(value: Any) -> Any:
    """A manifest value as JSON data: a part of the schema (a pydantic model) as the keys it was given."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_unset=True)
    return value


@dataclass
class RunDir:
    """One run directory: its paths and its manifest.

    `manifest` holds the manifest's keys in the order they were first given; the file is exactly that
    (json, indented), so a rewrite changes only what changed. Writers call `update_manifest(key=...)`
    with the schema's keys (rundir.manifest.Manifest): an unknown key is a TypeError, a value that does
    not fit is a ManifestError (one line) and nothing is written."""

    path: Path
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def db(self) -> Path:
        return self.path / DB

    @property
    def logs(self) -> Path:
        return self.path / LOGS

    @property
    def analysis(self) -> Path:
        """The analysis's output of this run (or of the suite whose directory this is)."""
        return self.path / ANALYSIS

    @property
    def columnar(self) -> Path:
        return self.path / COLUMNAR

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    @property
    def collector_log(self) -> Path:
        return self.logs / "collector.log"

    @property
    def analysis_log(self) -> Path:
        """A suite's run's analysis output (its tables), written instead of the terminal."""
        return self.logs / f"{ANALYSIS}.log"

    @property
    def status(self) -> str | None:
        return self.manifest.get("status")

    def update_manifest(self, **fields: Any) -> None:
        """Set these keys of the manifest (schema keys; models or JSON data) and write it."""
        from rundir.manifest import Manifest

        unknown = sorted(set(fields) - set(Manifest.model_fields))
        if unknown:
            raise TypeError(f"not manifest keys (rundir.manifest.Manifest): {', '.join(unknown)}")
        self.manifest.update({k: _json(v) for k, v in fields.items()})
        self.write_manifest()

    def write_manifest(self) -> None:
        """Write `manifest` as manifest.json, after checking it against the schema (ManifestError, one
        line, when it does not fit: nothing is written)."""
        from rundir.manifest import validate_manifest

        validate_manifest(self.manifest, self.manifest_path)
        # Write-then-rename so a crash never leaves a half-written manifest.
        tmp = self.manifest_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.manifest, indent=2, sort_keys=False, default=str) + "\n")
        os.replace(tmp, self.manifest_path)

    @classmethod
    def create(cls, results_root: Path, experiment: str, repetition: int) -> RunDir:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path(results_root) / experiment
        path = base / f"{stamp}-r{repetition}"
        n = 1
        while path.exists():  # two runs in the same second (tests): add a suffix
            n += 1
            path = base / f"{stamp}-{n}-r{repetition}"
        path.mkdir(parents=True)
        rd = cls(path)
        rd.logs.mkdir()
        return rd

    @classmethod
    def open(cls, path: Path | str) -> RunDir:
        """An existing run directory, its manifest as stored (not validated: a reader says what is
        wrong with it, rundir.manifest.read_manifest)."""
        path = Path(path)
        rd = cls(path)
        rd.manifest = json.loads(rd.manifest_path.read_text())
        return rd


def output_dir(path: Path | str) -> Path:
    """A directory to write derived files into (a run's analysis/ or logs/, or --out): made if
    missing, refused (UserError) when it is a symbolic link: a crafted run directory must not send
    files written as root somewhere else."""
    path = Path(path)
    if path.is_symlink():
        raise UserError(f"{path}: is a symbolic link (to {os.readlink(path)}); refusing to write through it")
    path.mkdir(parents=True, exist_ok=True)
    return path


def fresh(path: Path | str) -> Path:
    """`path`, ready to be written as a new file: a symbolic link planted there is removed (the link,
    never its target), so that writing it never follows a link out of the directory."""
    path = Path(path)
    if path.is_symlink():
        path.unlink()
    return path


def run_db(path: Path | str) -> Path:
    """The run.db a reader was given: `path` itself when it is a file (a run.db path), else the run
    directory's (RunDir.db)."""
    path = Path(path)
    return path if path.is_file() else RunDir(path).db
