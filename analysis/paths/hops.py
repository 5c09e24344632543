"""The true request of each message of a service run: run.db's `requests` (one row per hop: request,
type, tier, host, pid, start, end on the host's CLOCK_MONOTONIC, docs/service.md) joined to the
reconciled messages by who timed each hop, on which host's clock, and on which connection.

A hop's row names the host the hop is *at*, but not always the clock that timed it
(harness/service/paths.py):

    tier        timed by                               [start, end] brackets
    client      the load generator (the row's host)    its request sent .. its answer read
    cache, db   the app that called (the request's     the call sent .. its answer read
                `app` hop's host; the row's host is
                the called daemon's)
    web, app    the row's host itself (nginx: ms)      after the request arrived .. before the
    (any other)                                        reply left

so the join has two rules:

- **Caller-timed** (client, cache, db): every message between the timing host (the *observer*) and
  the called host whose observer-side time (its last send if the observer sent it, its receive if
  the observer received it) lies within [start, end] (± EPS_S: hops are logged to the µs) is the
  request's: the call and its answer, and whatever else the exchange took on that host's clock
  (MariaDB's greeting and login when pymysql connects inside a request's first query). Where hops
  of several requests overlap at one observer (two threads of one app worker calling memcached in
  the same 0.1 ms; the load generator's 200 ms requests to a delayed tier beside the quick ones),
  each hop keeps only the messages on the connection of the call/return pair that fits it most
  tightly (each app thread has its own memcached and MariaDB connection, each sender of the load
  generator its own keep-alive connection); a message no such connection settles is left out and
  counted. A cache or db hop of a request without an `app` hop is taken as timed at its own host
  (Maketrace's requests_table writes hops so).
- **Callee-timed** (web, app, every other tier): the call/return pair (reconcile's msg id) whose call
  reached the hop's host at or before its start and whose return left it at or after its end
  (± CALLEE_TOL_S: nginx logs $msec and $request_time in ms), the tightest; where the request's
  caller-timed messages say which thread of that host handled it (the app thread that made its
  memcached calls), only a pair answered from that thread (two requests handled at once have the
  same offsets: time alone cannot tell their pairs apart). A pair goes to one hop, a hop takes one
  pair. Where the caller-timed and the callee-timed rules disagree (client and web), the
  caller-timed one (µs, containment) wins (counted).

A message's time at its sender is its *last* send (reconcile's t_send_last): where the events have
no thread, reconciliation merges a memcached set sent with noreply at the end of one request with
the next request's first get on that connection into one message whose t_send is the set's; it
belongs to the request its reply answers.

Measured on the stored service runs (2026-11-27, 50 requests/s): the caller-side times lie inside
their hops by construction (the app stamps start before its send and end after its receive); at the
callee the app's call arrives 0.07-0.25 ms before its hop starts and its reply leaves 0.04-0.25 ms
after it ends; nginx's hop is within ±1 ms of the client's call and return.

Messages no hop covers are noise in the truth, counted in one warning: the tiers' readiness checks
and warm-up requests (no request id, no hop), nginx's master/worker channel (Unix sockets),
connections already open when tracing began (their far end untraced, named by address), and
messages of requests whose hops were not logged (a hop line cut when a tier was stopped).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

EPS_S = 5e-6            # hop times are logged to the µs (%.6f), messages to the ns
CALLEE_TOL_S = 0.002    # nginx's start (= $msec - $request_time, each in ms) is within ±2 ms
CALLER_TIMED = ("client", "cache", "db")
TIMED_BY_APP = ("cache", "db")


def _plural(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def last_send_times(messages: pd.DataFrame) -> np.ndarray:
    """Each message's last send (reconcile's t_send_last; t_send where the frame has none): the
    moment a fat message was complete, in its sender's hop (without threads, reconcile merges a
    memcached set sent with noreply with the next request's get into one message: t_send the set's)."""
    if "t_send_last" in messages:
        return messages["t_send_last"].fillna(messages["t_send"]).to_numpy(dtype=float)
    return messages["t_send"].to_numpy(dtype=float)


def _threads(messages: pd.DataFrame, column: str) -> np.ndarray:
    """A thread column as int64, -1 where unknown or when the frame has none."""
    if column not in messages:
        return np.full(len(messages), -1, dtype=np.int64)
    return pd.to_numeric(messages[column], errors="coerce").fillna(-1).to_numpy().astype(np.int64)


def _hop_nodes(requests: pd.DataFrame, granularity: str) -> pd.DataFrame:
    """The hops with finite times, their node (host, or host/pid), observer node and rule."""
    hops = requests.copy()
    hops["start"] = pd.to_numeric(hops["start"], errors="coerce")
    hops["end"] = pd.to_numeric(hops["end"], errors="coerce")
    hops = hops[np.isfinite(hops["start"]) & np.isfinite(hops["end"])].reset_index(drop=True)
    hops["key"] = hops["request"].astype(str)
    hops["tier"] = hops["tier"].astype(str)
    node = hops["host"].astype(str)
    if granularity == "process":     # the messages' nodes are host/pid
        pid = pd.to_numeric(hops["pid"], errors="coerce")
        node = node + "/" + pid.astype("Int64").astype(str)
    hops["node"] = node.to_numpy()
    app = hops[hops["tier"] == "app"].drop_duplicates("key").set_index("key")["node"]
    by_app = hops["tier"].isin(TIMED_BY_APP).to_numpy() & hops["key"].isin(app.index).to_numpy()
    hops["observer"] = np.where(by_app, hops["key"].map(app), hops["node"])
    # the called host: the row's own for cache/db; none to check for the client (it calls web only)
    hops["peer"] = np.where(by_app, hops["node"], "")
    hops["caller"] = by_app | (hops["tier"] == "client").to_numpy()
    return hops


def _spans(t_sorted: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) for every i and every j with lo[i] <= t_sorted[j] <= hi[i]: an interval join."""
    a = np.searchsorted(t_sorted, lo, side="left")
    b = np.searchsorted(t_sorted, hi, side="right")
    n = np.maximum(b - a, 0)
    i = np.repeat(np.arange(len(lo)), n)
    j = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n) + np.repeat(a, n)
    return i, j


def _caller_matches(rows: pd.DataFrame, hops: pd.DataFrame) -> pd.DataFrame:
    """(row, hop) for every message seen by a caller-timed hop's observer within the hop."""
    # each message seen from both ends: sent by src at t_send, received by dst at t_recv
    views = pd.concat([
        pd.DataFrame({"row": rows["row"], "obs": rows["src"], "peer": rows["dst"], "t": rows["t_last"]}),
        pd.DataFrame({"row": rows["row"], "obs": rows["dst"], "peer": rows["src"], "t": rows["t_recv"]}),
    ], ignore_index=True).dropna(subset=["t"])
    out = []
    caller = hops[hops["caller"]]
    for obs, h in caller.groupby("observer", sort=False):
        v = views[views["obs"] == obs].sort_values("t", kind="stable")
        if v.empty:
            continue
        i, j = _spans(v["t"].to_numpy(), h["start"].to_numpy() - EPS_S, h["end"].to_numpy() + EPS_S)
        peer = h["peer"].to_numpy()[i]
        ok = (peer == "") | (peer == v["peer"].to_numpy()[j])
        out.append(pd.DataFrame({"row": v["row"].to_numpy()[j[ok]], "hop": h.index.to_numpy()[i[ok]]}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame({"row": [], "hop": []}, dtype=np.int64)


def _pairs(rows: pd.DataFrame) -> pd.DataFrame:
    """Call/return pairs (reconcile's msg id) whose return went back to the caller: the call's row,
    sender (caller), receiver (callee) and times, the return's row and times."""
    calls = rows[rows["call"] & (rows["msg"] >= 0)]
    rets = rows[rows["ret"] & (rows["msg"] >= 0)]
    cols = ["row", "msg", "src", "dst", "t_send", "t_last", "t_recv", "src_thread"]
    pairs = calls[cols].merge(rets[cols], on="msg", suffixes=("_call", "_ret"))
    return pairs[(pairs["dst_call"] == pairs["src_ret"]) & (pairs["src_call"] == pairs["dst_ret"])]


def _tightest(cand: pd.DataFrame) -> pd.DataFrame:
    """One pair per hop and one hop per pair, the smallest gaps first (greedy)."""
    cand = cand.sort_values("gap", kind="stable")
    return cand.drop_duplicates("pair").drop_duplicates("hop")


def _caller_pairs(pairs: pd.DataFrame, hops: pd.DataFrame) -> pd.DataFrame:
    """(pair, hop) for each caller-timed hop: the pair its observer sent and had answered within it
    that fits it most tightly."""
    out = []
    for obs, h in hops[hops["caller"]].groupby("observer", sort=False):
        p = pairs[pairs["src_call"] == obs].sort_values("t_last_call", kind="stable")
        p = p[p["t_recv_ret"].notna()]
        if p.empty:
            continue
        i, j = _spans(p["t_last_call"].to_numpy(), h["start"].to_numpy() - EPS_S, h["end"].to_numpy() + EPS_S)
        sent, back = p["t_last_call"].to_numpy()[j], p["t_recv_ret"].to_numpy()[j]
        start, end = h["start"].to_numpy()[i], h["end"].to_numpy()[i]
        peer = h["peer"].to_numpy()[i]
        ok = (back <= end + EPS_S) & ((peer == "") | (peer == p["dst_call"].to_numpy()[j]))
        out.append(pd.DataFrame({"pair": p.index.to_numpy()[j[ok]], "hop": h.index.to_numpy()[i[ok]],
                                 "gap": (np.abs(sent - start) + np.abs(end - back))[ok]}))
    return _tightest(pd.concat(out, ignore_index=True)) if out else pd.DataFrame(columns=["pair", "hop", "gap"])


def _by_connection(inside: pd.DataFrame, hop_conn: pd.Series, conn: np.ndarray,
                   key: np.ndarray) -> tuple[pd.DataFrame, int]:
    """(row, key) of the caller-timed matches kept: a hop whose call/return pair was found keeps the
    messages inside it on that pair's connection; a hop without one keeps those inside no other
    request's hop. Also how many messages inside several requests' hops were left (no connection
    settled them)."""
    inside = inside.assign(conn=conn[inside["row"].to_numpy()], key=key[inside["hop"].to_numpy()])
    known = inside["hop"].isin(hop_conn.index).to_numpy()
    on_conn = known & (inside["conn"].to_numpy() == hop_conn.reindex(inside["hop"]).to_numpy())
    n_keys = inside.groupby("row")["key"].transform("nunique").to_numpy()
    keep = inside[on_conn | (~known & (n_keys == 1))].drop_duplicates(["row", "key"])
    keep = keep.drop_duplicates("row", keep=False)   # on two requests' connections: settled by nothing
    left = set(inside["row"][n_keys > 1]) - set(keep["row"])
    return keep[["row", "key"]], len(left)


def _callee_matches(pairs: pd.DataFrame, hops: pd.DataFrame, threads: pd.DataFrame) -> pd.DataFrame:
    """(pair, hop) for each callee-timed hop: the pair whose call reached its host at or before its
    start and whose return left at or after its end, the tightest. `threads` (key, node, thread):
    the threads a request's caller-timed messages were sent from; where a request has one at the
    hop's node, only a pair answered from that thread is its (two requests handled at once by one
    app have the same offsets, and only the thread tells their pairs apart)."""
    out = []
    for node, h in hops[~hops["caller"]].groupby("node", sort=False):
        p = pairs[(pairs["dst_call"] == node) & pairs["t_recv_call"].notna()]
        if p.empty:
            continue
        h = h.sort_values("start", kind="stable")
        # the hops that start while each pair's call is in (arrived .. its return left)
        i, j = _spans(h["start"].to_numpy(), p["t_recv_call"].to_numpy() - CALLEE_TOL_S,
                      p["t_send_ret"].to_numpy() + CALLEE_TOL_S)
        arr, dep = p["t_recv_call"].to_numpy()[i], p["t_send_ret"].to_numpy()[i]
        start, end = h["start"].to_numpy()[j], h["end"].to_numpy()[j]
        ok = dep >= end - CALLEE_TOL_S
        out.append(pd.DataFrame({"pair": p.index.to_numpy()[i[ok]], "hop": h.index.to_numpy()[j[ok]],
                                 "gap": (np.abs(start - arr) + np.abs(dep - end))[ok],
                                 "key": h["key"].to_numpy()[j[ok]], "node": node,
                                 "thread": p["src_thread_ret"].to_numpy()[i[ok]]}))
    if not out:
        return pd.DataFrame(columns=["pair", "hop", "gap"])
    cand = pd.concat(out, ignore_index=True)
    known = threads[["key", "node"]].drop_duplicates().assign(known=True)
    cand = cand.merge(known, on=["key", "node"], how="left")
    cand = cand.merge(threads.assign(same=True), on=["key", "node", "thread"], how="left")
    cand = cand[cand["known"].isna() | cand["same"].notna() | (cand["thread"] < 0)]
    return _tightest(cand[["pair", "hop", "gap"]])


def _pair_rows(pairs: pd.DataFrame, matched: pd.DataFrame) -> pd.DataFrame:
    """(row, hop) of both messages of each matched pair."""
    got = pairs.loc[matched["pair"].to_numpy()]
    hop = matched["hop"].to_numpy()
    return pd.DataFrame({"row": np.r_[got["row_call"].to_numpy(), got["row_ret"].to_numpy()],
                         "hop": np.r_[hop, hop]}).astype(np.int64)


def message_requests(messages: pd.DataFrame, requests: pd.DataFrame, warnings: list[str],
                     granularity: str = "host") -> tuple[np.ndarray, pd.Index, pd.DataFrame]:
    """Per message, the index (into the returned request keys, as text) of its request, -1 none; and
    the hops as joined (with `node`, `observer`, `caller`). `messages` may carry src_endpoint and
    dst_endpoint (reconcile's): the connection that settles a message inside two requests' hops."""
    n = len(messages)
    hops = _hop_nodes(requests, granularity)
    rows = pd.DataFrame({"row": np.arange(n), "src": messages["src"].astype(str).to_numpy(),
                         "dst": messages["dst"].astype(str).to_numpy(),
                         "t_send": messages["t_send"].to_numpy(dtype=float),
                         "t_last": last_send_times(messages),
                         "t_recv": messages["t_recv"].to_numpy(dtype=float),
                         "msg": messages["msg"].to_numpy(),
                         "call": (messages["kind"].astype(str) == "call").to_numpy(),
                         "ret": (messages["kind"].astype(str) == "return").to_numpy(),
                         "src_thread": _threads(messages, "src_thread")})
    if "src_endpoint" in messages and "dst_endpoint" in messages:
        a = messages["src_endpoint"].astype(str).to_numpy()
        b = messages["dst_endpoint"].astype(str).to_numpy()
        conn = pd.factorize(pd.Series(np.where(a < b, a + " " + b, b + " " + a)))[0]
    else:   # no endpoints: the pair of nodes stands for the connection
        conn = pd.factorize(pd.Series(np.minimum(rows["src"], rows["dst"]) + " " + np.maximum(rows["src"], rows["dst"])))[0]
    pairs = _pairs(rows)
    mine = _caller_pairs(pairs, hops)
    hop_conn = pd.Series(conn[pairs.loc[mine["pair"].to_numpy(), "row_call"].to_numpy()],
                         index=mine["hop"].to_numpy())
    key = hops["key"].to_numpy()
    by_caller, ambiguous = _by_connection(_caller_matches(rows, hops), hop_conn, conn, key)
    sent = rows.loc[by_caller["row"].to_numpy(), ["src", "src_thread"]].to_numpy()
    threads = pd.DataFrame({"key": by_caller["key"].to_numpy(), "node": sent[:, 0].astype(str),
                            "thread": sent[:, 1].astype(np.int64)})
    threads = threads[threads["thread"] >= 0].drop_duplicates()
    by_callee = _pair_rows(pairs, _callee_matches(pairs, hops, threads))
    by_callee = pd.DataFrame({"row": by_callee["row"].to_numpy(), "key": key[by_callee["hop"].to_numpy()]})
    by_callee = by_callee.drop_duplicates("row")
    both = by_callee.merge(by_caller, on="row", suffixes=("", "_caller"))
    disagree = int((both["key"] != both["key_caller"]).sum())
    chosen = pd.concat([by_caller, by_callee[~by_callee["row"].isin(by_caller["row"])]], ignore_index=True)
    keys = np.full(n, None, dtype=object)
    keys[chosen["row"].to_numpy()] = chosen["key"].to_numpy()
    codes, uniques = pd.factorize(pd.Series(keys))
    if ambiguous:
        warnings.append(f"requests: {_plural(ambiguous, 'message')} inside hops of several requests at one "
                        "host with no connection to settle it; taken as noise in the truth")
    if disagree:
        warnings.append(f"requests: {_plural(disagree, 'message')} whose caller-timed and callee-timed hops "
                        "name different requests; the caller's (µs, containment) taken")
    return codes.astype(np.int64), pd.Index(uniques), hops


def unmatched_summary(messages: pd.DataFrame, request: np.ndarray, top: int = 3) -> str:
    """The node pairs with most messages no hop covers, e.g. `web>web 12, ...`."""
    m = messages[request < 0]
    if m.empty:
        return ""
    pairs = (m["src"].astype(str) + ">" + m["dst"].astype(str)).value_counts().head(top)
    return ", ".join(f"{k} {v}" for k, v in pairs.items())
