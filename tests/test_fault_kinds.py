"""A fault kind is one module (docs/faults.md, "Adding a fault kind"): its info, spec fields and rules,
and class, registered once; the runner records the infos in the manifest, and the analysis reads them
from there (rundir.faultkinds), with LEGACY for runs recorded before. A test-only kind
(tests/support/nudge_kind.py), registered into a copy of the registry, goes through spec validation,
scheduling, the manifest, labels and report colours without an edit anywhere else."""

from __future__ import annotations

import importlib
import json
import sys

import numpy as np
import pytest

import harness.runner
from analysis.fault_reach import fault_targets
from analysis.labels import label_run
from analysis.load import load_run_data
from analysis.render.plots import _fault_legend, _fault_windows, default_subgraphs, fault_colour
from harness.faults import KINDS, kinds_used
from harness.faults.spec import FaultSpec
from harness.spec import Spec, footprint, plan_faults, spec_model
from harness.streams.spec import KINDS as STREAMS_KINDS
from harness.studies import load_spec
from harness.yamlload import SpecError, YamlDoc
from rundir.faultkinds import LEGACY, FaultKindInfo, kinds_of
from rundir.layout import RunDir
from rundir.manifest import read_manifest, validate_manifest
from rundir.runs import open_run
from tests.support.env import REPO, write
from tests.support.nudge_kind import Nudge
from tests.support.runs import IPERF_UP, RunBuilder

# Kinds added after the manifest recorded the infos of a run's kinds: no run needs them from LEGACY.
ADDED_SINCE = {"delay", "tier_pause", "slow", "link_down"}
TOPO = REPO / "topologies" / "dumbbell.yaml"
SPEC = f"""\
name: t
topology: {TOPO}
duration: 30s
monitor: site1n1
workloads:
  - {{kind: iperf, host: site1n1, server: site2n1}}
  - {{kind: iperf, host: site1n1, server: site2n2}}
faults:
  - {{kind: nudge, target: {{workload: 0}}, strength: 3, schedule: {{at: [5s], duration: 2s}}}}
  - {{kind: tcp_drop, at: x1, target: {{workload: 1}}, schedule: {{at: [5s], duration: 2s}}}}
"""


def test_each_kind_is_one_module_declaring_its_info_spec_and_class():
    for registry, package in ((KINDS, "harness.faults"), (STREAMS_KINDS, "harness.streams")):
        for name, cls in registry.items():
            module = importlib.import_module(f"{package}.{name}")
            assert cls.__module__ == module.__name__ and module.INFO is cls.info and cls.info.name == name
            # The kinds older runs hold read the same from a new run's manifest as from LEGACY.
            assert name in ADDED_SINCE or cls.info == LEGACY[name], name
            if registry is KINDS:
                assert issubclass(cls.spec, FaultSpec) and cls.spec.__module__ == module.__name__
    assert set(LEGACY) == (set(KINDS) | set(STREAMS_KINDS)) - ADDED_SINCE


# ----------------------------------------------------------------------------- a new kind, from one module


def _parse(tmp_path, text, model):
    doc = YamlDoc(write(tmp_path, "spec.yaml", text))
    return doc, doc.parse(model)


def test_a_new_kind_goes_through_spec_validation_and_scheduling(tmp_path):
    kinds = {**KINDS, "nudge": Nudge}
    model = spec_model(kinds)
    doc, spec = _parse(tmp_path, SPEC, model)
    nudge, drop = spec.faults
    assert (nudge.kind, nudge.strength, nudge.node(spec)) == ("nudge", 3, "site1n1")
    assert footprint(spec, nudge).workloads == {(0, None)} and not footprint(spec, nudge).touches(footprint(spec, drop))
    assert [w.spec_index for w in plan_faults(spec, doc, 1)] == [0, 1]   # different targets: both at 5 s
    # Its mistakes are one line naming file, line and field, like every kind's; its fields are refused
    # on other kinds by name, and the other kinds' on it.
    for text, line, words in [
        (SPEC.replace("strength: 3, ", ""), 9, "faults[0]: nudge needs 'strength', 1 to 10"),
        (SPEC.replace("strength: 3", "strength: 11"), 9, "faults[0].strength: input should be less than or equal to 10"),
        (SPEC.replace("strength: 3", "strength: 3, rate: 5%"), 9, "faults[0]: 'rate' applies to loss only"),
        (SPEC.replace("at: x1,", "at: x1, strength: 2,"), 10, "faults[1]: 'strength' applies to nudge only"),
    ]:
        with pytest.raises(SpecError) as e:
            _parse(tmp_path, text, model)
        assert str(e.value).startswith(f"{tmp_path / 'spec.yaml'}:{line}: {words}"), str(e.value)
    # The registry itself is untouched: the lab's spec does not know the kind.
    with pytest.raises(SpecError, match=r"faults\[0\]\.kind: expected 'ip_drop', .*'server_pause'"):
        _parse(tmp_path, SPEC, Spec)


def _nudged_run(tmp_path, recorded: dict | None):
    """A run whose app (with a socket and a TCP connection below it) a nudge silenced from 2 s to 3 s."""
    b = RunBuilder(tmp_path / "r", 50, workloads=[IPERF_UP])
    app = b.module("app", "app:50", {"pid": 50}, name="iperf -c")
    sock = b.module("socket", "sock:50:3:7", {"pid": 50})
    tcp = b.module("tcp", "tcp:7", {"inode": 7, "pid": 50, "dport": 5001})
    b.edge(app, sock)
    b.edge(sock, tcp)
    b.process(50, 0, "iperf -c 10.0.2.2")
    tm = np.full(50, 5.0)
    tm[21:30] = 0
    for m in (app, sock, tcp):
        b.counters(m, "out", tm)
        b.counters(m, "in", 0)
    b.fault("nudge", app, start=2.05, end=3.05, target={"pid": 50, "module_key": "app:50"})
    path = b.write()
    if recorded is not None:
        rd = RunDir.open(path)
        rd.update_manifest(fault_kinds=recorded)
    return load_run_data(open_run(path)), (app, sock, tcp)


def test_a_new_kind_reaches_labels_and_report_colours_through_the_manifest(tmp_path):
    spec = _parse(tmp_path, SPEC, spec_model({**KINDS, "nudge": Nudge}))[1]
    recorded = kinds_used(spec.faults, {**KINDS, "nudge": Nudge})   # what the runner writes
    assert list(recorded) == ["nudge", "tcp_drop"] and recorded["nudge"]["colour"] == "#123456"
    data, (app, sock, tcp) = _nudged_run(tmp_path / "with", recorded)
    assert data.fault_kinds["nudge"] == Nudge.info
    assert not any("not one this nestlab knows" in w for w in data.warnings), data.warnings
    assert fault_colour(data, "nudge", "#999999") == "#123456"
    assert [p.get_label() for p in _fault_legend(data, _fault_windows(data))] == ["nudge (test) fault"]
    assert fault_targets(data, "nudge", app, data.t0, data.t0 + 5) == {app, sock}   # its `children`
    assert default_subgraphs(data) == [app]
    lab = label_run(data)
    assert set(lab.loc[lab["actual"] & (lab["fault"] == 1), "module"]) == {app, sock}

    # The same run without the kind's info (a reader that does not know it): the fault is left out.
    data, (app, *_) = _nudged_run(tmp_path / "without", None)
    assert any("its kind 'nudge' is not one this nestlab knows" in w for w in data.warnings)
    assert fault_colour(data, "nudge", "#999999") == "#999999" and default_subgraphs(data) != []
    lab = label_run(data)
    assert not (lab["fault"] == 1).any()


# ----------------------------------------------------------------------------- the manifest


def test_kind_infos_round_trip_through_the_manifest():
    info = FaultKindInfo("nudge", colour="#123456", label="nudge (test)", order=-1, children="socket",
                         stalls={"strength": 3})
    m = validate_manifest({"format_version": 5, "status": "complete", "fault_kinds": {"nudge": info.as_json()}})
    assert m.fault_kinds["nudge"] == info and m.as_json()["fault_kinds"]["nudge"] == info.as_json()
    assert kinds_of(m)["nudge"] == info and kinds_of(m)["ip_drop"] is LEGACY["ip_drop"]
    assert kinds_of(None) == LEGACY and validate_manifest({"format_version": 5, "status": "running"}).fault_kinds is None
    assert info.culprit({"strength": 3}) and not info.culprit({"strength": True}) and not info.culprit("x")
    assert LEGACY["throttle"].culprit({"rate": 0}) and not LEGACY["throttle"].culprit({"rate": False})
    assert not LEGACY["dropper"].culprit({"on": True}) and LEGACY["ip_drop"].culprit({})


def _no_run(body, teardown, logs):
    return 0   # the run's outline, not run: only the manifest's first write happens


def test_the_network_runner_records_the_kinds_its_spec_uses(tmp_path, monkeypatch):
    monkeypatch.setattr(harness.runner, "guarded_run", _no_run)
    run = harness.runner.Repetition(load_spec(REPO / "experiments" / "net_fault.yaml"), 0, tmp_path)
    assert run.execute() == 0
    recorded = json.loads((run.rd.path / "manifest.json").read_text())["fault_kinds"]
    assert recorded == {"ip_drop": LEGACY["ip_drop"].as_json(), "tcp_drop": LEGACY["tcp_drop"].as_json()}
    assert read_manifest(run.rd.path).fault_kinds == {"ip_drop": KINDS["ip_drop"].info,
                                                      "tcp_drop": KINDS["tcp_drop"].info}


def test_the_streams_runner_records_the_kinds_its_spec_uses(tmp_path, monkeypatch):
    monkeypatch.setattr(harness.runner, "guarded_run", _no_run)   # the one run loop, on the streams lab
    spec = write(tmp_path, "s.yaml", f"name: s\ngraph: {REPO / 'graphs' / 'mergetree.yaml'}\nduration: 60s\nfaults:\n"
                 "  - {kind: throttle, operator: n10, rate: 0, schedule: {at: [10s], duration: 5s}}\n")
    run = harness.runner.Repetition(load_spec(spec), 0, tmp_path / "results")
    assert run.execute() == 0
    assert read_manifest(run.rd.path).fault_kinds == {"throttle": STREAMS_KINDS["throttle"].info}


def test_the_worked_example_of_docs_faults_is_a_kind(tmp_path, monkeypatch):
    """docs/faults.md's example module, as written there, registers and validates like any kind."""
    import importlib.util

    doc = (REPO / "docs" / "faults.md").read_text().split("### A worked example", 1)[1]
    source = doc.split("```python\n", 1)[1].split("```", 1)[0]
    path = write(tmp_path, "client_stop.py", source)
    module_spec = importlib.util.spec_from_file_location("client_stop_example", path)
    module = importlib.util.module_from_spec(module_spec)
    monkeypatch.setitem(sys.modules, module_spec.name, module)   # imported as a module is (its annotations resolve)
    module_spec.loader.exec_module(module)
    kinds = {**KINDS, "client_stop": module.ClientStop}
    text = SPEC.replace("kind: nudge, target: {workload: 0}, strength: 3,", "kind: client_stop, target: {workload: 0},")
    doc_, spec = _parse(tmp_path, text, spec_model(kinds))
    assert spec.faults[0].group is None and footprint(spec, spec.faults[0]).workloads == {(0, None)}
    assert kinds_used(spec.faults, kinds)["client_stop"] == module.INFO.as_json()
    with pytest.raises(SpecError, match=r"faults\[1\]: 'group' applies to client_stop only"):
        _parse(tmp_path, text.replace("at: x1,", "at: x1, group: false,"), spec_model(kinds))
