"""Scoring inferred paths against the truth, on hand-made results (analysis/paths/score.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.paths.maketrace import Fault, Template, call, maketrace
from analysis.paths.model import PathPattern, PathsResult, true_patterns
from analysis.paths.score import (
    SCORE_COLUMNS,
    culprit_ranking,
    culprit_scores,
    delay_scores,
    pattern_scores,
    score,
    true_node_delays,
)

TEMPLATES = [Template("a", "client", call("web", 5, call("db", 10)), weight=0.6),
             Template("b", "client", call("web", 2), weight=0.395),
             Template("rare", "client", call("web", 3, call("cache", 1)), weight=0.005)]


@pytest.fixture(scope="module")
def trace():
    return maketrace(TEMPLATES, duration=100, rate=100, seed=1, faults=[Fault("db", 0.2, 40, 60)])


def result(patterns, node_delays=None) -> PathsResult:
    nd = node_delays if node_delays is not None else pd.DataFrame(columns=["node", "mean_s", "count"])
    return PathsResult("hand", patterns, nd, pd.DataFrame(columns=["src", "dst", "mean_s", "count"]))


def truth_result(trace, scale=1.0, drop=(), extra=()) -> PathsResult:
    """The true patterns with their true counts and node delays (times `scale`), less `drop`, plus
    `extra` (pattern, count)."""
    tp = true_patterns(trace)["pattern"].value_counts()
    delays = true_node_delays(trace)
    pats = []
    for p, n in tp.items():
        if p in drop:
            continue
        d = delays[delays["pattern"] == p].set_index("node")["mean_s"] * scale
        pats.append(PathPattern(p, float(n), d.to_dict()))
    pats += [PathPattern(p, float(n)) for p, n in extra]
    return result(pats)


def test_the_truth_scores_perfectly(trace):
    row = score(truth_result(trace), trace)
    assert list(row) == list(SCORE_COLUMNS)
    assert row["pattern_recall"] == 1 and row["pattern_precision"] == 1
    assert row["rare_recall"] == 1 and row["request_recall"] == 1
    assert row["count_error_pct"] == 0 and row["delay_error_ms"] == pytest.approx(0, abs=1e-9)
    assert row["true_patterns"] == 3 and np.isnan(row["culprit_top1"])   # no algorithm to rerun


def test_missing_and_made_up_patterns(trace):
    true = true_patterns(trace)
    common_a = "client>web(web>db(db>web(web>client)))"
    rare = "client>web(web>cache(cache>web(web>client)))"
    made_up = "client>web(web>app(app>web(web>client)))"
    r = truth_result(trace, drop=(common_a, rare), extra=[(made_up, 500), ("x>y", 1)])
    s = pattern_scores(r, true)
    assert s["pattern_recall"] == 0.5                  # b found, a missing
    assert s["pattern_precision"] == 0.5               # b right, made_up wrong
    assert s["rare_recall"] == 0                       # the rare one missed
    assert s["rare_precision"] == 0                    # "x>y" never happened
    n = true["pattern"].value_counts()
    assert s["request_recall"] == pytest.approx(n["client>web(web>client)"] / (n.sum() - n[rare]))


def test_a_common_pattern_inferred_just_under_the_threshold_counts_as_found(trace):
    true = true_patterns(trace)
    r = truth_result(trace)
    total = sum(p.count for p in r.patterns)
    first = max(r.patterns, key=lambda p: p.count)
    first.count = 0.006 * total
    assert pattern_scores(r, true)["pattern_recall"] == 1
    first.count = 0.001 * total
    assert pattern_scores(r, true)["pattern_recall"] == 0.5


def test_delay_error_in_ms_and_percent(trace):
    true = true_patterns(trace)
    delays = true_node_delays(trace)
    # web's delay in pattern a is its 5 ms plus the fault-free db call's wait (0): ~5 ms; db ~10 ms (+fault)
    a = delays[delays["pattern"] == "client>web(web>db(db>web(web>client)))"].set_index("node")["mean_s"]
    assert a["web"] == pytest.approx(0.005, rel=0.05) and a["db"] > 0.010
    s = delay_scores(truth_result(trace, scale=1.1), delays, true)
    assert s["delay_error_pct"] == pytest.approx(10, rel=1e-6)
    common = delays[delays["pattern"].map(true["pattern"].value_counts(normalize=True)) >= 0.01]
    expect_ms = np.average(common["mean_s"] * 0.1 * 1000, weights=common["requests"])
    assert s["delay_error_ms"] == pytest.approx(expect_ms, rel=1e-6)
    # a node of the pattern not reported at all counts as a 100% error
    r = truth_result(trace)
    for p in r.patterns:
        p.node_delays.pop("db", None)
    assert delay_scores(r, delays, true)["delay_error_pct"] > 20


def by_truth(trace):
    """An 'algorithm' that reads the truth: mean true delay per sending node in the slice given."""
    index = pd.Series(np.arange(len(trace.messages)), index=trace.messages["t_send"].to_numpy())

    def infer(messages):
        rows = index.loc[messages["t_send"].to_numpy()].to_numpy()
        d = pd.DataFrame({"node": trace.messages["src"].astype(str).to_numpy()[rows],
                          "delay": trace.truth.node_delay[rows]}).dropna()
        nd = d.groupby("node")["delay"].agg(["mean", "count"]).reset_index()
        nd.columns = ["node", "mean_s", "count"]
        return result([], nd)
    return infer


def test_node_delay_error_per_link(trace):
    from analysis.paths.score import node_delay_scores, true_link_delays
    true = true_link_delays(trace)
    nd = pd.DataFrame({"node": true.index, "mean_s": true["mean"].to_numpy() * 1.2, "count": true["count"]})
    s = node_delay_scores(result([], nd), trace)
    assert s["node_delay_error_pct"] == pytest.approx(20)
    assert s["node_delay_error_ms"] == pytest.approx(np.average(true["mean"] * 200, weights=true["count"]))
    # web's links: the call it serves -> its db call (wait 0) and db's return -> its return (5 ms)
    assert true.loc["web", "mean"] == pytest.approx((0.6 * 0.005 + 0.395 * 0.002 + 0.005 * 0.003)
                                                    / (2 * 0.6 + 0.395 + 2 * 0.005), rel=0.05)
    assert node_delay_scores(result([], nd[nd["node"] != "db"]), trace)["node_delay_error_pct"] > 20


def test_culprit_found_in_its_window(trace):
    ranking = culprit_ranking(trace, by_truth(trace))
    assert ranking["node"].tolist() == ["db"] and ranking["ranking"][0][0] == "db"
    assert ranking["rise_s"][0] == pytest.approx(0.2, rel=0.05)
    row = score(truth_result(trace), trace, by_truth(trace))
    assert row["culprit_top1"] == 1 and row["culprit_top3"] == 1 and row["fault_windows"] == 1


def test_culprit_scores_top1_and_top3():
    ranking = pd.DataFrame({"node": ["a", "b", "c"], "ranking": [["a", "x"], ["x", "y", "b"], ["x", "y", "z", "c"]]})
    assert culprit_scores(ranking) == {"culprit_top1": pytest.approx(1 / 3), "culprit_top3": pytest.approx(2 / 3),
                                       "fault_windows": 3, "n_top1": 1, "n_top3": 2}
    assert culprit_scores(pd.DataFrame())["fault_windows"] == 0


def test_no_truth_is_an_error(trace):
    bare = maketrace(TEMPLATES, duration=1, rate=10, seed=2)
    bare.truth = None
    with pytest.raises(ValueError, match="no true paths"):
        score(truth_result(trace), bare)
