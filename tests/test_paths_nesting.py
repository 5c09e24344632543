"""Project5's nesting algorithm (analysis/paths/nesting.py) on hand-made RPC traces whose answer is
known, and on Maketrace traces (property tests: paths that never overlap are recovered exactly)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from analysis.paths import nesting
from analysis.paths.maketrace import Template, call, maketrace, web_service
from analysis.paths.model import as_messages, true_patterns
from analysis.paths.score import score


def trace(rows: list[tuple]) -> pd.DataFrame:
    """rows: (t_send, t_recv, src, dst, kind, msg)."""
    return as_messages(pd.DataFrame(rows, columns=["t_send", "t_recv", "src", "dst", "kind", "msg"]))


def request(t0: float, ids: tuple[int, int, int], web_ms=2.0, app_ms=5.0, db_ms=10.0, net=0.0005,
            sequential_db=False) -> list[tuple]:
    """client>web, web>app, app>db ... returns; times in ms after t0 (s)."""
    a, b, c = ids
    w, ap, d = web_ms / 1000, app_ms / 1000, db_ms / 1000
    t = t0
    rows = [(t, t + net, "client", "web", "call", a)]
    t += net + w
    rows.append((t, t + net, "web", "app", "call", b))
    t += net + ap
    rows.append((t, t + net, "app", "db", "call", c))
    t += net + d
    rows.append((t, t + net, "db", "app", "return", c))
    t += net + ap
    rows.append((t, t + net, "app", "web", "return", b))
    t += net + w
    rows.append((t, t + net, "web", "client", "return", a))
    return rows


CHAIN = "client>web(web>app(app>db(db>app(app>web(web>client)))))"


def test_one_request_gives_its_pattern_and_delays():
    r = nesting.infer(trace(request(1.0, (7, 8, 9))))
    assert [(p.pattern, p.count) for p in r.patterns] == [(CHAIN, 1.0)]
    delays = r.patterns[0].node_delays
    # web: 2 ms before calling app + 2 ms after app's return; app 5 + 5; db 10
    assert delays == pytest.approx({"web": 0.004, "app": 0.010, "db": 0.010})
    assert r.patterns[0].edge_latencies["client>web"] == pytest.approx(0.0005)
    nd = r.node_delays.set_index("node")
    assert nd.loc["app", "mean_s"] == pytest.approx(0.005)
    assert nd.loc["app", "count"] == 2


def test_overlapping_requests_with_different_delays_are_told_apart():
    # 20 requests, each overlapping the next at every tier; the scoreboard learns the typical delays
    rows = []
    for i in range(20):
        rows += request(i * 0.015, (3 * i, 3 * i + 1, 3 * i + 2))
    r = nesting.infer(trace(rows))
    assert [(p.pattern, p.count) for p in r.patterns] == [(CHAIN, 20.0)]


def test_sequential_and_parallel_nested_calls():
    seq = [(0.000, 0.001, "c", "w", "call", 1), (0.002, 0.003, "w", "a", "call", 2),
           (0.004, 0.005, "a", "w", "return", 2), (0.006, 0.007, "w", "b", "call", 3),
           (0.008, 0.009, "b", "w", "return", 3), (0.010, 0.011, "w", "c", "return", 1)]
    par = [(1.000, 1.001, "c", "w", "call", 11), (1.002, 1.003, "w", "a", "call", 12),
           (1.0025, 1.0035, "w", "b", "call", 13), (1.005, 1.006, "a", "w", "return", 12),
           (1.006, 1.007, "b", "w", "return", 13), (1.010, 1.011, "w", "c", "return", 11)]
    r = nesting.infer(trace(seq + par))
    got = {p.pattern: p.count for p in r.patterns}
    assert got == {"c>w(w>a(a>w(w>b(b>w(w>c)))))": 1.0,
                   "c>w(w>a(a>w),w>b(b>w(w>c)))": 1.0}


def test_unpaired_messages_are_counted_and_left_out():
    rows = request(0.0, (1, 2, 3))
    rows = [r for r in rows if not (r[4] == "return" and r[5] == 3)]      # db's reply lost
    rows.append((0.5, 0.5005, "x", "y", "return", 99))                    # a reply without call
    rows.append((0.6, 0.6005, "x", "y", "", -1))                          # untagged
    r = nesting.infer(trace(rows))
    assert any("1 calls without a return and 1 returns without a call" in w for w in r.warnings)
    assert any("1 messages without a call/return tag" in w for w in r.warnings)
    # app>db has no pair: app's return now follows web>app's call directly
    assert [p.pattern for p in r.patterns] == ["client>web(web>app(app>web(web>client)))"]


def test_local_clocks_ignore_a_clock_offset_that_send_times_do_not():
    rows = []
    for i in range(10):
        rows += request(i * 0.015, (3 * i, 3 * i + 1, 3 * i + 2))
    f = pd.DataFrame(rows, columns=["t_send", "t_recv", "src", "dst", "kind", "msg"])
    # app's clock is 30 ms fast: its sends and its receipts are recorded 30 ms late
    f.loc[f["src"] == "app", "t_send"] += 0.030
    f.loc[f["dst"] == "app", "t_recv"] += 0.030
    local = nesting.infer(as_messages(f))
    assert [(p.pattern, p.count) for p in local.patterns] == [(CHAIN, 10.0)]
    assert local.patterns[0].node_delays["app"] == pytest.approx(0.010)
    send = nesting.infer(as_messages(f), timestamps="send")
    assert [(p.pattern, p.count) for p in send.patterns] != [(CHAIN, 10.0)]


def test_unknown_parameter_is_refused():
    with pytest.raises(ValueError, match="unknown parameters"):
        nesting.infer(trace(request(0.0, (1, 2, 3))), bins=2)


def test_web_service_at_the_slides_settings_meets_the_targets():
    tr = maketrace(web_service(), duration=60, parallelism=4, seed=3)
    s = score(nesting.infer(tr.messages), tr)
    assert s["pattern_recall"] >= 0.95 and s["pattern_precision"] >= 0.95
    assert s["delay_error_pct"] <= 10


NODES = ("a", "b", "c", "d", "e", "f")


@st.composite
def templates(draw):
    """A random call tree in which every node appears once: sequential and parallel calls, no
    recursion (two calls open at once into the same node are ambiguous to nesting by nature:
    slide 16's "local info not enough")."""
    free = list(NODES)

    def hop(depth: int):
        node = free.pop(draw(st.integers(0, len(free) - 1)))
        n = draw(st.integers(0, min(2, len(free)) if depth < 2 else 0))
        kids = [hop(depth + 1) for _ in range(n) if free]
        return call(node, draw(st.floats(0.5, 20)), *kids,
                    parallel=draw(st.booleans()) if len(kids) > 1 else False)
    return Template("t", "client", hop(0))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tpl=templates(), seed=st.integers(0, 10_000))
def test_single_pattern_without_overlap_is_recovered_exactly(tpl, seed):
    tr = maketrace([tpl], duration=30, rate=1.0, seed=seed)
    req = tr.truth.request
    t = tr.messages["t_send"].to_numpy()
    spans = pd.DataFrame({"r": req, "t": t}).groupby("r")["t"].agg(["min", "max"]).sort_values("min")
    assume(len(spans) >= 2 and (spans["min"].to_numpy()[1:] > spans["max"].to_numpy()[:-1] + 0.01).all())
    r = nesting.infer(tr.messages)
    want = true_patterns(tr)["pattern"].value_counts()
    assert {p.pattern: p.count for p in r.patterns} == {k: float(v) for k, v in want.items()}
    s = score(r, tr)
    assert s["delay_error_pct"] == pytest.approx(0.0, abs=1e-6) or np.isnan(s["delay_error_pct"])


def test_orphans_dropped_leave_out_parentless_trees_at_called_nodes():
    rows = request(0.0, (1, 2, 3)) + request(1.0, (4, 5, 6))
    rows += [(2.0, 2.0005, "app", "db", "call", 7), (2.01, 2.0105, "db", "app", "return", 7)]  # noise
    rows = [r for r in rows if r[5] != 5]        # second request: web>app call and return lost
    kept = {p.pattern: p.count for p in nesting.infer(trace(rows)).patterns}
    assert kept == {CHAIN: 1.0, "client>web(web>client)": 1.0, "app>db(db>app)": 2.0}
    r = nesting.infer(trace(rows), orphans="drop")
    assert {p.pattern: p.count for p in r.patterns} == {CHAIN: 1.0, "client>web(web>client)": 1.0}
    assert any("2 parentless call trees" in w for w in r.warnings)
