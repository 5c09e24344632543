"""Study kinds (docs/studies.md): the lab's registry picks a spec's kind and the manifest records it;
older runs get it derived once, in rundir; the analysis' views dispatch from it (a service run gets
the service view: no wget/iperf rows, no seed table, no silence warning, its own ground truth, its
report led by the tiers' latency); and a fourth kind is one package and one line per registry."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import analysis.studies
import harness.studies
from analysis.pipeline import evaluate
from analysis.render.html import build_report
from analysis.render.writers import write_accuracy
from harness import ledger
from harness.runner import Repetition
from harness.yamlload import SpecError
from rundir.errors import UserError
from rundir.handmade import make_run
from rundir.layout import RunDir
from rundir.manifest import validate_manifest
from tests.support.env import REPO, write

GRAPH = REPO / "graphs" / "mergetree.yaml"


# ----------------------------------------------------------------------------- the lab half


def test_each_spec_is_claimed_by_its_study_kind_and_the_experiment_carries_the_name(tmp_path):
    assert harness.studies.load_spec(REPO / "experiments" / "net_fault.yaml").study == "network"
    from harness.suite import load_suite

    kinds = {e.spec.name: e.study for e in load_suite(REPO / "experiments" / "service.yaml").experiments}
    assert set(kinds.values()) == {"service"}, kinds
    streams = write(tmp_path, "s.yaml", f"name: s\ngraph: {GRAPH}\nduration: 60s\nfaults:\n"
                    "  - {kind: throttle, operator: n10, rate: 0, schedule: {at: [10s], duration: 5s}}\n")
    exp = harness.studies.load_spec(streams)
    assert exp.study == "streams" and harness.studies.lab_study(exp.study).scope == "conn"


def test_a_study_kind_refuses_a_fault_kind_it_does_not_allow(tmp_path):
    from harness.studies.base import experiment_of

    class Exp:
        spec = type("S", (), {"faults": [type("F", (), {"kind": "ip_drop"})(), type("F", (), {"kind": "slow"})()]})()

    doc = harness.studies.YamlDoc(write(tmp_path, "x.yaml", "faults:\n  - {kind: ip_drop}\n  - {kind: slow}\n"))
    load = experiment_of(lambda *a: Exp(), "network", harness.studies.lab_study("network").fault_kinds)
    with pytest.raises(SpecError, match=r"x.yaml:3: faults\[1\].kind: a network study's fault kinds: ip_drop, "):
        load(doc, tmp_path / "x.yaml")
    assert set(harness.studies.lab_study("service").fault_kinds()) >= {"ip_drop", "delay", "tier_pause", "slow"}
    assert set(harness.studies.lab_study("streams").fault_kinds()) == {"throttle", "dropper"}


def test_an_unknown_study_kind_is_one_line():
    with pytest.raises(UserError, match=r"unknown study kind 'galaxy' \(known: streams, service, fabric, network\)"):
        harness.studies.lab_study("galaxy")
    with pytest.raises(UserError, match=r"unknown study kind 'galaxy' \(known: network, streams, service, fabric\)"):
        analysis.studies.study("galaxy")


# ----------------------------------------------------------------------------- the manifest's name


@pytest.mark.parametrize("manifest, kind", [
    ({"backend": "mininet", "spec": {"workloads": [{"kind": "wget"}]}}, "network"),
    ({"backend": "ssh", "spec": {"workloads": [{"kind": "iperf"}, {"kind": "service"}]}}, "service"),
    ({"backend": "flink"}, "streams"),
    ({"backend": "flink", "study": "galaxy"}, "galaxy"),   # a recorded name wins
    ({"backend": "mininet", "spec": {"workloads": [{"kind": "mesh"}]}}, "fabric"),
    # fabric runs recorded before the fabric study kind said network
    ({"backend": "mininet", "study": "network", "spec": {"workloads": [{"kind": "mesh"}]}}, "fabric"),
    ({"backend": "mininet", "study": "network", "spec": {"workloads": [{"kind": "iperf"}]}}, "network"),
])
def test_older_runs_get_their_study_kind_derived_from_the_manifest(manifest, kind):
    from rundir.manifest import study_of

    assert study_of(validate_manifest({"format_version": 7, "status": "complete", **manifest})) == kind
    assert study_of(None) is None


# ----------------------------------------------------------------------------- the service view


@pytest.fixture(scope="module")
def service_run(tmp_path_factory):
    from tests.test_paths_versus import service_run as make

    return make(tmp_path_factory.mktemp("svc") / "blackbox" / "r0")


def test_a_service_run_gets_the_service_view(service_run, tmp_path):
    ev = evaluate([service_run], ["flowdiagnoser:theta=2", "nest-cf"], keep=True)
    assert ev.study.name == "service" and ev.policy == "requests"   # its ground truth by default (issue 42)
    md, _ = write_accuracy(ev, tmp_path)
    rows = set(pd.read_csv(tmp_path / "accuracy.csv")["row"])
    assert rows == {"socket", "TCP", "ip+eth", "all modules"}   # no wget or iperf rows
    assert "| wget" not in md and "s:iperf" not in md
    page = build_report(ev, tmp_path / "report.html", draw=False).read_text()
    assert page.index('id="service"') < page.index('id="paths"') < page.index('id="accuracy"')
    assert "thesis-3.3" not in page and "paper-table-6" not in page and "Service tiers: latency" in page
    # a fault kind's colour comes from its info as the run recorded it, not from a list of names
    assert ".fault.delay { border-left-color: #8c6bb1; }" in page and ".fault.ip_drop {" in page   # LEGACY's too


def test_a_network_run_keeps_the_network_view(tmp_path):
    run, *_ = make_run(tmp_path / "net" / "r0")
    ev = evaluate([run], ["flowdiagnoser:theta=2", "nest-cf"], keep=True)
    assert ev.study.name == "network" and ev.policy == "impact"
    write_accuracy(ev, tmp_path / "out")
    assert {"wget", "iperf", "s:wget", "s:iperf"} <= set(pd.read_csv(tmp_path / "out" / "accuracy.csv")["row"])
    page = build_report(ev, tmp_path / "report.html", draw=False).read_text()
    assert 'id="service"' not in page and 'data-seed="thesis-3.3"' in page


def test_keep_alive_silences_are_no_warning_in_a_service_run(tmp_path, monkeypatch):
    """The same health figures; only a network run calls a high silence rate a warning (here any
    rate is high: SILENCE_WARN below zero)."""
    import analysis.health
    from analysis.load import load_run_data

    monkeypatch.setattr(analysis.health, "SILENCE_WARN", -1.0)
    run, *_ = make_run(tmp_path / "x" / "r0")
    net = analysis.health.network_health(load_run_data(run))
    RunDir.open(run).update_manifest(study="service")
    svc = analysis.health.network_health(load_run_data(run))
    assert net.silence_rate == svc.silence_rate is not None
    assert any("silence rate" in w for w in net.warnings) and not any("silence rate" in w for w in svc.warnings)


# ----------------------------------------------------------------------------- a fourth study kind


@pytest.fixture
def standin(monkeypatch, tmp_path):
    """The stand-in package's two halves, one line in each registry (first in the lab's: the
    network kind claims every document no kind before it claims)."""
    from tests.support.standin import lab, view

    monkeypatch.setattr(ledger, "LEDGER_DIR", tmp_path / "ledgers")
    monkeypatch.setattr(harness.studies, "STUDIES", {"standin": lambda: lab.STUDY, **harness.studies.STUDIES})
    monkeypatch.setitem(analysis.studies.STUDIES, "standin", lambda: view.STUDY)


def test_a_fourth_study_kind_is_one_package_and_one_registry_line(standin, tmp_path):
    spec = write(tmp_path, "box.yaml", "standin: box\n")
    exp = harness.studies.load_spec(spec)
    run = Repetition(exp, 0, tmp_path / "results")
    assert run.execute() == 0
    m = json.loads((run.rd.path / "manifest.json").read_text())
    assert m["study"] == "standin" and m["status"] == "complete" and m["counts"]["faults"] == 1
    # its analysis half's view of a run of its kind: its variant and policy, its rows, no network health
    net, *_ = make_run(tmp_path / "standin" / "r0")
    RunDir.open(net).update_manifest(study="standin")
    assert analysis.studies.name_of_run(net) == "standin"
    ev = evaluate([net], [analysis.studies.of_runs([net]).variant], keep=True)
    assert ev.study.name == "standin" and ev.policy == "window" and not ev.health
    write_accuracy(ev, tmp_path / "out")
    assert set(pd.read_csv(tmp_path / "out" / "accuracy.csv")["row"]) == {"socket", "TCP", "ip+eth", "all modules"}
    page = build_report(ev, tmp_path / "report.html", draw=False).read_text()
    assert "Not a network run (standin runs)" in page and "all TPR / FPR / PPV (flowdiagnoser:theta=1)" in page
