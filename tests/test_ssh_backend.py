"""The SSH backend against real sshd servers: the same spec on "testbed nodes" over SSH.

The testbed is made on this machine the way Mininet tests its own Emulab scripts: the dumbbell built
with Mininet (the data plane the testbed would have), a management link from a network namespace of
the test's own to every node, and a real sshd in each node, with its own config, host key and
authorized key in a temporary directory (root logs in with a generated key). Nothing is added to the
machine outside namespaces the test makes itself:

    ctl namespace (the runner runs here)           node namespaces (Mininet hosts)
    m-site1n1 10.255.1.1/24  <------ veth ------>  mgmt0 10.255.1.2/24, sshd on port 22
    m-site1n2 10.255.2.1/24  <------ veth ------>  mgmt0 10.255.2.2/24, sshd
    ...                                            (7 nodes: the hosts and the routers x1, x2)

The runner (run-experiment, in ctl) reaches each node's sshd over that node's management link, as it
would reach Emulab nodes over their control network, and finds the data-plane interfaces the topology
names (or, for some nodes, the ones holding the derived addresses). The run directory it brings back
is compared with a Mininet run of the same spec; a wrong host key, an unknown host and an unreachable
node end the run with one line and leave nothing behind; a SIGKILLed runner is cleaned up by
`nestlab cleanup`, which also brings back what the collector had recorded.

The backend's parts that need no testbed are tested in tests/test_ssh_node.py; the testbed itself is
tests/support/sshd_testbed.py.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.runner import run_experiment
from rundir.db import FORMAT_VERSION
from tests.support.env import REPO, run_id, write
from tests.support.sshd_testbed import (
    SshNet,
    cleanup,
    e2e,
    end_runner,
    nodes_left_as_found,
    run_traces,
    running,
    sshd_testbed,
    table_columns,
)

DUMBBELL = REPO / "topologies" / "dumbbell.yaml"
SPEC = f"""\
name: e2e_ssh
topology: {DUMBBELL}
duration: {{duration}}
seed: 3
monitor: site1n1
workloads:
  - {{{{kind: wget, host: site1n1, server: site2n1, file_size: 200MB}}}}
  - {{{{kind: iperf, host: site1n1, server: site2n2, direction: upload}}}}
faults:
  - {{{{kind: tcp_drop, at: x1, target: {{{{workload: 0}}}}, schedule: {{{{at: [3s], duration: 2s}}}}}}}}
  - {{{{kind: app_pause, target: {{{{workload: 1}}}}, schedule: {{{{at: [6s], duration: 1.5s}}}}}}}}
  - {{{{kind: ip_drop, at: x1, schedule: {{{{at: [10s], duration: 2s}}}}}}}}
"""

# ---- the testbed ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def net(tmp_path_factory):
    yield from sshd_testbed(DUMBBELL, tmp_path_factory)


@pytest.fixture
def clean_nodes(net):
    """Each test leaves the nodes as it found them."""
    yield from nodes_left_as_found(net, grace=5)


def _shape(run: Path) -> dict:
    db = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
    try:
        return {
            "tables": table_columns(db),
            "module_kinds": {k for (k,) in db.execute("SELECT DISTINCT kind FROM modules")},
            "fault_kinds": {k for (k,) in db.execute("SELECT kind FROM faults")},
            "roles": {r for (r,) in db.execute("SELECT DISTINCT role FROM processes")},
            "event_kinds": {k for (k,) in db.execute("SELECT DISTINCT kind FROM events")},
            "logs": {p.name for p in (run / "logs").iterdir()},
            "manifest": set(json.loads((run / "manifest.json").read_text())),
        }
    finally:
        db.close()


def _value(db, module, direction, t):
    """A counter's value as of time t (the collector writes a row only when the values change)."""
    row = db.execute("SELECT c.total_msgs FROM counters c JOIN snapshots s USING (seq) WHERE c.module = ? "
                     "AND c.dir = ? AND s.mono <= ? ORDER BY seq DESC LIMIT 1", (module, direction, t)).fetchone()
    return row[0] if row else None


def _advance(db, module, direction, t_from, t_to):
    return _value(db, module, direction, t_to) - _value(db, module, direction, t_from)


@e2e
def test_same_spec_over_ssh_brings_back_a_run_like_mininets(net, tmp_path, clean_nodes):
    spec = write(tmp_path, "e2e.yaml", SPEC.format(duration="15s"))
    code, runs = run_experiment(spec, tmp_path / "mininet")   # the reference: the same spec on Mininet
    assert code == 0
    reference = runs[0]

    topo = net.topology_file(tmp_path / "dumbbell-ssh.yaml")
    r = net.runner(str(spec), "--topology", str(topo), "--results", str(tmp_path / "ssh"))
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = (tmp_path / "ssh" / "e2e_ssh").iterdir()
    assert not run_traces(run_id(run)), "the run left files or its ledger behind"

    # The same tables, columns, kinds of modules, faults, processes, events, logs and manifest keys.
    ssh, mininet = _shape(run), _shape(reference)
    for key in ("tables", "fault_kinds", "roles", "event_kinds", "logs"):
        assert ssh[key] == mininet[key], key
    assert ssh["module_kinds"] == mininet["module_kinds"] == {"app", "socket", "tcp", "ipeth"}
    assert mininet["manifest"] <= ssh["manifest"]

    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "complete" and m["backend"] == "ssh" and m["format_version"] == FORMAT_VERSION
    assert m["monitor"] == {"host": "site1n1", "address": "10.0.1.1", "interface": "site1n1-eth0",
                            "control_interface": "mgmt0"}
    assert set(m["nodes"]) == set(net.topo.spec.nodes)
    assert m["nodes"]["x2"]["interfaces"] == ["x2-eth0", "x2-eth1", "x2-eth2"]   # found by address
    assert m["versions"]["iperf"].startswith("iperf version 2") and m["versions"]["lighttpd"].startswith("lighttpd")
    clocks = m["clock_offsets"]
    assert clocks["reference"] == "CLOCK_MONOTONIC of site1n1" and set(clocks["nodes"]) == set(net.topo.spec.nodes)
    for name, off in clocks["nodes"].items():   # one machine, one clock: offsets within the round trip
        assert abs(off["offset"]) <= max(off["rtt"], 1e-3), (name, off)
        assert off["samples"] >= 5
    assert abs(clocks["runner"]["offset"]) < 1e-3 and 0 < clocks["runner"]["rtt"] < 0.05
    assert set(m["clock_offsets_end"]["nodes"]) == set(net.topo.spec.nodes)   # measured again at the end

    db = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
    monos = [t for (t,) in db.execute("SELECT mono FROM snapshots ORDER BY seq")]
    assert len(monos) >= 120
    t0 = m["t0"]
    assert monos[0] <= t0 + 1 and monos[-1] >= t0 + 14   # the collector's clock is the runner's reference
    faults = {k: (s, e, mod, json.loads(t)) for k, s, e, mod, t in
              db.execute("SELECT kind, start, end, target_module, target FROM faults")}
    assert set(faults) == {"tcp_drop", "app_pause", "ip_drop"}
    for kind, (start, end, mod, _) in faults.items():
        assert start is not None and end is not None and mod is not None, kind
        assert monos[0] < start < end < monos[-1]
    planned = {k: t0 + s for k, s in db.execute("SELECT kind, planned_start FROM faults")}
    for kind, (start, _, _, _) in faults.items():   # injected on time, stamped on the monitor's clock
        assert 0 <= start - planned[kind] < 0.5, (kind, start - planned[kind])
    # The faults took effect on the nodes: the dropped connection and the dropped interface stall.
    start, end, mod, target = faults["tcp_drop"]
    assert target["dst"] == "10.0.5.1" and _advance(db, mod, "in", start + 0.2, end) == 0
    start, end, mod, _ = faults["ip_drop"]
    (ipeth,) = db.execute("SELECT id FROM modules WHERE key = 'ipeth:site1n1-eth0'").fetchone()
    assert mod == ipeth and _advance(db, ipeth, "in", start + 0.2, end) == 0
    assert _advance(db, ipeth, "in", start - 2, start) > 100
    # The control interface and the runner's own SSH session are not part of the experiment.
    assert db.execute("SELECT count(*) FROM modules WHERE key = 'ipeth:mgmt0' OR name LIKE '%:22>%' "
                      "OR name LIKE '%>%:22'").fetchone()[0] == 0


@e2e
def test_agent_through_mnexec_sees_what_the_mininet_backend_reads_in_process(net, clean_nodes):
    """The node agent works on Mininet too (through mnexec), and agrees with the in-process path the
    Mininet backend takes."""
    backend, node = net.backend, net.backend.node("site1n1")
    client = subprocess.Popen(["mnexec", "-a", str(node.pid), sys.executable, "-c",
                               "import socket, sys, time; s = socket.create_connection((sys.argv[1], 22)); "
                               "print('up', flush=True); time.sleep(30)", net.mgmt["site1n1"]],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert client.stdout.readline().strip() == "up"
        r = node.run([*backend.python("site1n1"), "-m", "harness.agent", "conns", str(client.pid)])
        via_agent = json.loads(r.stdout)
        assert via_agent == backend.tcp_connections("site1n1", client.pid)
        assert [(c["dst"], c["dport"]) for c in via_agent] == [(net.mgmt["site1n1"], 22)]
    finally:
        os.killpg(client.pid, signal.SIGKILL)
        client.wait()


def _one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.stderr
    return errors[0]


def _check_nothing_made(tmp_path: Path, results: Path) -> None:
    (run,) = (results / "e2e_ssh").iterdir()
    assert not run_traces(run_id(run))
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "failed"


@e2e
@pytest.mark.parametrize("case", ["wrong key", "unknown host"])
def test_wrong_or_unknown_host_key_fails_with_one_line_and_leaves_nothing(net, tmp_path, clean_nodes, case):
    spec = write(tmp_path, "e2e.yaml", SPEC.format(duration="15s"))
    # x1 presents its own key; known_hosts has another node's for it (or none at all).
    keys = {"x1": net.host_keys["site2n1"]} if case == "wrong key" else {"x1": None}
    known = net.write_known_hosts(tmp_path / "known_hosts", keys)
    topo = net.topology_file(tmp_path / "topo.yaml", known_hosts=known)
    r = net.runner(str(spec), "--topology", str(topo), "--results", str(tmp_path / "results"))
    line = _one_error_line(r)
    assert line.startswith("error: x1 (root@10.255.4.2:22): host key ")
    assert ("mismatch" if case == "wrong key" else "not in") in line
    _check_nothing_made(tmp_path, tmp_path / "results")


@e2e
def test_unreachable_node_fails_with_one_line_and_leaves_nothing(net, tmp_path, clean_nodes):
    spec = write(tmp_path, "e2e.yaml", SPEC.format(duration="15s"))
    topo = net.topology_file(tmp_path / "topo.yaml", hosts={"site2n2": "10.255.7.99"}, connect_timeout="2s")
    t = time.monotonic()
    r = net.runner(str(spec), "--topology", str(topo), "--results", str(tmp_path / "results"))
    line = _one_error_line(r)
    assert line.startswith("error: site2n2 (root@10.255.7.99:22): cannot connect: ")
    assert time.monotonic() - t < 15
    _check_nothing_made(tmp_path, tmp_path / "results")


def _running(net: SshNet, tmp_path: Path, snapshots: int):
    """A 60 s run, once the collector on site1n1 has recorded `snapshots`."""
    spec = write(tmp_path, "e2e.yaml", SPEC.format(duration="60s"))
    return running(net, spec, tmp_path, "site1n1", snapshots, timeout=60)


@e2e
def test_sigterm_midway_tears_down_the_nodes_and_brings_back_the_run(net, tmp_path, clean_nodes):
    with _running(net, tmp_path, 40) as (proc, run):   # during the tcp_drop (3 s - 5 s)
        err = end_runner(proc, signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert not run_traces(run_id(run))
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted" and "SIGTERM" in m["reason"]
    db = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
    assert db.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= 40
    assert db.execute("SELECT count(*) FROM faults WHERE start IS NOT NULL AND end IS NULL").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM faults").fetchone()[0] >= 1


@e2e
def test_sigkilled_runner_is_cleaned_up_and_its_recording_brought_back(net, tmp_path, clean_nodes):
    with _running(net, tmp_path, 50) as (proc, run):   # past the tcp_drop at 3 s
        end_runner(proc, signal.SIGKILL, timeout=10)
    assert run_traces(run_id(run)), "a SIGKILLed runner cannot clean up; there should be something to clean"
    remote = sqlite3.connect(f"file:/tmp/nestlab-{run_id(run)}-site1n1/run.db?mode=ro", uri=True)
    recorded, last = remote.execute("SELECT count(*), max(seq) FROM snapshots").fetchone()   # the collector runs on
    remote.close()
    r = cleanup(net, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "remote process group(s) killed" in r.stdout and "brought back" in r.stdout, r.stdout
    assert not run_traces(run_id(run))
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted" and "cleanup" in m["reason"]
    db = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= recorded >= 50
    assert db.execute("SELECT count(*) FROM snapshots WHERE seq <= ?", (last,)).fetchone()[0] == recorded
    # The collector was stopped (it closed its recording: every module and edge has ended) before its
    # run.db was copied, not copied while it wrote.
    assert db.execute("SELECT count(*) FROM modules WHERE died IS NULL").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM edges WHERE died IS NULL").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM faults WHERE kind = 'tcp_drop'").fetchone()[0] == 1
    assert (run / "logs" / "collector.log").exists()
