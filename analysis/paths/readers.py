"""Traces from elsewhere, into the model's Trace: a plain message trace (CSV or Parquet, Project5's
input), a Jaeger JSON export, and a run directory's `messages` table (docs/blackbox.md).

Damaged input (rows whose time is not a number, a sender or receiver missing, times out of order,
a CSV cut short, a span without its fields) gives warnings with counts and a trace of the rest;
what cannot be read at all (no file, not CSV/Parquet/JSON, no usable row) is a UserError: one line.

**Plain trace** (`read_trace_file`): one row per message; column names are matched case-blind with
these aliases (first found wins):

    t_send   time, timestamp, ts, t_send, send_time       seconds (numbers) or date-times
    src      sender, src, from, source
    dst      receiver, dst, to, destination
    t_recv   t_recv, recv_time, receive_time              optional
    kind     kind, tag, type, call_return                 optional: call/CALL/req/request,
                                                          return/RET/ret/reply/response, else ""
    msg      msg, msg_id, message_id, callid, call_id, id optional: pairs a call with its return
    request, cause                                        optional truth (write_trace writes them):
                                                          request id (-1 none) and the row (0-based,
                                                          in the file) of the causing message (-1)
    src_thread, dst_thread (or sender_thread,          optional, both: the sender's and receiver's
    receiver_thread)                                      thread (any value, e.g. pid/tid; empty or -1:
                                                          unknown), for linking at thread granularity

**Span exports** (`read_jaeger`, `read_otlp`: Jaeger JSON and OpenTelemetry OTLP JSON) are read by
spans.py, whose docstring says how spans become messages and the truth.
"""

from __future__ import annotations

import csv
import stat
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.paths.hops import last_send_times, message_requests, unmatched_summary
from analysis.paths.model import Trace, Truth, as_messages, has_threads
from analysis.paths.reconcile import ReconcileError, reconcile
from analysis.paths.spans import read_jaeger, read_otlp  # noqa: F401 - the readers' names for them
from rundir.errors import UserError
from rundir.repair import as_dict
from rundir.traces import read_trace_tables

ALIASES = {
    "t_send": ("time", "timestamp", "ts", "t_send", "send_time"),
    "src": ("sender", "src", "from", "source"),
    "dst": ("receiver", "dst", "to", "destination"),
    "t_recv": ("t_recv", "recv_time", "receive_time"),
    "kind": ("kind", "tag", "type", "call_return"),
    "msg": ("msg", "msg_id", "message_id", "callid", "call_id", "id"),
    "request": ("request",),
    "cause": ("cause",),
    "src_thread": ("src_thread", "sender_thread"),
    "dst_thread": ("dst_thread", "receiver_thread"),
}
KIND_WORDS = {"call": "call", "req": "call", "request": "call", "c": "call",
              "return": "return", "ret": "return", "reply": "return", "response": "return", "r": "return",
              "": ""}


def _plural(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


# ----------------------------------------------------------------------------- plain traces


def _read_table(path: Path, warnings: list[str]) -> pd.DataFrame:
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path}: a directory, not a trace file (CSV or Parquet)")
    if not stat.S_ISREG(path.stat().st_mode):     # a FIFO would block the read; a device would never end
        raise UserError(f"{path}: not a regular file (a FIFO, device or socket); give a trace file")
    if path.suffix.lower() in (".parquet", ".pq"):
        try:
            return pd.read_parquet(path)
        except Exception as e:   # noqa: BLE001 - pyarrow raises many kinds for a damaged file
            raise UserError(f"{path}: cannot be read as Parquet: {' '.join(str(e).split())[:160]}") from None
    try:
        return pd.read_csv(path, keep_default_na=False, skipinitialspace=True, low_memory=False)
    except pd.errors.EmptyDataError:
        raise UserError(f"{path}: empty (no header, no rows)") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text (CSV) file; give a .csv or .parquet trace") from None
    except pd.errors.ParserError as first_error:
        # rows with the wrong number of fields: read again, leaving them out (counted)
        bad: list[list[str]] = []
        try:
            frame = pd.read_csv(path, keep_default_na=False, skipinitialspace=True, engine="python",
                                on_bad_lines=lambda line: bad.append(line) and None)
        except (pd.errors.ParserError, csv.Error, ValueError) as e:
            text = " ".join(str(e or first_error).split())[:160]
            raise UserError(f"{path}: not a readable CSV trace: {text}") from None
        shown = f" (first: {','.join(bad[0])[:60]!r})" if bad else ""
        warnings.append(f"{path.name}: {_plural(len(bad), 'line')} with the wrong number of fields{shown}; "
                        "left out")
        return frame


def _pick(frame: pd.DataFrame, field: str) -> str | None:
    lower = {str(c).strip().lower(): c for c in frame.columns}
    for alias in ALIASES[field]:
        if alias in lower:
            return lower[alias]
    return None


def _ints(values: pd.Series) -> pd.Series:
    """Whole numbers as int64; anything else (text, fractions, inf, beyond int64) -1."""
    num = pd.to_numeric(values, errors="coerce").astype("float64")
    ok = np.isfinite(num) & (num == np.round(num)) & (num.abs() < 2**62)
    return pd.Series(np.where(ok, num.fillna(-1), -1).astype("int64"), index=values.index)


def _text(values: pd.Series) -> pd.Series:
    """Stripped text whatever the column's type (categorical, numbers, missing values: "")."""
    obj = values.astype(object)
    return obj.where(obj.notna(), "").astype(str).str.strip()


def _times(values: pd.Series) -> pd.Series:
    num = pd.to_numeric(values, errors="coerce")
    if num.notna().any() or values.empty:
        return num.astype("float64")
    dt = pd.to_datetime(values, errors="coerce", utc=True, format="ISO8601")
    if dt.isna().all():
        dt = pd.to_datetime(values, errors="coerce", utc=True, format="mixed")
    return (dt - pd.Timestamp(0, tz="UTC")).dt.total_seconds()


def read_trace_file(path: str | Path) -> Trace:
    """A CSV or Parquet message trace (the module's docstring)."""
    path = Path(path)
    warnings: list[str] = []
    raw = _read_table(path, warnings)
    cols = {f: _pick(raw, f) for f in ALIASES}
    missing = [f"{f} ({'/'.join(ALIASES[f][:3])})" for f in ("t_send", "src", "dst") if cols[f] is None]
    if missing:
        raise UserError(f"{path}: no column for {', '.join(missing)}; found {', '.join(map(str, raw.columns))}")
    f = pd.DataFrame({"t_send": _times(raw[cols["t_send"]]),
                      "src": _text(raw[cols["src"]]), "dst": _text(raw[cols["dst"]])})
    f["t_recv"] = _times(raw[cols["t_recv"]]) if cols["t_recv"] else np.nan
    if cols["kind"]:
        words = _text(raw[cols["kind"]]).str.lower()
        f["kind"] = words.map(KIND_WORDS)
        f["word"] = words
    if cols["msg"]:
        ids = pd.to_numeric(raw[cols["msg"]], errors="coerce")
        f["msg"] = (_ints(raw[cols["msg"]]) if ids.notna().all()
                    else pd.Series(pd.factorize(_text(raw[cols["msg"]]).replace("", None))[0],
                                   index=raw.index))
    if cols["src_thread"] and cols["dst_thread"]:
        # threads as numbers or names (e.g. pid/tid): a number per distinct value, the same in both
        # columns (a thread sends and receives), -1 where empty
        text = pd.concat([_text(raw[cols[c]]) for c in ("src_thread", "dst_thread")], ignore_index=True)
        codes = pd.factorize(text.replace({"": None, "nan": None, "-1": None}))[0]
        f["src_thread"], f["dst_thread"] = codes[:len(raw)], codes[len(raw):]
    truth_cols = cols["request"] is not None and cols["cause"] is not None
    if truth_cols:
        f["request"] = _ints(raw[cols["request"]])
        f["cause"] = _ints(raw[cols["cause"]])
    f["row"] = np.arange(len(f))
    bad = f["t_send"].isna() | ~np.isfinite(f["t_send"].fillna(0)) | f["src"].isin(["", "nan"]) \
        | f["dst"].isin(["", "nan"])
    if bad.any():
        first = int(np.flatnonzero(bad.to_numpy())[0]) + 2   # the file's line: a header, 1-based
        warnings.append(f"{path.name}: {_plural(int(bad.sum()), 'row')} with a time that is not a number or "
                        f"no sender or receiver (first: line {first}); left out")
        f = f[~bad]
    if f.empty:
        raise UserError(f"{path}: no usable message rows")
    if "word" in f:
        odd = f["kind"].isna()
        if odd.any():
            warnings.append(f"{path.name}: {_plural(int(odd.sum()), 'row')} whose {cols['kind']} is neither "
                            f"call nor return (first: {f['word'][odd].iloc[0]!r}); untagged")
        f["kind"] = f["kind"].fillna("")
        f = f.drop(columns="word")
    back = int((np.diff(f["t_send"].to_numpy()) < 0).sum())
    if back:
        warnings.append(f"{path.name}: {_plural(back, 'row')} earlier than the row before (times out of order); "
                        "sorted by time")
    f = f.sort_values("t_send", kind="stable").reset_index(drop=True)
    truth = None
    if truth_cols:
        new_row = np.full(len(raw), -1, dtype=np.int64)
        new_row[f["row"].to_numpy()] = np.arange(len(f))
        cause = f["cause"].to_numpy()
        ok = (cause >= 0) & (cause < len(raw))
        truth = Truth(request=f["request"].to_numpy(),
                      cause=np.where(ok, new_row[np.where(ok, cause, 0)], -1))
    return Trace(messages=as_messages(f), truth=truth, warnings=warnings, source=str(path))


def write_trace(trace: Trace, path: str | Path) -> None:
    """The trace as CSV (or Parquet, by suffix) in read_trace_file's columns, truth included."""
    out = trace.messages[["t_send", "t_recv", "src", "dst", "kind", "msg"]].copy()
    out.columns = ["time", "t_recv", "sender", "receiver", "kind", "msg"]
    if has_threads(trace.messages):
        out["src_thread"] = trace.messages["src_thread"].to_numpy()
        out["dst_thread"] = trace.messages["dst_thread"].to_numpy()
    if trace.truth is not None:
        out["request"], out["cause"] = trace.truth.request, trace.truth.cause
    path = Path(path)
    if path.suffix.lower() in (".parquet", ".pq"):
        out.astype({"sender": str, "receiver": str, "kind": str}).to_parquet(path, index=False)
    else:
        out.to_csv(path, index=False, float_format="%.9f")


def read_faults_file(path: str | Path) -> pd.DataFrame:
    """Fault windows for a plain trace (CSV or Parquet): node (or target), start, stop (or end), in the
    trace's seconds; optionally extra_s and kind. What Trace.faults holds."""
    path = Path(path)
    warnings: list[str] = []
    raw = _read_table(path, warnings)
    lower = {str(c).strip().lower(): c for c in raw.columns}
    node = lower.get("node", lower.get("target"))
    start, stop = lower.get("start"), lower.get("stop", lower.get("end"))
    if node is None or start is None or stop is None:
        raise UserError(f"{path}: fault windows need the columns node, start and stop; found "
                        f"{', '.join(map(str, raw.columns))}")
    f = pd.DataFrame({"node": raw[node].astype(str).str.strip(),
                      "start": pd.to_numeric(raw[start], errors="coerce"),
                      "stop": pd.to_numeric(raw[stop], errors="coerce"),
                      "extra_s": pd.to_numeric(raw[lower["extra_s"]], errors="coerce")
                      if "extra_s" in lower else np.nan,
                      "kind": raw[lower["kind"]].astype(str) if "kind" in lower else ""})
    bad = f["start"].isna() | f["stop"].isna() | (f["stop"] <= f["start"]) | (f["node"] == "")
    if bad.any():
        first = int(np.flatnonzero(bad.to_numpy())[0]) + 2
        raise UserError(f"{path}: line {first}: a fault window needs a node and numbers start < stop")
    return f.reset_index(drop=True)


def write_faults(trace: Trace, path: str | Path) -> None:
    """Trace.faults as CSV, for read_faults_file (`nestlab paths --trace FILE --faults FAULTS`)."""
    if trace.faults is not None:
        trace.faults.to_csv(path, index=False)


# ----------------------------------------------------------------------------- causality convention


def latest_received_causes(messages: pd.DataFrame, request: np.ndarray) -> np.ndarray:
    """Per message, the row of the latest message its sender received for the same request at or
    before sending it (-1: none, or no request). t_recv NaN counts as t_send."""
    n = len(messages)
    if n == 0:
        return np.array([], dtype=np.int64)
    t_send = messages["t_send"].to_numpy()
    t_recv = messages["t_recv"].to_numpy()
    t_recv = np.where(np.isnan(t_recv), t_send, t_recv)
    src, dst = _shared_codes(messages)
    received = pd.DataFrame({"request": request, "node": dst, "t": t_recv, "cause": np.arange(n)})
    sent = pd.DataFrame({"request": request, "node": src, "t": t_send, "row": np.arange(n)})
    hit = pd.merge_asof(sent.sort_values("t", kind="stable"), received.sort_values("t", kind="stable"),
                        on="t", by=["request", "node"], direction="backward", allow_exact_matches=True)
    cause = np.full(n, -1, dtype=np.int64)
    cause[hit["row"].to_numpy()] = hit["cause"].fillna(-1).to_numpy().astype(np.int64)
    cause[cause == np.arange(n)] = -1
    return np.where(request >= 0, cause, -1).astype(np.int64)


def _shared_codes(messages: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    names = pd.Index(pd.unique(pd.concat([messages["src"].astype(str), messages["dst"].astype(str)])))
    return names.get_indexer(messages["src"].astype(str)), names.get_indexer(messages["dst"].astype(str))


# ----------------------------------------------------------------------------- run directories


def trace_from_events(events: pd.DataFrame, source: str, nodes: dict[str, str] | None = None,
                      warnings: list[str] | None = None, granularity: str = "host",
                      endpoints: bool = False) -> Trace:
    """A trace of reconciled per-process events (reconcile's input frame), no truth; `endpoints`:
    keep reconcile's src_endpoint, dst_endpoint and t_send_last columns (for truth_from_requests)."""
    warnings = list(warnings or [])
    try:
        messages, more = reconcile(events, nodes=nodes, granularity=granularity)
    except ReconcileError as e:
        raise UserError(f"{source}: {e}") from None
    warnings += more
    if messages.empty:
        raise UserError(f"{source}: no messages after reconciliation (no usable send or receive events)")
    gone = ["bytes"] if endpoints else ["src_endpoint", "dst_endpoint", "bytes", "t_send_last"]
    return Trace(messages=messages.drop(columns=gone), warnings=warnings, source=source)


def truth_from_requests(messages: pd.DataFrame, requests: pd.DataFrame | None,
                        warnings: list[str], granularity: str = "host") -> Truth | None:
    """The true request of each message from a service run's `requests` (one row per hop: request,
    type, tier, host, pid, start, end on the host's clock), joined by who timed each hop on which
    clock and on which connection (analysis/paths/hops.py: a caller-timed hop takes the messages its
    caller sent or received within it, a callee-timed hop the call/return pair that encloses it);
    causes by the latest-received convention. None without requests."""
    if requests is None or requests.empty:
        return None
    request, keys, hops = message_requests(messages, requests, warnings, granularity)
    missing = int((request < 0).sum())
    if missing:
        warnings.append(f"requests: {_plural(missing, 'message')} inside no request's hop (readiness checks, "
                        f"Unix channels, untraced far ends; most: {unmatched_summary(messages, request)}); "
                        "taken as noise in the truth")
    types = hops.drop_duplicates("key").set_index("key")["type"].astype(str)
    request_type = {i: str(types.get(k, "")) for i, k in enumerate(keys)}
    # causes and delays by each message's last send: a fat message's first send can be a whole
    # request earlier (hops.last_send_times)
    last = last_send_times(messages)
    cause = latest_received_causes(messages.assign(t_send=last), request)
    t_recv = messages["t_recv"].fillna(messages["t_send"]).to_numpy(dtype=float)
    node_delay = np.where(cause >= 0, last - t_recv[np.maximum(cause, 0)], np.nan)
    return Truth(request=request, cause=cause, request_type=request_type, node_delay=node_delay)


def fault_host(at_node: object, target: object) -> str | None:
    """The tier host a faults row acts on, the culprit the diagnosis question asks for: the target's
    `host` (delay, tier_pause, ip_drop and loss of a host record it; at_node is then the router the
    rule sits on, or the monitored host), else at_node; None for a fault of one connection (its
    target names a 4-tuple and no host: tcp_drop, a connection's loss), which blames no tier."""
    t = as_dict(target)
    if t.get("host"):
        return str(t["host"])
    if any(k in t for k in ("sport", "dport", "inode")):
        return None
    return None if at_node is None or at_node != at_node else str(at_node)


def faults_of_run(faults: pd.DataFrame) -> pd.DataFrame | None:
    """Trace.faults from a run's faults table: the node is the tier host the fault acts on
    (fault_host); rows of one fault on several modules (a delay on each worker of a monitored host)
    are one window; faults of one connection are left out (no tier to name)."""
    if faults is None or faults.empty:
        return None
    f = faults.copy()
    f["start"] = pd.to_numeric(f["start"], errors="coerce")
    f["stop"] = pd.to_numeric(f["end"], errors="coerce")
    f["node"] = [fault_host(a, t) for a, t in zip(f["at_node"], f["target"], strict=True)]
    f = f.dropna(subset=["start", "stop", "node"])
    if f.empty:
        return None
    out = pd.DataFrame({"node": f["node"].astype(str), "start": f["start"], "stop": f["stop"],
                        "extra_s": np.nan, "kind": f["kind"].astype(str)})
    return out.drop_duplicates(["node", "start", "stop"]).reset_index(drop=True)


def read_run(run: str | Path, granularity: str = "host") -> Trace:
    """A run directory's trace: its `messages` reconciled (nodes: hosts), the truth from its
    `requests` where it has them, the fault windows from its faults table. granularity "process":
    a node per host/pid (WAP5 2.5's choice)."""
    warnings: list[str] = []
    events, requests, faults = read_trace_tables(run, warnings)
    trace = trace_from_events(events, str(run), warnings=warnings, granularity=granularity, endpoints=True)
    # the connections settle messages inside two requests' hops (hops.py); the algorithms never see them
    trace.truth = truth_from_requests(trace.messages, requests, trace.warnings, granularity)
    trace.messages = trace.messages.drop(columns=["src_endpoint", "dst_endpoint", "t_send_last"])
    trace.faults = faults_of_run(faults)
    return trace
