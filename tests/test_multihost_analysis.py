"""The analysis of a run of several monitored hosts (analysis.model.hosts): each host's modules are
diagnosed alone, so no variant relates modules of different hosts; a run of one host reads as before."""

from __future__ import annotations

import types

import numpy as np

from analysis.diagnose import diagnose_run
from analysis.model.hosts import module_hosts, split_by_host
from analysis.model.stretches import load_stretches
from rundir.handmade import RunBuilder

N = 20


def two_hosts(path, record_hosts=True):
    """On each host an interface that moves and one TCP connection (a root: no socket above it) that
    moves nothing, both connections to the same remote address (10.0.9.9). Without record_hosts the
    same modules carry no host: one host's two interfaces and two connections."""
    b = RunBuilder(path, N)
    ids = {}
    for h in ("web", "db"):
        attrs = {"host": h} if record_hosts else {}
        ip = b.module("ipeth", f"ipeth:{h}-eth0", attrs, name=f"{h}: ip+eth {h}-eth0")
        tcp = b.module("tcp", f"tcp:{len(ids) + 1}", {**attrs, "dst": "10.0.9.9", "dport": 80}, name=f"{h}: tcp")
        b.edge(tcp, ip)
        for d in ("in", "out"):
            b.counters(ip, d, 10.0)
            b.counters(tcp, d, 0.0)
        ids[h] = (ip, tcp)
    return b.write(), ids


def label_of(diag, module, d="out", seq=N // 2):
    row = diag[(diag["module"] == module) & (diag["dir"] == d) & (diag["seq"] == seq)]
    assert len(row) == 1
    return row["label"].iloc[0]


def test_shared_paths_never_group_connections_of_two_hosts(tmp_path):
    """flowdiagnoser:shared=on blames the "path to X" of Θ = 2 silent connections to X: two hosts'
    connections to one remote are not two connections of one host."""
    path, ids = two_hosts(tmp_path / "multi")
    diag = diagnose_run(path, ["flowdiagnoser:shared=on"])
    for h in ("web", "db"):
        assert label_of(diag, ids[h][1]) == "STALLED"   # alone on its host: nothing to share a path with
    # the same counters as one host's two connections: the shared path takes the blame
    one, one_ids = two_hosts(tmp_path / "one", record_hosts=False)
    diag_one = diagnose_run(one, ["flowdiagnoser:shared=on"])
    assert [label_of(diag_one, one_ids[h][1]) for h in ("web", "db")] == ["BLOCKED", "BLOCKED"]


def test_stretches_are_split_per_host_and_one_host_is_left_alone(tmp_path):
    path, ids = two_hosts(tmp_path / "multi")
    run = load_stretches(path)
    assert {st.host for st in run.stretches} == {"web", "db"}
    for st in run.stretches:
        hosts = module_hosts([m for m in run.modules if m[0] in set(st.modules)])
        assert set(hosts.values()) == {st.host}
        assert st.edges == [(1, 0)] and st.counters["out"].tm.shape == (2, st.t)
    # diagnosis rows: every module, every snapshot, once
    diag = diagnose_run(run, ["flowdiagnoser"])
    assert len(diag) == 4 * 2 * len(run.seqs)
    assert not diag.duplicated(["module", "dir", "seq"]).any()
    # no host recorded: the stretches as they were, the very list
    stretches = list(run.stretches)
    assert split_by_host(stretches, dict.fromkeys(range(1, 5))) is stretches
    assert split_by_host(stretches, dict.fromkeys(range(1, 5), "web")) is stretches


def test_subset_keeps_each_modules_counters(tmp_path):
    path, ids = two_hosts(tmp_path / "multi")
    whole = load_stretches(path)
    by_host = {st.host: st for st in whole.stretches}
    ip, tcp = ids["db"]
    st = by_host["db"]
    assert st.modules == [ip, tcp] and st.kinds == ["ipeth", "tcp"]
    assert np.all(st.counters["in"].tm[0, 1:] == 10.0) and np.all(st.counters["in"].tm[1] == 0.0)


def faulted(path):
    """web and db, each an interface and a connection; db's connection silent in a tcp_drop window."""
    b = RunBuilder(path, N)
    ids = {}
    for h in ("web", "db"):
        ip = b.module("ipeth", f"ipeth:{h}-eth0", {"host": h}, name=f"{h}: ip+eth {h}-eth0")
        tcp = b.module("tcp", f"tcp:{h}", {"host": h, "dst": "10.0.9.9", "dport": 80}, name=f"{h}: tcp")
        b.edge(tcp, ip)
        tm = np.full(N, 10.0)
        if h == "db":
            tm[8:14] = 0.0
        for d in ("in", "out"):
            b.counters(ip, d, 20.0)
            b.counters(tcp, d, tm)
        ids[h] = (ip, tcp)
    b.fault("tcp_drop", ids["db"][1], start=0.75, end=1.35, target={"module_key": "tcp:db", "host": "db"})
    return b.write(), ids


def test_labels_and_scores_of_a_fault_on_one_host(tmp_path):
    """A fault on db's connection labels db's connection (in its impact period) and nothing of web;
    the accuracy table is computed over both hosts' modules."""
    import nestlab

    path, ids = faulted(tmp_path / "run")
    run = nestlab.open_run(path)
    labels = run.labels()
    positive = labels[labels["actual"]]
    assert set(positive["module"]) == {ids["db"][1]} and positive["seq"].nunique() == 6
    acc = run.accuracy(variants=["flowdiagnoser"])
    tcp = acc[(acc["section"] == "Inbound") & (acc["row"] == "TCP")].iloc[0]
    assert (tcp["AP"], tcp["TP"], tcp["FP"], tcp["Total"]) == (6, 6, 0, 2 * (N - 1))


def test_the_report_names_each_modules_host(tmp_path):
    from nestlab.cli import nestlab_main

    path, ids = faulted(tmp_path / "multi")
    out = tmp_path / "report.html"
    assert nestlab_main(["report", str(path), "-o", str(out)]) == 0
    assert "db: tcp" in out.read_text()   # the fault's module, named with its host
    assert nestlab_main(["accuracy", str(path), "--out", str(tmp_path / "acc")]) == 0
    assert (tmp_path / "acc" / "accuracy.csv").is_file()


def test_short_names_carry_the_host():
    import pandas as pd

    from analysis.render.plots import short_name

    mods = pd.DataFrame({"kind": ["app", "tcp", "app"], "name": ["db: mariadbd --port 3306", "db: tcp", "wget 7"],
                         "attrs": [{"host": "db"}, {"host": "db", "sport": 3306, "dport": 5}, {}]},
                        index=pd.Index([1, 2, 3], name="id"))
    data = types.SimpleNamespace(modules=mods)
    assert short_name(data, 1) == "db: mariadbd#1"
    assert short_name(data, 2) == "db: tcp#2 :3306>:5"
    assert short_name(data, 3) == "wget#3"   # one host: as before
