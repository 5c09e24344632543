"""The report's table sections: the runs, network health, accuracy per variant (and across runs),
the variant comparison, and the seeds' numbers beside ours. Every number comes from the same code
as the Markdown and CSV files (analysis.score, analysis.render.tables, analysis.render.against), so the report and
accuracy.csv agree cell by cell.
"""

from __future__ import annotations

from analysis.health import SILENCE_WARN
from analysis.render.against import (
    ABL_HEADER,
    _ablation_rows,
    _num,
    ablation_vs_seed,
    accuracy_vs_seed,
    load_seed_table,
)
from analysis.render.html.html import bullets, esc, note, table
from analysis.render.streams_tables import HEADER as STREAMS_HEADER
from analysis.render.streams_tables import graph_rows as streams_graph_rows
from analysis.render.streams_tables import streams_accuracy
from analysis.render.tables import (
    ACROSS_HEADER,
    ACROSS_NOTE,
    COMPARE_NOTE,
    HEALTH_HEADER,
    HEALTH_NOTE,
    TABLE_NOTE,
    accuracy_cells,
    across_cells,
    compare_cells,
    health_row,
    overlap_note,
    pct,
    runs_title,
)
from analysis.score.table_layout import COUNTS, RATES, SECTIONS

AGAINST_RATES = ("TPR", "FPR", "PPV", "NPV")


def run_name(path) -> str:
    return f"{path.parent.name}/{path.name}"


def _length(m) -> str:
    """The spec's duration (s)."""
    d = None if m is None else getattr(m.spec, "duration", None)
    return f"{d:g}" if isinstance(d, int | float) else ""


def _wall(m) -> str:
    """From the run's start to its end, setup and teardown included (s)."""
    if m is None or m.start_mono is None or m.end_mono is None:
        return ""
    return f"{m.end_mono - m.start_mono:.1f}"


def runs_section(ev) -> str:
    """One row per run (status, duration, snapshots, faults, the first variant's TCP rates, silence,
    warnings), the runs that could not be analysed, and every warning."""
    per = ev.per_run(ev.variants[0])
    study = ev.study   # its headline row's rates (a streams run's stream connections), silences where they apply
    tcp = per[(per["section"] == "Total") & (per["row"] == study.headline_row)].set_index("run")
    header = ["Run", "Status", "Length s", "Wall s", "Snapshots", "Modules", "Faults",
              f"{study.scope} TPR / FPR / PPV ({ev.variants[0]})", "Silence %", "Warnings"]
    rows, warns = [], []
    for p in ev.runs:
        data = ev.data.get(p)
        m = data.info.manifest if data is not None else None
        h = ev.health.get(p)
        status = (m.status if m is not None else "unknown") + (f" ({m.reason})" if m is not None and m.reason else "")
        r = tcp.loc[str(p)] if str(p) in tcp.index else None
        rates = " / ".join(pct(r[k]) or "–" for k in ("TPR", "FPR", "PPV")) if r is not None else ""
        run_warns = list(ev.run_warnings.get(p, [])) + (list(m.warnings) if m is not None else [])
        run_warns += [w for w in (h.warnings if h is not None else []) if w not in run_warns]
        warns += [f"{run_name(p)}: {w}" for w in run_warns]
        sil = "" if h is None or h.silence_rate is None else f"{100 * h.silence_rate:.2f}"
        if h is not None and h.silence_rate is not None and h.silence_rate > SILENCE_WARN and study.silence_warning:
            sil = f'<span class="warn">{sil} !</span>'
        started = int(data.faults["start"].notna().sum()) if data is not None else 0
        faults = "" if data is None else f"{started}" + (f" of {len(data.faults)}" if started < len(data.faults) else "")
        rows.append([esc(run_name(p)), esc(status), _length(m), _wall(m), str(len(data.snapshots)) if data is not None else "",
                     str(len(data.modules)) if data is not None else "", faults, rates, sil, str(len(run_warns))])
    if not study.network_health:
        header.remove("Silence %")
        rows = [r[:8] + r[9:] for r in rows]
    parts = [table(header, rows, raw=True, cap=500, sep_col=None,
                   rest="every run's rates: nestlab accuracy RUNS (per_run.csv)")]
    if ev.skipped:
        parts.append(f"<h3>Not analysed ({len(ev.skipped)} runs; not counted anywhere in this report)</h3>")
        parts.append(bullets([f"{p}: {why}" for p, why in ev.skipped]))
    if warns:
        parts.append(f"<h3>Warnings ({len(warns)})</h3>" + bullets(warns, cap=60))
    return "\n".join(parts)


def health_section(ev) -> str:
    if not ev.health:
        if not ev.study.network_health:
            return f'<p class="note">Not a network run ({esc(ev.study.name)} runs): no network health figures.</p>'
        return '<p class="note">No network health figures (no run had the data).</p>'
    rows = [health_row(run_name(p), h) for p, h in ev.health.items()]
    return table(HEALTH_HEADER, rows, cap=500, sep_col=None) + note(HEALTH_NOTE)


def accuracy_section(ev) -> str:
    """The accuracy table per variant in the layout of the evaluation's study kind (TABLES)."""
    return TABLES[ev.study.table](ev)


def _per_graph(ev) -> str:
    """Thesis Table 4.3's layout: a row per processing graph, Totals."""
    parts = []
    for v in ev.variants:
        rows = streams_graph_rows(streams_accuracy(ev, v))
        parts.append(f"<h3>{esc(v)}</h3>")
        parts.append(table(STREAMS_HEADER, rows, cap=None, row_attrs=[{"data-row": r[0]} for r in rows],
                           cls="accuracy streams", attrs={"data-variant": v}))
    parts.append(note(f"Ground truth {ev.policy}, {runs_title(ev)}. Rates in %; blank = undefined. Stream "
                      "connections, direction out; ±: larger half-width of the row's TPR and FPR 95% intervals "
                      "(across runs where 2 or more runs define the rate, else Wilson per snapshot)."))
    parts.append(note(overlap_note(ev)))
    return "\n".join(parts)


def _per_module(ev) -> str:
    """Thesis Table 3.3's layout per variant (analysis.score.accuracy.accuracy_table) in the study's rows,
    and with 2 or more runs the across-runs table; each <table> carries data-variant, each row
    data-section and data-row."""
    parts = []
    rows = ev.study.layout.rows
    attrs = [{"data-section": s, "data-row": r} for s in SECTIONS for r in rows]
    on = overlap_note(ev)
    for v in ev.variants:
        t = ev.table(v)
        parts.append(f"<h3>{esc(v)}</h3>")
        parts.append(table(["", "Module", *COUNTS, *RATES, "±"], accuracy_cells(t, intervals=False, rows=rows), cap=None,
                           row_attrs=attrs, cls="accuracy", attrs={"data-variant": v}))
        if len(ev.runs) >= 2:
            parts.append(f"<h4>Across runs: {esc(v)}</h4>")
            parts.append(table(ACROSS_HEADER, across_cells(t, ev.across(v), rows), cap=None, row_attrs=attrs,
                               cls="across", attrs={"data-variant": v}))
    parts.append(note(f"Ground truth {ev.policy}, {runs_title(ev)}. {TABLE_NOTE}"))
    if len(ev.runs) >= 2:
        parts.append(note(f"Across runs: {ACROSS_NOTE}"))
    parts.append(note(on))
    return "\n".join(parts)


# The accuracy section's writers by the layout a study kind names (analysis.studies.base.Study.table).
TABLES = {"thesis-3.3": _per_module, "thesis-4.3": _per_graph}


def compare_section(ev) -> str:
    header, rows, legend = compare_cells(ev.compare(), ev.variants, _compare_rows(ev.study))
    return "\n".join([f'<p>{esc("; ".join(legend))}</p>', table(header, rows, cap=None, cls="compare"), note(COMPARE_NOTE)])


def _compare_rows(study) -> tuple[tuple[str, str, str], ...]:
    """The comparison's (section, row, shown as): the study's, else every section and row of its layout."""
    return study.compare_rows or tuple((s, r, r) for s in SECTIONS for r in study.layout.rows)


def _against_accuracy(ev, seed) -> str:
    frame = accuracy_vs_seed(ev.counts, seed.variant, seed)
    frame = frame[frame["metric"].isin(AGAINST_RATES)]
    metrics = [m for m in AGAINST_RATES if m in set(frame["metric"])]
    header = ["Section", "Module"] + [f"{m} {w}" for m in metrics for w in ("ours", "theirs", "diff")]
    cells = {(r.section, r.row, r.metric): r for r in frame.itertuples(index=False)}
    rows, beyond = [], 0
    for section in SECTIONS:
        for k, row in enumerate(ev.study.layout.rows):
            if not any((section, row, m) in cells for m in metrics):
                continue
            out = [esc(section) if k == 0 or not rows else "", esc(row)]
            for m in metrics:
                r = cells.get((section, row, m))
                if r is None:
                    out += ["", "", ""]
                    continue
                diff = _num(r.diff, signed=True)
                if r.beyond is True:
                    beyond += 1
                    diff = f'<b class="warn" title="beyond our interval">{diff} †</b>'
                out += [_num(r.ours), _num(r.theirs), diff]
            rows.append(out)
    return "\n".join([
        f"<h3>{esc(seed.name)}: {esc(seed.title)} (ours: {esc(seed.variant)})</h3>",
        f'<p class="note">Theirs: {esc(seed.source())}. Rates in %; diff = ours − theirs in percentage points; '
        f"† beyond: their printed value (± {seed.precision:g}) lies outside our interval ({beyond} cells here). "
        f"Counts and every cell with its interval: <code>nestlab accuracy RUNS --against {esc(seed.name)}</code>.</p>",
        table(header, rows, raw=True, cap=None, cls="against", attrs={"data-seed": seed.name})])


def _against_streams(ev, seed) -> str:
    from analysis.render.against_streams import graph_rows, streams_vs_seed

    variants = [v for v in ev.variants if v in (seed.variant, "flink-backpressure")]
    frame = streams_vs_seed(ev, seed, variants)
    header = ["Graph", "", *seed.cells.columns]
    parts = [f"<h3>{esc(seed.name)}: {esc(seed.title)} (ours: {esc(', '.join(variants))})</h3>",
             f'<p class="note">Theirs: {esc(seed.source())}. Ours: the stream connections of the runs of each '
             "graph's experiment; Totals = the sum of the graph rows. Rates in %; * beyond: their printed value "
             f"(± {seed.precision:g}) lies outside our interval. Every cell with its interval: "
             f"<code>nestlab accuracy RUNS --against {esc(seed.name)}</code>.</p>"]
    for v in variants:
        parts += [f"<h4>{esc(v)}</h4>", table(header, graph_rows(frame, seed, v), cap=None, cls="against",
                                               attrs={"data-seed": seed.name, "data-variant": v})]
    return "\n".join(parts)


def _against_ablation(ev, seed) -> str:
    frame = ablation_vs_seed(ev.counts, ev.variants, seed)
    frame = frame[frame["variant"].isin(ev.variants)]
    blank = seed.raw.get("blank", "")
    return "\n".join([
        f"<h3>{esc(seed.name)}: {esc(seed.title)} (baseline {esc(seed.variant)})</h3>",
        f'<p class="note">Theirs: {esc(seed.source())}. Changes in % of the baseline\'s TP and FP; sign: whether '
        "our change goes the same way as theirs.</p>",
        table(ABL_HEADER, _ablation_rows(frame, blank), cap=200, cls="against", attrs={"data-seed": seed.name},
              rest=f"nestlab compare RUNS --against {seed.name}")])


def against_section(ev) -> str:
    """The seeds' tables the study is compared with whose variant was evaluated (as `nestlab accuracy
    --against` and `nestlab compare --against` choose them); '' when none matches."""
    parts = []
    study = ev.study
    for name in study.seeds:
        seed = load_seed_table(name)
        if seed.variant in ev.variants:
            parts.append(_against_accuracy(ev, seed))
    for name in study.graph_seeds:   # a row per processing graph (analysis.render.against_streams)
        seed = load_seed_table(name)
        if seed.variant in ev.variants and (ev.counts["kind"] == "sconn").any():
            parts.append(_against_streams(ev, seed))
    for name in study.ablation_seeds:
        seed = load_seed_table(name)
        mapped = {v for _, v in seed.ablations if v}
        if ev.variants[0] == seed.variant and mapped & set(ev.variants[1:]):
            parts.append(_against_ablation(ev, seed))
    return "\n".join(parts)
