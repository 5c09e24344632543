"""Scores (analysis.score) against hand-counted confusion matrices."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.pipeline import evaluate
from analysis.score.accuracy import accuracy_table, change_pct, compare_table, confusion, rates, wilson
from analysis.score.counting import join_labels, module_counts
from analysis.score.table_layout import COUNTS, RATES, ROWS, SECTIONS
from tests.support.runs import WGET, RunBuilder


def test_wilson_known_values():
    # Wilson score intervals at 95% (z = 1.96), checked against the closed form by hand
    p, lo, hi = wilson(5, 10)
    assert p == 0.5 and lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    p, lo, hi = wilson(0, 10)
    assert p == 0 and lo == 0 and hi == pytest.approx(0.2775, abs=1e-4)
    p, lo, hi = wilson(10, 10)
    assert p == 1 and hi == 1 and lo == pytest.approx(0.7225, abs=1e-4)
    assert wilson(0, 0) is None
    # narrower with more trials
    assert (lambda a, b: a[2] - a[1] > b[2] - b[1])(wilson(90, 100), wilson(900, 1000))


def test_rates_and_undefined():
    r = rates(tp=8, tn=85, fp=5, fn=2)
    assert r["TPR"][0] == pytest.approx(0.8) and r["FNR"][0] == pytest.approx(0.2)
    assert r["FPR"][0] == pytest.approx(5 / 90) and r["TNR"][0] == pytest.approx(85 / 90)
    assert r["PPV"][0] == pytest.approx(8 / 13) and r["NPV"][0] == pytest.approx(85 / 87)
    none = rates(tp=0, tn=7, fp=3, fn=0)  # no actual positives: TPR, FNR undefined; no TP/FN: PPV = 0
    assert none["TPR"] is None and none["FNR"] is None
    assert none["PPV"][0] == 0.0 and none["NPV"][0] == 1.0
    assert rates(0, 0, 0, 0) == dict.fromkeys(RATES)


def test_confusion_by_hand():
    actual = [1, 1, 1, 0, 0, 0, 0, 1]
    positive = [1, 0, 1, 1, 0, 0, 0, 1]
    assert confusion(actual, positive) == {"Total": 8, "AP": 4, "AN": 4, "TP": 3, "TN": 3, "FP": 1, "FN": 1}


def _counts(rows):
    """Per-module counts frame as evaluate() makes it: (variant, dir, module, kind, rows, TP, TN, FP, FN)."""
    return pd.DataFrame.from_records(rows, columns=["run", "variant", "dir", "module", "kind", "rows",
                                                    "TP", "TN", "FP", "FN"])


SOCK_IPERF = ("socket", "s:iperf", "all modules")
SOCK_WGET = ("socket", "s:wget", "all modules")


def test_accuracy_table_hand_counted():
    v = "flowdiagnoser:theta=2"
    c = _counts([
        ("r1", v, "in", 1, "app", ("iperf", "all modules"), 90, 0, 0, 10),
        ("r1", v, "out", 1, "app", ("iperf", "all modules"), 0, 95, 5, 0),
        ("r1", v, "in", 2, "socket", SOCK_IPERF, 40, 0, 0, 0),
        ("r1", v, "in", 3, "socket", SOCK_WGET, 0, 60, 0, 0),
        ("r2", v, "in", 3, "socket", SOCK_WGET, 0, 30, 2, 0),     # same module id, another run
        ("r1", v, "in", 4, "tcp", ("TCP", "all modules"), 3, 100, 7, 1),
        ("r1", v, "out", 4, "tcp", ("TCP", "all modules"), 0, 110, 1, 0),
        ("r1", v, "in", 5, "ipeth", ("ip+eth", "all modules"), 5, 50, 0, 0),
        ("r1", v, "in", 6, "app", ("all modules",), 0, 10, 0, 0),  # a program of no workload
        ("r1", "other", "in", 4, "tcp", ("TCP", "all modules"), 99, 99, 99, 99),  # another variant: ignored
    ])
    t = accuracy_table(c, v)
    assert list(t.index) == [(s, r) for s in SECTIONS for r in ROWS]
    row = t.loc[("Inbound", "iperf")]
    assert [row[k] for k in COUNTS] == [100, 100, 0, 90, 0, 0, 10]
    assert row["TPR"] == pytest.approx(0.9) and math.isnan(row["FPR"]) and math.isnan(row["TNR"])
    assert row["NPV"] == 0.0                              # every negative diagnosis was wrong
    row = t.loc[("Inbound", "s:wget")]                    # a row with no positives
    assert [row[k] for k in COUNTS] == [92, 0, 92, 0, 90, 2, 0]
    assert math.isnan(row["TPR"]) and math.isnan(row["FNR"]) and math.isnan(row["TPR_lo"])
    assert row["PPV"] == 0.0 and row["FPR"] == pytest.approx(2 / 92)
    sock = t.loc[("Inbound", "socket")]
    assert [sock[k] for k in COUNTS] == [132, 40, 92, 40, 90, 2, 0]   # s:iperf + s:wget
    allm = t.loc[("Inbound", "all modules")]
    assert [allm[k] for k in ("TP", "TN", "FP", "FN")] == [90 + 40 + 3 + 5, 60 + 30 + 100 + 50 + 10, 2 + 7, 11]
    tot = t.loc[("Total", "TCP")]
    assert [tot[k] for k in ("TP", "TN", "FP", "FN")] == [3, 210, 8, 1]
    empty = t.loc[("Outbound", "wget")]
    assert empty["Total"] == 0 and all(math.isnan(empty[r]) for r in RATES)
    for _, r in t.iterrows():                             # the consistency checks
        assert r["TP"] + r["FN"] == r["AP"] and r["TN"] + r["FP"] == r["AN"] and r["AP"] + r["AN"] == r["Total"]
        for k in RATES:
            if not math.isnan(r[k]):
                assert r[f"{k}_lo"] <= r[k] <= r[f"{k}_hi"]


def test_change_and_compare_table():
    assert change_pct(110, 100) == pytest.approx(10.0)
    assert change_pct(0, 0) == 0.0
    assert math.isnan(change_pct(5, 0))
    rows = ("TCP", "all modules")
    c = _counts([
        ("r", "A", "in", 1, "tcp", rows, 10, 100, 20, 5),
        ("r", "B", "in", 1, "tcp", rows, 12, 110, 10, 3),
        ("r", "C", "in", 1, "tcp", rows, 10, 96, 24, 5),
        ("r", "A", "out", 1, "tcp", rows, 0, 50, 0, 0),
        ("r", "B", "out", 1, "tcp", rows, 0, 46, 4, 0),
        ("r", "C", "out", 1, "tcp", rows, 0, 50, 0, 0),
    ])
    t = compare_table(c, ["A", "B", "C"])
    r = t.loc[("Inbound", "TCP")]
    assert r[("B", "TP")] == 12 and r[("B", "dTP%")] == pytest.approx(20.0) and r[("B", "dFP%")] == pytest.approx(-50.0)
    assert r[("C", "dTP%")] == 0.0 and r[("C", "dFP%")] == pytest.approx(20.0)
    assert r[("A", "dTP%")] == 0.0
    o = t.loc[("Outbound", "TCP")]
    assert math.isnan(o[("B", "dFP%")]) and o[("C", "dFP%")] == 0.0   # baseline 0: undefined / no change
    assert r[("B", "TPR")] == pytest.approx(12 / 15) and r[("B", "PPV")] == pytest.approx(12 / 22)


def test_join_and_module_counts_by_hand():
    # a diagnosis frame as diagnose_run makes it, and labels for the same rows
    diag = pd.DataFrame({
        "variant": pd.Categorical(["v"] * 6), "dir": pd.Categorical(["in", "in", "in", "out", "out", "out"]),
        "module": [1, 1, 1, 1, 1, 1], "seq": [1, 2, 3, 1, 2, 3],
        "positive": [True, False, True, True, False, False], "invalid": [False, False, False, False, True, False]})
    labels = pd.DataFrame({
        "module": [1] * 6, "dir": pd.Categorical(["out", "out", "out", "in", "in", "in"]), "seq": [3, 2, 1, 3, 2, 1],
        "actual": [False, True, True, True, False, True], "exclude": [False, False, False, True, False, False]})
    j = join_labels(diag, labels)
    assert j["actual"].tolist() == [True, False, True, True, True, False]
    assert j["exclude"].tolist() == [False, False, True, False, True, False]  # label-excluded or invalid
    mc = module_counts(j).set_index("dir")
    assert mc.loc["in", ["TP", "TN", "FP", "FN"]].tolist() == [1, 1, 0, 0]
    assert mc.loc["out", ["TP", "TN", "FP", "FN"]].tolist() == [1, 1, 0, 0]


def test_evaluate_on_a_hand_made_run(tmp_path):
    """A wget download with a connection fault: the table's counts are consistent, and the
    socket/app rows (observed directly) are right."""
    n = 60
    b = RunBuilder(tmp_path / "hand" / "r0", n, workloads=[WGET])
    ip = b.module("ipeth", "ipeth:h1-eth0")
    app = b.module("app", "app:100", {"pid": 100}, name="wget 100")
    sock = b.module("socket", "sock:100:3:7", {"pid": 100, "fd": 3, "inode": 7})
    tcp = b.module("tcp", "tcp:7", {"inode": 7, "pid": 100})
    b.edge(app, sock)
    b.edge(sock, tcp)
    b.edge(tcp, ip)
    b.process(100, 0, "wget http://x/f")
    tm = np.full(n, 20.0)
    tm[21:35] = 0
    for m in (app, sock):
        b.counters(m, "in", tm / 4, wait=60.0)
    b.counters(tcp, "in", tm)
    b.counters(ip, "in", tm + 30)  # other traffic keeps the interface busy
    b.counters(ip, "out", 10)
    b.fault("tcp_drop", tcp, start=2.05, end=3.0, target={"inode": 7})
    ev = evaluate([b.write()], ["flowdiagnoser:theta=2", "nest-cf"])
    assert ev.variants == ["flowdiagnoser:theta=2", "nest-cf"]
    t = ev.table()
    valid = n - 1  # the run's first snapshot has no delta
    assert t.loc[("Inbound", "TCP"), "AP"] == 14 and t.loc[("Inbound", "TCP"), "Total"] == valid
    assert t.loc[("Outbound", "wget"), "AP"] == valid and t.loc[("Outbound", "wget"), "AN"] == 0
    # four modules, two directions; the interface's baseline snapshot is the run's first anyway
    assert t.loc[("Total", "all modules"), "Total"] == 2 * 4 * valid
    for _, r in t.iterrows():
        assert r["TP"] + r["FN"] == r["AP"] and r["TN"] + r["FP"] == r["AN"] and r["AP"] + r["AN"] == r["Total"]
    # the connection fault is found, and nothing else is blamed for it
    assert t.loc[("Inbound", "TCP"), "TPR"] > 0.9 and t.loc[("Inbound", "TCP"), "FP"] == 0
    assert t.loc[("Inbound", "ip+eth"), "FP"] == 0
    for row in ("wget", "socket", "s:wget"):
        assert t.loc[("Total", row), "TPR"] >= 0.95
    assert set(ev.counts["variant"]) == set(ev.variants)
