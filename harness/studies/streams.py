"""The streams study's lab half: a stream processing job on Flink (thesis chapter 4), its graph's
throttles and droppers as the fault kinds (docs/streams.md)."""

from __future__ import annotations

from harness.studies.base import LabStudy, experiment_of


def _claims(doc) -> bool:
    from harness.streams.spec import is_streams_doc

    return is_streams_doc(doc)


def _experiment(doc, path, topology, scale, seeds):
    from harness.streams.spec import streams_experiment_from

    if topology is not None:
        raise doc.error(("graph",), "--topology applies to network experiments; this one runs a streams graph")
    return streams_experiment_from(doc, path, scale, seeds)


def _lab():
    from harness.streams.lab import StreamsLab

    return StreamsLab


def _kinds():
    from harness.streams.spec import KINDS

    return KINDS


def _check_runner(exp) -> None:
    from harness.streams.cluster import check_runner

    check_runner()


STUDY = LabStudy(
    name="streams",
    description="a stream processing job on Flink, throttles and droppers on its PEs",
    claims=_claims,
    experiment=experiment_of(_experiment, "streams", _kinds),
    lab=_lab,
    fault_kinds=_kinds,
    check_runner=_check_runner,
    scope="conn",
)
