"""Detached modules (issue 9, item 3 "No root artefact"): a TCP connection whose socket is not known
in a stretch -- not reported by the interceptor yet, or closed already while the connection lingers
-- is not a root that HasWork assumes has work. A module that never has a parent stays one."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.diagnose import diagnose_run, diagnose_stretches
from analysis.model.stretches import DIRS, Counters, Stretch, load_stretches
from analysis.variants import LABELS, parse_variant
from analysis.variants.flowdiagnoser import shape
from tests.support.reference import assert_same, reference
from tests.support.rundb import write_run

FD = ["flowdiagnoser", "flowdiagnoser:theta=1"]  # queues=on: test_..._pending_send_queue_...


def stretch(kinds, edges, detached=None, t=1, queued=0.0):
    """Both directions alike: the interface (ipeth, ip, eth) moves packets, the app and the socket
    (if any) wait in their calls, the TCP connection moves nothing (TCP queue `queued`)."""
    n = len(kinds)
    counters = {}
    for d in DIRS:
        c = Counters.empty(n, t)
        for i, k in enumerate(kinds):
            if k in ("ipeth", "ip", "eth"):
                c.tm[i] = 5
            elif k in ("app", "socket"):
                c.has_wait[i], c.wait[i] = True, 100.0
            elif k == "tcp":
                c.has_queue[i], c.queued[i] = True, queued
        counters[d] = c
    return Stretch(list(range(n)), kinds, edges, np.arange(t), counters, detached)


def diagnose(st, spec):
    v = parse_variant(spec)
    (sd,) = diagnose_stretches([st], [v])
    assert_same(sd.results[v.name], reference(st, v), v.name)  # the reference follows the same rule
    return {d: ([LABELS[r] for r in res[:, 0]] if res.dtype.kind == "i" else list(res[:, 0]), list(pos[:, 0]))
            for d, (res, pos) in sd.results[v.name].items()}


@pytest.mark.parametrize("spec", [*FD, "flowdiagnoser:queues=on"])
def test_detached_inactive_tcp_is_dontcare(spec):
    """(a) Its socket is not known here (but is elsewhere in the run): no assumed work."""
    st = stretch(["tcp", "ipeth"], [(0, 1)], detached=[True, False])
    for d in DIRS:
        labels, positive = diagnose(st, spec)[d]
        assert labels == ["DONTCARE", "HEALTHY"] and not any(positive)


@pytest.mark.parametrize("spec", FD)
def test_detached_tcp_with_its_socket_module_but_no_edge(spec):
    """The socket module is known but not yet linked to the connection: the same."""
    st = stretch(["app", "socket", "tcp", "ipeth"], [(0, 1), (2, 3)], detached=[False, False, True, False])
    for d in DIRS:
        labels, _ = diagnose(st, spec)[d]
        assert labels == ["BLOCKED", "BLOCKED", "DONTCARE", "HEALTHY"]


def test_detached_active_tcp_is_healthy():
    st = stretch(["tcp", "ipeth"], [(0, 1)], detached=[True, False])
    st.counters["in"].tm[0] = 3
    assert diagnose(st, "flowdiagnoser")["in"][0] == ["HEALTHY", "HEALTHY"]


@pytest.mark.parametrize("spec", FD)
def test_attached_tcp_under_a_waiting_socket_is_stalled(spec):
    """(b) The same connection under its waiting socket: STALLED as before."""
    st = stretch(["app", "socket", "tcp", "ipeth"], [(0, 1), (1, 2), (2, 3)], detached=[False, False, True, False])
    assert not st.detached.any()  # a module with a parent here is not detached, whatever it was told
    for d in DIRS:
        labels, positive = diagnose(st, spec)[d]
        assert labels == ["BLOCKED", "BLOCKED", "STALLED", "HEALTHY"] and positive == [False, False, True, False]


@pytest.mark.parametrize("spec", FD)
def test_tcp_that_never_has_a_parent_is_still_a_root_with_work(spec):
    """(c) No interceptor: TCP connections are roots for the whole run (thesis 3.6.2)."""
    st = stretch(["tcp", "ipeth"], [(0, 1)])
    for d in DIRS:
        labels, positive = diagnose(st, spec)[d]
        assert labels == ["STALLED", "HEALTHY"] and positive == [True, False]


def test_detached_tcp_with_pending_send_queue_has_work_with_queues_on():
    """queues=on: the connection's own outbound queue decides, detached or not."""
    st = stretch(["tcp", "ipeth"], [(0, 1)], detached=[True, False], queued=7.0)
    got = diagnose(st, "flowdiagnoser:queues=on")
    assert got["out"][0] == ["STALLED", "HEALTHY"]
    assert got["in"][0] == ["DONTCARE", "HEALTHY"]  # inbound the queue is the reader's work
    assert diagnose(st, "flowdiagnoser")["out"][0] == ["DONTCARE", "HEALTHY"]
    attached = stretch(["socket", "tcp", "ipeth"], [(0, 1), (1, 2)], queued=0.0)
    assert diagnose(attached, "flowdiagnoser:queues=on")["out"][0] == ["BLOCKED", "DONTCARE", "HEALTHY"]


def test_detached_socket_keeps_assumed_work():
    """A socket is a root with work whether or not its application is known."""
    st = stretch(["socket", "tcp", "ipeth"], [(0, 1), (1, 2)], detached=[True, False, False])
    st.counters["in"].wait[0] = 0.0  # inbound: the application does not even read
    got = diagnose(st, "flowdiagnoser")
    assert got["in"][0] == ["STALLED", "DONTCARE", "HEALTHY"]
    assert got["out"][0] == ["BLOCKED", "STALLED", "HEALTHY"]


@pytest.mark.parametrize("spec", FD)
def test_detached_tcp_in_a_stretch_with_cycles(spec):
    """The super-module path: a detached root gets no assumed work there either."""
    st = stretch(["tcp", "ipeth", "tcp", "ip", "eth"], [(0, 1), (2, 3), (3, 4), (4, 3)],
                 detached=[True, False, False, False, False])
    assert shape(st).cyclic
    for d in DIRS:
        labels, _ = diagnose(st, spec)[d]
        assert labels[:3] == ["DONTCARE", "HEALTHY", "STALLED"]


def test_nest_cf_does_not_blame_a_detached_tcp():
    """nest-cf: a detached connection is IGN (no demand above it), not NONE; a true root is NONE
    and blamed as before."""
    detached = diagnose(stretch(["tcp", "ipeth"], [(0, 1)], detached=[True, False]), "nest-cf")
    root = diagnose(stretch(["tcp", "ipeth"], [(0, 1)]), "nest-cf")
    for d in DIRS:
        assert detached[d][0][0] == -1.0 and not detached[d][1][0]
        assert root[d][0][0] > 0 and root[d][1][0]
    # ign=off replaces IGN with NONE (paper Table 8): the connection is blamed again.
    off = diagnose(stretch(["tcp", "ipeth"], [(0, 1)], detached=[True, False]), "nest-cf:ign=off")
    assert all(off[d][1][0] for d in DIRS)


def test_json_and_take_keep_detached():
    st = stretch(["tcp", "ipeth"], [(0, 1)], detached=[True, False], t=3)
    assert st.take([1, 2]).detached.tolist() == [True, False]
    assert stretch(["tcp", "ipeth"], [(0, 1)]).detached.tolist() == [False, False]


@pytest.fixture
def late_socket_run(tmp_path):
    """tcp 3 (over ipeth 4) from seq 0; its socket 2 (under app 1) and the edge socket -> tcp from
    seq 2 (the 3rd snapshot) until seq 5, when the socket is closed and the connection lingers.
    tcp 5 never has a socket (a connection the interceptor does not see)."""
    modules = {1: ("app", 0, None), 2: ("socket", 2, 5), 3: ("tcp", 0, None), 4: ("ipeth", 0, None),
               5: ("tcp", 0, None)}
    edges = [(3, 4, 0, None), (5, 4, 0, None), (1, 2, 2, 5), (2, 3, 2, 5)]
    n = 8
    c = {(1, d): [(0, 100.0 * s, None, 0) for s in range(n)] for d in ("in", "out")}
    c |= {(2, d): [None] * 2 + [(0, 100.0 * (s + 1), None, 0) for s in range(3)] + [None] * 3 for d in ("in", "out")}
    c |= {(m, d): [(0, None, 0, 0)] * n for m in (3, 5) for d in ("in", "out")}
    c |= {(4, d): [(10**6 + 7 * s, None, None, 0) for s in range(n)] for d in ("in", "out")}
    return write_run(tmp_path / "run", c, modules, edges, n)


def test_load_run_marks_detached(late_socket_run):
    """(d) load_stretches: detached = a parent edge somewhere in the run, none in this stretch."""
    run = load_stretches(late_socket_run)
    assert [list(st.seqs) for st in run.stretches] == [[0, 1], [2, 3, 4], [5, 6, 7]]
    got = [dict(zip(st.modules, st.detached.tolist(), strict=True)) for st in run.stretches]
    assert got == [{1: False, 3: True, 4: False, 5: False},
                   {1: False, 2: False, 3: False, 4: False, 5: False},
                   {1: False, 3: True, 4: False, 5: False}]


def test_diagnose_run_no_stalled_root_at_a_connections_start_and_end(late_socket_run):
    frame = diagnose_run(late_socket_run, ["flowdiagnoser"])
    for d in DIRS:
        tcp3 = frame[(frame["module"] == 3) & (frame["dir"] == d)].sort_values("seq")["label"].tolist()
        assert tcp3 == ["DONTCARE"] * 2 + ["STALLED"] * 3 + ["DONTCARE"] * 3
        tcp5 = frame[(frame["module"] == 5) & (frame["dir"] == d)]["label"]
        assert (tcp5 == "STALLED").all()
