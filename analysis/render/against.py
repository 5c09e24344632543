"""Our tables against the seeds': cell by cell, with our uncertainty (docs/seeds-tables.md).

The seeds' tables are data files in analysis/seeds/ (thesis-3.3, paper-table-6, paper-table-8), values
as printed, with provenance and recovery notes. Two kinds:

- accuracy (thesis Table 3.3, paper Table 6): against analysis.score.accuracy.accuracy_table. One output row
  per printed cell: section, row, metric, unit, ours, theirs, diff (ours - theirs; percentage points
  for rates), lo/hi (our interval for a rate, in %), interval ("across runs" or "Wilson"), beyond
  (their value, widened by its print precision, lies outside our interval).
- ablation (paper Table 8): against analysis.score.accuracy.compare_table. One output row per printed cell:
  section, row, feature, variant, metric (dTP% / dFP%), ours, theirs, diff, theirs_as ("printed" or
  "blank = ·", a blank read as no change), sign (whether our change goes the same way).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from analysis import seeds
from analysis.render.tables import md_table as _md_table
from analysis.render.tables import tex
from analysis.score.table_layout import COUNTS, RATES, ROWS, SECTIONS
from analysis.variants import parse_variant
from rundir.errors import UserError
from rundir.layout import fresh, output_dir

KINDS = ("accuracy", "ablation", "streams")   # streams: a row per processing graph (analysis.render.against_streams)
ACROSS, WILSON = "across runs", "Wilson"


@dataclass
class SeedTable:
    """One seed table read from its data file; `cells` holds the values as printed (NaN = blank)."""

    name: str
    kind: str
    title: str
    variant: str                # ours that it corresponds to (the baseline of an ablation table)
    provenance: dict
    notes: list[str]
    cells: pd.DataFrame         # index (section, row); columns: metrics, or (feature, metric) for ablation
    precision: float            # how far a printed value may lie from the exact one
    path: str
    columns: list[dict] = field(default_factory=list)   # ablation: label, removed, variant
    metrics: list[str] = field(default_factory=list)    # ablation: dTP%, dFP%
    blank_value: float = math.nan                        # ablation: what a blank cell means
    raw: dict = field(default_factory=dict)

    @property
    def ablations(self) -> list[tuple[str, str | None]]:
        """(printed column label, our variant or None) in printed order."""
        return [(c["label"], c.get("variant")) for c in self.columns]

    def source(self) -> str:
        """One line: document, table, where (page or section), seed file and lines."""
        p = self.provenance
        where = f"p. {p['page']}" if p.get("page") else f"section {p.get('section', '?')}"
        year = f", {p['year']}" if p.get("year") else ""
        lines = p.get("lines") or ["?", "?"]
        return (f"{p.get('author', '?')}, \"{p.get('document', '?')}\"{year}, Table {p.get('table', '?')}, {where} "
                f"(seed {p.get('seed', '?')}, lines {lines[0]}-{lines[-1]})")


def seed_tables() -> list[str]:
    """The names load_seed_table knows."""
    return seeds.names()


def load_seed_table(name: str | Path) -> SeedTable:
    """A bundled table by name (seed_tables()) or a YAML file of the same shape by path."""
    text_name = str(name)
    if text_name in seed_tables():
        where, text = f"{text_name} (bundled)", seeds.text(text_name)
    elif text_name.endswith((".yaml", ".yml")) and Path(text_name).is_file():
        where, text = text_name, Path(text_name).read_text(encoding="utf-8")
    else:
        raise UserError(f"unknown seed table {text_name!r} (known: {', '.join(seed_tables())}; "
                        "or the path of a YAML file)")
    try:
        data = yaml.safe_load(text)
        return _parse(data, where)
    except (yaml.YAMLError, KeyError, TypeError, ValueError) as e:
        raise UserError(f"{where}: not a seed table: {type(e).__name__}: {e}") from None


def _parse(data: dict, where: str) -> SeedTable:
    kind = data["kind"]
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} (expected one of {', '.join(KINDS)})")
    if kind == "streams":
        return _parse_streams(data, where)
    if kind == "accuracy":
        columns, names = [], list(data["columns"])
        unknown = [c for c in names if c not in COUNTS + RATES]
        if unknown:
            raise ValueError(f"unknown columns {unknown}")
    else:
        columns, metrics = list(data["columns"]), list(data["metrics"])
        names = [(c["label"], m) for c in columns for m in metrics]
    index, values = [], []
    for section, rows in data["sections"].items():
        for row, cells in rows.items():
            if section not in SECTIONS or row not in ROWS:
                raise ValueError(f"section {section!r}, row {row!r} (ours: {SECTIONS}, {ROWS})")
            if len(cells) != len(names):
                raise ValueError(f"{section}/{row}: {len(cells)} values for {len(names)} columns")
            index.append((section, row))
            values.append([math.nan if v is None else float(v) for v in cells])
    for c in columns:   # our variant names as `nestlab variants` spells them (UserError if unknown)
        c["variant"] = c.get("variant") and parse_variant(c["variant"]).name
    cols = pd.MultiIndex.from_tuples(names, names=["feature", "metric"]) if kind == "ablation" else names
    cells = pd.DataFrame(values, index=pd.MultiIndex.from_tuples(index, names=["section", "row"]), columns=cols)
    return SeedTable(
        name=data["name"], kind=kind, title=data["title"], variant=parse_variant(data["variant"]).name,
        provenance=dict(data["provenance"]), notes=list(data.get("notes") or []), cells=cells,
        precision=float(data.get("precision", 0.0)), path=where, columns=columns,
        metrics=list(data.get("metrics") or []),
        blank_value=math.nan if data.get("blank_value") is None else float(data["blank_value"]), raw=data)


def _parse_streams(data: dict, where: str) -> SeedTable:
    """A streams table (thesis Table 4.3): `rows` {printed row: {experiment, values}}; cells indexed by row."""
    names = list(data["columns"])
    unknown = [c for c in names if c not in COUNTS + RATES]
    if unknown:
        raise ValueError(f"unknown columns {unknown}")
    index, values = [], []
    for row, spec in data["rows"].items():
        cells = spec["values"]
        if len(cells) != len(names):
            raise ValueError(f"{row}: {len(cells)} values for {len(names)} columns")
        index.append(str(row))
        values.append([math.nan if v is None else float(v) for v in cells])
    cells = pd.DataFrame(values, index=pd.Index(index, name="row"), columns=names)
    return SeedTable(name=data["name"], kind="streams", title=data["title"], variant=parse_variant(data["variant"]).name,
                     provenance=dict(data["provenance"]), notes=list(data.get("notes") or []), cells=cells,
                     precision=float(data.get("precision", 0.0)), path=where, raw=data)


def ablation_variants(seed: SeedTable) -> list[str]:
    """The variant set of an ablation table: its baseline first, then each mapped column."""
    out = [seed.variant]
    for _, v in seed.ablations:
        if v and v not in out:
            out.append(v)
    return out


# ----------------------------------------------------------------------------- comparing


def _nan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def across_runs_or_none(counts: pd.DataFrame, variant: str) -> pd.DataFrame | None:
    """analysis.score.accuracy.across_runs(counts, variant) when that function exists (it may not yet)."""
    from analysis.score import accuracy as score

    fn = getattr(score, "across_runs", None)
    return None if fn is None else fn(counts, variant)


def _interval(ours: pd.Series, spread: pd.DataFrame | None, key, metric: str) -> tuple[float, float, str]:
    """(lo, hi) in % and which interval: across runs when defined, else Wilson; ('', NaN) if none."""
    if spread is not None and key in spread.index and f"{metric}_xlo" in spread.columns:
        lo, hi = spread.at[key, f"{metric}_xlo"], spread.at[key, f"{metric}_xhi"]
        if not (_nan(lo) or _nan(hi)):
            return 100.0 * lo, 100.0 * hi, ACROSS
    lo, hi = ours[f"{metric}_lo"], ours[f"{metric}_hi"]
    if _nan(lo) or _nan(hi):
        return math.nan, math.nan, ""
    return 100.0 * lo, 100.0 * hi, WILSON


def against_accuracy(ours: pd.DataFrame, seed: SeedTable, spread: pd.DataFrame | None = None) -> pd.DataFrame:
    """Cell by cell: ours (an accuracy_table frame) against an accuracy seed table; `spread` is
    across_runs' frame (or None: Wilson intervals only)."""
    if seed.kind != "accuracy":
        raise UserError(f"{seed.name} is an ablation table: compare it with `nestlab compare --against`")
    recs = []
    for key, theirs_row in seed.cells.iterrows():
        o = ours.loc[key]
        for metric in seed.cells.columns:
            theirs = float(theirs_row[metric])
            rate = metric in RATES
            value = 100.0 * float(o[metric]) if rate else float(o[metric])
            lo, hi, how = _interval(o, spread, key, metric) if rate else (math.nan, math.nan, "")
            beyond = None
            if how and not (_nan(theirs) or _nan(value)):
                # their printed value stands for a range: its print precision either side
                beyond = bool(theirs + seed.precision < lo or theirs - seed.precision > hi)
            recs.append({"section": key[0], "row": key[1], "metric": metric, "unit": "%" if rate else "count",
                         "ours": value, "theirs": theirs, "diff": value - theirs, "lo": lo, "hi": hi,
                         "interval": how, "beyond": beyond})
    return pd.DataFrame.from_records(recs, columns=["section", "row", "metric", "unit", "ours", "theirs", "diff",
                                                    "lo", "hi", "interval", "beyond"])


def _sign(v: float, tol: float) -> int:
    return 0 if abs(v) < tol else (1 if v > 0 else -1)


def _direction(ours: float, theirs: float, tol: float) -> str:
    """same, opposite, "ours none" or "theirs none": do the two changes go the same way?"""
    a, b = _sign(ours, tol), _sign(theirs, tol)
    if a == b:
        return "same"
    return "ours none" if a == 0 else "theirs none" if b == 0 else "opposite"


def against_ablation(ours: pd.DataFrame, seed: SeedTable) -> pd.DataFrame:
    """Cell by cell: ours (a compare_table frame, first variant = baseline) against an ablation seed
    table, for each of its columns whose variant is in ours (the others are left out)."""
    if seed.kind != "ablation":
        raise UserError(f"{seed.name} is an accuracy table: compare it with `nestlab accuracy --against`")
    have = list(dict.fromkeys(ours.columns.get_level_values("variant")))[1:]
    recs = []
    for key in seed.cells.index:
        for label, variant in seed.ablations:
            if variant not in have:
                continue
            for metric in seed.metrics:
                printed = float(seed.cells.at[key, (label, metric)])
                theirs = seed.blank_value if _nan(printed) else printed
                value = float(ours.at[key, (variant, metric)])
                same = "" if _nan(value) or _nan(theirs) else _direction(value, theirs, seed.precision)
                recs.append({"section": key[0], "row": key[1], "feature": label, "variant": variant,
                             "metric": metric, "ours": value, "theirs": theirs, "diff": value - theirs,
                             "theirs_as": f"blank = {seed.raw.get('blank', '')}" if _nan(printed) else "printed",
                             "sign": same})
    return pd.DataFrame.from_records(recs, columns=["section", "row", "feature", "variant", "metric", "ours",
                                                    "theirs", "diff", "theirs_as", "sign"])


def accuracy_vs_seed(counts: pd.DataFrame, variant: str, seed: SeedTable) -> pd.DataFrame:
    """Our accuracy table of `variant` from per-module counts (Evaluation.counts) against the seed's,
    with across-run intervals where analysis.score.accuracy.across_runs gives them."""
    from analysis.score.accuracy import accuracy_table

    return against_accuracy(accuracy_table(counts, variant), seed, across_runs_or_none(counts, variant))


def ablation_vs_seed(counts: pd.DataFrame, variants: list[str], seed: SeedTable) -> pd.DataFrame:
    """Our comparison of `variants` (the first is the baseline) against an ablation seed table."""
    from analysis.score.accuracy import compare_table

    return against_ablation(compare_table(counts, list(variants)), seed)


# ----------------------------------------------------------------------------- rendering


def _num(v: float, unit: str = "%", signed: bool = False) -> str:
    if _nan(v):
        return ""
    if unit == "count":
        v = int(round(v))
        return f"{v:+d}" if signed and v else str(v)
    return f"{v:+.1f}" if signed and round(v, 1) != 0 else f"{abs(v) if round(v, 1) == 0 else v:.1f}"


def _span(lo: float, hi: float) -> str:
    return "" if _nan(lo) or _nan(hi) else f"[{lo:.1f}, {hi:.1f}]"


def _labels(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """Section and row names as the tables print them: only where they change."""
    out, last = [], (None, None)
    for section, row in zip(frame["section"], frame["row"], strict=True):
        out.append((section if section != last[0] else "", row if (section, row) != last else ""))
        last = (section, row)
    return out


def _accuracy_rows(frame: pd.DataFrame) -> list[list[str]]:
    rows = []
    for (section, row), r in zip(_labels(frame), frame.itertuples(index=False), strict=True):
        rows.append([section, row, r.metric, _num(r.ours, r.unit),
                     _num(r.theirs, r.unit), _num(r.diff, r.unit, signed=True), _span(r.lo, r.hi), r.interval,
                     "yes" if r.beyond is True else ""])
    return rows


def _ablation_rows(frame: pd.DataFrame, blank: str) -> list[list[str]]:
    rows = []
    for (section, row), r in zip(_labels(frame), frame.itertuples(index=False), strict=True):
        theirs = _num(r.theirs, signed=True) + (f" ({blank})" if r.theirs_as != "printed" else "")
        rows.append([section, row, r.feature, r.variant, r.metric,
                     _num(r.ours, signed=True), theirs, _num(r.diff, signed=True), r.sign])
    return rows


ACC_HEADER = ["Section", "Module", "Metric", "Ours", "Theirs", "Diff", "Our interval", "Interval", "Beyond"]
ABL_HEADER = ["Section", "Module", "Removed", "Variant", "Metric", "Ours", "Theirs", "Diff", "Sign"]


def interval_note(frame: pd.DataFrame, precision: float) -> str:
    """Which interval the accuracy comparison shows, and what `beyond` means."""
    n = frame["interval"].value_counts()
    parts = []
    if n.get(ACROSS, 0):
        parts.append(f"across runs (95% interval of the rate over the runs) for {n[ACROSS]} rates")
    if n.get(WILSON, 0):
        parts.append(f"Wilson score 95% (snapshots as independent trials) for {n[WILSON]} rates"
                     + ("" if n.get(ACROSS, 0) else "; fewer than 2 runs, or no across-run intervals"))
    shown = "; ".join(parts) or "none (no rate is defined in both tables)"
    return (f"Interval shown: {shown}. Rates in %, Diff = ours - theirs (percentage points for rates, "
            f"counts for counts). Beyond: their printed value, give or take its print precision "
            f"({precision:g}), lies outside our interval.")


LISTED_RATES = ("TPR", "FPR", "PPV", "NPV")


def against_markdown(frame: pd.DataFrame, seed: SeedTable, title: str = "") -> str:
    head = [f"### {title or f'Against {seed.name}'}", "",
            f"Theirs: {seed.title} — {seed.source()}. Corresponds to our {seed.variant}. Provenance and "
            f"recovery notes: analysis/seeds/{seed.name}.yaml, docs/seeds-tables.md.", ""]
    if seed.kind == "accuracy":
        table = _md_table(ACC_HEADER, _accuracy_rows(frame), ["l", "l", "l"] + ["r"] * 5 + ["l"])
        beyond = frame[frame["beyond"] == True]  # noqa: E712 - beyond is True/False/None
        # TNR and FNR are 100 - FPR and 100 - TPR: listing them again would only repeat those cells.
        listed = beyond[beyond["metric"].isin(LISTED_RATES)]
        tail = [f"Cells beyond our interval ({len(beyond)} of {int(frame['beyond'].notna().sum())} compared; "
                f"listed: {', '.join(LISTED_RATES)}, as TNR and FNR mirror FPR and TPR):"]
        tail += [f"- {r.section} {r.row} {r.metric}: ours {_num(r.ours)} {_span(r.lo, r.hi)} ({r.interval}), "
                 f"theirs {_num(r.theirs)}" for r in listed.itertuples(index=False)] or ["- none"]
        return "\n".join(head + [table, "", interval_note(frame, seed.precision), "", *tail])
    blank = seed.raw.get("blank", "")
    table = _md_table(ABL_HEADER, _ablation_rows(frame, blank), ["l"] * 5 + ["r"] * 3 + ["l"])
    missing = [f"{label} ({v or 'no equivalent'})" for label, v in seed.ablations
               if v not in set(frame["variant"])]
    opposite = frame[frame["sign"] == "opposite"]
    n = frame["sign"].value_counts()
    note = (f"Changes in % of the baseline's ({seed.variant}) TP and FP; Diff in percentage points. "
            f"Theirs \"({blank})\": blank in the text, read as no change. Sign: whether our change goes "
            f"the same way as theirs (same, opposite, or one of them no change; changes under "
            f"{seed.precision:g} count as none). No interval: the seed gives none for a change.")
    tail = [f"Direction: same {n.get('same', 0)}, opposite {n.get('opposite', 0)}, no change in ours only "
            f"{n.get('ours none', 0)}, in theirs only {n.get('theirs none', 0)} (of {int((frame['sign'] != '').sum())}).",
            "", f"Cells where our change goes the other way ({len(opposite)}):"]
    tail += [f"- {r.section} {r.row} {r.feature} {r.metric}: ours {_num(r.ours, signed=True)}, theirs "
             f"{_num(r.theirs, signed=True)}" for r in opposite.itertuples(index=False)] or ["- none"]
    if missing:
        tail += ["", "Columns not compared (variant not in this comparison): " + ", ".join(missing)]
    return "\n".join(head + [table, "", note, "", *tail])


def against_csv(frame: pd.DataFrame, path: Path) -> None:
    frame.round(4).to_csv(fresh(path), index=False, na_rep="")


def against_latex(frame: pd.DataFrame, seed: SeedTable, caption: str = "") -> str:
    """The Markdown table's rows as a plain LaTeX tabular (no packages needed); caption is plain text."""
    if seed.kind == "accuracy":
        header, rows, align = ACC_HEADER, _accuracy_rows(frame), "lll" + "r" * 5 + "l"
    else:
        header, rows, align = ABL_HEADER, _ablation_rows(frame, "dot"), "l" * 5 + "rrrl"
    lines = [r"\begin{table}[htbp]", r"\centering", r"\small", rf"\begin{{tabular}}{{{align}}}", r"\hline",
             " & ".join(tex(h) for h in header) + r" \\", r"\hline"]
    lines += [" & ".join(tex(c) for c in r) + r" \\" for r in rows]
    lines += [r"\hline", r"\end{tabular}"]
    lines.append(rf"\caption{{{tex(caption or f'Ours against {seed.name}: {seed.source()}.')}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def write_against(frame: pd.DataFrame, seed: SeedTable, out: Path, title: str = "") -> tuple[str, list[Path]]:
    """against-<name>.md/.csv/.tex into `out`; returns (markdown, files)."""
    from analysis.render.tables import slug

    out = Path(out)
    output_dir(out)
    md = against_markdown(frame, seed, title)
    stem = f"against-{slug(seed.name)}"
    files = [out / f"{stem}.md", out / f"{stem}.csv", out / f"{stem}.tex"]
    fresh(files[0]).write_text(md + "\n")
    against_csv(frame, files[1])
    fresh(files[2]).write_text(against_latex(frame, seed, f"{title or 'Ours against ' + seed.name}. Theirs: "
                                                   f"{seed.source()}."))
    return md, files

