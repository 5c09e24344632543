"""The report's section on a service's tiers (docs/service.md): per run, each tier's hop latency in
quiet time (p50, p90, p99, max) and errors, the load it took and its warnings, from the run's
`requests` table (analysis.service_health, the same figures as the end-of-run summary's "Service
health"). A service run's report leads with it (analysis.studies.service)."""

from __future__ import annotations

from analysis.render.html.html import bullets, details, esc, note, table
from analysis.service_health import service_health

HEADER = ["Tier", "Hops", "Errors", "p50 ms", "p90 ms", "p99 ms", "max ms"]
MAX_RUNS = 12   # runs given a table in a report of several


def _ms(v: float) -> str:
    return "" if v != v else f"{v:.2f}"


def _run(run, data) -> str:
    h = service_health(run, data)
    if h is None:
        return note("No requests recorded (a run without a service workload, or recorded before the requests table).")
    rows = [[esc(r.tier), str(r.hops), str(r.errors), _ms(r.p50_ms), _ms(r.p90_ms), _ms(r.p99_ms), _ms(r.max_ms)]
            for r in h.tiers.itertuples()]
    load = h.load
    said = [f"requests by path: {', '.join(f'{k} {v}' for k, v in sorted(h.types.items())) or 'none'}"]
    if load.get("offered_rate"):
        said.insert(0, f"offered {load['offered_rate']:g}/s, answered {load.get('achieved_rate', 0):g}/s, "
                       f"refused {load.get('refused', 0)}, errors {load.get('errors', 0)}")
    parts = [table(HEADER, rows, raw=True, cap=None, sep_col=None, cls="service"),
             note("Hop latency per tier in quiet time (outside every fault window and its recovery); "
                  + "; ".join(said) + ".")]
    if h.warnings:
        parts.append(bullets(h.warnings))
    return "\n".join(parts)


def service_section(ev) -> str:
    """Per-tier latency of the evaluation's runs whose data was kept ('' when none)."""
    from analysis.render.html.sections import run_name

    runs = [r for r in ev.runs if r in ev.data]
    if not runs:
        return ""
    if len(runs) == 1:
        return _run(runs[0], ev.data[runs[0]])
    parts = [details(esc(run_name(r)), _run(r, ev.data[r])) for r in runs[:MAX_RUNS]]
    if len(runs) > MAX_RUNS:
        parts.append(note(f"{len(runs) - MAX_RUNS} more runs: nestlab report RUN for each."))
    return "\n".join(parts)


def culprit_section(ev) -> str:
    """The culprit table (analysis.score.culprit) of the evaluation's runs whose data was kept: which
    tier each diagnoser names first per fault kind ('' when no run has a fault window with a tier)."""
    from analysis.score.culprit import ALGORITHMS, NOTE, compare_culprit, culprit_cells

    runs = [r for r in ev.runs if r in ev.data]
    if not runs:
        return ""
    per, tab, notes = compare_culprit(runs, ev.variants, ALGORITHMS, data=ev.data)
    if tab.empty:
        return ""
    heads, rows = culprit_cells(tab)
    return "\n".join([table(heads, [[esc(c) for c in r] for r in rows], raw=True, cap=None, sep_col=None,
                             cls="culprit"), note(NOTE), *(note(n) for n in notes)])
