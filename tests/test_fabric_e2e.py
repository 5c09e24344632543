"""A real fabric run on Mininet (issue 44): the k = 4 fat-tree built with a hash seed per router and
every router-router link used, a mesh on every host, a link loss and a link down on the routers,
NetBouncer's probers; fabric.json holds every connection's path (the routers' answers) and the probes;
the connections crossing the downed link retransmit and the others do not; both diagnosers name the
downed link first; nothing is left behind.

Needs root and Mininet (marked root, slow): run only while holding the machine's Mininet token."""

from __future__ import annotations

import json
import sqlite3

import pytest

from analysis.fabric.inputs import both_ways, load_run, retransmitting, windows
from analysis.fabric.score import diagnose
from harness.runner import run_experiment
from tests.support.env import REPO, write

pytestmark = [pytest.mark.root, pytest.mark.slow]

SPEC = f"""\
name: fabric-e2e
topology: {REPO / "topologies" / "fattree.yaml"}
duration: 50s
seed: 5
monitor: [h1, h2, h3, h4, h5, h6, h7, h8, h9, h10, h11, h12, h13, h14, h15, h16]
probe: off
workloads: [{{kind: mesh, flows: 4, rate: 1Mbit}}]
faults:
  - {{kind: link_down, link: [a1, c1], schedule: {{at: [6s], duration: 10s}}}}
  - {{kind: loss, link: [e4, a4], rate: 5%, schedule: {{at: [30s], duration: 10s}}}}
"""


def test_a_fabric_run_records_paths_probes_and_the_downed_link_is_named(tmp_path, no_leftovers):
    code, runs = run_experiment(write(tmp_path, "fabric.yaml", SPEC), tmp_path / "results")
    assert code == 0
    run_dir = runs[0]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete", manifest.get("reason")
    fabric = manifest["routing"]["fabric"]
    assert len(fabric["hash_seeds"]) == 20 and fabric["crossings_per_link"]["min"] > 0
    assert manifest["fabric"]["uncovered"] == [] and manifest["fabric"]["connections"] >= 64
    db = sqlite3.connect(run_dir / "run.db")
    kinds = [json.loads(t)["link"] for (t,) in db.execute("SELECT target FROM faults ORDER BY start")]
    assert kinds == ["a1-c1", "e4-a4"]
    clients = db.execute("SELECT COUNT(*) FROM processes WHERE role = 'client'").fetchone()[0]
    assert clients == 64
    run = load_run(run_dir)
    down = next(lk["index"] for lk in run.links if lk["name"] == "a1-c1")
    # every connection's path starts at its host's link and has 6 links (hosts in other pods)
    mesh = [k for k in run.conn_paths if k.endswith(":5001") or ":5001>" in k]
    assert mesh and all(len(run.conn_paths[k]) == 6 for k in mesh)
    w = next(w for w in windows(run) if w.truth == (down,))
    active, bad = retransmitting(run, w)
    paths = both_ways(run.conn_paths)
    senders = [k for k in active if k.split(">")[1].endswith(":5001")]   # the mesh's clients send the data
    crossing = {k for k in senders if down in paths.get(k, ())}
    assert crossing and crossing <= set(bad)          # every sender whose data or ACKs cross the dead link retransmits
    assert len(set(bad) & set(senders) - crossing) <= 2   # and (almost) no other: no tail loss probes (HOST_SYSCTLS)
    assert manifest["fabric"]["host_sysctls"] == {"net.ipv4.tcp_early_retrans": "0"}
    verdicts = {v.diagnoser: v for v in diagnose(run) if v.window.start == w.start}
    assert verdicts["007"].ranked[:1] == [down] and verdicts["netbouncer"].ranked[:1] == [down]
    lossy = next(lk["index"] for lk in run.links if lk["name"] == "e4-a4")
    w = next(w for w in windows(run) if w.truth == (lossy,))
    verdicts = {v.diagnoser: v for v in diagnose(run) if v.window.start == w.start}
    assert lossy in verdicts["007"].ranked[:3] and lossy in verdicts["netbouncer"].ranked[:3]   # 5%: one window
    probes = json.loads((run_dir / "fabric.json").read_text())["probes"]
    assert len(probes) > 16 * 40 * 30   # 40 a second from each host for most of the run
    clean = [ok for sent, _path, ok in probes if sent < run.faults[0].start - 1]
    assert sum(clean) >= 0.98 * len(clean)   # before any fault, every path's probes come back
    snapshots = db.execute("SELECT COUNT(*) FROM snapshots").fetchone()[0]
    assert snapshots >= 0.9 * 50 / 0.1   # one collector keeps its 100 ms cadence with all 16 hosts
