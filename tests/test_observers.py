"""The analysis plugged into runs and suites (nestlab.observers): a run's report returns its headline
as the numbers its accuracy table prints, puts its health into its manifest, and a run that cannot be
analysed is one warning, never an exception into the runner."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.suiterun import headline_figures
from nestlab.observers import headline, report, scores
from rundir.layout import RunDir
from rundir.manifest import read_manifest
from tests.support.runs import make_run


def test_a_reports_headline_is_what_its_accuracy_table_says(tmp_path, capsys):
    run, *_ = make_run(tmp_path / "exp" / "r0")
    head = report(run)
    capsys.readouterr()
    table = pd.read_csv(run / "analysis" / "accuracy.csv")
    total = table[table["section"] == "Total"].set_index("row")
    assert head.tcp_tpr == pytest.approx(total.at["TCP", "TPR"], abs=1e-4)
    assert head.tcp_fpr == pytest.approx(total.at["TCP", "FPR"], abs=1e-4) and head.tcp_ppv == pytest.approx(total.at["TCP", "PPV"], abs=1e-4)
    apps = [total.at[r, "TPR"] for r in ("iperf", "wget") if total.at[r, "TPR"] == total.at[r, "TPR"]]
    assert head.app_tpr == pytest.approx(tuple(apps), abs=1e-4) and len(apps) == 2
    # the health the report wrote is the manifest's, key for key
    health = json.loads((run / "analysis" / "health.json").read_text())
    assert read_manifest(run).health.as_dict() == health
    assert scores(run) == head                          # a kept run's headline, computed again
    RunDir.open(run).update_manifest(counts={"faults": 2})
    cells = headline_figures(head, run)
    assert cells["TCP TPR"] == f"{head.tcp_tpr:.1f}" and cells["faults"] == "2"
    assert cells["app TPR"] == "/".join(f"{v:.1f}" for v in head.app_tpr)
    assert cells["silence"].endswith("%")


def test_a_run_that_cannot_be_analysed_is_one_warning(tmp_path, capsys):
    run, *_ = make_run(tmp_path / "exp" / "r0")
    (run / "run.db").write_bytes(b"not a database at all, not even close" * 10)
    assert report(run) is None and scores(run) is None
    err = capsys.readouterr().err
    assert err.startswith("analysis: ") and "run.db cannot be read" in err and "Traceback" not in err


def test_headline_of_an_evaluation_without_application_rows(tmp_path):
    from analysis.pipeline import evaluate

    run, *_ = make_run(tmp_path / "exp" / "r0")
    head = headline(evaluate([run]))
    assert all(v is None or 0 <= v <= 100 for v in (head.tcp_tpr, head.tcp_fpr, head.tcp_ppv))


def test_a_streams_runs_report_scores_streamsdiagnoser_beside_the_engines_baseline(tmp_path):
    from analysis.studies.streams import VARIANTS as STREAMS_VARIANTS
    from nestlab.observers import _variants
    from tests.support.streams_run import StreamsRun, chain

    g = chain(("beacon", "beacon"), ("t", "throttle"), ("s", "sink"))
    run = StreamsRun(g).step({c: (5, 5) for c in g.conns}, 3).fault("throttle", "t", 3.0, 5.0) \
        .step({"beacon:out0>t:in0": (0, 5), "t:out0>s:in0": (0, 0)}, 3)
    for seq in range(run.n_snapshots):
        for op in ("beacon", "t", "s"):
            run.task(seq, op, busy=0.0, backpressured=0.0, idle=1000.0)
    run = run.write(tmp_path / "streams" / "r0")
    assert _variants(run) == STREAMS_VARIANTS
    assert report(run, quiet=True) is not None            # no TCP row: an empty headline, not a failure
    md = (run / "analysis" / "accuracy.md").read_text()
    assert "Accuracy of streamsdiagnoser" in md and "Accuracy of flink-backpressure" in md
    # its report is the streams study's: no network rule system diagnosed it (they read TCP counters)
    page = (run / "analysis" / "report.html").read_text()
    assert 'data-variant="streamsdiagnoser"' in page and 'data-variant="nest-cf"' not in page
    assert _variants(make_run(tmp_path / "net")[0]) == ("flowdiagnoser:theta=2",)


def test_a_run_recorded_with_probes_shows_the_probe_variant_beside_the_seeds(tmp_path, capsys):
    from analysis.variants import DEFAULT_VARIANT, PROBE_VARIANT
    from nestlab.cli import nestlab_main
    from nestlab.observers import _variants

    run, *_ = make_run(tmp_path / "exp" / "r0")
    assert _variants(run) == (DEFAULT_VARIANT,)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["spec"]["probe"] = {"after": 0.3, "every": 1.0, "timeout": 1.0, "count": 2}
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert _variants(run) == (DEFAULT_VARIANT, PROBE_VARIANT)
    assert nestlab_main(["report", str(run), "-o", str(tmp_path / "r.html")]) == 0
    capsys.readouterr()
    page = (tmp_path / "r.html").read_text()
    assert "flowdiagnoser:theta=2,probe=on" in page and "nest-cf" in page
