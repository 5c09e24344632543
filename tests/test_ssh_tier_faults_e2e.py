"""The faults aimed at a service tier on "testbed nodes" over SSH (issue 45): a service spec with a
tier_pause at the cache, a slow (cgroup CPU quota) at app1 and a delay at the db runs over the sshd
testbed of tests/support/sshd_testbed.py (SshNet: sshd in Mininet hosts) with the same fault rows as its
Mininet run, each fault acting on the tier's node (harness/faults/onnode.py), and leaves the nodes as
it found them: no process, route or rule (nodes_left_as_found), no cgroup, no ledger. A SIGKILLed
runner's cgroup on a node is removed by `nestlab cleanup` (the ledger's undo).

Root and slow (run by hand): the Mininet reference first, then the sshd testbed (one network at a
time); about 5 minutes per test on two cores.

    sudo .venv/bin/pytest -q -m root tests/test_ssh_tier_faults_e2e.py
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import statistics
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from harness.faults.cgroup import cgroup_mounts, cpu_mounts
from harness.runner import run_experiment
from tests.support.env import REPO, run_id, write
from tests.support.sshd_testbed import (
    cleanup,
    end_runner,
    nodes_left_as_found,
    run_traces,
    running,
    sshd_testbed,
)

pytestmark = [pytest.mark.root, pytest.mark.slow]

SERVICE = REPO / "topologies" / "service.yaml"
TIERS = ("web", "app1", "app2", "cache", "db")
SPEC = f"""\
name: e2e_ssh_tier_faults
topology: {SERVICE}
duration: {{duration}}
seed: 5
monitor: [web, app1, app2, cache, db]
trace: messages
workloads:
  - {{{{kind: service, client: client, web: web, apps: [app1, app2], cache: cache, db: db, rate: 30/s,
      concurrency: 16}}}}
faults:
  - {{{{kind: tier_pause, host: cache, schedule: {{{{at: [4s], duration: 2s}}}}}}}}
  - {{{{kind: slow, host: app1, cpu: 20%, schedule: {{{{at: [10s], duration: {{slow}}}}}}}}}}
  - {{{{kind: delay, host: db, by: 200ms, schedule: {{{{at: [{{delay_at}}], duration: 3s}}}}}}}}
"""
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _spec(tmp: Path, duration="25s", slow="3s", delay_at="18s") -> Path:
    return write(tmp, "e2e.yaml", SPEC.format(duration=duration, slow=slow, delay_at=delay_at))


def _cgroups() -> list[str]:
    """The runs' cgroups on this machine's cpu hierarchies (the sshd nodes share its cgroup tree)."""
    return [str(p) for m in cpu_mounts() for p in Path(m).glob("nestlab-*")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same spec on Mininet, before the sshd testbed exists (one Mininet network at a time)."""
    tmp = tmp_path_factory.mktemp("mininet")
    code, runs = run_experiment(_spec(tmp), tmp / "results")
    assert code == 0
    return runs[0]


def _in_nodes(net, script: str) -> None:
    for name in net.topo.hosts:
        r = net.in_node(name, ["sh", "-c", script])
        assert r.returncode == 0, (name, r.stderr)


@pytest.fixture(scope="module")
def net(reference, tmp_path_factory):
    """The sshd testbed, each node with a cgroup cpu hierarchy of its own view. Mininet's hosts mount a
    fresh sysfs on /sys (mnexec -n), which hides this machine's cgroup mounts under /sys/fs/cgroup
    there (a real node has its own): the same v1 cpu hierarchy is mounted again inside each node's
    mount namespace (private: nothing propagates to the machine) and unmounted at the end."""
    testbed = sshd_testbed(SERVICE, tmp_path_factory)
    net = next(testbed)
    (opts,) = [",".join(o for o in opts if o not in ("rw", "ro")) for v, m, r, opts in cgroup_mounts()
               if v == 1 and "cpu" in opts] or ["cpu"]
    mounted = False
    try:
        _in_nodes(net, f"mount -t tmpfs -o mode=755 nestlab-test /sys/fs/cgroup && mkdir /sys/fs/cgroup/cpu && "
                       f"mount -t cgroup -o {opts} cgroup /sys/fs/cgroup/cpu")
        mounted = True
        yield net
    finally:
        if mounted:
            _in_nodes(net, "umount /sys/fs/cgroup/cpu && umount /sys/fs/cgroup")
        next(testbed, None)


@pytest.fixture
def clean_nodes(net):
    before = _cgroups()
    yield from nodes_left_as_found(net, grace=10)
    assert _cgroups() == before, "the run left a cgroup on the nodes"


def _db(run: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)


def _fault_rows(run: Path) -> Counter:
    """The faults table as it must be the same on Mininet and over SSH: per row its kind, node, host,
    tier, hierarchy (slow), kind of target module and whether the analysis resolved it."""
    db = _db(run)
    try:
        out = Counter()
        for kind, node, target, module in db.execute("SELECT kind, at_node, target, target_module FROM faults"):
            t = json.loads(target)
            out[(kind, node, t.get("host"), t.get("tier"), t.get("hierarchy"),
                 (t.get("module_key") or "").split(":")[0], module is not None)] += 1
        return out
    finally:
        db.close()


def _windows(run: Path) -> dict[str, tuple[float, float, float, float]]:
    """kind -> (planned start, start, end, planned duration) of its first row, on the run's clock (t0 = 0)."""
    db = _db(run)
    try:
        t0 = json.loads((run / "manifest.json").read_text())["t0"]
        out = {}
        for kind, planned, start, end, duration in db.execute(
                'SELECT kind, planned_start, start, "end", planned_duration FROM faults ORDER BY id'):
            out.setdefault(kind, (planned, start - t0, end - t0, duration))
        return out
    finally:
        db.close()


def test_tier_pause_slow_and_delay_at_tier_nodes_give_the_fault_rows_of_the_mininet_run(reference, net, tmp_path,
                                                                                        clean_nodes):
    spec = _spec(tmp_path)
    topo = net.topology_file(tmp_path / "service-ssh.yaml")
    r = subprocess.run(net.runner_argv(str(spec), "--topology", str(topo), "--results", str(tmp_path / "ssh")),
                       capture_output=True, text=True, timeout=600, cwd=REPO, env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = (tmp_path / "ssh" / "e2e_ssh_tier_faults").iterdir()
    assert not run_traces(run_id(run)), "the run left files or its ledger behind"
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "complete" and m["backend"] == "ssh"
    assert not [w for w in m.get("warnings", []) if "fault" in w or "teardown" in w], m["warnings"]

    ssh, mininet = _fault_rows(run), _fault_rows(reference)
    assert ssh == mininet, (ssh, mininet)
    assert {k[0] for k in ssh} == {"tier_pause", "slow", "delay"}
    assert ("slow", "app1", "app1", "app", "cgroup v1", "app", True) in ssh   # this machine's hierarchy: v1
    for kind, (planned, start, end, duration) in _windows(run).items():   # on time, for as long as planned
        assert planned - 0.05 <= start < planned + 1.0 and end - start == pytest.approx(duration, abs=0.5), kind

    db = _db(run)
    try:
        (pa, pb), = db.execute("SELECT min(start), max(\"end\") FROM faults WHERE kind = 'tier_pause'").fetchall()
        waited = db.execute('SELECT max("end" - start) FROM requests WHERE tier = \'cache\' AND start BETWEEN ? AND ?',
                            (pa, pb)).fetchone()[0]
        assert waited is not None and waited > 0.5 * (pb - pa)   # a cache call caught in the pause waited it out
        (da, dbe), = db.execute("SELECT min(start), max(\"end\") FROM faults WHERE kind = 'delay'").fetchall()
        db_ms = [(e - s) * 1000 for s, e in db.execute(
            'SELECT start, "end" FROM requests WHERE tier = \'db\' AND start >= ? AND "end" <= ?', (da, dbe + 0.3))]
        if db_ms:   # the window's database calls (misses only), each held 200 ms
            assert statistics.median(db_ms) >= 180, db_ms
    finally:
        db.close()


def test_a_sigkilled_runners_cgroup_and_stopped_tier_are_undone_by_cleanup(net, tmp_path, clean_nodes):
    """Killed while app1 is under its quota: the cgroup stays on the node until `nestlab cleanup` runs
    the ledger's undo (after stopping the run's processes)."""
    spec = _spec(tmp_path, duration="45s", slow="10s", delay_at="35s")
    before = _cgroups()
    with running(net, spec, tmp_path, "web", 1, timeout=300, env=ENV, poll=0.5) as (proc, run):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not [c for c in _cgroups() if c.endswith("-app1") and c not in before]:
            time.sleep(0.05)
        capped = [c for c in _cgroups() if c.endswith("-app1") and c not in before]
        end_runner(proc, signal.SIGKILL, timeout=10)
    traces = run_traces(run_id(run))
    ledger = json.loads(Path(traces[-1]).read_text()) if traces else {}
    # cleaned up before anything is asserted: a failed check must leave nothing on the nodes either
    r = cleanup(net, env=ENV)
    assert r.returncode == 0, r.stderr
    assert not run_traces(run_id(run)) and _cgroups() == before
    assert capped, "the slow window never started"
    undo = [u for u in ledger.get("remote", {}).get("undo", []) if "slow fault's cgroup" in u["what"]]
    assert len(undo) == 1 and undo[0]["node"] == "app1", ledger.get("remote", {}).get("undo")
    assert undo[0]["argv"][3] == "remove" and undo[0]["argv"][4].endswith("-app1")
    assert "remote process group(s) killed" in r.stdout and "brought back" in r.stdout, r.stdout
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted" and "cleanup" in m["reason"]
    db = _db(run)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= 60
        # every node's recording came back, merged on the reference's snapshots, each closed by its collector
        assert {json.loads(a).get("host") for (a,) in db.execute("SELECT attrs FROM modules")} == set(TIERS)
        assert db.execute("SELECT count(*) FROM modules WHERE died IS NULL").fetchone()[0] == 0
        assert {h for (h,) in db.execute("SELECT DISTINCT host FROM messages")} >= set(TIERS)
    finally:
        db.close()
    for name in ("collector.log", "collector-db.log", "service-db-db.log"):
        assert (run / "logs" / name).exists(), name


def test_a_node_that_stops_answering_fails_the_run_within_seconds_naming_it(net, tmp_path, clean_nodes):
    """app2's control network goes silent mid-run (its packets dropped: a machine gone, not a refused
    connection): the run fails with one `error:` line naming app2 well before a command's 30 s timeout
    (and teardown does not wait that long per step for it either); what the others recorded is kept;
    once app2 is back, `nestlab cleanup` leaves nothing on it."""
    spec = _spec(tmp_path, duration="60s", slow="10s", delay_at="35s")
    drop = ["ip", "netns", "exec", net.ctl, "iptables", "-w", "{}", "OUTPUT", "-d", net.mgmt["app2"], "-j", "DROP"]
    err = ""
    with running(net, spec, tmp_path, "web", 60, timeout=300, env=ENV, poll=0.5) as (proc, run):
        cut = time.monotonic()
        try:
            subprocess.run([a.replace("{}", "-I") for a in drop], check=True)
            try:
                _, err = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:   # hung: killed, and cleaned up below all the same
                proc.kill()
                _, err = proc.communicate()
            took = time.monotonic() - cut
        finally:
            subprocess.run([a.replace("{}", "-D") for a in drop], check=True)
    r = cleanup(net, env=ENV)
    assert r.returncode == 0, r.stderr
    assert not run_traces(run_id(run))
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1, err[-3000:]
    # named by whichever check sees it first: a request unanswered (and its keepalive), or its collector's
    # snapshot count standing still for 10 s
    assert errors[0].startswith("error: app2") and ("stopped answering" in errors[0] or "may be gone" in errors[0])
    assert took < 40, f"{took:.1f} s from the cut to the runner's exit"
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "failed" and "app2" in m["reason"]
    db = _db(run)
    try:
        assert db.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= 60
        # the run's times are this machine's CLOCK_MONOTONIC (every node is on it): teardown began within
        # seconds of the cut (the progress thread's keepalive, or an unanswered request's)
        began = db.execute("SELECT min(mono) FROM events WHERE kind = 'warning' AND detail LIKE 'teardown:%'")
        began = began.fetchone()[0]
        assert began is not None and began - cut < 10, (began, cut)
        print(f"app2 cut off: the run failed {began - cut:.1f} s later, the runner exited after {took:.1f} s")
    finally:
        db.close()
