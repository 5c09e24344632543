"""streamsdiagnoser (thesis 4.4) and the engine baseline flink-backpressure, exact on hand-derived
snapshots and against the plain per-snapshot references (tests/support/reference_streams.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.diagnose import diagnose_stretches
from analysis.model.batch import Batch
from analysis.model.engine_metrics import EngineMetrics
from analysis.model.stretches import DIRS, Counters, Stretch
from analysis.variants import BLOCKED, DONTCARE, HEALTHY, LABELS, STALLED, Variant, parse_variant, systems
from analysis.variants.flink_backpressure import diagnose as fb_diagnose
from analysis.variants.flink_backpressure import root_causes
from rundir.db import STREAM_TASK_COLUMNS
from tests.support.reference import assert_same, reference
from tests.support.reference_streams import ref_flink_backpressure, ref_streamsdiagnoser
from tests.support.streams_run import Graph

H, D, B, S = HEALTHY, DONTCARE, BLOCKED, STALLED
SD = parse_variant("streamsdiagnoser")


def stretch(graph: Graph, snaps: list[dict[str, tuple[float, float]]]) -> Stretch:
    """Connections of `graph` as sconn modules; snaps: per snapshot {conn: (Δprocessed, queued)},
    absent = (0, 0)."""
    n, t = len(graph.conns), len(snaps)
    idx = {c: i for i, c in enumerate(graph.conns)}
    out = Counters.empty(n, t)
    out.has_queue[:] = True
    for k, snap in enumerate(snaps):
        for c, (dp, q) in snap.items():
            out.tm[idx[c], k], out.queued[idx[c], k] = dp, q
    inn = Counters.empty(n, t)
    inn.invalid[:] = True
    return Stretch(list(graph.conns), ["sconn"] * n, [(idx[p], idx[c]) for p, c in graph.edges()],
                   np.arange(t), {"out": out, "in": inn})


def streams_diagnosis(graph: Graph, snaps) -> dict[str, list[str]]:
    """{conn: [label per snapshot]} of streamsdiagnoser, checked against the reference on the way."""
    s = stretch(graph, snaps)
    (sd,) = diagnose_stretches([s], [SD])
    assert_same(sd.results[SD.name], ref_streamsdiagnoser(s), SD.name)
    res, pos = sd.results[SD.name]["out"]
    assert (pos == (res == STALLED)).all()
    assert (sd.results[SD.name]["in"][0] == DONTCARE).all() and not sd.results[SD.name]["in"][1].any()
    return {c: [LABELS[v] for v in res[i]] for i, c in enumerate(graph.conns)}


def test_chain_the_stopped_reader_is_stalled_and_backpressure_blocks_upstream():
    g = Graph({"src": "beacon", "a": "pass", "t": "throttle", "snk": "sink"},
              ["src:out0>a:in0", "a:out0>t:in0", "t:out0>snk:in0"])
    got = streams_diagnosis(g, [
        {c: (10, 0) for c in g.conns},                                   # all flowing
        {"src:out0>a:in0": (0, 4), "a:out0>t:in0": (0, 6)},              # t stopped reading; a backpressured
        {"src:out0>a:in0": (0, 0), "a:out0>t:in0": (0, 6)},              # src's connection drained: DONTCARE
        {"src:out0>a:in0": (3, 2), "a:out0>t:in0": (0, 6)},              # a read a little: HEALTHY
    ])
    assert got == {"src:out0>a:in0": ["HEALTHY", "BLOCKED", "DONTCARE", "HEALTHY"],
                   "a:out0>t:in0": ["HEALTHY", "STALLED", "STALLED", "STALLED"],
                   "t:out0>snk:in0": ["HEALTHY", "DONTCARE", "DONTCARE", "DONTCARE"]}


def test_fan_out_blame_goes_to_the_one_stuck_branch():
    g = Graph({"s": "beacon", "f": "pass", "x": "throttle", "y": "sink", "z": "sink", "k": "sink"},
              ["s:out0>f:in0", "f:out0>x:in0", "f:out0>y:in0", "f:out0>z:in0", "x:out0>k:in0"])
    got = streams_diagnosis(g, [{"s:out0>f:in0": (0, 5), "f:out0>x:in0": (0, 9), "f:out0>y:in0": (0, 0),
                                 "f:out0>z:in0": (0, -1), "x:out0>k:in0": (0, 0)}])
    assert got == {"s:out0>f:in0": ["BLOCKED"], "f:out0>x:in0": ["STALLED"], "f:out0>y:in0": ["DONTCARE"],
                   "f:out0>z:in0": ["DONTCARE"],   # a negative queue (4.3.2's pre-counted tuples) is no work
                   "x:out0>k:in0": ["DONTCARE"]}


def test_fan_in_every_input_passes_the_blame_to_the_stuck_output():
    g = Graph({"a": "beacon", "b": "beacon", "c": "beacon", "m": "join", "k": "throttle", "snk": "sink"},
              ["a:out0>m:in0", "b:out0>m:in0", "c:out0>m:in0", "m:out0>k:in0", "k:out0>snk:in0"])
    got = streams_diagnosis(g, [
        {"a:out0>m:in0": (0, 3), "b:out0>m:in0": (0, 3), "c:out0>m:in0": (0, 3), "m:out0>k:in0": (0, 8)},
        {"a:out0>m:in0": (2, 3), "b:out0>m:in0": (0, 3), "c:out0>m:in0": (0, 0), "m:out0>k:in0": (0, 8)},
    ])
    assert got == {"a:out0>m:in0": ["BLOCKED", "HEALTHY"], "b:out0>m:in0": ["BLOCKED", "BLOCKED"],
                   "c:out0>m:in0": ["BLOCKED", "DONTCARE"], "m:out0>k:in0": ["STALLED", "STALLED"],
                   "k:out0>snk:in0": ["DONTCARE", "DONTCARE"]}


def test_barrier_blames_its_other_inputs_and_then_itself_as_4_6_3_1_says():
    """MERGETREEBARRIER: Throttle1 at 0 starves the barrier, which stops reading its other inputs (STALLED:
    the thesis's false positives); with Throttle2 at 0 too, the connection into Throttle2 passes the blame
    to the barrier's input below it (BLOCKED: the false negative)."""
    g = Graph({"s": "beacon", "f": "pass", "t1": "throttle", "t2": "throttle", "p3": "pass", "bar": "barrier",
               "snk": "sink"},
              ["s:out0>f:in0", "f:out0>t1:in0", "f:out0>t2:in0", "f:out0>p3:in0",
               "t1:out0>bar:in0", "t2:out0>bar:in1", "p3:out0>bar:in2", "bar:out0>snk:in0"])
    phase1 = {"s:out0>f:in0": (0, 5), "f:out0>t1:in0": (0, 7), "f:out0>t2:in0": (0, 0), "f:out0>p3:in0": (0, 0),
              "t1:out0>bar:in0": (0, 0), "t2:out0>bar:in1": (0, 4), "p3:out0>bar:in2": (0, 4)}
    phase2 = dict(phase1, **{"f:out0>t2:in0": (0, 6)})
    got = streams_diagnosis(g, [phase1, phase2])
    assert got == {"s:out0>f:in0": ["BLOCKED", "BLOCKED"],
                   "f:out0>t1:in0": ["STALLED", "STALLED"],        # the fault: a true positive
                   "f:out0>t2:in0": ["DONTCARE", "BLOCKED"],       # Throttle2's fault: missed (4.6.3.1's FN)
                   "f:out0>p3:in0": ["DONTCARE", "DONTCARE"],
                   "t1:out0>bar:in0": ["DONTCARE", "DONTCARE"],
                   "t2:out0>bar:in1": ["STALLED", "STALLED"],      # the barrier not reading: the FPs
                   "p3:out0>bar:in2": ["STALLED", "STALLED"],
                   "bar:out0>snk:in0": ["DONTCARE", "DONTCARE"]}


def test_it_is_flowdiagnoser_theta_1_with_queues_on_direction_out():
    g = Graph({"a": "beacon", "b": "pass", "c": "sink"}, ["a:out0>b:in0", "b:out0>c:in0"])
    s = stretch(g, [{"a:out0>b:in0": (0, 2), "b:out0>c:in0": (0, 1)}, {"b:out0>c:in0": (0, 1)}])
    fd = Variant(systems()["flowdiagnoser"], {"theta": 1, "queues": True})
    (sd,) = diagnose_stretches([s], [SD, fd])
    np.testing.assert_array_equal(sd.results[SD.name]["out"][0], sd.results[fd.name]["out"][0])


@st.composite
def streams_dag(draw, max_n=7, max_t=4):
    n = draw(st.integers(1, max_n))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=2 * n)) if pairs else []
    t = draw(st.integers(1, max_t))
    out = Counters.empty(n, t)
    out.has_queue[:] = True
    out.tm[:] = np.array(draw(st.lists(st.sampled_from([0.0, 0.0, 1.0, 7.0]), min_size=n * t, max_size=n * t))).reshape(n, t)
    out.queued[:] = np.array(draw(st.lists(st.sampled_from([-2.0, 0.0, 0.0, 1.0, 5.0]), min_size=n * t,
                                           max_size=n * t))).reshape(n, t)
    inn = Counters.empty(n, t)
    inn.invalid[:] = True
    return Stretch(list(range(n)), ["sconn"] * n, edges, np.arange(t), {"out": out, "in": inn})


@settings(max_examples=300, deadline=None)
@given(streams_dag())
def test_streamsdiagnoser_equals_the_plain_rule_on_any_processing_graph(s):
    (sd,) = diagnose_stretches([s], [SD])
    assert_same(sd.results[SD.name], ref_streamsdiagnoser(s), SD.name)
    assert_same(sd.results[SD.name], reference(s, SD), SD.name)


# ----------------------------------------------------------------------------- the engine baseline


def tasks_frame(rows: list[dict]) -> pd.DataFrame:
    f = pd.DataFrame([{c: r.get(c) for c in STREAM_TASK_COLUMNS} for r in rows], columns=STREAM_TASK_COLUMNS)
    for c in STREAM_TASK_COLUMNS[2:]:
        f[c] = pd.to_numeric(f[c]).astype(float)
    return f


def baseline(s: Stretch, rows: list[dict], ends: dict, **params):
    v = Variant(systems()["flink-backpressure"], {"bp": 500.0, "busy": 500.0, "upstream": True} | params)
    batch = Batch([s], engine_metrics=EngineMetrics(tasks_frame(rows), ends))
    out = fb_diagnose(batch, **v.params)
    ref = ref_flink_backpressure(s, {(r["operator"], r["seq"]): r for r in rows}, ends, **v.params)
    assert_same({d: (out[d][0].reshape(s.n, s.t), out[d][1].reshape(s.n, s.t)) for d in DIRS}, ref, v.name)
    return out["out"][0].reshape(s.n, s.t)


def test_baseline_on_a_backpressure_chain_blames_the_busy_task_below_the_backpressured_ones():
    g = Graph({"src": "beacon", "a": "pass", "t": "throttle", "snk": "sink"},
              ["src:out0>a:in0", "a:out0>t:in0", "t:out0>snk:in0"])
    s = stretch(g, [{c: (5, 0) for c in g.conns}, {"src:out0>a:in0": (1, 3)}, {"src:out0>a:in0": (1, 3)}])
    ends = {c: (g.parts(c)[0], g.parts(c)[2]) for c in g.conns}
    rows = []
    for seq, (src, a, t, snk) in enumerate([
            ((100, 0), (100, 0), (100, 0), (50, 0)),       # (busy, backpressured) ms/s: all fine
            ((0, 950), (10, 980), (990, 0), (0, 0)),       # t busy (not reading), a and src back-pressured
            ((0, 950), (10, 980), (990, 0), (0, 0))]):
        for op, (b, p) in zip(("src", "a", "t", "snk"), (src, a, t, snk), strict=True):
            rows.append({"seq": seq, "operator": op, "busy_ms_per_s": b, "backpressured_ms_per_s": p,
                         "idle_ms_per_s": 1000 - b - p})
    got = baseline(s, rows, ends)
    assert [[LABELS[v] for v in r] for r in got] == [
        ["HEALTHY", "HEALTHY", "HEALTHY"],      # into a: a back-pressured, but it processed tuples
        ["HEALTHY", "STALLED", "STALLED"],      # into t, the root cause
        ["HEALTHY", "DONTCARE", "DONTCARE"]]
    # without a back-pressured upstream a busy task is no root cause; upstream=off makes it one
    quiet = [dict(r, backpressured_ms_per_s=0) for r in rows]
    assert not (baseline(s, quiet, ends) == STALLED).any()
    assert (baseline(s, quiet, ends, upstream=False)[1, 1:] == STALLED).all()


def test_baseline_uses_the_cumulative_times_over_the_interval_when_it_has_them():
    g = Graph({"a": "beacon", "b": "sink"}, ["a:out0>b:in0"])
    s = stretch(g, [{}, {}, {}])
    ends = {"a:out0>b:in0": ("a", "b")}
    # gauges say nothing is wrong; the cumulative times say b was busy and a back-pressured in interval 2
    acc = {"a": [(0, 0, 0), (0, 100, 900), (0, 1000, 900)], "b": [(0, 0, 0), (100, 0, 900), (1000, 0, 1000)]}
    rows = [{"seq": k, "operator": op, "busy_ms_per_s": 0, "backpressured_ms_per_s": 0, "idle_ms_per_s": 1000,
             "acc_busy_ms": v[0], "acc_backpressured_ms": v[1], "acc_idle_ms": v[2]}
            for op, vals in acc.items() for k, v in enumerate(vals)]
    got = baseline(s, rows, ends)
    assert [LABELS[v] for v in got[0]] == ["DONTCARE", "DONTCARE", "STALLED"]
    root, _ = root_causes(tasks_frame(rows), ends)
    assert root["b"].tolist() == [False, False, True]


@settings(max_examples=200, deadline=None)
@given(streams_dag(max_n=5, max_t=3), st.data())
def test_baseline_equals_its_reference_on_random_task_metrics(s, data):
    ops = ["o0", "o1", "o2", "o3"]
    ends = {m: (data.draw(st.sampled_from(ops)), data.draw(st.sampled_from(ops))) for m in s.modules}
    level = st.one_of(st.none(), st.sampled_from([0.0, 300.0, 500.0, 900.0]))
    rows = []
    for op in ops:
        acc = [0.0, 0.0, 0.0]
        for seq in range(s.t):
            if data.draw(st.booleans()):
                continue
            inc = [data.draw(st.sampled_from([0.0, 200.0, 800.0])) for _ in range(3)]
            acc = [a + i for a, i in zip(acc, inc, strict=True)]
            have_acc = data.draw(st.booleans())
            rows.append({"seq": seq, "operator": op, "busy_ms_per_s": data.draw(level),
                         "backpressured_ms_per_s": data.draw(level), "idle_ms_per_s": None,
                         **({"acc_busy_ms": acc[0], "acc_backpressured_ms": acc[1], "acc_idle_ms": acc[2]}
                            if have_acc else {})})
    baseline(s, rows, ends, upstream=data.draw(st.booleans()))


def test_a_busy_time_that_steps_back_is_clipped_not_a_reason_to_fall_back_to_the_gauges():
    """Flink derives busy time as the rest: going back-pressured, a task's busy time stepped back 138 ms
    while its back-pressured time grew 1,133 ms in one second (a stored mergetree run)."""
    from analysis.variants.flink_backpressure import task_rates

    rows = [{"seq": 14, "operator": "split", "busy_ms_per_s": 0, "backpressured_ms_per_s": 0, "idle_ms_per_s": 1000,
             "acc_busy_ms": 914, "acc_backpressured_ms": 0, "acc_idle_ms": 15098},
            {"seq": 15, "operator": "split", "busy_ms_per_s": 0, "backpressured_ms_per_s": 0, "idle_ms_per_s": 1000,
             "acc_busy_ms": 776, "acc_backpressured_ms": 1133, "acc_idle_ms": 15098}]
    r = task_rates(tasks_frame(rows)).set_index("seq")
    assert r.at[15, "from_acc"] and r.at[15, "busy"] == 0 and r.at[15, "bp"] == 1000
    ref = ref_flink_backpressure  # the reference clips the same way
    g = Graph({"src": "beacon", "split": "pass"}, ["src:out0>split:in0"])
    s = stretch(g, [{}, {}])
    s.seqs = np.array([14, 15])
    out = ref(s, {(x["operator"], x["seq"]): x for x in rows}, {"src:out0>split:in0": ("src", "split")})
    assert out["out"][0].tolist() == [[DONTCARE, BLOCKED]]   # back-pressured at 15, not busy: no root cause
