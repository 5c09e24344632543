"""The ground truth of a fabric run's link faults (analysis/fault_reach.py): a `loss` with `link` or a
`link_down` names a link and no module; its targets are the TCP connections whose packets cross the
link either way, by the paths in the run's fabric.json, labelled as any fault's targets are (impact
periods while the fault holds). A connection not crossing it is negative; without fabric.json the
fault reaches no module."""

from __future__ import annotations

import json

import numpy as np

from analysis.fault_reach import active_faults, link_crossers
from analysis.labels import label_run
from analysis.load import load_run_data
from rundir.runs import open_run
from tests.support.runs import IPERF_UP, RunBuilder

CROSSING, BESIDE = ("10.0.1.1", 40000, "10.0.9.1", 5001), ("10.0.2.1", 40001, "10.0.13.1", 5001)


def _key(src, sport, dst, dport):
    return f"{src}:{sport}>{dst}:{dport}"


def _run(tmp_path, fabric: bool):
    """Two mesh connections, both silent from 2 s to 3 s; a 5% loss on link 3 (a1-c1) from 2.05 s to
    3.05 s, which only the first one's ACKs cross."""
    b = RunBuilder(tmp_path / "r", 50, workloads=[IPERF_UP])
    mods = []
    for src, sport, dst, dport in (CROSSING, BESIDE):
        m = b.module("tcp", f"tcp:{sport}", {"src": src, "sport": sport, "dst": dst, "dport": dport})
        tm = np.full(50, 5.0)
        tm[21:30] = 0
        b.counters(m, "out", tm)
        b.counters(m, "in", 1.0)
        mods.append(m)
    b.fault("loss", None, start=2.05, end=3.05, target={"link": "a1-c1", "link_index": 3, "module_key": None})
    path = b.write()
    if fabric:
        conns = {_key(*CROSSING): [0, 16, 35], _key(*CROSSING[2:], *CROSSING[:2]): [35, 3, 16, 0],
                 _key(*BESIDE): [1, 18, 40], _key(*BESIDE[2:], *BESIDE[:2]): [40, 18, 1]}
        (path / "fabric.json").write_text(json.dumps({"links": [], "connections": conns, "probe_paths": [],
                                                      "probes": []}))
    return load_run_data(open_run(path)), mods


def test_a_link_fault_targets_the_connections_crossing_its_link(tmp_path):
    data, (crossing, beside) = _run(tmp_path, fabric=True)
    assert link_crossers(data)[3] == {crossing} and link_crossers(data)[18] == {beside}
    assert [(kind, targets) for _, kind, targets, _, _ in active_faults(data)] == [("loss", {crossing})]
    lab = label_run(data)
    positive = lab[lab["actual"]]
    assert set(positive["module"]) == {crossing} and set(positive["dir"]) == {"out"}
    assert len(positive) >= 8   # its silence while the fault held


def test_without_fabric_json_a_link_fault_reaches_no_module(tmp_path):
    data, _ = _run(tmp_path, fabric=False)
    assert link_crossers(data) == {} and active_faults(data) == []
    assert not label_run(data)["actual"].any()
