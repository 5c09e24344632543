"""`nestlab paths` end to end, in a subprocess, with the test-only oracle algorithm (nestlab/commands/paths.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from analysis.paths.maketrace import Fault, maketrace, web_service
from analysis.paths.readers import write_faults, write_trace
from tests.support.env import REPO
from tests.test_paths_readers import jaeger_doc, make_run


def nestlab(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", "tests.support.paths_cli", *args], capture_output=True,
                          text=True, env=env, cwd=cwd or REPO, timeout=120)


@pytest.fixture(scope="module")
def trace_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("trace")
    # paths far apart (the oracle is exact only then) and a 200 ms delay at web2 for a while
    tr = maketrace(web_service(), duration=4000, parallelism=0.004, seed=3,
                   faults=[Fault("web2", 0.2, 1000, 2500)])
    write_trace(tr, d / "t.csv")
    write_faults(tr, d / "faults.csv")
    return d


def test_trace_file_prints_call_trees_and_writes_both_tables(trace_files, tmp_path):
    r = nestlab("paths", "--trace", str(trace_files / "t.csv"), "--faults", str(trace_files / "faults.csv"),
                "-a", "oracle", "--param", "x=0.5", "--out", str(tmp_path), "--top", "3")
    assert r.returncode == 0, r.stderr
    assert "client → web" in r.stdout and "ms" in r.stdout
    assert r.stdout.count("paths (") == 3                       # three call trees
    paths = pd.read_csv(tmp_path / "paths.csv")
    assert {"source", "algorithm", "rank", "pattern", "count", "share", "web1_ms"} <= set(paths.columns)
    assert paths["algorithm"].eq("oracle").all() and paths["rank"].tolist()[:3] == [1, 2, 3]
    score = pd.read_csv(tmp_path / "paths-score.csv")
    for c in ("algorithm", "pattern_recall", "pattern_precision", "delay_error_pct", "culprit_top1", "culprit_top3"):
        assert c in score.columns
    row = score.iloc[0]
    assert row["pattern_recall"] == 1 and row["pattern_precision"] == 1
    assert row["delay_error_pct"] < 10 and row["culprit_top1"] == 1 and row["fault_windows"] == 1


def test_jaeger_export(tmp_path):
    (tmp_path / "e.json").write_text(json.dumps(jaeger_doc(3)))
    r = nestlab("paths", "--jaeger", str(tmp_path / "e.json"), "-a", "oracle", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "frontend → backend" in r.stdout.replace("[cyan]", "")
    assert pd.read_csv(tmp_path / "paths-score.csv")["pattern_recall"].iloc[0] == 1


def test_damaged_trace_warns_and_goes_on(tmp_path):
    (tmp_path / "bad.csv").write_text("time,sender,receiver\n2,A,B\n1,B,A\nx,A,B\n3,A")
    r = nestlab("paths", "--trace", str(tmp_path / "bad.csv"), "-a", "oracle", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "earlier than the row before" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "paths-score.csv").exists()          # no truth, no score
    assert len(pd.read_csv(tmp_path / "paths.csv")) >= 1


@pytest.mark.parametrize("args, message", [
    (["--trace", "/nonexistent/t.csv", "-a", "oracle"], "no such file"),
    (["-a", "oracle"], "name the trace to analyse"),
    (["--trace", "x.csv", "--jaeger", "y", "-a", "oracle"], "one of them"),
    (["--trace", "x.csv", "-a", "nosuch"], "unknown algorithm 'nosuch'"),
    (["--trace", "x.csv", "-a", "oracle", "--param", "z=1"], "no such parameter"),
    (["--trace", "x.csv", "-a", "oracle", "--param", "x=abc"], "wants a float"),
    (["--jaeger", "/nonexistent", "-a", "oracle"], "no such file"),
    (["--trace", "x.csv", "-a", "oracle", "--jobs", "0"], "--jobs 0: give 1 or more"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    r = nestlab("paths", *args, "--out", str(tmp_path))
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_a_run_without_messages_says_how_to_record_one(tmp_path):
    run = make_run(tmp_path, with_messages=False)
    r = nestlab("paths", str(run), "-a", "oracle", "--out", str(tmp_path / "out"))
    assert r.returncode == 2
    assert "trace: messages" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_run_with_messages(tmp_path):
    run = make_run(tmp_path)
    r = nestlab("paths", str(run), "-a", "oracle", "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert "web → app" in r.stdout.replace("[cyan]", "")
    assert (tmp_path / "out" / "paths-score.csv").exists()


def test_a_recorded_run_scored_end_to_end(tmp_path):
    from tests.test_paths_readers import write_maketrace_run
    tr = maketrace(web_service(), duration=3000, parallelism=0.004, seed=4, faults=[Fault("app2", 0.2, 1000, 2000)])
    run = write_maketrace_run(tmp_path, tr)
    r = nestlab("paths", str(run), "-a", "oracle", "--param", "x=0.5", "--top", "1")
    assert r.returncode == 0, r.stderr
    score = pd.read_csv(run / "analysis" / "paths-score.csv").iloc[0]   # one run: its own analysis/
    assert score["source"] == str(run.resolve())
    assert score["pattern_recall"] == 1 and score["culprit_top1"] == 1


def test_repeated_algorithms_all_run(tmp_path):
    (tmp_path / "e.json").write_text(json.dumps(jaeger_doc(3)))
    r = nestlab("paths", "--jaeger", str(tmp_path / "e.json"), "-a", "nesting", "-a", "linking,oracle",
                "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    score = pd.read_csv(tmp_path / "paths-score.csv")
    assert score["algorithm"].tolist() == ["nesting", "linking", "oracle"]   # only the last ran before
    assert {"request_accuracy", "mapping_accuracy"} <= set(score.columns)
    assert score.set_index("algorithm").loc["nesting", "request_accuracy"] == 1
    services = pd.read_csv(tmp_path / "paths-services.csv")
    assert set(services["service"]) >= {"frontend", "backend"}


def test_all_algorithms(tmp_path):
    from analysis.paths.algorithms import ALGORITHMS
    (tmp_path / "e.json").write_text(json.dumps(jaeger_doc(3)))
    r = nestlab("paths", "--jaeger", str(tmp_path / "e.json"), "-a", "all", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    ran = pd.read_csv(tmp_path / "paths.csv")["algorithm"].unique().tolist()
    assert set(ALGORITHMS) <= set(ran) | {"convolution"}     # convolution may find no pattern in 3 requests


def test_export_writes_truth_and_inferred_paths(tmp_path):
    from analysis.paths.model import true_patterns
    from analysis.paths.readers import read_jaeger
    (tmp_path / "e.json").write_text(json.dumps(jaeger_doc(3)))
    r = nestlab("paths", "--jaeger", str(tmp_path / "e.json"), "-a", "nesting,convolution", "--out", str(tmp_path),
                "--export", str(tmp_path / "x"))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["paths-nesting.json", "paths-truth.json"]
    truth, got = read_jaeger(tmp_path / "x" / "paths-truth.json"), read_jaeger(tmp_path / "x" / "paths-nesting.json")
    assert sorted(true_patterns(truth)["pattern"]) == sorted(true_patterns(got)["pattern"])


def test_jobs_change_nothing_written_or_printed(tmp_path):
    """--jobs 2 forks the algorithms after one import; what is printed and written is what --jobs 1
    (one after another, in the process) prints and writes."""
    (tmp_path / "e.json").write_text(json.dumps(jaeger_doc(20)))
    got = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}"
        r = nestlab("paths", "--jaeger", str(tmp_path / "e.json"), "-a", "all", "--jobs", jobs, "--out", str(out))
        assert r.returncode == 0, r.stderr
        got[jobs] = (r.stdout.replace(str(out), "OUT"), r.stderr,
                     *((out / f).read_text() for f in ("paths.csv", "paths-score.csv", "paths-services.csv")))
    assert got["1"] == got["2"]
    assert "oracle" in got["2"][3]         # every algorithm ran and was scored


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_failing_algorithm_after_others_is_one_line_and_theirs_are_printed(jobs, tmp_path):
    """The algorithms' results are printed as they come, in order: one failing after nesting leaves
    nesting's call trees printed, then one line and exit 2 (as one after another did)."""
    (tmp_path / "e.json").write_text(json.dumps(jaeger_doc(3)))
    r = nestlab("paths", "--jaeger", str(tmp_path / "e.json"), "-a", "nesting,linking",
                "--param", "granularity=bogus", "--jobs", jobs, "--out", str(tmp_path))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "— nesting:" in r.stdout and "— linking:" not in r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "granularity must be one of" in lines[0], r.stderr


def _sets(tmp_path, sizes=(20, 3, 8)):
    """Trace sets of different sizes, each a directory of Jaeger files (the largest is started first)."""
    dirs = []
    for i, n in enumerate(sizes):
        d = tmp_path / f"set{i}"
        d.mkdir()
        (d / "e.json").write_text(json.dumps(jaeger_doc(n)))
        dirs.append(str(d))
    return dirs


def test_several_traces_at_once_change_nothing_written_or_printed(tmp_path):
    """--jaeger takes several trace sets; with --jobs 2 each is imported and analysed whole in a
    forked worker, and what is printed and written (tables, exports) is what --jobs 1 gives."""
    dirs = _sets(tmp_path)
    got = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}"
        r = nestlab("paths", "--jaeger", *dirs, "-a", "nesting,linking,oracle", "--jobs", jobs,
                    "--out", str(out), "--export", str(out / "x"))
        assert r.returncode == 0, r.stderr
        got[jobs] = (r.stdout.replace(str(out), "OUT"), r.stderr,
                     *((out / f).read_text() for f in ("paths.csv", "paths-score.csv", "paths-services.csv")),
                     {p.name: p.read_text() for p in sorted((out / "x").iterdir())})
    assert got["1"] == got["2"]
    score = pd.read_csv(tmp_path / "j2" / "paths-score.csv")
    assert score["source"].tolist() == [d for d in dirs for _ in range(3)]     # in the order given
    stem = f"{tmp_path.name}-set"          # per set its truth, nesting's and linking's paths
    assert sorted(got["2"][5]) == sorted(f"{stem}{i}-{w}.json" for i in range(3) for w in ("truth", "nesting", "linking"))


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_damaged_trace_among_several_is_one_line_after_the_ones_before(jobs, tmp_path):
    dirs = _sets(tmp_path, (3, 3))
    (tmp_path / "set1" / "e.json").write_text("{")
    r = nestlab("paths", "--jaeger", *dirs, "-a", "nesting", "--jobs", jobs, "--out", str(tmp_path))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"{dirs[0]} — nesting:" in r.stdout and f"{dirs[1]} — nesting:" not in r.stdout
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_folder_of_trace_sets_says_how_to_give_them(tmp_path):
    """--jaeger on a folder whose subdirectories hold the exports (the artifact's data/<app>): one line
    naming them and the PATH/* form, exit 2; the sets given that way are read."""
    for name in ("load25", "load50"):
        (tmp_path / "app" / name).mkdir(parents=True)
        (tmp_path / "app" / name / "e.json").write_text(json.dumps(jaeger_doc(3)))
    r = nestlab("paths", "--jaeger", str(tmp_path / "app"), "-a", "oracle", "--out", str(tmp_path))
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "2 subdirectories load25, load50 hold some" in lines[0], r.stderr
    assert f"e.g. {tmp_path / 'app'}/*" in lines[0]
    r = nestlab("paths", "--jaeger", str(tmp_path / "app" / "load25"), str(tmp_path / "app" / "load50"),
                "-a", "oracle", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert len(pd.read_csv(tmp_path / "paths-score.csv")) == 2
