"""TraceWeaver-class whole-request consistency (issue 43, fourth pass; analysis/paths/weaver_cross.py):
a service that joins a request's several incoming calls, learned from the mapping upstream of it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.paths.accuracy import request_scores
from analysis.paths.algorithms import algorithm
from analysis.paths.callpairs import roots
from analysis.paths.model import Trace, Truth, as_messages


def join_uploads(pairs: int = 150, seed: int = 3) -> Trace:
    """Requests in pairs (the second 0.3-1 ms after the first): F calls A and B at once; each uploads
    to J after 0.05-2 ms of its own work. J joins them: once the first upload's work is done (0.1-0.3
    ms after the later arrival) it replies to it, and 0.1 ms (+- 5 us) later the other upload (the
    winner, either one) calls S, then replies 0.2-2 ms after S's return. The winner's own arrival and
    reply are spread over milliseconds, so per service the twins' winners both fit either S call;
    what tells them apart is the gap from the request's other upload's reply to the call."""
    rng = np.random.default_rng(seed)
    rows = []        # t_send, src, dst, kind, msg, request, role, winner
    for k in range(pairs):
        for j in range(2):
            r, m = 2 * k + j, 20 * (2 * k + j)
            t0 = k * 0.05 + j * rng.uniform(0.0003, 0.001)
            arr = {"A": t0 + 0.00003 + rng.uniform(0.00005, 0.002), "B": t0 + 0.00005 + rng.uniform(0.00005, 0.002)}
            first_done = max(arr.values()) + rng.uniform(0.0001, 0.0003)
            win = "A" if rng.random() < 0.5 else "B"
            call = first_done + 0.0001 + rng.normal(0, 0.000005)
            back = call + rng.uniform(0.0003, 0.001)
            end = {win: back + rng.uniform(0.0002, 0.002), ("B" if win == "A" else "A"): first_done}
            rows += [(t0, "client", "F", "call", m, r, "in", win),
                     (t0 + 0.00003, "F", "A", "call", m + 1, r, "FA", win),
                     (t0 + 0.00005, "F", "B", "call", m + 2, r, "FB", win),
                     (arr["A"], "A", "J", "call", m + 3, r, "AJ", win),
                     (arr["B"], "B", "J", "call", m + 4, r, "BJ", win),
                     (call, "J", "S", "call", m + 5, r, "JS", win),
                     (back, "S", "J", "return", m + 5, r, "SJ", win),
                     (end["A"], "J", "A", "return", m + 3, r, "JA", win),
                     (end["B"], "J", "B", "return", m + 4, r, "JB", win),
                     (end["A"] + 0.00003, "A", "F", "return", m + 1, r, "AF", win),
                     (end["B"] + 0.00003, "B", "F", "return", m + 2, r, "BF", win),
                     (max(end.values()) + 0.00006, "F", "client", "return", m, r, "out", win)]
    f = pd.DataFrame(rows, columns=["t_send", "src", "dst", "kind", "msg", "request", "role", "win"])
    f["t_recv"] = f["t_send"]
    f = f.sort_values("t_send", kind="stable").reset_index(drop=True)
    at = {(r, role): i for i, (r, role) in enumerate(zip(f["request"], f["role"], strict=True))}
    # a message's cause: the latest message its sender received in the same handling
    fixed = {"FA": "in", "FB": "in", "AJ": "FA", "BJ": "FB", "SJ": "JS", "AF": "JA", "BF": "JB"}
    cause = np.full(len(f), -1)
    for i, (r, role, win) in enumerate(zip(f["request"], f["role"], f["win"], strict=True)):
        if role in fixed:
            cause[i] = at[(r, fixed[role])]
        elif role == "JS":
            cause[i] = at[(r, win + "J")]
        elif role in ("JA", "JB"):
            cause[i] = at[(r, "SJ")] if role == "J" + win else at[(r, role[1] + "J")]
        elif role == "out":
            cause[i] = max(at[(r, "AF")], at[(r, "BF")])
    return Trace(as_messages(f[["t_send", "t_recv", "src", "dst", "kind", "msg"]]), Truth(f["request"].to_numpy(), cause))


def test_a_join_is_learned_from_the_mapping_upstream():
    # without the whole-request term (cross_rounds=0, the code before it) the twins' winners are
    # confused at J; with it the gap from the other upload's reply puts the call under its own
    t = join_uploads()
    tw, _ = algorithm("traceweaver")
    before = request_scores(tw(t.messages, cross_rounds=0), t)["request_accuracy"]
    after = request_scores(tw(t.messages), t)["request_accuracy"]
    assert before < 0.93
    assert after > 0.97


def test_requests_come_once_the_term_changes_nothing():
    # no service sees a request twice: the term is flat and the mapping is the joint choice's
    from tests.test_paths_rivals import twin_fanouts
    t = twin_fanouts()
    tw, _ = algorithm("traceweaver")
    a = tw(t.messages, cross_rounds=0).parent
    b = tw(t.messages).parent
    assert np.array_equal(np.asarray(a), np.asarray(b))


def test_roots_follow_chosen_parents():
    chosen = np.array([-1, 0, 1, -1, 3, 2])
    assert roots(chosen).tolist() == [0, 0, 0, 3, 3, 0]


def _problem(rng, n_own: int, most_tuples: int, n_calls: int, most_calls: int):
    """A random independent-set problem: per incoming call 1..most_tuples-1 tuples (the first empty,
    value 0), each of 1..most_calls-1 of n_calls outgoing calls; (owner, t_of, call, value)."""
    owner, t_of, call, value = [], [], [], []
    for o in range(n_own):
        for k in range(int(rng.integers(1, most_tuples))):
            tid = len(owner)
            owner.append(o)
            value.append(0.0 if k == 0 else float(rng.normal(-10, 4)))   # k = 0: the empty tuple
            if k:
                for c in rng.choice(n_calls, size=int(rng.integers(1, most_calls)), replace=False).tolist():
                    t_of.append(tid)
                    call.append(c)
    return (np.array(owner), np.array(t_of, dtype=np.int64), np.array(call, dtype=np.int64),
            np.array(value))


def _check_choice(owner, t_of, call, value, got, want, tolerance: float) -> None:
    """got: one tuple per incoming call, no outgoing call twice, the total of want."""
    assert sorted(owner[got].tolist()) == list(range(int(owner.max()) + 1))
    taken = call[np.isin(t_of, got)]
    assert len(taken) == len(set(taken.tolist()))
    assert abs(value[got].sum() - value[want].sum()) < tolerance


def test_small_parts_enumerated_as_highs_solves_them():
    # random small independent-set problems (one tuple per incoming call, no outgoing call twice):
    # the enumeration's total equals HiGHS's 0-1 optimum on each
    from analysis.paths import weaver_small
    from analysis.paths.weaver_joint import _highs
    rng = np.random.default_rng(5)
    for _ in range(60):
        owner, t_of, call, value = _problem(rng, int(rng.integers(1, 4)), 6, 6, 3)
        got, rest = weaver_small.split(t_of, call, owner, value)
        want = _highs(t_of, call, owner, value, np.zeros(len(owner), dtype=np.int64), 5.0)
        if rest.any():
            continue                    # a part joined through calls into more than 3 incoming calls
        _check_choice(owner, t_of, call, value, got, want, 1e-9)


def test_independent_set_with_reductions_as_good_as_highs_alone():
    # random problems of up to seven incoming calls: the reductions, the enumeration and HiGHS on
    # what is left (_mwis) reach the same total as HiGHS on the whole (_highs), one tuple per
    # incoming call, no outgoing call twice
    from analysis.paths.weaver_joint import _highs, _mwis
    rng = np.random.default_rng(11)
    for _ in range(60):
        owner, t_of, call, value = _problem(rng, int(rng.integers(2, 8)), 7, 12, 4)
        group = np.zeros(len(owner), dtype=np.int64)
        got, want = _mwis(t_of, call, owner, value, group, 5.0), _highs(t_of, call, owner, value, group, 5.0)
        _check_choice(owner, t_of, call, value, got, want, 1e-6)


def test_true_parents_are_the_truth():
    """callpairs.true_parents reads Truth.cause as parent pairs: made into messages again they score
    100%; the join's call S is parented by the winner's upload (its cause there is that upload's
    call, or a return inside its handling); one parent moved costs that request."""
    from analysis.paths.callpairs import call_pairs, result, true_parents

    trace = join_uploads(pairs=20)
    cp = call_pairs(trace.messages)
    parent = true_parents(cp, trace.truth.cause)
    assert request_scores(result("truth", cp, parent, {}), trace)["request_accuracy"] == 1.0
    names = np.asarray(cp.nodes.names)
    js = np.flatnonzero((names[cp.caller] == "J") & (names[cp.callee] == "S"))
    assert len(js) == 40 and (names[cp.callee[parent[js]]] == "J").all()
    assert (names[cp.caller[parent[js]]] != "F").all()                 # an upload, from A or B
    roots_ = np.flatnonzero(parent < 0)
    assert (names[cp.caller[roots_]] == "client").all()
    moved = parent.copy()
    moved[js[0]], moved[js[2]] = parent[js[2]], parent[js[0]]          # two requests' S calls swapped
    got = request_scores(result("moved", cp, moved, {}), trace)
    assert got["n_requests"] - got["n_requests_right"] == 2


def test_true_parents_follow_returns_back_to_the_call():
    """A call caused by the return of an earlier call (A calls B, then C once B is back) has the same
    parent as that earlier call: the incoming call A serves, two returns back here."""
    from analysis.paths.callpairs import call_pairs, true_parents

    f = pd.DataFrame({"t_send": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
                      "src": ["client", "A", "B", "A", "C", "A", "D", "A"],
                      "dst": ["A", "B", "A", "C", "A", "D", "A", "client"],
                      "kind": ["call", "call", "return", "call", "return", "call", "return", "return"],
                      "msg": [1, 2, 2, 3, 3, 4, 4, 1]})
    f["t_recv"] = f["t_send"]
    cause = np.array([-1, 0, 1, 2, 3, 4, 5, 6])
    trace = Trace(as_messages(f), Truth(np.zeros(8, dtype=np.int64), cause))
    cp = call_pairs(trace.messages)
    names = np.asarray(cp.nodes.names)
    parent = true_parents(cp, trace.truth.cause)
    by_callee = {names[cp.callee[i]]: parent[i] for i in range(cp.n)}
    a = next(i for i in range(cp.n) if names[cp.callee[i]] == "A")
    assert by_callee == {"A": -1, "B": a, "C": a, "D": a}


def test_call_accuracy_scores_the_artifacts_scope():
    """call_accuracy (TraceWeaver's artifact's end-to-end accuracy): calls only, at services called from
    one service alone. J (called from A and B: a join) is outside it, F, A and B inside: a swap at J
    costs request_accuracy two requests and call_accuracy none; a swap at F costs both two."""
    from analysis.paths.callpairs import call_pairs, result, true_parents

    trace = join_uploads(pairs=20)
    cp = call_pairs(trace.messages)
    parent = true_parents(cp, trace.truth.cause)
    names = np.asarray(cp.nodes.names)

    def swapped(src, dst):
        at = np.flatnonzero((names[cp.caller] == src) & (names[cp.callee] == dst))
        moved = parent.copy()
        moved[at[0]], moved[at[2]] = parent[at[2]], parent[at[0]]
        return request_scores(result("x", cp, moved, {}), trace)

    whole = request_scores(result("truth", cp, parent, {}), trace)
    assert whole["call_accuracy"] == whole["request_accuracy"] == 1.0
    at_join = swapped("J", "S")
    assert at_join["n_requests"] - at_join["n_requests_right"] == 2 and at_join["call_accuracy"] == 1.0
    at_fan = swapped("F", "A")
    assert at_fan["n_requests"] - at_fan["n_call_requests_right"] == 2


def test_true_parents_follow_a_long_sequence_of_calls():
    """A handling that makes 70 calls one after another (each caused by the return of the one before):
    every one has the incoming call as its parent, however long the sequence."""
    from analysis.paths.callpairs import call_pairs, true_parents

    rows, cause = [(0.0, "client", "A", "call", 0)], [-1]
    for k in range(1, 71):
        t = k * 0.01
        rows += [(t, "A", "B", "call", k), (t + 0.005, "B", "A", "return", k)]
        cause += [len(rows) - 3, len(rows) - 2]          # after the previous return (or the call); its call
    rows.append((0.72, "A", "client", "return", 0))
    cause.append(len(rows) - 2)
    f = pd.DataFrame(rows, columns=["t_send", "src", "dst", "kind", "msg"])
    f["t_recv"] = f["t_send"]
    trace = Trace(as_messages(f), Truth(np.zeros(len(f), dtype=np.int64), np.asarray(cause)))
    cp = call_pairs(trace.messages)
    names = np.asarray(cp.nodes.names)
    parent = true_parents(cp, trace.truth.cause)
    a = np.flatnonzero(names[cp.callee] == "A")
    assert len(a) == 1 and (parent[names[cp.callee] == "B"] == a[0]).all() and parent[a[0]] == -1
