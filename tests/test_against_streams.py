"""Thesis Table 4.3 as seed data (analysis/seeds/thesis-4.3.yaml): consistent, as printed in the seed text,
with its provenance; and our streams table against it (analysis/render/against_streams.py) on made-up counts."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis.render.against import load_seed_table
from analysis.render.against_streams import against_streams, row_experiments, streams_table
from analysis.score.table_layout import RATE_DEF

SEEDS_DIR = Path(os.environ.get("NESTLAB_SEEDS", "/work/shared/seeds"))
GRAPHS = ["COMPLEXTREE", "COMPLEXTREEMUX", "MERGETREE", "MERGETREEMUX", "MERGETREEBARRIER", "MERGETREEBARRIERMUX"]


def test_the_table_loads_with_its_provenance_and_variant():
    seed = load_seed_table("thesis-4.3")
    assert seed.kind == "streams" and seed.variant == "streamsdiagnoser"
    assert list(seed.cells.index) == [*GRAPHS, "Totals"]
    p = seed.provenance
    assert (p["table"], p["page"], p["year"], p["lines"]) == ("4.3", 106, 2012, [1479, 1489])
    assert "Statistical uncertainty is less than 0.6%" in p["caption"]
    assert row_experiments(seed) == {g: g.lower() for g in GRAPHS} | {"Totals": None}
    assert seed.notes and "two False Positives" in seed.notes[0]


def test_counts_add_up_and_rates_are_rounded_as_listed():
    seed = load_seed_table("thesis-4.3")
    c = seed.cells
    for row, v in c.iterrows():
        assert v["Total"] == v["AP"] + v["AN"] and v["AP"] == v["TP"] + v["FN"] and v["AN"] == v["TN"] + v["FP"], row
    for col in ("Total", "AP", "AN", "TP", "TN", "FP", "FN"):
        assert c.loc[GRAPHS, col].sum() == c.at["Totals", col], col
    rounded = set()
    for row, v in c.iterrows():
        for rate, (num, den) in RATE_DEF.items():
            exact = 100.0 * v[num] / sum(v[d] for d in den)
            assert abs(exact - v[rate]) <= seed.precision + 1e-9, (row, rate)
            if math.floor(exact * 10) / 10 != round(exact, 1):
                assert v[rate] == round(exact, 1), (row, rate)   # never the truncated value
                rounded.add((row, rate))
    assert rounded == {(d["row"], d["metric"]) for d in seed.raw["rounded"]}
    assert seed.raw["discrepancies"] == []


@pytest.mark.skipif(not SEEDS_DIR.is_dir(), reason="the seed texts are not here (NESTLAB_SEEDS)")
def test_values_are_as_printed_in_the_seed_text():
    seed = load_seed_table("thesis-4.3")
    first, last = seed.provenance["lines"]
    text = (SEEDS_DIR / seed.provenance["seed"]).read_text().splitlines()
    lines = text[first - 1:last]
    assert lines[-1].startswith("Table 4.3:") and seed.provenance["caption"].strip() == lines[-1].strip()
    printed = {ln.split("\t")[0]: [float(x) for x in ln.split("\t")[1:] if x]
               for ln in lines if re.match(r"^[A-Z][A-Za-z]+\t\d", ln)}
    assert list(printed) == list(seed.cells.index)
    for row, values in printed.items():
        assert values == list(seed.cells.loc[row]), row
    toc = text[209]   # seed line 210: the List of Tables entry the page comes from
    assert toc.split("\t") == ["4.3", "StreamsDiagnoser Diagnosis Accuracy", "106"]


def test_our_rows_per_graph_and_totals_from_counts():
    seed = load_seed_table("thesis-4.3")
    counts = pd.DataFrame([
        # run, variant, dir, module, kind, TP, TN, FP, FN
        ("r1", "streamsdiagnoser", "out", 1, "sconn", 3, 10, 1, 0),
        ("r1", "streamsdiagnoser", "out", 2, "sconn", 0, 12, 0, 1),
        ("r1", "streamsdiagnoser", "in", 1, "sconn", 5, 5, 5, 5),       # not a direction a connection has
        ("r2", "streamsdiagnoser", "out", 1, "sconn", 2, 20, 0, 0),
        ("r3", "streamsdiagnoser", "out", 1, "sconn", 9, 9, 9, 9),      # an experiment no row names
        ("r1", "other", "out", 1, "sconn", 9, 9, 9, 9),
    ], columns=["run", "variant", "dir", "module", "kind", "TP", "TN", "FP", "FN"])
    exps = {"r1": "mergetree", "r2": "mergetreebarrier", "r3": "elsewhere"}
    t = streams_table(counts, "streamsdiagnoser", seed, exps)
    assert t.loc["MERGETREE", ["runs", "TP", "TN", "FP", "FN", "AP", "AN", "Total"]].tolist() == [1, 3, 22, 1, 1, 4, 23, 27]
    assert t.loc["Totals", ["runs", "TP", "TN", "FP", "FN"]].tolist() == [2, 5, 42, 1, 1]
    assert t.loc["COMPLEXTREE", "runs"] == 0 and math.isnan(t.loc["COMPLEXTREE", "TPR"])
    assert t.loc["MERGETREE", "TPR"] == 0.75 and t.loc["MERGETREE", "TPR_interval"] == "Wilson"
    frame = against_streams({"streamsdiagnoser": t}, seed)
    cell = frame[(frame["row"] == "Totals") & (frame["metric"] == "TP")].iloc[0]
    assert (cell["ours"], cell["theirs"], cell["diff"]) == (5.0, 509.0, -504.0)
    tpr = frame[(frame["row"] == "MERGETREE") & (frame["metric"] == "TPR")].iloc[0]
    assert tpr["ours"] == 75.0 and tpr["beyond"] is True   # their 100.0 is outside [lo, hi] of 3 of 4
