"""The seeds' worked examples, diagnosed through the public entry points (JSON in, results out)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analysis.diagnose import diagnose_json, diagnose_stretches
from analysis.model.batch import Batch
from analysis.model.stretches import stretch_from_json
from analysis.variants import LABELS, parse_variant
from analysis.variants.nest_cf import observations as batch_observations
from analysis.variants.nest_cf_tables import OBS
from tests.support.reference import reference

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "table5.json"


def run(doc: dict, variant: str) -> dict:
    """{dir: {module: result}} of the first snapshot (labels as strings, cf as floats)."""
    out = diagnose_json(doc, [variant])["variants"][0]
    assert len(out["snapshots"]) == len(doc["snapshots"])
    # Every module has a result in both directions.
    for snap in out["snapshots"]:
        for d in ("in", "out"):
            assert set(snap[d]) == {m["id"] for m in doc["modules"]}
    # The reference implementation agrees on the same input.
    st = stretch_from_json(doc)
    v = parse_variant(variant)
    (fast,) = diagnose_stretches([st], [v])
    ref = reference(st, v)
    for d in ("in", "out"):
        np.testing.assert_allclose(fast.results[v.name][d][0], ref[d][0], atol=1e-12)
    return {d: {m: r["result"] for m, r in out["snapshots"][0][d].items()} for d in ("in", "out")}


def observations(st, d, **switches):
    """(slot, module, snapshot) observation codes of one stretch."""
    return batch_observations(Batch([st]), d, **switches).reshape(3, st.n, st.t)


def webkit(counters_in: dict, counters_out: dict | None = None) -> dict:
    """Thesis Figures 3.2/3.3, paper Figure 4: webkit with four sockets, one IP, one interface."""
    mods = [{"id": "webkit", "kind": "app"}]
    for fd in ("fd2", "fd5", "fd7", "fd24"):
        mods.append({"id": fd, "kind": "socket", "parents": ["webkit"]})
    for fd, tcp in (("fd2", "TCPw"), ("fd5", "TCPx"), ("fd7", "TCPy"), ("fd24", "TCPz")):
        mods.append({"id": tcp, "kind": "tcp", "parents": [fd]})
    mods.append({"id": "10.0.1.43", "kind": "ip", "parents": ["TCPw", "TCPx", "TCPy", "TCPz"]})
    mods.append({"id": "eth0", "kind": "eth", "parents": ["10.0.1.43"]})
    return {"modules": mods, "snapshots": [{"in": counters_in, "out": counters_out or {}}]}


# ------------------------------------------------------------------------ NeST paper, Table 5

TABLE5 = {"webkit": -0.84, "fd2": -1.00, "fd5": -0.84, "fd7": -0.84, "fd24": +1.00, "TCPw": +0.94,
          "TCPx": -0.84, "TCPy": -0.84, "TCPz": -1.00, "10.0.1.43": -0.89, "eth0": -0.60}


def test_paper_table5_all_eleven_values():
    doc = json.loads(EXAMPLE.read_text())
    cf = run(doc, "nest-cf")["in"]
    assert set(cf) == set(TABLE5)
    for module, expected in TABLE5.items():
        assert cf[module] == pytest.approx(expected, abs=0.01), module
    # The exact arithmetic of the worked example (paper 3.3).
    assert cf["TCPw"] == pytest.approx(0.936, abs=1e-4)
    assert cf["10.0.1.43"] == pytest.approx(-0.8933, abs=1e-4)


def test_paper_table5_observations_and_positives():
    doc = json.loads(EXAMPLE.read_text())
    obs = observations(stretch_from_json(doc), "in")
    ids = [m["id"] for m in doc["modules"]]
    got = {m: {OBS[o] for o in obs[:, i, 0] if o < len(OBS)} for i, m in enumerate(ids)}
    assert got == {"webkit": {"ACT"}, "fd2": {"WAIT"}, "fd5": {"ACT"}, "fd7": {"ACT"}, "fd24": {"IDLE"},
                   "TCPw": {"ANW", "QZ"}, "TCPx": {"ACT"}, "TCPy": {"ACT"}, "TCPz": {"IGN"},
                   "10.0.1.43": {"ACT"}, "eth0": {"ACT"}}
    out = diagnose_json(doc, ["nest-cf"])["variants"][0]["snapshots"][0]["in"]
    assert {m for m, r in out.items() if r["positive"]} == {"fd24", "TCPw"}
    # The threshold moves the cut: TCPw (+0.94) drops out, fd 24 (+1.0) stays.
    out = diagnose_json(doc, ["nest-cf:threshold=0.95"])["variants"][0]["snapshots"][0]["in"]
    assert {m for m, r in out.items() if r["positive"]} == {"fd24"}


def test_paper_table8_switches_change_the_observations():
    doc = json.loads(EXAMPLE.read_text())
    st = stretch_from_json(doc)
    tcpw, tcpz = 5, 8
    assert OBS[observations(st, "in", anw=False)[0, tcpw, 0]] == "NONE"
    assert OBS[observations(st, "in", ign=False)[0, tcpz, 0]] == "NONE"
    assert observations(st, "in", queues=False)[1, tcpw, 0] == len(OBS)  # no QZ
    # Without QZ, TCPw gets +0.6 (ANW from fd 2) and +0.6 (from 10.0.1.43): +0.84.
    assert run(doc, "nest-cf:queues=off")["in"]["TCPw"] == pytest.approx(0.84, abs=1e-9)
    # Without ANW, TCPw is NONE: DT_IN[NONE][WAIT] and DT_IN[ACT][NONE] decide.
    assert run(doc, "nest-cf:anw=off")["in"]["TCPw"] != run(doc, "nest-cf")["in"]["TCPw"]


def test_errors_are_weak_evidence_and_switchable():
    doc = json.loads(EXAMPLE.read_text())
    doc["snapshots"][0]["in"]["TCPx"]["errors"] = 3
    with_err = run(doc, "nest-cf")["in"]
    without = run(doc, "nest-cf:errors=off")["in"]
    assert without["TCPx"] == pytest.approx(-0.84, abs=1e-9)
    # ERR adds DT_IN[ERR][ACT]#P = +0.6 (vs fd 5) and DT_IN[ACT][ERR]#C = +0.4 (vs 10.0.1.43):
    # -0.6 ⊕ +0.6 ⊕ -0.6 ⊕ +0.4 = -1/3
    assert with_err["TCPx"] == pytest.approx(-1 / 3, abs=1e-4)
    assert with_err["10.0.1.43"] == without["10.0.1.43"]


def _network_fault(n_waiting: int, n_idle: int = 1, queue: int = 0) -> dict:
    """n connections whose sockets wait above one silent ipeth module (inbound)."""
    mods = [{"id": "app", "kind": "app"}, {"id": "ipeth", "kind": "ipeth", "parents": []}]
    cin = {"app": {"total_msgs": 0, "wait_ms": 100 * n_waiting}, "ipeth": {"total_msgs": 0}}
    for k in range(n_waiting + n_idle):
        mods += [{"id": f"s{k}", "kind": "socket", "parents": ["app"]}, {"id": f"t{k}", "kind": "tcp", "parents": [f"s{k}"]}]
        mods[1]["parents"].append(f"t{k}")
        cin[f"s{k}"] = {"total_msgs": 0, "wait_ms": 100 if k < n_waiting else 0}
        cin[f"t{k}"] = {"total_msgs": 0, "queued": queue}
    return {"modules": mods, "snapshots": [{"in": cin}]}


def test_nest_cf_network_fault_blames_the_shared_child():
    """Paper 5.2-5.3: one waiting flow blames both TCP and ip+eth; with several, the co-waiting
    connections are absolved in phase two and ip+eth is blamed."""
    one = run(_network_fault(1), "nest-cf")["in"]
    assert one["t0"] > 0 and one["ipeth"] > 0
    for n in (2, 3, 5):
        many = run(_network_fault(n), "nest-cf")["in"]
        assert all(many[f"t{k}"] < 0 for k in range(n)), many
        assert many["ipeth"] > one["ipeth"]
        assert many["t" + str(n)] == -1.0  # the idle socket's connection is IGN: absolved


# ------------------------------------------------------------------------ thesis Figures 3.2, 3.3

FIG_3_2 = {  # inbound counters of Figure 3.2(a)
    "webkit": {"total_msgs": 30, "wait_ms": 120}, "fd2": {"total_msgs": 0, "wait_ms": 90},
    "fd5": {"total_msgs": 12, "wait_ms": 10}, "fd7": {"total_msgs": 18, "wait_ms": 20},
    "fd24": {"total_msgs": 0, "wait_ms": 0},
    "TCPw": {"total_msgs": 0}, "TCPx": {"total_msgs": 25}, "TCPy": {"total_msgs": 31}, "TCPz": {"total_msgs": 0},
    "10.0.1.43": {"total_msgs": 56}, "eth0": {"total_msgs": 57},
}
FIG_3_3 = {  # Figure 3.3(a): fd 2, fd 5, fd 7 wait; every connection and the lower layers are silent
    "webkit": {"total_msgs": 0, "wait_ms": 270}, "fd2": {"total_msgs": 0, "wait_ms": 90},
    "fd5": {"total_msgs": 0, "wait_ms": 90}, "fd7": {"total_msgs": 0, "wait_ms": 90},
    "fd24": {"total_msgs": 0, "wait_ms": 0},
    "TCPw": {"total_msgs": 0}, "TCPx": {"total_msgs": 0}, "TCPy": {"total_msgs": 0}, "TCPz": {"total_msgs": 0},
    "10.0.1.43": {"total_msgs": 0}, "eth0": {"total_msgs": 0},
}


def test_thesis_figure_3_2_single_connection_fault():
    got = run(webkit(FIG_3_2), "flowdiagnoser:theta=2")["in"]
    assert got == {"webkit": "HEALTHY", "fd2": "BLOCKED", "fd5": "HEALTHY", "fd7": "HEALTHY",
                   "fd24": "STALLED", "TCPw": "STALLED", "TCPx": "HEALTHY", "TCPy": "HEALTHY",
                   "TCPz": "DONTCARE", "10.0.1.43": "HEALTHY", "eth0": "HEALTHY"}


def test_thesis_figure_3_3_network_fault_theta_2():
    got = run(webkit(FIG_3_3), "flowdiagnoser:theta=2")["in"]
    assert got == {"webkit": "BLOCKED", "fd2": "BLOCKED", "fd5": "BLOCKED", "fd7": "BLOCKED",
                   "fd24": "STALLED", "TCPw": "BLOCKED", "TCPx": "BLOCKED", "TCPy": "BLOCKED",
                   "TCPz": "DONTCARE", "10.0.1.43": "STALLED", "eth0": "STALLED"}


def test_thesis_figure_3_3_with_plain_pass_the_blame_and_high_theta():
    # Θ = 1 is the chapter 2 rule: only the lowest silent module is STALLED (thesis 3.3.2).
    got = run(webkit(FIG_3_3), "flowdiagnoser:theta=1")["in"]
    assert got["eth0"] == "STALLED" and got["10.0.1.43"] == "BLOCKED"
    assert {got[t] for t in ("TCPw", "TCPx", "TCPy")} == {"BLOCKED"}
    # Θ = 4 > 3 waiting connections: not enough evidence, connections and network all STALLED.
    got = run(webkit(FIG_3_3), "flowdiagnoser:theta=4")["in"]
    assert {got[m] for m in ("TCPw", "TCPx", "TCPy", "10.0.1.43", "eth0")} == {"STALLED"}
    assert got["TCPz"] == "DONTCARE" and got["fd2"] == "BLOCKED"


@pytest.mark.parametrize("theta", [2, 3, 5])
@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_theta_boundary(theta, delta):
    n = theta + delta
    got = run(_network_fault(n), f"flowdiagnoser:theta={theta}")["in"]
    tcps = {got[f"t{k}"] for k in range(n)}
    assert got["ipeth"] == "STALLED"
    assert tcps == ({"BLOCKED"} if n >= theta else {"STALLED"})
    assert got[f"t{n}"] == "DONTCARE"  # below the idle socket
    assert {got[f"s{k}"] for k in range(n)} == {"BLOCKED"} and got[f"s{n}"] == "STALLED"


def test_application_follows_its_sockets():
    """Thesis 3.3.1: HEALTHY if a socket is, else BLOCKED if one waited, else STALLED -- whatever
    the application's own counters say."""
    def app_result(socks):
        mods = [{"id": "app", "kind": "app"}] + [{"id": f"s{i}", "kind": "socket", "parents": ["app"]}
                                                 for i in range(len(socks))]
        cin = {"app": {"total_msgs": 99, "wait_ms": 0}} | {f"s{i}": c for i, c in enumerate(socks)}
        return run({"modules": mods, "snapshots": [{"in": cin}]}, "flowdiagnoser")["in"]["app"]

    active, waiting, idle = {"total_msgs": 3, "wait_ms": 1}, {"total_msgs": 0, "wait_ms": 50}, {"total_msgs": 0, "wait_ms": 0}
    assert app_result([idle, waiting, active]) == "HEALTHY"
    assert app_result([idle, waiting]) == "BLOCKED"
    assert app_result([idle, idle]) == "STALLED"
    assert app_result([{"total_msgs": 0}]) == "STALLED"  # a socket without a wait counter did not wait


def test_issue_example_output_shape():
    doc = {"modules": [{"id": "webkit", "kind": "app"}, {"id": "fd2", "kind": "socket", "parents": ["webkit"]},
                       {"id": "TCPw", "kind": "tcp", "parents": ["fd2"]}, {"id": "ipeth", "kind": "ipeth", "parents": ["TCPw"]}],
           "snapshots": [{"in": {"webkit": {"total_msgs": 0, "wait_ms": 80}, "fd2": {"total_msgs": 0, "wait_ms": 80},
                                 "TCPw": {"total_msgs": 0, "queued": 0}, "ipeth": {"total_msgs": 12}},
                          "out": {"webkit": {"total_msgs": 0, "wait_ms": 0}}}]}
    out = diagnose_json(doc, ["flowdiagnoser", "nest-cf"])
    fd, cf = out["variants"]
    assert fd["variant"] == "flowdiagnoser:theta=2" and cf["variant"] == "nest-cf"
    snap = fd["snapshots"][0]
    assert snap["in"]["webkit"] == {"result": "BLOCKED", "positive": False}
    assert snap["out"]["webkit"] == {"result": "STALLED", "positive": True}
    assert snap["in"]["TCPw"] == {"result": "STALLED", "positive": True}
    assert cf["snapshots"][0]["in"]["TCPw"]["result"] == pytest.approx(0.94, abs=0.01)
    assert cf["snapshots"][0]["in"]["TCPw"]["positive"] is True
    for v in out["variants"]:
        for d in ("in", "out"):
            assert set(v["snapshots"][0][d]) == {"webkit", "fd2", "TCPw", "ipeth"}
            for r in v["snapshots"][0][d].values():
                assert set(r) == {"result", "positive"}
                assert r["result"] in LABELS or isinstance(r["result"], float)


# ------------------------------------------------------------------------ thesis Figure 2.3


def _figure_2_3(with_f: bool, f_queue: int | None = None, d: str = "out") -> dict:
    """A -> B -> {C, D}; C -> E; D -> E (and D -> F in (b)). Traffic flows A-B-C-E; D is inactive
    with messages in its queue (its parent is partially blocked)."""
    edges = {"A": [], "B": ["A"], "C": ["B"], "D": ["B"], "E": ["C", "D"], "F": ["D"]}
    names = [m for m in edges if with_f or m != "F"]
    mods = [{"id": m, "kind": "tcp", "parents": edges[m]} for m in names]
    c = {m: {"total_msgs": 5} for m in ("A", "B", "C", "E")}
    c["D"] = {"total_msgs": 0, "queued": 4}
    if with_f:
        c["F"] = {"total_msgs": 0} | ({} if f_queue is None else {"queued": f_queue})
    return {"modules": mods, "snapshots": [{d: c}]}


def test_thesis_figure_2_3_a_active_children_blame_d():
    got = run(_figure_2_3(False), "flowdiagnoser:theta=1,queues=on")["out"]
    assert got == {"A": "HEALTHY", "B": "HEALTHY", "C": "HEALTHY", "D": "STALLED", "E": "HEALTHY"}


def test_thesis_figure_2_3_b_backpressure_from_f():
    got = run(_figure_2_3(True), "flowdiagnoser:theta=1,queues=on")["out"]
    assert got["D"] == "BLOCKED" and got["F"] == "STALLED"
    assert {got[m] for m in "ABCE"} == {"HEALTHY"}
    # F with an empty queue has nothing to do: it cannot take the blame, D is at fault.
    got = run(_figure_2_3(True, f_queue=0), "flowdiagnoser:theta=1,queues=on")["out"]
    assert got["D"] == "STALLED" and got["F"] == "DONTCARE"
    # With Θ = 2, D is F's only waiting parent: both STALLED (thesis 3.3.2).
    got = run(_figure_2_3(True), "flowdiagnoser:theta=2,queues=on")["out"]
    assert got["D"] == "STALLED" and got["F"] == "STALLED"


def test_queue_direction_convention():
    # Without queues, D's work is invisible: no parent waits, so D has nothing to do.
    assert run(_figure_2_3(False), "flowdiagnoser:theta=1")["out"]["D"] == "DONTCARE"
    # Inbound, a module's queue is its reader's pending work, not its own: ignored.
    assert run(_figure_2_3(False, d="in"), "flowdiagnoser:theta=1,queues=on")["in"]["D"] == "DONTCARE"


# ------------------------------------------------------------------------ cycles (Algorithms 1-2)


def _cycle_doc(members_active=(), x_tm=5, s_wait=40, theta=1, external=True, queues=None) -> dict:
    """s (a socket) -> A -> B -> C -> A, and C -> X."""
    parents = {"A": ["C"] + (["s"] if external else []), "B": ["A"], "C": ["B"], "X": ["C"]}
    mods = ([{"id": "s", "kind": "socket"}] if external else []) + \
        [{"id": m, "kind": "tcp", "parents": p} for m, p in parents.items()]
    c = {m: {"total_msgs": 7 if m in members_active else 0} for m in "ABC"}
    for m, q in (queues or {}).items():
        c[m]["queued"] = q
    c["X"] = {"total_msgs": x_tm}
    if external:
        c["s"] = {"total_msgs": 0, "wait_ms": s_wait}
    return {"modules": mods, "snapshots": [{"out": c}]}


def test_cycle_of_inactive_modules_is_one_super_module():
    got = run(_cycle_doc(), "flowdiagnoser:theta=1")["out"]
    # X is active: the merged cycle cannot pass the blame, and is STALLED as a whole.
    assert got == {"s": "BLOCKED", "A": "STALLED", "B": "STALLED", "C": "STALLED", "X": "HEALTHY"}
    got = run(_cycle_doc(x_tm=0), "flowdiagnoser:theta=1")["out"]
    assert got == {"s": "BLOCKED", "A": "BLOCKED", "B": "BLOCKED", "C": "BLOCKED", "X": "STALLED"}
    got = run(_cycle_doc(x_tm=0), "flowdiagnoser:theta=2")["out"]  # X has one waiting parent: Θ unmet
    assert {got[m] for m in "ABCX"} == {"STALLED"}
    got = run(_cycle_doc(s_wait=0), "flowdiagnoser:theta=1")["out"]  # nobody waits: no work
    assert {got[m] for m in "ABCX"} == {"DONTCARE", "HEALTHY"} and got["X"] == "HEALTHY"


def test_cycle_without_outside_parents_is_a_root():
    got = run(_cycle_doc(external=False, x_tm=0), "flowdiagnoser:theta=1")["out"]
    assert got == {"A": "BLOCKED", "B": "BLOCKED", "C": "BLOCKED", "X": "STALLED"}


def test_cycle_broken_by_an_active_member():
    # A is active: its out-edge A -> B goes (Algorithm 2); s -> A is the only way in, so B and C
    # have no waiting parent left and nothing to do.
    got = run(_cycle_doc(members_active=("A",), x_tm=0), "flowdiagnoser:theta=1")["out"]
    assert got == {"s": "BLOCKED", "A": "HEALTHY", "B": "DONTCARE", "C": "DONTCARE", "X": "DONTCARE"}


def test_cycle_broken_by_an_empty_queue():
    got = run(_cycle_doc(queues={"B": 0}, x_tm=0), "flowdiagnoser:theta=1,queues=on")["out"]
    # B has no work and does not propagate it; A waits on B, which cannot take the blame.
    assert got["B"] == "DONTCARE" and got["A"] == "STALLED" and got["s"] == "BLOCKED"
    assert got["C"] == "DONTCARE" and got["X"] == "DONTCARE"


# ------------------------------------------------------------------------ over time


def test_confirm_requires_consecutive_stalled_snapshots():
    doc = {"modules": [{"id": "s", "kind": "socket"}],
           "snapshots": [{"out": {"s": {"total_msgs": tm, "wait_ms": 0}}} for tm in (0, 5, 0, 0, 0, 3, 0)]}
    plain = diagnose_json(doc, ["flowdiagnoser"])["variants"][0]["snapshots"]
    twice = diagnose_json(doc, ["flowdiagnoser:confirm=2"])["variants"][0]["snapshots"]
    assert [s["out"]["s"]["positive"] for s in plain] == [True, False, True, True, True, False, True]
    assert [s["out"]["s"]["positive"] for s in twice] == [False, False, False, True, True, False, False]
    assert [s["out"]["s"]["result"] for s in twice] == [s["out"]["s"]["result"] for s in plain]
