"""The streams study's analysis half: StreamsDiagnoser on a stream processing job's connections
(thesis chapter 4), its own ground truth (analysis.labels_streams), thesis Table 4.3's layout (a
row per processing graph) and no network health (docs/streams.md)."""

from __future__ import annotations

from analysis import labels_streams
from analysis.studies.base import Study

VARIANTS = ("streamsdiagnoser", "streamsdiagnoser:engine=on", "flink-backpressure")

STUDY = Study(
    name="streams",
    variant="streamsdiagnoser",
    summary=VARIANTS,   # the thesis's, the lab's engine=on (issue 34) and the engine's own reading
    report=VARIANTS,
    label=labels_streams.label,
    table="thesis-4.3",
    compare_rows=(("Outbound", "all modules", "stream connections"),),
    breakdown_rows=(("Outbound", "all modules", "stream connections"),),
    headline_row="all modules",
    scope="conn",
    network_health=False,
    silence_warning=False,
    panels=(("out", "Stream connections"),),   # one direction: no empty Inbound panel
    module_timeline=False,
    graph_seeds=("thesis-4.3",),
    suite_seed="thesis-4.3",
)
