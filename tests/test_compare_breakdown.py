"""`nestlab compare` of two or more runs (issue 35): each variant's 95% interval across runs beside the
pooled TPR and PPV, and the runs grouped by the kinds of fault they hold (beyond's partial-loss runs
apart from the rest); analysis.score.breakdown, analysis.render.writers.write_compare."""

from __future__ import annotations

import pandas as pd

from analysis.pipeline import evaluate
from analysis.render.writers import write_compare
from analysis.score.breakdown import breakdown, fault_kinds_of
from tests.support.probes import scoped_run
from tests.support.runs import make_run
from tests.test_report_fault_kinds import kinds_run

VARIANTS = ["flowdiagnoser:theta=2", "flowdiagnoser:probe=on"]


def test_compare_prints_intervals_across_runs_and_groups_by_fault_kind(tmp_path):
    runs = [make_run(tmp_path / "a" / f"r{k}")[0] for k in range(2)]
    runs.append(scoped_run(tmp_path / "b" / "r0")[0])
    runs.append(kinds_run(tmp_path / "c" / "r0", "loss")[0])
    assert [fault_kinds_of(r) for r in runs] == ["ip_drop+tcp_drop", "ip_drop+tcp_drop", "ip_drop", "loss"]
    ev = evaluate(runs, VARIANTS)
    md, files = write_compare(ev, tmp_path / "out")
    assert [f.name for f in files] == ["compare.md", "compare.csv", "compare-breakdown.csv"]
    b = pd.read_csv(files[2])
    assert set(b["group"]) == {"all runs", "ip_drop+tcp_drop", "ip_drop", "loss"}
    # the groups split the pooled counts: their sums are the figures of all runs
    for (v, row), g in b[b["group"] != "all runs"].groupby(["variant", "row"]):
        total = b[(b["group"] == "all runs") & (b["variant"] == v) & (b["row"] == row)].iloc[0]
        assert tuple(g[["TP", "FP", "FN"]].sum()) == (total["TP"], total["FP"], total["FN"])
    pooled = b[(b["group"] == "all runs") & (b["row"] == "all modules")]
    assert (pooled["runs"] == 4).all() and pooled["TPR_xlo"].notna().all()
    assert (pooled["TPR_xlo"] <= pooled["TPR"] + 1e-12).all() and (pooled["TPR"] <= pooled["TPR_xhi"] + 1e-12).all()
    assert b[b["group"] == "loss"]["TPR_xlo"].isna().all()        # one run: no interval
    assert "### Across runs and by the runs' fault kinds" in md and "| loss (1) " in md
    # with the fault kinds given, the same
    kinds = {str(r): fault_kinds_of(r) for r in runs}
    pd.testing.assert_frame_equal(breakdown(ev.counts, ev.variants, runs, kinds), b.drop(columns="policy"),
                                  check_dtype=False)


def test_one_run_has_no_breakdown(tmp_path):
    run = make_run(tmp_path / "a" / "r0")[0]
    md, files = write_compare(evaluate([run], VARIANTS), tmp_path / "out")
    assert [f.name for f in files] == ["compare.md", "compare.csv"] and "Across runs" not in md
