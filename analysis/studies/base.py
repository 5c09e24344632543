"""A study kind's analysis half (docs/studies.md): how the analysis views a run of that kind, as data
the views read instead of asking "is this streams?". Its lab half (harness.studies) has the same
name, which the run's manifest records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from analysis.score.table_layout import TABLE_3_3, Layout


@dataclass(frozen=True)
class Study:
    """A study kind as the analysis sees it."""

    name: str
    # Default variants: the one of a table, a comparison's baseline, a run's figures and `nestlab top`;
    # those of the end-of-run summary and a suite's pooled table; those of the report (and of
    # `nestlab compare` of black-box runs); with the collector's probes recorded, the lab's probe variant
    # beside them in the summary and the report.
    variant: str
    summary: tuple[str, ...]
    report: tuple[str, ...]
    probe_variant: str | None = None
    # Ground truth: the policy when none is named (None: analysis.labels.DEFAULT_POLICY), and the
    # study's own labelling for every policy (None: the network policies' own; streams: thesis 4.6.3).
    policy: str | None = None
    label: Callable | None = None
    # The accuracy table: its layout's name (analysis.render's table writers by that name: "thesis-3.3"
    # per module type, "thesis-4.3" per processing graph), the rows it shows, the rows of the variant
    # comparison and its breakdown ((section, row, shown as); None: every section and row shown).
    table: str = "thesis-3.3"
    layout: Layout = TABLE_3_3
    compare_rows: tuple[tuple[str, str, str], ...] | None = None
    breakdown_rows: tuple[tuple[str, str, str], ...] = (("Total", "TCP", "TCP"), ("Total", "ip+eth", "ip+eth"),
                                                        ("Total", "all modules", "all modules"))
    # The summary line: the row whose TPR, FPR and PPV head a run's summary, what it calls them, and
    # the application rows whose TPR follows.
    headline_row: str = "TCP"
    scope: str = "TCP"
    app_rows: tuple[str, ...] = ()
    # Health: network health (RTTs, queues, silences of healthy connections) applies; whether a high
    # silence rate is a warning (keep-alive connections are silent by design in a service).
    network_health: bool = True
    silence_warning: bool = True
    # Figures: the diagnosis overview's panels (direction, title); thesis Figure 5.1 (processes,
    # sockets, TCP connections) drawn.
    panels: tuple[tuple[str, str], ...] = (("in", "Inbound"), ("out", "Outbound"))
    module_timeline: bool = True
    # The seeds' tables it is compared with: per-module accuracy (analysis.render.against), per-graph
    # accuracy (against_streams), ablations (paper Table 8); the one `nestlab accuracy` of a suite points at.
    seeds: tuple[str, ...] = ()
    graph_seeds: tuple[str, ...] = ()
    ablation_seeds: tuple[str, ...] = ()
    suite_seed: str | None = None
    # Report sections that come before the accuracy table (by their anchors: "service" per-tier
    # latency, "paths" the causal paths where the run has messages).
    lead: tuple[str, ...] = ()

    def summary_variants(self, probes: bool = False) -> tuple[str, ...]:
        return (*self.summary, *((self.probe_variant,) if probes and self.probe_variant else ()))

    def report_variants(self, probes: bool = False) -> tuple[str, ...]:
        return (*self.report, *((self.probe_variant,) if probes and self.probe_variant else ()))
