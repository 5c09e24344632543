"""Stretches and counter deltas (analysis.model.stretches): run.db (stretches, deltas, thesis 3.4 invalid mask) and JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.diagnose import diagnose_run
from analysis.model.deltas import series_deltas
from analysis.model.stretches import load_stretches, read_json, stretch_from_json
from rundir.errors import UserError
from tests.support.rundb import write_run


@pytest.fixture
def small_run(tmp_path):
    """app 1 -> socket 2 -> tcp 3 -> ipeth 4 throughout; socket 5 -> tcp 6 (also under app 1, over
    ipeth 4) from seq 3 until seq 6."""
    modules = {1: ("app", 0, None), 2: ("socket", 0, None), 3: ("tcp", 0, None), 4: ("ipeth", 0, None),
               5: ("socket", 3, 6), 6: ("tcp", 3, 6)}
    edges = [(1, 2, 0, None), (2, 3, 0, None), (3, 4, 0, None), (1, 5, 3, 6), (5, 6, 3, 6), (6, 4, 3, 6)]
    n = 8
    z = [(0, 0.0, None, 0)] * n
    c = {(m, d): list(z) for m in (1, 2) for d in ("in", "out")}
    c |= {(m, d): [(0, None, 0, 0)] * n for m in (3,) for d in ("in", "out")}
    c |= {(4, d): [(10**9 + 7 * s, None, None, 0) for s in range(n)] for d in ("in", "out")}
    # socket 2 inbound: read low once at seq 3 (10 -> 8 -> 15)
    c[(2, "in")] = [(v, 1.0 * s, None, 0) for s, v in enumerate([0, 5, 10, 8, 15, 20, 20, 20])]
    # tcp 3 inbound: a spurious high value at seq 2 (10 -> 100 -> 20 -> 25)
    c[(3, "in")] = [(v, None, q, 0) for v, q in zip([0, 10, 100, 20, 25, 30, 30, 30], [0, 0, 5, 0, 0, 9, 0, 0], strict=True)]
    # app 1 inbound: wait_ms goes backwards at seq 4
    c[(1, "in")] = [(s, w, None, 0) for s, w in enumerate([0, 1, 2, 3, 2.5, 4, 5, 6])]
    # tcp 3 outbound: no row at seq 5
    c[(3, "out")][5] = None
    # the new connection: counters start at zero when it is created
    c |= {(5, d): [None] * 3 + [(4 + s, 2.0 * s, None, 0) for s in range(3)] + [None] * 2 for d in ("in", "out")}
    c |= {(6, d): [None] * 3 + [(6 + s, None, 1, s) for s in range(3)] + [None] * 2 for d in ("in", "out")}
    return write_run(tmp_path / "run", c, modules, edges, n)


def test_stretches_follow_graph_changes(small_run):
    run = load_stretches(small_run)
    assert [list(st.seqs) for st in run.stretches] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [st.modules for st in run.stretches] == [[1, 2, 3, 4], [1, 2, 3, 4, 5, 6], [1, 2, 3, 4]]
    st = run.stretches[1]
    assert st.kinds == ["app", "socket", "tcp", "ipeth", "socket", "tcp"]
    assert st.edges == [(0, 1), (0, 4), (1, 2), (2, 3), (4, 5), (5, 3)]
    assert run.module_kind[4] == "ipeth" and run.module_name[5] == "socket5"
    assert list(run.seqs) == list(range(8))


def _series(run, module, d, field):
    vals = {}
    for st in run.stretches:
        if module in st.modules:
            i = st.modules.index(module)
            for t, s in enumerate(st.seqs):
                vals[int(s)] = getattr(st.counters[d], field)[i, t]
    return [vals[s] for s in sorted(vals)]


def test_deltas_and_the_thesis_3_4_rule(small_run):
    run = load_stretches(small_run)
    # Decrease, then recovery: seq 3 discarded, seq 4 measured against seq 2.
    assert _series(run, 2, "in", "tm")[1:] == [5, 5, 0, 5, 5, 0, 0]
    assert _series(run, 2, "in", "invalid") == [True, False, False, True, False, False, False, False]
    # Spurious increase at seq 2: seq 3 lower (discarded), seq 4 still lower than seq 2 -> seq 2 was
    # the bad one: discarded too, and seq 4 is measured from seq 3.
    assert _series(run, 3, "in", "invalid") == [True, False, True, True, False, False, False, False]
    assert _series(run, 3, "in", "tm")[4:] == [5, 5, 0, 0]
    # A backwards wait counter invalidates too.
    assert _series(run, 1, "in", "invalid")[3:6] == [False, True, False]
    assert _series(run, 1, "in", "wait")[5] == pytest.approx(4 - 3)
    # queued is the current value, not a delta; NULL = unsupported.
    assert _series(run, 3, "in", "queued") == [0, 0, 5, 0, 0, 9, 0, 0]
    assert all(_series(run, 3, "in", "has_queue")) and not any(_series(run, 2, "in", "has_queue"))
    assert not any(_series(run, 3, "in", "has_wait")) and all(_series(run, 2, "in", "has_wait"))
    # The interface: its counters predate the run; deltas only.
    assert _series(run, 4, "out", "tm")[1:] == [7] * 7
    assert _series(run, 4, "out", "invalid") == [True] + [False] * 7
    # A connection born mid-run counts from zero.
    assert _series(run, 5, "in", "tm") == [4, 1, 1] and not any(_series(run, 5, "in", "invalid"))
    assert _series(run, 6, "out", "errors") == [0, 1, 1]
    # A missing row (format 2) means the values did not change: carried forward, a valid zero delta.
    assert not _series(run, 3, "out", "invalid")[5] and _series(run, 3, "out", "tm")[5] == 0


def test_series_deltas_applies_thesis_3_4_to_raw_counters():
    """The rule lives here only (the collector stores counters as read; tests/test_collector.py
    checks that end to end): one dip is discarded, a second lower value shows the higher one before
    was spurious; a wait_ms a hair low (within 0.05 ms, also several in a row) carries the previous
    value instead, and never across modules."""
    def rows(*series):
        mod, vals = [], []
        for m, (msgs, wait) in enumerate(series):
            mod += [m] * len(msgs)
            vals += [(t, w, 0, 0) for t, w in zip(msgs, wait, strict=True)]
        vals = np.array(vals, dtype=float)
        has = np.ones_like(vals, dtype=bool)
        has[:, 2] = False
        mod = np.array(mod)
        return series_deltas(mod, vals, has, np.ones(len(mod), dtype=bool), np.zeros(len(mod), dtype=bool))

    delta, invalid = rows(([5, 9, 7, 8, 10, 12], [1.0, 2.0, 2.5, 3.0, 3.5, 4.0]))
    assert invalid.tolist() == [False, True, True, False, False, False]
    assert delta[3:, 0].tolist() == [1, 2, 2] and delta[3:, 1].tolist() == pytest.approx([0.5, 0.5, 0.5])
    delta, invalid = rows(([1, 2, 3, 4, 5], [1.0, 0.98, 0.99, 0.96, 1.5]),   # jitter: not an event
                          ([1, 2, 3], [1.0, 0.9, 1.5]),                       # 0.1 ms lower: it is
                          ([0, 1], [0.97, 1.0]))                              # a new module: from zero
    assert not invalid[:5].any() and delta[:5, 1].tolist() == pytest.approx([1.0, 0, 0, 0, 0.5])
    assert invalid[5:8].tolist() == [False, True, False]
    assert not invalid[8:].any() and delta[8:, 1].tolist() == pytest.approx([0.97, 0.03])


def test_diagnose_run_frame(small_run):
    frame = diagnose_run(small_run, ["flowdiagnoser", "nest-cf", "flowdiagnoser:confirm=2"])
    assert list(frame.columns) == ["variant", "dir", "module", "kind", "seq", "label", "cf", "positive", "invalid"]
    cells = 4 * 3 + 6 * 3 + 4 * 2
    assert len(frame) == 3 * 2 * cells
    fd = frame[frame["variant"] == "flowdiagnoser:theta=2"]
    cf = frame[frame["variant"] == "nest-cf"]
    assert fd["cf"].isna().all() and fd["label"].notna().all()
    assert cf["label"].isna().all() and cf["cf"].between(-1, 1).all()
    row = fd[(fd["module"] == 2) & (fd["dir"] == "in") & (fd["seq"] == 3)].iloc[0]
    assert row["invalid"] and row["kind"] == "socket"
    # Socket 2 never writes: STALLED outbound throughout; confirm=2 needs two in a row, and the
    # streak runs on across the graph changes at seq 3 and 6.
    s2 = fd[(fd["module"] == 2) & (fd["dir"] == "out")].sort_values("seq")
    assert (s2["label"] == "STALLED").all()
    c2 = frame[(frame["variant"] == "flowdiagnoser:theta=2,confirm=2") & (frame["module"] == 2)
               & (frame["dir"] == "out")].sort_values("seq")
    assert c2["positive"].tolist() == [False] + [True] * 7


def test_load_run_refuses_a_directory_without_run_db(tmp_path):
    with pytest.raises(UserError, match="no run.db"):
        load_stretches(tmp_path)


# ------------------------------------------------------------------------ JSON


def doc(**over):
    d = {"modules": [{"id": "a", "kind": "app"}, {"id": "s", "kind": "socket", "parents": ["a"]},
                     {"id": "t", "kind": "tcp", "parents": ["s"]}],
         "snapshots": [{"in": {"s": {"total_msgs": 0, "wait_ms": 5}, "t": {"total_msgs": 2, "queued": 3}}}]}
    d.update(over)
    return d


def test_json_counters():
    st = stretch_from_json(doc())
    assert st.modules == ["a", "s", "t"] and st.edges == [(0, 1), (1, 2)]
    c = st.counters["in"]
    assert c.tm[:, 0].tolist() == [0, 0, 2]
    assert c.has_wait[:, 0].tolist() == [False, True, False]   # 'a' absent: unsupported extras
    assert c.queued[2, 0] == 3 and c.has_queue[:, 0].tolist() == [False, False, True]
    out = st.counters["out"]  # no 'out' at all: every module inactive
    assert not out.tm.any() and not out.has_wait.any() and not out.invalid.any()


@pytest.mark.parametrize("bad, message", [
    ([], "expected a JSON object"),
    ({"modules": []}, "'modules' must be a non-empty list"),
    (doc(modules=[{"id": "a", "kind": "router"}]), "modules[0]: kind must be one of"),
    (doc(modules=[{"id": "a", "kind": "app"}, {"id": "a", "kind": "app"}]), "duplicate module id"),
    (doc(modules=[{"id": "s", "kind": "socket", "parents": ["nope"]}]), 'modules[0].parents: unknown module "nope"'),
    (doc(snapshots=[]), "'snapshots' must be a non-empty list"),
    (doc(snapshots=[{"in": {"zz": {"total_msgs": 1}}}]), "snapshots[0].in.zz: unknown module"),
    (doc(snapshots=[{"up": {}}]), 'unknown direction "up"'),
    (doc(snapshots=[{"in": {"s": {"total_msgs": -1}}}]), "snapshots[0].in.s.total_msgs: expected a number >= 0"),
    (doc(snapshots=[{"in": {"s": {"total_msgs": True}}}]), "expected a number >= 0 or null, got true"),
    (doc(snapshots=[{"in": {"s": {"msgs": 1}}}]), 'unknown counter "msgs"'),
])
def test_json_errors_name_the_place(bad, message):
    with pytest.raises(UserError) as e:
        stretch_from_json(bad, "f.json")
    assert message in str(e.value) and str(e.value).startswith("f.json")
    assert "\n" not in str(e.value)


def test_read_json_reports_line_and_column(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"modules": [\n  {"id": "a",}\n]}')
    with pytest.raises(UserError, match=r"bad.json: invalid JSON at line 2 column"):
        read_json(p)
    with pytest.raises(UserError, match="cannot read"):
        read_json(tmp_path / "missing.json")
    p.write_text(json.dumps(doc()))
    assert read_json(p) == doc()


def test_null_counter_is_unsupported():
    st = stretch_from_json(doc(snapshots=[{"in": {"s": {"total_msgs": 0, "wait_ms": None}}}]))
    assert not st.counters["in"].has_wait[1, 0]
    assert np.array_equal(st.seqs, [0])


def test_a_run_without_counters_diagnoses_to_nothing(tmp_path):
    import time

    from rundir.db import create_db

    db = create_db(tmp_path / "run.db")
    db.executemany("INSERT INTO snapshots VALUES (?,?,?)", [(i, i * 0.1, time.time()) for i in range(3)])
    db.commit()
    frame = diagnose_run(tmp_path, ["flowdiagnoser", "nest-cf"])
    assert len(frame) == 0 and list(frame.columns)[:3] == ["variant", "dir", "module"]
