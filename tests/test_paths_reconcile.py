"""Trace reconciliation on hand-made per-process event frames (analysis/paths/reconcile.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.paths.reconcile import ReconcileError, reconcile

C, W, W2, A = "10.0.0.1:40000", "10.0.0.2:80", "10.0.0.2:50000", "10.0.0.3:8000"
COLS = ["mono", "host", "pid", "call", "bytes", "local", "remote"]
# client -> web (a request in two writes) ; web -> app and back ; web -> client (reply read in three)
ROWS = [
    (1.000, "client", 1, "write", 60, C, W), (1.001, "client", 1, "write", 40, C, W),
    (1.002, "web", 2, "read", 100, W, C),
    (1.003, "web", 2, "send", 10, W2, A), (1.004, "app", 3, "recv", 10, A, W2),
    (1.010, "app", 3, "send", 20, A, W2), (1.011, "web", 2, "recv", 20, W2, A),
    (1.012, "web", 2, "write", 30, W, C), (1.0125, "web", 2, "writev", 30, W, C),
    (1.013, "client", 1, "read", 20, C, W), (1.014, "client", 1, "read", 20, C, W),
    (1.015, "client", 1, "readv", 20, C, W), (1.016, "client", 1, "read", 0, C, W),
]


def events(rows=ROWS) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=COLS)


def core(m: pd.DataFrame) -> list[tuple]:
    return [(r.t_send, None if np.isnan(r.t_recv) else r.t_recv, r.src, r.dst, r.kind)
            for r in m.itertuples()]


def test_logical_messages_fat_messages_and_pairs():
    m, warnings = reconcile(events())
    assert warnings == []
    assert core(m) == [(1.000, 1.002, "client", "web", "call"), (1.003, 1.004, "web", "app", "call"),
                       (1.010, 1.011, "app", "web", "return"), (1.012, 1.015, "web", "client", "return")]
    assert list(m["bytes"]) == [100, 10, 20, 60]
    assert list(m["src_endpoint"]) == [C, W2, A, W]
    # a call and its return share an id, distinct from the other pair's
    assert m["msg"][0] == m["msg"][3] != m["msg"][1] == m["msg"][2]


def test_nodes_renamed_and_process_granularity():
    m, _ = reconcile(events(), nodes={"web": "frontend"})
    assert set(m["src"].astype(str)) == {"client", "frontend", "app"}
    m, _ = reconcile(events(), granularity="process")
    assert set(m["src"].astype(str)) == {"client/1", "web/2", "app/3"}


def test_a_call_without_its_return_is_counted_unpaired():
    rows = [r for i, r in enumerate(ROWS) if i not in (5, 6)]    # the app's reply lost
    m, warnings = reconcile(events(rows))
    assert [k for k in m["kind"]] == ["call", "", "return"]
    assert m["msg"][1] == -1
    assert any("1 call with no return" in w for w in warnings)


def test_a_server_message_answering_no_call():
    rows = [r for i, r in enumerate(ROWS) if i not in (3, 4)]    # web's call to app not traced
    w3 = "10.0.0.2:50001"                  # another connection makes app's port the fixed (server) one
    rows += [(2.0, "web", 2, "send", 5, w3, A), (2.001, "app", 3, "recv", 5, A, w3),
             (2.002, "app", 3, "send", 5, A, w3), (2.003, "web", 2, "recv", 5, w3, A)]
    m, warnings = reconcile(events(rows))
    stray = m[(m["src"] == "app") & (m["t_send"] < 2)]
    assert list(stray["kind"]) == [""]
    assert list(m[m["t_send"] >= 2]["kind"]) == ["call", "return"]
    assert any("1 server message answering no call" in w for w in warnings)


def test_untraced_receiver_and_sender():
    rows = [r for r in ROWS if r[1] != "app"]
    m, warnings = reconcile(events(rows), nodes={"10.0.0.3": "app"})
    assert core(m) == [(1.000, 1.002, "client", "web", "call"), (1.003, None, "web", "app", "call"),
                       (1.011, 1.011, "app", "web", "return"), (1.012, 1.015, "web", "client", "return")]
    assert any("1 message with no receive seen" in w for w in warnings)
    assert any("1 message whose sender was not traced" in w for w in warnings)
    # without a name for the untraced end: its address, and a warning naming it
    m, warnings = reconcile(events(rows))
    assert "10.0.0.3" in set(m["dst"].astype(str))
    assert any("no traced process owns" in w and "10.0.0.3:8000" in w for w in warnings)


def test_damaged_rows_are_left_out_and_counted():
    rows = [*ROWS, (None, "web", 2, "write", 5, W, C), (2.0, "web", 2, "ioctl", 5, W, C),
            (2.1, "web", 2, "write", "x", W, C), (2.2, "web", 2, "write", 5, W, None)]
    m, warnings = reconcile(events(rows))
    assert len(m) == 4
    assert any("4 rows with an unknown call" in w for w in warnings)


def test_events_out_of_order_are_sorted():
    shuffled = events().sample(frac=1, random_state=1)
    m, _ = reconcile(shuffled)
    assert core(m) == core(reconcile(events())[0])


def test_many_requests_on_one_connection_pair_in_order():
    rows = []
    for i in range(50):
        t = 10 + i * 0.01
        rows += [(t, "client", 1, "send", 10, C, W), (t + 0.001, "web", 2, "recv", 10, W, C),
                 (t + 0.004, "web", 2, "send", 7, W, C), (t + 0.005, "client", 1, "recv", 7, C, W)]
    m, warnings = reconcile(events(rows))
    assert warnings == [] and len(m) == 100
    calls, rets = m[m["kind"] == "call"], m[m["kind"] == "return"]
    pairs = calls.merge(rets, on="msg", suffixes=("_c", "_r"))
    assert len(pairs) == 50 and np.allclose(pairs["t_send_r"] - pairs["t_send_c"], 0.004)


def test_missing_columns_is_one_error():
    with pytest.raises(ReconcileError, match="no column bytes"):
        reconcile(events().drop(columns="bytes"))


def test_maketrace_through_socket_events_and_back():
    """What a tracer would record of a Maketrace trace (one connection per call, replies read in
    chunks) reconciles to the same messages, kinds and call/return pairs."""
    from analysis.paths.maketrace import maketrace, socket_events, web_service
    tr = maketrace(web_service(), duration=10, parallelism=4, seed=3)
    m, warnings = reconcile(socket_events(tr, chunk=300, seed=1))
    a = tr.messages
    assert warnings == [] and len(m) == len(a)
    assert np.allclose(m["t_send"], a["t_send"]) and np.allclose(m["t_recv"], a["t_recv"])
    for c in ("src", "dst", "kind"):
        assert (m[c].astype(str).to_numpy() == a[c].astype(str).to_numpy()).all()
    # the same pairs (ids differ): each reconciled id maps to exactly one generated id
    assert pd.crosstab(m["msg"], a["msg"]).gt(0).sum(axis=1).eq(1).all()


def test_sends_with_other_socket_calls_of_their_thread_between_are_two_messages():
    """A memcached set with noreply at the end of one request, the next request's get on the same
    connection 80 ms later (the thread answered web and read its next request in between): two
    messages, the set a call with no return; without threads (WAP5's rule alone) one fat message.
    A reply written in two adjacent calls of its thread stays one message."""
    app, cache, web_up, web = "10.0.5.1:6001", "10.0.7.1:11211", "10.0.5.1:8000", "10.0.3.1:5001"
    rows = [
        (1.000, "app", 3, 7, "send", 30, app, cache),          # set item:5 noreply
        (1.001, "cache", 9, 1, "read", 30, cache, app),
        (1.002, "app", 3, 7, "send", 100, web_up, web),        # the reply to web, in two writes
        (1.0021, "app", 3, 7, "send", 50, web_up, web),
        (1.003, "web", 2, 4, "recv", 150, web, web_up),
        (1.080, "web", 2, 4, "send", 120, web, web_up),        # the next request
        (1.081, "app", 3, 7, "recv", 120, web_up, web),
        (1.082, "app", 3, 7, "send", 16, app, cache),          # get session:1
        (1.083, "cache", 9, 1, "read", 16, cache, app),
        (1.084, "cache", 9, 1, "sendmsg", 36, cache, app),
        (1.085, "app", 3, 7, "recv", 36, app, cache),
    ]
    ev = pd.DataFrame(rows, columns=["mono", "host", "pid", "tid", "call", "bytes", "local", "remote"])
    m, warnings = reconcile(ev)
    to_cache = m[m["dst"].astype(str) == "cache"]
    assert to_cache["t_send"].tolist() == [1.000, 1.082] and to_cache["t_recv"].tolist() == [1.001, 1.083]
    assert to_cache["kind"].tolist() == ["", "call"] and any("1 call with no return" in w for w in warnings)
    assert m[m["src_endpoint"] == web_up]["bytes"].tolist() == [150]       # adjacent: one message
    merged, _ = reconcile(ev.drop(columns="tid"))
    fat = merged[merged["dst"].astype(str) == "cache"]
    assert fat["t_send"].tolist() == [1.000] and fat["t_send_last"].tolist() == [1.082]
