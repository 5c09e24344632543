"""Streams runs (docs/streams.md) through the analysis: the ground truth of thesis 4.6.3 (straddling
intervals left out), `nestlab accuracy` with and without `--against thesis-4.3` on a hand-made
two-experiment suite, `nestlab report` (no network health: not a network run) and the Python API."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import nestlab
from analysis.labels import label_run
from analysis.load import load_run_data
from analysis.pipeline import evaluate
from nestlab.cli import nestlab_main
from rundir.runs import open_run
from rundir.streams import connection_ends, stream_tasks
from tests.support.streams_run import Graph, StreamsRun, chain

INTO_T = "a:out0>t:in0"


def chain_run(experiment: str = "mergetree", stop: float | None = None) -> StreamsRun:
    """src -> a -> t -> snk, 1-s snapshots; t (a throttle) at rate 0 from 3.5 s to 8.5 s, at rate 100
    from 9.5 s to 10.5 s; a dropper on a from 10.5 s to 11.5 s. Snapshot k covers (k - 1, k] s."""
    g = chain(("src", "beacon"), ("a", "pass"), ("t", "throttle"), ("snk", "sink"))
    r = StreamsRun(g, experiment=experiment, stop=stop)
    flow = {c: (10, 10) for c in g.conns}
    r.step(flow, 3)                                                       # snapshots 1-3
    r.step({"src:out0>a:in0": (10, 10), INTO_T: (4, 10), "t:out0>snk:in0": (4, 4)})   # 4: t stops at 3.5 s
    r.step({"src:out0>a:in0": (0, 0)}, 4)                                 # 5-8: t reads nothing; a back-pressured
    r.step({"src:out0>a:in0": (10, 10), INTO_T: (16, 10), "t:out0>snk:in0": (16, 16)})  # 9: t reads again at 8.5 s
    r.step(flow, 3)                                                       # 10-12
    r.fault("throttle", "t", start=3.5, end=8.5, rate=0)
    r.fault("throttle", "t", start=9.5, end=10.5, rate=100)
    r.fault("dropper", "a", start=10.5, end=11.5)
    for s in range(1, r.n_snapshots):
        stall = 4 <= s <= 8
        for op in g.operators:
            busy = 990 if stall and op == "t" else 100
            bp = 950 if stall and op in ("src", "a") else 0
            r.task(s, op, busy=busy, backpressured=bp, idle=1000 - busy - bp)
    return r


def positives(labels, data, name: str) -> list[int]:
    mid = int(data.modules.index[data.modules["name"] == name][0])
    f = labels[(labels["module"] == mid) & (labels["dir"] == "out") & labels["actual"] & ~labels["exclude"]]
    return sorted(f["seq"].tolist())


def causes(labels, data, name: str) -> dict[int, str]:
    mid = int(data.modules.index[data.modules["name"] == name][0])
    f = labels[(labels["module"] == mid) & (labels["dir"] == "out")]
    return dict(zip(f["seq"].tolist(), f["cause"].astype(str).tolist(), strict=True))


@pytest.mark.parametrize("policy", [None, "impact:lookback=0", "window:tail=3"])
def test_ground_truth_is_the_throttle_at_rate_0_while_active_straddles_left_out(tmp_path, policy):
    data = load_run_data(open_run(chain_run().write(tmp_path / "run")))
    labels = label_run(data, policy)
    assert positives(labels, data, INTO_T) == [5, 6, 7, 8]   # intervals (4, 5] .. (7, 8] lie within [3.5, 8.5]
    c = causes(labels, data, INTO_T)
    assert c[4] == c[9] == "straddle" and c[0] == "invalid" and c[10] == c[11] == ""
    for other in ("src:out0>a:in0", "t:out0>snk:in0"):   # upstream (back-pressured), downstream, the dropper's
        assert positives(labels, data, other) == []
        assert set(causes(labels, data, other).values()) <= {"", "invalid"}
    inbound = labels[labels["dir"] == "in"]
    assert inbound["exclude"].all() and not inbound["actual"].any()   # a connection has one direction


def test_after_end_and_a_fault_without_an_end(tmp_path):
    r = chain_run(stop=11.5)
    r.faults[0] = ("throttle", "t", 3.5, None, 0, True)   # never undone: active until the last snapshot
    data = load_run_data(open_run(r.write(tmp_path / "run")))
    labels = label_run(data)
    assert positives(labels, data, INTO_T) == [5, 6, 7, 8, 9, 10, 11]
    assert causes(labels, data, INTO_T)[12] == "after_end"
    assert positives(label_run(data, "impact:after_end=keep"), data, INTO_T)[-1] == 12


def test_the_readers_of_a_streams_run(tmp_path):
    path = chain_run().write(tmp_path / "run")
    tasks = stream_tasks(path)
    assert len(tasks) == 12 * 4 and set(tasks["operator"]) == {"src", "a", "t", "snk"}
    assert tasks["acc_busy_ms"].isna().all() and tasks["busy_ms_per_s"].max() == 990
    assert set(connection_ends(path).values()) == {("src", "a"), ("a", "t"), ("t", "snk")}


def test_evaluate_scores_both_variants_and_counts_the_straddles(tmp_path):
    path = chain_run().write(tmp_path / "run")
    ev = evaluate([path], ["streamsdiagnoser", "flink-backpressure"], jobs=1)
    assert ev.straddle_rows == 2 and not ev.health   # no network health for a streams run
    for v in ev.variants:
        c = ev.counts[ev.counts["variant"] == v]
        assert set(c["kind"]) == {"sconn"} and set(c["dir"]) == {"out"}
        t = ev.table(v).loc[("Outbound", "all modules")]
        assert (t["TP"], t["FN"]) == (4, 0), v      # into t, snapshots 5-8
    sd = ev.table("streamsdiagnoser").loc[("Outbound", "all modules")]
    assert sd["FP"] == 0
    # in parallel workers: the same counts and the same straddle count
    ev2 = evaluate([path, path], ["streamsdiagnoser"], jobs=2)
    assert ev2.straddle_rows == 4


def test_the_python_api_on_a_streams_run(tmp_path):
    run = nestlab.open_run(chain_run().write(tmp_path / "run"))
    d = run.diagnose("streamsdiagnoser", "flink-backpressure")
    into = d[(d["module"] == 2) & (d["dir"] == "out")]
    for v, want in (("streamsdiagnoser", [5, 6, 7, 8]), ("flink-backpressure", [4, 5, 6, 7, 8])):
        got = into[into["variant"] == v].sort_values("seq")
        assert got.loc[got["positive"], "seq"].tolist() == want, v   # 4 straddles the fault's start: not scored
    assert run.labels()["actual"].sum() == 4
    acc = run.accuracy(["streamsdiagnoser"])
    row = acc[(acc["section"] == "Total") & (acc["row"] == "all modules")].iloc[0]
    assert row["TP"] == 4


def suite(tmp_path) -> tuple:
    """A hand-made two-experiment suite: results/streams-4.3/{mergetree,mergetreebarrier}/r0 and suite.json."""
    root = tmp_path / "results" / "streams-4.3"
    entries = []
    for exp in ("mergetree", "mergetreebarrier"):
        chain_run(exp).write(root / exp / "20260101-000000-r0")
        entries.append({"experiment": exp, "repetition": 0, "run": f"{exp}/20260101-000000-r0", "status": "complete"})
    (root / "suite.json").write_text(json.dumps({"suite": "streams-4.3", "runs": entries}))
    # a run the index does not name: not part of the suite
    chain_run("mergetree").write(root / "mergetree" / "20250101-000000-r0")
    return tmp_path / "results", root


def test_cli_accuracy_of_a_streams_suite(tmp_path, capsys):
    results, root = suite(tmp_path)
    code = nestlab_main(["accuracy", "streams-4.3", "--results", str(results), "--variant", "streamsdiagnoser",
                         "-j", "1"])
    out = capsys.readouterr().out
    assert code == 0
    assert "straddles the start or end" in out and "Network health" not in out
    table = {(r["section"], r["row"]): r for r in csv.DictReader((root / "analysis" / "accuracy.csv").open())}
    assert table[("Outbound", "all modules")]["TP"] == "8"   # two runs, 4 each (the unnamed run is not counted)


def test_cli_accuracy_against_thesis_4_3_a_row_per_graph(tmp_path, capsys):
    results, root = suite(tmp_path)
    code = nestlab_main(["accuracy", "streams-4.3", "--results", str(results), "--against", "thesis-4.3",
                         "--variant", "streamsdiagnoser", "--variant", "flink-backpressure"])
    out = capsys.readouterr().out
    assert code == 0
    md = out[out.index("against thesis-4.3"):]
    lines = [ln for ln in md.splitlines() if ln.startswith("| ")]
    graphs = [ln.split("|")[1].strip() for ln in lines if ln.split("|")[1].strip() not in ("", "Graph")]
    assert graphs == ["COMPLEXTREE", "COMPLEXTREEMUX", "MERGETREE", "MERGETREEMUX", "MERGETREEBARRIER",
                      "MERGETREEBARRIERMUX", "Totals"] * 2
    mt = next(ln for ln in lines if ln.startswith("| MERGETREE ")).split("|")
    assert mt[2].strip() == "ours (1 run)" and [c.strip() for c in mt[3:10]] == ["34", "4", "30", "4", "30", "0", "0"]
    assert "| COMPLEXTREE         | ours (no runs)" in md and "21319" in md
    cells = list(csv.DictReader((root / "analysis" / "against-thesis-4.3.csv").open()))
    assert {c["variant"] for c in cells} == {"streamsdiagnoser", "flink-backpressure"}
    tot = {c["metric"]: c for c in cells if c["variant"] == "streamsdiagnoser" and c["row"] == "Totals"}
    assert tot["TP"]["ours"] == "8.0" and tot["TP"]["theirs"] == "509.0" and tot["TPR"]["interval"] == "across runs"
    one = {c["metric"]: c for c in cells if c["variant"] == "streamsdiagnoser" and c["row"] == "MERGETREE"}
    assert one["TPR"]["interval"] == "Wilson" and one["TPR"]["runs"] == "1"   # one run: the per-snapshot interval
    assert (root / "analysis" / "against-thesis-4.3.tex").is_file()
    # the default variant of the table is streamsdiagnoser
    assert nestlab_main(["accuracy", "streams-4.3", "--results", str(results), "--against", "thesis-4.3"]) == 0
    assert "#### streamsdiagnoser" in capsys.readouterr().out
    # a streams table is an accuracy table, not an ablation table
    assert nestlab_main(["compare", "streams-4.3", "--results", str(results), "--against", "thesis-4.3"]) == 2
    assert "nestlab accuracy RUNS --against thesis-4.3" in capsys.readouterr().err


def test_report_of_a_streams_run_says_it_is_not_a_network_run(tmp_path, capsys):
    path = chain_run().write(tmp_path / "run")
    out = tmp_path / "report.html"
    assert nestlab_main(["report", str(path), "-o", str(out), "--variant", "streamsdiagnoser",
                         "--variant", "flink-backpressure"]) == 0
    html = out.read_text()
    assert "Not a network run" in html and "network health over time" not in html


def test_the_baseline_refuses_a_run_without_task_metrics(tmp_path, capsys):
    r = chain_run()
    r.tasks = []
    path = r.write(tmp_path / "run")
    assert nestlab_main(["accuracy", str(path), "--variant", "flink-backpressure"]) == 2
    assert "stream_tasks" in capsys.readouterr().err


def test_a_fan_in_graph_labels_every_connection_into_the_throttle(tmp_path):
    g = Graph({"a": "beacon", "b": "beacon", "t": "throttle", "snk": "sink"},
              ["a:out0>t:in0", "b:out0>t:in0", "t:out0>snk:in0"])
    r = StreamsRun(g).step({c: (5, 5) for c in g.conns}, 2).step({"a:out0>t:in0": (0, 3), "b:out0>t:in0": (0, 3)}, 3)
    r.fault("throttle", "t", start=2.0, end=5.0, rate=0)
    data = load_run_data(open_run(r.write(tmp_path / "run")))
    labels = label_run(data)
    assert positives(labels, data, "a:out0>t:in0") == positives(labels, data, "b:out0>t:in0") == [3, 4, 5]
    assert np.array_equal(labels["actual"].to_numpy(), labels["actual"].to_numpy() & ~labels["exclude"].to_numpy())


def test_report_puts_ours_beside_table_4_3(tmp_path):
    results, root = suite(tmp_path)
    out = tmp_path / "report.html"
    assert nestlab_main(["report", "streams-4.3", "--results", str(results), "-o", str(out),
                         "--variant", "streamsdiagnoser", "--variant", "flink-backpressure"]) == 0
    html = out.read_text()
    assert 'data-seed="thesis-4.3"' in html and "MERGETREEBARRIERMUX" in html and "ours (1 run)" in html
