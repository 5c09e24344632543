"""`flowdiagnoser:shared=on` (thesis 3.6.1, shared dependencies) and `peer` (PVFS-style peer
comparison): each rule on hand-made snapshots, and the fast path against the per-snapshot references
of tests/support/reference_shared_peer.py on random graphs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.diagnose import diagnose_stretches
from analysis.model.batch import Batch
from analysis.model.stretches import DIRS, stretch_from_json
from analysis.variants import BLOCKED, LABELS, STALLED, Variant, parse_variant, systems
from tests.support.reference import assert_batch_equals_reference, assert_same, reference
from tests.support.reference_shared_peer import ref_flowdiagnoser_shared, ref_peer
from tests.test_diagnosis_property import any_graph, ns_graph

# ---------------------------------------------------------------- hand-made snapshots


def host(conns: list[tuple], ipeth_tm: float, d: str = "in", lower: str = "ipeth") -> dict:
    """One snapshot of a host: an app, and per connection (name, remote, socket tm, socket wait,
    tcp tm) a socket and a TCP connection, all above one interface (`lower`: ipeth, or ip over eth).
    Direction `d` carries the counters; the other direction is empty."""
    mods = [{"id": "app", "kind": "app"}]
    snap = {"app": {"total_msgs": 0, "wait_ms": 0}}
    for name, remote, s_tm, s_wait, t_tm in conns:
        mods.append({"id": f"s{name}", "kind": "socket", "parents": ["app"]})
        mods.append({"id": name, "kind": "tcp", "parents": [f"s{name}"], "remote": remote})
        snap[f"s{name}"] = {"total_msgs": s_tm, "wait_ms": s_wait}
        snap[name] = {"total_msgs": t_tm}
    tcps = [c[0] for c in conns]
    if lower == "ipeth":
        mods.append({"id": "ipeth", "kind": "ipeth", "parents": tcps})
        snap["ipeth"] = {"total_msgs": ipeth_tm}
    else:
        mods.append({"id": "ip", "kind": "ip", "parents": tcps})
        mods.append({"id": "eth", "kind": "eth", "parents": ["ip"]})
        snap["ip"] = {"total_msgs": ipeth_tm}
        snap["eth"] = {"total_msgs": ipeth_tm}
    return {"modules": mods, "snapshots": [{d: snap}]}


def stretch(doc: dict):
    """stretch_from_json, with each module's optional "remote" as Stretch.remote."""
    s = stretch_from_json(doc)
    assert s.remote == [m.get("remote") for m in doc["modules"]]   # JSON's "remote" reaches the Stretch
    return s


def labels(doc: dict, variant: str, d: str = "in") -> dict[str, str]:
    """{module: label} of the first snapshot in direction d; the reference must agree."""
    s = stretch(doc)
    v = parse_variant(variant)
    (fast,) = diagnose_stretches([s], [v])
    assert_same(fast.results[v.name], reference(s, v), v.name)
    return {m: LABELS[int(r)] for m, r in zip(s.modules, fast.results[v.name][d][0][:, 0], strict=True)}


WAITING = (0, 100)   # a socket that waited the whole interval and moved nothing
MOVING = (10, 5)


def conn(name, remote, socket=WAITING, tcp_tm=0):
    return (name, remote, *socket, tcp_tm)


# ---------------------------------------------------------------- shared=on (thesis 3.6.1)


def test_shared_path_takes_the_blame_when_the_rest_of_the_host_moves():
    """3.6.1: connections to one host all waiting while a connection elsewhere moves: the baseline
    blames each connection; with shared=on the path to that host takes the blame, the members are
    BLOCKED (and no table row shows the path)."""
    doc = host([conn("a1", "10.0.5.1"), conn("a2", "10.0.5.1"), conn("a3", "10.0.5.1"),
                conn("b1", "10.0.6.1", MOVING, 40)], ipeth_tm=40)
    base = labels(doc, "flowdiagnoser")
    shared = labels(doc, "flowdiagnoser:shared=on")
    assert [base[m] for m in ("a1", "a2", "a3")] == ["STALLED"] * 3
    assert [shared[m] for m in ("a1", "a2", "a3")] == ["BLOCKED"] * 3
    assert base["ipeth"] == shared["ipeth"] == "HEALTHY"
    assert shared["b1"] == "HEALTHY"
    assert {m: r for m, r in shared.items() if m not in ("a1", "a2", "a3")} == \
           {m: r for m, r in base.items() if m not in ("a1", "a2", "a3")}


def test_shared_an_active_member_keeps_the_path_healthy():
    """The path is active if any connection to it is active (3.6.1, rule 1): its silent members are
    still blamed one by one."""
    doc = host([conn("a1", "10.0.5.1"), conn("a2", "10.0.5.1"), conn("a3", "10.0.5.1", MOVING, 30),
                conn("b1", "10.0.6.1", MOVING, 40)], ipeth_tm=70)
    shared = labels(doc, "flowdiagnoser:shared=on")
    assert (shared["a1"], shared["a2"], shared["a3"]) == ("STALLED", "STALLED", "HEALTHY")


@pytest.mark.parametrize("theta, expected", [(1, "BLOCKED"), (2, "STALLED")])
def test_shared_needs_theta_waiting_members(theta, expected):
    """One waiting member and one idle one (its socket neither moved nor waited: DONTCARE, not
    potentially blocked): the path takes the blame only with Θ = 1."""
    doc = host([conn("a1", "10.0.5.1"), conn("a2", "10.0.5.1", (0, 0)),
                conn("b1", "10.0.6.1", MOVING, 40)], ipeth_tm=40)
    shared = labels(doc, f"flowdiagnoser:theta={theta},shared=on")
    assert shared["a2"] == "DONTCARE"
    assert shared["a1"] == expected


def test_shared_groups_by_remote_address_only():
    """Two waiting connections to two different hosts are two paths of one member each: with Θ = 2
    neither path takes the blame. Connections without a known remote are in no path."""
    doc = host([conn("a1", "10.0.5.1"), conn("c1", "10.0.7.1"), conn("n1", None), conn("n2", None),
                conn("b1", "10.0.6.1", MOVING, 40)], ipeth_tm=40)
    shared = labels(doc, "flowdiagnoser:shared=on")
    assert [shared[m] for m in ("a1", "c1", "n1", "n2")] == ["STALLED"] * 4


@pytest.mark.parametrize("waiting", [1, 2, 3])
def test_shared_silent_interface_decides_as_before(waiting):
    """When the whole interface is silent, the ip+eth rule of 3.3.2 decides as before: Θ or more
    waiting connections -> connections BLOCKED, ip+eth STALLED; fewer -> both STALLED."""
    doc = host([conn(f"a{i}", "10.0.5.1") for i in range(waiting)], ipeth_tm=0)
    assert labels(doc, "flowdiagnoser:shared=on") == labels(doc, "flowdiagnoser")
    assert labels(doc, "flowdiagnoser:shared=on")["ipeth"] == "STALLED"


def test_shared_without_remote_addresses_is_the_baseline():
    doc = host([conn("a1", "10.0.5.1"), conn("a2", "10.0.5.1"), conn("b1", "10.0.6.1", MOVING, 40)], 40)
    s = stretch_from_json(doc)
    s.remote = None                                 # no addresses known
    v, base = parse_variant("flowdiagnoser:shared=on"), parse_variant("flowdiagnoser")
    (fast,) = diagnose_stretches([s], [v, base])
    for d in DIRS:
        np.testing.assert_array_equal(fast.results[v.name][d][0], fast.results[base.name][d][0])


def test_shared_leaves_modules_with_a_wait_counter_alone():
    """Table 2.2 (e): only a module without a wait counter passes the blame; a TCP module that
    reports one (JSON allows it) and did not wait stays STALLED."""
    doc = host([conn("a1", "10.0.5.1"), conn("a2", "10.0.5.1"), conn("b1", "10.0.6.1", MOVING, 40)], 40)
    doc["snapshots"][0]["in"]["a1"]["wait_ms"] = 0
    shared = labels(doc, "flowdiagnoser:theta=1,shared=on")
    assert (shared["a1"], shared["a2"]) == ("STALLED", "BLOCKED")


def test_shared_positive_and_confirm_follow_the_moved_labels():
    doc = host([conn("a1", "10.0.5.1"), conn("a2", "10.0.5.1"), conn("b1", "10.0.6.1", MOVING, 40)], 40)
    doc["snapshots"] = doc["snapshots"] * 3
    s = stretch(doc)
    for spec in ("flowdiagnoser:shared=on", "flowdiagnoser:shared=on,confirm=2"):
        v = parse_variant(spec)
        (fast,) = diagnose_stretches([s], [v])
        assert not fast.results[v.name]["in"][1].any()
        assert_same(fast.results[v.name], reference(s, v), spec)


# ---------------------------------------------------------------- peer


def test_peer_silent_connection_among_moving_peers_is_stalled():
    doc = host([conn("t1", None, MOVING, 100), conn("t2", None, MOVING, 100), conn("t3", None)], 200)
    got = labels(doc, "peer")
    assert (got["t1"], got["t2"], got["t3"], got["ipeth"]) == ("HEALTHY", "HEALTHY", "STALLED", "HEALTHY")


@pytest.mark.parametrize("x, k, expected", [(5, "10", "STALLED"), (20, "10", "HEALTHY"),
                                            (5, "inf", "HEALTHY"), (0, "inf", "STALLED"),
                                            (40, "2", "STALLED"), (60, "2", "HEALTHY")])
def test_peer_k_is_the_outlier_ratio_to_the_median_peer(x, k, expected):
    doc = host([conn("t1", None, MOVING, 90), conn("t2", None, MOVING, 110), conn("t3", None, MOVING, x)], 300)
    assert labels(doc, f"peer:k={k}")["t3"] == expected   # median of t1, t2 = 100


@pytest.mark.parametrize("min_peers, expected", [(1, "STALLED"), (2, "BLOCKED")])
def test_peer_min_peers(min_peers, expected):
    doc = host([conn("t1", None, MOVING, 100), conn("t2", None)], 100)
    got = labels(doc, f"peer:min_peers={min_peers}")
    assert got["t2"] == expected
    assert got["ipeth"] == "HEALTHY"


def test_peer_idle_connections_are_no_peers():
    """Connections nobody uses (socket neither moved nor waited) are DONTCARE and no peers: counted
    as peers, their zeros would make the median 0 and hide t3."""
    idle = [conn(f"i{j}", None, (0, 0)) for j in range(3)]
    doc = host([conn("t1", None, MOVING, 100), conn("t2", None, MOVING, 100), conn("t3", None), *idle], 200)
    got = labels(doc, "peer")
    assert got["t3"] == "STALLED"
    assert [got[f"i{j}"] for j in range(3)] == ["DONTCARE"] * 3


def test_peer_majority_silent_blames_no_connection():
    """Four of six busy connections silent: each silent one's peers have median 0, so none deviates;
    the interface moved, so it is not blamed either (peer comparison needs a healthy majority)."""
    doc = host([conn(f"s{j}", None) for j in range(4)] + [conn("m1", None, MOVING, 50), conn("m2", None, MOVING, 50)],
               100)
    got = labels(doc, "peer")
    assert [got[f"s{j}"] for j in range(4)] == ["BLOCKED"] * 4
    assert got["ipeth"] == "HEALTHY"


@pytest.mark.parametrize("lower", ["ipeth", "ip"])
def test_peer_interface_blamed_when_all_busy_connections_are_silent(lower):
    doc = host([conn("t1", None), conn("t2", None), conn("i1", None, (0, 0))], 0, lower=lower)
    got = labels(doc, "peer")
    assert (got["t1"], got["t2"], got["i1"]) == ("BLOCKED", "BLOCKED", "DONTCARE")
    assert got[lower] == "STALLED"
    if lower == "ip":
        assert got["eth"] == "STALLED"   # below ip, it sees the connections above ip


def test_peer_single_busy_connection_blames_the_interface_only():
    got = labels(host([conn("t1", None)], 0), "peer:min_peers=1")
    assert (got["t1"], got["ipeth"]) == ("BLOCKED", "STALLED")


def test_peer_interface_not_blamed_without_busy_connections_or_when_one_moved():
    idle = host([conn("i1", None, (0, 0)), conn("i2", None, (0, 0))], 0)
    assert labels(idle, "peer")["ipeth"] == "DONTCARE"
    # counters read a moment apart: the interface's 0 packets, a connection's 3 segments
    skew = host([conn("t1", None), conn("t2", None, MOVING, 3)], 0)
    assert labels(skew, "peer")["ipeth"] == "DONTCARE"


def test_peer_busy_from_the_socket_or_as_a_root_not_when_detached():
    """A connection is busy when its socket moved or waited; a root of the run (no interceptor) is
    assumed busy (thesis 3.6.2); a detached one (socket not known here) only if it moved."""
    doc = host([conn("t1", None, MOVING, 100), conn("t2", None, MOVING, 100)], 200)
    doc["modules"].append({"id": "r", "kind": "tcp"})
    doc["modules"][-2]["parents"].append("r")    # the interface is the last module before r
    s = stretch(doc)
    v = parse_variant("peer")
    (fast,) = diagnose_stretches([s], [v])
    assert LABELS[fast.results[v.name]["in"][0][s.modules.index("r"), 0]] == "STALLED"
    s.detached = np.array([m == "r" for m in s.modules])
    (fast,) = diagnose_stretches([s], [v])
    assert LABELS[fast.results[v.name]["in"][0][s.modules.index("r"), 0]] == "DONTCARE"
    assert_same(fast.results[v.name], reference(s, v), v.name)


def test_peer_apps_and_sockets_are_flowdiagnosers():
    """An application pause: the sockets neither move nor wait. Their rows are FlowDiagnoser's."""
    doc = host([conn("t1", None, (0, 0)), conn("t2", None, (0, 0)), conn("t3", None, MOVING, 30)], 30, d="out")
    peer, fd = labels(doc, "peer", "out"), labels(doc, "flowdiagnoser", "out")
    assert peer["st1"] == fd["st1"] == "STALLED"
    assert {m: peer[m] for m in ("app", "st1", "st2", "st3")} == {m: fd[m] for m in ("app", "st1", "st2", "st3")}


# ---------------------------------------------------------------- registry and cells


def test_names_presets_and_parameters():
    assert parse_variant("flowdiagnoser:shared=on").name == "flowdiagnoser:theta=2,shared=on"
    assert parse_variant("flowdiagnoser:theta=2,shared=off").name == "flowdiagnoser:theta=2"
    assert parse_variant("peer").name == "peer"
    assert parse_variant("peer:k=inf,min_peers=3").name == "peer:k=inf,min_peers=3"
    assert parse_variant("peer").kind == "label"
    assert "flowdiagnoser:shared=on" in systems()["flowdiagnoser"].presets
    for preset in systems()["peer"].presets + systems()["flowdiagnoser"].presets:
        parse_variant(preset)
    from rundir.errors import UserError
    for bad in ("peer:k=0.5", "peer:min_peers=0", "flowdiagnoser:shared=maybe"):
        with pytest.raises(UserError):
            parse_variant(bad)


def test_cell_groups_are_per_stretch_and_snapshot():
    a = stretch(host([conn("a1", "X"), conn("a2", "X"), conn("b1", "Y")], 0))
    b = stretch(host([conn("a1", "X")], 0))
    batch = Batch([a, b])
    gid, n = batch.remote_groups
    per = batch.split(gid)
    assert n == 3                             # X and Y in the first stretch, X in the second
    g0 = per[0][:, 0]
    assert g0[a.modules.index("a1")] == g0[a.modules.index("a2")] != g0[a.modules.index("b1")]
    assert g0[a.modules.index("ipeth")] == -1
    assert per[1][b.modules.index("a1"), 0] not in g0
    with pytest.raises(ValueError):
        batch.cell_groups([[None], [None]])


# ---------------------------------------------------------------- fast path = reference


@st.composite
def with_remotes(draw, graphs):
    s = draw(graphs)
    s.remote = draw(st.lists(st.sampled_from([None, "10.0.5.1", "10.0.6.1", "10.0.7.1"]),
                             min_size=s.n, max_size=s.n))
    return s


ANY = st.one_of(with_remotes(any_graph()), with_remotes(ns_graph()))
SHARED = st.builds(lambda theta, queues, confirm: Variant(systems()["flowdiagnoser"], {
    "theta": theta, "queues": queues, "confirm": confirm, "shared": True}),
    st.integers(1, 4), st.booleans(), st.integers(1, 3))
PEER = st.builds(lambda k, mp: Variant(systems()["peer"], {"k": k, "min_peers": mp}),
                 st.sampled_from([1.0, 2.0, 10.0, math.inf]), st.integers(1, 3))


@settings(max_examples=300, deadline=None)
@given(ANY, st.one_of(SHARED, PEER))
def test_fast_path_equals_reference(s, v):
    (fast,) = diagnose_stretches([s], [v])
    assert_same(fast.results[v.name], reference(s, v), v.name)


@settings(max_examples=100, deadline=None)
@given(st.lists(ANY, min_size=2, max_size=5), st.one_of(SHARED, PEER))
def test_many_stretches_at_once_equal_the_reference(stretches, v):
    assert_batch_equals_reference(stretches, v)


@settings(max_examples=200, deadline=None)
@given(ANY, st.integers(1, 4), st.booleans())
def test_shared_only_turns_stalled_connections_into_blocked(s, theta, queues):
    base = ref_flowdiagnoser_shared(s, theta=theta, queues=queues)
    shared = ref_flowdiagnoser_shared(s, theta=theta, queues=queues, shared=True)
    for d in DIRS:
        changed = base[d][0] != shared[d][0]
        assert (base[d][0][changed] == STALLED).all() and (shared[d][0][changed] == BLOCKED).all()
        rows = np.flatnonzero(changed.any(1))
        assert all(s.kinds[m] == "tcp" and s.remote[m] is not None for m in rows)


@settings(max_examples=200, deadline=None)
@given(with_remotes(ns_graph()))
def test_peer_apps_and_sockets_equal_flowdiagnoser_theta_2(s):
    peer, fd = ref_peer(s), ref_flowdiagnoser_shared(s, theta=2)
    keep = [m for m in range(s.n) if s.kinds[m] in ("app", "socket")]
    for d in DIRS:
        np.testing.assert_array_equal(peer[d][0][keep], fd[d][0][keep])
