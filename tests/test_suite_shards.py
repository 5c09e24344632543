"""A suite split over machines (--shard K/N), parts of a suite (--only NAME), and the analysis reading
the union of shard indexes as one suite. The runs are hand-made by a stand-in for the runner's
repetition (tests/support/fake_suite.py): no network, no root; the suite runner is the real one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness.suite import in_shard, load_suite, parse_shard
from harness.suiterun import SuiteRun
from nestlab.cli import nestlab_main
from rundir.errors import UserError
from rundir.runs import find_runs
from rundir.suite_index import INDEX, index_name, union_entries
from tests.support.env import REPO, write
from tests.support.fake_suite import fake_lab

THESIS = REPO / "experiments" / "thesis-3.3.yaml"
SUITE = f"""\
suite: small
seed: 5
defaults: {{topology: {REPO / "topologies" / "dumbbell.yaml"}, duration: 10s, monitor: site1n1}}
experiments:
  - name: a
    workloads: [{{kind: wget, host: site1n1, server: site2n1, file_size: 10MB}}]
  - name: b
    workloads: [{{kind: iperf, host: site1n1, server: site2n2}}]
    seeds: [1, 2, 3]
  - name: c
    workloads: [{{kind: iperf, host: site1n1, server: site2n2}}]
"""
PLAN = [("a", 0), ("b", 0), ("b", 1), ("b", 2), ("c", 0)]


@pytest.fixture
def lab(monkeypatch):
    return fake_lab(monkeypatch)


def _run(suite: Path, res: Path, *flags: str) -> int:
    return nestlab_main(["run", str(suite), "--results", str(res), *flags])


def _index(res: Path, name: str = INDEX) -> dict:
    return json.loads((res / "small" / name).read_text())


def _made(res: Path) -> list[tuple[str, int]]:
    return [(json.loads((r / "manifest.json").read_text())["experiment"],
             json.loads((r / "manifest.json").read_text())["repetition"]) for r in find_runs(["small"], res)]


# ----------------------------------------------------------------------------- the split


@pytest.mark.parametrize("n", [1, 2, 3, 5, 24])
def test_the_shards_split_the_plan_by_position_once_each(n):
    suite = load_suite(THESIS)
    plan = list(range(len(suite.planned())))
    shards = [[i for i in plan if in_shard(i, (k, n))] for k in range(1, n + 1)]
    assert sorted(i for s in shards for i in s) == plan                       # every run, once
    assert all(s == plan[k - 1::n] for k, s in enumerate(shards, 1))           # K-1, K-1+N, ...
    assert max(map(len, shards)) - min(map(len, shards)) <= 1                  # as even as it gets
    sr = SuiteRun(suite, Path("/nonexistent"), shard=(2, n) if n > 1 else None)
    assert [m.position for m in sr.members] == (shards[1] if n > 1 else plan)


@pytest.mark.parametrize("text", ["0/2", "3/2", "x", "1/0", "1/2/3", "1/-2", "", "2/100"])
def test_a_bad_shard_is_refused_in_one_line(tmp_path, capsys, text, lab):
    for flags in (["--check"], []):
        assert _run(THESIS, tmp_path / "res", "--shard", text, *flags) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: --shard"), err
    assert not (tmp_path / "res").exists() and lab.made == []
    assert parse_shard(" 2 / 3 ") == (2, 3)


def test_check_shows_the_split_and_runs_nothing(tmp_path, capsys):
    assert _run(THESIS, tmp_path / "res", "--check", "--shard", "2/3", "--scale", "15") == 0
    out = capsys.readouterr().out
    assert "shard (of 3)" in out
    assert "split into 3 shards: run i of the plan (from 0) goes to shard i % 3 + 1" in out
    lines = {line.split(":")[0].strip(): line for line in out.splitlines() if line.startswith("  shard ")}
    assert set(lines) == {"shard 1/3", "shard 2/3", "shard 3/3"}
    assert "24 runs, about 6h" in lines["shard 2/3"] and lines["shard 2/3"].endswith("<- this one")
    assert "1:control-download, 4:control-download-bg, 7:control-upload" in lines["shard 2/3"]   # 3 repetitions each
    assert "24 runs in shard 2/3; 24 to run" in out and "nothing was run" in out
    assert not (tmp_path / "res").exists()


def test_a_shard_or_only_on_a_spec_is_refused(tmp_path, capsys):
    for flag in (["--shard", "1/2"], ["--only", "x"]):
        assert nestlab_main(["run", str(REPO / "experiments" / "net_fault.yaml"), "--check", *flag]) == 2
        assert "applies to suites" in capsys.readouterr().err


# ----------------------------------------------------------------------------- shards, then the union


def test_two_shards_into_one_directory_are_read_as_the_whole_suite(tmp_path, capsys, monkeypatch):
    lab = fake_lab(monkeypatch, reports=True)   # as run-experiment does: each run's report too
    suite = write(tmp_path, "suite.yaml", SUITE)
    res = tmp_path / "res"
    assert _run(suite, res, "--shard", "1/2") == 0
    assert lab.made == [("a", 0), ("b", 1), ("c", 0)]
    one = _index(res, index_name((1, 2)))
    assert one["shard"] == [1, 2] and one["planned"] == 5 and one["state"] == "complete"
    assert [r["position"] for r in one["runs"]] == [0, 2, 4]
    notes: list[str] = []
    assert _made_with_notes(res, notes) == [("a", 0), ("b", 1), ("c", 0)]
    assert notes and "shard 2 of 2 not here" in notes[0] and "3 of the suite's runs" in notes[0]
    capsys.readouterr()

    assert _run(suite, res, "--shard", "2/2") == 0
    assert lab.made[3:] == [("b", 0), ("b", 2)]
    err = capsys.readouterr().err
    assert "shard 2/2" in err and "of its 5 runs" in err
    assert not (res / "small" / INDEX).exists()
    assert _made(res) == PLAN                          # the union, in plan order
    assert (res / "small" / "analysis" / "accuracy.md").is_file()   # the last shard's tables: the whole suite
    assert all((r / "analysis" / "report.html").is_file() for r in find_runs(["small"], res))

    whole = tmp_path / "whole"
    assert _run(suite, whole) == 0                     # the same suite, unsharded
    capsys.readouterr()
    for where in (res, whole):
        assert nestlab_main(["accuracy", "small", "--results", str(where), "--variant", "flowdiagnoser:theta=2",
                             "--variant", "nest-cf"]) == 0
    err = capsys.readouterr().err
    assert "not here" not in err
    for name in ("accuracy.csv", "accuracy.md"):
        a, b = (w / "small" / "analysis" / name for w in (res, whole))
        assert a.read_text().replace(str(res), "R") == b.read_text().replace(str(whole), "R"), name
    per = [pd.read_csv(w / "small" / "analysis" / "per_run.csv") for w in (res, whole)]
    assert per[0].drop(columns=[c for c in per[0] if "run" in c.lower()]).equals(
        per[1].drop(columns=[c for c in per[1] if "run" in c.lower()]))


def _made_with_notes(res: Path, notes: list[str]) -> list[tuple[str, int]]:
    return [(json.loads((r / "manifest.json").read_text())["experiment"],
             json.loads((r / "manifest.json").read_text())["repetition"]) for r in find_runs(["small"], res, notes)]


def test_shards_from_two_machines_copied_back_into_one_directory(tmp_path, capsys, lab):
    suite = write(tmp_path, "suite.yaml", SUITE)
    a, b = tmp_path / "machine-a", tmp_path / "machine-b"
    assert _run(suite, a, "--shard", "1/2") == 0 and _run(suite, b, "--shard", "2/2") == 0
    shutil.copytree(b / "small", a / "small", dirs_exist_ok=True, ignore=shutil.ignore_patterns("analysis"))
    assert _made(a) == PLAN
    capsys.readouterr()
    assert nestlab_main(["accuracy", str(a / "small")]) == 0
    assert "not here" not in capsys.readouterr().err


def test_resume_keeps_working_per_shard(tmp_path, capsys, lab):
    suite = write(tmp_path, "suite.yaml", SUITE)
    res = tmp_path / "res"
    lab.fail = {("b", 1)}
    assert _run(suite, res, "--shard", "1/2") == 1
    assert _index(res, index_name((1, 2)))["state"] == "failed"
    assert "--shard 1/2" in capsys.readouterr().err            # the command that runs the rest says its shard
    assert _run(suite, res, "--shard", "2/2") == 0               # the other shard is not held up by it
    assert _run(suite, res, "--shard", "1/2") == 2               # unfinished: --resume or --restart
    assert "suite-shard-1-of-2.json: an unfinished run" in capsys.readouterr().err
    lab.fail = set()
    lab.made.clear()
    assert _run(suite, res, "--shard", "1/2", "--check", "--resume") == 0
    assert "3 runs in shard 1/2, 2 complete and kept (--resume); 1 to run" in capsys.readouterr().out
    assert _run(suite, res, "--shard", "1/2", "--resume") == 0
    assert lab.made == [("b", 1)]
    assert _index(res, index_name((1, 2)))["state"] == "complete"
    assert _made(res) == PLAN


def test_a_directory_never_mixes_the_whole_suite_with_shards(tmp_path, capsys, lab):
    suite = write(tmp_path, "suite.yaml", SUITE)
    res = tmp_path / "res"
    assert _run(suite, res) == 0
    capsys.readouterr()
    assert _run(suite, res, "--shard", "1/2") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds suite.json" in err and "--restart" in err
    assert _run(suite, res, "--shard", "1/2", "--restart") == 0
    assert not (res / "small" / INDEX).exists() and list((res / "small").glob("suite-2*.json"))
    capsys.readouterr()
    assert _run(suite, res, "--shard", "1/3") == 2                  # another split
    assert "suite-shard-1-of-2.json" in capsys.readouterr().err
    assert _run(suite, res) == 2                                      # the whole suite over shards
    assert "holds suite-shard-1-of-2.json" in capsys.readouterr().err

    shutil.copy(res / "small" / index_name((1, 2)), res / "small" / index_name((1, 3)))
    with pytest.raises(UserError, match="different splits"):
        union_entries(res / "small")
    (res / "small" / index_name((1, 3))).unlink()
    other = _index(res, index_name((1, 2)))
    (res / "small" / INDEX).write_text(json.dumps(other))
    with pytest.raises(UserError, match="both the whole suite's index"):
        find_runs(["small"], res)
    (res / "small" / INDEX).unlink()
    other["plan"] = "0" * 16
    (res / "small" / index_name((2, 2))).write_text(json.dumps({**other, "runs": []}))
    with pytest.raises(UserError, match="different plans.*suite file or --scale"):
        find_runs(["small"], res)


def test_the_plan_digest_ignores_the_topology_placing_runs_on_machines(tmp_path):
    from harness.suite import plan_digest

    here = load_suite(write(tmp_path, "suite.yaml", SUITE))
    there = load_suite(write(tmp_path, "suite.yaml", SUITE), topology=REPO / "topologies" / "dumbbell-ssh.yaml")
    assert plan_digest(here) == plan_digest(there)
    assert here.experiments[0].digest(0) != there.experiments[0].digest(0)   # the runs' own digests differ
    assert plan_digest(load_suite(write(tmp_path, "suite.yaml", SUITE), scale=2)) != plan_digest(here)
    assert plan_digest(load_suite(write(tmp_path, "suite.yaml", SUITE.replace("[1, 2, 3]", "[1, 2, 4]")))) \
        != plan_digest(here)


# ----------------------------------------------------------------------------- --only


def test_only_runs_just_those_experiments(tmp_path, capsys, lab):
    suite = write(tmp_path, "suite.yaml", SUITE)
    res = tmp_path / "res"
    assert _run(suite, res, "--only", "c", "--only", "a") == 0
    assert lab.made == [("a", 0), ("c", 0)]
    index = _index(res)
    assert index["state"] == "partial"
    assert [r["status"] for r in index["runs"]] == ["complete", "planned", "planned", "planned", "complete"]
    assert "--resume` runs the rest" in capsys.readouterr().err
    assert _run(suite, res) == 2                                   # unfinished: not buried silently
    assert "partial" in capsys.readouterr().err
    assert _run(suite, res, "--only", "b") == 0                    # the others' entries stay
    assert lab.made[2:] == [("b", 0), ("b", 1), ("b", 2)]
    assert _index(res)["state"] == "complete" and _made(res) == PLAN
    first_a = _index(res)["runs"][0]["run"]
    assert _run(suite, res, "--only", "a") == 0                    # named again: made again
    assert lab.made[5:] == [("a", 0)] and _index(res)["runs"][0]["run"] != first_a
    assert (res / "small" / first_a / "run.db").is_file()          # the old run stays on disk, out of the index
    assert len(_made(res)) == 5 and _index(res)["state"] == "complete"
    assert _run(suite, res, "--only", "a", "--resume") == 0        # --resume: a complete run is kept
    assert lab.made[6:] == []


def test_only_with_a_shard_and_check(tmp_path, capsys, lab):
    suite = write(tmp_path, "suite.yaml", SUITE)
    res = tmp_path / "res"
    assert _run(suite, res, "--check", "--only", "b", "--shard", "2/2") == 0
    out = capsys.readouterr().out
    assert "2 runs in shard 2/2; 2 to run" in out and " a " not in out and " c " not in out
    assert _run(suite, res, "--only", "c", "--shard", "2/2") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no run of it is in shard 2/2 (shard 1)" in err
    assert _run(suite, res, "--only", "b", "--shard", "2/2") == 0
    assert lab.made == [("b", 0), ("b", 2)]


def test_an_unknown_only_name_is_refused_listing_the_names(tmp_path, capsys, lab):
    suite = write(tmp_path, "suite.yaml", SUITE)
    for flags in (["--check"], []):
        assert _run(suite, tmp_path / "res", "--only", "a", "--only", "d", *flags) == 2
        err = capsys.readouterr().err.strip()
        assert err == "error: --only d: suite small has no experiment of that name; its experiments: a, b, c", err
    assert not (tmp_path / "res").exists() and lab.made == []
