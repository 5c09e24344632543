"""Many runs at once (analysis.pipeline.evaluate with jobs > 1): the same Evaluation as the serial
path, run for run, warning for warning; and the scoring without the long frame
(analysis.score.counting.fast_counts) equal to the join it replaces."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis import pipeline
from analysis.pipeline import evaluate
from nestlab.cli import nestlab_main
from rundir.errors import UserError
from tests.support.damaged import counter_text, db_not_sqlite, synthetic_base
from tests.support.runs import make_run
from tests.support.synthetic import synthetic_run

VARIANTS = ["flowdiagnoser:theta=2", "flowdiagnoser:theta=1", "nest-cf", "nest-cf:anw=off", "peer"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Hand-made runs, synthetic runs with churn, a damaged run that is analysed with a warning, and
    one that cannot be analysed at all."""
    root = tmp_path_factory.mktemp("many")
    out = [make_run(root / "hand-a")[0], synthetic_run(root / "syn-1", seconds=40, apps=2, conns=3, churn_s=7, seed=1)]
    warned = synthetic_base(root / "warned")
    counter_text(warned)
    out.append(warned)
    broken = synthetic_base(root / "broken")
    db_not_sqlite(broken)
    out.append(broken)
    out.append(synthetic_run(root / "syn-2", seconds=30, apps=3, conns=2, churn_s=5, seed=2))
    out.append(make_run(root / "hand-b", n=80)[0])
    return out


def _same(a, b) -> None:
    pd.testing.assert_frame_equal(a.counts, b.counts)
    assert a.runs == b.runs and a.variants == b.variants and a.policy == b.policy
    assert a.warnings == b.warnings and a.skipped == b.skipped and a.run_warnings == b.run_warnings
    assert a.overlap_rows == b.overlap_rows
    assert {k: v.model_dump() if hasattr(v, "model_dump") else v for k, v in a.health.items()} == \
        {k: v.model_dump() if hasattr(v, "model_dump") else v for k, v in b.health.items()}
    for v in a.variants:
        pd.testing.assert_frame_equal(a.table(v), b.table(v))
        pd.testing.assert_frame_equal(a.per_run(v), b.per_run(v))
    pd.testing.assert_frame_equal(a.compare(), b.compare())


@pytest.mark.parametrize("jobs", [2, 3])
def test_parallel_is_the_serial_evaluation(runs, jobs):
    said_serial, said_parallel = [], []
    serial = evaluate(runs, VARIANTS, skip_bad=True, on_warning=lambda r, m: said_serial.append((r, m)))
    parallel = evaluate(runs, VARIANTS, skip_bad=True, jobs=jobs, on_warning=lambda r, m: said_parallel.append((r, m)))
    _same(serial, parallel)
    assert sorted(said_serial) == sorted(said_parallel)   # every warning said, as runs finish
    assert len(serial.runs) == len(runs) - 1 and serial.skipped[0][0] == runs[3]
    assert any("'lots'" in w for w in serial.run_warnings[runs[2].resolve()])
    assert parallel.data == {} and parallel.scored == {}   # workers never hand back a loaded run


def test_parallel_reports_each_run_as_it_is_done(runs):
    done = []
    evaluate(runs[:3], VARIANTS[:1], jobs=2, on_run=lambda k, n, r: done.append((k, n, r)))
    assert sorted(k for k, _, _ in done) == [1, 2, 3] and {n for _, n, _ in done} == {3}
    assert sorted(map(str, (r for _, _, r in done))) == sorted(map(str, runs[:3]))


def test_a_run_that_cannot_be_analysed_stops_both_paths_alike(runs):
    with pytest.raises(UserError) as serial:
        evaluate(runs, VARIANTS[:1])
    with pytest.raises(UserError) as parallel:
        evaluate(runs, VARIANTS[:1], jobs=2)
    assert str(serial.value) == str(parallel.value) and "run.db" in str(serial.value)


def test_counts_without_the_long_frame_equal_the_join(runs, monkeypatch):
    for run in [r for k, r in enumerate(runs) if k != 3]:
        joined = evaluate([run], VARIANTS, keep=True)  # diagnose_run's frame joined with the labels
        with monkeypatch.context() as m:
            m.setattr(pipeline, "join_labels", _not_called)
            fast = evaluate([run], VARIANTS)              # fast_counts, no join
        pd.testing.assert_frame_equal(fast.counts, joined.counts)


def _not_called(*a, **kw):
    raise AssertionError("the join was used where the counts can be taken from the arrays")


def test_the_commands_write_the_same_files_in_parallel(runs, tmp_path, capsys):
    good = [str(r) for k, r in enumerate(runs) if k != 3]
    for jobs in (1, 2):
        for cmd in (["accuracy", *good, "--variant", "flowdiagnoser:theta=1..2", "--intervals"],
                    ["compare", *good, "--variant", "nest-cf", "--variant", "nest-cf:anw=off"]):
            assert nestlab_main([*cmd, "--jobs", str(jobs), "--out", str(tmp_path / f"{cmd[0]}-{jobs}")]) == 0
    capsys.readouterr()
    for what in ("accuracy", "compare"):
        one, two = tmp_path / f"{what}-1", tmp_path / f"{what}-2"
        names = sorted(p.name for p in one.iterdir())
        assert names == sorted(p.name for p in two.iterdir()) and names
        for name in names:
            assert (one / name).read_bytes() == (two / name).read_bytes(), name


def test_jobs_must_be_a_positive_number(capsys):
    with pytest.raises(SystemExit) as e:
        nestlab_main(["accuracy", "x", "--jobs", "0"])
    assert e.value.code == 2 and "--jobs" in capsys.readouterr().err
