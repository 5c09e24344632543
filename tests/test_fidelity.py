"""The emulated network behaves like the testbed's (docs/link-model.md): the built topology has the
queue and no offloads, and a tcp_fault-shaped run measures the diagnoser, not the emulator."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from analysis.pipeline import evaluate
from harness.backends.mininet import MininetBackend
from harness.ledger import Ledger
from harness.runner import run_experiment
from harness.topology import load_topology
from tests.support.env import REPO, write

pytestmark = [pytest.mark.root, pytest.mark.slow]

TOPO = """\
name: fid
nodes:
  h1: {}
  r1: {router: true}
  r2: {router: true}
  h2: {}
links:
  - {a: h1, b: r1}
  - {a: r1, b: r2, bw: 100Mbit}
  - {a: r2, b: h2, bw: 20Mbit, queue: 20}
"""


def _in_ns(pid: int, *argv: str) -> str:
    return subprocess.run(["mnexec", "-a", str(pid), *argv], capture_output=True, text=True, check=True).stdout


def test_built_links_have_the_queue_and_no_offloads(tmp_path, no_leftovers):
    topo = load_topology(write(tmp_path, "fid.yaml", TOPO))
    ledger = Ledger("fidelity-test", tmp_path)
    backend = MininetBackend(topo, ledger)
    try:
        backend.preflight()
        backend.build()
        want = {("r1", "r1-eth1"): 50, ("r2", "r2-eth0"): 50, ("r2", "r2-eth1"): 20, ("h2", "h2-eth0"): 20}
        for (node, ifname), limit in want.items():
            qdiscs = json.loads(_in_ns(backend.node(node).pid, "tc", "-j", "qdisc", "show", "dev", ifname))
            leaf = [q for q in qdiscs if q.get("parent") == "5:1"]
            assert [(q["kind"], q["options"]["limit"]) for q in leaf] == [("pfifo", limit)], (ifname, qdiscs)
        for node, intfs in topo.interfaces.items():
            for intf in intfs:
                k = _in_ns(backend.node(node).pid, "ethtool", "-k", intf.name)
                for label in ("tcp-segmentation-offload", "generic-segmentation-offload",
                              "generic-receive-offload", "large-receive-offload"):
                    assert re.search(rf"^{label}: off", k, re.M), (intf.name, label)
        # unshaped links have no queue of ours
        first = json.loads(_in_ns(backend.node("h1").pid, "tc", "-j", "qdisc", "show", "dev", "h1-eth0"))
        assert not any(q.get("kind") == "pfifo" for q in first)
        model = {m["link"]: m for m in backend.link_model}
        assert model[2]["queue"] == 20 and model[2]["ends"]["r2"]["limit"] == 20
        assert model[0]["ends"]["h1"]["offloads"] == {"tso": "off", "gso": "off", "gro": "off", "lro": "off"}
        stats = backend.queue_stats()
        assert {(s["node"], s["interface"]) for s in stats} == set(want)
        assert all(s["drops"] == 0 and s["backlog_packets"] == 0 for s in stats)
    finally:
        backend.teardown()
        ledger.close()


SPEC = f"""\
name: fidelity
topology: {REPO / "topologies" / "dumbbell.yaml"}
duration: 30s
seed: 9
monitor: site1n1
workloads:
  - {{kind: iperf, host: site1n1, server: site2n2, direction: upload, parallel: 8}}
faults:
  - kind: tcp_drop
    at: x1
    target: {{workload: 0}}
    schedule: {{random: {{count: 3, duration: [1s, 3s], gap: [3s, 5s]}}}}
"""


def test_a_tcp_fault_run_measures_the_diagnoser(tmp_path, no_leftovers):
    """Thesis 3.5.4.2's shape: eight uploads, one connection dropped now and then. With the testbed's
    link model the healthy connections do not go silent, so TCP false positives stay rare."""
    code, runs = run_experiment(write(tmp_path, "fidelity.yaml", SPEC), tmp_path / "results")
    assert code == 0
    manifest = json.loads((runs[0] / "manifest.json").read_text())
    assert manifest["link_model"][3]["ends"]["x1"]["limit"] == 50
    assert [w["recovery"] for w in manifest["planned_faults"]] == \
        [pytest.approx(w["duration"] + 1) for w in manifest["planned_faults"]]
    ev = evaluate(runs, keep=True)
    h = ev.health[runs[0]]
    assert h.busy > 1000 and h.silence_rate <= 0.02, h
    assert h.rtt_ms_median is not None and h.rtt_ms_median < 50, h
    assert h.queue_sent_packets > 100_000, h     # the uploads filled the bottleneck
    tcp = ev.table().loc[("Total", "TCP")]
    assert tcp["FP"] / tcp["AN"] <= 0.02, tcp
    assert tcp["AP"] > 0 and tcp["TP"] / tcp["AP"] >= 0.9, tcp
