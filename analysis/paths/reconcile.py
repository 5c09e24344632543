"""Trace reconciliation (WAP5 section 4): per-process send and receive events to logical messages.

Input, one row per completed socket call of a traced process, as the service lab's `messages`
table records them (issue 33 item 3; LibSockCap's records, WAP5 table 1):

    column   meaning
    mono     the host's CLOCK_MONOTONIC time of the call's completion (s)
    host     the host the process runs on
    pid      process id (fd: file descriptor, not needed; tid: thread id, optional: when any event
             has one, each message keeps its sender's and receiver's thread as `src_thread` and
             `dst_thread`, -1 where unknown, for linking at thread granularity)
    call     the socket call: send, write, writev, sendmsg, sendto, sendfile (a send) or recv, read,
             readv, recvmsg, recvfrom (a receive); or a column `dir` with "send"/"recv"
    bytes    bytes the call moved (a receive of 0 bytes, end of stream, is ignored)
    local    the socket's own endpoint ("10.0.0.2:8080", or a Unix path made unique per end)
    remote   the peer's endpoint

Output (`reconcile`): the model's messages frame (t_send, t_recv, src, dst, kind, msg) plus the
reconciliation's own columns (src_endpoint, dst_endpoint, bytes, and t_send_last: the time of the
message's last send, which a fat message's first send, t_send, may precede by a whole request: a
memcached `set` with noreply, then the next `get` on the connection), and warnings with counts.

How (the choices where WAP5 leaves room):

- A *connection* is the pair of endpoints; each traced end of it is a *side*. A node is the side's
  host (`granularity="process"`: host/pid), renamed through `nodes` (host or endpoint -> name) if
  given. An end nobody traced is named through `nodes` by its endpoint or address, else by its
  address (warned: the algorithms then see an extra node).
- Fat messages: the bytes one side sends between two of its receives on that connection make one
  logical message (WAP5: "we combine adjacent messages in a flow into a single large message");
  t_send is its first send. Where events carry a thread, sends are adjacent only when their
  thread made no other socket call in between: a memcached `set` with noreply (no answer) and the
  next request's `get` on the connection, 70-110 ms later with the thread's other calls between,
  are two messages (merged, they made 570 and 620 orphan `app>cache` calls on the stored service
  runs, sent when the set was, answered when the get was). Its t_recv is the time of the receive, at the other side, that
  delivers its last byte (cumulative bytes per direction, so the reader's chunking does not
  matter). A message whose last byte no receive delivers (the receiver untraced, or its events
  lost) has t_recv NaN (WAP5's nil).
- Call/return pairing: on each connection the *server* end is the one whose endpoint takes part in
  more connections (WAP5's fixed port; ties: the end that did not send first). Each message from
  the client end is a call; the server's next message on the connection (in the server's own
  clock: the call's t_recv, the return's t_send) is its return, and they share a msg id. A call
  with no reply before the next call, or a server message answering no call, stays unpaired
  (kind "", msg -1) and is counted in the warnings.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from analysis.paths.model import as_messages

SEND_CALLS = frozenset({"send", "write", "writev", "sendmsg", "sendto", "sendfile", "sendmmsg"})
RECV_CALLS = frozenset({"recv", "read", "readv", "recvmsg", "recvfrom", "recvmmsg"})
EVENT_COLUMNS = ("mono", "host", "pid", "call", "bytes", "local", "remote")
EXTRA_COLUMNS = ("src_endpoint", "dst_endpoint", "bytes", "t_send_last")   # reconcile's own, beside the model's


class ReconcileError(ValueError):
    """Input the reconciliation cannot read at all (a column missing): one line."""


def _address(endpoint: str) -> str:
    return endpoint.rsplit(":", 1)[0] if ":" in endpoint and not endpoint.startswith("/") else endpoint


def _plural(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def reconcile(events: pd.DataFrame, nodes: Mapping[str, str] | None = None,
              granularity: str = "host") -> tuple[pd.DataFrame, list[str]]:
    """Logical messages (the model's frame plus src_endpoint, dst_endpoint, bytes) and warnings."""
    nodes = dict(nodes or {})
    warnings: list[str] = []
    missing = [c for c in EVENT_COLUMNS if c not in events and not (c == "call" and "dir" in events)]
    if missing:
        raise ReconcileError(f"events: no column {', '.join(missing)} (expected {', '.join(EVENT_COLUMNS)})")
    ev = _clean(events, warnings)
    if ev.empty:
        return _empty(), warnings

    # the side: one traced end of a connection
    if granularity == "process":
        side_node = ev["host"].astype(str) + "/" + ev["pid"].astype(str)
    else:
        side_node = ev["host"].astype(str)
    host_codes, hosts = pd.factorize(side_node)
    ev["node"] = np.array([nodes.get(h, h) for h in hosts], dtype=object)[host_codes]
    # threads: (host, pid, tid) as a number, -1 where the event has no tid (kept only when some has)
    threaded = "tid" in ev and bool(pd.to_numeric(ev["tid"], errors="coerce").notna().any())
    if threaded:
        tid = pd.to_numeric(ev["tid"], errors="coerce")
        key = ev["host"].astype(str) + "/" + ev["pid"].astype(str) + "/" + tid.astype(str)
        ev["thread"] = np.where(tid.notna(), pd.factorize(key)[0], -1).astype(np.int64)
    else:
        ev["thread"] = np.int64(-1)
    # endpoints as integer codes from here on (names: ep_names[code]); strings are slow in bulk
    n = len(ev)
    codes, ep_names = pd.factorize(pd.concat([ev["local"], ev["remote"]], ignore_index=True))
    ep_names = np.asarray(ep_names, dtype=object)
    ev["local"], ev["remote"] = codes[:n].astype(np.int64), codes[n:].astype(np.int64)
    width = np.int64(len(ep_names))
    lo, re = ev["local"].to_numpy(), ev["remote"].to_numpy()
    ev["conn"] = pd.factorize(np.minimum(lo, re) * width + np.maximum(lo, re))[0]
    if threaded:    # each thread's own sequence of socket calls
        ev["seq"] = ev.sort_values("mono", kind="stable").groupby("thread", sort=False).cumcount()
    ev = ev.sort_values(["conn", "local", "mono"], kind="stable").reset_index(drop=True)

    # runs: a side's consecutive calls in one direction
    side_change = (ev["conn"].ne(ev["conn"].shift()) | ev["local"].ne(ev["local"].shift()))
    run_start = side_change | ev["send"].ne(ev["send"].shift())
    if threaded:
        # a send its thread did not make right after its previous send on this side (it received
        # or sent on another socket in between) starts a message of its own
        thread = ev["thread"].to_numpy()
        gap = (ev["seq"].diff().to_numpy() > 1) & (thread >= 0) & (thread == np.r_[-2, thread[:-1]])
        run_start = run_start | (ev["send"].to_numpy() & gap)
    ev["run"] = run_start.cumsum() - 1
    sends = ev[ev["send"]]
    msgs = sends.groupby("run", sort=False).agg(
        t_send=("mono", "first"), t_send_last=("mono", "last"), bytes=("bytes", "sum"), src=("node", "first"),
        src_endpoint=("local", "first"), dst_endpoint=("remote", "first"), conn=("conn", "first"),
        src_thread=("thread", "first"))
    msgs = msgs.reset_index(drop=True)
    msgs["end_byte"] = msgs.groupby(["conn", "src_endpoint"], sort=False)["bytes"].cumsum()

    # receive times: the receive at the other end whose cumulative bytes reach the message's last byte
    recvs = ev[~ev["send"]].copy()
    recvs["cum"] = recvs.groupby(["local", "remote"], sort=False)["bytes"].cumsum()
    m_flow = msgs["src_endpoint"].to_numpy() * width + msgs["dst_endpoint"].to_numpy()
    r_flow = recvs["remote"].to_numpy() * width + recvs["local"].to_numpy()
    order = np.lexsort((recvs["cum"].to_numpy(), r_flow))
    r_flow_s, r_cum_s = r_flow[order], recvs["cum"].to_numpy()[order]
    r_time_s = recvs["mono"].to_numpy()[order]
    r_node_s = recvs["node"].to_numpy()[order]
    r_thread_s = recvs["thread"].to_numpy()[order]
    # one sorted key per (flow, cumulative byte): the flow's rank, then bytes (exact in float64)
    flows = np.unique(np.r_[r_flow, m_flow])
    scale = float(max(msgs["end_byte"].max(), recvs["cum"].max() if len(recvs) else 0) + 1)
    key_r = np.searchsorted(flows, r_flow_s) * scale + r_cum_s
    key_m = np.searchsorted(flows, m_flow) * scale + msgs["end_byte"].to_numpy()
    idx = np.searchsorted(key_r, key_m, side="left")
    ok = idx < len(key_r)
    ok[ok] = r_flow_s[idx[ok]] == m_flow[ok]
    msgs["t_recv"] = np.where(ok, r_time_s[np.minimum(idx, max(len(key_r) - 1, 0))] if len(key_r) else np.nan,
                              np.nan)
    dst = np.where(ok, r_node_s[np.minimum(idx, max(len(key_r) - 1, 0))] if len(key_r) else None, None)
    # the receiver's thread: the one whose read delivered the message's last byte
    msgs["dst_thread"] = np.where(ok, r_thread_s[np.minimum(idx, max(len(key_r) - 1, 0))] if len(key_r) else -1,
                                  -1).astype(np.int64)
    unseen = ~ok
    if unseen.any():
        # the receiving end: its node from any event there, else from `nodes`, else its address
        names, unknown = _names(msgs["dst_endpoint"][unseen].to_numpy(), owner_of(ev), ep_names, nodes)
        dst[unseen] = names
        warnings.append(f"{_plural(int(unseen.sum()), 'message')} with no receive seen (receiver untraced "
                        "or its events lost): t_recv unknown")
        if unknown:
            first = sorted(unknown)[0]
            warnings.append(f"{_plural(len(unknown), 'endpoint')} no traced process owns and `nodes` does not "
                            f"name (first: {first}): named by address")
    msgs["dst"] = dst
    msgs = _receive_only(msgs, recvs, width, ev, ep_names, nodes, warnings)
    _pair(msgs, ev, warnings)
    msgs["src_endpoint"] = ep_names[msgs["src_endpoint"].to_numpy()]
    msgs["dst_endpoint"] = ep_names[msgs["dst_endpoint"].to_numpy()]
    cols = ["t_send", "t_recv", "src", "dst", "kind", "msg"]
    out = as_messages(msgs[cols + ["src_thread", "dst_thread"] if threaded else cols])
    extra = msgs.sort_values("t_send", kind="stable").reset_index(drop=True)
    for c in EXTRA_COLUMNS:
        out[c] = extra[c].to_numpy()
    return out, warnings


def owner_of(ev: pd.DataFrame) -> dict[int, str]:
    """endpoint code -> node, for the endpoints some traced process uses as its own."""
    pairs = ev[["local", "node"]].drop_duplicates("local")
    return dict(zip(pairs["local"].tolist(), pairs["node"].tolist(), strict=True))


def _names(codes: np.ndarray, owner: dict[int, str], ep_names: np.ndarray,
           nodes: Mapping[str, str]) -> tuple[list[str], set[str]]:
    """The nodes of endpoints (codes): the traced process's, else `nodes` by endpoint or address,
    else the address (those endpoints returned as unknown)."""
    names, unknown = [], set()
    for c in codes.tolist():
        ep = ep_names[c]
        name = owner.get(c) or nodes.get(ep) or nodes.get(_address(ep))
        if name is None:
            unknown.add(ep)
            name = _address(ep)
        names.append(name)
    return names, unknown


def _receive_only(msgs: pd.DataFrame, recvs: pd.DataFrame, width: np.int64, ev: pd.DataFrame,
                  ep_names: np.ndarray, nodes: Mapping[str, str], warnings: list[str]) -> pd.DataFrame:
    """Messages only their receiver traced (WAP5: the sender's time nil): one per run of receives on a
    flow with no send seen at all, its t_send taken as its t_recv (the last receive)."""
    sent = msgs["src_endpoint"].to_numpy() * width + msgs["dst_endpoint"].to_numpy()
    flow = recvs["remote"].to_numpy() * width + recvs["local"].to_numpy()
    lone = recvs[~np.isin(flow, sent)]
    if lone.empty:
        return msgs
    runs = lone.groupby("run", sort=False).agg(
        t_recv=("mono", "last"), bytes=("bytes", "sum"), dst=("node", "first"),
        src_endpoint=("remote", "first"), dst_endpoint=("local", "first"), conn=("conn", "first"),
        dst_thread=("thread", "last"))
    runs["t_send"] = runs["t_send_last"] = runs["t_recv"]
    runs["src_thread"] = np.int64(-1)
    runs["src"] = _names(runs["src_endpoint"].to_numpy(), owner_of(ev), ep_names, nodes)[0]
    warnings.append(f"{_plural(len(runs), 'message')} whose sender was not traced (only its receive seen): "
                    "its send time taken as its receive time")
    return pd.concat([msgs, runs.reset_index(drop=True)], ignore_index=True)


def _clean(events: pd.DataFrame, warnings: list[str]) -> pd.DataFrame:
    ev = events.copy()
    if "dir" in ev and "call" not in ev:
        ev["call"] = ev["dir"].map({"send": "send", "recv": "recv"})
    call = ev["call"].astype(str).str.lower()
    ev["send"] = call.isin(SEND_CALLS)
    known = ev["send"] | call.isin(RECV_CALLS)
    ev["mono"] = pd.to_numeric(ev["mono"], errors="coerce")
    ev["bytes"] = pd.to_numeric(ev["bytes"], errors="coerce")
    for c in ("local", "remote"):
        ev[c] = ev[c].where(ev[c].notna(), "").astype(str)
    bad = ~known | ev["mono"].isna() | ~np.isfinite(ev["mono"]) | ev["bytes"].isna() | (ev["bytes"] < 0) \
        | (ev["local"] == "") | (ev["remote"] == "")
    if bad.any():
        first = ev.index[bad.to_numpy()][0]
        warnings.append(f"events: {_plural(int(bad.sum()), 'row')} with an unknown call, a time or byte count "
                        f"that is not a number, or no endpoint (first: row {first}); left out")
    eof = ~bad & ~ev["send"] & (ev["bytes"] == 0)
    return ev[~bad & ~eof].reset_index(drop=True)


def _pair(msgs: pd.DataFrame, ev: pd.DataFrame, warnings: list[str]) -> None:
    """kind and msg: call/return pairs per connection (see the module's docstring)."""
    # the server end: its endpoint in more connections; ties go to the end that did not send first
    conns_per_ep = pd.concat([ev[["local", "conn"]].rename(columns={"local": "ep"}),
                              ev[["remote", "conn"]].rename(columns={"remote": "ep"})]
                             ).drop_duplicates().groupby("ep").size()   # ep: endpoint codes
    first_sender = msgs.sort_values("t_send", kind="stable").groupby("conn")["src_endpoint"].first()
    src_deg = msgs["src_endpoint"].map(conns_per_ep).fillna(0).to_numpy()
    dst_deg = msgs["dst_endpoint"].map(conns_per_ep).fillna(0).to_numpy()
    from_client = np.where(src_deg != dst_deg, src_deg < dst_deg,
                           msgs["src_endpoint"].to_numpy() == msgs["conn"].map(first_sender).to_numpy())
    # the server's clock: a call's arrival there, a return's departure
    server_time = np.where(from_client, msgs["t_recv"].to_numpy(), msgs["t_send"].to_numpy())
    server_time = np.where(np.isnan(server_time), msgs["t_send"].to_numpy(), server_time)
    order = np.lexsort((~from_client, server_time, msgs["conn"].to_numpy()))
    conn = msgs["conn"].to_numpy()[order]
    fc = from_client[order]
    same_conn_next = np.r_[conn[1:] == conn[:-1], False]
    nxt_server = np.r_[~fc[1:], False]
    is_call = fc & same_conn_next & nxt_server
    is_return = np.r_[False, is_call[:-1]]
    kind = np.full(len(msgs), "", dtype=object)
    msg = np.full(len(msgs), -1, dtype=np.int64)
    calls_at = np.flatnonzero(is_call)
    kind[order[calls_at]] = "call"
    kind[order[calls_at + 1]] = "return"
    msg[order[calls_at]] = np.arange(len(calls_at))
    msg[order[calls_at + 1]] = np.arange(len(calls_at))
    msgs["kind"], msgs["msg"] = kind, msg
    n_calls, n_server = int(fc.sum()), int((~fc).sum())
    if n_calls > len(calls_at):
        warnings.append(f"{_plural(n_calls - len(calls_at), 'call')} with no return on the connection "
                        "before the next call (or the end): left unpaired")
    if n_server > int(is_return.sum()):
        warnings.append(f"{_plural(n_server - int(is_return.sum()), 'server message')} answering no call: "
                        "left unpaired")


def _empty() -> pd.DataFrame:
    out = as_messages(pd.DataFrame({c: [] for c in ("t_send", "t_recv", "src", "dst", "kind", "msg")}))
    for c in ("src_endpoint", "dst_endpoint"):
        out[c] = pd.Series([], dtype=object)
    out["bytes"] = pd.Series([], dtype="float64")
    out["t_send_last"] = pd.Series([], dtype="float64")
    return out
