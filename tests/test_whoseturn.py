"""whoseturn (issue 42): the fast path against the per-snapshot reference on generated snapshots; the
thesis rule's labels wherever the connections are one-way (the network suites' wget and iperf) or
the turn is unknown (runs before format 8); and the rules on a hand-made service host: an idle
keep-alive connection is not stalled, a request held past `latency` stalls the serving application,
unless that host is waiting on a call of its own."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from analysis.diagnose import diagnose_stretches
from analysis.model.stretches import DIRS, Counters, Stretch
from analysis.model.tcpstate import TcpState
from analysis.model.turnstate import TurnState
from analysis.variants import BLOCKED, DONTCARE, STALLED, parse_variant
from tests.support.reference import assert_same, reference
from tests.test_diagnosis_property import ns_graph

THESIS = parse_variant("flowdiagnoser:theta=2")


def with_turn(draw, s: Stretch) -> Stretch:
    """Random TCP state and turn for every module of a stretch (non-TCP rows are never read)."""
    n, t = s.n, s.t
    mono = np.arange(1, t + 1) * 0.1
    times = st.sampled_from([np.nan, 0.0, 0.05, 0.12, 0.2, 0.31, 0.4])
    ts = TcpState.unknown(n, t, mono)
    ts.known = draw(arrays(bool, (n, t)))
    ts.data_sent_at = draw(arrays(float, (n, t), elements=times))
    ts.data_recv_at = draw(arrays(float, (n, t), elements=times))
    s.tcpstate = ts
    s.turn = TurnState(draw(arrays(bool, (n, t))), draw(arrays(float, (n, t), elements=st.sampled_from([np.nan, 0.0, 0.0, 1.0]))),
                       draw(arrays(float, (n, t), elements=st.sampled_from([np.nan, 0.0, 0.0, 300.0]))),
                       draw(arrays(bool, (n,))))
    return s


@st.composite
def turned(draw):
    return with_turn(draw, draw(ns_graph(max_t=5)))


@st.composite
def one_way(draw):
    """A network run's connections: data one way, at most one segment back (wget's GET)."""
    s = with_turn(draw, draw(ns_graph(max_t=5)))
    for m, k in enumerate(s.kinds):
        if k == "tcp":
            back = DIRS[draw(st.integers(0, 1))]
            tm = s.counters[back].tm
            tm[m] = 0
            if draw(st.booleans()):
                tm[m, draw(st.integers(0, s.t - 1))] = 1
    return s


@settings(max_examples=300, deadline=None)
@given(turned(), st.sampled_from(["whoseturn", "whoseturn:latency=0.1", "whoseturn:exchanges=1",
                                  "whoseturn:theta=1"]))
def test_fast_path_equals_the_reference(stretch, name):
    v = parse_variant(name)
    (fast,) = diagnose_stretches([stretch], [v])
    assert_same(fast.results[v.name], reference(stretch, v), v.name)


@settings(max_examples=300, deadline=None)
@given(one_way())
def test_one_way_connections_get_the_thesis_labels(stretch):
    v = parse_variant("whoseturn")
    (fast,) = diagnose_stretches([stretch], [v, THESIS])
    for d in DIRS:
        np.testing.assert_array_equal(fast.results[v.name][d][0], fast.results[THESIS.name][d][0])


@settings(max_examples=100, deadline=None)
@given(ns_graph(max_t=5))
def test_without_a_turn_it_is_the_thesis_rule(stretch):
    """A run recorded before format 8 (no turn), or JSON snapshots."""
    v = parse_variant("whoseturn")
    (fast,) = diagnose_stretches([stretch], [v, THESIS])
    for d in DIRS:
        np.testing.assert_array_equal(fast.results[v.name][d][0], fast.results[THESIS.name][d][0])


# ------------------------------------------------------------------ a hand-made service host

# app -> (server socket -> server tcp), (client socket -> client tcp); both tcp -> ipeth
KINDS = ["app", "socket", "tcp", "socket", "tcp", "ipeth"]
EDGES = [(0, 1), (1, 2), (0, 3), (3, 4), (2, 5), (4, 5)]
APP, SSOCK, STCP, CSOCK, CTCP, IF = range(6)
T = 4   # snapshots at 0.1 .. 0.4 s: two busy, then two silent


def host(sent: dict[int, float], recv: dict[int, float], rqueue: dict[int, float] | None = None,
         unacked: dict[int, float] | None = None) -> Stretch:
    """Both connections exchange 2 segments each way in the first two snapshots, then nothing moves;
    the interface keeps moving (other traffic); the sockets wait in epoll (wait grows) all along.
    sent/recv: per TCP module, the time of its last data sent/received at the silent snapshots."""
    counters = {}
    for d in DIRS:
        c = Counters.empty(6, T)
        c.tm[[STCP, CTCP, SSOCK, CSOCK, APP], :2] = 1
        c.tm[IF] = 5
        c.has_wait[[APP, SSOCK, CSOCK]] = True
        c.wait[[APP, SSOCK, CSOCK]] = 5.0
        c.has_queue[[STCP, CTCP]] = True
        if d == "in":
            for m, q in (rqueue or {}).items():
                c.queued[m, 2:] = q
        counters[d] = c
    s = Stretch(list(range(6)), KINDS, EDGES, np.arange(T), counters)
    mono = np.arange(1, T + 1) * 0.1
    ts = TcpState.unknown(6, T, mono)
    ts.known[[STCP, CTCP]] = True
    for m in (STCP, CTCP):
        ts.data_sent_at[m, :2] = ts.data_recv_at[m, :2] = mono[:2]
        ts.data_sent_at[m, 2:] = sent[m]
        ts.data_recv_at[m, 2:] = recv[m]
    s.tcpstate = ts
    un = np.zeros((6, T))
    for m, u in (unacked or {}).items():
        un[m, 2:] = u
    s.turn = TurnState(ts.known.copy(), un, np.zeros((6, T)), np.array([m == STCP for m in range(6)]))
    return s


def results(s: Stretch, name: str = "whoseturn") -> dict:
    v = parse_variant(name)
    (fast,) = diagnose_stretches([s], [v])
    return {d: fast.results[v.name][d][0] for d in DIRS}


def test_idle_keep_alive_connections_are_not_stalled():
    """Server answered at 0.2 s, client read it: the thesis blames both connections (their sockets
    wait in epoll), whoseturn neither."""
    s = host(sent={STCP: 0.2, CTCP: 0.15}, recv={STCP: 0.15, CTCP: 0.2})
    thesis, mine = results(s, THESIS.name), results(s)
    assert thesis["in"][STCP, 3] == STALLED and thesis["in"][CTCP, 3] == STALLED
    for m in (APP, SSOCK, STCP, CSOCK, CTCP):
        assert mine["in"][m, 2] == DONTCARE and mine["in"][m, 3] == DONTCARE, m


def test_a_request_held_past_latency_stalls_the_serving_application():
    """The server end read a request at 0.2 s and has not answered: at 0.3 s (held 0.1 s > 0.05) its
    socket and application are STALLED, the connection BLOCKED (it waits on its application)."""
    s = host(sent={STCP: 0.15, CTCP: 0.15}, recv={STCP: 0.2, CTCP: 0.2})
    r = results(s)
    for d in DIRS:
        assert r[d][SSOCK, 2] == STALLED and r[d][APP, 2] == STALLED
        assert r[d][STCP, 2] == BLOCKED
    assert r["in"][SSOCK, 1] != STALLED   # busy snapshots keep their result
    # a latency above the hold: not yet a stall
    assert results(s, "whoseturn:latency=0.5")["in"][SSOCK, 2] != STALLED


def test_an_unread_request_is_held_at_any_end():
    """A paused application: the request sits in the receive queue."""
    s = host(sent={STCP: 0.15, CTCP: 0.15}, recv={STCP: 0.12, CTCP: 0.2}, rqueue={STCP: 120})
    assert results(s)["in"][SSOCK, 2] == STALLED


def test_a_host_waiting_on_its_own_call_is_blocked_not_stalled():
    """The server holds a request while its client end awaits an answer from further down: the
    blame passes down (the socket BLOCKED), as it does while the call is stuck in the network."""
    s = host(sent={STCP: 0.15, CTCP: 0.2}, recv={STCP: 0.2, CTCP: 0.15})
    r = results(s)
    assert r["in"][SSOCK, 3] == BLOCKED and r["in"][CSOCK, 3] == BLOCKED and r["in"][APP, 3] == BLOCKED
    s = host(sent={STCP: 0.15, CTCP: 0.2}, recv={STCP: 0.2, CTCP: 0.15}, unacked={CTCP: 1})
    r = results(s)
    assert r["in"][SSOCK, 3] == BLOCKED
    assert r["in"][CTCP, 3] == results(s, THESIS.name)["in"][CTCP, 3]   # in flight: the thesis rule


@settings(max_examples=40, deadline=None)
@given(st.lists(one_way(), min_size=2, max_size=4))
def test_one_way_connections_over_many_stretches_get_the_thesis_labels(stretches):
    """A run's batch: a later stretch's connection to a port an earlier one spoke request/response on
    would be read from its first request; one-way connections never make a port such."""
    for k, s in enumerate(stretches):   # a run's: its own connections (module ids), later snapshots
        s.seqs = s.seqs + 100 * k
        s.modules = [m + 1000 * k for m in s.modules]
        s.turn.port = np.full(s.n, 80)
    v = parse_variant("whoseturn")
    for sd in diagnose_stretches(stretches, [v, THESIS]):
        for d in DIRS:
            np.testing.assert_array_equal(sd.results[v.name][d][0], sd.results[THESIS.name][d][0])


@st.composite
def host_batch(draw):
    """A host's stretches as a run gives them: a connection (module id) recurs from stretch to stretch
    (its exchanges add up), connections share service ports (a port read in one stretch is read in
    the later ones), some stretches have no turn or no TCP state, and the list is not always in time
    order."""
    stretches = []
    for k in range(draw(st.integers(1, 5))):
        s = with_turn(draw, draw(ns_graph(max_t=4)))
        s.modules = draw(st.permutations(range(max(s.n, 9))))[: s.n]
        s.seqs = s.seqs + 10 * draw(st.integers(0, 6)) + 100 * k
        how = draw(st.sampled_from(["ports", "ports", "no port", "no turn", "no state"]))
        if how == "ports":
            s.turn.port = draw(arrays(np.int64, (s.n,), elements=st.sampled_from([-1, 80, 80, 11211])))
        elif how == "no turn":
            s.turn = None
        elif how == "no state":
            s.tcpstate = None
        stretches.append(s)
    return draw(st.permutations(stretches)) if draw(st.booleans()) else stretches


@settings(max_examples=300, deadline=None)
@given(host_batch(), st.sampled_from([1, 2, 3, 5]))
def test_the_turns_of_a_batch_equal_the_stretch_by_stretch_builder(stretches, exchanges):
    """whoseturn.turns builds the turns over all stretches at once; the builder it replaced went one
    stretch at a time (tests/support/whoseturn_per_stretch.py): every field the same, in the same
    order (on the stored runs too: docs/diagnosis.md, "whoseturn")."""
    from dataclasses import fields

    from analysis.model.batch import Batch
    from analysis.variants import whoseturn
    from tests.support import whoseturn_per_stretch

    new, old = whoseturn.turns(Batch(stretches), exchanges), whoseturn_per_stretch.turns(Batch(stretches), exchanges)
    assert (new is None) == (old is None)
    for f in fields(whoseturn.Turns) if new is not None else ():
        a, b = np.asarray(getattr(new, f.name)), np.asarray(getattr(old, f.name))
        assert a.dtype == b.dtype, f.name
        np.testing.assert_array_equal(a, b, err_msg=f.name)


def test_latency_auto_learns_each_hosts_answer_time_from_its_first_seconds():
    """Twice the p99 of the distinct answered requests in the host's first LEARN_S s (a turn seen at
    many snapshots counts once); later, slower turns (a fault) do not raise it; too few: the default."""
    from types import SimpleNamespace

    from analysis.variants.whoseturn import DEFAULT_LATENCY, LEARN_FLOOR, LEARN_S, learned_latency

    at = np.arange(100) * 0.03                        # 100 requests in the first 3 s ...
    dur = np.full(100, 0.02)                          # ... answered in 20 ms
    late = (LEARN_S + 10 + np.arange(50) * 0.01, np.full(50, 0.5))   # a slow tier later: not learnt from
    tu = SimpleNamespace(turn_at=np.concatenate([at, at, late[0]]), turn_s=np.concatenate([dur, dur, late[1]]))
    assert learned_latency(tu) == pytest.approx(0.04)
    fast = SimpleNamespace(turn_at=at, turn_s=np.full(100, 0.001))
    assert learned_latency(fast) == LEARN_FLOOR
    few = SimpleNamespace(turn_at=at[:5], turn_s=dur[:5])
    assert learned_latency(few) == DEFAULT_LATENCY
    # one stretch with two answered turns: too few, so auto is the default
    s = host(sent={STCP: 0.15, CTCP: 0.15}, recv={STCP: 0.2, CTCP: 0.2})
    assert all((results(s, "whoseturn:latency=auto")[d] == results(s)[d]).all() for d in DIRS)


def test_turn_rows_read_format_8_tcp_info_and_none_before(tmp_path):
    """rundir.read.turn_rows: the rows with unacked or notsent_bytes (format 8); None without the columns."""
    import sqlite3

    from rundir.read import turn_rows

    conn = sqlite3.connect(tmp_path / "a.db")
    conn.execute("CREATE TABLE tcp_info (seq INTEGER, module INTEGER, unacked INTEGER, notsent_bytes INTEGER)")
    conn.executemany("INSERT INTO tcp_info VALUES (?, ?, ?, ?)", [(1, 7, 2, None), (2, 7, None, None), (3, 8, 0, 40)])
    assert sorted(turn_rows(conn)) == [(1, 7, 2, None), (3, 8, 0, 40)]
    old = sqlite3.connect(tmp_path / "b.db")
    old.execute("CREATE TABLE tcp_info (seq INTEGER, module INTEGER, rtt_us INTEGER)")
    assert turn_rows(old) is None
