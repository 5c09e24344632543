"""The fabric study's lab half (issue 44; docs/fabric.md): which link? A fat-tree of routers hashing
every 5-tuple over equal-cost paths, a `mesh` of application-limited connections between its pods,
NeST on every host, NetBouncer's probers, and link faults (`loss` with `link`, `link_down`). It is
the network lab (harness/lab/network.py: the fabric's part, harness/lab/fabric.py, joins it when the
topology is a fat-tree) with the network study's fault kinds; what differs is how the analysis views
its runs (analysis/studies/fabric.py: per link, not per module)."""

from __future__ import annotations

from harness.studies import network
from harness.studies.base import LabStudy, experiment_of


def _claims(doc) -> bool:
    """A network spec with a `mesh` workload."""
    data = doc.data if isinstance(doc.data, dict) else {}
    workloads = data.get("workloads")
    return isinstance(workloads, list) and any(isinstance(w, dict) and w.get("kind") == "mesh" for w in workloads)


STUDY = LabStudy(
    name="fabric",
    description="a fat-tree fabric with a mesh of connections, link faults, 007 and NetBouncer beside NeST",
    claims=_claims,
    experiment=experiment_of(network._experiment, "fabric", network._kinds),
    lab=network._lab,
    fault_kinds=network._kinds,
    check_runner=network._check_runner,
)
