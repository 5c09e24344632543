"""The fabric study's analysis half (issue 44; docs/fabric.md): which link? Its runs lead with the
fabric view (analysis/fabric/view.py: 007 and NetBouncer ranking links per 10 s window, AC@1/AC@3
per fault kind, link precision and recall, false link alarms per hour), before NeST's accuracy per
module on every host. No seed measured a fabric and its workload is the mesh's iperf connections
alone: no wget or iperf rows, no comparison with the seeds' tables. The mesh's senders
are application-limited and pause between frames, so a silent healthy connection is not a warning."""

from __future__ import annotations

from analysis.score.table_layout import Layout
from analysis.studies.base import Study
from analysis.studies.network import STUDY as NETWORK

STUDY = Study(
    name="fabric",
    variant=NETWORK.variant,
    summary=NETWORK.summary,
    report=NETWORK.report,
    probe_variant=NETWORK.probe_variant,
    layout=Layout(apps=()),   # the mesh's iperf processes count in 'all modules' (no row of their own)
    silence_warning=False,
    lead=("fabric",),
)
