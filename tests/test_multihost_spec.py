"""Specs with several monitored hosts and faults aimed at a service tier's host (issue 33 items 2 and
5): what loads, how it reads, and that every mistake is one line naming file, line and field."""

from __future__ import annotations

import pytest

from harness.spec import load_spec
from harness.yamlload import SpecError
from tests.support.env import REPO, write

SPEC = f"""\
name: svc
topology: {REPO / "topologies" / "service.yaml"}
duration: 30s
monitor: [web, app1, app2, cache, db]
workloads:
  - {{kind: service, rate: 20/s}}
faults:
  - {{FAULT}}
"""
NO_FAULT = SPEC.split("faults:")[0]


def load(tmp_path, text: str):
    return load_spec(write(tmp_path, "s.yaml", text)).spec


def test_a_list_of_hosts_is_monitored_in_order_and_probes_default_off(tmp_path):
    spec = load(tmp_path, NO_FAULT)
    assert spec.monitored == ("web", "app1", "app2", "cache", "db")
    assert spec.monitor_host == "web" and spec.probe is None


def test_one_host_reads_as_before_whether_listed_or_not(tmp_path):
    one = load(tmp_path, NO_FAULT.replace("[web, app1, app2, cache, db]", "app2"))
    listed = load(tmp_path, NO_FAULT.replace("[web, app1, app2, cache, db]", "[app2]"))
    assert one.monitor == listed.monitor == "app2" and one.monitored == ("app2",)
    assert one.model_dump(mode="json") == listed.model_dump(mode="json")   # same digest, same manifest
    assert one.probe is not None   # probes stay on with one host


def test_the_shipped_service_experiments_monitor_every_tier():
    from harness.suite import load_suite

    tiers = {"web", "app1", "app2", "cache", "db"}
    for name in ("service.yaml", "blackbox.yaml"):
        for exp in load_suite(REPO / "experiments" / name).experiments:
            assert set(exp.spec.monitored) == tiers, (name, exp.spec.name)


@pytest.mark.parametrize("monitor, line, words", [
    ("[web, nowhere]", 4, "monitor[1]: unknown node 'nowhere'"),
    ("[web, x3]", 4, "monitor[1]: 'x3' is a router"),
    ("[web, app1, web]", 4, "'web' is listed twice"),
    ("[]", 4, "at least one host"),
])
def test_bad_monitor_lists(tmp_path, monitor, line, words):
    with pytest.raises(SpecError) as e:
        load(tmp_path, NO_FAULT.replace("[web, app1, app2, cache, db]", monitor))
    msg = str(e.value)
    assert f"s.yaml:{line}: monitor" in msg and words in msg and "\n" not in msg, msg


def test_probes_asked_for_with_several_hosts_are_refused(tmp_path):
    with pytest.raises(SpecError, match=r":\d+: probe: the collector's probes run with one monitored host"):
        load(tmp_path, NO_FAULT + "probe: {after: 500ms}\n")
    assert load(tmp_path, NO_FAULT + "probe: off\n").probe is None


def test_several_hosts_on_a_testbed_are_accepted(tmp_path):
    """A collector per monitored node (harness/lab/collectors.py), merged on one clock at the end."""
    topo = write(tmp_path, "t.yaml", (REPO / "topologies" / "service.yaml").read_text())
    ssh = REPO / "topologies" / "dumbbell-ssh.yaml"
    if not ssh.is_file():
        pytest.skip("no SSH topology shipped")
    text = NO_FAULT.replace(str(REPO / "topologies" / "service.yaml"), str(topo))
    exp_path = write(tmp_path, "s.yaml", text.replace("[web, app1, app2, cache, db]", "[site1n1, site2n1]")
                     .split("workloads:")[0] + "workloads:\n  - {kind: wget, host: site1n1, server: site2n1}\n")
    assert load_spec(exp_path, topology=ssh).spec.monitored == ("site1n1", "site2n1")


@pytest.mark.parametrize("fault, check", [
    # the issue's spelling and the kinds' own are the same fault
    ("{kind: ip_drop, at: x3, target: {host: app2}, schedule: {at: [10s], duration: 2s}}",
     lambda f: (f.host, f.target) == ("app2", None)),
    ("{kind: loss, at: x3, rate: 5%, target: {host: db}, schedule: {at: [10s], duration: 2s}}",
     lambda f: (f.host, f.target) == ("db", None)),
    ("{kind: tier_pause, target: {host: cache}, schedule: {at: [10s], duration: 2s}}",
     lambda f: f.host == "cache"),
    ("{kind: delay, target: {host: app2}, by: 200ms, schedule: {at: [10s], duration: 2s}}",
     lambda f: (f.host, f.by, f.target) == ("app2", 0.2, None)),
    ("{kind: tcp_drop, at: x3, target: {host: app1}, schedule: {at: [10s], duration: 2s}}",
     lambda f: f.target.host == "app1" and f.target.workload is None),
    ("{kind: app_pause, target: {host: app2}, schedule: {at: [10s], duration: 2s}}",
     lambda f: f.target.host == "app2"),
])
def test_faults_aimed_at_a_tier_host(tmp_path, fault, check):
    f = load(tmp_path, SPEC.replace("{FAULT}", fault)).faults[0]
    assert check(f), f


def test_a_host_fault_keeps_its_own_spelling(tmp_path):
    f = load(tmp_path, SPEC.replace("{FAULT}", "{kind: ip_drop, at: x3, host: db, schedule: {at: [10s], duration: 2s}}")).faults[0]
    assert f.host == "db"


@pytest.mark.parametrize("fault, field, words", [
    ("{kind: app_pause, target: {host: client}, schedule: {at: [10s], duration: 2s}}", "faults[0].target.host",
     "'client' runs no tier of a service workload"),
    ("{kind: app_pause, target: {host: nowhere}, schedule: {at: [10s], duration: 2s}}", "faults[0].target.host",
     "'nowhere' runs no tier"),
    ("{kind: tcp_drop, at: x3, target: {host: client}, schedule: {at: [10s], duration: 2s}}", "faults[0].target.host",
     "runs no tier"),
    ("{kind: app_pause, target: {host: app2, workload: 0}, schedule: {at: [10s], duration: 2s}}", "faults[0]",
     "either a workload"),
    ("{kind: app_pause, target: {host: app2, instance: 0}, schedule: {at: [10s], duration: 2s}}", "faults[0]",
     "'instance' goes with a workload"),
    ("{kind: ip_drop, at: x3, host: db, target: {host: app2}, schedule: {at: [10s], duration: 2s}}", "faults[0]",
     "name two hosts"),
    ("{kind: server_pause, target: {host: app2}, schedule: {at: [10s], duration: 2s}}", "faults[0]",
     "takes 'target: {workload: N}', not a host"),
])
def test_bad_tier_host_faults(tmp_path, fault, field, words):
    with pytest.raises(SpecError) as e:
        load(tmp_path, SPEC.replace("{FAULT}", fault))
    msg = str(e.value)
    assert f"s.yaml:8: {field}" in msg and words in msg and "\n" not in msg, msg


def test_a_fault_whose_modules_are_not_observed_is_refused(tmp_path):
    text = SPEC.replace("[web, app1, app2, cache, db]", "[web, app1]")
    with pytest.raises(SpecError, match=r"faults\[0\].target.host: 'app2' is not monitored"):
        load(tmp_path, text.replace("{FAULT}", "{kind: app_pause, target: {host: app2}, "
                                               "schedule: {at: [10s], duration: 2s}}"))


def test_the_lab_starts_one_collector_naming_every_host_and_records_them(tmp_path):
    """NetworkLab with several monitored hosts: the manifest's `monitored`, and one collector started
    in the first host with --host NAME=PID=SHM_DIR for each (harness.collector.hosts)."""
    import types

    from harness.lab.network import NetworkLab

    exp = load_spec(write(tmp_path, "s.yaml", NO_FAULT.replace("[web, app1, app2, cache, db]", "[web, db]")))
    started = []
    proc = types.SimpleNamespace(pid=4242, argv=["collector"], started=0.0, poll=lambda: None)
    pids = {"web": 100, "db": 200}

    class Node:
        def __init__(self, name):
            self.name, self.pid = name, pids.get(name)

        def start(self, argv, log):
            started.append((self.name, argv))
            return proc

    backend = types.SimpleNamespace(
        node=Node, collector_db=lambda host, record: str(tmp_path / "run.db"), python=lambda host: ["py"],
        ignored_interfaces=lambda host: [], snapshots=lambda host, record: 1, start_progress=lambda host: None,
        separate_collectors=lambda: False)
    processes = []
    record = types.SimpleNamespace(db=None, process_started=lambda *a: processes.append(a))
    rd = types.SimpleNamespace(collector_log=tmp_path / "collector.log")
    run = types.SimpleNamespace(exp=exp, rep=0, spec=exp.spec, rd=rd, record=record, event=lambda *a, **k: None)
    lab = NetworkLab(run)
    manifest = lab.manifest_start()
    assert [m["host"] for m in manifest["monitored"]] == ["web", "db"] and manifest["monitor"]["host"] == "web"
    assert manifest["spec"]["monitor"] == ["web", "db"]
    lab.backend, lab.shm_dirs = backend, {"web": "/dev/shm/w", "db": "/dev/shm/d"}
    lab._start_collector()
    ((where, argv),) = started
    assert where == "web" and "--interceptor-dir" not in argv and "--probe" not in argv
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--host"] == ["web=100=/dev/shm/w", "db=200=/dev/shm/d"]
    assert processes[0][2:4] == ("collector", "web")


def test_one_monitored_host_starts_the_collector_as_before(tmp_path):
    import types

    from harness.lab.network import NetworkLab

    exp = load_spec(write(tmp_path, "s.yaml", NO_FAULT.replace("[web, app1, app2, cache, db]", "app2")))
    run = types.SimpleNamespace(exp=exp, rep=0, spec=exp.spec, rd=None, record=types.SimpleNamespace(db=None))
    assert "monitored" not in NetworkLab(run).manifest_start()


def test_a_several_host_manifest_is_written_and_read(tmp_path):
    from rundir.layout import RunDir
    from rundir.manifest import read_manifest

    monitored = [{"host": h, "address": f"10.0.{i}.1", "interface": f"{h}-eth0"} for i, h in enumerate(("web", "db"))]
    RunDir(tmp_path, {"format_version": 7, "status": "complete", "monitor": monitored[0], "monitored": monitored,
                      "spec": {"monitor": ["web", "db"],
                               "faults": [{"kind": "app_pause", "target": {"host": "db"}}]}}).write_manifest()
    m = read_manifest(tmp_path / "manifest.json")
    assert m.spec.monitor == ["web", "db"] and [x.host for x in m.monitored] == ["web", "db"]
    assert m.spec.faults[0].target.host == "db" and m.monitor.host == "web"


def test_a_process_end_without_an_event_leaves_run_db_unlocked(tmp_path):
    """The collector's or a server's end (no workload_end event follows to commit it) is committed at
    once: its open transaction held run.db's write lock through stopping the servers, past the
    message drainer's busy timeout (its drains failed, and its last one with them)."""
    import sqlite3
    import types

    from harness.lab.network import NetworkLab
    from rundir.recorder import RunRecorder

    exp = load_spec(write(tmp_path, "s.yaml", NO_FAULT))
    record = RunRecorder.create(tmp_path / "run.db")
    events = []
    run = types.SimpleNamespace(exp=exp, rep=0, spec=exp.spec, rd=None, record=record,
                                event=lambda *a, **k: events.append(a))
    lab = NetworkLab(run)
    proc = types.SimpleNamespace(pid=4242, argv=["collector"], started=1.0, poll=lambda: 0)
    lab._on_process(proc, None, "collector", "web")
    lab._on_process(proc, None, "ended", None)
    other = sqlite3.connect(tmp_path / "run.db", timeout=0)   # the drainer: must get the lock at once
    other.execute("BEGIN IMMEDIATE")
    other.execute("ROLLBACK")
    other.close()
    assert record.db.execute("SELECT exit_code FROM processes WHERE pid = 4242").fetchone() == (0,)
    assert events == []
    record.close()
