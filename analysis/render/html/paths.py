"""The report's section on causal paths (issue 31 item 5; docs/report.md, docs/blackbox.md): for a run
with a message trace, the true request paths (from `requests`) and what each black-box algorithm
inferred from the messages alone, as call trees with their counts and per-node delays (WAP5 figure
9's drawing), and who each diagnoser named in each fault window.

Plain HTML: a tree is nested lists, each message `src → dst` with its mean one-way latency and, at
a node's first appearance as a receiver, the delay that node adds in the path (summed over its
visits, mean over the pattern's paths). An inferred pattern is marked ✓ when requests really took
it, ✗ when none did.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.paths.model import PathPattern, PathsResult, Trace, true_patterns
from analysis.paths.render import Msg, parse_pattern
from analysis.render.html.html import details, esc, note, table
from rundir.errors import UserError

TOP_TRUE = 8          # true patterns in the side-by-side table
TOP_INFERRED = 5      # inferred patterns drawn per algorithm
MAX_RUNS = 6          # runs given the section in a report of several
CSS = """
ul.tree, ul.tree ul { list-style: none; margin: 0; padding-left: 16px; }
ul.tree { padding-left: 0; font-size: 12.5px; }
ul.tree li { position: relative; padding-left: 12px; white-space: nowrap; }
ul.tree ul li::before { content: ""; position: absolute; left: 0; top: 0; bottom: 50%; width: 9px;
                        border-left: 1px solid #b8bec6; border-bottom: 1px solid #b8bec6; }
ul.tree .dst { color: var(--accent); font-weight: 600; }
ul.tree .lat { color: var(--muted); }
ul.tree .nd { background: #fff3c4; border-radius: 3px; padding: 0 3px; margin-left: 4px; }
.pathgrid { display: flex; flex-wrap: wrap; gap: 10px 28px; align-items: flex-start; }
.pathcard { border: 1px solid var(--line); border-radius: 4px; padding: 4px 10px 6px; }
.pathcard .head { font-size: 12.5px; margin-bottom: 2px; }
.yes { color: #1e7b34; font-weight: 600; } .no { color: #b3261e; font-weight: 600; }
"""


def _ms(s: float | None) -> str:
    return "" if s is None or s != s else f"{s * 1000:.1f} ms"


def tree_html(p: PathPattern) -> str:
    """One pattern as nested lists (module docstring)."""
    try:
        root = parse_pattern(p.pattern)
    except ValueError:
        return f"<code>{esc(p.pattern)}</code>"
    shown: set[str] = set()

    def item(m: Msg) -> str:
        lat = p.edge_latencies.get(f"{m.src}>{m.dst}")
        text = f'{esc(m.src)} → <span class="dst">{esc(m.dst)}</span>'
        if lat is not None:
            text += f' <span class="lat">{esc(_ms(lat))}</span>'
        if m.dst not in shown and m.dst in p.node_delays:
            shown.add(m.dst)
            text += f' <span class="nd">{esc(m.dst)} +{esc(_ms(p.node_delays[m.dst]))}</span>'
        kids = "".join(item(c) for c in m.children)
        return f"<li>{text}{f'<ul>{kids}</ul>' if kids else ''}</li>"

    return f'<ul class="tree">{item(root)}</ul>'


def true_paths(trace: Trace) -> list[PathPattern]:
    """The truth's patterns as PathPatterns, most frequent first: count, mean node delays (summed
    per path, as the algorithms report them) and mean edge latencies."""
    from analysis.paths.score import true_node_delays

    pats = true_patterns(trace)
    counts = pats["pattern"].value_counts()
    delays = true_node_delays(trace)
    m = trace.messages
    req = trace.truth.request
    rows = pd.DataFrame({"request": req, "edge": m["src"].astype(str).to_numpy() + ">" + m["dst"].astype(str).to_numpy(),
                         "lat": (m["t_recv"] - m["t_send"]).to_numpy()})
    rows = rows[(req >= 0) & rows["lat"].notna().to_numpy()].merge(pats[["request", "pattern"]], on="request")
    lat = rows.groupby(["pattern", "edge"])["lat"].mean()
    out = []
    for pattern, n in counts.items():
        nd = delays[delays["pattern"] == pattern]
        out.append(PathPattern(pattern, float(n), dict(zip(nd["node"], nd["mean_s"], strict=True)),
                               lat.loc[pattern].to_dict() if pattern in lat.index.get_level_values(0) else {}))
    return out


def _delay_error_ms(truth: PathPattern, got: PathPattern) -> float:
    errs = [abs(got.node_delays.get(n, 0.0) - d) for n, d in truth.node_delays.items() if d > 0]
    return 1000 * float(np.mean(errs)) if errs else float("nan")


def side_by_side(truth: list[PathPattern], results: dict[str, PathsResult]) -> str:
    """The top true patterns (tree, count) and, per algorithm, its count of the same pattern and the
    mean error of its node delays there."""
    total = sum(p.count for p in truth) or 1.0
    found = {name: {p.pattern: p for p in r.patterns} for name, r in results.items()}
    header = ["#", "true path (requests)", "requests", *[f"{n}: paths · delay error" for n in results]]
    rows = []
    for k, p in enumerate(truth[:TOP_TRUE], 1):
        cells = [str(k), tree_html(p), f"{p.count:,.0f} ({100 * p.count / total:.1f}%)"]
        for name in results:
            got = found[name].get(p.pattern)
            if got is None:
                cells.append('<span class="no">not found</span>')
            else:
                err = _delay_error_ms(p, got)
                cells.append(f"{got.count:,.1f}" + ("" if err != err else f" · {err:.1f} ms"))
        rows.append(cells)
    rest = len(truth) - TOP_TRUE
    return table(header, rows, raw=True, cap=None, sep_col=None) + note(
        "Per algorithm: the paths it counted with this pattern (linking: an expected count) and the mean "
        "error of its node delays in it against the true ones (ms, over the pattern's nodes); not found: "
        "the algorithm has no such pattern.") + (
        note(f"{rest} rarer true patterns not shown (paths.csv of nestlab paths RUN has every inferred one).")
        if rest > 0 else "")


def inferred(name: str, result: PathsResult, true_set: set[str]) -> str:
    total = sum(p.count for p in result.patterns) or 1.0
    cards = []
    for k, p in enumerate(result.patterns[:TOP_INFERRED], 1):
        mark = '<span class="yes">✓ a true path</span>' if p.pattern in true_set else \
            '<span class="no">✗ no request took it</span>'
        cards.append(f'<div class="pathcard"><div class="head">#{k} · {p.count:,.1f} paths '
                     f"({100 * p.count / total:.1f}%) · {mark}</div>{tree_html(p)}</div>")
    wrong = sum(p.count for p in result.patterns if p.pattern not in true_set)
    head = (f"{len(result.patterns)} patterns, {total:,.0f} paths; {100 * wrong / total:.0f}% of them in "
            f"patterns no request took; its top {min(TOP_INFERRED, len(result.patterns))}:")
    return f"<p>{esc(head)}</p><div class=\"pathgrid\">{''.join(cards)}</div>"


def culprits(rankings: dict[str, pd.DataFrame], t0: float) -> str:
    """Per fault window, the first three each diagnoser named (the culprit in bold)."""
    names = [n for n, r in rankings.items() if not r.empty]
    if not names:
        return ""
    base = rankings[names[0]]
    rows = []
    for i, w in base.iterrows():
        cells = [esc(w["node"]), f"{w['start'] - t0:.1f}–{w['stop'] - t0:.1f} s"]
        for n in names:
            r = rankings[n]
            got = r.loc[i, "ranking"] if i in r.index else []
            shown = [f"<b>{esc(h)}</b>" if h == w["node"] else esc(h) for h in list(got)[:3]]
            cells.append(", ".join(shown) or '<span class="no">nobody</span>')
        rows.append(cells)
    label = {n: n if n in ("nesting", "convolution", "linking") else f"NeST {n}" for n in names}
    return ("<h4>Who each diagnoser named in each fault window (first three; the culprit in bold)</h4>"
            + table(["culprit", "window", *[label[n] for n in names]], rows, raw=True, cap=None, sep_col=None))


def run_paths(run: Path, variants: Sequence[str] = (), data=None, t0: float | None = None) -> str:
    """The section's body for one run (the run must have a messages table)."""
    from analysis.paths.versus import ALGORITHMS, chosen_algorithms, run_rows

    _, got = run_rows(run, chosen_algorithms(ALGORITHMS), list(variants), data=data)
    trace: Trace = got["trace"]
    t0 = t0 if t0 is not None else float(trace.messages["t_send"].min()) if len(trace.messages) else 0.0
    parts = [note(f"{len(trace.messages):,} messages reconciled from the run's message trace; "
                  "the black-box algorithms see only them (no request ids); the true paths come from the "
                  "requests table. Each message: sender → receiver and its mean latency; highlighted: the "
                  "delay the receiver adds in the path (summed over its visits, mean over the paths).")]
    for w in trace.warnings[:5]:
        parts.append(f'<p class="note warn">{esc(w)}</p>')
    if trace.truth is not None:
        truth = true_paths(trace)
        parts.append("<h4>The true paths beside what each algorithm inferred</h4>")
        parts.append(side_by_side(truth, got["results"]))
        true_set = {p.pattern for p in truth}
    else:
        true_set = set()
        parts.append(note("The run has no requests table: no true paths to compare with."))
    for name, result in got["results"].items():
        parts.append(details(f"{esc(name)} <span class=\"meta\">its most frequent patterns</span>",
                             inferred(name, result, true_set), open_=True))
    parts.append(culprits(got["rankings"], t0))
    return "\n".join(parts)


def paths_section(ev) -> str:
    """The section for the evaluation's runs that have a message trace ('' when none has)."""
    from analysis.paths.versus import has_messages
    from analysis.render.html.sections import run_name

    runs = [r for r in ev.runs if has_messages(r)]
    if not runs:
        return ""

    def body(run: Path) -> str:
        data = ev.data.get(run)
        try:
            return run_paths(run, ev.variants, data, data.t0 if data is not None else None)
        except UserError as e:   # a damaged trace: said in the section, the rest of the report stands
            return f'<p class="warn">{esc(e)}</p>'

    style = f"<style>{CSS}</style>"
    if len(runs) == 1:
        return style + body(runs[0])
    parts = [style]
    for run in runs[:MAX_RUNS]:
        parts.append(details(esc(run_name(run)), body(run)))
    if len(runs) > MAX_RUNS:
        parts.append(note(f"{len(runs) - MAX_RUNS} more runs with message traces: nestlab report RUN for each."))
    return "\n".join(parts)
