"""Reading traces from elsewhere: plain CSV/Parquet message traces, Jaeger exports and run
directories, including damaged ones (analysis/paths/readers.py, rundir/traces.py)."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pandas as pd
import pytest

from analysis.paths.maketrace import Fault, maketrace, web_service
from analysis.paths.model import true_patterns
from analysis.paths.readers import (
    latest_received_causes,
    read_faults_file,
    read_jaeger,
    read_run,
    read_trace_file,
    write_faults,
    write_trace,
)
from rundir.errors import UserError


@pytest.fixture(scope="module")
def small():
    return maketrace(web_service(), duration=20, parallelism=2, seed=1, faults=[Fault("web2", 0.2, 5, 10)])


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_round_trip_keeps_messages_and_truth(small, tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    write_trace(small, path)
    back = read_trace_file(path)
    assert back.warnings == []
    pd.testing.assert_frame_equal(back.messages, small.messages, check_categorical=False, atol=1e-8)
    assert np.array_equal(back.truth.cause, small.truth.cause)
    a = true_patterns(back).sort_values("request")["pattern"].tolist()
    b = true_patterns(small).sort_values("request")["pattern"].tolist()
    assert a == b
    write_faults(small, tmp_path / "f.csv")
    assert read_faults_file(tmp_path / "f.csv")[["node", "start", "stop"]].values.tolist() == [["web2", 5, 10]]


def test_project5_style_columns(tmp_path):
    path = tmp_path / "p5.csv"
    path.write_text("Timestamp,Sender,Receiver,Tag,CallID\n"
                    "1.0,A,B,CALL,7\n1.1,B,C,CALL,8\n1.2,C,B,RET,8\n1.3,B,A,RET,7\n")
    t = read_trace_file(path)
    m = t.messages
    assert list(m["kind"]) == ["call", "call", "return", "return"]
    assert list(m["msg"]) == [7, 8, 8, 7] and t.truth is None
    assert m["t_recv"].isna().all()


def test_damaged_rows_out_of_order_and_a_cut_last_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("time,sender,receiver,kind\n"
                    "2.0,A,B,call\n"
                    "1.0,B,A,return\n"          # out of order
                    "x,A,B,call\n"              # time not a number
                    "3.0,,B,call\n"             # no sender
                    "4.0,A,B,maybe\n"           # unknown tag
                    "5.0,A,B,call,extra\n"      # a field too many
                    "6.0,A")                    # cut short
    t = read_trace_file(path)
    assert list(t.messages["t_send"]) == [1.0, 2.0, 4.0]
    text = " | ".join(t.warnings)
    assert "1 line with the wrong number of fields" in text
    assert "3 rows with a time that is not a number or no sender or receiver" in text
    assert "1 row earlier than the row before" in text
    assert "1 row whose kind is neither call nor return" in text


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("", "empty"),
    ("a,b\n1,2\n", "no column for"),
    ("time,sender,receiver\nx,,\n", "no usable message rows"),
])
def test_unreadable_traces_are_one_user_error(tmp_path, content, message):
    path = tmp_path / "t.csv"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UserError, match=message):
        read_trace_file(path)


def test_damaged_parquet_is_one_user_error(small, tmp_path):
    path = tmp_path / "t.parquet"
    write_trace(small, path)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(UserError, match="cannot be read as Parquet"):
        read_trace_file(path)


def span(sid, service, start, dur, parent=None, kind="server", op="op"):
    refs = [{"refType": "CHILD_OF", "traceID": "t", "spanID": parent}] if parent else []
    return {"traceID": "t", "spanID": sid, "operationName": op, "references": refs, "startTime": start,
            "duration": dur, "processID": service, "tags": [{"key": "span.kind", "value": kind}]}


def jaeger_doc(n=2):
    traces = []
    for i in range(n):
        t0 = 1_000_000 * (i + 1)
        spans = [span("a", "p1", t0, 50_000, op="GET /"),              # frontend server span (root)
                 span("b", "p1", t0 + 1000, 30_000, "a", "client"),     # frontend calls backend
                 span("c", "p2", t0 + 1500, 29_000, "b"),               # backend's server span
                 span("d", "p2", t0 + 2000, 5_000, "c", "internal"),    # backend's own work
                 span("e", "p3", t0 + 8000, 10_000, "c")]               # db, called by backend
        traces.append({"traceID": f"t{i}", "spans": spans,
                       "processes": {"p1": {"serviceName": "frontend"}, "p2": {"serviceName": "backend"},
                                     "p3": {"serviceName": "db"}}})
    return {"data": traces}


def test_jaeger_spans_become_calls_and_returns_with_truth(tmp_path):
    path = tmp_path / "export.json"
    path.write_text(json.dumps(jaeger_doc()))
    t = read_jaeger(path)
    m = t.messages
    assert len(m) == 12 and t.warnings == []
    first = m.iloc[:6]
    assert list(zip(first["src"].astype(str), first["dst"].astype(str), first["kind"].astype(str),
                    strict=True)) == [
        ("client", "frontend", "call"), ("frontend", "backend", "call"), ("backend", "db", "call"),
        ("db", "backend", "return"), ("backend", "frontend", "return"), ("frontend", "client", "return")]
    assert t.time_base == 1                                      # seconds since the first whole second
    assert first["t_send"].iloc[1] == pytest.approx(0.001)       # the client span's start: caller's clock
    assert first["t_recv"].iloc[1] == pytest.approx(0.0015)
    pats = true_patterns(t)
    assert set(pats["pattern"]) == {
        "client>frontend(frontend>backend(backend>db(db>backend(backend>frontend(frontend>client)))))"}
    assert set(t.truth.request_type.values()) == {"GET /"}
    assert (m["msg"].value_counts() == 2).all() and set(m["msg"]) == set(range(6))   # renumbered pairs


def test_damaged_jaeger_directory(tmp_path):
    doc = jaeger_doc(1)
    doc["data"][0]["spans"].append({"spanID": "z"})                      # no times
    doc["data"][0]["spans"].append(span("y", "p3", 1_200_000, 10, "missing"))  # parent not exported
    (tmp_path / "a.json").write_text(json.dumps(doc))
    (tmp_path / "b.json").write_text('{"data": [')                       # cut short
    t = read_jaeger(tmp_path)
    text = " | ".join(t.warnings)
    assert "b.json: not readable JSON" in text
    assert "1 span without spanID" in text and "1 span whose parent is not in the export" in text
    assert len(t.messages) == 8
    (tmp_path / "a.json").unlink()
    with pytest.raises(UserError, match="no readable Jaeger export"):
        read_jaeger(tmp_path)
    with pytest.raises(UserError, match="no such file"):
        read_jaeger(tmp_path / "nope.json")


def test_latest_received_convention():
    m = pd.DataFrame({"t_send": [0.0, 1.0, 2.0, 3.0, 3.5], "t_recv": [0.5, 1.5, 2.5, 3.2, 4.0],
                      "src": ["a", "b", "c", "b", "a"], "dst": ["b", "c", "b", "a", "b"]})
    req = np.array([0, 0, 0, 0, 1])
    assert latest_received_causes(m, req).tolist() == [-1, 0, 1, 2, -1]


def make_run(tmp_path, with_messages=True):
    run = tmp_path / "run"
    run.mkdir()
    conn = sqlite3.connect(run / "run.db")
    conn.execute("CREATE TABLE faults (id, spec_index, kind, at_node, target_module, target, planned_start, "
                 "planned_duration, start, end, rule)")
    conn.execute("INSERT INTO faults VALUES (1, 0, 'delay', 'app', NULL, '{}', 1, 1, 1.5, 2.5, '')")
    if with_messages:
        conn.execute("CREATE TABLE messages (mono, host, pid, tid, fd, call, bytes, local, remote)")
        conn.executemany("INSERT INTO messages VALUES (?, ?, ?, 0, 3, ?, ?, ?, ?)", [
            (1.0, "web", 2, "send", 10, "w:1", "a:80"), (1.001, "app", 3, "recv", 10, "a:80", "w:1"),
            (1.005, "app", 3, "send", 5, "a:80", "w:1"), (1.006, "web", 2, "recv", 5, "w:1", "a:80"),
            ("garbage", "web", 2, "send", 1, "w:1", "a:80")])
        conn.execute('CREATE TABLE requests (request, type, tier, host, pid, start, "end")')
        conn.executemany("INSERT INTO requests VALUES (?, ?, ?, ?, ?, ?, ?)", [
            (7, "page", "web", "web", 2, 0.999, 1.007), (7, "page", "app", "app", 3, 1.001, 1.005)])
    conn.commit()
    conn.close()
    return run


def test_run_directory_with_messages_and_requests(tmp_path):
    t = read_run(make_run(tmp_path))
    assert list(t.messages["src"].astype(str)) == ["web", "app"]
    assert list(t.messages["kind"].astype(str)) == ["call", "return"]
    assert any("messages: 1 row" in w for w in t.warnings)
    assert t.truth.request.tolist() == [0, 0] and t.truth.cause.tolist() == [-1, 0]
    assert t.faults[["node", "start", "stop"]].values.tolist() == [["app", 1.5, 2.5]]


def test_run_directory_without_messages_says_how_to_record(tmp_path):
    with pytest.raises(UserError, match="no messages table.*`trace: messages`"):
        read_run(make_run(tmp_path, with_messages=False))


def test_date_times_and_numeric_node_names(tmp_path):
    path = tmp_path / "dt.csv"
    path.write_text("ts,from,to\n2026-01-01T00:00:00Z,1,2\n2026-01-01T00:00:00.5Z,2,1\n")
    m = read_trace_file(path).messages
    assert list(m["src"].astype(str)) == ["1", "2"]
    assert m["t_send"].iloc[1] - m["t_send"].iloc[0] == pytest.approx(0.5)


def write_maketrace_run(tmp_path, trace):
    """A run directory as the service lab would record `trace` (its socket events, its requests,
    its fault windows), for read_run and `nestlab paths RUN`."""
    from analysis.paths.maketrace import requests_table, socket_events
    run = tmp_path / "mkrun"
    run.mkdir()
    conn = sqlite3.connect(run / "run.db")
    ev = socket_events(trace, chunk=500)
    conn.execute("CREATE TABLE messages (mono, host, pid, tid, fd, call, bytes, local, remote)")
    conn.executemany("INSERT INTO messages VALUES (?, ?, ?, 0, 3, ?, ?, ?, ?)",
                     ev[["mono", "host", "pid", "call", "bytes", "local", "remote"]].itertuples(index=False))
    conn.execute('CREATE TABLE requests (request, type, tier, host, pid, start, "end")')
    conn.executemany("INSERT INTO requests VALUES (?, ?, ?, ?, ?, ?, ?)", requests_table(trace).itertuples(index=False))
    conn.execute("CREATE TABLE faults (id, spec_index, kind, at_node, target_module, target, planned_start, "
                 "planned_duration, start, end, rule)")
    for i, f in enumerate((trace.faults if trace.faults is not None else pd.DataFrame()).itertuples()):
        conn.execute("INSERT INTO faults VALUES (?, ?, 'delay', ?, NULL, '{}', ?, ?, ?, ?, '')",
                     (i, i, f.node, f.start, f.stop - f.start, f.start, f.stop))
    conn.commit()
    conn.close()
    return run


def test_a_run_recorded_from_maketrace_gives_back_its_paths(tmp_path):
    tr = maketrace(web_service(), duration=10, parallelism=4, seed=3, faults=[Fault("app1", 0.2, 2, 4)])
    t = read_run(write_maketrace_run(tmp_path, tr))
    assert t.warnings == []
    assert len(t.messages) == len(tr.messages)
    a = true_patterns(t)["pattern"].value_counts()
    b = true_patterns(tr)["pattern"].value_counts()
    assert a.to_dict() == b.to_dict()
    assert t.faults[["node", "start", "stop"]].values.tolist() == [["app1", 2, 4]]


@pytest.mark.parametrize("content", [bytes(range(256)) * 3, b'time,sender\n"1,a\n2,b,c,d\n', b"\x00\x01,\n\xff"])
def test_garbage_files_are_user_errors_or_warnings(tmp_path, content):
    path = tmp_path / "g.csv"
    path.write_bytes(content)
    try:
        read_trace_file(path)
    except UserError as e:
        assert str(e).startswith(str(path))


def test_jaeger_fields_of_the_wrong_type(tmp_path):
    doc = jaeger_doc(1)
    spans = doc["data"][0]["spans"]
    spans[0]["references"], spans[0]["tags"] = 5, "x"            # taken as none
    spans.append({"spanID": "q", "startTime": "soon", "duration": 1, "processID": "p1"})
    spans.append({"spanID": "r", "startTime": 1, "duration": 1, "processID": ["p1"]})
    doc["data"][0]["processes"]["p9"] = "not a dict"
    (tmp_path / "e.json").write_text(json.dumps(doc))
    t = read_jaeger(tmp_path / "e.json")
    assert len(t.messages) == 6 and "2 spans without spanID" in " ".join(t.warnings)


def test_parquet_with_categorical_and_missing_values(tmp_path):
    f = pd.DataFrame({"time": [1.0, 2.0, 3.0], "sender": pd.Categorical(["a", None, "b"]),
                      "receiver": pd.Categorical(["b", "a", "a"]), "kind": pd.Categorical(["call", "call", None]),
                      "msg": ["x", "y", None]})
    f.to_parquet(tmp_path / "c.parquet")
    t = read_trace_file(tmp_path / "c.parquet")
    assert list(t.messages["src"].astype(str)) == ["a", "b"] and list(t.messages["kind"]) == ["call", ""]
    assert t.messages["msg"].iloc[1] == -1 and "1 row with a time" in t.warnings[0]


def test_process_granularity(tmp_path):
    t = read_run(make_run(tmp_path), granularity="process")
    assert list(t.messages["src"].astype(str)) == ["web/2", "app/3"]
    assert t.truth.request.tolist() == [0, 0]
