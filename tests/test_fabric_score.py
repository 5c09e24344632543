"""The fabric study's scoring (analysis/fabric/): a fabric run written by hand (run.db, fabric.json,
manifest.json, as the lab writes them) on the fat-tree model, read, windowed, diagnosed and scored;
and the scores' arithmetic on verdicts given by hand."""

from __future__ import annotations

import csv
import json
import random

import pytest

from analysis.fabric.__main__ import main
from analysis.fabric.inputs import Window, load_run, windows
from analysis.fabric.score import Verdict, accuracy, alarms
from harness.fabric import Flow, find_link, link_kind, link_name
from rundir.db import create_db
from tests.support.fabric_model import fattree, probe_paths, seeded_walk

T0, SECONDS = 100.0, 60


def write_fabric_run(path, topo, lossy: int | None, fault=(20.0, 40.0), rate=2.0):
    """60 s of a mesh (4 connections per host) and probes; connections crossing `lossy` retransmit
    every second while the fault is in force, probes crossing it fail 1 in 10 then."""
    rng, route = random.Random(3), seeded_walk(topo)
    path.mkdir()
    conn = create_db(path / "run.db")
    conn.executemany("INSERT INTO snapshots VALUES (?,?,?)", [(s, T0 + s, 1e9 + s) for s in range(SECONDS + 1)])
    pods = {h: topo.spec.nodes[h].site for h in topo.hosts}
    paths, mid = {}, 0
    for h in topo.hosts:
        for j in range(4):
            d = rng.choice([x for x in topo.hosts if pods[x] != pods[h]])
            f = Flow(topo.address(h), 40000 + j, topo.address(d), 5001)
            fwd = route(f)
            paths[f"{f.src}:{f.sport}>{f.dst}:{f.dport}"] = fwd
            paths[f"{f.dst}:{f.dport}>{f.src}:{f.sport}"] = route(f.reverse())
            mid += 1
            attrs = json.dumps({"src": f.src, "sport": f.sport, "dst": f.dst, "dport": f.dport})
            conn.execute("INSERT INTO modules (id, kind, name, key, attrs, born) VALUES (?,?,?,?,?,?)",
                         (mid, "tcp", f"tcp{mid}", f"tcp:{mid}", attrs, T0))
            errors = 0
            for s in range(SECONDS + 1):
                if lossy in fwd and fault[0] <= s < fault[1]:
                    errors += 1
                conn.execute("INSERT INTO counters (seq, module, dir, errors) VALUES (?,?,?,?)", (s, mid, "out", errors))
    if lossy is not None:
        target = json.dumps({"link": link_name(topo, lossy), "link_index": lossy, "link_kind": link_kind(topo, lossy)})
        conn.execute("INSERT INTO faults (spec_index, kind, at_node, target, start, end, rule) VALUES (0,?,?,?,?,?,?)",
                     ("loss", "a1", target, T0 + fault[0], T0 + fault[1], "iptables ..."))
    conn.commit()
    conn.close()
    pp = [{"host": "?", "forward": fwd, "reverse": rev} for fwd, rev in probe_paths(topo)]
    probes = []
    for s in range(SECONDS * 4):   # each path 4 times a second
        t = T0 + s / 4
        for k, p in enumerate(pp):
            bad = lossy in p["forward"] + p["reverse"] and T0 + fault[0] <= t < T0 + fault[1]
            probes.append([t, k, 0 if bad and rng.random() < 0.1 else 1])
    links = [{"index": k, "name": link_name(topo, k), "kind": link_kind(topo, k)} for k in range(len(topo.spec.links))]
    (path / "fabric.json").write_text(json.dumps({"links": links, "connections": paths, "probe_paths": pp,
                                                  "probes": probes}))
    faults = [{"kind": "loss", "rate": rate, "link": ["a1", "c1"]}] if lossy is not None else []
    (path / "manifest.json").write_text(json.dumps({"spec": {"faults": faults}}))
    return path


def test_a_hand_written_fabric_run_is_windowed_diagnosed_and_scored(tmp_path, capsys):
    topo = fattree()
    lossy = find_link(topo, ("a1", "c1"))
    write_fabric_run(tmp_path / "lossy", topo, lossy)
    write_fabric_run(tmp_path / "control", topo, None)
    run = load_run(tmp_path / "lossy")
    ws = windows(run)
    assert [(w.start - T0, w.truth, w.label) for w in ws if w.truth] == [(20.0, (lossy,), "loss 2%"),
                                                                         (30.0, (lossy,), "loss 2%")]
    # clean windows: after the warm-up, not overlapping the fault or the 5 s after it
    assert [w.start - T0 for w in ws if not w.truth] == [5.0, 45.0]
    assert main([str(tmp_path), "--out", str(tmp_path / "out"), "--nest"]) == 0
    rows = list(csv.DictReader((tmp_path / "out" / "compare-fabric.csv").open()))
    assert list(rows[0]) == ["diagnoser", "inputs", "fault_kind", "windows", "ac1", "ac3"]
    got = {(r["diagnoser"], r["fault_kind"]): (r["windows"], r["ac1"]) for r in rows}
    assert got[("007", "loss 2% aggregation-core")] == ("2", "100.0")
    assert got[("netbouncer", "loss 2%")] == ("2", "100.0")
    assert got[("random", "loss 2%")] == ("2", f"{100 / 48:.1f}")
    al = {r["diagnoser"]: r for r in csv.DictReader((tmp_path / "out" / "fabric-alarms.csv").open())}
    assert al["007"]["false_alarms"] == al["netbouncer"]["false_alarms"] == "0"
    assert float(al["007"]["control_hours"]) == pytest.approx(5 * 10 / 3600, abs=1e-3)
    assert "AC@1" in capsys.readouterr().out


def test_no_fabric_run_is_one_line_exit_2(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def w(truth=(), label="control", start=0.0):
    return Window("r", start, start + 10, truth, label, "edge-aggregation" if truth else "")


def test_scores_count_first_and_top_three_precision_recall_and_false_alarms():
    vs = [Verdict(w((5,), "link_down"), "007", [5, 1], [5]),
          Verdict(w((5,), "link_down", 10), "007", [1, 2, 5], [1]),
          Verdict(w((7,), "link_down", 20), "007", [], []),
          Verdict(w(start=30), "007", [3], [3], control_run=True),
          Verdict(w(start=40), "007", [], [], control_run=True)]
    acc = {(a.diagnoser, a.fault_kind): a for a in accuracy(vs, 40)}
    a = acc[("007", "link_down")]
    assert a.windows == 3 and a.ac1[0] == pytest.approx(1 / 3) and a.ac3[0] == pytest.approx(2 / 3)
    assert acc[("007", "link_down edge-aggregation")].windows == 3
    assert acc[("random", "link_down")].ac3[0] == pytest.approx(3 / 40)
    (al,) = alarms(vs)
    # blamed: 5 (right), 1 (wrong), none, 3 (a control): precision 1/3; truths 5, 5, 7: recall 1/3
    assert al.precision[0] == pytest.approx(1 / 3) and al.recall[0] == pytest.approx(1 / 3)
    assert al.false_alarms == 1 and al.per_hour == pytest.approx(1 / (20 / 3600))
    assert al.clean_alarms == 1 and al.clean_hours == pytest.approx(20 / 3600)   # the controls' windows, no other clean one
