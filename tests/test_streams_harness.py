"""Streams experiments, the lab's side (docs/streams.md): graph files, the spec, the counter recovery
of Appendix A and 4.3.2, and a small graph run for real on Flink."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from harness.streams.graph import Connection, load_graph
from harness.streams.recovery import Recovery
from harness.studies import load_spec
from harness.suite import load_suite
from harness.yamlload import SpecError
from tests.support.env import REPO, VENV_BIN, write

GRAPHS = REPO / "graphs"


# ------------------------------------------------------------------ graphs


@pytest.mark.parametrize("name, pes, conns", [
    ("complextree", 19, 18), ("complextreemux", 22, 21), ("mergetree", 8, 9), ("mergetreemux", 9, 10),
    ("mergetreebarrier", 8, 9), ("mergetreebarriermux", 8, 9)])
def test_the_six_thesis_graphs_have_their_pe_counts(name, pes, conns):
    g = load_graph(GRAPHS / f"{name}.yaml")
    assert (g.name, len(g.pes), len(g.connections)) == (name, pes, conns)   # thesis 4.6.1's PE counts
    order = list(g.pes)
    assert all(order.index(c.src) < order.index(c.dst) for c in g.connections)   # upstream first


def test_fan_out_and_fan_in_become_connections_and_pes_become_edges():
    g = load_graph(GRAPHS / "mergetree.yaml")
    into_merge = g.into("merge")
    assert [c.name for c in into_merge] == ["n10:out0>merge:in0", "n11:out0>merge:in0", "n12:out0>merge:in0"]
    assert {c.name for c in g.connections if c.src == "split"} == {
        "split:out0>n10:in0", "split:out0>n11:in0", "split:out0>n12:in0"}
    names = [c.name for c in g.connections]
    edges = {(names[p], names[c]) for p, c in g.module_edges()}
    assert ("split:out0>n10:in0", "n10:out0>merge:in0") in edges          # PE n10 joins them
    assert ("n10:out0>merge:in0", "merge:out0>sink:in0") in edges
    assert ("split:out0>n10:in0", "n11:out0>merge:in0") not in edges
    text = g.job_text(100, 64, Path("/c"), 4)
    assert "op merge pass 1 1" in text and "conn n10 0 merge 0" in text and "op sink throttle 1 0" in text


@pytest.mark.parametrize("ops, line, words", [
    ("  a: {kind: beacon}\n  b: {kind: sink, in: [x]}\n", 4, "'x' is not an operator"),
    ("  a: {kind: beacon}\n  b: {kind: sink, in: [a.out1]}\n", 4, "no out1"),
    ("  a: {kind: beacon}\n  b: {kind: pass, in: [a]}\n", 4, "b.out0 feeds no operator"),
    ("  a: {kind: beacon}\n  b: {kind: barrier, in: [a]}\n  s: {kind: sink, in: [b]}\n", 4, "at least two"),
    ("  a: {kind: beacon}\n  b: {kind: pass, in: [[a, c]]}\n  c: {kind: pass, in: [b]}\n"
     "  s: {kind: sink, in: [c]}\n", 3, "cycle"),
    ("  a: {kind: beacon}\n  b: {kind: sink, in: [a], outputs: 1}\n", 4, "a sink has no output ports"),
    ("  a: {kind: beacon}\n  b: {kind: fountain, in: [a]}\n", 4, "kind"),
])
def test_a_bad_graph_is_one_line_naming_file_line_and_field(tmp_path, ops, line, words):
    path = write(tmp_path, "g.yaml", "graph: g\noperators:\n" + ops)
    with pytest.raises(SpecError) as e:
        load_graph(path)
    text = str(e.value)
    assert text.startswith(f"{path}:") and words in text and "\n" not in text
    if "cycle" not in words:
        assert f":{line}:" in text


# ------------------------------------------------------------------ the spec


def _spec(tmp_path, faults: str, extra: str = "") -> Path:
    return write(tmp_path, "s.yaml", f"name: s\ngraph: {GRAPHS / 'mergetree.yaml'}\nduration: 60s\n{extra}"
                                     f"faults:\n{faults}")


def test_a_streams_spec_plans_its_settings_in_time_order(tmp_path):
    exp = load_spec(_spec(tmp_path, "  - {kind: throttle, operator: n10, rate: 0, schedule: {at: [30s, 5s], duration: 5s}}\n"
                                    "  - {kind: dropper, operator: split, schedule: {at: [20s], duration: 10s}}\n",
                          "rate: [100, 1000]\nrepetitions: 2\n"))
    assert [(w.spec_index, w.start, w.duration) for w in exp.plan()] == [(0, 5, 5), (1, 20, 10), (0, 30, 5)]
    assert (exp.rate_for(0), exp.rate_for(1)) == (100, 1000)
    assert exp.topology.backend == "flink" and exp.digest(0) != exp.digest(1)


@pytest.mark.parametrize("fault, words", [
    ("{kind: throttle, operator: nope, rate: 0, schedule: {at: [1s], duration: 1s}}", "no operator 'nope'"),
    ("{kind: throttle, operator: n11, rate: 0, schedule: {at: [1s], duration: 1s}}", "n11 is a pass, not a throttle"),
    ("{kind: throttle, operator: n10, schedule: {at: [1s], duration: 1s}}", "needs `rate`"),
    ("{kind: dropper, operator: split, rate: 3, schedule: {at: [1s], duration: 1s}}", "takes no rate"),
    ("{kind: throttle, operator: n10, rate: 0, schedule: {at: [58s], duration: 5s}}", "after the run"),
    ("{kind: throttle, operator: n10, rate: 0, schedule: {at: [1s, 3s], duration: 5s}}", "overlaps"),
])
def test_a_bad_setting_is_refused_before_anything_runs(tmp_path, fault, words):
    with pytest.raises(SpecError) as e:
        load_spec(_spec(tmp_path, f"  - {fault}\n"))
    assert words in str(e.value) and ":5:" in str(e.value)


def test_the_suite_lists_the_six_graphs_at_two_rates():
    suite = load_suite(REPO / "experiments" / "streams-4.3.yaml")
    assert [e.spec.name for e in suite.experiments] == [
        "complextree", "complextreemux", "mergetree", "mergetreemux", "mergetreebarrier", "mergetreebarriermux"]
    assert len(suite.planned()) == 12
    assert {e.rate_for(0) for e in suite.experiments} == {100} and {e.rate_for(1) for e in suite.experiments} == {1000}


def _stopped_together(exp) -> bool:
    """Do n10 and n12 have overlapping rate-0 windows in this experiment?"""
    def windows(op):
        return [(a, a + f.schedule.duration) for f in exp.spec.faults if f.operator == op and f.rate == 0
                for a in f.schedule.at]
    return any(a < d and c < b for a, b in windows("n10") for c, d in windows("n12"))


def test_the_two_throttles_above_the_fan_in_stop_together_only_in_the_barrier_graphs():
    """4.6.3.1 and 5.3.2.2 (both throttles at 0: the Barrier); Table 4.3's 0 FN on the merge graphs."""
    suite = load_suite(REPO / "experiments" / "streams-4.3.yaml")
    together = {e.spec.name: _stopped_together(e) for e in suite.experiments if e.spec.name.startswith("merge")}
    assert together == {"mergetree": False, "mergetreemux": False, "mergetreebarrier": True, "mergetreebarriermux": True}
    n12 = [e for e in suite.experiments if e.spec.name == "mergetree"][0]
    assert sum(len(f.schedule.at) for f in n12.spec.faults if f.operator == "n12" and f.rate == 0) == 2
    extra = load_suite(REPO / "experiments" / "streams-overlap.yaml")
    assert {e.spec.name: _stopped_together(e) for e in extra.experiments} == {
        "mergetree-overlap": True, "mergetreemux-overlap": True}
    full = load_suite(REPO / "experiments" / "streams-fullrate.yaml")
    assert {e.rate_for(0) for e in full.experiments} == {0}
    assert [e.spec.faults for e in full.experiments] == [e.spec.faults for e in suite.experiments]


# ------------------------------------------------------------------ counter recovery (Appendix A, 4.3.2)


def _conns(*names: str) -> list[Connection]:
    out = []
    for n in names:
        src, dst = n.split(">")
        out.append(Connection(src.split(":")[0], int(src.split("out")[1]), dst.split(":")[0], int(dst.split("in")[1])))
    return out


def test_one_to_one_needs_no_normalisation():
    r = Recovery(_conns("a:out0>b:in0"))
    got = r.update({("a", 0): 10}, {("b", 0): 7})
    assert (got["a:out0>b:in0"].total_msgs, got["a:out0>b:in0"].queued) == (7, 3)


def test_fan_out_each_connection_gets_every_tuple_flink_counts_once_per_port():
    r = Recovery(_conns("a:out0>b:in0", "a:out0>c:in0"))
    got = r.update({("a", 0): 10}, {("b", 0): 10, ("c", 0): 4})
    assert (got["a:out0>b:in0"].queued, got["a:out0>c:in0"].queued) == (0, 6)


def test_fan_out_streams_counting_is_divided_by_the_connections():
    # Streams' nSubmitted grows by the number of connections per tuple (Appendix A, case 2).
    r = Recovery(_conns("a:out0>b:in0", "a:out0>c:in0", "a:out0>d:in0"), per_connection=True)
    r.update({("a", 0): 30}, {("b", 0): 10, ("c", 0): 10, ("d", 0): 10})
    got = r.update({("a", 0): 60}, {("b", 0): 20, ("c", 0): 12, ("d", 0): 20})
    assert {k: v.queued for k, v in got.items()} == {"a:out0>b:in0": 0, "a:out0>c:in0": 8, "a:out0>d:in0": 0}


def test_fan_in_sums_what_was_submitted_to_the_port():
    # Appendix A case 3: nSubmittedToInputPort; every connection into the port shares its counters.
    r = Recovery(_conns("a:out0>m:in0", "b:out0>m:in0"))
    got = r.update({("a", 0): 5, ("b", 0): 7}, {("m", 0): 9})
    assert {(v.total_msgs, v.queued) for v in got.values()} == {(9, 3)}


def test_a_negative_queue_is_kept_and_carried_into_the_next_snapshot():
    r = Recovery(_conns("a:out0>b:in0"))
    first = r.update({("a", 0): 10}, {("b", 0): 13})["a:out0>b:in0"]
    assert (first.total_msgs, first.queued) == (13, -3)
    second = r.update({("a", 0): 20}, {("b", 0): 13})["a:out0>b:in0"]
    assert (second.total_msgs, second.queued) == (16, 7)        # active (+3) in the next snapshot
    third = r.update({("a", 0): 20}, {("b", 0): 13})["a:out0>b:in0"]
    assert (third.total_msgs, third.queued) == (16, 7)          # carried once, not again


def test_a_restarted_counter_is_rebaselined():
    r = Recovery(_conns("a:out0>b:in0"))
    r.update({("a", 0): 100}, {("b", 0): 90})
    got = r.update({("a", 0): 5}, {("b", 0): 3})["a:out0>b:in0"]   # both tasks restarted from 0
    assert (got.total_msgs, got.queued, r.rebaselined) == (93, 12, 2)


# ------------------------------------------------------------------ a real run on Flink


def _flink_ready() -> bool:
    from harness.streams.cluster import FLINK_VENV, JOB_JAR

    return JOB_JAR.exists() and any(FLINK_VENV.glob("lib/python3*/site-packages/pyflink"))


@pytest.mark.slow
@pytest.mark.skipif(not _flink_ready(), reason="Flink is not set up (./scripts/setup.sh)")
def test_a_small_graph_runs_on_flink_and_a_throttle_at_zero_backs_its_input_up(tmp_path, no_leftovers):
    graph = write(tmp_path, "g.yaml", "graph: chain\noperators:\n  beacon: {kind: beacon}\n"
                                      "  t: {kind: throttle, in: [beacon]}\n  p: {kind: pass, in: [t], outputs: 2}\n"
                                      "  s1: {kind: sink, in: [p.out0]}\n  s2: {kind: sink, in: [p.out1]}\n")
    spec = write(tmp_path, "s.yaml", f"name: chain\ngraph: {graph}\nrate: 200\nduration: 14s\n"
                                     "faults:\n  - {kind: throttle, operator: t, rate: 0, schedule: {at: [4s], duration: 6s}}\n")
    from harness.runner import run_experiment

    code, runs = run_experiment(spec, tmp_path / "results")
    assert code == 0
    run = runs[0]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["backend"] == "flink" and manifest["format_version"] >= 6
    db = sqlite3.connect(run / "run.db")
    modules = dict(db.execute("SELECT name, id FROM modules WHERE kind = 'sconn'").fetchall())
    assert set(modules) == {"beacon:out0>t:in0", "t:out0>p:in0", "p:out0>s1:in0", "p:out1>s2:in0"}
    (fid, target, start, end), = db.execute("SELECT id, target_module, start, end FROM faults").fetchall()
    assert target == modules["beacon:out0>t:in0"]
    t0 = manifest["t0"]
    assert 3.9 < start - t0 < 4.5 and 9.9 < end - t0 < 10.5      # acknowledged by the PE, on our clock
    rows = db.execute("SELECT s.mono, c.total_msgs, c.queued FROM counters c JOIN snapshots s USING (seq) "
                      "WHERE c.module = ? ORDER BY s.seq", (target,)).fetchall()
    during = [(tot, q) for mono, tot, q in rows if start + 1.2 < mono < end]
    assert during and len({tot for tot, _ in during}) == 1          # t read nothing while at rate 0
    assert during[-1][1] > 200                                      # its input queue grew: backpressure
    after = [tot for mono, tot, q in rows if mono > end + 1.5]
    assert after and after[-1] > during[-1][0]                      # and it read again afterwards
    assert db.execute("SELECT count(DISTINCT operator) FROM stream_tasks").fetchone()[0] == 5
    assert db.execute("SELECT min(queued) FROM counters").fetchone()[0] > -100   # one scrape: 4.3.2 skew < 0.5 s
    pids = [p for (p,) in db.execute("SELECT pid FROM processes WHERE role = 'engine'")]
    assert len(pids) == 2 and not any(os.path.exists(f"/proc/{p}") for p in pids)
    assert not (run / "flink" / "tmp").exists()


def _start_run(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """A 60 s streams run in its own process, returned once its job is running and recorded."""
    spec = write(tmp_path, "s.yaml", f"name: killme\ngraph: {GRAPHS / 'mergetree.yaml'}\nduration: 60s\n")
    proc = subprocess.Popen([str(VENV_BIN / "run-experiment"), str(spec), "--results", str(tmp_path / "results")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        runs = list((tmp_path / "results" / "killme").glob("*/run.db"))
        if runs:
            try:
                with sqlite3.connect(f"file:{runs[0]}?mode=ro", uri=True) as db:
                    if db.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= 2:
                        return proc, runs[0].parent
            except sqlite3.OperationalError:
                pass
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("the streams run did not start recording within 90 s")


def _engine_pids(run: Path) -> list[int]:
    with sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True) as db:
        return [p for (p,) in db.execute("SELECT pid FROM processes WHERE role = 'engine'")]


@pytest.mark.slow
@pytest.mark.skipif(not _flink_ready(), reason="Flink is not set up (./scripts/setup.sh)")
def test_sigterm_stops_the_engine_and_records_an_interrupted_run(tmp_path, no_leftovers):
    proc, run = _start_run(tmp_path)
    pids = _engine_pids(run)
    assert len(pids) == 2 and all(os.path.exists(f"/proc/{p}") for p in pids)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["reason"] == "received SIGTERM"
    assert not any(os.path.exists(f"/proc/{p}") for p in pids)


@pytest.mark.slow
@pytest.mark.skipif(not _flink_ready(), reason="Flink is not set up (./scripts/setup.sh)")
def test_after_a_sigkill_cleanup_stops_the_engine_the_ledger_lists(tmp_path, no_leftovers):
    proc, run = _start_run(tmp_path)
    pids = _engine_pids(run)
    os.killpg(proc.pid, signal.SIGKILL)    # the runner and its threads; the JVMs are their own groups
    proc.wait(timeout=10)
    assert all(os.path.exists(f"/proc/{p}") for p in pids)           # left running by the dead runner
    out = subprocess.run([str(VENV_BIN / "nestlab"), "cleanup"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
        time.sleep(0.2)
    assert not any(os.path.exists(f"/proc/{p}") for p in pids)
