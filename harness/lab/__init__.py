"""The lab kinds the run loop (harness.runner.Repetition) composes, by the experiment they run.

    base.py      the interface: Lab (what the loop asks), Injection and FaultRow, FaultSkipped
    network.py   NetworkLab: a topology (Mininet or SSH testbed nodes), workloads, NeST's collector, faults
    harness/streams/lab.py   StreamsLab: a Flink cluster, the graph's job, the streams collector, throttles

LABS maps an experiment's type (what harness.spec.load_spec gives) to a loader of its lab's class, as
harness.backends.BACKENDS maps a backend's name; the loaders import on call, so that importing this
registry imports no lab. Adding a lab kind: a Lab subclass in a module of its own and its line here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.spec import Experiment
from harness.streams.spec import StreamsExperiment

if TYPE_CHECKING:
    from harness.lab.base import Lab


def _network() -> type[Lab]:
    from harness.lab.network import NetworkLab

    return NetworkLab


def _streams() -> type[Lab]:
    from harness.streams.lab import StreamsLab

    return StreamsLab


LABS: dict[type, Callable[[], type[Lab]]] = {
    Experiment: _network,
    StreamsExperiment: _streams,
}


def lab_class(exp: object) -> type[Lab]:
    """The lab kind that runs experiment `exp`."""
    try:
        loader = LABS[type(exp)]
    except KeyError:
        raise TypeError(f"no lab kind runs a {type(exp).__name__} (harness.lab.LABS)") from None
    return loader()
