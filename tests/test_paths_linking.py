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
