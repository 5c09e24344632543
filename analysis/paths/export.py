"""Request paths as span exports Jaeger's UI opens (issue 43 item 1): a trace's true paths (its truth,
e.g. a run's `requests`) or an algorithm's inferred ones (PathsResult.parent), as Jaeger JSON (the
UI's "JSON file" upload: {"data": [{traceID, spans, processes}]}) or OTLP JSON (TracesData:
resourceSpans per service).

Each call pair (a call and its return, callpairs.py) is a server span of its callee, from the call's
arrival to the reply's departure (the callee's clock), under a client span of its caller, from the
call's departure to the reply's arrival (the caller's clock: read back, every message keeps both
times); the client span's parent is the server span serving the call at the caller: the incoming call whose handling the call was made in, found from the message causes (a call
caused by an incoming call is made in that call's handling; one caused by the return of an earlier
call, in the handling that earlier call was made in). A call with no cause (or from an untraced
client) roots a trace, with no client span. Span and trace ids are made up (the pair's number, the root's); times are the
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
            "start": cp.in_start, "end": cp.in_end, "out_start": cp.out_start, "out_end": cp.out_end}


def spans(trace: Trace, cause: np.ndarray) -> list[tuple]:
    """(trace id, span id, parent id or 0, service, name, kind, start µs, end µs) per span: the server
    span of each call pair, and the caller's client span above it where the call has a parent."""
    t = span_table(trace, cause)
    n = len(t["trace"])
    start, end = _micros(trace, t["start"]), _micros(trace, t["end"])
    o_start, o_end = _micros(trace, t["out_start"]), _micros(trace, t["out_end"])
    out = []
    for i in range(n):
        p, r = int(t["parent"][i]), int(t["trace"][i]) + 1
        name = f"{t['caller'][i]}>{t['service'][i]}"
        if p >= 0:   # the client span (id n + i + 1) under the server span serving the call
            out.append((r, n + i + 1, p + 1, str(t["caller"][i]), name, "client", int(o_start[i]),
                        int(max(o_end[i], o_start[i]))))
            out.append((r, i + 1, n + i + 1, str(t["service"][i]), name, "server", int(start[i]),
                        int(max(end[i], start[i]))))
        else:
            out.append((r, i + 1, 0, str(t["service"][i]), name, "server", int(start[i]), int(max(end[i], start[i]))))
    return out


def _micros(trace: Trace, t: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(t, dtype=np.float64) * 1e6).astype(np.int64) + int(trace.time_base) * 1_000_000


def to_jaeger(trace: Trace, cause: np.ndarray) -> dict:
    """Jaeger JSON of the paths given by per-message causes."""
    rows = spans(trace, cause)
    services = sorted({r[3] for r in rows})
    pid = {s: f"p{i + 1}" for i, s in enumerate(services)}
    by_trace: dict[int, list[tuple]] = {}
    for r in rows:
        by_trace.setdefault(r[0], []).append(r)
    data = []
    for r, members in by_trace.items():
        tid = f"{r:016x}"
        out = [{"traceID": tid, "spanID": f"{sid:016x}", "operationName": name,
                "references": [] if not par else [{"refType": "CHILD_OF", "traceID": tid, "spanID": f"{par:016x}"}],
                "startTime": t0, "duration": t1 - t0,
                "tags": [{"key": "span.kind", "type": "string", "value": kind}],
                "logs": [], "processID": pid[svc], "warnings": None}
               for _, sid, par, svc, name, kind, t0, t1 in members]
        used = {s["processID"] for s in out}
        data.append({"traceID": tid, "spans": out,
                     "processes": {pid[s]: {"serviceName": s, "tags": []} for s in services if pid[s] in used},
                     "warnings": None})
    return {"data": data, "total": 0, "limit": 0, "offset": 0, "errors": None}


def to_otlp(trace: Trace, cause: np.ndarray) -> dict:
    """OTLP JSON (TracesData) of the paths given by per-message causes: ids in hex, as OTLP/JSON
    writes them; times in ns, as strings; kinds 2 (server) and 3 (client)."""
    per_service: dict[str, list[dict]] = {}
    for r, sid, par, svc, name, kind, t0, t1 in spans(trace, cause):
        span = {"traceId": f"{r:032x}", "spanId": f"{sid:016x}", "name": name, "kind": 2 if kind == "server" else 3,
                "startTimeUnixNano": str(t0 * 1000), "endTimeUnixNano": str(t1 * 1000)}
        if par:
            span["parentSpanId"] = f"{par:016x}"
        per_service.setdefault(svc, []).append(span)
    return {"resourceSpans": [
        {"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": s}}]},
         "scopeSpans": [{"scope": {"name": "black-box paths"}, "spans": out}]}
        for s, out in sorted(per_service.items())]}


FORMATS = {"jaeger": to_jaeger, "otlp": to_otlp}


def write_export(trace: Trace, cause: np.ndarray, path: Path, fmt: str) -> None:
    """The paths as a `fmt` ("jaeger" or "otlp") JSON file at `path` (a link there is replaced)."""
    from rundir.layout import fresh

    fresh(path).write_text(json.dumps(FORMATS[fmt](trace, cause)))
