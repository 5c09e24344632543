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
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    assert len(blocks) == 2
    return "\n".join(blocks)


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
    nest_cf = names["table"][names["table"]["variant"] == "nest-cf"].drop(columns="variant").reset_index(drop=True)
    assert names["table"].attrs["asked"] == {"flowdiagnoser:theta=2": "flowdiagnoser:theta=2", "nest-cf": "nest-cf"}
    scored = names["scored"]   # nest-cf's own diagnosis, scored: its accuracy
    pd.testing.assert_frame_equal(scored.drop(columns="variant"), nest_cf)


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
    assert set(got) == {"modules", "snapshots", "counters", "faults", "edges", "processes", "diagnosis", "labels",
                        "tcp_info", "probes"}
    assert all(list(f.columns)[0] == "run" and set(f["run"]) <= {"hand/r0"} for f in got.values())
    stored = nestlab.open_run(run)
    assert len(got["counters"]) == len(stored.counters) and len(got["diagnosis"]) == 2 * len(stored.counters)
    assert got["snapshots"]["seq"].tolist() == stored.snapshots.index.tolist()
    assert got["labels"]["actual"].astype(bool).sum() == stored.labels()["actual"].sum()
    attrs = got["modules"].set_index("id")["attrs"]
    assert json.loads(attrs.iloc[0]) == stored.modules["attrs"].iloc[0]   # dicts as JSON text


def test_one_calling_convention_for_variants_and_usage_errors_that_name_the_usage(tmp_path):
    run = nestlab.open_run(make_run(tmp_path / "exp" / "r0")[0])
    many = run.diagnose("flowdiagnoser:theta=1..2", "flowdiagnoser:probe=on")
    listed = run.diagnose(["flowdiagnoser:theta=1..2", "flowdiagnoser:probe=on"])
    pd.testing.assert_frame_equal(many, listed)
    assert many.groupby("asked", observed=True)["variant"].first().astype(str).to_dict() == {
        "flowdiagnoser:theta=1": "flowdiagnoser:theta=1", "flowdiagnoser:theta=2": "flowdiagnoser:theta=2",
        "flowdiagnoser:probe=on": "flowdiagnoser:theta=2,probe=on"}
    from analysis.variants import SYSTEMS, parse_variant
    objects = run.diagnose(parse_variant("flowdiagnoser:theta=1"), SYSTEMS["nest-cf"])
    assert set(objects["variant"]) == {"flowdiagnoser:theta=1", "nest-cf"}
    table = run.accuracy("flowdiagnoser:theta=2..3")
    assert set(table["variant"]) == {"flowdiagnoser:theta=2", "flowdiagnoser:theta=3"}
    for bad, says in ((3, "got int 3"), (["flowdiagnoser", None], "got NoneType"), ("nosuch", "unknown variant 'nosuch'")):
        with pytest.raises(UserError, match=says) as e:
            run.diagnose(bad)
        assert str(run.path) not in str(e.value) and "damaged" not in str(e.value)
    with pytest.raises(UserError, match="unknown label policy 'nope'"):
        nestlab.accuracy_of([run], policy="nope")
    with pytest.raises(UserError, match="runs: expected StoredRun objects or run directories; got int"):
        nestlab.accuracy_of([1])


def test_per_run_rows_and_jobs(tmp_path):
    for k in range(2):
        make_run(tmp_path / "exp" / f"r{k}")
    runs = nestlab.open_runs(str(tmp_path / "exp"))
    per = nestlab.accuracy_of(runs, ["flowdiagnoser:theta=2", "nest-cf"], per_run=True)
    assert sorted(per["run"].unique()) == sorted(str(r.path) for r in runs)
    assert list(per.columns[:5]) == ["variant", "policy", "run", "section", "row"]
    pooled = nestlab.accuracy_of(runs, "nest-cf")
    for col in ("TP", "FP", "FN", "TN"):   # the runs' counts add up to the pooled ones
        sums = per[per["variant"] == "nest-cf"].groupby(["section", "row"], sort=False)[col].sum().to_numpy()
        assert (sums == pooled[col].to_numpy()).all()
    pd.testing.assert_frame_equal(nestlab.accuracy_of(runs, "nest-cf", jobs=2), pooled)


def test_score_takes_labels_or_positives_from_anywhere_and_says_what_is_wrong(tmp_path):
    runs = [nestlab.open_run(make_run(tmp_path / "exp" / f"r{k}")[0]) for k in range(2)]
    frames = []
    for r in runs:
        d = r.diagnose("flowdiagnoser:theta=2")
        frames.append(d.assign(run=r.name)[["run", "dir", "module", "seq", "label"]])
    both = pd.concat(frames, ignore_index=True)
    scored = nestlab.score(runs, both)
    expected = nestlab.accuracy_of(runs, "flowdiagnoser:theta=2")
    pd.testing.assert_frame_equal(scored.drop(columns="variant"), expected.drop(columns="variant"))
    as_int = both.drop(columns="label").assign(positive=(both["label"] == "STALLED").astype(int))   # 1/0 too
    pd.testing.assert_frame_equal(nestlab.score(runs, as_int), scored)
    per = nestlab.score(runs, both.assign(run=both["run"].map({r.name: str(r.path) for r in runs})), per_run=True)
    assert sorted(per["run"].unique()) == sorted(str(r.path) for r in runs)
    # a prediction missing counts as negative, and is counted
    part = nestlab.score(runs, both.iloc[10:])
    assert part.attrs["unpredicted"] == 10 and part.attrs["unmatched"] == 0
    for frame, says in ((both.drop(columns="run"), "a column `run` is needed with 2 runs"),
                        (both.drop(columns="label"), "missing positive|label"),
                        (both.assign(label="MAYBE"), "label 'MAYBE' is not one of"),
                        (both.drop(columns="label").assign(positive="False"), "`positive` must be True/False"),
                        (both.drop(columns="label").assign(positive=2), "`positive` must be True/False"),
                        (both.assign(run="elsewhere"), "run 'elsewhere' is none of the runs given"),
                        (pd.concat([both, both.iloc[:1]]), "two rows for predictions"),
                        (both.assign(module="tcp"), "`module` must be whole numbers"),
                        (both.assign(seq=1.5), "`seq` must be whole numbers"),
                        ([1, 2], "expected a pandas DataFrame")):
        with pytest.raises(UserError, match=re.escape(says)):
            nestlab.score(runs, frame)


def test_the_evidence_tables_are_frames(tmp_path):
    from rundir.db import connect
    from rundir.layout import RunDir

    path = make_run(tmp_path / "exp" / "r0")[0]
    conn = connect(RunDir(path).db)
    conn.execute("INSERT INTO probes (burst, module, remote, sport, kind, seq, sent, done, outcome, rtt_ms) "
                 "VALUES (1, 3, '10.0.2.1:80', 40000, 'syn', 21, 1002.2, 1002.25, 'answered', 50.0)")
    conn.execute("INSERT INTO tcp_info (seq, module, rtt_us, rttvar_us) VALUES (5, 3, 1200, 300)")
    conn.commit()
    conn.close()
    run = nestlab.open_run(path)
    p = run.probes
    assert len(p) == 1 and p["outcome"].iloc[0] == "answered" and p["module"].dtype == "int64"
    assert p["seq"].dtype == "int64" and p["rtt_ms"].iloc[0] == 50.0
    assert run.tcp_info[["seq", "module", "rtt_us"]].values.tolist() == [[5, 3, 1200]]


def test_dumped_tables_have_one_dtype_per_column_whatever_the_run_holds(tmp_path, capsys):
    """A network run with probes and tcp_info rows and a streams run with neither: each table's Parquet
    schema is the same, so that the runs' tables concatenate (DuckDB's read_parquet('*/*/x.parquet'))."""
    import pyarrow.parquet as pq

    from rundir.db import connect
    from rundir.handmade_streams import StreamsRun, chain
    from rundir.layout import RunDir

    net = make_run(tmp_path / "exp" / "net")[0]
    conn = connect(RunDir(net).db)
    conn.execute("INSERT INTO probes (burst, module, remote, sport, kind, seq, sent, done, outcome, rtt_ms) "
                 "VALUES (1, 3, '10.0.2.1:80', NULL, 'syn', 21, 1002.2, 1002.25, 'timeout', NULL)")
    conn.execute("INSERT INTO tcp_info (seq, module, rtt_us, rttvar_us) VALUES (5, 3, 1200, 300)")
    conn.commit()
    conn.close()
    g = chain(("src", "beacon"), ("t", "throttle"), ("snk", "sink"))
    StreamsRun(g).step({c: (5, 5) for c in g.conns}, 4).fault("throttle", "t", 1.0, 2.0).write(tmp_path / "exp" / "st")
    out = tmp_path / "dump"
    assert nestlab_main(["dump", str(tmp_path / "exp"), "-o", str(out), "--variant", "flowdiagnoser:theta=2"]) == 0
    capsys.readouterr()
    for table in ("modules", "snapshots", "counters", "faults", "edges", "processes", "diagnosis", "labels",
                  "tcp_info", "probes"):
        a, b = (pq.read_schema(out / "exp" / r / f"{table}.parquet").remove_metadata() for r in ("net", "st"))
        assert a == b, f"{table}: {a} != {b}"
    both = pd.concat([pd.read_parquet(out / "exp" / r / "probes.parquet") for r in ("net", "st")])
    assert both["run"].tolist() == ["hand/net"] and str(both["module"].dtype) == "Int64"


def test_open_runs_says_which_results_root_it_looked_in(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=re.escape(f"[results root: {tmp_path / 'results'}, from the working "
                                                  f"directory {tmp_path}; pass results=... or a run's path]")):
        nestlab.open_runs("net_fault")
    make_run(tmp_path / "elsewhere" / "net_fault" / "r0")
    assert [r.name for r in nestlab.open_runs("net_fault", results=tmp_path / "elsewhere")] == ["hand/r0"]


def test_score_refuses_a_run_name_two_runs_share(tmp_path):
    runs = [nestlab.open_run(make_run(tmp_path / exp / "r0")[0]) for exp in ("a", "b")]
    d = runs[1].diagnose("flowdiagnoser:theta=2")[["dir", "module", "seq", "label"]]
    assert runs[0].name == runs[1].name   # the experiment's name and the run's: both hand/r0
    for name in ("r0", runs[1].name):       # before: silently the first run's
        with pytest.raises(UserError, match=re.escape(f"run '{name}' names 2 of the runs given")):
            nestlab.score(runs, d.assign(run=name))
    by_path = nestlab.score(runs, d.assign(run=str(runs[1].path)), per_run=True)
    assert sorted(by_path["run"].unique()) == sorted(str(r.path) for r in runs)
    assert by_path.attrs["unpredicted"] == len(runs[0].counters)   # run a's rows: no predictions
