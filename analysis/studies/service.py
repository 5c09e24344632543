"""The service study's analysis half: NeST on every tier host of a multi-tier service, beside the
black-box path algorithms (docs/service.md, docs/blackbox.md). No seed measured a service: no wget
or iperf rows, no comparison with the seeds' network tables, and idle keep-alive connections are not
a network silence. Its report leads with the tiers' latency, the culprit table (which tier each diagnoser names
first per fault kind) and, where the run has messages, the causal paths. Ground truth: the requests a faulted tier holds (`requests`, analysis/labels_requests.py:
request/response traffic has no data direction to follow, and an idle keep-alive connection holds no
request). Diagnosis: whoseturn, NeST reading each connection's turn (docs/diagnosis.md), beside the
thesis's rule and the NeST paper's."""

from __future__ import annotations

from analysis.score.table_layout import Layout
from analysis.studies.base import Study
from analysis.studies.network import STUDY as NETWORK

STUDY = Study(
    name="service",
    variant="whoseturn",
    summary=("whoseturn", "flowdiagnoser:theta=2"),
    report=("whoseturn", *NETWORK.report),
    probe_variant=NETWORK.probe_variant,
    policy="requests",
    layout=Layout(apps=()),
    silence_warning=False,
    lead=("service", "culprit", "paths"),
)
