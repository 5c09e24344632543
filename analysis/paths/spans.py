"""Span exports into the model's Trace, keeping the truth (issue 43): Jaeger JSON (`read_jaeger`) and
OpenTelemetry's OTLP JSON (`read_otlp`), a file or a directory of *.json (inputs.py reads them).

Every span becomes (trace, id, parent, start, end, service, kind, operation) with integer times in ns
(Jaeger's µs times 1000, OTLP's ns as given): no float ever holds an epoch time. Messages:

- a span whose parent is in another service is a call from the parent's service at the span's start
  and a return at its end (the parent's own start and end when the parent is a client span: the
  caller's clock); a span in its parent's service makes no message (in-process work); a root span
  (no parent, or a parent not in the export: counted) is called by the node `client`;
- times become seconds since the export's first whole second (Trace.time_base, an epoch second):
  two ends in the same µs stay equal;
- **FOLLOWS_FROM** (Jaeger; OTLP has none: its links are not parents): a span with no CHILD_OF
  reference and a FOLLOWS_FROM one is taken as called by the span it follows, like a child (an
  asynchronous call: its caller need not wait; the return ends the span). Counted in a warning;
- **cycles** in parent links (a span its own ancestor) are broken at the cycle's earliest span, made
  a root (counted).

The truth: each message's request is its trace; its cause is scoped to the span being served: a
message a service sends while handling one incoming call (the *entry* span, the nearest ancestor in
the same service that was called from another service, or a root) is caused by the latest message
that service received for that same entry span at or before sending it: the incoming call itself,
or a return of a call made from it. Two calls a service handles at once for one request (media's
compose-review-service serves five per request) keep their own causes. `request_type` is the root
span's operation.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pandas as pd

from analysis.paths.inputs import export_bytes, loads
from analysis.paths.model import Trace, Truth
from analysis.paths.nogc import without_gc
from rundir.errors import UserError

MAX_NS = 10**20                 # beyond the year 5000 (ns): not a time
CLIENT_KINDS = {"client", "SPAN_KIND_CLIENT", "3", "producer", "SPAN_KIND_PRODUCER", "4"}


def _plural(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def whole(value: object, scale: int) -> int | None:
    """A time or duration as whole ns (`value` in units of `scale` ns: an int, an integral float or
    the text of one), None if it is not one or out of range (a 400-digit time)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip()
        if not value.isdigit() or len(value) > 21:
            return None
        value = int(value)
    elif isinstance(value, float):
        if not np.isfinite(value) or value != int(value) or abs(value) > MAX_NS:
            return None
        value = int(value)
    if not isinstance(value, int) or abs(value) > MAX_NS // scale:
        return None
    return value * scale


class Spans:
    """The spans read so far, column by column (parents as indices, resolved per trace), and the
    counts of what was left out."""

    def __init__(self) -> None:
        self.trace: list[int] = []
        self.parent: list[int] = []
        self.follows: list[bool] = []
        self.start: list[int] = []
        self.end: list[int] = []
        self.service: list[str] = []
        self.client: list[bool] = []
        self.op: list[str] = []
        self.n_traces = 0
        self.bad = 0
        self.orphans = 0
        self._ids: dict[str, int] = {}
        self._refs: list[tuple[int, str]] = []

    def open_trace(self) -> int:
        """Start a trace: the spans added until the next call belong to it (and their parents)."""
        self.close_trace()
        self.n_traces += 1
        return self.n_traces - 1

    def close_trace(self) -> None:
        ids = self._ids
        for row, ref in self._refs:
            got = ids.get(ref, -1)
            self.parent[row] = got
            self.orphans += got < 0
        self._ids, self._refs = {}, []

    def add(self, sid: str, parent: str | None, follows: bool, start: int | None,
            dur: int | None, service: object, client: bool, op: str) -> None:
        if start is None or dur is None or dur < 0 or not isinstance(service, str) or not service:
            self.bad += 1
            return
        row = len(self.start)
        self._ids.setdefault(sid, row)
        if parent is not None:
            self._refs.append((row, parent))
        self.trace.append(self.n_traces - 1)
        self.parent.append(-1)
        self.follows.append(follows)
        self.start.append(start)
        self.end.append(start + dur)
        self.service.append(service)
        self.client.append(client)
        self.op.append(op)


# ----------------------------------------------------------------------------- Jaeger


def _listed(value: object) -> list:
    return value if isinstance(value, list) else []


def _jaeger_traces(doc: object) -> list[dict]:
    if isinstance(doc, dict) and isinstance(doc.get("data"), list):
        doc = doc["data"]
    elif isinstance(doc, dict) and "spans" in doc:
        doc = [doc]
    if not isinstance(doc, list):
        return []
    return [t for t in doc if isinstance(t, dict) and isinstance(t.get("spans"), list)]


def _jaeger_parent(refs: object) -> tuple[str | None, bool]:
    """(parent spanID, by FOLLOWS_FROM only) from a Jaeger span's references: the first CHILD_OF
    one, else the first FOLLOWS_FROM one."""
    follows = None
    for r in _listed(refs):
        if isinstance(r, dict) and "spanID" in r:
            kind = r.get("refType", "CHILD_OF")
            if kind == "CHILD_OF":
                return str(r["spanID"]), False
            if kind == "FOLLOWS_FROM" and follows is None:
                follows = str(r["spanID"])
    return follows, follows is not None


def _jaeger_client(tags: object) -> bool:
    for tag in _listed(tags):
        if isinstance(tag, dict) and tag.get("key") == "span.kind":
            return str(tag.get("value", "")) in CLIENT_KINDS
    return False


def jaeger_spans(doc: object, out: Spans) -> bool:
    """Add the spans of one Jaeger document (dicts and lists, any shape); False when it holds no
    traces."""
    traces = _jaeger_traces(doc)
    for tr in traces:
        raw = tr.get("processes")
        procs = {k: v.get("serviceName") for k, v in (raw.items() if isinstance(raw, dict) else ())
                 if isinstance(v, dict)}
        out.open_trace()
        for s in tr["spans"]:
            if not isinstance(s, dict) or "spanID" not in s:
                out.bad += 1
                continue
            pid = s.get("processID")
            service = procs.get(pid) if isinstance(pid, str) else None
            if service is None and isinstance(s.get("process"), dict):
                service = s["process"].get("serviceName")
            if service is None and isinstance(pid, str):
                service = pid
            parent, follows = _jaeger_parent(s.get("references"))
            out.add(str(s["spanID"]), parent, follows, whole(s.get("startTime"), 1000),
                    whole(s.get("duration"), 1000), service, _jaeger_client(s.get("tags")),
                    str(s.get("operationName", "")))
    out.close_trace()
    return bool(traces)


# The usual shape, decoded by msgspec without building the fields nobody reads (tags' other keys,
# logs, warnings): 10x Python's json on the artifact's exports. Any other shape falls back to
# json and jaeger_spans, which take whatever is there.
class _Tag(msgspec.Struct, gc=False):
    key: object = None
    value: object = None


class _Ref(msgspec.Struct, gc=False):
    refType: object = "CHILD_OF"      # noqa: N815 - Jaeger's names
    spanID: object = None             # noqa: N815


class _Span(msgspec.Struct, gc=False):
    spanID: object = None             # noqa: N815
    operationName: object = ""        # noqa: N815
    references: list[_Ref] = []
    startTime: object = None          # noqa: N815
    duration: object = None
    processID: object = None          # noqa: N815
    tags: list[_Tag] = []


class _Process(msgspec.Struct, gc=False):
    serviceName: object = None        # noqa: N815


class _Trace(msgspec.Struct, gc=False):
    spans: list[_Span]
    processes: dict[str, _Process] = {}


class _Doc(msgspec.Struct, gc=False):
    data: list[_Trace]


_DECODER = msgspec.json.Decoder(_Doc)


def jaeger_fast(data: bytes, out: Spans) -> bool:
    """Add the spans of one Jaeger export of the usual shape ({"data": [{"spans": [...], "processes":
    {...}}]}); False (nothing added) when it is not of that shape. Spans.add's checks, inlined: this
    loop is most of the import's own time."""
    try:
        doc = _DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return False
    ok = False
    lim = MAX_NS // 1000
    a_trace, a_parent, a_follows = out.trace.append, out.parent.append, out.follows.append
    a_start, a_end, a_service = out.start.append, out.end.append, out.service.append
    a_client, a_op = out.client.append, out.op.append
    for tr in doc.data:
        ok = True
        procs = {k: v.serviceName for k, v in tr.processes.items()}
        tid = out.open_trace()
        ids, refs = out._ids, out._refs
        row = len(out.start)
        for s in tr.spans:
            sid = s.spanID
            if sid is None:
                out.bad += 1
                continue
            parent = follows = None
            for r in s.references:
                if r.spanID is None:
                    continue
                if r.refType == "CHILD_OF":
                    parent = str(r.spanID)
                    break
                if r.refType == "FOLLOWS_FROM" and follows is None:
                    follows = str(r.spanID)
            by_follows = parent is None and follows is not None
            if by_follows:
                parent = follows
            pid = s.processID
            service = (procs.get(pid) or pid) if type(pid) is str else None
            st, du = s.startTime, s.duration
            start = st * 1000 if type(st) is int and 0 <= st < lim else whole(st, 1000)
            dur = du * 1000 if type(du) is int and 0 <= du < lim else whole(du, 1000)
            if start is None or dur is None or dur < 0 or type(service) is not str or not service:
                out.bad += 1
                continue
            client = False
            for t in s.tags:
                if t.key == "span.kind":
                    client = str(t.value) in CLIENT_KINDS
                    break
            ids.setdefault(str(sid), row)
            if parent is not None:
                refs.append((row, parent))
            a_trace(tid)
            a_parent(-1)
            a_follows(by_follows)
            a_start(start)
            a_end(start + dur)
            a_service(service)
            a_client(client)
            a_op(str(s.operationName))
            row += 1
    out.close_trace()
    return ok


# ----------------------------------------------------------------------------- OTLP


def _attr(attrs: object, key: str) -> object:
    for a in _listed(attrs):
        if isinstance(a, dict) and a.get("key") == key and isinstance(a.get("value"), dict):
            return next(iter(a["value"].values()), None)
    return None


def otlp_spans(doc: object, out: Spans) -> bool:
    """Add the spans of one OTLP JSON document (ExportTraceServiceRequest / TracesData: resourceSpans
    -> scopeSpans (or instrumentationLibrarySpans) -> spans), grouped by traceId within the
    document. False when it holds no resourceSpans."""
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
        return False
    by_trace: dict[str, list[tuple[object, dict]]] = {}
    for rs in doc["resourceSpans"]:
        if not isinstance(rs, dict):
            continue
        resource = rs.get("resource")
        service = _attr(resource.get("attributes") if isinstance(resource, dict) else None, "service.name")
        for ss in _listed(rs.get("scopeSpans")) + _listed(rs.get("instrumentationLibrarySpans")):
            for s in _listed(ss.get("spans") if isinstance(ss, dict) else None):
                if not isinstance(s, dict) or not s.get("spanId") or not s.get("traceId"):
                    out.bad += 1
                    continue
                by_trace.setdefault(str(s["traceId"]), []).append((service, s))
    for spans in by_trace.values():
        out.open_trace()
        for service, s in spans:
            start, end = whole(s.get("startTimeUnixNano"), 1), whole(s.get("endTimeUnixNano"), 1)
            parent = s.get("parentSpanId") or None
            out.add(str(s["spanId"]), None if parent is None else str(parent), False, start,
                    None if start is None or end is None else end - start, service,
                    str(s.get("kind")) in CLIENT_KINDS, str(s.get("name", "")))
    out.close_trace()
    return True


# ----------------------------------------------------------------------------- spans -> trace


def _break_cycles(parent: np.ndarray, start: np.ndarray) -> int:
    """Make the earliest span of each parent-link cycle a root, in place; the number of cycles."""
    n = len(parent)
    anc = parent.copy()
    for _ in range(max(1, int(np.ceil(np.log2(n + 1)))) + 1):     # 2^k-th ancestors
        anc = np.where(anc >= 0, anc[np.maximum(anc, 0)], -1)
    cycles = 0
    for i in np.flatnonzero(anc >= 0).tolist():     # in a cycle or under one (rare: walked one by one)
        seen, j = [], i
        while j >= 0 and j not in seen:
            seen.append(j)
            j = int(parent[j])
        if j >= 0:                                  # j is on a cycle: cut it at its earliest span
            ring = seen[seen.index(j):]
            cut = min(ring, key=lambda k: (start[k], k))
            parent[cut] = -1
            cycles += 1
    return cycles


def trace_from_spans(spans: Spans, source: str, warnings: list[str]) -> Trace:
    """The Trace of the spans read (module docstring)."""
    n = len(spans.start)
    if n == 0:
        raise UserError(f"{source}: no spans to make messages of")
    trace = np.asarray(spans.trace, dtype=np.int64)
    parent = np.asarray(spans.parent, dtype=np.int64)
    orphans = spans.orphans
    follows = np.asarray(spans.follows, dtype=bool) & (parent >= 0)
    start, end = np.asarray(spans.start, dtype=np.int64), np.asarray(spans.end, dtype=np.int64)
    cycles = _break_cycles(parent, start)
    svc_codes, services = pd.factorize(np.asarray(spans.service, dtype=object))
    client = np.asarray(spans.client, dtype=bool)
    # the entry span of each span: itself when called from another service (or a root), else its
    # parent's entry (the parent links hold no cycle now: this settles within the deepest chain)
    inside = (parent >= 0) & (svc_codes[np.maximum(parent, 0)] == svc_codes)
    entry = np.arange(n)
    while True:
        nxt = np.where(inside, entry[np.maximum(parent, 0)], entry)
        if np.array_equal(nxt, entry):
            break
        entry = nxt
    called = np.flatnonzero(~inside)                # a call and a return each
    p = parent[called]
    root = p < 0
    pc = np.maximum(p, 0)
    by_client = ~root & client[pc]
    c_send = np.where(by_client, start[pc], start[called])
    r_recv = np.where(by_client, end[pc], end[called])
    names = np.asarray(list(services) + ["client"], dtype=object)
    caller = np.where(root, len(services), svc_codes[pc])
    callee = svc_codes[called]
    # contexts (entry spans) on each side; the client's own, one per root, beyond the spans
    caller_ctx = np.where(root, n + called, entry[pc])
    k = len(called)
    base = int(min(start.min(), end.min()) // 1_000_000_000)
    t_send = np.concatenate([c_send, end[called]]) - base * 1_000_000_000
    t_recv = np.concatenate([start[called], r_recv]) - base * 1_000_000_000
    src, dst = np.concatenate([caller, callee]), np.concatenate([callee, caller])
    kind = np.repeat(np.array([0, 1], dtype=np.int8), k)            # call, return
    # in time order, a call before a return sent at the same ns (their names' order)
    order = np.lexsort((kind, t_send))
    t_send, t_recv, src, dst, kind = t_send[order], t_recv[order], src[order], dst[order], kind[order]
    # ids stripped: the pairing id is renumbered in time order, carrying nothing of the spans
    msg = pd.factorize(np.tile(np.arange(k), 2)[order])[0].astype(np.int64)
    request = np.tile(trace[called], 2)[order]
    cause = scoped_causes_arrays(t_send, t_recv, np.concatenate([caller_ctx, called])[order],
                                 np.concatenate([called, caller_ctx])[order])
    types = {}
    root_rows = np.flatnonzero(root)
    for t, o in zip(trace[called[root_rows]].tolist(), np.asarray(spans.op, dtype=object)[called[root_rows]].tolist(),
                    strict=True):
        types.setdefault(t, o)
    # the model's frame made from codes (what model.as_messages makes of the names, sorted by time
    # already: categories the sorted names in use, one per distinct name)
    used = np.zeros(len(names), dtype=bool)
    used[src] = used[dst] = True
    cats = np.unique(names[used].astype(str))
    code = np.searchsorted(cats, names.astype(str))
    nodes = pd.CategoricalDtype(pd.Index(cats, dtype="str"))
    messages = pd.DataFrame({
        "t_send": t_send / 1e9, "t_recv": t_recv / 1e9,        # seconds since `base`: equal ns stay equal
        "src": pd.Categorical.from_codes(code[src], dtype=nodes),
        "dst": pd.Categorical.from_codes(code[dst], dtype=nodes),
        "kind": pd.Categorical.from_codes(kind, dtype=pd.CategoricalDtype(pd.Index(["call", "return"], dtype="str"))),
        "msg": msg})
    if spans.bad:
        warnings.append(f"{_plural(spans.bad, 'span')} without spanID, start, duration or service, or with a "
                        "time out of range or not whole (a 400-digit time) or a negative duration; left out")
    if orphans:
        warnings.append(f"{_plural(orphans, 'span')} whose parent is not in the export; taken as roots "
                        "(called by `client`)")
    if follows.any():
        warnings.append(f"{_plural(int(follows.sum()), 'span')} linked by FOLLOWS_FROM only; taken as called "
                        "by the span they follow (an asynchronous call)")
    if cycles:
        warnings.append(f"{_plural(cycles, 'cycle')} in the parent links; each broken at its earliest span, "
                        "taken as a root")
    truth = Truth(request=request, cause=cause, request_type=types)
    return Trace(messages=messages, truth=truth, warnings=warnings, source=source, time_base=base)


def scoped_causes(frame: pd.DataFrame) -> np.ndarray:
    """Per message (frame rows: t_send, t_recv integer, send_ctx, recv_ctx), the row of the latest
    message received in its sending context at or before its send (-1: none)."""
    return scoped_causes_arrays(*(frame[c].to_numpy() for c in ("t_send", "t_recv", "send_ctx", "recv_ctx")))


def scoped_causes_arrays(t_send: np.ndarray, t_recv: np.ndarray, send_ctx: np.ndarray,
                         recv_ctx: np.ndarray) -> np.ndarray:
    """scoped_causes of the columns (integer times and contexts): of the messages received in the
    same context at or before the send, the latest; of equal receive times, the last row (as
    pandas.merge_asof(direction="backward") takes it). One sort of (context, time, row) and a
    binary search per message; the key is context * span + time where that fits in int64 (an
    export's times span seconds to days), else context * width + the time's rank."""
    n = len(t_send)
    lo = min(int(t_recv.min(initial=0)), int(t_send.min(initial=0)))
    width = max(int(t_recv.max(initial=0)), int(t_send.max(initial=0))) - lo + 1
    top = max(int(recv_ctx.max(initial=0)), int(send_ctx.max(initial=0))) + 1
    if min(int(recv_ctx.min(initial=0)), int(send_ctx.min(initial=0))) >= 0 and top * width < 2**62:
        got = recv_ctx.astype(np.int64) * width + (t_recv - lo)
        want = send_ctx.astype(np.int64) * width + (t_send - lo)
    else:
        _, rank = np.unique(np.concatenate([t_recv, t_send]), return_inverse=True)
        width = n * 2 + 1
        got = recv_ctx.astype(np.int64) * width + rank[:n]
        want = send_ctx.astype(np.int64) * width + rank[n:]
    by = np.argsort(got, kind="stable")       # ties in row order
    keys = got[by]
    at = np.searchsorted(keys, want, side="right") - 1
    hit = (at >= 0) & (keys[np.maximum(at, 0)] // width == send_ctx)
    cause = np.where(hit, by[np.maximum(at, 0)], -1).astype(np.int64)
    cause[cause == np.arange(n)] = -1
    return cause


def _read(path, what: str, fast, parse) -> Trace:
    from pathlib import Path

    path = Path(path)
    warnings: list[str] = []
    spans = Spans()
    read_any = False
    for file, data in export_bytes(path, what, warnings):
        if fast is not None and fast(data, spans):
            read_any = True
            continue
        doc = loads(file, data, warnings)
        if doc is None:
            continue
        if parse(doc, spans):
            read_any = True
        else:
            warnings.append(f"{file.name}: no {what} traces; skipped")
    if not read_any:
        raise UserError(f"{path}: no readable {what} (" + "; ".join(warnings)[:200] + ")")
    return trace_from_spans(spans, str(path), warnings)


@without_gc
def read_jaeger(path) -> Trace:
    """A Jaeger JSON export (`{"data": [trace, ...]}`, a list of traces or one trace), file or directory."""
    return _read(path, "Jaeger export", jaeger_fast, jaeger_spans)


@without_gc
def read_otlp(path) -> Trace:
    """An OpenTelemetry OTLP JSON export (`{"resourceSpans": [...]}`), file or directory."""
    return _read(path, "OTLP JSON export", None, otlp_spans)
