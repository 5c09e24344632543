"""The manifest's one schema (rundir.manifest): what the runner writes fits it and round-trips through
it unchanged, the writer refuses what does not fit, the reader says in one line what is wrong, and
older and newer manifests still read."""

from __future__ import annotations

import json
import re

import pytest

from analysis.health import SILENCE_WARN, fault_spans, network_health
from analysis.load import load_run_data
from harness.clean import _mark_interrupted
from rundir.layout import RunDir
from rundir.manifest import Manifest, ManifestError, RunHealth, read_manifest, validate_manifest
from rundir.runs import open_run
from tests.support.env import REPO
from tests.support.manifests import FORMAT2, FORMAT3, runner_manifests
from tests.support.runs import RunBuilder, make_run

SSH_TOPOLOGY = REPO / "topologies" / "dumbbell-ssh.yaml"


def _old_writer(data: dict) -> str:
    """What RunDir.write_manifest wrote before the schema: the file format must not change."""
    return json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"


# ----------------------------------------------------------------------------- what the runner writes


@pytest.mark.parametrize("topology", [None, SSH_TOPOLOGY], ids=["mininet", "ssh"])
def test_every_write_of_the_runner_round_trips(tmp_path, topology):
    stages = []
    for stage, data in runner_manifests(topology=topology):
        stages.append(stage)
        rd = RunDir(tmp_path, data)
        rd.write_manifest()
        assert rd.manifest_path.read_text() == _old_writer(data), stage   # written as given, byte for byte
        m = read_manifest(tmp_path)
        assert m.as_json() == data, stage                                   # nothing lost, nothing added
        assert Manifest.model_validate(m.as_json()).as_json() == data
    assert stages == ["start", "setup", "t0", "end", "health"]
    assert m.status == "complete" and m.t0 == 3587.66233503 and m.spec.duration == 60.0
    assert m.spec.workloads[0].kind == "wget" and m.spec.isolation.recovery == "auto"
    assert m.planned_faults and all(w.recovery == pytest.approx(w.duration + 1) for w in m.planned_faults)
    assert m.health.busy == 1458 and m.counts.faults == 7
    bottleneck = m.link_model[3]
    assert (bottleneck.a, bottleneck.b, bottleneck.bw, bottleneck.queue) == ("x1", "x2", 100e6, 50)
    if topology is None:
        assert m.backend == "mininet" and m.nodes is None and m.clock_offsets_end is None
        assert bottleneck.ends["x1"].limit == 50 and bottleneck.ends["x1"].offloads["tso"] == "off"
        assert m.versions["mininet"] == "2.3.0"
    else:
        assert m.backend == "ssh" and m.monitor.control_interface == "eth0"
        assert m.nodes["x2"].interfaces == ["x2-eth0", "x2-eth1", "x2-eth2"] and m.nodes["x2"].port == 22
        assert m.clock_offsets_end.nodes["x1"].method == "command server"
        assert bottleneck.shaped_by.startswith("the testbed") and bottleneck.ends == {}
        assert m.versions["runner"] == {"kernel": "6.8.0", "python": "3.12.3"}


def test_a_recorded_run_round_trips(tmp_path):
    data = json.loads(FORMAT3.read_text())
    m = read_manifest(FORMAT3)
    assert m.as_json() == data
    RunDir(tmp_path, data).write_manifest()          # rewritten as the runner wrote it
    assert (tmp_path / "manifest.json").read_text() == FORMAT3.read_text()
    assert m.format_version == 3 and m.experiment == "net_fault" and m.monitor.interface == "site1n1-eth0"
    assert m.topology.addresses["x1"][3].name == "x1-eth3" and m.clock_offsets.nodes["x2"].samples == 0
    assert m.health.silence_rate == pytest.approx(0.004115, abs=1e-6)


def test_every_documented_key_is_in_the_schema():
    doc = (REPO / "docs" / "run-format.md").read_text()
    table = doc.split("## manifest.json", 1)[1].split("\n## ", 1)[0]
    keys = {k for line in table.splitlines() if line.startswith("| `")
            for k in re.findall(r"`([a-z_0-9]+)`", line.split("|")[1])}
    assert len(keys) > 25
    assert keys <= set(Manifest.model_fields), keys - set(Manifest.model_fields)
    assert {"format_version", "link_model", "health", "planned_faults", "clock_offsets_end"} <= keys


def test_the_health_record_is_the_analysis_health(tmp_path):
    run, *_ = make_run(tmp_path / "r0")
    h = network_health(load_run_data(run))
    assert type(h) is RunHealth and set(h.as_dict()) == set(RunHealth.model_fields)
    assert h.silence_threshold == SILENCE_WARN


# ----------------------------------------------------------------------------- older and newer runs


def test_a_format_2_manifest_reads(tmp_path):
    data = json.loads(FORMAT2.read_text())
    assert "link_model" not in data and "health" not in data and "isolation" not in data["spec"]
    m = read_manifest(FORMAT2)
    assert m.as_json() == data
    assert m.format_version == 2 and m.link_model is None and m.health is None
    assert [w.recovery for w in m.planned_faults] == [None] * 7
    assert m.spec.isolation.recovery == "auto" and m.spec.isolation.overlap is False   # the defaults
    # and the analysis reads a run with it
    path, _, _ = make_run(tmp_path / "r")
    (path / "manifest.json").write_text(json.dumps({**data, "t0": 1000.0}))
    info = open_run(path)
    assert info.format_version == 2 and any("older format_version 2" in w for w in info.warnings)
    assert not any("manifest" in w for w in info.warnings)
    assert info.monitor.host == "site1n1" and info.experiment == "net_fault"
    spans = fault_spans(load_run_data(info))
    assert [round(b - a, 6) for a, b in spans] == [round(2 * 0.75 + 1, 6), round(2 * 0.45 + 1, 6)]   # auto


def test_format_1_and_unknown_keys_read(tmp_path):
    data = {"format_version": 1, "status": "complete", "synthetic": True,
            "monitor": {"host": "h1", "interface": "h1-eth0", "vlan": 7},
            "spec": {"workloads": [{"kind": "wget", "direction": "download", "mirror": "x"}], "suites": ["a"]},
            "link_model": [{"a": "x1", "b": "x2", "ends": {"x1": {"interface": "x1-eth3", "ecn": True}}}]}
    m = validate_manifest(data)
    assert m.as_json() == data                       # a newer run's keys are kept where they are
    assert m.monitor.model_extra == {"vlan": 7} and m.spec.workloads[0].kind == "wget"


# ----------------------------------------------------------------------------- what does not fit


@pytest.mark.parametrize("data, message", [
    ({"status": "complete"}, "format_version: Field required"),
    ({"format_version": 3}, "status: Field required"),
    ({"format_version": 3, "status": "complete", "spec": {"duration": "soon"}},
     "spec.duration: Input should be a valid number, unable to parse string as a number, got 'soon'"),
    ({"format_version": 3, "status": "complete", "planned_faults": [{"spec_index": 0, "start": 1.0}]},
     "planned_faults.0.duration: Field required"),
    ({"format_version": 3, "status": "complete", "t0": "x", "end_mono": "y"}, "t0: Input should be a valid number"),
    ([1, 2], "the top level: Input should be a valid dictionary"),
])
def test_a_malformed_manifest_is_one_clear_line(tmp_path, data, message):
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError) as e:
        read_manifest(tmp_path)
    text = str(e.value)
    assert "\n" not in text and text.startswith(f"{tmp_path / 'manifest.json'}: malformed: ") and message in text
    if "end_mono" in json.dumps(data):
        assert text.endswith("(and 1 more)")


def test_open_run_warns_about_a_malformed_manifest_in_one_line_and_goes_on(tmp_path):
    path, _, _ = make_run(tmp_path / "r")
    good = open_run(path)
    assert isinstance(good.manifest, Manifest) and not any("manifest" in w for w in good.warnings)
    (path / "manifest.json").write_text(json.dumps({"format_version": 3, "status": "complete", "t0": "late"}))
    info = open_run(path)
    (warning,) = [w for w in info.warnings if "manifest" in w]
    assert warning == ("manifest.json malformed: t0: Input should be a valid number, unable to parse string as a "
                       "number, got 'late'; workloads and fault plan unknown")
    assert info.manifest is None and info.status == "unknown" and info.spec.workloads == []
    assert load_run_data(info).t0 == 1000.0    # the first snapshot
    (path / "manifest.json").write_text("{not json")
    (warning,) = [w for w in open_run(path).warnings if "manifest" in w]
    assert warning.startswith("manifest.json unreadable (Expecting property name")


def test_the_writer_refuses_what_does_not_fit_and_keeps_the_last_good_manifest(tmp_path):
    rd = RunDir(tmp_path, {"format_version": 3, "status": "running", "run_id": "r0"})
    rd.write_manifest()
    before = rd.manifest_path.read_text()
    rd.manifest.update(status="complete", counts={"snapshots": "many"})
    with pytest.raises(ManifestError, match=r"manifest.json: malformed: counts.snapshots: Input should be a valid "
                                            r"integer"):
        rd.write_manifest()
    assert rd.manifest_path.read_text() == before
    assert not rd.manifest_path.with_suffix(".json.tmp").exists()


# ----------------------------------------------------------------------------- nestlab cleanup's rewrite


def test_cleanup_marks_a_running_manifest_interrupted_through_the_writer(tmp_path):
    _, running = next((s, d) for s, d in runner_manifests() if s == "t0")
    (tmp_path / "manifest.json").write_text(_old_writer(running))
    _mark_interrupted(tmp_path, "runner died; cleaned up by `nestlab cleanup`")
    expected = {**running, "status": "interrupted", "reason": "runner died; cleaned up by `nestlab cleanup`"}
    assert (tmp_path / "manifest.json").read_text() == _old_writer(expected)
    assert read_manifest(tmp_path).status == "interrupted"

    done = RunBuilder(tmp_path / "done", 3).write()
    text = (done / "manifest.json").read_text()
    _mark_interrupted(done, "x")                     # complete: left alone
    assert (done / "manifest.json").read_text() == text
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text('{"status": "running", "t0": "x"}')
    _mark_interrupted(bad, "x")                      # does not fit the schema: left as it is
    assert (bad / "manifest.json").read_text() == '{"status": "running", "t0": "x"}'
