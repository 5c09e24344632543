"""The report's causal-paths section (analysis.render.html.paths) on hand-made service runs
(rundir.handmade_service from Maketrace): the true paths beside each algorithm's, in the HTML."""

from __future__ import annotations

import re

import pytest

from analysis.paths.model import true_patterns
from analysis.paths.readers import read_run
from analysis.pipeline import evaluate
from analysis.render.html import build_report
from tests.test_paths_versus import service_run


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("rp")
    run = service_run(d / "r", seed=5, stalled={"app1": "app2"})
    ev = evaluate([run], ["flowdiagnoser:theta=2", "nest-cf"], keep=True)
    return run, build_report(ev, d / "report.html", draw=False).read_text()


def section(html: str) -> str:
    m = re.search(r'<section id="paths">(.*?)</section>', html, re.S)
    assert m, "no causal-paths section"
    return m.group(1)


def test_the_section_draws_the_true_paths_with_their_counts(report):
    run, html = report
    body = section(html)
    true = true_patterns(read_run(run))["pattern"].value_counts()
    rows = re.findall(r"<tr><td[^>]*>(\d+)</td><td>(.*?)</td><td[^>]*>([\d,]+) \(", body, re.S)
    assert [int(r[0]) for r in rows] == list(range(1, min(8, len(true)) + 1))
    # each row's count is its true pattern's, most frequent first, and its tree names that pattern's messages
    assert [int(r[2].replace(",", "")) for r in rows] == true.iloc[:len(rows)].tolist()
    first = true.index[0]
    edges = re.findall(r"(\w+)&gt;(\w+)", first.replace(">", "&gt;"))
    tree = re.sub(r"<[^>]+>", "", rows[0][1])
    for a, b in edges:
        assert f"{a} → {b}" in tree


def test_each_algorithm_has_its_trees_marked_true_or_not(report):
    body = section(report[1])
    for name in ("nesting", "convolution", "linking"):
        assert f"<summary>{name} " in body
    assert body.count("✓ a true path") >= 5          # nesting's top five are all true on this trace
    assert "✗ no request took it" in body            # convolution's at a 20 ms step are not


def test_the_culprit_table_has_every_diagnoser_per_window(report):
    body = section(report[1])
    table = body[body.index("Who each diagnoser named"):]
    assert "NeST nest-cf" in table and "linking" in table
    rows = re.findall(r"<tr><td[^>]*>(\w+)</td><td[^>]*>([\d.]+)–", table)
    assert [r[0] for r in rows] == ["web2", "app1"]
    # NeST saw app2 stalled in app1's window (stalled={"app1": "app2"}): it names app2 there, not app1
    app1_row = table[table.index("<td>app1</td>"):]
    app1_row = app1_row[:app1_row.index("</tr>")]
    assert "<b>app2</b>" not in app1_row and app1_row.count("app2") >= 2


def test_no_section_without_a_message_trace(tmp_path):
    run = service_run(tmp_path / "r", messages=False)
    html = build_report(evaluate([run], ["flowdiagnoser:theta=2"], keep=True), tmp_path / "r.html",
                        draw=False).read_text()
    assert 'id="paths"' not in html


def test_several_runs_get_a_block_each(tmp_path):
    runs = [service_run(tmp_path / "s" / f"r{i}", seed=20 + i) for i in range(2)]
    html = build_report(evaluate(runs, ["flowdiagnoser:theta=2"], keep=True), tmp_path / "r.html",
                        draw=False).read_text()
    body = section(html)
    assert body.count("<details><summary>") >= 2 and body.count("The true paths beside") == 2
