"""Streams runs in every view (issue 34, item 5): the system under test's variants by default, accuracy in
thesis Table 4.3's layout (a row per graph, no TCP rows or Inbound section), the report's tables and
figures without network rows, columns or panels, the suite summary's columns, and `nestlab top`."""

from __future__ import annotations

import re

from harness.suiterun import headline_figures
from nestlab.cli import nestlab_main
from nestlab.observers import headline
from tests.test_streams_analysis import chain_run, suite


def test_accuracy_of_streams_runs_defaults_to_streamsdiagnoser_a_row_per_graph(tmp_path, capsys):
    results, root = suite(tmp_path)
    assert nestlab_main(["accuracy", "streams-4.3", "--results", str(results), "-j", "1"]) == 0
    out = capsys.readouterr().out
    assert "### Accuracy of streamsdiagnoser" in out and "flowdiagnoser" not in out
    rows = [ln.split("|")[1].strip() for ln in out.splitlines() if ln.startswith("| ")]
    assert rows == ["Graph", "MERGETREE", "MERGETREEBARRIER", "Totals"]
    assert not re.search(r"\bTCP\b|Inbound|s:iperf", out)
    mt = next(ln for ln in out.splitlines() if ln.startswith("| MERGETREE ")).split("|")
    assert [c.strip() for c in mt[2:10]] == ["1", "34", "4", "30", "4", "30", "0", "0"]
    tot = next(ln for ln in out.splitlines() if ln.startswith("| Totals")).split("|")
    assert tot[6].strip() == "8"                              # TP summed over the graphs
    assert "Graph" in (root / "analysis" / "accuracy.tex").read_text()
    # a comparison of streams variants: the stream connections' row alone
    assert nestlab_main(["compare", "streams-4.3", "--results", str(results), "-j", "1", "--variant", "streamsdiagnoser",
                         "--variant", "streamsdiagnoser:engine=on"]) == 0
    out = capsys.readouterr().out
    assert "stream connections" in out and not re.search(r"\bTCP\b|Inbound", out)


def test_a_streams_runs_report_its_own_variants_no_network_rows_one_panel(tmp_path):
    path = chain_run().write(tmp_path / "run")
    out = tmp_path / "report.html"
    assert nestlab_main(["report", str(path), "-o", str(out)]) == 0
    html = out.read_text()
    variants = set(re.findall(r'data-variant="([^"]+)"', html))
    assert variants == {"streamsdiagnoser", "streamsdiagnoser:engine=on", "flink-backpressure"}
    assert "<td>TCP</td>" not in html and "TCP TPR" not in html and "Silence %" not in html
    assert "conn TPR / FPR / PPV (streamsdiagnoser)" in html
    assert "module timeline" not in html and "diagnosis overview" in html
    assert not (path / "analysis" / "module-timeline.png").exists()


def test_plots_of_a_streams_run_one_panel_named_connections(tmp_path, capsys):
    import matplotlib.image as mpimg

    path = chain_run().write(tmp_path / "run")
    assert nestlab_main(["plots", str(path)]) == 0
    capsys.readouterr()
    files = sorted(p.name for p in (path / "analysis").iterdir())
    assert "module-timeline.png" not in files and "diagnosis-overview.png" in files
    h, w, _ = mpimg.imread(path / "analysis" / "diagnosis-overview.png").shape
    assert h < w / 4                                          # one strip panel of 3 connections, not two


def test_the_suite_summary_of_streams_runs_shows_connection_rates(tmp_path):
    from analysis.pipeline import evaluate

    path = chain_run().write(tmp_path / "run")
    head = headline(evaluate([path], ["streamsdiagnoser"]))
    assert head.scope == "conn" and head.tcp_tpr == 100.0 and head.app_tpr == ()
    cells = headline_figures(head, path)
    assert cells["conn TPR"] == "100.0" and "TCP TPR" not in cells and "app TPR" not in cells


def test_top_on_a_streams_run(tmp_path, capsys):
    path = chain_run().write(tmp_path / "run")
    assert nestlab_main(["top", str(path), "-b", "-n", "1", "--at", "6"]) == 0
    out = capsys.readouterr().out
    assert "; streamsdiagnoser;" in out and "throttle rate 0 tuples/s" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("sconn")]
    assert len(lines) == 3 and all(ln.split()[1] == "out" for ln in lines)
    assert lines[0].split()[2] == "STALLED" and lines[0].endswith("a:out0>t:in0")
