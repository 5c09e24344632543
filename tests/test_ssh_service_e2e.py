"""The service study on "testbed nodes" over SSH (issue 45): the spec that runs on Mininet runs
unchanged with `--topology` pointing at an SSH topology of the same shape, and brings back a run with
the same tables (modules, counters, messages, requests, faults) as the Mininet run of that spec.

The testbed is tests/support/sshd_testbed.py's (SshNet): topologies/service.yaml built with Mininet (the
data plane a testbed would have), a management namespace of the test's own with a veth to every
node, and a real sshd in each node; run-experiment runs inside the management namespace and reaches
the nodes over SSH as a runner reaches Emulab nodes. The spec: the five tiers (nginx, two gunicorn
app servers, memcached, MariaDB) and the load generator, all five tier hosts monitored (a collector
per node, merged on the reference clock), every tier traced (a drainer per node), and a 200 ms delay
at app2. Then: a SIGTERMed run leaves nothing on any node either (a SIGKILLed one followed by `nestlab cleanup`:
tests/test_ssh_tier_faults_e2e.py, killed inside a slow window).

Root and slow (in the README's test command): about 2.5 minutes on two cores. The Mininet
reference runs first (module fixture `reference`), before the sshd testbed is built: one Mininet
network at a time.

    sudo .venv/bin/pytest -q -m root tests/test_ssh_service_e2e.py
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import statistics
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from harness.runner import run_experiment
from tests.support.env import REPO, run_id, write
from tests.support.sshd_testbed import (
    end_runner,
    nodes_left_as_found,
    run_traces,
    running,
    sshd_testbed,
    table_columns,
)

pytestmark = [pytest.mark.root, pytest.mark.slow]

SERVICE = REPO / "topologies" / "service.yaml"
TIERS = ("web", "app1", "app2", "cache", "db")
SPEC = f"""\
name: e2e_ssh_service
topology: {SERVICE}
duration: {{duration}}
seed: 5
monitor: [web, app1, app2, cache, db]
trace: messages
workloads:
  - {{{{kind: service, client: client, web: web, apps: [app1, app2], cache: cache, db: db, rate: 30/s,
      concurrency: 16}}}}
faults:
  - {{{{kind: delay, host: app2, by: 200ms, schedule: {{{{at: [8s], duration: 8s}}}}}}}}
"""


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same spec on Mininet, before the sshd testbed exists (one Mininet network at a time)."""
    tmp = tmp_path_factory.mktemp("mininet")
    spec = write(tmp, "e2e.yaml", SPEC.format(duration="25s"))
    code, runs = run_experiment(spec, tmp / "results")
    assert code == 0
    return runs[0]


@pytest.fixture(scope="module")
def net(reference, tmp_path_factory):
    yield from sshd_testbed(SERVICE, tmp_path_factory)   # after the Mininet reference: one network at a time


@pytest.fixture
def clean_nodes(net):
    """Each test leaves the nodes as it found them (five tiers' sessions: a longer grace)."""
    yield from nodes_left_as_found(net, grace=10)


# The runner and `nestlab cleanup` are the venv's entry points run in the management namespace: this
# checkout's code on their path (an editable install may point at another checkout, e.g. a worktree's).
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _runner(net, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(net.runner_argv(*args), capture_output=True, text=True, timeout=timeout, cwd=REPO, env=ENV)


def _db(run: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)


def _shape(run: Path) -> dict:
    """What must be the same on Mininet and over SSH: tables and columns, module kinds per host, the
    hosts that recorded counters and messages, request paths per type, fault kinds and targets."""
    db = _db(run)
    try:
        hosts_kinds = {(json.loads(a).get("host"), k) for a, k in db.execute("SELECT attrs, kind FROM modules")}
        counted = {json.loads(a).get("host") for (a,) in db.execute(
            "SELECT DISTINCT m.attrs FROM counters c JOIN modules m ON m.id = c.module")}
        paths: dict[str, Counter] = {}
        by_request: dict[str, list[tuple[str, str]]] = {}
        for rid, typ, tier in db.execute("SELECT request, type, tier FROM requests"):
            by_request.setdefault(rid, []).append((typ, tier))
        for hops in by_request.values():
            paths.setdefault(hops[0][0], Counter())[tuple(sorted(t for _, t in hops))] += 1
        return {
            "tables": table_columns(db),
            "module_hosts_kinds": hosts_kinds,
            "counted_hosts": counted,
            "message_hosts": {h for (h,) in db.execute("SELECT DISTINCT host FROM messages")},
            "traced_hosts": {h for (h,) in db.execute("SELECT DISTINCT host FROM traced")},
            "request_tiers": {t for (t,) in db.execute("SELECT DISTINCT tier FROM requests")},
            "request_hosts": {(t, h) for t, h in db.execute("SELECT DISTINCT tier, host FROM requests")},
            "paths": {typ: c.most_common(1)[0][0] for typ, c in paths.items()},   # each type's path
            "fault_kinds": {k for (k,) in db.execute("SELECT kind FROM faults")},
            "fault_targets": {(k, n) for k, n in db.execute("SELECT kind, at_node FROM faults")},
            "roles": {r for (r,) in db.execute("SELECT DISTINCT role FROM processes")},
        }
    finally:
        db.close()


def test_the_service_spec_over_ssh_brings_back_the_tables_of_its_mininet_run(reference, net, tmp_path, clean_nodes):
    spec = write(tmp_path, "e2e.yaml", SPEC.format(duration="25s"))
    topo = net.topology_file(tmp_path / "service-ssh.yaml")
    r = _runner(net, str(spec), "--topology", str(topo), "--results", str(tmp_path / "ssh"))
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = (tmp_path / "ssh" / "e2e_ssh_service").iterdir()
    assert not run_traces(run_id(run)), "the run left files or its ledger behind"

    ssh, mininet = _shape(run), _shape(reference)
    for key in ssh:
        assert ssh[key] == mininet[key], (key, ssh[key], mininet[key])
    assert {h for h, _ in ssh["module_hosts_kinds"]} == set(TIERS)
    assert ssh["counted_hosts"] == set(TIERS) and ssh["message_hosts"] >= {*TIERS, "client"}

    m = json.loads((run / "manifest.json").read_text())
    ref = json.loads((reference / "manifest.json").read_text())
    assert m["status"] == "complete" and m["backend"] == "ssh" and set(ref) <= set(m)
    assert [x["host"] for x in m["monitored"]] == list(TIERS)
    clocks = m["clock_offsets"]
    assert clocks["reference"] == "CLOCK_MONOTONIC of web" and set(clocks["nodes"]) == set(net.topo.spec.nodes)
    for name, off in clocks["nodes"].items():   # one machine, one clock: offsets within their error bound
        assert abs(off["offset"]) <= max(off["rtt"], 1e-3) and off["samples"] >= 5, (name, off)
    assert set(m["trace"]["clock"]) >= {*TIERS, "client"}    # the offset each node's messages were converted with
    assert m["trace"]["dropped"] == 0 and m["trace"]["events"] > 1000
    load = m["service"]["0"]
    assert load["errors"] == 0 and load["done"] > 400

    db = _db(run)
    try:
        snaps = db.execute("SELECT count(*) FROM snapshots").fetchone()[0]
        ref_snaps = _db(reference).execute("SELECT count(*) FROM snapshots").fetchone()[0]
        assert snaps >= 0.8 * ref_snaps and snaps >= 200
        # one timeline: every node's modules born within the reference's snapshots, no counter row twice
        first, last = db.execute("SELECT min(mono), max(mono) FROM snapshots").fetchone()
        assert db.execute("SELECT count(*) FROM modules WHERE born < ? OR born > ?", (first, last)).fetchone()[0] == 0
        assert not db.execute("SELECT 1 FROM counters GROUP BY seq, module, dir HAVING count(*) > 1").fetchone()
        # messages and requests on the reference clock: inside the recording
        lo, hi = db.execute("SELECT min(mono), max(mono) FROM messages").fetchone()
        assert first - 5 < lo and hi < last + 5
        # the delay: app2's hops up by 200 ms inside the window, app1's not; the faults' targets resolved
        (a, b), = db.execute("SELECT min(start), max(\"end\") FROM faults WHERE kind = 'delay'").fetchall()
        assert db.execute("SELECT count(*) FROM faults WHERE target_module IS NULL").fetchone()[0] == 0

        def app_ms(host):
            rows = db.execute('SELECT start, "end" FROM requests WHERE tier = \'app\' AND host = ? AND start >= ? '
                              'AND "end" <= ?', (host, a, b)).fetchall()
            return statistics.median((e - s) * 1000 for s, e in rows)

        assert app_ms("app2") == pytest.approx(200, rel=0.15) and app_ms("app1") < 50
        # nested in time across nodes: the app's hop inside the client's, to within the two nodes'
        # offsets' error bounds (half of each round trip) and the stamps' own millisecond
        slack = (clocks["nodes"]["client"]["rtt"] + max(clocks["nodes"][a]["rtt"] for a in ("app1", "app2"))) / 2
        bad = db.execute("SELECT count(*) FROM requests c JOIN requests p ON p.request = c.request "
                         "WHERE c.tier = 'client' AND p.tier = 'app' AND (p.start < c.start - :s "
                         "OR p.\"end\" > c.\"end\" + :s)", {"s": slack + 0.001}).fetchone()[0]
        assert bad == 0
    finally:
        db.close()
    logs = {p.name for p in (run / "logs").iterdir()}
    assert {"collector.log", "collector-app1.log", "service-web-web.log", "service-db-db.log"} <= logs
    assert {f"tracedrain-{h}.log" for h in TIERS} <= logs


def _running(net, tmp_path: Path, snapshots: int):
    """A 90 s run, once the reference collector (web) has recorded `snapshots`."""
    spec = write(tmp_path, "e2e.yaml", SPEC.format(duration="90s"))
    return running(net, spec, tmp_path, "web", snapshots, timeout=300, env=ENV, poll=0.5)


def test_a_sigtermed_service_run_leaves_nothing_on_the_nodes(net, tmp_path, clean_nodes):
    with _running(net, tmp_path, 100) as (proc, run):   # during the delay (8 s - 16 s)
        err = end_runner(proc, signal.SIGTERM, timeout=180)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert not run_traces(run_id(run))
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted" and "SIGTERM" in m["reason"]
    db = _db(run)
    assert db.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= 100
    assert {json.loads(a).get("host") for (a,) in db.execute("SELECT attrs FROM modules")} == set(TIERS)
    assert db.execute("SELECT count(*) FROM messages").fetchone()[0] > 0
    assert db.execute("SELECT count(*) FROM faults WHERE start IS NOT NULL AND end IS NULL").fetchone()[0] == 0
