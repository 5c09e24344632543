"""truth_from_requests on frames shaped like the service runs' (analysis/paths/hops.py): string request
ids, hops timed by the caller (client, cache, db) or at the callee (web, app) with the offsets
measured on the stored runs, two app threads calling memcached within the same 0.1 ms on their own
connections, and a memcached set sent with noreply merged with the next request's get."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.paths.readers import truth_from_requests

US = 1e-6


class Frames:
    """Messages (reconcile's columns: kind, msg, endpoints, t_send_last) and requests rows."""

    def __init__(self):
        self.msgs: list[dict] = []
        self.hops: list[tuple] = []
        self.truth: list[str | None] = []
        self.n_pairs = 0

    def pair(self, key, caller, callee, conn, sent, arrived, replied, back, last=None, threads=(-1, -1)):
        c_ep, s_ep = conn
        c_th, s_th = threads
        msg = self.n_pairs
        self.n_pairs += 1
        self.msgs.append(dict(t_send=sent, t_recv=arrived, src=caller, dst=callee, kind="call", msg=msg,
                              src_endpoint=c_ep, dst_endpoint=s_ep, t_send_last=sent if last is None else last,
                              src_thread=c_th, dst_thread=s_th))
        self.msgs.append(dict(t_send=replied, t_recv=back, src=callee, dst=caller, kind="return", msg=msg,
                              src_endpoint=s_ep, dst_endpoint=c_ep, t_send_last=replied,
                              src_thread=s_th, dst_thread=c_th))
        self.truth += [key, key]

    def hop(self, key, tier, host, pid, start, end, kind="hit"):
        self.hops.append((key, kind, tier, host, pid, start, end))

    def frames(self):
        m = pd.DataFrame(self.msgs)
        m["truth"] = self.truth
        m = m.sort_values("t_send", kind="stable").reset_index(drop=True)
        r = pd.DataFrame(self.hops, columns=["request", "type", "tier", "host", "pid", "start", "end"])
        return m, r


def service_request(f: Frames, key: str, t0: float, app: str, thread: int, cache_at: float,
                    web_ms_error: float = 0.0004):
    """One hit as the real runs record it (offsets in µs measured on service-delay-app2)."""
    cli, web_c = (f"10.0.1.1:{4000 + thread}", "10.0.3.1:80")
    up, app_ep = (f"10.0.3.1:{5000 + thread}", "10.0.5.1:8000")
    cconn = (f"10.0.5.1:{6000 + thread}", "10.0.7.1:11211")
    # client: sends at t0 (+20 µs after its start), answer read 30 µs before its end
    call_at_web = t0 + 100 * US
    call_at_app = t0 + 300 * US
    app_start, app_end = call_at_app + 140 * US, cache_at + 400 * US
    # threads: the load generator's sender, nginx's worker, the app's handler thread, memcached's
    f.pair(key, "client", "web", (cli, web_c), t0, call_at_web, app_end + 400 * US, app_end + 450 * US,
           threads=(thread, 100))
    f.pair(key, "web", app, (up, app_ep), t0 + 200 * US, call_at_app, app_end + 80 * US, app_end + 150 * US,
           threads=(100, 200 + thread))
    # two memcached gets, timed at the app: start 20 µs before the send, end 15 µs after the answer
    for i in range(2):
        s = cache_at + i * 150 * US
        f.pair(key, app, "cache", cconn, s + 20 * US, s + 50 * US, s + 60 * US, s + 100 * US,
               threads=(200 + thread, 300))
        f.hop(key, "cache", "cache", 9, s, s + 115 * US)
    f.hop(key, "client", "client", 1, t0 - 20 * US, app_end + 480 * US)
    # nginx: ms resolution, off by up to a ms
    f.hop(key, "web", "web", 2, call_at_web - web_ms_error, app_end + 400 * US + web_ms_error)
    f.hop(key, "app", app, 3, app_start, app_end)


def assigned(m: pd.DataFrame, r: pd.DataFrame, granularity: str = "host") -> tuple[list, list[str]]:
    """The true requests as truth_from_requests sees them, numbered like m["truth"] (its codes run
    in order of first appearance, as pd.factorize's do; -1 none), and its warnings."""
    warnings: list[str] = []
    truth = truth_from_requests(m, r, warnings, granularity)
    assert set(truth.request_type.values()) <= {"hit"}
    return truth.request.tolist(), warnings


def expected(m: pd.DataFrame) -> list[int]:
    return pd.factorize(m["truth"])[0].tolist()


def test_string_ids_and_measured_offsets_are_joined():
    f = Frames()
    service_request(f, "q0000001", 10.0, "app1", 1, cache_at=10.0006)
    service_request(f, "q0000002", 10.01, "app2", 2, cache_at=10.0106)
    m, r = f.frames()
    got, warnings = assigned(m, r)
    # the old join turned the ids "q..." into NaN: every message unmatched
    assert got == expected(m) and warnings == []


def test_two_threads_calling_memcached_at_once_are_told_apart_by_connection():
    f = Frames()
    # two requests on app1, their cache calls 60 µs apart: each message lies in both requests' hops
    service_request(f, "q0000001", 20.0, "app1", 1, cache_at=20.0006)
    service_request(f, "q0000002", 20.00002, "app1", 2, cache_at=20.00066)
    m, r = f.frames()
    got, warnings = assigned(m, r)
    assert got == expected(m)
    # nearest hop start within 5 ms at the cache (the old join's rule) mixes them up
    cache_calls = m[(m["dst"] == "cache")]
    hops = r[r["tier"] == "cache"].sort_values("start")
    nearest = [hops["request"].iloc[int(np.argmin(np.abs(hops["start"].to_numpy() - t)))]
               for t in cache_calls["t_recv"]]
    assert nearest != cache_calls["truth"].tolist()


def test_a_noreply_set_merged_with_the_next_get_belongs_to_the_get():
    f = Frames()
    service_request(f, "q0000001", 30.0, "app1", 1, cache_at=30.0006)
    # the next request on the same thread: its first get went out in one message with the set the
    # previous request sent (noreply) at its end: t_send is the set's, the last send the get's
    service_request(f, "q0000002", 30.1, "app1", 1, cache_at=30.1006)
    m, r = f.frames()
    first_get = m.index[(m["truth"] == "q0000002") & (m["dst"] == "cache")][0]
    m.loc[first_get, "t_send"] = 30.0013       # the set's send, inside request 1's app hop
    m = m.sort_values("t_send", kind="stable").reset_index(drop=True)
    truth = truth_from_requests(m, r, [])
    assert truth.request.tolist() == expected(m)
    row = int(m.index[(m["truth"] == "q0000002") & (m["dst"] == "cache")][0])
    # its cause is the call that reached app1 for request 2, and its delay is not negative
    assert m.loc[truth.cause[row], "src"] == "web" and truth.node_delay[row] > 0


def test_messages_in_no_hop_are_counted_with_where_they_go():
    f = Frames()
    service_request(f, "q0000001", 40.0, "app1", 1, cache_at=40.0006)
    m, r = f.frames()
    noise = pd.DataFrame([dict(t_send=41.0, t_recv=41.0001, src="web", dst="web", kind="", msg=-1,
                               src_endpoint="unix/1", dst_endpoint="unix/2", t_send_last=41.0, truth=None,
                               src_thread=100, dst_thread=100)])
    m = pd.concat([m, noise], ignore_index=True)
    got, warnings = assigned(m, r)
    assert got == expected(m)
    assert any("1 message inside no request's hop" in w and "web>web 1" in w for w in warnings)


def test_process_granularity_names_hops_by_pid():
    f = Frames()
    service_request(f, "q0000001", 50.0, "app1", 1, cache_at=50.0006)
    m, r = f.frames()
    pid = {"client": 1, "web": 2, "app1": 3, "cache": 9}
    for c in ("src", "dst"):
        m[c] = m[c].map(lambda n: f"{n}/{pid[n]}")
    got, _ = assigned(m, r, granularity="process")
    assert got == expected(m)
