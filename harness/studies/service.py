"""The service study's lab half: a multi-tier service (web, application, cache, database tiers) on
the network lab, NeST on every tier host, its load generator's requests and, with `trace: messages`,
the message trace; the network fault kinds and the tiers' own (delay, tier_pause, slow)."""

from __future__ import annotations

from harness.studies import network
from harness.studies.base import LabStudy, experiment_of


def _claims(doc) -> bool:
    """A network spec with a `service` workload."""
    data = doc.data if isinstance(doc.data, dict) else {}
    workloads = data.get("workloads")
    return isinstance(workloads, list) and any(isinstance(w, dict) and w.get("kind") == "service"
                                               for w in workloads)


STUDY = LabStudy(
    name="service",
    description="a multi-tier service (web, app, cache, db) with NeST on every tier host",
    claims=_claims,
    experiment=experiment_of(network._experiment, "service", lambda: network._kinds(None)),
    lab=network._lab,
    fault_kinds=lambda: network._kinds(None),
    check_runner=network._check_runner,
)
