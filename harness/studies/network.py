"""The network study's lab half: a host's network stack (NeST) on the dumbbell or ECMP, wget and
iperf workloads, the network fault kinds (docs/studies.md)."""

from __future__ import annotations

from harness.studies.base import LabStudy, experiment_of

NETWORK_KINDS = ("ip_drop", "tcp_drop", "app_pause", "path_blackhole", "loss", "server_pause", "link_down")


def _experiment(doc, path, topology, scale, seeds):
    from harness.spec import experiment_from

    return experiment_from(doc, path, topology, scale, seeds)


def _lab():
    from harness.lab.network import NetworkLab

    return NetworkLab


def _kinds(names: tuple[str, ...] | None = NETWORK_KINDS):
    from harness.faults import KINDS

    return {k: v for k, v in KINDS.items() if names is None or k in names}


def _check_runner(exp) -> None:
    from harness.backends import backend_class

    backend_class(exp.topology.backend).check_runner()


STUDY = LabStudy(
    name="network",
    description="a host's network stack under wget and iperf, faults on the routers and hosts",
    claims=lambda doc: True,
    experiment=experiment_of(_experiment, "network", _kinds),
    lab=_lab,
    fault_kinds=_kinds,
    check_runner=_check_runner,
)
