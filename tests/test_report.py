"""Tables (Markdown, CSV, LaTeX), the commands, summarize_run and reading awkward runs."""

from __future__ import annotations

import json
import math
import sqlite3

import pandas as pd
import pytest

from analysis.load import load_run_data
from analysis.pipeline import evaluate
from analysis.render.summary import summarize_run
from analysis.render.tables import stalled_list, stalled_top
from analysis.render.writers import accuracy_latex, accuracy_markdown, compare_markdown
from analysis.score.accuracy import accuracy_table, compare_table
from analysis.score.table_layout import ROWS, SECTIONS
from nestlab.cli import nestlab_main
from nestlab.commands.tables import expand_values, expand_variant
from rundir.errors import UserError
from rundir.runs import find_runs, open_run
from tests.support.runs import WGET, RunBuilder, edit_db, make_run


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path / "results" / "hand" / "20260101-000000-r0")


def _table(path, variant="flowdiagnoser:theta=2"):
    return evaluate([path], [variant]).table()


# ----------------------------------------------------------------------------- rendering


def test_markdown_has_every_row_and_blank_undefined_rates(run):
    path, *_ = run
    t = _table(path)
    md = accuracy_markdown(t, "title")
    lines = [ln for ln in md.splitlines() if ln.startswith("| ")][1:]
    assert len(lines) == len(SECTIONS) * len(ROWS)
    for section in SECTIONS:
        assert f"| {section} " in md
    for row in ROWS:
        assert sum(f"| {row} " in ln for ln in lines) == 3
    assert "nan" not in md.lower()
    # outbound wget: no actual negatives -> FPR, TNR blank, not 0
    cells = [c.strip() for c in next(ln for ln in lines if "| wget " in ln and lines.index(ln) >= len(ROWS))
             .split("|")[1:-1]]
    header = [c.strip() for c in md.splitlines()[2].split("|")[1:-1]]
    row = dict(zip(header, cells, strict=True))
    assert row["AN"] == "0" and row["FPR"] == "" and row["TNR"] == ""
    assert row["TPR"] != ""
    withci = accuracy_markdown(t, intervals=True)
    assert "[" in withci and "nan" not in withci.lower()


def test_latex_and_csv(run, tmp_path):
    path, *_ = run
    t = _table(path)
    tex = accuracy_latex(t, "caption")
    assert tex.count(r" \\") == 2 + len(SECTIONS) * len(ROWS)
    assert r"\textit{s:iperf}" in tex and "ip+eth" in tex and "nan" not in tex.lower()
    assert r"\begin{tabular}" in tex and r"\end{table}" in tex
    code = nestlab_main(["accuracy", str(path), "--out", str(tmp_path / "o")])
    assert code == 0
    csv = pd.read_csv(tmp_path / "o" / "accuracy.csv", keep_default_na=False)
    assert len(csv) == len(SECTIONS) * len(ROWS)
    out_wget = csv[(csv["section"] == "Outbound") & (csv["row"] == "wget")].iloc[0]
    assert out_wget["FPR"] == "" and out_wget["AN"] == 0 and float(out_wget["TPR"]) > 0
    text = (tmp_path / "o" / "accuracy.csv").read_text()
    assert "nan" not in text.lower()
    assert (tmp_path / "o" / "accuracy.tex").read_text().startswith(r"\begin{table}")


def test_compare_markdown_marks_changes(run):
    path, *_ = run
    # theta=3 blames the two connections for the IP fault (fewer than 3 wait): theta=1 does not
    ev = evaluate([path], ["flowdiagnoser:theta=3", "flowdiagnoser:theta=1", "nest-cf"])
    c = ev.compare()
    md = compare_markdown(c, ev.variants)
    assert "V1 = flowdiagnoser:theta=3 (baseline)" in md and "V3 ΔFP%" in md and "V1 ΔTP%" not in md
    assert "nan" not in md.lower()
    assert c.loc[("Inbound", "TCP"), ("flowdiagnoser:theta=3", "FP")] > 0
    assert c.loc[("Inbound", "TCP"), ("flowdiagnoser:theta=1", "dFP%")] == pytest.approx(-100.0)
    checked = 0
    for _, r in c.iterrows():
        for v in ev.variants[1:]:
            d = r[(v, "dFP%")]
            if not math.isnan(d) and d != 0:
                good = d < 0
                cell = f"{d:+.1f}"
                assert (f"**{cell}**" if good else f"*{cell}*") in md
                checked += 1
    assert checked and "**-100.0**" in md


def test_stalled_list(run):
    path, mods, ip = run
    ev = evaluate([path], ["flowdiagnoser:theta=2"], keep=True)
    data, scored = ev.data[path], ev.scored[path]
    st = stalled_list(data, scored, ev.variants[0])
    assert list(st["positive"]) == sorted(st["positive"], reverse=True)
    sub = scored[(scored["variant"] == ev.variants[0]) & ~scored["exclude"]]
    for r in st.itertuples():
        g = sub[(sub["module"] == r.module) & (sub["dir"] == r.dir)]
        assert r.positive == int(g["positive"].sum()) > 0
        assert r.positive + r.DONTCARE + r.BLOCKED + r.HEALTHY == len(g)
        assert r.FP == int((g["positive"] & ~g["actual"]).sum())
    wget_tcp = st[(st["module"] == mods["wget"][2]) & (st["dir"] == "in")].iloc[0]
    assert wget_tcp["queued_max"] == 500 and wget_tcp["longest"] >= 5


@pytest.mark.parametrize("variant", ["flowdiagnoser:theta=2", "nest-cf", "flowdiagnoser:theta=1"])
def test_stalled_top_is_the_head_of_stalled_list(tmp_path, variant):
    """The report's list, made of the modules it shows only: stalled_list's first rows and its length."""
    from tests.support.synthetic import synthetic_run

    path = synthetic_run(tmp_path / "run", seconds=30, apps=2, conns=4, churn_s=6)
    ev = evaluate([path], [variant], keep=True)
    data, scored = ev.data[ev.runs[0]], ev.scored[ev.runs[0]]
    whole = stalled_list(data, scored, ev.variants[0])
    assert len(whole) > 5
    for cap in (1, 2, 3, 5, len(whole) - 1, len(whole), len(whole) + 3):
        top, total = stalled_top(data, scored, ev.variants[0], cap)
        assert total == len(whole)
        pd.testing.assert_frame_equal(top.reset_index(drop=True), whole.iloc[:cap].reset_index(drop=True))


# ----------------------------------------------------------------------------- commands


def test_accuracy_command_on_an_experiment_name_a_tree_and_a_glob(tmp_path, capsys):
    root = tmp_path / "results"
    make_run(root / "hand" / "20260101-000000-r0")
    make_run(root / "hand" / "20260101-000100-r1")
    assert nestlab_main(["accuracy", "hand", "--results", str(root)]) == 0
    out = capsys.readouterr().out
    assert "2 runs (hand)" in out and "| Inbound " in out and "written:" in out
    assert (root / "hand" / "analysis" / "accuracy.md").is_file()
    one = evaluate([root / "hand" / "20260101-000000-r0"]).table()
    two = evaluate(find_runs([str(root)])).table()
    assert (two["TP"] == 2 * one["TP"]).all() and (two["Total"] == 2 * one["Total"]).all()
    assert len(find_runs([str(root / "hand" / "2026*")])) == 2


def test_compare_command_sweep(run, capsys):
    path, *_ = run
    assert nestlab_main(["compare", str(path), "--sweep", "theta=1..3"]) == 0
    out = capsys.readouterr().out
    assert "V1 = flowdiagnoser:theta=1 (baseline)" in out and "V3 = flowdiagnoser:theta=3" in out
    assert (path / "analysis" / "compare.csv").is_file()
    csv = pd.read_csv(path / "analysis" / "compare.csv")
    assert set(csv["variant"]) == {f"flowdiagnoser:theta={k}" for k in (1, 2, 3)}


def test_variant_expansion():
    assert expand_values("1..4") == ["1", "2", "3", "4"]
    assert expand_values("0..0.3/0.1") == ["0", "0.1", "0.2", "0.3"]
    assert expand_values("on,off") == ["on", "off"]
    assert expand_variant("flowdiagnoser:theta=1..2,queues=on") == [
        "flowdiagnoser:theta=1,queues=on", "flowdiagnoser:theta=2,queues=on"]
    assert expand_variant("nest-cf:anw=off") == ["nest-cf:anw=off"]
    with pytest.raises(UserError):
        expand_values("4..1")


@pytest.mark.parametrize("argv,message", [
    (["accuracy", "/nonexistent/run"], "not a run directory"),
    (["accuracy", "RUN", "--variant", "nosuch"], "unknown variant"),
    (["accuracy", "RUN", "--policy", "impact:lookback=x"], "lookback"),
    (["compare", "RUN", "--variant", "flowdiagnoser"], "at least two variants"),
    (["compare", "RUN", "--sweep", "theta"], "PARAM=VALUES"),
    (["plots", "RUN", "--module", "tcp:999999"], "no module"),
])
def test_bad_input_is_one_line_and_exit_2(run, capsys, argv, message):
    path, *_ = run
    argv = [str(path) if a == "RUN" else a for a in argv]
    assert nestlab_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


# ----------------------------------------------------------------------------- awkward runs


def test_incomplete_and_old_runs(tmp_path, capsys):
    running, *_ = make_run(tmp_path / "a" / "r-running", status="running")
    info = open_run(running)
    assert any("still recording" in w for w in info.warnings)
    assert nestlab_main(["accuracy", str(running)]) == 0
    assert "still recording" in capsys.readouterr().err

    bare, *_ = make_run(tmp_path / "a" / "r-bare", manifest=False)
    assert nestlab_main(["accuracy", str(bare)]) == 0
    cap = capsys.readouterr()
    assert "no manifest.json" in cap.err and "| Outbound " in cap.out
    # without a manifest the workloads come from the processes' command lines
    assert evaluate([bare]).table().loc[("Outbound", "wget"), "AP"] > 0

    old, *_ = make_run(tmp_path / "a" / "r-old")
    m = json.loads((old / "manifest.json").read_text())
    m["format_version"] = 0
    (old / "manifest.json").write_text(json.dumps(m))
    conn = sqlite3.connect(old / "run.db")
    conn.execute("DROP TABLE faults")
    conn.execute("DROP TABLE processes")
    conn.commit()
    conn.close()
    info = open_run(old)
    assert any("older format_version 0" in w for w in info.warnings)
    assert any("no processes, faults table" in w for w in info.warnings)
    t = evaluate([old]).table()
    assert t.loc[("Total", "all modules"), "Total"] > 0 and t.loc[("Inbound", "TCP"), "AP"] == 0

    new, *_ = make_run(tmp_path / "a" / "r-new")
    m["format_version"] = 99
    (new / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(UserError, match="newer than this nestlab reads"):
        open_run(new)

    empty = tmp_path / "a" / "r-empty"
    RunBuilder(empty, 0).write()
    with pytest.raises(UserError, match="no snapshots recorded"):
        load_run_data(open_run(empty))

    nodb = tmp_path / "a" / "r-nodb"
    nodb.mkdir()
    (nodb / "manifest.json").write_text("{}")
    with pytest.raises(UserError, match="no run.db"):
        open_run(nodb)


def test_summarize_run(run, capsys):
    path, *_ = run
    out = summarize_run(path)
    assert out == path / "analysis"
    printed = capsys.readouterr().out
    assert "Accuracy of flowdiagnoser:theta=2" in printed
    assert printed.strip().splitlines()[-2:] == [f"analysis: tables and figures written to {out}",
                                                 f"report: {out / 'report.html'}"]
    for name in ("accuracy.md", "accuracy.csv", "accuracy.tex", "stalled.md", "stalled.csv",
                 "diagnosis-overview.png", "module-timeline.png"):
        assert (out / name).stat().st_size > 0, name
    assert list(out.glob("subgraph-*.png"))
    t = accuracy_table(evaluate([path]).counts, "flowdiagnoser:theta=2")
    csv = pd.read_csv(out / "accuracy.csv")
    assert csv["TP"].tolist() == t["TP"].tolist()
    assert compare_table(evaluate([path], ["flowdiagnoser", "nest-cf"]).counts,
                         ["flowdiagnoser:theta=2", "nest-cf"]).shape[0] == len(SECTIONS) * len(ROWS)


def test_a_set_of_runs_skips_one_that_cannot_be_analysed(tmp_path, capsys):
    root = tmp_path / "results" / "hand"
    make_run(root / "20260101-000000-r0")
    RunBuilder(root / "20260101-000100-r1", 0).write()   # the run failed before its first snapshot
    assert nestlab_main(["accuracy", str(root)]) == 0
    cap = capsys.readouterr()
    assert "skipped: no snapshots recorded" in cap.err
    assert "ground truth impact, run hand/20260101-000000-r0" in cap.out   # only the good run counted
    only_bad = tmp_path / "bad"
    RunBuilder(only_bad / "a", 0).write()
    RunBuilder(only_bad / "b", 0).write()
    assert nestlab_main(["accuracy", str(only_bad)]) == 2
    assert "none of the 2 runs could be analysed" in capsys.readouterr().err


def test_run_with_snapshots_but_no_modules(tmp_path, capsys):
    """The collector ran but saw no connection: every count is 0, no figure, no crash."""
    path = RunBuilder(tmp_path / "hand" / "r0", 5, workloads=[WGET]).write()
    out = summarize_run(path)
    cap = capsys.readouterr()
    assert "no module counters recorded" in cap.err and "no figures" in cap.err
    t = pd.read_csv(out / "accuracy.csv", keep_default_na=False)
    assert (t["Total"] == 0).all() and (t["TPR"] == "").all()


# ----------------------------------------------------------------------------- odd data in the report

def test_the_report_draws_a_window_of_hours_and_dollar_signs_in_names(tmp_path, capsys):
    """A fault window longer than two hours (the counters figure's ticks) and a `$...$` in a name
    (matplotlib would read TeX) are data like any other: the figures and the report are made."""
    from analysis.render.summary import summarize_run

    run, *_ = make_run(tmp_path / "exp" / "r0")
    assert edit_db(run, "UPDATE faults SET end = start + 3 * 3600 WHERE id = 1",
                    "UPDATE modules SET name = 'wget $\\alpha^{2$ 100' WHERE kind = 'app'") == [1, 2]
    out = summarize_run(run)
    err = capsys.readouterr().err
    assert "not drawn" not in err and "not written" not in err, err
    html = (out / "report.html").read_text()
    assert '<section id="faults"' in html and html.count("data:image/svg+xml") == 2   # each fault's counters
    assert (out / "diagnosis-overview.png").is_file() and (out / "module-timeline.png").is_file()
    assert "$\\alpha^{2$" in (out / "stalled.md").read_text()   # the name as it is
