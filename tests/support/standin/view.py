"""The stand-in study's analysis half: NeST's variant, every module in one row, no seed tables, no
network health."""

from __future__ import annotations

from analysis.score.table_layout import Layout
from analysis.studies.base import Study

STUDY = Study(
    name="standin",
    variant="flowdiagnoser:theta=1",
    summary=("flowdiagnoser:theta=1",),
    report=("flowdiagnoser:theta=1", "peer"),
    policy="window",
    layout=Layout(apps=()),
    headline_row="all modules",
    scope="all",
    network_health=False,
    silence_warning=False,
)
