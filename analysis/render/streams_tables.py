"""The accuracy table of streams runs in thesis Table 4.3's own layout: a row per processing graph
(the runs' experiments, upper-cased as the thesis prints them) and Totals, the counts and rates over
the stream connections (direction out), and no rows or sections of the network's Table 3.3 (no
TCP, socket or application rows, no Inbound section: a stream connection has none of them).

    MERGETREE   | runs | Total | AP | AN | TP | TN | FP | FN | TPR | FPR | PPV | TNR | FNR | NPV | ±

± is the larger half-width of the row's TPR and FPR 95% intervals, across runs (whole runs resampled,
analysis.score.accuracy.bootstrap_pooled) where 2 or more runs of the row define the rate, else
Wilson's per snapshot (analysis.render.against_streams.graph_table, which the --against thesis-4.3
table uses too). accuracy.csv keeps the Table 3.3 sections for every run, as for any run.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.render.against_streams import TOTALS, graph_table, run_experiment
from analysis.render.tables import md_table, tex
from analysis.score.table_layout import COUNTS, RATES

HEADER = ["Graph", "runs", *COUNTS, *RATES, "±"]


def graph_mapping(ev) -> tuple[dict[str, str | None], dict[str, str]]:
    """(printed row -> experiment, in the order of the runs; Totals last), run -> experiment."""
    experiments = {str(r): run_experiment(r) for r in ev.runs}
    mapping: dict[str, str | None] = {}
    for e in experiments.values():
        mapping.setdefault(e.upper(), e)
    mapping[TOTALS] = None
    return mapping, experiments


def graph_rows(table: pd.DataFrame) -> list[list[str]]:
    rows = []
    for row, r in table.iterrows():
        cells = [str(row), str(int(r["runs"]))] + [str(int(r[c])) for c in COUNTS]
        cells += ["" if math.isnan(r[x]) else f"{100 * r[x]:.1f}" for x in RATES]
        widths = [(r[f"{x}_hi"] - r[f"{x}_lo"]) / 2 for x in ("TPR", "FPR") if not math.isnan(r[f"{x}_lo"])]
        cells.append(f"{max(widths):.1f}" if widths else "")
        rows.append(cells)
    return rows


def streams_accuracy(ev, variant: str) -> pd.DataFrame:
    mapping, experiments = graph_mapping(ev)
    return graph_table(ev.counts, variant, mapping, experiments)


def streams_accuracy_markdown(ev, variant: str, title: str) -> str:
    table = streams_accuracy(ev, variant)
    note = ("Rates in %; blank = undefined. Stream connections, direction out (thesis Table 4.3's layout: a row "
            "per graph, Totals their sum). ±: larger half-width of the row's TPR and FPR 95% intervals, in "
            "percentage points: across runs (whole runs resampled) where 2 or more runs of the row define the "
            "rate, else Wilson per snapshot. The Table 3.3 sections: accuracy.csv.")
    return "\n".join([f"### {title}", "", md_table(HEADER, graph_rows(table), ["l"] + ["r"] * (len(HEADER) - 1)),
                      "", note])


def streams_accuracy_latex(ev, variant: str, caption: str) -> str:
    rows = graph_rows(streams_accuracy(ev, variant))
    lines = [r"\begin{table}[htbp]", r"\centering", r"\small", r"\begin{tabular}{l" + "r" * (len(HEADER) - 1) + "}",
             r"\hline", " & ".join(tex(h) for h in HEADER) + r" \\", r"\hline"]
    lines += [" & ".join(tex(c) for c in r) + r" \\" for r in rows]
    lines += [r"\hline", r"\end{tabular}", rf"\caption{{{tex(caption)}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"
