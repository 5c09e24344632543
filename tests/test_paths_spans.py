"""Span exports into traces that keep the truth (issue 43 item 1, analysis/paths/spans.py): whole-µs
times, causes scoped to the span being served, FOLLOWS_FROM, cycles, OTLP JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.paths.model import true_patterns
from analysis.paths.spans import read_jaeger, read_otlp
from tests.test_paths_readers import jaeger_doc, span

EPOCH = 1_655_753_768_000_000      # µs, June 2022: a float of seconds steps by 0.24 µs here


def doc(*spans, services=("front", "mid", "db")):
    procs = {f"p{i + 1}": {"serviceName": s} for i, s in enumerate(services)}
    return {"data": [{"traceID": "t", "spans": list(spans), "processes": procs}]}


def write(tmp_path, d, name="e.json"):
    (tmp_path / name).write_text(json.dumps(d))
    return tmp_path / name


def test_ends_in_the_same_microsecond_stay_equal(tmp_path):
    # mid's call to db ends in the same µs as mid's own span (hotel_load100's rate call): the return
    # to front must be caused by db's return, and both times equal
    t0 = EPOCH + 65_745 - 3000
    d = doc(span("a", "p1", t0, 3000, op="GET"), span("b", "p2", t0 + 100, 2900, "a"),
            span("c", "p3", t0 + 200, 2800, "b"))
    t = read_jaeger(write(tmp_path, d))
    m = t.messages
    ends = m[m["kind"].astype(str) == "return"]
    assert ends["t_send"].iloc[0] == ends["t_send"].iloc[1] == ends["t_send"].iloc[2]
    assert set(true_patterns(t)["pattern"]) == {"client>front(front>mid(mid>db(db>mid(mid>front(front>client)))))"}
    old = (np.float64(t0 + 3000) / 1e6, np.float64(t0 + 200) / 1e6 + np.float64(2800) / 1e6)
    assert old[0] != old[1]          # what the float conversion of before made of the same µs


def test_causes_are_scoped_to_the_span_served(tmp_path):
    # front calls mid twice at once (two spans of mid overlapping, one request); each of mid's calls to
    # db is caused by its own incoming call, not by the latest message mid received for the request
    t0 = EPOCH
    d = doc(span("a", "p1", t0, 10_000), span("b1", "p2", t0 + 100, 6000, "a"), span("b2", "p2", t0 + 200, 8000, "a"),
            span("c1", "p3", t0 + 300, 100, "b1"), span("c2", "p3", t0 + 5000, 100, "b2"))
    t = read_jaeger(write(tmp_path, d))
    m, cause = t.messages, t.truth.cause
    src, dst, kind = (m[c].astype(str).to_numpy() for c in ("src", "dst", "kind"))
    to_db = np.flatnonzero((dst == "db") & (kind == "call"))
    # the second call to db (at t0+5000) is served by b2, whose call arrived at t0+200, though mid
    # received the return of the first db call (t0+400) later than that
    second = to_db[1]
    assert src[cause[second]] == "front" and m["t_recv"].iloc[cause[second]] == pytest.approx(m["t_recv"].min() + 200e-6)
    assert set(true_patterns(t)["pattern"]) == {
        "client>front(front>mid(mid>db(db>mid(mid>front(front>client)))),front>mid(mid>db(db>mid(mid>front))))"}


def test_follows_from_is_an_asynchronous_call(tmp_path):
    t0 = EPOCH
    refs = [{"refType": "FOLLOWS_FROM", "traceID": "t", "spanID": "a"}]
    d = doc(span("a", "p1", t0, 1000), {**span("q", "p2", t0 + 2000, 500), "references": refs})
    t = read_jaeger(write(tmp_path, d))
    assert any("1 span linked by FOLLOWS_FROM only" in w for w in t.warnings)
    assert len(true_patterns(t)) == 1                   # one request, not two roots
    assert "front>mid" in true_patterns(t)["pattern"].iloc[0]


def test_cycles_and_missing_parents_are_counted(tmp_path):
    t0 = EPOCH
    d = doc(span("a", "p1", t0, 1000, "b"), span("b", "p2", t0 + 10, 500, "a"),     # a cycle
            span("c", "p3", t0 + 20, 10, "nowhere"))                               # parent not exported
    t = read_jaeger(write(tmp_path, d))                  # no hang
    text = " | ".join(t.warnings)
    assert "1 cycle in the parent links" in text and "1 span whose parent is not in the export" in text
    assert sorted(true_patterns(t)["pattern"].str.split("(").str[0]) == ["client>db", "client>front"]


def otlp_of(jaeger: dict) -> dict:
    """The same spans as OTLP JSON (ns as strings, ids as hex strings, kinds as numbers)."""
    out = []
    for tr in jaeger["data"]:
        procs = tr["processes"]
        for s in tr["spans"]:
            kind = next((x["value"] for x in s.get("tags", []) if x["key"] == "span.kind"), "server")
            o = {"traceId": tr["traceID"], "spanId": s["spanID"], "name": s["operationName"],
                 "kind": 3 if kind == "client" else 2, "startTimeUnixNano": str(s["startTime"] * 1000),
                 "endTimeUnixNano": str((s["startTime"] + s["duration"]) * 1000)}
            if s["references"]:
                o["parentSpanId"] = s["references"][0]["spanID"]
            out.append({"resource": {"attributes": [{"key": "service.name", "value": {
                "stringValue": procs[s["processID"]]["serviceName"]}}]}, "scopeSpans": [{"spans": [o]}]})
    return {"resourceSpans": out}


def test_otlp_json_reads_as_jaeger_does(tmp_path):
    j = jaeger_doc(3)
    a = read_jaeger(write(tmp_path, j))
    b = read_otlp(write(tmp_path, otlp_of(j), "o.json"))
    assert a.messages.equals(b.messages)
    assert (a.truth.cause == b.truth.cause).all() and (a.truth.request == b.truth.request).all()


def test_an_odd_shaped_export_takes_the_slow_path(tmp_path):
    j = jaeger_doc(2)
    j["data"][0]["spans"][1]["references"] = {"not": "a list"}     # the fast decoder refuses the file
    t = read_jaeger(write(tmp_path, j))
    assert len(t.messages) == 8 + 6                    # b is a root now: called by client
    assert len(true_patterns(t)) == 3                  # its trace has two roots


def _tree_set(t):
    return sorted(true_patterns(t)["pattern"])


@pytest.mark.parametrize("fmt", ["jaeger", "otlp"])
def test_export_of_the_truth_reads_back(tmp_path, fmt):
    from analysis.paths.export import write_export
    j = jaeger_doc(4)
    t = read_jaeger(write(tmp_path, j))
    write_export(t, t.truth.cause, tmp_path / "x.json", fmt)
    back = (read_jaeger if fmt == "jaeger" else read_otlp)(tmp_path / "x.json")
    assert _tree_set(back) == _tree_set(t)
    assert back.time_base == t.time_base
    assert back.messages.equals(t.messages)             # both clocks of every message kept


def test_otlp_export_loads_with_opentelemetry_proto(tmp_path):
    """The OTLP export parsed by the OpenTelemetry protobuf classes (json_format, strict: an unknown
    field or a wrong type fails); OTLP/JSON writes ids in hex where protobuf's JSON mapping has base64,
    so the ids are turned to base64 first, as OTLP's JSON decoders do."""
    import base64

    from google.protobuf import json_format
    from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

    from analysis.paths.algorithms import algorithm
    from analysis.paths.export import to_otlp
    t = read_jaeger(write(tmp_path, jaeger_doc(4)))
    infer, _ = algorithm("nesting")
    doc = to_otlp(t, infer(t.messages).parent)
    for rs in doc["resourceSpans"]:
        for s in rs["scopeSpans"][0]["spans"]:
            for k in ("traceId", "spanId", "parentSpanId"):
                if k in s:
                    s[k] = base64.b64encode(bytes.fromhex(s[k])).decode()
    data = json_format.Parse(json.dumps(doc), TracesData())
    spans = [s for rs in data.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert len(spans) == 4 * (3 + 2)                    # a server span per call pair, a client span per non-root
    assert all(len(s.trace_id) == 16 and len(s.span_id) == 8 for s in spans)
    ids = {s.span_id for s in spans}
    assert all(s.parent_span_id in ids for s in spans if s.parent_span_id)
    assert {rs.resource.attributes[0].value.string_value for rs in data.resource_spans} == {"frontend", "backend", "db"}


def test_scoped_causes_take_what_merge_asof_takes():
    # the numpy search (spans.scoped_causes_arrays) against the pandas join it replaced, on random
    # messages with many equal times and few contexts (ties decide: the last row of a time wins)
    import pandas as pd

    from analysis.paths.spans import scoped_causes_arrays

    def joined(t_send, t_recv, send_ctx, recv_ctx):
        n = len(t_send)
        received = pd.DataFrame({"ctx": recv_ctx, "t": t_recv, "cause": np.arange(n)}).sort_values("t", kind="stable")
        sent = pd.DataFrame({"ctx": send_ctx, "t": t_send, "row": np.arange(n)}).sort_values("t", kind="stable")
        hit = pd.merge_asof(sent, received, on="t", by="ctx", direction="backward", allow_exact_matches=True)
        cause = np.full(n, -1, dtype=np.int64)
        cause[hit["row"].to_numpy()] = hit["cause"].fillna(-1).to_numpy().astype(np.int64)
        cause[cause == np.arange(n)] = -1
        return cause

    rng = np.random.default_rng(43)
    for i in range(400):
        n = int(rng.integers(1, 150))
        span, ctxs = int(rng.integers(1, 20)), int(rng.integers(1, 8))
        step = 1000 if i % 2 else 2**58      # times as keys, or too far apart for that: their ranks
        cols = (np.sort(rng.integers(0, span, n)) * step - 7, rng.integers(0, span, n) * step - 7,
                rng.integers(0, ctxs, n), rng.integers(0, ctxs, n))
        assert (scoped_causes_arrays(*cols) == joined(*cols)).all()
