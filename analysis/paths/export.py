"""Request paths as span exports Jaeger's UI opens (issue 43 item 1): a trace's true paths (its truth,
e.g. a run's `requests`) or an algorithm's inferred ones (PathsResult.parent), as Jaeger JSON (the
UI's "JSON file" upload: {"data": [{traceID, spans, processes}]}) or OTLP JSON (TracesData:
resourceSpans per service).

Each call pair (a call and its return, callpairs.py) is a server span of its callee, from the call's
arrival to the reply's departure (the callee's clock); its parent is the span serving the call at the
caller: the incoming call whose handling the call was made in, found from the message causes (a call
caused by an incoming call is made in that call's handling; one caused by the return of an earlier
call, in the handling that earlier call was made in). A call with no cause (or from an untraced
client) roots a trace. Span and trace ids are made up (the pair's number, the root's); times are the
trace's seconds plus Trace.time_base, in whole µs (Jaeger) or ns (OTLP).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from analysis.paths.callpairs import call_pairs
from analysis.paths.model import Trace


def span_table(trace: Trace, cause: np.ndarray) -> dict[str, np.ndarray]:
    """Per call pair: trace (root pair), parent pair (-1: root), service, start/end (s), name."""
    cp = call_pairs(trace.messages)
    n_msg = len(trace.messages)
    pair_of_call = np.full(n_msg, -1, dtype=np.int64)
    pair_of_call[cp.calls] = np.arange(cp.n)
    pair_of_ret = np.full(n_msg, -1, dtype=np.int64)
    pair_of_ret[cp.rets] = np.arange(cp.n)
    cause = np.asarray(cause, dtype=np.int64)
    parent = np.full(cp.n, -1, dtype=np.int64)
    serving = np.full(cp.n, -1, dtype=np.int64)      # the pair in whose handling a pair's call was made
    for i in np.argsort(cp.out_start, kind="stable").tolist():
        c = cause[cp.calls[i]]
        if c < 0:
            continue
        if pair_of_call[c] >= 0:                     # caused by an incoming call: made in its handling
            serving[i] = pair_of_call[c]
        elif pair_of_ret[c] >= 0:                    # by a return: in the handling its call was made in
            serving[i] = serving[pair_of_ret[c]]
        parent[i] = serving[i]
    root = np.arange(cp.n)
    for _ in range(64):                              # trace = the root pair (depth is small)
        nxt = np.where(parent[root] >= 0, parent[root], root)
        if np.array_equal(nxt, root):
            break
        root = nxt
    names = cp.nodes.names
    return {"trace": root, "parent": parent, "service": names[cp.callee], "caller": names[cp.caller],
            "start": cp.in_start, "end": cp.in_end}


def _micros(trace: Trace, t: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(t, dtype=np.float64) * 1e6).astype(np.int64) + int(trace.time_base) * 1_000_000


def to_jaeger(trace: Trace, cause: np.ndarray) -> dict:
    """Jaeger JSON of the paths given by per-message causes."""
    t = span_table(trace, cause)
    start, end = _micros(trace, t["start"]), _micros(trace, t["end"])
    services = sorted(set(t["service"].tolist()))
    pid = {s: f"p{i + 1}" for i, s in enumerate(services)}
    by_trace: dict[int, list[int]] = {}
    for i, r in enumerate(t["trace"].tolist()):
        by_trace.setdefault(r, []).append(i)
    data = []
    for r, members in by_trace.items():
        tid = f"{r + 1:016x}"
        spans = []
        for i in members:
            p = int(t["parent"][i])
            spans.append({"traceID": tid, "spanID": f"{i + 1:016x}", "operationName": f"{t['caller'][i]}>{t['service'][i]}",
                          "references": [] if p < 0 else [{"refType": "CHILD_OF", "traceID": tid,
                                                           "spanID": f"{p + 1:016x}"}],
                          "startTime": int(start[i]), "duration": int(max(end[i] - start[i], 0)),
                          "tags": [{"key": "span.kind", "type": "string", "value": "server"}],
                          "logs": [], "processID": pid[t["service"][i]], "warnings": None})
        used = {s["processID"] for s in spans}
        data.append({"traceID": tid, "spans": spans,
                     "processes": {pid[s]: {"serviceName": s, "tags": []} for s in services if pid[s] in used},
                     "warnings": None})
    return {"data": data, "total": 0, "limit": 0, "offset": 0, "errors": None}


def to_otlp(trace: Trace, cause: np.ndarray) -> dict:
    """OTLP JSON (TracesData) of the paths given by per-message causes: ids in hex, as OTLP/JSON
    writes them; times in ns, as strings."""
    t = span_table(trace, cause)
    start, end = _micros(trace, t["start"]) * 1000, _micros(trace, t["end"]) * 1000
    per_service: dict[str, list[dict]] = {}
    for i in range(len(start)):
        p, r = int(t["parent"][i]), int(t["trace"][i])
        span = {"traceId": f"{r + 1:032x}", "spanId": f"{i + 1:016x}", "name": f"{t['caller'][i]}>{t['service'][i]}",
                "kind": 2, "startTimeUnixNano": str(int(start[i])), "endTimeUnixNano": str(int(max(end[i], start[i])))}
        if p >= 0:
            span["parentSpanId"] = f"{p + 1:016x}"
        per_service.setdefault(str(t["service"][i]), []).append(span)
    return {"resourceSpans": [
        {"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": s}}]},
         "scopeSpans": [{"scope": {"name": "nestlab.paths"}, "spans": spans}]}
        for s, spans in sorted(per_service.items())]}


FORMATS = {"jaeger": to_jaeger, "otlp": to_otlp}


def write_export(trace: Trace, cause: np.ndarray, path: Path, fmt: str) -> None:
    """The paths as a `fmt` ("jaeger" or "otlp") JSON file at `path` (a link there is replaced)."""
    from rundir.layout import fresh

    fresh(path).write_text(json.dumps(FORMATS[fmt](trace, cause)))
