"""The seeds' tables as data files (analysis/seeds/) and our tables against them (analysis/render/against.py,
`--against`, `--ablations`): the files are self-consistent or say why not, the comparison's diffs and
intervals are right, and the command line writes its files and refuses bad names in one line."""

from __future__ import annotations

import math
import os
import re
import tomllib
from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis.pipeline import evaluate
from analysis.render.against import (
    ablation_variants,
    ablation_vs_seed,
    accuracy_vs_seed,
    against_accuracy,
    load_seed_table,
    seed_tables,
    write_against,
)
from analysis.score import accuracy as score
from analysis.score.accuracy import accuracy_table, compare_table
from analysis.score.table_layout import RATE_DEF, RATES, ROWS, SECTIONS
from analysis.seeds import text as seed_text
from nestlab.cli import nestlab_main
from rundir.errors import UserError
from tests.support.env import REPO
from tests.support.runs import make_run

NAMES = ["paper-table-6", "paper-table-8", "thesis-3.3"]
ABLATIONS = {"ANW": "nest-cf:anw=off", "IGN": "nest-cf:ign=off", "AnW,IGN": "nest-cf:anw=off,ign=off",
             "Qz,Qnz": "nest-cf:queues=off", "Err": "nest-cf:errors=off"}
SEEDS_DIR = Path(os.environ.get("NESTLAB_SEEDS", "/work/shared/seeds"))


def _nan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _sign(v: float) -> int:
    return 0 if abs(v) < 0.05 else (1 if v > 0 else -1)


# ----------------------------------------------------------------------------- consistency checks


def problems(seed) -> set[tuple[str, str, str]]:
    """(section, row, metric) of every cell that breaks a rule the table should obey (see each file's
    `discrepancies` comment). The tests below demand that these are exactly the listed ones."""
    c = seed.cells
    bad = set()

    def get(s, r, m):
        return float(c.at[(s, r), m])

    if seed.kind == "ablation":
        blank = seed.blank_value
        for r in {row for _, row in c.index}:
            for col in c.columns:
                i, o, t = (blank if _nan(v) else v for v in (get(s, r, col) for s in SECTIONS))
                if not min(i, o) - seed.precision <= t <= max(i, o) + seed.precision:
                    bad.add(("Total", r, "/".join(col)))
        return bad
    have = set(c.columns)
    for s, r in c.index:
        v = {m: get(s, r, m) for m in c.columns}
        if {"Total", "AP", "AN", "TP", "TN", "FP", "FN"} <= have:
            for total, parts in (("Total", ("AP", "AN")), ("AP", ("TP", "FN")), ("AN", ("TN", "FP"))):
                if v[total] != sum(v[p] for p in parts):
                    bad.add((s, r, total))
            for rate, (num, den) in RATE_DEF.items():   # recomputed from the printed counts
                n = sum(v[d] for d in den)
                exact = math.nan if n == 0 else 100.0 * v[num] / n
                if _nan(exact) != _nan(v[rate]) or (not _nan(exact) and abs(exact - v[rate]) > seed.precision):
                    bad.add((s, r, rate))
        else:                                           # rates only: complements and blanks
            for a, b in (("TPR", "FNR"), ("FPR", "TNR")):
                if _nan(v[a]) != _nan(v[b]) or (not _nan(v[a]) and abs(v[a] + v[b] - 100) > 2 * seed.precision):
                    bad.add((s, r, a))
    for r in {row for _, row in c.index}:               # a pooled figure lies between its parts
        for m in c.columns:
            i, o, t = (get(s, r, m) for s in SECTIONS)
            if m in ("Total", "AP", "AN", "TP", "TN", "FP", "FN"):
                if t != i + o:
                    bad.add(("Total", r, m))
            elif not _nan(t) and not min(x for x in (i, o, t) if not _nan(x)) - seed.precision <= t \
                    <= max(x for x in (i, o, t) if not _nan(x)) + seed.precision:
                bad.add(("Total", r, m))
    return bad


def listed(seed) -> set[tuple[str, str, str]]:
    return {(d["section"], d["row"], d["metric"]) for d in seed.raw.get("discrepancies") or []}


@pytest.mark.parametrize("name", NAMES)
def test_each_table_is_consistent_or_says_why(name):
    seed = load_seed_table(name)
    found = problems(seed)
    assert found <= listed(seed), f"{name}: unexplained inconsistencies {sorted(found - listed(seed))}"
    assert listed(seed) <= found, f"{name}: listed but not inconsistent {sorted(listed(seed) - found)}"
    for d in seed.raw.get("discrepancies") or []:   # each one is explained in prose
        assert d.get("note") or any(d["metric"] in n and d["row"] in n for n in seed.notes), d


def test_the_checks_find_a_wrong_count_a_wrong_rate_and_a_bad_total():
    """The consistency checks themselves: a broken copy of each table is caught."""
    thesis = load_seed_table("thesis-3.3")
    thesis.cells.at[("Inbound", "TCP"), "TP"] += 100          # AP = TP + FN breaks, TPR disagrees
    thesis.cells.at[("Outbound", "iperf"), "FPR"] = 3.0       # a rate the counts do not give
    found = problems(thesis)
    assert {("Inbound", "TCP", "AP"), ("Inbound", "TCP", "TPR"), ("Total", "TCP", "TP"),
            ("Outbound", "iperf", "FPR")} <= found
    paper = load_seed_table("paper-table-6")
    paper.cells.at[("Inbound", "TCP"), "FNR"] = 12.0
    assert ("Inbound", "TCP", "TPR") in problems(paper)
    ablation = load_seed_table("paper-table-8")
    ablation.cells.at[("Total", "TCP"), ("ANW", "dTP%")] = 50.0
    assert ("Total", "TCP", "ANW/dTP%") in problems(ablation)


def test_printed_rates_are_truncated_except_the_listed_rounded_ones():
    """Thesis Table 3.3 truncates its rates; the cells it rounds are listed in `rounded`."""
    seed = load_seed_table("thesis-3.3")
    rounded = set()
    for (s, r), v in seed.cells.iterrows():
        for rate, (num, den) in RATE_DEF.items():
            n = sum(v[d] for d in den)
            if n == 0:
                continue
            exact = 100.0 * v[num] / n
            truncated, near = math.floor(exact * 10 + 1e-9) / 10, round(exact, 1)
            assert v[rate] in (truncated, near), (s, r, rate, v[rate], exact)
            if v[rate] != truncated:
                rounded.add((s, r, rate))
    assert rounded == {(d["section"], d["row"], d["metric"]) for d in seed.raw["rounded"]}


# ----------------------------------------------------------------------------- the files


def test_the_tables_load_with_provenance_and_their_variants():
    assert seed_tables() == sorted([*NAMES, "thesis-4.3"])   # thesis-4.3, a streams table: test_against_streams.py
    for name in NAMES:
        seed = load_seed_table(name)
        p = seed.provenance
        for key in ("document", "author", "year", "table", "seed", "lines", "caption"):
            assert key in p, (name, key)
        assert p.get("page") or p.get("section"), name
        assert p["year"] or p.get("year_note"), name
        assert seed.notes and all(isinstance(n, str) and n for n in seed.notes), name
        assert set(seed.cells.index) == {(s, r) for s in SECTIONS for r in
                                         (ROWS if seed.kind == "accuracy" else ("TCP", "ip+eth", "all modules"))}
    assert load_seed_table("thesis-3.3").variant == "flowdiagnoser:theta=2"
    assert load_seed_table("thesis-3.3").provenance["page"] == 59
    assert load_seed_table("paper-table-6").variant == "nest-cf"
    t8 = load_seed_table("paper-table-8")
    assert dict(t8.ablations) == ABLATIONS
    assert ablation_variants(t8) == ["nest-cf", *ABLATIONS.values()]
    assert "Unlabelled total row" in " ".join(load_seed_table("thesis-3.3").notes)
    assert "Statistical uncertainty is less than 0.3%" in " ".join(load_seed_table("thesis-3.3").notes)


def test_the_data_files_are_package_data():
    conf = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "seeds/*.yaml" in conf["tool"]["setuptools"]["package-data"]["analysis"]
    assert (REPO / "analysis" / "seeds" / "__init__.py").is_file()


@pytest.mark.skipif(not SEEDS_DIR.is_dir(), reason="the seed texts are not here (NESTLAB_SEEDS)")
@pytest.mark.parametrize("name", NAMES)
def test_values_are_as_printed_in_the_seed_text(name):
    """Every value, blank included, against the text at the provenance's file and lines."""
    seed = load_seed_table(name)
    first, last = seed.provenance["lines"]
    lines = (SEEDS_DIR / seed.provenance["seed"]).read_text().splitlines()[first - 1:last]
    assert lines[-1].startswith(("Table", "**Table")) and f"Table {seed.provenance['table']}" in lines[-1]
    n = len(seed.cells.columns)
    number = re.compile(r"^-?\d+(\.\d+)?$")
    printed = []
    for line in lines:
        cells = line.split("\t")[-n:]
        if len(line.split("\t")) > n and all(c == "" or number.match(c) for c in cells) and any(cells):
            printed.append([math.nan if c == "" else float(c) for c in cells])
    ours = [list(row) for row in seed.cells.to_numpy()]
    assert len(printed) == len(ours) == len(seed.cells)
    for got, want, key in zip(ours, printed, seed.cells.index, strict=True):
        assert all((_nan(a) and _nan(b)) or a == b for a, b in zip(got, want, strict=True)), (key, got, want)


def test_unknown_names_and_bad_files_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="unknown seed table 'thesis-9'.*thesis-3.3"):
        load_seed_table("thesis-9")
    data = yaml.safe_load(seed_text("paper-table-6"))
    data["sections"]["Inbound"]["TCP"] = [1.0, 2.0]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match="Inbound/TCP: 2 values for 6 columns"):
        load_seed_table(str(bad))


# ----------------------------------------------------------------------------- comparing


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs") / "exp"
    return [make_run(root / "r0", n=50)[0], make_run(root / "r1", n=70)[0]]


@pytest.fixture(scope="module")
def counts(runs):
    return evaluate(runs, ["flowdiagnoser:theta=2", *ablation_variants(load_seed_table("paper-table-8"))]).counts


def mirror(tmp_path, ours: pd.DataFrame, changes: dict) -> Path:
    """A seed table file printing our own table (rates rounded), but for `changes`."""
    cols = ["Total", "AP", "AN", "TP", "TN", "FP", "FN", *RATES]
    sections = {s: {r: [int(ours.at[(s, r), c]) if c not in RATES else
                        (None if _nan(ours.at[(s, r), c]) else round(100 * float(ours.at[(s, r), c]), 1))
                        for c in cols] for r in ROWS} for s in SECTIONS}
    for (s, r, c), v in changes.items():
        sections[s][r][cols.index(c)] = v
    data = {"name": "mirror", "kind": "accuracy", "title": "our own table", "variant": "flowdiagnoser",
            "provenance": {"document": "test", "author": "test", "year": 2026, "table": "0", "section": "none",
                           "seed": "none", "lines": [1, 1], "caption": "test"},
            "columns": cols, "precision": 0.05, "sections": sections, "notes": ["made by the test"]}
    path = tmp_path / "mirror.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_accuracy_diffs_and_beyond(tmp_path, counts):
    ours = accuracy_table(counts, "flowdiagnoser:theta=2")
    key = ("Total", "all modules")
    tpr = round(100 * float(ours.at[key, "TPR"]), 1)
    assert 0 < ours.at[key, "TP"] and not _nan(tpr)
    seed = load_seed_table(str(mirror(tmp_path, ours, {("Total", "all modules", "TP"): int(ours.at[key, "TP"]) + 7,
                                                       ("Total", "all modules", "TPR"): tpr - 30.0})))
    assert seed.variant == "flowdiagnoser:theta=2"
    # an across-run interval for one rate cell only; the rest fall back to Wilson
    spread = pd.DataFrame({"TPR_runs": [2], "TPR_xlo": [0.8], "TPR_xhi": [1.0]},
                          index=pd.MultiIndex.from_tuples([key], names=["section", "row"]))
    frame = against_accuracy(ours, seed, spread).set_index(["section", "row", "metric"])
    assert len(frame) == len(SECTIONS) * len(ROWS) * 13
    assert frame.at[(*key, "TP"), "diff"] == -7 and frame.at[(*key, "TP"), "interval"] == ""
    cell = frame.loc[(*key, "TPR")]
    assert cell["diff"] == pytest.approx(100 * ours.at[key, "TPR"] - (tpr - 30.0))
    assert cell["interval"] == "across runs" and (cell["lo"], cell["hi"]) == (80.0, 100.0)
    assert tpr - 30.0 < 80.0 and cell["beyond"] == True  # noqa: E712 - theirs is below our interval
    fpr = frame.loc[(*key, "FPR")]
    assert fpr["interval"] == "Wilson" and fpr["lo"] == pytest.approx(100 * ours.at[key, "FPR_lo"])
    # everything else mirrors ours: diffs within the rounding, nothing beyond but the changed cell
    rates = frame[frame["unit"] == "%"].drop(index=[(*key, "TPR")])
    assert (rates["diff"].dropna().abs() <= 0.05 + 1e-9).all()
    assert not rates["beyond"].eq(True).any()
    undefined = frame[frame["ours"].isna()]
    assert len(undefined) and undefined["theirs"].isna().all() and undefined["beyond"].isna().all()


def test_across_run_intervals_when_there_and_wilson_otherwise(monkeypatch, counts):
    seed = load_seed_table("thesis-3.3")
    monkeypatch.delattr(score, "across_runs", raising=False)
    frame = accuracy_vs_seed(counts, "flowdiagnoser:theta=2", seed)
    assert set(frame.loc[frame["unit"] == "%", "interval"]) <= {"Wilson", ""}

    def fake(counts, variant):
        index = pd.MultiIndex.from_product([SECTIONS, ROWS], names=["section", "row"])
        out = pd.DataFrame(index=index)
        for r in RATES:
            out[f"{r}_runs"], out[f"{r}_xlo"], out[f"{r}_xhi"] = 2, math.nan, math.nan
        out.loc[("Inbound", "TCP"), ["FPR_xlo", "FPR_xhi"]] = [0.25, 0.5]
        return out

    monkeypatch.setattr(score, "across_runs", fake, raising=False)
    frame = accuracy_vs_seed(counts, "flowdiagnoser:theta=2", seed).set_index(["section", "row", "metric"])
    cell = frame.loc[("Inbound", "TCP", "FPR")]
    assert cell["interval"] == "across runs" and (cell["lo"], cell["hi"]) == (25.0, 50.0)
    assert cell["beyond"] == True  # noqa: E712 - theirs 2.8, far below 25
    assert frame.loc[("Inbound", "TCP", "TPR"), "interval"] == "Wilson"


def test_ablation_diffs_blanks_and_missing_columns(counts):
    seed = load_seed_table("paper-table-8")
    frame = ablation_vs_seed(counts, ablation_variants(seed), seed)
    assert len(frame) == 9 * 5 * 2
    ours = compare_table(counts, ablation_variants(seed))
    for r in frame.itertuples(index=False):
        printed = seed.cells.at[(r.section, r.row), (r.feature, r.metric)]
        want = 0.0 if _nan(printed) else printed
        assert r.theirs == want and r.theirs_as == ("blank = ·" if _nan(printed) else "printed")
        assert r.ours == pytest.approx(ours.at[(r.section, r.row), (r.variant, r.metric)], nan_ok=True)
        assert _nan(r.ours) or r.diff == pytest.approx(r.ours - want)
        if not _nan(r.ours):
            assert (r.sign == "same") == (_sign(r.ours) == _sign(want)), r
    # a comparison with only some of the variants compares only their columns
    part = ablation_vs_seed(counts, ["nest-cf", "nest-cf:ign=off"], seed)
    assert set(part["feature"]) == {"IGN"} and len(part) == 18


def test_write_against_names_the_interval_and_lists_cells_beyond(tmp_path, counts):
    seed = load_seed_table("thesis-3.3")
    frame = accuracy_vs_seed(counts, "flowdiagnoser:theta=2", seed)
    md, files = write_against(frame, seed, tmp_path / "out", "test")
    assert [f.name for f in files] == ["against-thesis-3.3.md", "against-thesis-3.3.csv", "against-thesis-3.3.tex"]
    assert "Interval shown:" in md and "p. 59" in md
    beyond = frame[frame["beyond"] == True]  # noqa: E712
    tail = md.split("Cells beyond our interval")[1].splitlines()
    assert tail[0].startswith(f" ({len(beyond)} of ")
    listed = beyond[beyond["metric"].isin(("TPR", "FPR", "PPV", "NPV"))]   # TNR/FNR mirror FPR/TPR
    assert len([line for line in tail if line.startswith("- ")]) == max(len(listed), 1)
    back = pd.read_csv(files[1])
    assert len(back) == len(frame) and list(back.columns)[:6] == ["section", "row", "metric", "unit", "ours", "theirs"]
    assert files[2].read_text().count(r"\\") >= len(frame)


# ----------------------------------------------------------------------------- command line


def test_cli_accuracy_against_writes_three_files(tmp_path, runs, capsys):
    out = tmp_path / "out"
    assert nestlab_main(["accuracy", str(runs[0]), "--against", "thesis-3.3", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert {"against-thesis-3.3.md", "against-thesis-3.3.csv", "against-thesis-3.3.tex"} <= {p.name for p in out.iterdir()}
    assert printed.out.index("### Accuracy of flowdiagnoser:theta=2") < printed.out.index("against thesis-3.3")
    assert "warning" not in printed.err
    # a different variant than the table's: one warning line, still compared
    assert nestlab_main(["accuracy", str(runs[0]), "--variant", "nest-cf", "--against", "thesis-3.3",
                         "--out", str(out)]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning")]
    assert err == ["warning: thesis-3.3 corresponds to flowdiagnoser:theta=2; comparing nest-cf with it"]


def test_cli_compare_ablations_against_table_8(tmp_path, runs, capsys):
    out = tmp_path / "out"
    assert nestlab_main(["compare", str(runs[0]), "--ablations", "--against", "paper-table-8", "--out", str(out)]) == 0
    assert "Ablations against paper-table-8" in capsys.readouterr().out
    variants = list(dict.fromkeys(pd.read_csv(out / "compare.csv")["variant"]))
    assert variants == ["nest-cf", *ABLATIONS.values()]
    assert len(pd.read_csv(out / "against-paper-table-8.csv")) == 90
    # --variant wins over --ablations
    assert nestlab_main(["compare", str(runs[0]), "--ablations", "--variant", "nest-cf",
                         "--variant", "nest-cf:threshold=0.2", "--out", str(out)]) == 0
    assert list(dict.fromkeys(pd.read_csv(out / "compare.csv")["variant"])) == ["nest-cf", "nest-cf:threshold=0.2"]


@pytest.mark.parametrize("argv, says", [
    (["accuracy", "RUN", "--against", "thesis-9"], "error: unknown seed table 'thesis-9'"),
    (["compare", "RUN", "--against", "nope"], "error: unknown seed table 'nope'"),
    (["accuracy", "RUN", "--against", "paper-table-8"], "error: paper-table-8 is an ablation table"),
    (["compare", "RUN", "--against", "thesis-3.3"], "error: thesis-3.3 is an accuracy table"),
])
def test_cli_bad_names_exit_2_with_one_line(argv, says, runs, capsys):
    argv = [str(runs[0]) if a == "RUN" else a for a in argv]
    assert nestlab_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(says) and err.count("\n") == 1, err
