"""`flowdiagnoser:tcpstate=on` and `confirm_tcp` (issue 13): each rule on hand-made snapshots, the
tcp_info state read from run.db (format 4, carried forward) and refused on older runs, per-kind
confirmation, and the fast path against tests/support/reference_tcpstate.py on random graphs."""

from __future__ import annotations

import json
import math
import sqlite3

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.diagnose import diagnose_json, diagnose_run, diagnose_stretches
from analysis.load import load_run_data
from analysis.model.stretches import DIRS, load_stretches
from analysis.model.tcpstate import TcpState
from analysis.variants import LABELS, Variant, parse_variant, systems
from rundir.db import TCP_STATE_COLUMNS
from rundir.errors import UserError
from tests.support.reference import assert_batch_equals_reference, assert_same, reference
from tests.support.runs import WGET, RunBuilder
from tests.test_diagnosis_property import any_graph, ns_graph
from tests.test_variants_shared_peer import MOVING, conn, host, stretch

NOW = 10.0     # the snapshot's time in the hand-made stretches
RTO = 200_000  # µs

# ---------------------------------------------------------------- hand-made snapshots


def silent_connection(**state):
    """a1 silent under a waiting socket while b1 moves over an active interface: the baseline has a1
    STALLED (it cannot pass the blame). `state`: a1's tcp_info fields over a quiet default (None:
    NULL); every other module has no row."""
    s = stretch(host([conn("a1", None), conn("b1", None, MOVING, 40)], ipeth_tm=40))
    s.tcpstate = TcpState.unknown(s.n, s.t, [NOW])
    a1 = s.modules.index("a1")
    s.tcpstate.known[a1] = True
    quiet = {"backoff": 0, "ca_state": 0, "retransmits": 0, "probes": 0, "rto_us": RTO,
             "data_sent_at": NOW - 0.05, "data_recv_at": NOW - 0.05, "ack_recv_at": NOW - 0.05}
    for f, v in (quiet | state).items():
        getattr(s.tcpstate, f)[a1] = np.nan if v is None else v
    return s


def labels_of(s, variant: str, d: str = "in") -> dict[str, str]:
    v = parse_variant(variant)
    (fast,) = diagnose_stretches([s], [v])
    assert_same(fast.results[v.name], reference(s, v), v.name)
    return {m: LABELS[int(r)] for m, r in zip(s.modules, fast.results[v.name][d][0][:, 0], strict=True)}


def a1(variant="flowdiagnoser:tcpstate=on", **state) -> str:
    return labels_of(silent_connection(**state), variant)["a1"]


def test_baseline_blames_the_silent_connection_whatever_tcp_says():
    assert a1("flowdiagnoser") == "STALLED"
    assert a1("flowdiagnoser", backoff=0) == "STALLED"


def test_a_silent_connection_tcp_calls_healthy_is_blocked():
    """Nothing stuck, data heard 50 ms ago (RTO 200 ms): the peer has nothing to send."""
    got = labels_of(silent_connection(), "flowdiagnoser:tcpstate=on")
    assert got["a1"] == "BLOCKED"
    assert got["b1"] == "HEALTHY" and got["ipeth"] == "HEALTHY"   # nothing else changes


@pytest.mark.parametrize("field", ["backoff", "retransmits", "probes"])
def test_rules_1_to_3_backoff_retransmits_probes(field):
    assert a1(**{field: 1}) == "STALLED"
    assert a1(**{field: 0}) == "BLOCKED"


def test_rule_4_ca_state_loss_but_not_recovery():
    assert a1(ca_state=4) == "STALLED"
    assert a1(ca_state=3) == "BLOCKED"   # Recovery: duplicate ACKs arrive
    assert a1(ca_state=1) == a1(ca_state=2) == "BLOCKED"


def test_rule_5_silence_beyond_the_connections_own_rto():
    assert a1(data_recv_at=NOW - 0.5, ack_recv_at=NOW - 0.3) == "STALLED"   # 0.3 s > 0.2 s
    assert a1(data_recv_at=NOW - 0.5, ack_recv_at=NOW - 0.1) == "BLOCKED"   # the later of the two counts
    assert a1(data_recv_at=NOW - 0.5, ack_recv_at=NOW - 0.3, rto_us=400_000) == "BLOCKED"
    assert a1(data_recv_at=None, ack_recv_at=NOW - 0.3) == "STALLED"         # a missing time: the other decides
    assert a1(data_recv_at=None, ack_recv_at=None) == "BLOCKED"              # nothing known: no rule holds
    assert a1(data_recv_at=NOW - 0.5, ack_recv_at=NOW - 0.3, rto_us=None) == "BLOCKED"
    assert a1(data_sent_at=NOW - 5) == "BLOCKED"                             # sending says nothing


def test_unknown_state_keeps_the_baseline():
    s = silent_connection(backoff=1)
    s.tcpstate.known[:] = False   # no tcp_info row for a1 yet
    assert labels_of(s, "flowdiagnoser:tcpstate=on")["a1"] == "STALLED"


def test_only_stalled_tcp_cells_move():
    """A single waiting connection over a silent interface: both STALLED (Θ = 2); tcpstate moves the
    connection only, the interface keeps the blame."""
    s = stretch(host([conn("a1", None)], ipeth_tm=0))
    s.tcpstate = TcpState.unknown(s.n, s.t, [NOW])
    s.tcpstate.known[:] = True
    for f in TCP_STATE_COLUMNS:   # nothing stuck, everything heard just now
        getattr(s.tcpstate, f)[:] = RTO if f == "rto_us" else NOW if f.endswith("_at") else 0
    base, on = labels_of(s, "flowdiagnoser"), labels_of(s, "flowdiagnoser:tcpstate=on")
    assert base["a1"] == base["ipeth"] == "STALLED"
    assert on["a1"] == "BLOCKED" and on["ipeth"] == "STALLED"
    assert {m: r for m, r in on.items() if m != "a1"} == {m: r for m, r in base.items() if m != "a1"}


def test_json_input_has_no_tcp_state():
    doc = host([conn("a1", None)], ipeth_tm=0)
    with pytest.raises(UserError, match=r"^doc\.json: tcpstate needs run format 4 \(tcp_info state fields\)"):
        diagnose_json(doc, ["flowdiagnoser:tcpstate=on"], where="doc.json")
    assert diagnose_json(doc, ["flowdiagnoser"], where="doc.json")


# ---------------------------------------------------------------- per-kind confirmation


def two_stalled(n_snapshots=4):
    """One waiting connection over a silent interface for n snapshots: a1 and ipeth STALLED."""
    doc = host([conn("a1", None)], ipeth_tm=0)
    doc["snapshots"] = doc["snapshots"] * n_snapshots
    return stretch(doc)


def positives(s, variant):
    v = parse_variant(variant)
    (fast,) = diagnose_stretches([s], [v])
    assert_same(fast.results[v.name], reference(s, v), v.name)
    pos = fast.results[v.name]["in"][1]
    return {m: pos[i].tolist() for i, m in enumerate(s.modules) if m in ("a1", "ipeth")}


def test_confirm_tcp_applies_to_tcp_modules_alone():
    s = two_stalled()
    assert positives(s, "flowdiagnoser") == {"a1": [True] * 4, "ipeth": [True] * 4}
    assert positives(s, "flowdiagnoser:confirm_tcp=2") == {"a1": [False, True, True, True], "ipeth": [True] * 4}
    assert positives(s, "flowdiagnoser:confirm_tcp=3") == {"a1": [False, False, True, True], "ipeth": [True] * 4}
    assert positives(s, "flowdiagnoser:confirm=2,confirm_tcp=1") == {"a1": [True] * 4,
                                                                     "ipeth": [False, True, True, True]}
    assert positives(s, "flowdiagnoser:confirm=2") == positives(s, "flowdiagnoser:confirm=2,confirm_tcp=2") == {
        "a1": [False, True, True, True], "ipeth": [False, True, True, True]}


def test_confirm_tcp_runs_across_stretches():
    a, b = two_stalled(2), two_stalled(2)
    b.seqs = b.seqs + 2
    v = parse_variant("flowdiagnoser:confirm_tcp=3")
    pos = [sd.results[v.name]["in"][1][sd.stretch.modules.index("a1")].tolist()
           for sd in diagnose_stretches([a, b], [v])]
    assert pos == [[False, False], [True, True]]


def test_names_presets_and_parameters():
    assert parse_variant("flowdiagnoser:tcpstate=on").name == "flowdiagnoser:theta=2,tcpstate=on"
    assert parse_variant("flowdiagnoser:confirm_tcp=2").name == "flowdiagnoser:theta=2,confirm_tcp=2"
    assert parse_variant("flowdiagnoser:confirm_tcp=0").name == "flowdiagnoser:theta=2"
    presets = systems()["flowdiagnoser"].presets
    assert "flowdiagnoser:tcpstate=on" in presets and "flowdiagnoser:confirm_tcp=2" in presets
    with pytest.raises(UserError, match="confirm_tcp"):
        parse_variant("flowdiagnoser:confirm_tcp=-1")
    with pytest.raises(UserError, match="tcpstate"):
        parse_variant("flowdiagnoser:tcpstate=maybe")


# ---------------------------------------------------------------- run.db: format 4 and older

FORMAT_4_TCP_INFO = """DROP TABLE tcp_info;
CREATE TABLE tcp_info (seq INTEGER NOT NULL, module INTEGER NOT NULL, rtt_us INTEGER, rttvar_us INTEGER,
    backoff INTEGER, ca_state INTEGER, retransmits INTEGER, probes INTEGER, rto_us INTEGER,
    data_sent_at REAL, data_recv_at REAL, ack_recv_at REAL);"""
FORMAT_3_TCP_INFO = """DROP TABLE tcp_info;
CREATE TABLE tcp_info (seq INTEGER NOT NULL, module INTEGER NOT NULL, rtt_us INTEGER, rttvar_us INTEGER);
INSERT INTO tcp_info VALUES (0, 4, 1000, 100);"""


def small_run(path, tcp_rows=None):
    """A wget whose connection moves for 3 snapshots and then is silent under its waiting socket
    while a second connection keeps the interface busy (10 snapshots). tcp_rows: format-4 tcp_info
    rows (seq, module, *TCP_STATE_COLUMNS); None: a format-3 run.db."""
    b = RunBuilder(path, 10, workloads=[WGET])
    app = b.module("app", "wget")
    sock, sock2 = b.module("socket", "fd3"), b.module("socket", "fd4")
    tcp, tcp2 = b.module("tcp", "tcp:1"), b.module("tcp", "tcp:2")
    eth = b.module("ipeth", "h1-eth0")
    for p, c in ((app, sock), (app, sock2), (sock, tcp), (sock2, tcp2), (tcp, eth), (tcp2, eth)):
        b.edge(p, c)
    b.counters(sock, "in", [5, 5, 5] + [0] * 7, wait=[1] * 3 + [100] * 7)
    b.counters(tcp, "in", [5, 5, 5] + [0] * 7)
    b.counters(sock2, "in", 5, wait=1)
    b.counters(tcp2, "in", 5)
    b.counters(eth, "in", 10)
    b.write()
    db = sqlite3.connect(path / "run.db")   # the table as each format writes it, whatever rundir.db has now
    if tcp_rows is None:
        db.executescript(FORMAT_3_TCP_INFO)
    else:
        db.executescript(FORMAT_4_TCP_INFO)
        db.executemany(f"INSERT INTO tcp_info (seq, module, {', '.join(TCP_STATE_COLUMNS)}) VALUES "
                       f"({', '.join('?' * (2 + len(TCP_STATE_COLUMNS)))})", tcp_rows)
    db.commit()
    db.close()
    return path, tcp


def test_run_state_is_carried_forward_and_decides(tmp_path):
    t = RunBuilder.t
    _, tcp = small_run(tmp_path / "r", [
        (4, 4, 0, 0, 0, 0, 250_000, t(3), t(3), t(3)),     # silent since seq 3, last heard at seq 3
        (7, 4, 1, 4, 1, 0, 500_000, t(6), t(3), t(3)),     # RTO fired at seq 7: stuck
        (8, 4, "junk", 4, 1, 0, 500_000, t(6), t(3), t(3)),  # a damaged value is unknown, the rest holds
    ])
    run = load_stretches(tmp_path / "r")
    (s,) = [s for s in run.stretches if tcp in s.modules]
    row = s.modules.index(tcp)
    ts = s.tcpstate
    assert ts.known[row].tolist() == [False] * 4 + [True] * 6                 # carried forward from seq 4
    np.testing.assert_array_equal(ts.backoff[row], [np.nan] * 4 + [0, 0, 0, 1, np.nan, np.nan])
    assert ts.retransmits[row, 4:].tolist() == [0, 0, 0, 1, 1, 1]
    np.testing.assert_allclose(ts.mono, [t(s_) for s_ in s.seqs])
    assert any("backoff" in w for w in run.warnings)
    frame = diagnose_run(run, ["flowdiagnoser", "flowdiagnoser:tcpstate=on"])
    got = frame[(frame["module"] == tcp) & (frame["dir"] == "in")]
    base = got[got["variant"] == "flowdiagnoser:theta=2"].set_index("seq")["label"]
    on = got[got["variant"] == "flowdiagnoser:theta=2,tcpstate=on"].set_index("seq")["label"]
    assert list(base[3:]) == ["STALLED"] * 7
    # seq 3: no row yet (the baseline's); 4, 5: heard 0.1, 0.2 s ago, RTO 0.25 s; 6: 0.3 s; 7-9: backed off
    assert list(on[3:]) == ["STALLED", "BLOCKED", "BLOCKED", "STALLED", "STALLED", "STALLED", "STALLED"]
    # The health frame reads the new columns too.
    assert set(TCP_STATE_COLUMNS) <= set(load_run_data(tmp_path / "r").tcp_info.columns)


def test_format_3_run_is_refused_in_one_line(tmp_path):
    path, _ = small_run(tmp_path / "old")
    run = load_stretches(path)
    assert all(s.tcpstate is None for s in run.stretches)
    with pytest.raises(UserError) as e:
        diagnose_run(path, ["flowdiagnoser:tcpstate=on"])
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and "tcpstate needs run format 4 (tcp_info state fields)" in msg
    assert len(diagnose_run(path, ["flowdiagnoser"]))     # the baseline still runs
    assert "backoff" not in load_run_data(path).tcp_info.columns


# ---------------------------------------------------------------- fast path = reference

FIELD_VALUES = {"backoff": [0, 0, 1, math.nan], "ca_state": [0, 1, 3, 4, math.nan], "retransmits": [0, 0, 2, math.nan],
                "probes": [0, 0, 1, math.nan], "rto_us": [RTO, RTO, math.nan]}
AGO = [0.05, 0.3, 1.0, math.nan]   # seconds before the snapshot


@st.composite
def with_state(draw, graphs):
    s = draw(graphs)
    if draw(st.integers(0, 9)) == 0:
        return s   # no state: unknown everywhere (made in memory)
    s.tcpstate = ts = TcpState.unknown(s.n, s.t, NOW + 0.1 * np.arange(s.t))
    cells = s.n * s.t
    ts.known[:] = np.reshape(draw(st.lists(st.booleans(), min_size=cells, max_size=cells)), (s.n, s.t))
    for f, values in FIELD_VALUES.items():
        getattr(ts, f)[:] = np.reshape(draw(st.lists(st.sampled_from(values), min_size=cells, max_size=cells)),
                                       (s.n, s.t))
    for f in ("data_sent_at", "data_recv_at", "ack_recv_at"):
        ago = np.reshape(draw(st.lists(st.sampled_from(AGO), min_size=cells, max_size=cells)), (s.n, s.t))
        getattr(ts, f)[:] = ts.mono - ago
    return s


ANY = st.one_of(with_state(any_graph()), with_state(ns_graph()))
TCPSTATE = st.builds(lambda theta, queues, confirm, ct, shared, on: Variant(systems()["flowdiagnoser"], {
    "theta": theta, "queues": queues, "confirm": confirm, "shared": shared, "tcpstate": on, "confirm_tcp": ct}),
    st.integers(1, 3), st.booleans(), st.integers(1, 3), st.integers(0, 3), st.booleans(), st.booleans())


@settings(max_examples=300, deadline=None)
@given(ANY, TCPSTATE)
def test_fast_path_equals_reference(s, v):
    (fast,) = diagnose_stretches([s], [v])
    assert_same(fast.results[v.name], reference(s, v), v.name)


@settings(max_examples=100, deadline=None)
@given(st.lists(ANY, min_size=2, max_size=4), TCPSTATE)
def test_many_stretches_at_once_equal_the_reference(stretches, v):
    assert_batch_equals_reference(stretches, v)


@settings(max_examples=100, deadline=None)
@given(ANY, st.integers(1, 3))
def test_tcpstate_only_turns_stalled_connections_into_blocked(s, theta):
    off = Variant(systems()["flowdiagnoser"], {"theta": theta})
    on = Variant(systems()["flowdiagnoser"], {"theta": theta, "tcpstate": True})
    (sd,) = diagnose_stretches([s], [off, on])
    for d in DIRS:
        a, b = sd.results[off.name][d][0], sd.results[on.name][d][0]
        changed = a != b
        assert (LABELS.index("STALLED") == a[changed]).all() and (LABELS.index("BLOCKED") == b[changed]).all()
        assert all(s.kinds[m] == "tcp" for m in np.flatnonzero(changed.any(1)))


def test_stretch_take_keeps_the_state():
    s = two_stalled(3)
    s.tcpstate = TcpState.unknown(s.n, s.t, [1.0, 2.0, 3.0])
    part = s.take([1, 2])
    assert part.tcpstate.mono.tolist() == [2.0, 3.0] and part.tcpstate.known.shape == (s.n, 2)
    assert json.dumps(diagnose_json(host([conn("a1", None)], ipeth_tm=0), ["flowdiagnoser:confirm_tcp=2"]))
