"""`flowdiagnoser:probe=on` (issue 21, item 4): the probes table read (tolerant of damage), bursts turned
into evidence per connection and snapshot, the rule on hand-made runs and snapshots, the fast path
against the plain reference (tests/support/reference_probe.py) on random graphs and on a whole
synthetic run, and the fallback to the rule it extends where no probe speaks."""

from __future__ import annotations

import math
import sqlite3

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.diagnose import diagnose_run, diagnose_stretches
from analysis.model import probes
from analysis.model.batch import Batch
from analysis.model.stretches import DIRS, load_stretches, stretch_from_json
from analysis.model.tcpstate import TcpState
from analysis.variants import BLOCKED, LABELS, STALLED, Variant, parse_variant, systems
from rundir.db import PROBE_COLUMNS, TCP_STATE_COLUMNS, connect
from rundir.errors import UserError
from rundir.read import read_probes
from tests.support.probes import (
    REMOTE,
    add_probes,
    burst,
    single_flow_run,
    synthetic_probe_run,
)
from tests.support.reference import assert_batch_equals_reference, assert_same, reference
from tests.support.reference_probe import ref_evidence, ref_run
from tests.support.runs import RunBuilder, make_run
from tests.test_diagnosis_property import any_graph, ns_graph
from tests.test_variants_shared_peer import MOVING, conn, host

PROBE = "flowdiagnoser:probe=on"


def labels(run, variant: str, module: int, d: str = "in") -> str:
    """One letter per snapshot (H, D, B, S) of a module and direction."""
    f = diagnose_run(run, [variant])
    f = f[(f["module"] == module) & (f["dir"] == d)].sort_values("seq")
    return "".join(x[0] for x in f["label"].astype(str))


# ---------------------------------------------------------------- the worked example (docs/diagnosis.md)


def test_worked_example_single_flow(tmp_path):
    """One download, silent twice: seq 20-29 (its 5-tuple dropped) and 40-57 (the host's traffic dropped,
    then the connection waiting for its retransmission). Θ = 2 blames both the connection and ip+eth
    both times. A burst at
    seq 22 + 50 ms is answered in 2 ms: the connection is STALLED and ip+eth BLOCKED from seq 20 (the
    first snapshots by the look-ahead). A burst at seq 42 + 50 ms times out after 1 s: its outcome is
    known by seq 40's time + 1.5 s (the look-ahead), so from seq 40 the connection is BLOCKED and ip+eth
    stays STALLED (with a 1 s look-ahead seq 40-42 have no evidence yet and keep Θ's answer). The burst
    at seq 53 is answered (the path is back, the connection still silent, waiting for its backed-off
    retransmission): it follows an unanswered burst of the silence, so it is RECOVERING, the connection
    stays BLOCKED by the past outage and ip+eth keeps the blame (issue 35)."""
    run, m = single_flow_run(tmp_path / "r")
    base_tcp, base_ip = labels(run, "flowdiagnoser", m["tcp"]), labels(run, "flowdiagnoser", m["ipeth"])
    assert base_tcp[20:30] == base_ip[20:30] == "S" * 10 and base_tcp[40:58] == base_ip[40:58] == "S" * 18
    tcp, ip = labels(run, PROBE, m["tcp"]), labels(run, PROBE, m["ipeth"])
    assert tcp[20:30] == "S" * 10 and ip[20:30] == "B" * 10
    assert tcp[40:58] == "B" * 18 and ip[40:58] == "S" * 18
    assert labels(run, PROBE + ",probe_ahead=1", m["tcp"])[40:58] == "SSS" + "B" * 15
    assert tcp[:20] + tcp[30:40] + tcp[58:] == base_tcp[:20] + base_tcp[30:40] + base_tcp[58:]
    for k in ("app", "socket"):   # applications and sockets never change
        for d in DIRS:
            assert labels(run, PROBE, m[k], d) == labels(run, "flowdiagnoser", m[k], d)
    rs = load_stretches(run)
    assert len(rs.stretches) == 1
    (ev,) = ref_evidence(rs.stretches, 1.0)   # a 1 s look-ahead: seq 40-42 wait for the timeout
    row = rs.stretches[0].modules.index(m["tcp"])
    assert ev["in"][row, 20:30].tolist() == [1] * 10
    # seq 40-42 wait for the timeout; seq 43-53 the unanswered burst (sent at seq 42, known at 52.5);
    # from seq 54 the answered one (sent at seq 53) after it: RECOVERING, the connection waiting for its
    # retransmission after the drop (0.35 s since the path was seen working, 1.45 s of silence before).
    assert ev["in"][row, 40:58].tolist() == [0] * 3 + [2] * 11 + [3] * 4
    assert ev["in"][row, :20].tolist() == [0] * 20           # no silence, no evidence


def test_the_look_ahead_is_a_parameter(tmp_path):
    run, m = single_flow_run(tmp_path / "r")
    # No look-ahead: seq 20-22 wait for the burst (sent after seq 22's time), and the second silence's
    # first burst (timed out 1.05 s after seq 42) counts from seq 53; the answered one at seq 53 never does.
    assert labels(run, "flowdiagnoser:probe=on,probe_ahead=0", m["tcp"])[20:30] == "SSS" + "S" * 7
    assert labels(run, "flowdiagnoser:probe=on,probe_ahead=0", m["ipeth"])[20:30] == "SSS" + "B" * 7
    assert labels(run, "flowdiagnoser:probe=on,probe_ahead=0", m["tcp"])[40:58] == "S" * 13 + "B" * 5
    assert labels(run, "flowdiagnoser:probe=on,probe_ahead=300ms", m["tcp"])[40:58] == "S" * 10 + "B" * 8
    assert parse_variant("flowdiagnoser:probe=on,probe_ahead=300ms").params["probe_ahead"] == 0.3
    assert parse_variant("flowdiagnoser:probe=on,probe_ahead=1.5").name == "flowdiagnoser:theta=2,probe=on"
    with pytest.raises(UserError, match="probe_ahead"):
        parse_variant("flowdiagnoser:probe_ahead=-1")
    assert "flowdiagnoser:probe=on" in systems()["flowdiagnoser"].presets


# ---------------------------------------------------------------- hand-made snapshots


def one_snapshot(doc: dict, rows: list[tuple], remotes: dict, mono: float = 10.0):
    """A JSON stretch (one snapshot at `mono`) with probes rows attached, its modules' remotes given."""
    s = stretch_from_json(doc)
    table = probes.burst_table(pd.DataFrame(rows, columns=PROBE_COLUMNS))
    probes.attach([s], table, s.seqs, np.array([mono]), remotes, before=mono - 0.1)
    return s


def labels_of(s, variant: str, d: str = "in") -> dict[str, str]:
    v = parse_variant(variant)
    (fast,) = diagnose_stretches([s], [v])
    assert_same(fast.results[v.name], reference(s, v), v.name)
    return {m: LABELS[int(r)] for m, r in zip(s.modules, fast.results[v.name][d][0][:, 0], strict=True)}


def answered(remote, sent=9.95, n=1):
    return burst(n, n, 0, remote, 0, sent, [("timeout", 1.0), ("answered", 0.01)])


def unanswered(remote, sent=9.95, n=1):
    return burst(n, n, 0, remote, 0, sent, [("timeout", 0.5), ("unreachable", 0.001)])


A, B = "10.0.5.1:80", "10.0.6.1:5001"


def test_at_least_theta_silent_connections_an_answer_moves_the_blame_up():
    """Two connections wait over a silent interface: Θ = 2 blames the interface. A's burst is
    answered: A is STALLED, the interface BLOCKED; B (no burst of its own remote) keeps BLOCKED."""
    doc = host([conn("a1", None), conn("b1", None)], ipeth_tm=0)
    s = one_snapshot(doc, answered(A), {"a1": A, "b1": B})
    base, on = labels_of(s, "flowdiagnoser"), labels_of(s, PROBE)
    assert (base["a1"], base["b1"], base["ipeth"]) == ("BLOCKED", "BLOCKED", "STALLED")
    assert (on["a1"], on["b1"], on["ipeth"]) == ("STALLED", "BLOCKED", "BLOCKED")
    # An unanswered burst agrees with Θ: nothing changes.
    s = one_snapshot(doc, unanswered(A) + unanswered(B, n=3), {"a1": A, "b1": B})
    assert labels_of(s, PROBE) == labels_of(s, "flowdiagnoser")


def test_connections_to_one_remote_share_a_burst():
    doc = host([conn("a1", None), conn("a2", None), conn("b1", None)], ipeth_tm=0)
    s = one_snapshot(doc, answered("[::ffff:10.0.5.1]:80"), {"a1": A, "a2": A, "b1": B})  # spelt otherwise
    on = labels_of(s, PROBE)
    assert (on["a1"], on["a2"], on["b1"], on["ipeth"]) == ("STALLED", "STALLED", "BLOCKED", "BLOCKED")


def test_an_answer_clears_the_interface_for_all_and_an_unanswered_remote_is_its_path():
    """A answered, B not: the interface carried A's probe, so it is not at fault; B is BLOCKED (its
    path's blame, which has no row)."""
    doc = host([conn("a1", None), conn("b1", None)], ipeth_tm=0)
    on = labels_of(one_snapshot(doc, answered(A) + unanswered(B, n=3), {"a1": A, "b1": B}), PROBE)
    assert (on["a1"], on["b1"], on["ipeth"]) == ("STALLED", "BLOCKED", "BLOCKED")


def test_ip_over_eth_both_cleared():
    doc = host([conn("a1", None)], ipeth_tm=0, lower="ip")
    s = one_snapshot(doc, answered(A), {"a1": A})
    base, on = labels_of(s, "flowdiagnoser"), labels_of(s, PROBE)
    assert (base["a1"], base["ip"], base["eth"]) == ("STALLED", "STALLED", "STALLED")
    assert (on["a1"], on["ip"], on["eth"]) == ("STALLED", "BLOCKED", "BLOCKED")
    on = labels_of(one_snapshot(doc, unanswered(A), {"a1": A}), PROBE)
    assert (on["a1"], on["ip"], on["eth"]) == ("BLOCKED", "STALLED", "STALLED")


def test_an_active_interface_is_not_the_ambiguous_case():
    """A silent connection over an interface that moves both ways (Figure 3.2): STALLED, whatever the probe."""
    doc = host([conn("a1", None), conn("b1", None, MOVING, 40)], ipeth_tm=40)
    doc["snapshots"][0]["out"] = {"ipeth": {"total_msgs": 40}}    # and sends: live traffic both ways
    for rows in (answered(A), unanswered(A)):
        s = one_snapshot(doc, rows, {"a1": A, "b1": B})
        assert labels_of(s, PROBE) == labels_of(s, "flowdiagnoser")
        assert labels_of(s, PROBE)["a1"] == "STALLED"


def test_an_interface_that_only_sends_is_no_evidence_of_a_live_path():
    """An ip_drop on the router: the host's outbound counters keep moving (its own retransmissions),
    nothing comes in. A waiting connection whose fresh-port probe dies too is BLOCKED (the path is at
    fault), whatever the interface sent; an answered probe leaves the clear case (STALLED) alone."""
    doc = host([conn("a1", None), conn("b1", None)], ipeth_tm=12, d="out")   # both wait; 12 packets out
    doc["snapshots"][0]["in"] = {"ipeth": {"total_msgs": 0}}                  # nothing heard
    base = labels_of(one_snapshot(doc, [], {"a1": A, "b1": B}), "flowdiagnoser", d="out")
    assert (base["a1"], base["b1"]) == ("STALLED", "STALLED")                # Figure 3.2: the interface moved
    s = one_snapshot(doc, unanswered(A) + unanswered(B, n=3), {"a1": A, "b1": B})
    on = labels_of(s, PROBE, d="out")
    assert (on["a1"], on["b1"], on["ipeth"]) == ("BLOCKED", "BLOCKED", base["ipeth"])
    s = one_snapshot(doc, answered(A) + unanswered(B, n=3), {"a1": A, "b1": B})
    on = labels_of(s, PROBE, d="out")
    assert (on["a1"], on["b1"]) == ("STALLED", "BLOCKED")


def test_an_idle_connection_or_one_that_moves_has_no_say():
    doc = host([conn("a1", None, (0, 0)), conn("b1", None, MOVING, 40)], ipeth_tm=0)   # a1 idle (DONTCARE), b1 moves
    s = one_snapshot(doc, answered(A) + answered(B, n=3), {"a1": A, "b1": B})
    assert labels_of(s, PROBE) == labels_of(s, "flowdiagnoser")


def test_with_tcpstate_an_answered_connection_tcp_calls_healthy_is_blocked():
    doc = host([conn("a1", None)], ipeth_tm=0)
    s = one_snapshot(doc, answered(A), {"a1": A})
    s.tcpstate = TcpState.unknown(s.n, s.t, [10.0])
    a1 = s.modules.index("a1")
    s.tcpstate.known[a1] = True
    for f in TCP_STATE_COLUMNS:   # nothing stuck, heard from the peer just now
        getattr(s.tcpstate, f)[a1] = 200_000 if f == "rto_us" else 9.99 if f.endswith("_at") else 0
    on = labels_of(s, "flowdiagnoser:probe=on,tcpstate=on")
    assert (on["a1"], on["ipeth"]) == ("BLOCKED", "BLOCKED")   # the peer does not send; the host is fine
    s.tcpstate.backoff[a1] = 1                                  # stuck: the probe's blame stands
    on = labels_of(s, "flowdiagnoser:probe=on,tcpstate=on")
    assert (on["a1"], on["ipeth"]) == ("STALLED", "BLOCKED")
    s = one_snapshot(doc, [], {"a1": A})                        # no probe: the tcpstate rule alone
    s.tcpstate = TcpState.unknown(s.n, s.t, [10.0])
    assert labels_of(s, "flowdiagnoser:probe=on,tcpstate=on") == labels_of(s, "flowdiagnoser:tcpstate=on")


# ---------------------------------------------------------------- evidence: the window rules


def evidence_at(times: list[float], tm: list[float], rows: list[tuple], ahead=1.0, before=-math.inf):
    """Evidence ('in') of a lone connection with these snapshot times and inbound deltas."""
    n = len(times)
    doc = {"modules": [{"id": "c", "kind": "tcp"}],
           "snapshots": [{"in": {"c": {"total_msgs": x}}} for x in tm]}
    s = stretch_from_json(doc)
    probes.attach([s], probes.burst_table(pd.DataFrame(rows, columns=PROBE_COLUMNS)), s.seqs, np.array(times),
                  {"c": A}, before)
    fast = probes.cell_evidence(Batch([s]), "in", np.arange(n), ahead).tolist()
    assert fast == ref_evidence([s], ahead)[0]["in"][0].tolist()
    return fast


def test_evidence_windows():
    times = [1.0, 2.0, 3.0, 4.0, 5.0]
    quiet = [5, 0, 0, 0, 5]     # silent at times 2, 3, 4: from the interval after time 1 to time 4
    # A burst sent before the silence (in the interval where the connection last moved) says nothing.
    assert evidence_at(times, quiet, answered(A, sent=0.5)) == [0, 0, 0, 0, 0]
    assert evidence_at(times, quiet, answered(A, sent=1.5)) == [0, 1, 1, 1, 0]
    # Sent at 2.5: seq 1 (time 2) by the look-ahead; none where the connection moves.
    assert evidence_at(times, quiet, answered(A, sent=2.5)) == [0, 1, 1, 1, 0]
    # The look-ahead reaches `ahead` seconds, and not past the silence (it ends at time 3 here).
    assert evidence_at(times, quiet, answered(A, sent=3.9), ahead=1.0) == [0, 0, 1, 1, 0]
    assert evidence_at(times, [5, 0, 0, 5, 5], answered(A, sent=3.5)) == [0, 0, 0, 0, 0]
    # A burst speaks for its own time (sent to known) and the snapshots before it; a later burst with
    # another outcome takes over from the end of its scope (issue 35) ...
    rows = answered(A, sent=2.2) + burst(5, 5, 0, A, 0, 2.8, [("timeout", 1.5), ("timeout", 1.5)])
    assert evidence_at(times, quiet, rows) == [0, 1, 1, 2, 0]
    # ... and an answer after an unanswered burst of the silence, while the silence since the path was
    # seen working (w = 2.802) is no longer than it was before (since a = 1): RECOVERING.
    rows = burst(5, 5, 0, A, 0, 1.5, [("timeout", 1.0)]) + answered(A, sent=2.8)
    assert evidence_at(times, quiet, rows) == [0, 2, 3, 3, 0]
    # Bursts that overlap (the collector sends one at a time to a remote, so its probes do not): each
    # counts once known; past the back-off bound (4 - 2.41 > 2.41 - 1) an answer is ANSWERED again.
    rows = burst(5, 5, 0, A, 0, 1.9, [("timeout", 1.5)]) + answered(A, sent=2.4)
    assert evidence_at(times, quiet, rows) == [0, 1, 3, 1, 0]
    # A snapshot after a burst's scope with no later burst known yet: the last word holds.
    assert evidence_at(times, [5, 0, 0, 0, 0], answered(A, sent=1.2)) == [0, 1, 1, 1, 1]
    # An answer known by then counts even if another probe of the burst times out later.
    assert evidence_at(times, quiet, burst(1, 1, 0, A, 0, 2.5, [("timeout", 1.0), ("refused", 0.3)])) == [0, 1, 1, 1, 0]
    # Another remote's burst says nothing about this connection.
    assert evidence_at(times, quiet, answered(B, sent=2.5)) == [0, 0, 0, 0, 0]
    # A silence from the first snapshot: its window starts at the time before (here none: -inf).
    assert evidence_at(times, [0, 0, 5, 5, 5], answered(A, sent=0.5)) == [1, 1, 0, 0, 0]
    assert evidence_at(times, [0, 0, 5, 5, 5], answered(A, sent=0.5), before=0.9) == [0, 0, 0, 0, 0]


def test_an_answer_just_after_an_outage_is_its_aftermath():
    """Issue 35: a download silent through an outage (burst at 1.2 unanswered) moves a segment at time
    3 once the path is back, and is silent again from 3 (a = 3); the burst at 3.3 is answered (w =
    3.302). The unanswered one was sent 1.8 s before the silence (within LOOKBACK_S): AFTERMATH while the
    silence is no longer than the outage the probes saw (m - 3 <= 3.302 - 1.2), ANSWERED after; sent
    more than LOOKBACK_S before it, ANSWERED from the start."""
    times = [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0]
    tm = [0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0]
    rows = burst(5, 5, 0, A, 0, 1.2, [("timeout", 1.0)]) + answered(A, sent=3.3)
    A_, U, M = probes.ANSWERED, probes.UNANSWERED, probes.AFTERMATH
    assert probes.LOOKBACK_S == 2.0
    assert evidence_at(times, tm, rows, before=0.5) == [0, U, U, U, 0, M, M, M, M, A_, A_]
    late = burst(5, 5, 0, A, 0, 0.9, [("timeout", 1.0)]) + answered(A, sent=3.3)
    assert evidence_at(times, tm, late, before=0.5) == [U, U, U, U, 0, A_, A_, A_, A_, A_, A_]


def test_bursts_sent_at_one_instant_count_as_one():
    rows = burst(1, 1, 0, A, 0, 2.5, [("timeout", 0.2)]) + burst(2, 2, 0, A, 0, 2.5, [("answered", 0.01)])
    assert evidence_at([1.0, 2.0, 3.0], [5, 0, 0], rows) == [0, 1, 1]


# ---------------------------------------------------------------- reading run.db


def test_probes_are_read_and_damaged_rows_are_left_out_with_a_warning(tmp_path):
    run, m = single_flow_run(tmp_path / "r")
    clean = diagnose_run(run, [PROBE])
    bad = [(10, 7, m["tcp"], REMOTE, 1, "syn", 22, "soon", 1002.3, "answered", 1.0),
           (11, 7, m["tcp"], REMOTE, 1, "syn", 42, 1004.25, 1004.26, "answered?", 1.0),
           (12, 7, m["tcp"], b"\x00", 1, "syn", 42, 1004.25, 1004.26, "answered", 1.0),
           (13, "x", m["tcp"], REMOTE, 1, "syn", 42, 1004.25, 1004.26, "answered", 1.0),
           (14, 8, m["tcp"], REMOTE, 1, "syn", 42, 1004.25, 1004.2, "answered", 1.0),
           (15, 9, m["tcp"], REMOTE, "port", "syn", 42, 1006.25, 1006.26, "answered", "fast")]
    add_probes(run, bad)
    rs = load_stretches(run)
    found = [w for w in rs.warnings if w.startswith("probes:")]
    assert len(found) == 7 and any("'answered?'" in w for w in found) and any("'soon'" in w for w in found)
    assert any("before it was sent" in w for w in found) and any("rtt_ms" in w for w in found)
    pd.testing.assert_frame_equal(diagnose_run(rs, [PROBE]), clean)   # row 15 is after the silences
    conn_ = connect(run / "run.db", readonly=True)
    w: list[str] = []
    frame = read_probes(conn_, w)
    conn_.close()
    assert frame["id"].tolist() == [1, 2, 3, 4, 5, 6, 15] and math.isnan(frame["rtt_ms"].iloc[-1])


def test_runs_without_a_probes_table_read_as_no_probes(tmp_path):
    run, m = single_flow_run(tmp_path / "r")
    db = sqlite3.connect(run / "run.db")
    db.execute("DROP TABLE probes")   # a run recorded before format 5
    db.commit()
    db.close()
    rs = load_stretches(run)
    assert rs.warnings == []
    pd.testing.assert_frame_equal(diagnose_run(rs, [PROBE]).drop(columns="variant"),
                                  diagnose_run(rs, ["flowdiagnoser"]).drop(columns="variant"))
    db = sqlite3.connect(run / "run.db")
    db.execute("CREATE TABLE probes (id INTEGER PRIMARY KEY, burst INTEGER)")   # not the format's table
    db.commit()
    db.close()
    rs = load_stretches(run)
    assert rs.warnings == ["probes: the table has no column module, remote, sport, kind, seq, sent, done, "
                           "outcome, rtt_ms; no probe is read"]


# ---------------------------------------------------------------- fallback: no probe, the rule it extends


def tcp_state_rows(path, modules, n):
    db = sqlite3.connect(path / "run.db")
    t = RunBuilder.t
    rows = [(s, mod, s % 2, 0, 0, 0, 1_000_000, t(s) - 0.01, None, t(s) - 0.01) for s in range(0, n, 3) for mod in modules]
    db.executemany("INSERT INTO tcp_info (seq, module, backoff, ca_state, retransmits, probes, rto_us, "
                   "data_sent_at, data_recv_at, ack_recv_at) VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
    db.commit()
    db.close()


@pytest.mark.parametrize("extends", ["flowdiagnoser", "flowdiagnoser:theta=3", "flowdiagnoser:tcpstate=on",
                                     "flowdiagnoser:shared=on,confirm=2"])
def test_no_probes_is_the_rule_it_extends_cell_by_cell(tmp_path, extends):
    for run in (make_run(tmp_path / "a", n=60)[0], single_flow_run(tmp_path / "b", probes=False)[0]):
        tcp = [i for (i,) in sqlite3.connect(run / "run.db").execute("SELECT id FROM modules WHERE kind = 'tcp'")]
        tcp_state_rows(run, tcp, 60)
        with_probe = extends + ("," if ":" in extends else ":") + "probe=on"
        a = diagnose_run(run, [extends]).drop(columns="variant")
        b = diagnose_run(run, [with_probe]).drop(columns="variant")
        pd.testing.assert_frame_equal(a, b)


# ---------------------------------------------------------------- fast path = reference

KEYS = ["10.0.5.1:80", "[fd00::1]:80"]
GRID = 0.125   # times on a binary grid: boundaries (sent == a, sent == b, m + ahead) hit exactly


@st.composite
def with_probes(draw, graphs):
    s = draw(graphs)
    step = 2 * GRID
    mono = 10.0 + step * np.arange(s.t)
    remotes = {m: draw(st.sampled_from([KEYS[0], KEYS[0], KEYS[1], None])) for m, k in zip(s.modules, s.kinds,
                                                                                              strict=True) if k == "tcp"}
    rows = []
    for b in range(draw(st.sampled_from([0, 1, 3, 6, 10]))):
        remote = draw(st.sampled_from(KEYS + ["[::ffff:10.0.5.1]:80"]))
        sent = 10.0 + GRID * draw(st.integers(-8, 4 * s.t + 8))
        for _ in range(draw(st.integers(1, 2))):
            outcome = draw(st.sampled_from(["answered", "refused", "timeout", "unreachable", "error"]))
            after = GRID * draw(st.sampled_from([0, 1, 4, 8, 12, 24]))
            rows.append((len(rows) + 1, b, 0, remote, None, "syn", 0, sent, sent + after, outcome, None))
    before = draw(st.sampled_from([-math.inf, 10.0 - step, 10.0 - 40 * step]))
    if draw(st.booleans()):   # tcp_info state: backoff and the last data sent decide RECOVERING where known
        s.tcpstate = TcpState.unknown(s.n, s.t, mono)
        for i, k in enumerate(s.kinds):
            if k == "tcp":
                for c in range(s.t):
                    s.tcpstate.known[i, c] = draw(st.booleans())
                    s.tcpstate.backoff[i, c] = draw(st.sampled_from([math.nan, 0, 1, 3])) if s.tcpstate.known[i, c] \
                        else math.nan
                    s.tcpstate.data_sent_at[i, c] = 10.0 + GRID * draw(st.integers(-4, 4 * s.t + 8))
    probes.attach([s], probes.burst_table(pd.DataFrame(rows, columns=PROBE_COLUMNS)), s.seqs, mono, remotes, before)
    return s


ANY = st.one_of(with_probes(any_graph()), with_probes(ns_graph()))
PROBE_VARIANTS = st.builds(
    lambda theta, queues, confirm, shared, tcpstate, ahead: Variant(systems()["flowdiagnoser"], {
        "theta": theta, "queues": queues, "confirm": confirm, "shared": shared, "tcpstate": tcpstate,
        "probe": True, "probe_ahead": ahead}),
    st.integers(1, 3), st.booleans(), st.integers(1, 2), st.booleans(), st.booleans(),
    st.sampled_from([0.0, GRID * 2, 1.0, 1.5]))


@settings(max_examples=300, deadline=None)
@given(ANY, PROBE_VARIANTS)
def test_fast_path_equals_reference(s, v):
    (fast,) = diagnose_stretches([s], [v])
    assert_same(fast.results[v.name], reference(s, v), v.name)


@settings(max_examples=100, deadline=None)
@given(st.lists(ANY, min_size=2, max_size=4), PROBE_VARIANTS)
def test_many_stretches_at_once_equal_the_reference(stretches, v):
    assert_batch_equals_reference(stretches, v)


@settings(max_examples=200, deadline=None)
@given(ANY, st.integers(1, 3))
def test_what_probe_on_may_change(s, theta):
    """Only connections (between BLOCKED and STALLED) and lower layers (STALLED -> BLOCKED) change, only
    where a connection there has evidence; with no burst nothing changes."""
    off = Variant(systems()["flowdiagnoser"], {"theta": theta})
    on = Variant(systems()["flowdiagnoser"], {"theta": theta, "probe": True})
    (sd,) = diagnose_stretches([s], [off, on])
    ev = ref_evidence([s], probes.AHEAD_S)[0]   # the variant's default look-ahead
    for d in DIRS:
        a, b = sd.results[off.name][d][0], sd.results[on.name][d][0]
        for m, t in zip(*np.nonzero(a != b), strict=True):
            kind = s.kinds[m]
            assert (kind == "tcp" and {a[m, t], b[m, t]} == {BLOCKED, STALLED} and ev[d][m, t]) or \
                   (kind in ("ipeth", "ip", "eth") and (a[m, t], b[m, t]) == (STALLED, BLOCKED))
            assert ev[d][:, t].any()
        if not len(s.probes.bursts.key):
            assert (a == b).all()


def test_a_whole_synthetic_run_equals_the_reference(tmp_path):
    """Silences run across stretches (the graph changes while a connection is silent)."""
    run = load_stretches(synthetic_probe_run(tmp_path / "s"))
    assert len(run.stretches) > 5 and not run.warnings
    changed = 0
    for spec in (PROBE, "flowdiagnoser:theta=1,probe=on,probe_ahead=0.3",
                 "flowdiagnoser:probe=on,shared=on,queues=on"):
        v = parse_variant(spec)
        base = diagnose_stretches(run, ["flowdiagnoser"])
        for sd, ref, b in zip(diagnose_stretches(run, [v]), ref_run(run.stretches, v), base, strict=True):
            assert_same(sd.results[v.name], ref, v.name)
            changed += sum(int((sd.results[v.name][d][0] != b.results["flowdiagnoser:theta=2"][d][0]).sum())
                           for d in DIRS)
    assert changed > 50   # the rule acted, so the comparison means something


def test_burst_table_from_raw_rows():
    rows = (burst(1, 1, 3, A, 0, 5.0, [("timeout", 1.0), ("answered", 0.2)])
            + burst(3, 1, 3, B, 0, 5.1, [("timeout", 1.0)])        # same burst number, another remote
            + burst(4, 2, 3, "10.0.5.1:080", 0, 6.0, [("error", 0.0), ("unreachable", 0.1)]))
    t = probes.burst_table(pd.DataFrame(rows, columns=PROBE_COLUMNS))
    assert t.to_dict("records") == [
        {"burst": 1.0, "remote": A, "sent": 5.0, "done": 5.2, "answer": 5.2},
        {"burst": 1.0, "remote": B, "sent": 5.1, "done": 6.1, "answer": math.inf},
        {"burst": 2.0, "remote": A, "sent": 6.0, "done": 6.0, "answer": math.inf}]
    half = probes.merge_tables(probes.burst_table(pd.DataFrame(rows[:1], columns=PROBE_COLUMNS)),
                               probes.burst_table(pd.DataFrame(rows[1:], columns=PROBE_COLUMNS)))
    pd.testing.assert_frame_equal(half, t)
    assert probes.remote_key("[::ffff:10.0.5.1]:80") == A and probes.remote_key("[FD00::0001]:80") == "[fd00::1]:80"
    assert probes.module_remotes([(1, "tcp", "tcp 10.0.1.1:5>10.0.5.1:80", "k", "{}", 0, None),
                                  (2, "tcp", "t", "k", '{"dst": "fd00::1", "dport": 80}', 0, None),
                                  (3, "socket", "s", "k", "{}", 0, None)]) == {1: A, 2: "[fd00::1]:80"}


def test_a_run_built_by_hand_with_many_stretches(tmp_path):
    """A second connection comes and goes during the first one's silence: the graph changes, the
    silence (and its evidence) does not."""
    b = RunBuilder(tmp_path / "r", 40)
    ip = b.module("ipeth", "ipeth:h1-eth0")
    tcps = []
    for k, (born, died) in enumerate(((0, None), (15, 25))):
        app = b.module("app", f"app:{k}", {"pid": k}, born=born, died=died)
        sock = b.module("socket", f"sock:{k}", {"pid": k}, born=born, died=died)
        tcp = b.module("tcp", f"tcp:{k}", {"dst": "10.0.5.1" if k == 0 else "10.0.6.1", "dport": 80}, born=born,
                       died=died)
        for p, c in ((app, sock), (sock, tcp), (tcp, ip)):
            b.edge(p, c)
        n = 40 - born if died is None else died - born
        tm = np.full(n, 8.0)
        if k == 0:
            tm[10:30] = 0
        else:
            tm[:] = 0
        b.counters(app, "in", tm / 2, wait=50.0)
        b.counters(sock, "in", tm / 2, wait=50.0)
        b.counters(tcp, "in", tm)
        tcps.append(tcp)
    b.counters(ip, "in", np.where((np.arange(40) >= 10) & (np.arange(40) < 30), 0.0, 8.0))
    run = b.write()
    add_probes(run, burst(1, 1, tcps[0], "10.0.5.1:80", 12, RunBuilder.t(12) + 0.05, [("answered", 0.01)]) +
               burst(2, 2, tcps[0], "10.0.5.1:80", 20, RunBuilder.t(20) + 0.05, [("answered", 0.01)]))
    rs = load_stretches(run)
    assert len(rs.stretches) >= 3
    for spec in (PROBE, "flowdiagnoser:probe=on,theta=1"):
        v = parse_variant(spec)
        for sd, ref in zip(diagnose_stretches(rs, [v]), ref_run(rs.stretches, v), strict=True):
            assert_same(sd.results[v.name], ref, v.name)
    tcp0 = labels(run, PROBE, tcps[0])
    assert tcp0[10:30] == "S" * 20 and labels(run, PROBE, ip)[10:30] == "B" * 20
    assert labels(run, "flowdiagnoser", ip)[15:25] == "S" * 10   # two waiting: Θ blamed the interface


def test_a_retransmission_does_not_end_an_outbound_silence():
    """An upload silent through an ip_drop sends its RTO's retransmission (data segments out = the
    retransmitted ones): no progress, so the silence goes on and keeps its first burst (unanswered,
    during the drop), and a burst answered after the drop does not blame the connection: RECOVERING,
    the interface keeps the outage's blame. A segment of new data ends the silence, and the next one
    takes the answered burst: the unanswered one came just before it (AFTERMATH), so the connection is
    still BLOCKED by the past outage, and the interface, which carried the new data and the probe, is
    cleared."""
    def doc(resend_errors):
        d = host([conn("a1", None)], ipeth_tm=0, d="out")
        snap = d["snapshots"][0]["out"]
        snaps = []
        for k in range(4):
            s = {m: dict(v) for m, v in snap.items()}
            if k == 1:   # the retransmission
                s["a1"] = {"total_msgs": 1, "errors": resend_errors}
                s["ipeth"] = {"total_msgs": 1}
            snaps.append({"out": s})
        d["snapshots"] = snaps
        return d

    rows = unanswered(A, sent=9.95) + answered(A, sent=10.25, n=3)
    out = {}
    for resend_errors in (1, 0):
        s = stretch_from_json(doc(resend_errors))
        table = probes.burst_table(pd.DataFrame(rows, columns=PROBE_COLUMNS))
        mono = np.array([10.0, 10.1, 10.2, 10.3])
        probes.attach([s], table, s.seqs, mono, {"a1": A}, before=9.9)
        v = parse_variant(PROBE)
        (fast,) = diagnose_stretches([s], [v])
        assert_same(fast.results[v.name], reference(s, v), v.name)
        res = fast.results[v.name]["out"][0]
        ev = int(probes.cell_evidence(Batch([s]), "out", np.array([s.modules.index("a1") * s.t + 3]))[0])
        out[resend_errors] = (ev, *(LABELS[int(res[s.modules.index(m), 3])] for m in ("a1", "ipeth")))
    assert out == {1: (probes.RECOVERING, "BLOCKED", "STALLED"), 0: (probes.AFTERMATH, "BLOCKED", "BLOCKED")}
