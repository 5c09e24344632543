"""streamsdiagnoser:engine=on and ds2 (issue 34): exact on hand-made snapshots with task metrics, equal to
their plain per-snapshot references (tests/support/reference_streams.py) on random graphs and metrics,
the plain rule where no metric exists, and the live engine's results equal to the offline ones."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.model.batch import Batch
from analysis.model.engine_metrics import EngineMetrics
from analysis.model.stretches import DIRS
from analysis.variants import LABELS, STALLED, parse_variant
from tests.support.live import differences, grow_and_watch, offline
from tests.support.reference import assert_same, reference
from tests.support.reference_streams import ref_ds2, ref_streamsdiagnoser
from tests.support.streams_run import Graph, StreamsRun
from tests.test_streams_variant import streams_dag, stretch, tasks_frame

ENGINE = parse_variant("streamsdiagnoser:engine=on")
DS2 = parse_variant("ds2")

BARRIER = Graph({"s": "beacon", "f": "pass", "t1": "throttle", "t2": "throttle", "p3": "pass", "bar": "barrier",
                 "snk": "sink"},
                ["s:out0>f:in0", "f:out0>t1:in0", "f:out0>t2:in0", "f:out0>p3:in0",
                 "t1:out0>bar:in0", "t2:out0>bar:in1", "p3:out0>bar:in2", "bar:out0>snk:in0"])
ENDS = {c: (BARRIER.parts(c)[0], BARRIER.parts(c)[2]) for c in BARRIER.conns}


def run_variant(variant, s, rows, ends, ref):
    """The variant on one stretch with these stream_tasks rows, checked against its reference."""
    batch = Batch([s], engine_metrics=EngineMetrics(tasks_frame(rows), ends))
    out = variant.diagnose(batch)
    got = {d: (out[d][0].reshape(s.n, s.t), out[d][1].reshape(s.n, s.t)) for d in DIRS}
    assert_same(got, ref(s, **variant.params, tasks={(r["operator"], r["seq"]): r for r in rows}, ends=ends),
                variant.name)
    return {c: [LABELS[v] for v in got["out"][0][i]] for i, c in enumerate(s.modules)}


def barrier_rows(seqs, states: dict[str, tuple[float, float]], records: dict | None = None) -> list[dict]:
    """Gauge rows (busy, back-pressured) per operator for these snapshots (others idle)."""
    rows = []
    for seq in seqs:
        for op in BARRIER.operators:
            b, p = states.get(op, (0.0, 0.0))
            rin, rout = (records or {}).get(op, (lambda k: (0, 0)))(seq)
            rows.append({"seq": seq, "operator": op, "busy_ms_per_s": b, "backpressured_ms_per_s": p,
                         "idle_ms_per_s": 1000 - b - p, "records_in": rin, "records_out": rout})
    return rows


PHASE1 = {"s:out0>f:in0": (0, 5), "f:out0>t1:in0": (0, 7), "f:out0>t2:in0": (0, 0), "f:out0>p3:in0": (0, 0),
          "t1:out0>bar:in0": (0, 0), "t2:out0>bar:in1": (0, 4), "p3:out0>bar:in2": (0, 4)}
PHASE2 = dict(PHASE1, **{"f:out0>t2:in0": (0, 6)})
# t1 stopped (busy: in user code), then t2 too; f and s back-pressured; the barrier idle, waiting on t1
STOPPED = {"t1": (990, 0), "t2": (990, 0), "f": (0, 980), "s": (0, 970)}


def test_engine_on_the_barrier_of_4_6_3_1_no_false_positive_no_false_negative():
    s = stretch(BARRIER, [PHASE1, PHASE2])
    plain = run_variant(parse_variant("streamsdiagnoser"), s, [], ENDS, ref_streamsdiagnoser)
    assert plain["t2:out0>bar:in1"] == ["STALLED", "STALLED"] and plain["f:out0>t2:in0"] == ["DONTCARE", "BLOCKED"]
    rows = barrier_rows([0], dict(STOPPED, t2=(0, 0))) + barrier_rows([1], STOPPED)
    got = run_variant(ENGINE, s, rows, ENDS, ref_streamsdiagnoser)
    assert got == {"s:out0>f:in0": ["BLOCKED", "BLOCKED"],       # f back-pressured
                   "f:out0>t1:in0": ["STALLED", "STALLED"],      # the fault, found as before
                   "f:out0>t2:in0": ["DONTCARE", "STALLED"],     # Throttle2's fault: t2 busy, not back-pressured
                   "f:out0>p3:in0": ["DONTCARE", "DONTCARE"],
                   "t1:out0>bar:in0": ["DONTCARE", "DONTCARE"],
                   "t2:out0>bar:in1": ["BLOCKED", "BLOCKED"],    # the barrier idle: waiting on in0, not stalled
                   "p3:out0>bar:in2": ["BLOCKED", "BLOCKED"],
                   "bar:out0>snk:in0": ["DONTCARE", "DONTCARE"]}


def test_engine_on_falls_back_to_the_plain_rule_where_no_metric_exists():
    s = stretch(BARRIER, [PHASE1, PHASE2])
    plain = run_variant(parse_variant("streamsdiagnoser"), s, [], ENDS, ref_streamsdiagnoser)
    assert run_variant(ENGINE, s, [], ENDS, ref_streamsdiagnoser) == plain
    # metrics for snapshot 1 only, and none for the barrier: snapshot 0 and the barrier's inputs as before
    rows = [r for r in barrier_rows([1], STOPPED) if r["operator"] != "bar"]
    got = run_variant(ENGINE, s, rows, ENDS, ref_streamsdiagnoser)
    assert got["t2:out0>bar:in1"] == plain["t2:out0>bar:in1"] == ["STALLED", "STALLED"]
    assert got["f:out0>t2:in0"] == ["DONTCARE", "STALLED"]


def test_engine_on_a_back_pressured_pe_is_blocked_even_when_its_children_are_not_stuck():
    g = Graph({"a": "beacon", "b": "pass", "c": "sink"}, ["a:out0>b:in0", "b:out0>c:in0"])
    s = stretch(g, [{"a:out0>b:in0": (0, 3), "b:out0>c:in0": (0, 0)}])
    ends = {c: (g.parts(c)[0], g.parts(c)[2]) for c in g.conns}
    rows = [{"seq": 0, "operator": "b", "busy_ms_per_s": 100, "backpressured_ms_per_s": 800, "idle_ms_per_s": 100}]
    assert run_variant(ENGINE, s, rows, ends, ref_streamsdiagnoser)["a:out0>b:in0"] == ["BLOCKED"]
    rows[0] |= {"busy_ms_per_s": 900, "backpressured_ms_per_s": 0}
    assert run_variant(ENGINE, s, rows, ends, ref_streamsdiagnoser)["a:out0>b:in0"] == ["STALLED"]


def _random_rows(s, data, ops, records=False):
    level = st.one_of(st.none(), st.sampled_from([0.0, 5.0, 300.0, 500.0, 900.0, 1000.0]))
    rows = []
    for op in ops:
        acc, rec = [0.0, 0.0, 0.0], [0.0, 0.0]
        for seq in range(s.t):
            if data.draw(st.booleans()):
                continue
            inc = [data.draw(st.sampled_from([0.0, 5.0, 200.0, 800.0])) for _ in range(3)]
            acc = [a + i for a, i in zip(acc, inc, strict=True)]
            rec = [r + data.draw(st.sampled_from([0.0, 1.0, 100.0])) for r in rec]
            have_acc = data.draw(st.booleans())
            row = {"seq": seq, "operator": op, "busy_ms_per_s": data.draw(level),
                   "backpressured_ms_per_s": data.draw(level), "idle_ms_per_s": None}
            if have_acc:
                row |= {"acc_busy_ms": acc[0], "acc_backpressured_ms": acc[1], "acc_idle_ms": acc[2]}
            if records and data.draw(st.booleans()):
                row |= {"records_in": rec[0], "records_out": rec[1]}
            rows.append(row)
    return rows


@settings(max_examples=200, deadline=None)
@given(streams_dag(max_n=5, max_t=3), st.data())
def test_engine_on_equals_its_reference_on_random_graphs_and_metrics(s, data):
    ops = ["o0", "o1", "o2", "o3"]
    s.kinds = ["sconn"] * s.n
    ends = {m: (data.draw(st.sampled_from(ops)), data.draw(st.sampled_from(ops))) for m in s.modules}
    run_variant(ENGINE, s, _random_rows(s, data, ops), ends, ref_streamsdiagnoser)
    # without metrics, the plain rule: the chapter 2 reference too
    out = ENGINE.diagnose(Batch([s]))
    assert_same({d: (out[d][0].reshape(s.n, s.t), out[d][1].reshape(s.n, s.t)) for d in DIRS},
                reference(s, parse_variant("streamsdiagnoser")), ENGINE.name)


@settings(max_examples=200, deadline=None)
@given(streams_dag(max_n=5, max_t=3), st.data())
def test_ds2_equals_its_reference_on_random_graphs_and_metrics(s, data):
    ops = ["o0", "o1", "o2", "o3"]
    ends = {m: (data.draw(st.sampled_from(ops)), data.draw(st.sampled_from(ops))) for m in s.modules}
    params = {"min_ms": data.draw(st.sampled_from([10.0, 100.0])), "ratio": data.draw(st.sampled_from([1.0, 2.0]))}
    v = parse_variant("ds2:" + ",".join(f"{k}={x:g}" for k, x in params.items()))
    run_variant(v, s, _random_rows(s, data, ops, records=True), ends, ref_ds2)


def test_ds2_the_stopped_throttle_is_the_bottleneck_the_idle_barrier_is_not():
    s = stretch(BARRIER, [PHASE1, PHASE1, PHASE1])
    cum = {"f": lambda k: (100 * k, 100 * k), "t1": lambda k: (0, 0), "s": lambda k: (0, 100 * k),
           "p3": lambda k: (50 * k, 50 * k), "t2": lambda k: (50 * k, 50 * k), "bar": lambda k: (0, 0)}
    # seq 1: f still sends (not back-pressured); seq 2: f back-pressured all the time (it offers without bound)
    rows = barrier_rows([0, 1], {"t1": (990, 0), "f": (20, 0), "p3": (20, 0), "t2": (20, 0), "s": (5, 0)}, cum)
    rows += barrier_rows([2], {"t1": (990, 0), "f": (0, 1000), "s": (0, 1000), "bar": (0, 0)},
                         {**cum, "f": lambda k: (100, 100)})
    got = run_variant(DS2, s, rows, ENDS, ref_ds2)
    assert got["f:out0>t1:in0"][1:] == ["STALLED", "STALLED"]          # λp 0 against 100, then against ∞
    assert got["t2:out0>bar:in1"] == got["p3:out0>bar:in2"] == ["DONTCARE"] * 3   # the barrier: no useful time
    assert got["f:out0>p3:in0"][1] == "DONTCARE"                        # p3: 2,500 per busy second >= 100
    # a slow throttle (rate 1: one tuple a busy second against 100 offered) is a bottleneck too: DS2's reading
    slow = barrier_rows([0, 1], {"t1": (1000, 0), "f": (20, 0), "s": (5, 0)}, {**cum, "t1": lambda k: (k, k)})
    assert run_variant(DS2, s, slow, ENDS, ref_ds2)["f:out0>t1:in0"][1] == "STALLED"


def engine_run() -> StreamsRun:
    """The barrier graph as a run: t1 stops at 3.5 s, t2 at 5.5 s, both read again at 8.5 s; the engine's
    cumulative times and records as the collector writes them."""
    r = StreamsRun(BARRIER, experiment="mergetreebarrier")
    flow = {c: (10, 10) for c in BARRIER.conns}
    r.step(flow, 3)
    r.step(PHASE1, 2)
    r.step(PHASE2, 3)
    r.step(flow, 3)
    r.fault("throttle", "t1", start=3.5, end=8.5, rate=0)
    r.fault("throttle", "t2", start=5.5, end=8.5, rate=0)
    acc = {op: [0.0, 0.0, 0.0] for op in BARRIER.operators}
    rec = {op: [0, 0] for op in BARRIER.operators}
    for seq in range(r.n_snapshots):
        for op in BARRIER.operators:
            state = dict(STOPPED, t2=(20, 0)) if 4 <= seq <= 5 else STOPPED if 6 <= seq <= 8 else {}
            b, p = state.get(op, (20, 0))
            acc[op] = [acc[op][0] + b, acc[op][1] + p, acc[op][2] + 1000 - b - p]
            moved = 0 if (op in state and state[op][0] > 900) or op == "bar" and 4 <= seq <= 8 else 10
            rec[op] = [rec[op][0] + moved, rec[op][1] + moved]
            r.task(seq, op, busy=b, backpressured=p, idle=1000 - b - p, acc=tuple(acc[op]), records=tuple(rec[op]))
    return r


def test_live_equals_offline_for_the_engine_variants(tmp_path):
    src = engine_run().write(tmp_path / "src")
    for k, variant in enumerate(("streamsdiagnoser:engine=on", "ds2", "flink-backpressure")):
        off = offline(src, variant)
        assert any(pos for cells in off.values() for _, pos in cells.values())   # something to agree on
        engine = grow_and_watch(src, tmp_path / f"live{k}", 2, variant)
        assert differences(engine.history, off) == []


def test_engine_on_on_a_run_finds_both_throttles(tmp_path):
    src = engine_run().write(tmp_path / "src")
    off = offline(src, "streamsdiagnoser:engine=on")
    ids = {c: i + 1 for i, c in enumerate(BARRIER.conns)}
    stalled = {c for cells in off.values() for (m, d), (_, pos) in cells.items() if pos
               for c, i in ids.items() if i == m}
    assert stalled == {"f:out0>t1:in0", "f:out0>t2:in0"}
    assert STALLED == LABELS.index("STALLED")
