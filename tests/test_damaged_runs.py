"""Every `nestlab` command on damaged runs (docs/analysis.md, "Reading awkward runs").

The corpus (tests/support/damaged.py) is made from one good run: a finished run recorded on this
machine (results/net_fault/...), copied, or where there is none (CI) the synthetic run of
tests/support/runs.py; NESTLAB_DAMAGE_BASE=synthetic chooses the synthetic one anyway. Each case
damages a copy. On each, every command that reads runs either analyses it with a warning that says
what was wrong and what was left out, or says so in one line with exit status 2; never a traceback.
What a damaged run yields is the good run's rows minus those left out: no label and no diagnosis
differs. In a set of runs a bad one is skipped with a warning.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from analysis.load import load_run_data
from analysis.pipeline import evaluate
from nestlab.cli import nestlab_main
from rundir.runs import open_run
from tests.support.damaged import DAMAGES, FATAL, copy_run, stored_run, synthetic_base
from tests.support.runs import WGET, RunBuilder, edit_db, make_run

VARIANT = "flowdiagnoser:theta=2"
ANALYSED = [name for name in DAMAGES if name not in FATAL]
# Damage that changes nothing the scores depend on: the table must be the good run's, exactly.
SAME_TABLE = ("manifest_not_an_object", "manifest_wrong_types", "manifest_too_deep", "manifest_nan_t0",
              "fault_target_missing", "text_in_other_tables", "copy_counters_zeroed", "copy_stretch_bounds_shifted",
              "copy_stretch_ids_forged", "copy_counters_batch_too_long", "copy_counters_batch_far_too_long")
COMMANDS = {
    "accuracy": lambda run, out: ["accuracy", str(run), "--out", str(out)],
    "compare": lambda run, out: ["compare", str(run), "--variant", VARIANT, "--variant", "nest-cf", "--out", str(out)],
    "plots": lambda run, out: ["plots", str(run)],
    "diagnose": lambda run, out: ["diagnose", str(run), "--variant", VARIANT],
    "diagnose --json": lambda run, out: ["diagnose", "--json", str(run)],
}
PRINTS = {"accuracy": "### Accuracy of", "compare": "### Variant comparison", "plots": "Stalled modules",
          "diagnose": "positive"}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """The good run: a stored one, copied, else (CI) the synthetic one."""
    where = tmp_path_factory.mktemp("base") / "20260101-000000-r0"
    src = None if os.environ.get("NESTLAB_DAMAGE_BASE") == "synthetic" else stored_run()
    return copy_run(src, where) if src is not None else synthetic_base(where)


def _scored(path: Path) -> pd.DataFrame:
    """Every scored row (run module, direction, snapshot) with its label and diagnosis."""
    ev = evaluate([path], [VARIANT], keep=True)
    s = ev.scored[ev.runs[0]]
    s = s[~s["exclude"]]
    return s.set_index([s["dir"].astype(str), "module", "seq"])[["actual", "positive"]].astype(bool)


@pytest.fixture(scope="module")
def base_scored(base) -> pd.DataFrame:
    return _scored(base)


def _damaged(base: Path, where: Path, case: str):
    run = where / "net_fault" / f"20260101-000000-r{sorted(DAMAGES).index(case)}-{case}"
    shutil.copytree(base, run, ignore=shutil.ignore_patterns("analysis", "run.db-*"))
    return run, DAMAGES[case](run)


@pytest.fixture
def damaged(request, base, tmp_path):
    """(case, run, Damage): a copy of the good run with the damage `case` (indirect parameter)."""
    case = request.param
    return (case, *_damaged(base, tmp_path, case))


def _cli(capsys, argv):
    code = nestlab_main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- every command, every case


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("damaged", list(DAMAGES), indirect=True)
def test_every_command_on_a_damaged_run(damaged, tmp_path, capsys, command):
    _, run, damage = damaged
    code, out, err = _cli(capsys, COMMANDS[command](run, tmp_path / "out"))
    assert "Traceback" not in out + err
    if command == "diagnose --json":        # a run directory is not JSON snapshots: one line
        assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and "nestlab diagnose" in err
        return
    if damage.fatal:
        assert code == 2, err
        assert err.count("\n") == 1 and err.startswith("error: "), err
        for words in damage.says:
            assert words in err, (words, err)
        return
    assert code == 0, err
    assert PRINTS[command] in out
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert warnings == err.splitlines(), err     # nothing on stderr but warnings, one line each
    assert any(all(words in line for words in damage.says) for line in warnings), (damage.says, err)
    for words in damage.also:
        assert words in err, (words, err)


# ----------------------------------------------------------------------------- what the analysis yields


@pytest.mark.parametrize("damaged", ANALYSED, indirect=True)
def test_a_damaged_run_loses_rows_but_never_changes_one(base, base_scored, damaged):
    """The damaged run's scored rows are the good run's, minus what the warnings say was left out:
    every label and every diagnosis that remains is the good run's."""
    case, run, _ = damaged
    got = _scored(run)
    assert got.index.isin(base_scored.index).all(), "rows the good run does not score"
    changed = got != base_scored.loc[got.index]
    assert not changed.any(axis=None), got[changed.any(axis=1)].head()
    if case in SAME_TABLE:
        assert len(got) == len(base_scored)
        assert evaluate([run], [VARIANT]).table().equals(evaluate([base], [VARIANT]).table())
    elif case != "module_dies_before_born":   # the victim's last row may be its death: nothing to leave out
        assert len(got) < len(base_scored)


@pytest.mark.parametrize("damaged", ["wal_lost"], indirect=True)
def test_a_lost_wal_says_how_much_is_missing(base, damaged):
    _, run, _ = damaged
    info = open_run(run)
    counted = info.manifest.counts.snapshots
    (lost,) = [w for w in info.warnings if w.startswith("run.db holds")]
    with sqlite3.connect(run / "run.db") as conn:
        (held,) = conn.execute("SELECT count(*) FROM snapshots").fetchone()
    assert held < counted and f"run.db holds {held} of the {counted} snapshots" in lost
    assert not any(w.startswith("run.db holds") for w in open_run(base).warnings)


def test_the_good_run_reads_without_a_word(base, capsys, tmp_path):
    code, out, err = _cli(capsys, COMMANDS["accuracy"](base, tmp_path / "out"))
    assert code == 0 and "### Accuracy of" in out
    assert not [line for line in err.splitlines() if "wal" in line or "not a" in line or "left out" in line]


# ----------------------------------------------------------------------------- sets of runs


def _set(base: Path, tmp_path: Path, cases) -> tuple[Path, dict[str, Path]]:
    root = tmp_path / "results"
    good = root / "net_fault" / "20260101-000000-r0"
    shutil.copytree(base, good, ignore=shutil.ignore_patterns("analysis", "run.db-*"))
    runs = {"good": good}
    for case in cases:
        runs[case], _ = _damaged(base, root, case)
    return root / "net_fault", runs


def _no_run_db(run: Path):
    (run / "run.db").unlink()


@pytest.mark.parametrize("case", [c for c in FATAL if c != "empty_directory"] + ["no_run_db"])
def test_one_bad_run_in_a_set_is_skipped_with_a_warning(base, tmp_path, capsys, case):
    if case == "no_run_db":
        exp, runs = _set(base, tmp_path, [])
        bad = exp / "20260101-000000-r9"
        shutil.copytree(runs["good"], bad)
        _no_run_db(bad)
    else:
        exp, runs = _set(base, tmp_path, [case])
        bad = runs[case]
    code, out, err = _cli(capsys, ["accuracy", str(exp), "--out", str(tmp_path / "set")])
    assert code == 0 and "Traceback" not in err, err
    assert f"warning: {bad}: skipped: " in err
    assert "### Accuracy of" in out and "Not analysed (1 of 2 runs" in out and str(bad) in out
    alone = pd.read_csv(tmp_path / "set" / "accuracy.csv")
    code, _, _ = _cli(capsys, ["accuracy", str(runs["good"]), "--out", str(tmp_path / "good")])
    assert code == 0
    assert alone.equals(pd.read_csv(tmp_path / "good" / "accuracy.csv"))   # the good run's table, exactly
    for command in ("compare", "plots"):
        code, out, err = _cli(capsys, COMMANDS[command](exp, tmp_path / command))
        assert code == 0 and "Traceback" not in err and f"warning: {bad}: skipped: " in err, (command, err)


def test_a_set_of_every_damaged_run(base, tmp_path, capsys):
    """The whole corpus as one experiment: the fatal runs are skipped, the others analysed with their
    warnings, and accuracy.md says both."""
    exp, runs = _set(base, tmp_path, [c for c in DAMAGES if c != "empty_directory"])
    code, out, err = _cli(capsys, ["accuracy", str(exp), "--out", str(tmp_path / "all")])
    assert code == 0 and "Traceback" not in err, err
    skipped = [line for line in err.splitlines() if ": skipped: " in line]
    assert sorted(line.split(": skipped:")[0].removeprefix("warning: ") for line in skipped) == \
        sorted(str(runs[c]) for c in FATAL if c in runs)
    written = (tmp_path / "all" / "accuracy.md").read_text()
    assert f"Not analysed ({len(skipped)} of {len(runs)} runs" in written
    assert "Warnings about the runs" in written and "'lots'" in written and "goes back" in written


def test_an_unexpected_failure_skips_that_run_not_the_set(base, tmp_path, capsys, monkeypatch):
    """Any failure of one run, not only the ones the analysis knows, is one line: skipped in a set,
    exit status 2 alone."""
    from analysis.labels import ImpactPolicy

    exp, runs = _set(base, tmp_path, ["counter_text"])
    label = ImpactPolicy.label

    def fails_on_one(self, data):
        if data.path.name.endswith("counter_text"):
            raise RuntimeError("something nobody expected\nsecond line")
        return label(self, data)

    monkeypatch.setattr(ImpactPolicy, "label", fails_on_one)
    code, out, err = _cli(capsys, ["accuracy", str(exp), "--out", str(tmp_path / "set"), "--jobs", "1"])   # the patch lives in this process
    assert code == 0 and "Traceback" not in err
    assert f"warning: {runs['counter_text']}: skipped: cannot be analysed: RuntimeError: something nobody " \
           "expected second line" in err
    code, out, err = _cli(capsys, ["accuracy", str(runs["counter_text"]), "--out", str(tmp_path / "one")])
    *warned, last = err.splitlines()
    assert code == 2 and last.startswith("error: ") and "cannot be analysed: RuntimeError" in last
    assert all(line.startswith("warning: ") for line in warned)   # its damage, said before it failed
    monkeypatch.setenv("NESTLAB_DEBUG", "1")
    with pytest.raises(RuntimeError):
        nestlab_main(["accuracy", str(runs["counter_text"]), "--out", str(tmp_path / "one")])


def test_a_figure_that_fails_skips_that_run_not_the_others(base, tmp_path, capsys, monkeypatch):
    import analysis.render.plots

    exp, runs = _set(base, tmp_path, ["manifest_nan_t0"])
    plot_run = analysis.render.plots.plot_run

    def fails_on_one(data, *args, **kw):
        if data.path.name.endswith("manifest_nan_t0"):
            raise ValueError("Axis limits cannot be NaN or Inf")
        return plot_run(data, *args, **kw)

    monkeypatch.setattr(analysis.render.plots, "plot_run", fails_on_one)
    code, out, err = _cli(capsys, ["plots", str(exp)])
    assert code == 0 and "Traceback" not in err
    assert f"warning: {runs['manifest_nan_t0']}: skipped: cannot be analysed: ValueError: Axis limits" in err
    assert out.count("Stalled modules") == 1
    code, out, err = _cli(capsys, ["plots", str(runs["manifest_nan_t0"])])
    *warned, last = err.splitlines()
    assert code == 2 and last.startswith("error: ") and "ValueError: Axis limits" in last
    assert all(line.startswith("warning: ") for line in warned)


# ----------------------------------------------------------------------------- a recording that stopped, crafted ids

def test_a_recording_that_stopped_early_is_a_warning_of_the_analysis(tmp_path):
    b = RunBuilder(tmp_path / "r0", 50, workloads=[WGET])
    b.counters(b.module("app", "app:100", {"pid": 100}), "in", 10)
    b.event("run_end", 30.0)      # the workloads ran 30 s; the 50 snapshots cover 5 s of them
    info = open_run(b.write())
    data = load_run_data(info)
    (warning,) = [w for w in data.warnings if "snapshots stop" in w]
    assert warning.startswith("snapshots stop 25.1 s before the workloads did")
    assert "the recording ended early (did the collector die?)" in warning
    b2 = RunBuilder(tmp_path / "r1", 50, workloads=[WGET])
    b2.counters(b2.module("app", "app:100", {"pid": 100}), "in", 10)
    b2.event("run_end", 4.9)      # the collector outlives the workloads, as it should
    assert not [w for w in load_run_data(open_run(b2.write())).warnings if "snapshots stop" in w]


def test_a_huge_module_id_costs_no_memory_and_changes_no_score(tmp_path):
    """Module ids are the collector's, but a crafted (or very long) run may hold any: memory follows
    the number of modules, not the largest id (an id of 10^8 took 1.6 GB), and the tables are those
    of the same run with small ids."""
    import tracemalloc

    from analysis.pipeline import evaluate

    small, *_ = make_run(tmp_path / "small" / "r0")
    big, *_ = make_run(tmp_path / "big" / "r0")
    last = "(SELECT max(id) FROM modules WHERE id < 100000000)"   # the last module gets id 10^8
    edit_db(big, *(f"UPDATE {table} SET {col} = 100000000 WHERE {col} = {last}"
                    for table, col in (("counters", "module"), ("edges", "parent"), ("edges", "child"),
                                       ("faults", "target_module"), ("modules", "id"))))
    tracemalloc.start()
    try:
        table = evaluate([big], ["flowdiagnoser:theta=2", "nest-cf"]).table()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200e6, f"{peak / 1e6:.0f} MB"
    assert table.equals(evaluate([small], ["flowdiagnoser:theta=2", "nest-cf"]).table())
