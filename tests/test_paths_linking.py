"""WAP5's message linking (analysis/paths/linking.py) on hand-made traces whose answer is known (the
paper's figure 5 and 6 situation: which call into B caused B>C), and on Maketrace traces (property:
paths that never overlap are recovered exactly)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from analysis.paths import linking
from analysis.paths.maketrace import maketrace
from analysis.paths.model import as_messages, true_patterns
from tests.test_paths_nesting import templates


def trace(rows: list[tuple]) -> pd.DataFrame:
    """rows: (t_send, t_recv, src, dst); no call/return tags."""
    return as_messages(pd.DataFrame(rows, columns=["t_send", "t_recv", "src", "dst"]))


def test_link_probabilities_follow_the_exponential_model():
    # B>C is sent 10 ms after B got A>B and 2 ms after it got X>B; every earlier B>C came 4 ms after
    # its latest input (so d[B>C] = 4 ms from those, and this one's sample is 2 ms)
    rows = []
    for i in range(9):
        t = i * 1.0
        rows += [(t, t + 0.001, "A", "B"), (t + 0.005, t + 0.0051, "B", "C")]
    rows += [(20.0, 20.001, "A", "B"), (20.009, 20.0095, "X", "B"), (20.011, 20.0111, "B", "C")]
    m = trace(rows)
    r = linking.infer(m, k=0, untraced=())
    d = (9 * 0.004 + 0.0015) / 10
    w_a, w_x, w_s = math.exp(-0.010 / d), math.exp(-0.0015 / d), math.exp(-4)
    p_x = w_x / (w_a + w_x + w_s)
    got = {p.pattern: p.count for p in r.patterns}
    assert got["X>B(B>C)"] == pytest.approx(p_x, rel=1e-6)    # one link in, the A>B link left out:
    # X>B's tree: p(X>B>B>C); A>B's tree (just A>B): 1 - p(A>B>B>C)
    assert got["A>B"] == pytest.approx(1 - w_a / (w_a + w_x + w_s), rel=1e-6)
    assert got["A>B(B>C)"] == pytest.approx(9 * (1 / (1 + math.exp(-0.004 / d) ** -1 * w_s)), rel=0.2)


def test_spontaneous_when_nothing_came_in_for_long():
    rows = [(0.0, 0.001, "A", "B"), (0.003, 0.0031, "B", "C")] * 1
    rows += [(i * 1.0 + 5, i * 1.0 + 5.001, "A", "B") for i in range(3)]
    rows += [(i * 1.0 + 5.003, i * 1.0 + 5.0031, "B", "C") for i in range(3)]
    rows += [(30.0, 30.0001, "B", "C")]         # nothing came into B for 25 s: x = 2 s
    r = linking.infer(trace(rows), k=0, untraced=())
    got = {p.pattern: p.count for p in r.patterns}
    assert got["B>C"] == pytest.approx(1.0)
    assert r.params["raw_counts"]["A>B(B>C)"] == 4


def test_messages_with_no_possible_parent_at_all_are_each_a_root():
    """A trace (a fault window's slice of one) whose messages are all further apart than x and never
    into their sender: no candidate link at all, every message its own path (it was an IndexError:
    the black-box comparison left out the runs whose web host was cut off)."""
    r = linking.infer(trace([(0.0, 0.001, "A", "B"), (10.0, 10.001, "C", "D")]), untraced=())
    assert {p.pattern: p.count for p in r.patterns} == {"A>B": pytest.approx(1.0), "C>D": pytest.approx(1.0)}


def test_try_both_makes_two_instances_of_an_even_link():
    # two calls into B equally far (2 ms) before B>C, learnt d = 2 ms: each link ~ 0.5 - e^-4
    rows = [(i * 1.0, i * 1.0 + 0.001, "A", "B") for i in range(5)]
    rows += [(i * 1.0 + 0.003, i * 1.0 + 0.0031, "B", "C") for i in range(5)]
    rows += [(10.0, 10.001, "A", "B"), (10.0, 10.001, "X", "B"), (10.003, 10.0031, "B", "C")]
    r1 = linking.infer(trace(rows), k=1, untraced=())
    r0 = linking.infer(trace(rows), k=0, untraced=())
    assert r1.params["trees_enumerated"] >= 1
    got1 = {p.pattern: p.count for p in r1.patterns}
    got0 = {p.pattern: p.count for p in r0.patterns}
    # with try-both, the instance where X>B caused B>C and the one where it did not both count
    assert got1.get("X>B(B>C)", 0) > 0.3 and got1.get("X>B", 0) > 0.3
    assert sum(got1.values()) > sum(got0.values())


def test_one_client_chains_requests_unless_untraced():
    rows = []
    for i in range(20):
        t = i * 0.05
        rows += [(t, t + 0.0005, "client", "web"), (t + 0.0025, t + 0.003, "web", "client")]
    tagged = pd.DataFrame(rows, columns=["t_send", "t_recv", "src", "dst"])
    tagged["kind"] = ["call", "return"] * 20
    chained = linking.infer(trace(rows), k=0)
    assert any("untraced=NAME" in w for w in chained.warnings)
    assert chained.params["trees"] < 20
    for r in (linking.infer(trace(rows), k=0, untraced="client"), linking.infer(as_messages(tagged), k=0)):
        assert r.params["untraced"] == ["client"]
        assert r.params["raw_counts"] == {"client>web(web>client)": 20}


def test_unknown_parameter_is_refused():
    with pytest.raises(ValueError, match="unknown parameters"):
        linking.infer(trace([(0.0, 0.001, "A", "B")]), z=1)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tpl=templates(), seed=st.integers(0, 10_000))
def test_single_pattern_without_overlap_is_recovered_exactly(tpl, seed):
    tr = maketrace([tpl], duration=30, rate=1.0, seed=seed, tags=False)
    t = tr.messages["t_send"].to_numpy()
    spans = pd.DataFrame({"r": tr.truth.request, "t": t}).groupby("r")["t"].agg(["min", "max"])
    spans = spans.sort_values("min")
    assume(len(spans) >= 2 and (spans["min"].to_numpy()[1:] > spans["max"].to_numpy()[:-1] + 0.01).all())
    r = linking.infer(tr.messages, k=0, untraced="client")
    want = true_patterns(tr)["pattern"].value_counts()
    assert r.params["raw_counts"] == {k: int(v) for k, v in want.items()}
    # expected counts: every instance's probability is at most 1, and the pattern dominates
    assert 0 < r.patterns[0].count <= want.iloc[0]


def test_d_min_keeps_a_short_wait_after_instant_forwarding_linked():
    # B forwards A's calls to C at once (gap 0), but one call after a 1 ms wait: with d fitted to
    # the zero gaps (the paper's estimate, no floor) that 1 ms is many means long, i.e. spontaneous
    rows = []
    for i in range(30):
        t = i * 1.0
        wait = 0.001 if i == 29 else 0.0
        rows += [(t, t + 0.001, "A", "B"), (t + 0.001 + wait, t + 0.0015 + wait, "B", "C")]
    m = trace(rows)
    floored = linking.infer(m, k=0, untraced="A")
    assert floored.params["raw_counts"] == {"A>B(B>C)": 30}
    unfloored = linking.infer(m, k=0, untraced="A", d_min=1e-9)
    assert unfloored.params["raw_counts"] == {"A>B(B>C)": 29, "A>B": 1, "B>C": 1}


def rpc_rows(n: int, stray: int) -> list[tuple]:
    """A calls B, B calls C at once, C replies after 5 ms, B replies to A 5 ms later (its reply is
    caused by C's reply). In request `stray` a call from X arrives 1 ms before B's reply (B answers
    it 1 ms later): the latest arrival is then not the cause."""
    rows = []
    for i in range(n):
        t = i * 1.0
        rows += [(t, t + 0.0005, "A", "B"), (t + 0.0005, t + 0.001, "B", "C"),
                 (t + 0.006, t + 0.0065, "C", "B"), (t + 0.0115, t + 0.012, "B", "A")]
        if i == stray:
            rows += [(t + 0.0105, t + 0.0106, "X", "B"), (t + 0.0125, t + 0.013, "B", "X")]
    return rows


def test_edge_model_learns_that_the_reply_follows_the_nested_reply():
    m = trace(rpc_rows(40, stray=20))
    rpc = "A>B(B>C(C>B(B>A)))"
    wap5 = linking.infer(m, k=0, untraced=["A", "X"])
    edges = linking.infer(m, k=0, untraced=["A", "X"], model="edges")
    # the paper's model takes the latest arrival: X's call "causes" request 20's reply
    assert wap5.params["raw_counts"].get(rpc) == 39
    assert edges.params["raw_counts"] == {rpc: 40, "X>B(B>X)": 1}
    with pytest.raises(ValueError, match="model"):
        linking.infer(m, model="gamma")


@settings(max_examples=25, deadline=None)
@given(gaps=st.lists(st.floats(0, 0.05), min_size=1, max_size=8), d=st.floats(1e-4, 0.02),
       y=st.floats(1, 6), model=st.sampled_from(["wap5", "edges"]))
def test_link_probabilities_and_spontaneity_sum_to_one(gaps, d, y, model):
    import numpy as np

    from analysis.paths.linking_weights import edge_weights, wap5_weights

    k = len(gaps)
    child = np.zeros(k, dtype=np.int64)             # one child (message 0), k candidate parents
    parent = np.arange(1, k + 1)
    gap = np.sort(np.asarray(gaps))
    src = np.zeros(k + 1, dtype=np.int64)
    src[1:] = np.arange(1, k + 1) % 3 + 1           # parents from up to three input nodes
    dst = np.zeros(k + 1, dtype=np.int64)
    dst[0] = 4
    dd = np.full(k + 1, d)
    if model == "wap5":
        p, ps = wap5_weights(child, gap, dd, y, k + 1)
        # the paper's model is monotone: the nearest candidate is (one of) the likeliest
        assert p[0] == pytest.approx(p.max())
    else:
        p, ps = edge_weights(child, parent, gap, src, dst, 5, dd, y, 3)
    assert p.sum() + ps[0] == pytest.approx(1.0)
    assert (p >= 0).all() and ps[1:] == pytest.approx(1.0)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 6), links=st.lists(st.tuples(st.integers(0, 5), st.floats(0, 0.02)),
                                           max_size=20), d=st.floats(1e-3, 0.01))
def test_shortcut_for_the_papers_model_picks_the_same_likeliest_parent(n, links, d):
    import numpy as np

    from analysis.paths.linking_weights import wap5_weights

    # links in walk order: per child, round r holds its r-th latest candidate (gaps non-decreasing)
    per = {}
    for c, g in links:
        if c < n:
            per.setdefault(c, []).append(g)
    rounds = [[(c, sorted(gs)[r]) for c, gs in sorted(per.items()) if r < len(gs)]
              for r in range(max((len(g) for g in per.values()), default=0))]
    flat = [x for rnd in rounds for x in rnd]
    child = np.array([c for c, _ in flat], dtype=np.int64)
    gap = np.array([g for _, g in flat], dtype=float)
    prob, ps = wap5_weights(child, gap, np.full(n, d), 4.0, n)
    fast = linking.likeliest(child, prob, ps, monotone=True)
    slow = linking.likeliest(child, prob, ps)
    assert (fast == slow).all()
