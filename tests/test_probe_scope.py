"""Probe evidence with a scope and after-effects told apart (issue 35, items 1 and 2), on the hand-made
run of tests/support/probes.scoped_run: a burst answered just before an ip_drop (A), a burst
unanswered just before one heals (B). Fast path against the per-snapshot reference on it too."""

from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd

from analysis.diagnose import diagnose_stretches
from analysis.model import probes
from analysis.model.stretches import load_stretches, stretch_from_json
from analysis.variants import LABELS, parse_variant
from rundir.db import PROBE_COLUMNS
from tests.support.probes import burst, scoped_run
from tests.support.reference import assert_same, reference
from tests.support.reference_probe import ref_evidence, ref_run
from tests.support.runs import RunBuilder
from tests.test_probe_variant import PROBE, A, labels
from tests.test_variants_shared_peer import MOVING, conn, host

BASE = "flowdiagnoser"


def test_a_burst_answered_just_before_a_drop_speaks_only_until_the_next_one(tmp_path):
    """A: silent from seq 10 (its own stall), answered at 1001.35, ip_drop from 1001.45 (seq 14.5).
    Before issue 35 the answer stood for the whole silence: the connection STALLED and ip+eth BLOCKED
    through the drop (seq 10-39). Now it speaks to seq 18, while the next burst (sent at seq 24,
    timed out, known at seq 34) is not known within the look-ahead; from seq 19 the connection is
    BLOCKED and ip+eth STALLED. After the drop (seq 35-39) the answered burst follows an unanswered one:
    RECOVERING, the connection still BLOCKED by the past outage."""
    run, m = scoped_run(tmp_path / "r")
    tcp, ip = labels(run, PROBE, m["tcp"]), labels(run, PROBE, m["ipeth"])
    assert labels(run, BASE, m["tcp"])[10:40] == labels(run, BASE, m["ipeth"])[10:40] == "S" * 30
    assert tcp[10:40] == "S" * 9 + "B" * 21
    assert ip[10:40] == "B" * 9 + "S" * 21
    rs = load_stretches(run)
    row = rs.stretches[0].modules.index(m["tcp"])
    ev = ref_evidence(rs.stretches, 1.5)[0]["in"][row]
    assert ev[10:40].tolist() == [1] * 9 + [2] * 16 + [3] * 5


def test_a_burst_unanswered_just_before_it_heals_does_not_blame_the_path_for_what_follows(tmp_path):
    """B: ip_drop from 1004.95 (seq 49.5) to 1005.55; the burst at 1005.25 times out, the next (sent at
    1006.345, answered) follows it. From seq 64 the answer is RECOVERING (the connection waits for a
    retransmission the outage backed off; ip+eth keeps the outage's blame) as long as the silence since
    the path was seen working (1006.347) is no longer than it was before it (since 1004.9): to seq 77.
    After that the silence is the connection's own (seq 78-79: STALLED, ip+eth BLOCKED); before issue 35
    the first burst blamed the path to the end."""
    run, m = scoped_run(tmp_path / "r")
    tcp, ip = labels(run, PROBE, m["tcp"]), labels(run, PROBE, m["ipeth"])
    assert tcp[50:80] == "B" * 28 + "SS"
    assert ip[50:80] == "S" * 28 + "BB"
    rs = load_stretches(run)
    row = rs.stretches[0].modules.index(m["tcp"])
    ev = ref_evidence(rs.stretches, 1.5)[0]["in"][row]
    assert ev[50:80].tolist() == [2] * 14 + [3] * 14 + [1] * 2
    for k in ("app", "socket"):   # applications and sockets never change
        assert labels(run, PROBE, m[k]) == labels(run, BASE, m[k])


def test_the_scoped_run_fast_path_equals_the_reference(tmp_path):
    run, _ = scoped_run(tmp_path / "r")
    rs = load_stretches(run)
    for spec in (PROBE, "flowdiagnoser:probe=on,probe_ahead=1", "flowdiagnoser:probe=on,theta=1"):
        v = parse_variant(spec)
        for sd, ref in zip(diagnose_stretches(rs, [v]), ref_run(rs.stretches, v), strict=True):
            assert_same(sd.results[v.name], ref, v.name)


def add_tcp_info(run, tcp: int, rows: list[tuple[int, int, float]]) -> None:
    """tcp_info rows (seq, backoff, data_sent_at) of the connection (rto 1 s, nothing else stuck)."""
    db = sqlite3.connect(run / "run.db")
    db.executemany("INSERT INTO tcp_info (seq, module, backoff, ca_state, retransmits, probes, rto_us, data_sent_at, "
                   "data_recv_at, ack_recv_at) VALUES (?,?,?,4,0,0,1000000,?,NULL,NULL)",
                   [(s, tcp, bo, at) for s, bo, at in rows])
    db.commit()
    db.close()


def test_tcp_info_says_how_long_the_connection_recovers(tmp_path):
    """B with tcp_info: the connection is backed off (backoff 2) and sent nothing since before the path
    was seen working again (1006.347): it waits out its own timer, RECOVERING to the end (no doubling
    bound). Once it retransmits (seq 70: data sent at 1006.95, backoff 3) and still hears nothing over
    a path that works, the silence is its own: STALLED, ip+eth BLOCKED."""
    run, m = scoped_run(tmp_path / "r")
    add_tcp_info(run, m["tcp"], [(0, 0, 1000.0), (60, 2, RunBuilder.t(56))])
    assert labels(run, PROBE, m["tcp"])[50:80] == "B" * 30
    assert labels(run, PROBE, m["ipeth"])[50:80] == "S" * 30
    run2, m = scoped_run(tmp_path / "r2")
    add_tcp_info(run2, m["tcp"], [(0, 0, 1000.0), (60, 2, RunBuilder.t(56)), (70, 3, 1006.95)])
    assert labels(run2, PROBE, m["tcp"])[50:80] == "B" * 20 + "S" * 10
    assert labels(run2, PROBE, m["ipeth"])[50:80] == "S" * 20 + "B" * 10
    rs = load_stretches(run2)
    v = parse_variant(PROBE)
    for sd, ref in zip(diagnose_stretches(rs, [v]), ref_run(rs.stretches, v), strict=True):
        assert_same(sd.results[v.name], ref, v.name)


def test_recovering_over_an_interface_that_moves_is_no_stall():
    """The after-effect over a live interface (thesis Figure 3.2's clear case: the other connections
    move): a connection whose silence saw an unanswered burst and then an answered one is BLOCKED by the
    past outage, where the rule it extends blames it; with no unanswered burst before, it stays STALLED."""
    doc = host([conn("a1", None), conn("b1", None, MOVING, 40)], ipeth_tm=40)
    doc["snapshots"] = [{**doc["snapshots"][0], "out": {"ipeth": {"total_msgs": 40}}}] * 3   # moving both ways
    mono = np.array([10.0, 10.1, 10.2])
    outcomes = {}
    for first in ("timeout", "answered"):
        rows = (burst(1, 1, 0, A, 0, 9.95, [(first, 0.05 if first == "timeout" else 0.002)])
                + burst(2, 2, 0, A, 0, 10.05, [("answered", 0.002)]))
        s = stretch_from_json(doc)
        probes.attach([s], probes.burst_table(pd.DataFrame(rows, columns=PROBE_COLUMNS)), s.seqs, mono,
                      {"a1": A, "b1": "10.0.6.1:5001"}, before=9.9)
        for spec in ("flowdiagnoser", PROBE):
            v = parse_variant(spec)
            (fast,) = diagnose_stretches([s], [v])
            assert_same(fast.results[v.name], reference(s, v), v.name)
            outcomes[first, spec] = "".join(LABELS[int(x)][0] for x in fast.results[v.name]["in"][0][s.modules.index("a1")])
    assert outcomes["timeout", "flowdiagnoser"] == outcomes["answered", "flowdiagnoser"] == "SSS"
    assert outcomes["timeout", PROBE] == "SBB"          # seq 0: the unanswered burst's own time
    assert outcomes["answered", PROBE] == "SSS"
