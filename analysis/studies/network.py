"""The network study's analysis half: NeST on a host's network stack, scored in thesis Table 3.3's
layout against the seeds' tables (thesis-3.3, paper-table-6, paper-table-8)."""

from __future__ import annotations

from analysis.studies.base import Study

STUDY = Study(
    name="network",
    variant="flowdiagnoser:theta=2",              # the thesis's NeST (Θ = 2)
    summary=("flowdiagnoser:theta=2",),
    report=("flowdiagnoser:theta=2", "nest-cf"),  # the two rule systems the seeds measured
    probe_variant="flowdiagnoser:probe=on",       # the lab's own, for runs recorded with probes (docs/probes.md)
    app_rows=("iperf", "wget"),
    seeds=("thesis-3.3", "paper-table-6"),
    ablation_seeds=("paper-table-8",),
    suite_seed="thesis-3.3",
)
