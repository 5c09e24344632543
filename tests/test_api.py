"""The public Python API (nestlab.api, docs/api.md): the documented example runs, and its numbers are
the command line's, cell by cell."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pandas as pd
import pytest

import nestlab
from nestlab.cli import nestlab_main
from rundir.errors import UserError
from tests.support.env import REPO
from tests.support.runs import make_run


def _example() -> str:
    doc = (REPO / "docs" / "api.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", doc, re.S)
    return code


def test_the_documented_example_runs(tmp_path):
    run, *_ = make_run(tmp_path / "exp" / "r0")
    names = {"RUN": str(run)}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(_example(), "docs/api.md", "exec"), names)   # noqa: S102 - the documented example
    printed = out.getvalue()
    assert f"hand/r0 complete {len(nestlab.open_run(run).snapshots)} snapshots" in printed
    assert "flowdiagnoser:theta=2" in printed and "nest-cf" in printed   # the TCP rows
    assert set(names["table"]["variant"]) == {"flowdiagnoser:theta=2", "nest-cf"}
    assert len(names["diagnosis"]) == 2 * len(names["counters"])
    assert names["truth"]["actual"].any() and len(names["truth"]) == len(names["counters"])


def test_accuracy_equals_the_command_lines_csv_cell_by_cell(tmp_path, capsys):
    run, *_ = make_run(tmp_path / "exp" / "r0")
    variants = ["flowdiagnoser:theta=2", "nest-cf"]
    assert nestlab_main(["accuracy", str(run), *(a for v in variants for a in ("--variant", v)),
                         "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    ours = nestlab.open_run(run).accuracy(variants)
    assert ours.to_csv(index=False, na_rep="") == (tmp_path / "out" / "accuracy.csv").read_text()
    two = make_run(tmp_path / "exp" / "r1")[0]
    assert nestlab_main(["accuracy", str(tmp_path / "exp"), "--out", str(tmp_path / "out2")]) == 0
    capsys.readouterr()
    both = nestlab.accuracy_of(nestlab.open_runs(str(tmp_path / "exp")))
    assert both.to_csv(index=False, na_rep="") == (tmp_path / "out2" / "accuracy.csv").read_text()
    assert two.exists() and isinstance(both, pd.DataFrame)


def test_a_run_that_cannot_be_read_is_the_command_lines_one_line(tmp_path):
    with pytest.raises(UserError, match=r"no run.db"):
        nestlab.open_run(tmp_path)


def test_importing_nestlab_stays_light():
    import subprocess
    import sys

    code = "import sys, nestlab; assert 'pandas' not in sys.modules, sorted(sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr[-500:]


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_dump_writes_the_apis_frames_for_other_tools(tmp_path, capsys, fmt):
    run, *_ = make_run(tmp_path / "exp" / "r0")
    out = tmp_path / "dump"
    assert nestlab_main(["dump", str(run), "-o", str(out), "--format", fmt, "--variant", "flowdiagnoser:theta=2",
                         "--variant", "nest-cf"]) == 0
    assert capsys.readouterr().out.strip() == f"hand/r0: {out / 'exp' / 'r0'}"
    read = pd.read_parquet if fmt == "parquet" else pd.read_csv
    got = {p.stem: read(p) for p in (out / "exp" / "r0").iterdir()}
    assert set(got) == {"modules", "snapshots", "counters", "faults", "edges", "processes", "diagnosis", "labels"}
    stored = nestlab.open_run(run)
    assert len(got["counters"]) == len(stored.counters) and len(got["diagnosis"]) == 2 * len(stored.counters)
    assert got["snapshots"]["seq"].tolist() == stored.snapshots.index.tolist()
    assert got["labels"]["actual"].astype(bool).sum() == stored.labels()["actual"].sum()
    attrs = got["modules"].set_index("id")["attrs"]
    assert json.loads(attrs.iloc[0]) == stored.modules["attrs"].iloc[0]   # dicts as JSON text
