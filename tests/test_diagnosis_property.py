"""Property tests: the vectorised variants agree exactly with the per-snapshot references."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from analysis.diagnose import diagnose_stretches
from analysis.model.stretches import DIRS, KINDS, Counters, Stretch
from analysis.variants import Variant, systems
from analysis.variants.nest_cf import combine
from tests.support.reference import assert_same, parallel_combine, ref_flowdiagnoser, reference


def _counters(draw, n, t, realistic_kinds=None):
    def arr(values, dtype=float):
        return draw(arrays(dtype, (n, t), elements=st.sampled_from(values)))

    c = Counters(
        tm=arr([0.0, 0.0, 1.0, 4.0]),
        wait=arr([0.0, 0.0, 5.0]),
        has_wait=arr([False, True], bool),
        queued=arr([0.0, 0.0, 2.0]),
        has_queue=arr([False, True], bool),
        errors=arr([0.0, 0.0, 1.0]),
        has_errors=arr([False, True], bool),
        invalid=np.zeros((n, t), dtype=bool),
    )
    if realistic_kinds is not None:  # the counters each kind has on Linux (DESIGN.md)
        k = np.array(realistic_kinds)[:, None]
        c.has_wait[:] = np.isin(k, ["app", "socket"])
        c.has_queue[:] = k == "tcp"
        c.has_errors[:] = True
    return c


@st.composite
def any_graph(draw, max_n=7, max_t=5):
    """Arbitrary graphs, cycles and self-loops excluded only by chance."""
    n = draw(st.integers(1, max_n))
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=n, max_size=n))
    pairs = [(p, c) for p in range(n) for c in range(n) if p != c]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=2 * n)) if pairs else []
    t = draw(st.integers(1, max_t))
    counters = {d: _counters(draw, n, t) for d in DIRS}
    # Any module without a parent here may be detached (a parent elsewhere in the run).
    detached = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return Stretch(list(range(n)), kinds, edges, np.arange(t), counters, detached)


@st.composite
def ns_graph(draw, max_t=5):
    """NS-like graphs: apps -> sockets -> tcp -> ipeth (or ip -> eth), as the collector builds them.

    A connection's TCP module may be under its socket, detached (its socket not reported yet or
    closed already: with or without the socket module, no socket -> tcp edge), or a root for the
    whole run (no interceptor). An interface with no connection above it may be detached too."""
    kinds, edges, detached = [], [], set()
    lower = []
    for _ in range(draw(st.integers(1, 2))):
        lower.append(len(kinds))
        kinds.append(draw(st.sampled_from(["ipeth", "ip"])))
        if kinds[-1] == "ip":
            kinds.append("eth")
            edges.append((lower[-1], len(kinds) - 1))
    for _ in range(draw(st.integers(1, 3))):
        app = len(kinds)
        kinds.append("app")
        for _ in range(draw(st.integers(0, 3))):
            how = draw(st.sampled_from(["attached", "attached", "detached", "no socket", "root"]))
            if how != "no socket" and how != "root":
                kinds.append("socket")
                edges.append((app, len(kinds) - 1))
                if how == "attached":
                    edges.append((len(kinds) - 1, len(kinds)))
            tcp = len(kinds)
            kinds.append("tcp")
            edges.append((tcp, draw(st.sampled_from(lower))))
            if how in ("detached", "no socket"):
                detached.add(tcp)
    for m in lower:
        if draw(st.booleans()):
            detached.add(m)  # cleared by Stretch where a connection is above it
    n, t = len(kinds), draw(st.integers(1, max_t))
    realistic = draw(st.booleans())
    counters = {d: _counters(draw, n, t, kinds if realistic else None) for d in DIRS}
    return Stretch(list(range(n)), kinds, edges, np.arange(t), counters, [m in detached for m in range(n)])


@st.composite
def variant(draw):
    name = draw(st.sampled_from(sorted(systems())))
    system = systems()[name]
    choices = {
        "theta": st.integers(1, 4), "confirm": st.integers(1, 3), "threshold": st.sampled_from([0.0, 0.3, -0.5]),
    }
    params = {p.name: draw(choices.get(p.name, st.booleans())) for p in system.params}
    return Variant(system, params)


def _assert_same(stretch, v):
    (fast,) = diagnose_stretches([stretch], [v])
    assert_same(fast.results[v.name], reference(stretch, v), v.name)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(any_graph(max_n=5, max_t=3), ns_graph(max_t=3)), min_size=2, max_size=5), variant())
def test_many_stretches_at_once_equal_each_alone(stretches, v):
    """A batch of stretches (one flat array of cells) gives what each stretch gives alone."""
    for k, stretch in enumerate(stretches):  # far apart in time: no streak runs from one to the next
        stretch.seqs = stretch.seqs + 100 * k
    together = diagnose_stretches(stretches, [v])
    for sd in together:
        (alone,) = diagnose_stretches([sd.stretch], [v])
        for d in DIRS:
            np.testing.assert_array_equal(sd.results[v.name][d][0], alone.results[v.name][d][0])
            np.testing.assert_array_equal(sd.results[v.name][d][1], alone.results[v.name][d][1])
        assert_same(sd.results[v.name], reference(sd.stretch, v), v.name)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(any_graph(max_n=6, max_t=3), ns_graph(max_t=3)), min_size=1, max_size=5))
def test_the_batch_structure_equals_shape_stretch_by_stretch(stretches):
    """flowdiagnoser builds the analysis graphs of all a batch's stretches at once (Kahn's algorithm
    over all of them): the same levels, application edges, roots with work, edges without a level
    and cyclic stretches as `shape` gives one stretch at a time (how it was built before)."""
    from analysis.model.batch import Batch
    from analysis.variants import flowdiagnoser as fd

    batch = Batch(stretches)
    cells = fd._make_cells(batch)
    shapes = [fd.shape(s) for s in stretches]
    none = np.zeros((0, 2), dtype=np.int64)
    top = max((len(sh.level_edges) for sh in shapes), default=0)
    want = [batch.edge_cells([sh.level_edges[lv] if lv < len(sh.level_edges) else none for sh in shapes])
            for lv in range(top)]
    assert len(cells.levels) == len(want)
    for got, exp in [*zip(cells.levels, want, strict=True),
                     ((cells.app_p, cells.app_c), batch.edge_cells([sh.app_edges for sh in shapes])),
                     (batch.stretch_edge_cells(*cells.unleveled), batch.edge_cells([sh.cycle_edges for sh in shapes]))]:
        np.testing.assert_array_equal(got[0], exp[0])
        np.testing.assert_array_equal(got[1], exp[1])
    np.testing.assert_array_equal(cells.derived, np.flatnonzero(batch.per_module([sh.derived_mask for sh in shapes],
                                                                                  dtype=bool)))
    np.testing.assert_array_equal(cells.root_work, batch.per_module(
        [sh.root & ~fd.no_assumed_work(s, sh.not_socket) for sh, s in zip(shapes, stretches, strict=True)], dtype=bool))
    assert sorted(cells.cyclic) == [k for k, sh in enumerate(shapes) if sh.cyclic]


CFS = [-1.0, -0.8, -0.6, -0.4, 0.0, 0.4, 0.6, 0.8, 1.0]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(CFS), max_size=12), st.randoms())
def test_parallel_combine_fold_is_a_sum_in_any_order(values, rnd):
    """Folding with Figure 3 step by step, in any order, equals the one-sum form of the fast path."""
    seq = 0.0
    for v in values:
        seq = parallel_combine(seq, v)
    shuffled = values[:]
    rnd.shuffle(shuffled)
    again = 0.0
    for v in shuffled:
        again = parallel_combine(again, v)
    seq, again = (0.0 if x != x else x for x in (seq, again))
    assert abs(seq - again) < 1e-12
    fast = combine(np.array(values), np.zeros(len(values), dtype=np.int64), 1)[0]
    assert abs(fast - seq) < 1e-12


@settings(max_examples=300, deadline=None)
@given(any_graph(), variant())
def test_fast_path_equals_reference_on_any_graph(stretch, v):
    _assert_same(stretch, v)


@settings(max_examples=300, deadline=None)
@given(ns_graph(), variant())
def test_fast_path_equals_reference_on_ns_graphs(stretch, v):
    _assert_same(stretch, v)


@settings(max_examples=200, deadline=None)
@given(st.one_of(any_graph(), ns_graph()), st.booleans())
def test_theta_1_is_the_plain_chapter_2_algorithm(stretch, queues):
    """With Θ = 1 the NeST rule reduces to Algorithms 1-5 with 'a parent is BLOCKED' read literally."""
    got = ref_flowdiagnoser(stretch, theta=1, queues=queues)
    literal = ref_flowdiagnoser(stretch, theta=1, queues=queues, literal=True)
    for d in DIRS:
        np.testing.assert_array_equal(got[d][0], literal[d][0])


@settings(max_examples=100, deadline=None)
@given(ns_graph(), st.integers(1, 4))
def test_results_are_per_snapshot(stretch, theta):
    """Diagnosing a stretch at once equals diagnosing each snapshot on its own (no leakage in time)."""
    v = Variant(systems()["flowdiagnoser"], {"theta": theta, "queues": True, "confirm": 1})
    (whole,) = diagnose_stretches([stretch], [v])
    for t in range(stretch.t):
        (one,) = diagnose_stretches([stretch.take([t])], [v])
        for d in DIRS:
            np.testing.assert_array_equal(whole.results[v.name][d][0][:, [t]], one.results[v.name][d][0])
