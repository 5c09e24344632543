"""The HTML report (`nestlab report`, analysis.render.html), opened in headless Chromium: its tables'
numbers equal accuracy.csv's, every figure loads, nothing is fetched from outside; the command; and
summarize_run's report. Chromium is Debian's `chromium`, installed by scripts/setup.sh."""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib.image as mpimg
import pandas as pd
import pytest

import analysis.render.html as html_report
from analysis.pipeline import evaluate
from analysis.render.html import build_report
from analysis.render.summary import summarize_run
from analysis.score.table_layout import COUNTS, RATES, ROWS, SECTIONS
from nestlab.cli import nestlab_main
from tests.support import chromium
from tests.support.report_page import accuracy_cells_compared, outside_refs, tables
from tests.support.runs import make_run

VARIANTS = ["flowdiagnoser:theta=2", "nest-cf"]


@pytest.fixture(scope="module")
def browser():
    if chromium.browser() is None:
        pytest.skip("chromium is not installed (scripts/setup.sh installs it)")
    return chromium.browser()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A hand-made run, its accuracy.csv written by `nestlab accuracy` and its report by `nestlab report`."""
    root = tmp_path_factory.mktemp("results")
    run, mods, ip = make_run(root / "hand" / "20260101-000000-r0")
    args = [a for v in VARIANTS for a in ("--variant", v)]
    assert nestlab_main(["accuracy", str(run), *args]) == 0
    assert nestlab_main(["report", str(run)]) == 0
    return run, run / "analysis" / "report.html", mods


# ----------------------------------------------------------------------------- reading HTML


# ----------------------------------------------------------------------------- the page by itself


def test_the_report_refers_to_nothing_outside_itself(made):
    _, page, _ = made
    html = page.read_text()
    assert outside_refs(html) == []
    assert "http://" not in html and "https://" not in html   # figures are base64, so no SVG namespace shows
    assert html.count("data:image/png;base64,") >= 4 and "data:image/svg+xml;base64," in html
    # the checker itself finds what a page would fetch
    planted = html.replace("</body>", '<img src="https://example.com/x.png"><link rel="stylesheet" href="s.css">'
                                      '<div style="background: url(http://example.com/b.png)"></div></body>')
    assert outside_refs(planted) == ["https://example.com/x.png", "s.css", "http://example.com/b.png", "<link>"]


def test_the_report_has_its_sections(made):
    run, page, mods = made
    html = page.read_text()
    for anchor in ("runs", "health", "accuracy", "compare", "against", "figures", "faults"):
        assert f'<section id="{anchor}">' in html, anchor
    found = tables(html)
    assert {t["attrs"].get("data-variant") for t in found if t["attrs"].get("class") == "accuracy"} == set(VARIANTS)
    seeds = {t["attrs"].get("data-seed") for t in found if t["attrs"].get("class") == "against"}
    assert seeds == {"thesis-3.3", "paper-table-6"}   # flowdiagnoser:theta=2 and nest-cf were evaluated
    # a section per fault: the tcp_drop of wget's connection, with its neighbours (socket above,
    # interface below), what each variant said in the window and the margin, and the counters figure
    said = [t for t in found if t["attrs"].get("class") == "said"]
    assert len(said) == 2
    header = said[0]["rows"][0]["cells"]
    assert header[:5] == ["Module", "Role", "Dir", "Truth: window", "Truth: margin"]
    assert header[5:] == [f"{v}: {p}" for v in VARIANTS for p in ("window", "margin")]
    roles = [r["cells"][1] for r in said[0]["rows"][1:] if r["cells"][1]]
    assert roles == ["above", "target", "below"]
    target = said[0]["rows"][3]["cells"]
    assert target[0].startswith(f"tcp#{mods['wget'][2]}") and target[2] == "in"
    assert target[3].startswith("positive ") and "STALLED" in target[5]
    assert html.count('class="fault tcp_drop"') == 1 and html.count('class="fault ip_drop"') == 1


# ----------------------------------------------------------------------------- in the browser


def test_chromium_loads_every_figure_and_fetches_nothing(made, browser, tmp_path):
    _, page, _ = made
    seen = chromium.devtools_load(page, tmp_path)
    outside = [u[:80] for u in seen["requested"] if u != page.as_uri() and not u.startswith("data:")]
    assert outside == []
    assert seen["imgs"] >= 6 and seen["ok"] == seen["imgs"]
    dom = chromium.dump_dom(page, tmp_path)
    body = re.search(r"<body([^>]*)>", dom).group(1)
    attrs = dict(re.findall(r'data-([\w-]+)="([^"]*)"', body))
    assert attrs["checked"] == "yes"
    assert int(attrs["imgs"]) == seen["imgs"] and attrs["imgs-ok"] == attrs["imgs"]
    assert json.loads(attrs["fetched"].replace("&quot;", '"')) == []


def test_the_browser_checks_would_catch_an_outside_fetch(browser, tmp_path):
    """The same checks on a page that fetches from outside and has a broken image: they fail."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><head><link rel="stylesheet" href="https://example.com/x.css"></head>'
                    '<body><img src="http://example.com/a.png"><img src="missing.png"></body></html>')
    seen = chromium.devtools_load(page, tmp_path)
    assert "https://example.com/x.css" in seen["requested"] and "http://example.com/a.png" in seen["requested"]
    assert seen["ok"] < seen["imgs"] == 2
    attrs = dict(re.findall(r'data-([\w-]+)="([^"]*)"', re.search(r"<body([^>]*)>", chromium.dump_dom(page, tmp_path)).group(1)))
    assert attrs["imgs-ok"] != attrs["imgs"]
    assert "example.com" in attrs["fetched"]


def test_the_tables_numbers_in_the_browser_equal_accuracy_csv(made, browser, tmp_path):
    run, page, _ = made
    dom = chromium.dump_dom(page, tmp_path)
    csv = pd.read_csv(run / "analysis" / "accuracy.csv")
    assert accuracy_cells_compared(dom, csv, VARIANTS) == \
        len(VARIANTS) * len(SECTIONS) * len(ROWS) * (len(COUNTS) + len(RATES))


def test_a_screenshot_of_the_report_is_not_blank(made, browser, tmp_path):
    _, page, _ = made
    shot = chromium.screenshot(page, tmp_path / "report.png", tmp_path)
    img = mpimg.imread(shot)
    assert img.shape[:2] == (2400, 1400)
    top = img[:400, :, :3]
    assert top.std() > 0.05                       # a title, the tables: not an empty page
    assert (img[..., :3].min(axis=2) < 0.3).mean() > 0.002   # dark pixels: text and figures were drawn


# ----------------------------------------------------------------------------- the command


def test_report_command_on_many_runs_and_a_suite(tmp_path, capsys):
    root = tmp_path / "results" / "suite-x"
    runs = [make_run(root / "hand" / f"20260101-00000{k}-r{k}")[0] for k in range(2)]
    (root / "suite.json").write_text(json.dumps({"suite": "suite-x", "runs": [
        {"experiment": "hand", "repetition": k, "run": f"hand/{r.name}", "status": "complete"}
        for k, r in enumerate(runs)]}))
    assert nestlab_main(["report", str(root), "--variant", "flowdiagnoser:theta=2"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == str(root / "analysis" / "report.html")
    html = Path(printed).read_text()
    assert "<title>nestlab report: suite suite-x (2 runs)</title>" in html
    assert html.count('class="across"') == 1 and 'id="compare"' not in html
    assert html.count("<details id=\"run-hand-") == 2
    assert outside_refs(html) == []
    out = tmp_path / "elsewhere" / "r.html"
    assert nestlab_main(["report", *map(str, runs), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out) and out.stat().st_size > 0


def test_report_command_errors_are_one_line(tmp_path, capsys):
    assert nestlab_main(["report", str(tmp_path / "no-such-run")]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err.count("\n") == 1 and cap.err.startswith("error: ") and "no-such-run" in cap.err
    run, *_ = make_run(tmp_path / "hand" / "r0")
    assert nestlab_main(["report", str(run), "-o", str(tmp_path)]) == 2
    cap = capsys.readouterr()
    assert cap.err == f"error: {tmp_path}: is a directory; -o names the HTML file to write\n"
    assert nestlab_main(["report", str(run), "--variant", "no-such-system"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_fault_sections_are_capped(tmp_path, monkeypatch):
    run, *_ = make_run(tmp_path / "hand" / "r0")
    monkeypatch.setattr(html_report, "MAX_FAULT_SECTIONS", 1)
    html = build_report(evaluate([run], ["flowdiagnoser:theta=2"], keep=True), tmp_path / "r.html",
                        draw=False).read_text()
    assert html.count('class="fault ') == 1
    assert "Sections shown for the first 1 of 2 faults" in html
    assert "<img" not in html.split('<section id="faults">')[0]   # draw=False: no figure above the faults


# ----------------------------------------------------------------------------- run-experiment's summary


def test_summarize_run_writes_the_report_and_names_it(tmp_path, capsys):
    run, *_ = make_run(tmp_path / "hand" / "r0")
    out = summarize_run(run)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2:] == [f"analysis: tables and figures written to {out}", f"report: {out / 'report.html'}"]
    html = (out / "report.html").read_text()
    assert outside_refs(html) == []
    # the same as `nestlab report RUN`: both variants, their comparison; the figures summarize_run drew
    assert 'data-variant="nest-cf"' in html and '<section id="compare">' in html
    assert (out / "diagnosis-overview.png").is_file()
    # the tables summarize_run writes are still those of its own variants
    assert set(pd.read_csv(out / "accuracy.csv")["variant"]) == {"flowdiagnoser:theta=2"}


def test_summarize_run_survives_a_report_that_fails(tmp_path, capsys, monkeypatch):
    run, *_ = make_run(tmp_path / "hand" / "r0")

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(html_report, "build_report", broken)
    out = summarize_run(run, figures=False)
    cap = capsys.readouterr()
    assert "warning: report not written: RuntimeError: boom" in cap.err
    assert cap.out.strip().splitlines()[-1] == f"analysis: tables and figures written to {out}"
    assert (out / "accuracy.csv").is_file() and not (out / "report.html").exists()
