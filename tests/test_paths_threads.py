"""Linking at thread granularity (WAP5 2: nodes "down to single threads") and Maketrace's thread
model: thread pools, where the thread a message came in on says which message caused the next one,
and event loops, where it cannot."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.paths import linking
from analysis.paths.maketrace import maketrace, socket_events, web_service
from analysis.paths.model import COLUMNS, as_messages, has_threads
from analysis.paths.readers import read_trace_file, write_trace
from analysis.paths.reconcile import reconcile
from analysis.paths.score import score


def _trace(par: float, threads=None, seed: int = 3, duration: float = 30.0, **kw):
    return maketrace(web_service(), duration=duration, parallelism=par, seed=seed, tags=False,
                     threads=threads, **kw)


def _same(a, b, exact: bool = True) -> None:
    """The same result; exact=False: up to rounding (a CSV's 9 decimals) and the order of nodes."""
    if exact:
        assert [(p.pattern, p.count, p.raw_count, p.node_delays) for p in a.patterns] == \
            [(p.pattern, p.count, p.raw_count, p.node_delays) for p in b.patterns]
        pd.testing.assert_frame_equal(a.node_delays, b.node_delays)
        pd.testing.assert_frame_equal(a.edge_latencies, b.edge_latencies)
        return
    assert [p.pattern for p in a.patterns] == [p.pattern for p in b.patterns]
    assert [p.count for p in a.patterns] == pytest.approx([p.count for p in b.patterns], rel=1e-5)
    for f, g in ((a.node_delays, b.node_delays), (a.edge_latencies, b.edge_latencies)):
        key = [c for c in ("node", "src", "dst") if c in f]
        pd.testing.assert_frame_equal(
            f.astype({c: str for c in key}).sort_values(key).reset_index(drop=True),
            g.astype({c: str for c in key}).sort_values(key).reset_index(drop=True), rtol=1e-5)


def test_thread_model_off_changes_nothing_and_on_changes_only_the_thread_columns():
    off = _trace(4, noise=0.05, drop_rate=0.02, clock_skew=0.003)
    on = _trace(4, threads=8, noise=0.05, drop_rate=0.02, clock_skew=0.003)
    assert not has_threads(off.messages) and list(off.messages.columns) == list(COLUMNS)
    assert has_threads(on.messages)
    pd.testing.assert_frame_equal(on.messages[list(COLUMNS)], off.messages)
    assert np.array_equal(on.truth.cause, off.truth.cause)
    assert (on.messages["src_thread"] >= 0).all() and (on.messages["dst_thread"] >= 0).all()


def test_thread_pool_each_cause_arrives_on_the_sending_thread_and_event_loop_has_one_thread():
    tr = _trace(8, threads={"web1": 1, "*": 0})       # web1 an event loop, the rest unbounded pools
    m, cause = tr.messages, tr.truth.cause
    linked = np.flatnonzero(cause >= 0)
    c = cause[linked]
    assert (m["dst"].to_numpy()[c] == m["src"].to_numpy()[linked]).all()
    assert (m["dst_thread"].to_numpy()[c] == m["src_thread"].to_numpy()[linked]).all()
    web1 = m["src"] == "web1"
    assert set(m.loc[web1, "src_thread"]) == {0}
    # an unbounded pool at parallelism 8 runs several calls at once at app1
    assert m.loc[m["src"] == "app1", "src_thread"].nunique() > 1
    small = _trace(8, threads=2)
    assert small.messages["src_thread"].max() == 1 and small.messages["dst_thread"].max() == 1


def test_granularity_thread_links_what_node_granularity_cannot():
    # two threads of b serve two calls; thread 1's call arrived first, thread 2's just before
    # thread 1 sends its downstream call: per node the latest arrival (thread 2's) is taken
    rows = []
    for i in range(40):
        t = i * 1.0
        rows += [(t, t + 0.0005, "client", "b", 0, 1), (t + 0.0085, t + 0.009, "client", "b", 1, 2),
                 (t + 0.010, t + 0.0105, "b", "c", 1, 0), (t + 0.0095 + 0.010, t + 0.020, "b", "c", 2, 0)]
    m = as_messages(pd.DataFrame(rows, columns=["t_send", "t_recv", "src", "dst", "src_thread", "dst_thread"]))
    by_node = linking.infer(m, untraced="client", granularity="node", k=0)
    by_thread = linking.infer(m, untraced="client", k=0)          # auto: the trace has threads
    assert by_thread.params["granularity"] == "thread" and by_node.params["granularity"] == "node"
    assert {p.pattern for p in by_thread.patterns} == {"client>b(b>c)"}
    assert "client>b(b>c,b>c)" in {p.pattern for p in by_node.patterns}
    # b's delay: 10 ms on its own thread (thread 1: 0.5 -> 10 ms, thread 2: 9 -> 19.5 ms)
    nd = by_thread.node_delays.set_index("node")["mean_s"]
    assert nd["b"] == pytest.approx(0.010, abs=2e-4)


def test_thread_pools_reach_the_patterns_and_event_loops_do_not():
    pool = _trace(4, threads=16, duration=40)
    node = score(linking.infer(pool.messages, untraced="client", granularity="node", k=0), pool)
    thread = score(linking.infer(pool.messages, untraced="client", k=0), pool)
    assert thread["pattern_recall"] == 1.0 and thread["pattern_precision"] == 1.0
    assert thread["delay_error_pct"] < 1.0
    assert node["pattern_recall"] < 0.8 and node["delay_error_pct"] > 3 * thread["delay_error_pct"]
    loop = _trace(4, threads={"web1": 1, "web2": 1, "*": 16}, duration=40)
    looped = score(linking.infer(loop.messages, untraced="client", k=0), loop)
    assert looped["pattern_precision"] < 0.8         # web's one thread interleaves: node-like there


def test_no_thread_ids_gives_exactly_the_node_results():
    tr = _trace(2, threads=4)
    plain = tr.messages[list(COLUMNS)]
    base = linking.infer(plain, untraced="client")
    assert base.params["granularity"] == "node"
    _same(base, linking.infer(tr.messages, untraced="client", granularity="node"))
    forced = linking.infer(plain, untraced="client", granularity="thread")
    _same(base, forced)
    assert any("no thread ids" in w for w in forced.warnings)
    # all threads unknown: node granularity everywhere, the same result
    unknown = tr.messages.assign(src_thread=-1, dst_thread=-1)
    _same(base, linking.infer(unknown, untraced="client"))


def test_a_node_with_unknown_threads_falls_back_to_node():
    tr = _trace(4, threads=16)
    m = tr.messages.copy()
    app1 = (m["src"] == "app1").to_numpy()
    m.loc[app1, "src_thread"] = -1
    r = linking.infer(m, untraced="client", k=0)
    assert any("unknown thread at" in w and "app1" in w for w in r.warnings)
    # app1 now per node: some of its links go wrong at parallelism 4, the others stay right
    s = score(r, tr)
    full = score(linking.infer(tr.messages, untraced="client", k=0), tr)
    assert s["pattern_precision"] < full["pattern_precision"] == 1.0


def test_bad_granularity_is_an_error():
    with pytest.raises(ValueError, match="granularity"):
        linking.infer(_trace(1).messages, granularity="process")


def test_reconciliation_keeps_each_end_s_thread():
    tr = maketrace(web_service(), duration=15, parallelism=4, seed=5, threads={"web2": 1, "*": 4})
    msgs, warnings = reconcile(socket_events(tr, chunk=300))
    assert not warnings and has_threads(msgs) and len(msgs) == len(tr.messages)
    for side in ("src", "dst"):
        pairs = pd.DataFrame({"n": tr.messages[side].astype(str), "x": tr.messages[f"{side}_thread"],
                              "y": msgs[f"{side}_thread"]}).drop_duplicates()
        # the same threads, renumbered: one reconciled thread per true one and back
        assert pairs.groupby(["n", "x"]).size().max() == 1 and pairs.groupby(["n", "y"]).size().max() == 1
    untagged = msgs[list(COLUMNS) + ["src_thread", "dst_thread"]].assign(kind="", msg=-1)
    _same(linking.infer(tr.messages.assign(kind="", msg=-1), untraced="client"),
          linking.infer(untagged, untraced="client"), exact=False)
    # events without tids: no thread columns (today's output)
    plain, _ = reconcile(socket_events(maketrace(web_service(), duration=5, seed=5)))
    assert not has_threads(plain)


def test_trace_files_keep_threads(tmp_path):
    tr = _trace(4, threads=16, duration=10)
    write_trace(tr, tmp_path / "t.csv")
    back = read_trace_file(tmp_path / "t.csv")
    assert has_threads(back.messages)
    # a thread keeps one number whether it sends or receives
    a_ids = pd.concat([tr.messages[["src", "src_thread"]].set_axis(["n", "x"], axis=1),
                       tr.messages[["dst", "dst_thread"]].set_axis(["n", "x"], axis=1)], ignore_index=True)
    b_ids = pd.concat([back.messages["src_thread"], back.messages["dst_thread"]], ignore_index=True)
    pairs = a_ids.assign(n=a_ids["n"].astype(str), y=b_ids.to_numpy()).drop_duplicates()
    assert pairs.groupby(["n", "x"]).size().max() == 1 and pairs.groupby(["n", "y"]).size().max() == 1
    _same(linking.infer(tr.messages, untraced="client"), linking.infer(back.messages, untraced="client"),
          exact=False)


def test_a_node_that_hands_work_between_threads_is_linked_per_node(monkeypatch):
    tr = _trace(2, threads=16)
    m = tr.messages.copy()
    m.loc[(m["src"] == "db").to_numpy(), "src_thread"] = 99    # db replies from a thread that never reads
    r = linking.infer(m, untraced="client", k=0)
    assert any("handed between threads" in w and "db" in w for w in r.warnings)
    s = score(r, tr)
    monkeypatch.setattr(linking, "HANDOFF_SHARE", 1.1)          # the check off: db's replies all roots
    off = linking.infer(m, untraced="client", k=0)
    assert not any("handed" in w for w in off.warnings)
    assert s["request_recall"] > 0.9 > score(off, tr)["request_recall"]
    # a thread pool is not taken for a hand-off
    assert not any("handed" in w for w in linking.infer(tr.messages, untraced="client").warnings)
