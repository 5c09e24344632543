"""Suites (harness.suite, harness.suiterun): loading and validation, --check, the index and what
--resume keeps, and the analysis reading a suite's runs. The real SIGTERM-and-resume run is in
test_suite_run.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.suite import SEED_STRIDE, is_suite_file, load_suite
from harness.suiterun import SuiteRun
from nestlab.cli import nestlab_main
from rundir.errors import UserError
from rundir.runs import find_runs
from rundir.suite_index import INDEX, complete_runs, resumable_runs
from tests.support.env import REPO, write
from tests.support.runs import make_run

TOPO = REPO / "topologies" / "dumbbell.yaml"

SPEC = f"""\
name: filed
topology: {TOPO}
duration: 30s
seed: 9
monitor: site1n1
workloads:
  - {{kind: iperf, host: site1n1, server: site2n2, parallel: 2}}
faults:
  - kind: tcp_drop
    at: x1
    target: {{workload: 0}}
    schedule: {{random: {{count: 2, duration: [1s, 2s], gap: [3s, 4s]}}}}
"""

SUITE = f"""\
suite: small
seed: 40
defaults:
  topology: {TOPO}
  duration: 20s
  monitor: site1n1
experiments:
  - name: inline
    workloads: [{{kind: wget, host: site1n1, server: site2n1, file_size: 10MB}}]
    faults: [{{kind: tcp_drop, at: x1, target: {{workload: 0}}, schedule: {{at: [5s, 12s], duration: 2s}}}}]
  - file: spec.yaml
  - file: spec.yaml
    name: again
    duration: 40s
    seeds: [3, 5, 8]
"""


def _suite(tmp_path: Path, text: str = SUITE, spec: str = SPEC) -> Path:
    write(tmp_path, "spec.yaml", spec)
    return write(tmp_path, "suite.yaml", text)


def test_entries_come_from_the_entry_then_its_file_then_the_defaults(tmp_path):
    suite = load_suite(_suite(tmp_path))
    inline, filed, again = suite.experiments
    assert [e.spec.name for e in suite.experiments] == ["inline", "filed", "again"]
    assert inline.spec.duration == 20 and inline.spec.seed == 40          # defaults; seed 40 + 100*0
    assert filed.spec.duration == 30 and filed.spec.seed == 9             # the file's own values win
    assert again.spec.duration == 40 and again.spec.repetitions == 3      # the entry's win over both
    assert [again.seed_for(r) for r in range(3)] == [3, 5, 8]
    assert [filed.seed_for(r) for r in range(1)] == [9]
    assert suite.sources == ["inline", str(tmp_path / "spec.yaml"), str(tmp_path / "spec.yaml")]
    assert len(suite.planned()) == 5
    assert suite.dir_name == "small"
    assert is_suite_file(tmp_path / "suite.yaml") and not is_suite_file(tmp_path / "spec.yaml")


def test_an_entry_without_seed_gets_its_own(tmp_path):
    text = SUITE.replace("  - file: spec.yaml\n    name: again", "  - name: again\n    topology: dumbbell") \
        .replace("    seeds: [3, 5, 8]\n", "    workloads: [{kind: iperf, host: site1n1, server: site2n2}]\n")
    suite = load_suite(_suite(tmp_path, text))
    assert suite.experiments[2].spec.seed == 40 + 2 * SEED_STRIDE


def test_scale_multiplies_durations_and_random_counts_and_names_its_directory(tmp_path):
    suite = load_suite(_suite(tmp_path), scale=3)
    inline, filed, again = suite.experiments
    assert (inline.spec.duration, filed.spec.duration, again.spec.duration) == (60, 90, 120)
    assert filed.spec.faults[0].schedule.random.count == 6
    assert inline.spec.faults[0].schedule.at == [5, 12]       # fixed windows stay where they are
    assert len(filed.plan(0)) == 6
    assert suite.dir_name == "small-x3"


def test_the_digest_changes_with_what_makes_the_run(tmp_path):
    a = load_suite(_suite(tmp_path)).experiments[2]
    b = load_suite(_suite(tmp_path)).experiments[2]
    assert a.digest(0) == b.digest(0) and a.digest(0) != a.digest(1)   # same run again; another seed
    changed = load_suite(_suite(tmp_path, SUITE.replace("duration: 40s", "duration: 41s"))).experiments[2]
    assert changed.digest(0) != a.digest(0)
    described = load_suite(_suite(tmp_path, SUITE.replace("    name: again\n",
                                                           "    name: again\n    description: words\n")))
    assert described.experiments[2].digest(0) == a.digest(0)    # a description does not make another run


BAD = [
    ("unknown entry field", SUITE.replace("  - name: inline\n", "  - name: inline\n    wrkloads: []\n"),
     "suite.yaml", 9, "experiments[0].wrkloads: unknown field"),
    ("bad fault inline", SUITE.replace("at: [5s, 12s]", "at: [5s, 6s]"), "suite.yaml", 10, "faults[0].schedule.at[1]: window 6s+2s clashes"),
    ("bad default", SUITE.replace("  duration: 20s\n", "  duration: soon\n"), "suite.yaml", 5,
     "defaults.duration: expected a duration"),
    ("seeds not ints", SUITE.replace("[3, 5, 8]", "[3, five]"), "suite.yaml", 15, "experiments[2].seeds: expected"),
    ("seed twice", SUITE.replace("[3, 5, 8]", "[3, 3]"), "suite.yaml", 15, "listed twice"),
    ("seeds and repetitions", SUITE.replace("    seeds:", "    repetitions: 2\n    seeds:"), "suite.yaml", 15,
     "experiments[2].repetitions: 2 repetitions but 3 seeds"),
    ("seed and seeds", SUITE.replace("    seeds:", "    seed: 4\n    seeds:"), "suite.yaml", 15,
     "experiments[2].seed: give either seed"),
    ("same name", SUITE.replace("name: again", "name: filed"), "suite.yaml", 13, "experiments[2].name: experiment name 'filed' is also entry 1's"),
    ("missing file", SUITE.replace("  - file: spec.yaml\n  - file", "  - file: nope.yaml\n  - file"),
     "suite.yaml", 11, "experiments[1].file: no spec file"),
    ("file is a suite", SUITE.replace("  - file: spec.yaml\n  - file", "  - file: suite.yaml\n  - file"),
     "suite.yaml", 11, "is a suite"),
    ("bad scale", SUITE.replace("seed: 40\n", "seed: 40\nscale: 0\n"), "suite.yaml", 3, "scale"),
    ("no experiments", "suite: s\nexperiments: []\n", "suite.yaml", 2, "experiments"),
    ("bad name", SUITE.replace("suite: small", "suite: a/b"), "suite.yaml", 1, "suite"),
]


@pytest.mark.parametrize("what,text,file,line,words", BAD, ids=[b[0] for b in BAD])
def test_a_bad_suite_is_one_line_with_file_line_field(tmp_path, capsys, what, text, file, line, words):
    path = _suite(tmp_path, text)
    assert nestlab_main(["run", str(path), "--results", str(tmp_path / "res")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {tmp_path / file}:{line}:"), err
    assert words in err, err
    assert not (tmp_path / "res").exists()   # nothing was started


def test_a_mistake_in_a_listed_spec_names_that_spec(tmp_path, capsys):
    path = _suite(tmp_path, spec=SPEC.replace("parallel: 2", "parallel: 0"))
    assert nestlab_main(["run", str(path), "--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {tmp_path / 'spec.yaml'}:7: workloads[0].parallel"), err


def test_suite_flags_on_a_spec_are_refused(tmp_path, capsys):
    _suite(tmp_path)
    assert nestlab_main(["run", str(tmp_path / "spec.yaml"), "--resume"]) == 2
    assert "--resume applies to suites" in capsys.readouterr().err


def test_check_prints_the_whole_plan_and_runs_nothing(tmp_path, capsys):
    res = tmp_path / "res"
    assert nestlab_main(["run", str(REPO / "experiments" / "thesis-3.3.yaml"), "--check", "--results", str(res)]) == 0
    out = capsys.readouterr().out
    for fault in ("control", "app", "tcp", "ip"):
        for load in ("download", "download-bg", "upload", "upload-bg", "mixed", "mixed-bg"):
            assert f"{fault}-{load} " in out, (fault, load)
    assert "72 runs; 72 to run, about 1h19m" in out and "nothing was run" in out   # 24 experiments x 3
    assert not res.exists()
    assert nestlab_main(["run", str(REPO / "experiments" / "thesis-3.3.yaml"), "--check", "--scale", "15"]) == 0
    out = capsys.readouterr().out
    assert "scale 15" in out and "about 18h" in out and "900s" in out


def _fake_run(root: Path, exp, rep: int, status: str = "complete", digest: str | None = None) -> Path:
    run = root / exp.spec.name / f"20260101-000000-r{rep}"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({
        "format_version": 3, "status": status, "experiment": exp.spec.name, "repetition": rep,
        "spec_digest": digest or exp.digest(rep)}))
    return run


def test_check_with_resume_counts_what_would_be_kept(tmp_path, capsys):
    path = _suite(tmp_path)
    suite = load_suite(path)
    root = tmp_path / "res" / "small"
    _fake_run(root, suite.experiments[0], 0)
    _fake_run(root, suite.experiments[2], 1, status="interrupted")   # not kept: run again
    _fake_run(root, suite.experiments[1], 0, digest="0" * 16)         # another spec: run again
    assert nestlab_main(["run", str(path), "--check", "--resume", "--results", str(tmp_path / "res")]) == 0
    out = capsys.readouterr().out
    assert "5 runs, 1 complete and kept (--resume); 4 to run" in out


def test_resume_keeps_only_complete_runs_of_the_same_digest(tmp_path):
    suite = load_suite(_suite(tmp_path))
    root = tmp_path / "res" / "small"
    kept = _fake_run(root, suite.experiments[2], 2)
    _fake_run(root, suite.experiments[2], 0, status="failed")
    assert set(complete_runs(root)) == {("again", 2, suite.experiments[2].digest(2))}
    sr = SuiteRun(suite, tmp_path / "res", resume=True)
    sr.decide()
    assert [(m.experiment, m.repetition) for m in sr.members if m.status == "complete"] == [("again", 2)]
    assert sr.members[-1].run == str(kept.relative_to(root))


def test_an_unfinished_suite_is_not_buried_without_resume_or_restart(tmp_path):
    suite = load_suite(_suite(tmp_path))
    root = tmp_path / "res" / "small"
    root.mkdir(parents=True)
    (root / INDEX).write_text(json.dumps({"suite": "small", "state": "interrupted", "created": 0,
                                          "runs": [{"status": "complete"}, {"status": "interrupted"}]}))
    with pytest.raises(UserError, match="1 of 2 runs complete, interrupted.*--resume.*--restart"):
        SuiteRun(suite, tmp_path / "res").decide()
    SuiteRun(suite, tmp_path / "res", restart=True).decide()
    assert not (root / INDEX).exists() and len(list(root.glob("suite-*.json"))) == 1   # kept, renamed


def test_the_analysis_reads_a_suite_as_the_runs_its_index_names(tmp_path):
    suite = load_suite(_suite(tmp_path))
    root = tmp_path / "res" / "small"
    old = _fake_run(root, suite.experiments[0], 0, status="interrupted")
    new = root / "inline" / "20260101-000100-r0"
    new.mkdir(parents=True)
    (new / "manifest.json").write_text("{}")
    (root / INDEX).write_text(json.dumps({"runs": [{"run": str(new.relative_to(root))}, {"run": None}]}))
    assert find_runs(["small"], tmp_path / "res") == [new.resolve()]
    assert find_runs([str(tmp_path / "res")]) == [new.resolve()]     # also when found walking a tree
    assert old.resolve() not in find_runs([str(root)])


def test_the_suite_file_in_the_repository_is_valid_and_planned(tmp_path):
    suite = load_suite(REPO / "experiments" / "thesis-3.3.yaml")
    assert len(suite.planned()) == 72 and len({e.spec.seed for e in suite.experiments}) == 24
    assert len({e.spec.seed + k for e, k in suite.planned()}) == 72   # three repetitions, every seed its own
    kinds = {e.spec.name.split("-")[0]: {f.kind for f in e.spec.faults} for e in suite.experiments}
    assert kinds == {"control": set(), "app": {"app_pause"}, "tcp": {"tcp_drop"}, "ip": {"ip_drop"}}
    assert all(e.spec.duration == 60 for e in suite.experiments)


# ----------------------------------------------------------------------------- hostile suite directories

def _suite_dir(tmp_path, runs) -> Path:
    root = tmp_path / "suite"
    root.mkdir(parents=True)
    (root / INDEX).write_text(json.dumps({"suite": "s", "state": "complete", "created": 0, "runs": runs}))
    return root


def test_a_suite_index_naming_runs_outside_the_suite_is_refused(tmp_path, capsys):
    outside, *_ = make_run(tmp_path / "other" / "r0")
    for k, (runs, says) in enumerate((([{"run": "../other/r0"}], "runs[0]: '../other/r0' is outside the suite; refused"),
                       ([{"run": str(outside)}], f"runs[0]: '{outside}' is outside the suite; refused"),
                       (["e/r0"], "runs[0] is not an object; not a suite index nestlab wrote"),
                       ([{"run": 7}], "runs[0] is a run that is not a path; not a suite index nestlab wrote"),
                       ({"run": "e/r0"}, "not a suite index (no list of runs)"))):
        root = _suite_dir(tmp_path / str(k), runs)
        assert nestlab_main(["accuracy", str(root)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line == f"error: {root / INDEX}: {says}"


def test_a_suite_named_dot_or_dotdot_is_refused_like_a_spec(tmp_path):
    for name in (".", ".."):
        path = tmp_path / f"s{len(name)}.yaml"
        path.write_text(f"suite: '{name}'\nexperiments:\n  - file: {REPO / 'experiments' / 'net_fault.yaml'}\n")
        with pytest.raises(UserError, match=rf"suite: {re.escape(repr(name))} is not a suite name"):
            load_suite(path)


def _complete_run(root: Path, rel: str, digest: str = "d1") -> None:
    (root / rel).mkdir(parents=True)
    (root / rel / "manifest.json").write_text(json.dumps({"format_version": 4, "status": "complete",
                                                          "experiment": "e", "repetition": 0, "spec_digest": digest}))


def test_resume_after_restart_does_not_bring_the_old_runs_back(tmp_path):
    root = tmp_path / "suite"
    _complete_run(root, "e/20260101-100000-r0")          # the run of the suite before --restart
    (root / "suite-20260101-100000.json").write_text("{}")   # its index, set aside by --restart
    (root / INDEX).write_text(json.dumps({"suite": "s", "state": "interrupted", "created": 1,
                                          "runs": [{"experiment": "e", "repetition": 0, "run": None}]}))
    assert resumable_runs(root) == {}                   # the restarted suite has made no run yet
    _complete_run(root, "e/20260101-110000-r0")
    (root / INDEX).write_text(json.dumps({"suite": "s", "state": "interrupted", "created": 1,
                                          "runs": [{"experiment": "e", "repetition": 0, "run": "e/20260101-110000-r0"}]}))
    assert resumable_runs(root) == {("e", 0, "d1"): root / "e/20260101-110000-r0"}
    (root / INDEX).unlink()                              # no index at all: what is on disk
    assert resumable_runs(root) == {("e", 0, "d1"): root / "e/20260101-110000-r0"}
