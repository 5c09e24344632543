"""Rates per run and the 95% interval across runs (a bootstrap over runs of the pooled rate)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.pipeline import evaluate
from analysis.render.writers import write_accuracy
from analysis.score.accuracy import (
    ACROSS_RESAMPLES,
    ACROSS_SEED,
    accuracy_table,
    across_runs,
    bootstrap_pooled,
    per_run_table,
)
from analysis.score.table_layout import RATES, ROWS, SECTIONS
from nestlab.cli import nestlab_main
from tests.support.runs import make_run

V = "v"
ROWSETS = {1: ["iperf", "all modules"], 2: ["socket", "s:iperf", "all modules"], 3: ["TCP", "all modules"],
           4: ["ip+eth", "all modules"]}


def counts_frame(runs: dict[str, dict[tuple[str, int], tuple[int, int, int, int]]]) -> pd.DataFrame:
    """evaluate's counts frame from {run: {(dir, module): (TP, TN, FP, FN)}} (modules as ROWSETS)."""
    recs = [{"run": run, "variant": V, "dir": d, "module": m, "kind": "x", "rows": ROWSETS[m],
             "TP": tp, "TN": tn, "FP": fp, "FN": fn}
            for run, mods in runs.items() for (d, m), (tp, tn, fp, fn) in mods.items()]
    return pd.DataFrame.from_records(recs)


def random_runs(n_runs: int, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    runs = {}
    for r in range(n_runs):
        tpr, fpr = rng.uniform(0.5, 0.99), rng.uniform(0.0, 0.2)   # each run its own rates
        mods = {}
        for d in ("in", "out"):
            for m in ROWSETS:
                ap, an = int(rng.integers(5, 120)), int(rng.integers(20, 300))
                tp, fp = int(rng.binomial(ap, tpr)), int(rng.binomial(an, fpr))
                mods[(d, m)] = (tp, an - fp, fp, ap - tp)
        runs[f"r{r}"] = mods
    return counts_frame(runs)


def pooled_stat(k, n, axis=-1):
    return np.sum(k, axis=axis) / np.sum(n, axis=axis)


def test_interval_contains_the_pooled_rate():
    c = random_runs(12)
    t, x = accuracy_table(c, V), across_runs(c, V)
    assert list(x.index) == list(t.index)
    checked = wide = 0
    for r in RATES:
        ok = ~t[r].isna()
        assert (x.loc[ok, f"{r}_runs"] == 12).all()
        lo, hi, p = x.loc[ok, f"{r}_xlo"], x.loc[ok, f"{r}_xhi"], t.loc[ok, r]
        assert not lo.isna().any() and not hi.isna().any()
        assert ((lo <= p + 1e-12) & (p <= hi + 1e-12)).all(), r
        assert ((0 <= lo) & (hi <= 1)).all()
        checked += int(ok.sum())
        wide += int((hi - lo > 0.01).sum())
    assert checked > 50 and wide == checked   # runs differ: no interval collapses


def test_identical_runs_give_a_zero_width_interval_without_warnings():
    one = {("in", 1): (30, 50, 5, 10), ("out", 1): (0, 40, 0, 0), ("in", 3): (7, 100, 20, 3),
           ("out", 4): (12, 60, 0, 0)}
    c = counts_frame({f"r{k}": one for k in range(4)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # the degenerate BCa falls back quietly
        x = across_runs(c, V)
    t = accuracy_table(c, V)
    for r in RATES:
        ok = ~t[r].isna()
        assert ok.any()
        assert (x.loc[ok, f"{r}_runs"] == 4).all()
        assert (x.loc[ok, f"{r}_xlo"] == t.loc[ok, r]).all(), r
        assert (x.loc[ok, f"{r}_xhi"] == t.loc[ok, r]).all(), r
        assert x.loc[~ok, f"{r}_xlo"].isna().all() and (x.loc[~ok, f"{r}_runs"] == 0).all()


def test_one_run_has_no_interval():
    c = random_runs(1)
    x, t = across_runs(c, V), accuracy_table(c, V)
    for r in RATES:
        assert x[f"{r}_xlo"].isna().all() and x[f"{r}_xhi"].isna().all()
        assert (x[f"{r}_runs"] == (~t[r].isna()).astype(int)).all()


def test_a_rate_defined_in_one_run_of_several_has_no_interval():
    c = counts_frame({"r0": {("in", 1): (5, 5, 1, 1)}, "r1": {("in", 3): (4, 4, 0, 2)},
                      "r2": {("in", 3): (1, 4, 3, 2)}})
    x = across_runs(c, V)
    assert x.loc[("Inbound", "iperf"), "TPR_runs"] == 1 and np.isnan(x.loc[("Inbound", "iperf"), "TPR_xlo"])
    assert x.loc[("Inbound", "TCP"), "TPR_runs"] == 2 and not np.isnan(x.loc[("Inbound", "TCP"), "TPR_xlo"])
    assert x.loc[("Inbound", "all modules"), "TPR_runs"] == 3   # a run's own undefined rates do not count


def test_very_different_runs_give_a_wide_interval():
    c = counts_frame({f"r{k}": {("in", 1): (tp, 100, 0, 100 - tp)} for k, tp in enumerate((5, 50, 95, 20, 80))})
    x, t = across_runs(c, V).loc[("Inbound", "iperf")], accuracy_table(c, V).loc[("Inbound", "iperf")]
    assert t["TPR"] == pytest.approx(0.5)
    assert x["TPR_xhi"] - x["TPR_xlo"] > 0.3
    assert x["TPR_xhi"] - x["TPR_xlo"] > 3 * (t["TPR_hi"] - t["TPR_lo"])   # far wider than per snapshot


def test_a_hand_made_example_agrees_with_scipy():
    # 3 runs, inbound iperf: TPR 3/10, 8/10, 15/20 -> pooled 26/40
    tp, ap = np.array([3, 8, 15]), np.array([10, 10, 20])
    c = counts_frame({f"r{k}": {("in", 1): (int(tp[k]), 50, 0, int(ap[k] - tp[k]))} for k in range(3)})
    want = stats.bootstrap((tp.astype(float), ap.astype(float)), pooled_stat, paired=True, vectorized=True,
                           method="BCa", n_resamples=ACROSS_RESAMPLES, confidence_level=0.95,
                           rng=np.random.default_rng(ACROSS_SEED)).confidence_interval
    x = across_runs(c, V).loc[("Inbound", "iperf")]
    assert accuracy_table(c, V).loc[("Inbound", "iperf"), "TPR"] == pytest.approx(26 / 40)
    assert x["TPR_runs"] == 3
    assert x["TPR_xlo"] == pytest.approx(want.low) and x["TPR_xhi"] == pytest.approx(want.high)
    assert want.low < 26 / 40 < want.high
    lo, hi = bootstrap_pooled(tp[None], ap[None])
    assert lo[0] == pytest.approx(want.low) and hi[0] == pytest.approx(want.high)
    # the same resamples, percentile: a different interval, so BCa was what was used
    pct = stats.bootstrap((tp.astype(float), ap.astype(float)), pooled_stat, paired=True, vectorized=True,
                          method="percentile", n_resamples=ACROSS_RESAMPLES,
                          rng=np.random.default_rng(ACROSS_SEED)).confidence_interval
    assert (pct.low, pct.high) != pytest.approx((want.low, want.high))


def test_the_interval_is_reproducible_and_does_not_depend_on_the_other_cells():
    c = random_runs(6, seed=4)
    a, b = across_runs(c, V), across_runs(c, V)
    pd.testing.assert_frame_equal(a, b)
    # the Inbound iperf TPR alone, straight from its runs' counts
    pr = per_run_table(c, V)
    cell = pr[(pr["section"] == "Inbound") & (pr["row"] == "iperf")]
    lo, hi = bootstrap_pooled(cell["TP"].to_numpy()[None], cell["AP"].to_numpy()[None])
    assert a.loc[("Inbound", "iperf"), "TPR_xlo"] == pytest.approx(lo[0])
    assert a.loc[("Inbound", "iperf"), "TPR_xhi"] == pytest.approx(hi[0])


def test_per_run_rates_are_the_ratios_of_the_counts():
    c = random_runs(5, seed=2)
    pr = per_run_table(c, V)
    assert list(pr.columns[:3]) == ["run", "section", "row"]
    assert len(pr) == 5 * len(SECTIONS) * len(ROWS)
    assert list(pr["run"].unique()) == [f"r{k}" for k in range(5)]
    for run, g in pr.groupby("run"):
        t = accuracy_table(c[c["run"] == run], V)
        g = g.set_index(["section", "row"]).loc[t.index]
        for col in ("Total", "AP", "AN", "TP", "TN", "FP", "FN"):
            assert (g[col].to_numpy() == t[col].to_numpy()).all(), (run, col)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = {"TPR": pr["TP"] / pr["AP"], "FPR": pr["FP"] / pr["AN"], "PPV": pr["TP"] / (pr["TP"] + pr["FP"]),
                "TNR": pr["TN"] / pr["AN"], "FNR": pr["FN"] / pr["AP"], "NPV": pr["TN"] / (pr["TN"] + pr["FN"])}
    for r, w in want.items():
        w = w.where(np.isfinite(w))
        pd.testing.assert_series_equal(pr[r], w.astype(float), check_names=False)
    # the pooled counts are the per-run counts summed
    assert (pr.groupby(["section", "row"], sort=False)["TP"].sum().to_numpy() == accuracy_table(c, V)["TP"]).all()


def test_per_run_lists_a_run_without_counts():
    c = random_runs(2)
    pr = per_run_table(c, V, runs=["r0", "gone", "r1"])
    assert list(pr["run"].unique()) == ["r0", "gone", "r1"]
    gone = pr[pr["run"] == "gone"]
    assert (gone["Total"] == 0).all() and gone["TPR"].isna().all()


# ----------------------------------------------------------------------------- stored runs, files


def test_accuracy_files_with_several_runs(tmp_path, capsys):
    root = tmp_path / "results"
    for k, n in enumerate((40, 50, 60)):
        make_run(root / "hand" / f"20260101-00{k}000-r{k}", n=n)
    out = tmp_path / "o"
    assert nestlab_main(["accuracy", "hand", "--results", str(root), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "per_run.csv" in printed and "### Across runs: flowdiagnoser:theta=2" in printed
    md = (out / "accuracy.md").read_text()
    assert "bootstrap over runs (BCa), 95%" in md and "Wilson" in md and "nan" not in md.lower()
    csv = pd.read_csv(out / "accuracy.csv")
    for r in RATES:
        assert {f"{r}_xlo", f"{r}_xhi", f"{r}_runs"} <= set(csv.columns)
    row = csv[(csv["section"] == "Total") & (csv["row"] == "TCP")].iloc[0]
    assert row["FPR_runs"] == 3 and row["FPR_xlo"] <= row["FPR"] <= row["FPR_xhi"]
    assert row["FPR_xhi"] > row["FPR_xlo"] and row["FPR_xhi"] > 1   # in %, and the runs differ
    ev = evaluate(sorted((root / "hand").iterdir()))
    x = ev.across()
    assert row["FPR_xlo"] == pytest.approx(100 * x.loc[("Total", "TCP"), "FPR_xlo"], abs=1e-4)
    pr = pd.read_csv(out / "per_run.csv")
    assert len(pr) == 3 * len(SECTIONS) * len(ROWS) and pr["run"].nunique() == 3
    tcp = pr[(pr["section"] == "Total") & (pr["row"] == "TCP")]
    assert (tcp["FPR"] == (100 * tcp["FP"] / tcp["AN"]).round(4)).all()   # in %
    assert tcp["FPR"].max() > 1


def test_accuracy_files_with_one_run(tmp_path):
    path, *_ = make_run(tmp_path / "results" / "hand" / "20260101-000000-r0")
    ev = evaluate([path])
    md, files = write_accuracy(ev, tmp_path / "o")
    assert tmp_path / "o" / "per_run.csv" in files and (tmp_path / "o" / "per_run.csv").is_file()
    assert "Across runs" not in md and "Across runs" not in (tmp_path / "o" / "accuracy.md").read_text()
    csv = pd.read_csv(tmp_path / "o" / "accuracy.csv")
    assert csv["TPR_xlo"].isna().all() and csv["TPR_xhi"].isna().all()
    assert set(csv["TPR_runs"]) <= {0, 1}
    pr = pd.read_csv(tmp_path / "o" / "per_run.csv")
    assert len(pr) == len(SECTIONS) * len(ROWS) and set(pr["run"]) == {str(path)}
