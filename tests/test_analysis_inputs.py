"""What a rule variant and a labelling policy read: only what the loaded run hands them (issue 29,
item 2). A variant reads its Batch (analysis.model.batch: the stretches, their cells, the run's engine
metrics) and shares what it derives through Batch.shared, never through Batch's private fields; the
variants and the policies open no run (no sqlite3, no rundir reader, no run path).

The source is read with `ast`, as tests/test_layout.py reads it; each check is shown to fail on a
planted tree."""

from __future__ import annotations

import ast
import sqlite3
from pathlib import Path

import numpy as np

from analysis.diagnose import diagnose_stretches
from analysis.model.batch import Batch
from analysis.model.stretches import load_stretches
from tests.support.env import REPO
from tests.support.synthetic import synthetic_run
from tests.test_streams_analysis import chain_run

# The modules that read the run as the analysis hands it over, never the run itself.
READERS = ("analysis/variants", "analysis/labels.py", "analysis/labels_streams.py", "analysis/fault_reach.py")
# What opens or finds a run: a reader of run.db, a run directory's paths.
OPENERS = ("sqlite3", "rundir.db", "rundir.read", "rundir.streams", "rundir.columnar", "rundir.layout",
           "rundir.runs", "rundir.live_reader", "rundir.copies")
# Batch's private state (its dataclass fields and methods whose names start with "_").
PRIVATE = {n for n in (*Batch.__dataclass_fields__, *vars(Batch)) if n.startswith("_") and not n.startswith("__")}


def _files(root: Path, places) -> list[Path]:
    out = []
    for place in places:
        p = root / place
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p] if p.is_file() else []
    return out


def run_openers(root: Path, places=READERS) -> list[str]:
    """`file: module` for each import of a module that opens or finds a run, in the readers."""
    found = []
    for path in _files(root, places):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found += [f"{path.relative_to(root)}: {n}" for n in names if n in OPENERS]
    return sorted(set(found))


def private_batch_uses(root: Path) -> list[str]:
    """`file:line: .name` for each use of one of Batch's private names in analysis/ and bench/ outside
    analysis/model/batch.py (a test may look inside)."""
    found = []
    for path in _files(root, ("analysis", "bench")):
        if path.relative_to(root).as_posix() == "analysis/model/batch.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
                found.append(f"{path.relative_to(root)}:{node.lineno}: .{node.attr}")
    return found


def test_variants_and_policies_open_no_run():
    assert run_openers(REPO) == []


def test_no_one_reaches_into_batchs_private_state():
    assert PRIVATE >= {"_flat_counters", "_shared"}
    assert private_batch_uses(REPO) == []


def test_the_checks_can_fail(tmp_path):
    (tmp_path / "analysis/variants").mkdir(parents=True)
    (tmp_path / "analysis/variants/x.py").write_text(
        "from rundir import streams\nfrom rundir.db import connect\n\n\ndef f(batch):\n    return batch._shared\n")
    (tmp_path / "analysis/labels.py").write_text("import sqlite3\nfrom rundir.errors import UserError\n")
    assert run_openers(tmp_path) == ["analysis/labels.py: sqlite3", "analysis/variants/x.py: rundir.db",
                                     "analysis/variants/x.py: rundir.streams"]
    assert private_batch_uses(tmp_path) == ["analysis/variants/x.py:6: ._shared"]


def test_flink_backpressure_diagnoses_from_the_loaded_run_without_opening_it(tmp_path, monkeypatch):
    run = load_stretches(chain_run().write(tmp_path / "run"))
    assert not run.engine_metrics.tasks.empty and run.engine_metrics.ends   # read with the run
    variants = ["flink-backpressure", "flink-backpressure:upstream=off"]
    before = diagnose_stretches(run, variants)

    def refuse(*a, **k):
        raise AssertionError("the variant opened the run")

    monkeypatch.setattr(sqlite3, "connect", refuse)
    after = diagnose_stretches(run, variants)
    for a, b in zip(before, after, strict=True):
        for v in variants:
            for d in ("in", "out"):
                assert np.array_equal(a.results[v][d][0], b.results[v][d][0])
    # it found the throttle: the connection into t is STALLED while t is busy under back-pressure
    assert any(sd.results["flink-backpressure"]["out"][1].any() for sd in after)


def test_a_network_run_has_no_engine_metrics(tmp_path):
    run = load_stretches(synthetic_run(tmp_path / "net", seconds=3, apps=1, conns=2))
    assert run.stretches and run.engine_metrics.tasks.empty and run.engine_metrics.ends == {}
