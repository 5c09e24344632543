"""The report's section on a fabric's links (issue 44; docs/fabric.md): 007 and NetBouncer ranking the
links per 10 s window of the runs, AC@1/AC@3 per fault kind beside a random guess, link precision
and recall, false link alarms per hour in the control runs (analysis/fabric/view.py). A fabric run's
report leads with it (analysis.studies.fabric)."""

from __future__ import annotations

from analysis.fabric.view import ACCURACY_HEADER, ALARMS_HEADER, accuracy_rows, alarm_rows, fabric_view, title
from analysis.render.html.html import esc, note, table
from rundir.errors import UserError


def fabric_section(ev) -> str:
    """The link tables of the evaluation's fabric runs ('' when none has its fabric.json)."""
    try:
        view = fabric_view([str(r) for r in ev.runs])
    except UserError:
        return ""
    return "\n".join([note(title(view) + "; AC@k: the faulty link among the first k ranked."),
                      table(ACCURACY_HEADER, [[esc(c) for c in r] for r in accuracy_rows(view)], raw=True, cap=None,
                            cls="fabric"),
                      table(ALARMS_HEADER, [[esc(c) for c in r] for r in alarm_rows(view)], raw=True, cap=None,
                            sep_col=None, cls="fabric")])
