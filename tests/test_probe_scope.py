"""Probe evidence with a scope and after-effects told apart (issue 35, items 1 and 2), on the hand-made
run of tests/support/probes.scoped_run: a burst answered just before an ip_drop (A), a burst
unanswered just before one heals (B). Fast path against the per-snapshot reference on it too."""

from __future__ import annotations

from analysis.diagnose import diagnose_stretches
from analysis.model.stretches import load_stretches
from analysis.variants import parse_variant
from tests.support.probes import scoped_run
from tests.support.reference import assert_same
from tests.support.reference_probe import ref_evidence, ref_run
from tests.test_probe_variant import PROBE, labels

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
