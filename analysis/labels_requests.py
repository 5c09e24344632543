"""`--policy requests`: ground truth that knows requests (issue 42 item 1), read from a service run's
`requests` table (docs/service.md, "The true request paths").

A fault window's culprit is the tier host H it acts on (analysis.score.culprit.windows_of: a delay,
pause, slow, ip_drop or loss of a host, a tcp_drop of one of its connections). A hop *through* H (a
requests row whose host is H: H's own hop for web and app, the call to H's daemon for cache and db)
is *overdue* from its start plus that hop's quiet-time p99 until its end: the p99 of the durations
of the hops of the same tier at the same host that lie outside every fault window and `margin`
seconds after it (a tier without such hops: its hops at every host; none at all: never overdue). A
snapshot interval *holds* a request at H when an overdue hop through H of a request that started
before the window's end plus `tail` overlaps it. Then, in every such snapshot, both directions:

- positive: the applications and sockets of H (the faulted tier's; the thesis's app_pause target);
- positive: the TCP connections of a caller C (the host of the hop of the same request that encloses
  H's most tightly: client -> web -> app -> cache, db) whose far end is H, when C holds an overdue request to H and the
  connection itself has a request outstanding: by the run's tcp_info, its last data was sent, not
  received (or data waits in its send queue); without a TCP state, every such connection;
- negative: everything else, among them a keep-alive connection to H with no request outstanding.
  Negative, not don't-care: an idle connection is not what holds the requests up, and blaming it is
  exactly the false positive the policy exists to count (the thesis rules' on service runs).

Rows with invalid counters, and snapshots after the run's end, are excluded as by `impact`. A run
without a `requests` table (recorded before format 7, or not a service run) is labelled by the
thesis's policy (`impact`), with one warning naming the run. Stream runs: as every policy
(analysis.labels_streams). The network suites' labels come from `impact`, the default: this policy
changes nothing there unless asked for.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import studies
from analysis.labels import CAUSES, ImpactPolicy, _Policy, _seconds
from analysis.model.label_input import label_rows
from analysis.variants.base import Param

_warned: set[str] = set()


def _read(path: Path) -> tuple[pd.DataFrame | None, pd.DataFrame]:
    """(requests rows or None when the run has none, faults rows)."""
    from rundir import read

    with read.run_db(path) as conn:
        tables = set(read.tables(conn))
        faults = read.read_fault_rows(conn)
        if "requests" not in tables:
            return None, faults
        req = read.request_hops(conn)
    return (req if len(req) else None), faults


def quiet_p99(hops: pd.DataFrame, windows: pd.DataFrame, margin: float) -> dict[tuple[str, str], float]:
    """Per (tier, host): the p99 of its hop durations outside every window (+ margin after it)."""
    dur = hops["end"] - hops["start"]
    quiet = np.ones(len(hops), dtype=bool)
    for w in windows.itertuples(index=False):
        quiet &= ~((hops["start"] < w.stop + margin) & (hops["end"].fillna(np.inf) > w.start)).to_numpy()
    q = hops[quiet].assign(d=dur[quiet])
    out: dict[tuple[str, str], float] = {}
    by_tier = q.groupby("tier")["d"].quantile(0.99).to_dict()
    for tier, host in hops.groupby(["tier", "host"]).groups:
        mine = q[(q.tier == tier) & (q.host == host)]["d"]
        out[(tier, host)] = float(mine.quantile(0.99)) if len(mine) else float(by_tier.get(tier, np.inf))
    return out


def callers(hops: pd.DataFrame, tol: float = 0.002) -> np.ndarray:
    """Per hop, the host of the hop of the same request that encloses it most tightly (the latest
    start among the longer hops around it, `tol` s of slack for nginx's ms-rounded times): its
    caller; None for a request's outermost hop."""
    h = hops.reset_index(drop=True)
    h = h.assign(i=np.arange(len(h)), dur=(h["end"] - h["start"]).fillna(np.inf))
    m = h[["request", "i", "start", "end", "dur"]].merge(
        h[["request", "i", "start", "end", "dur", "host"]], on="request", suffixes=("", "_o"))
    ok = ((m.i != m.i_o) & (m.start_o <= m.start + tol) & (m.end_o.fillna(np.inf) >= m.end.fillna(np.inf) - tol)
          & ((m.dur_o > m.dur) | ((m.dur_o == m.dur) & (m.i_o < m.i))))
    m = m[ok].sort_values(["i", "start_o"])
    best = m.drop_duplicates("i", keep="last").set_index("i")["host"]
    return best.reindex(np.arange(len(h))).to_numpy(object)


def held_snapshots(spans: np.ndarray, t_start: np.ndarray, t_end: np.ndarray) -> np.ndarray:
    """Per snapshot (intervals (t_start, t_end], sorted): some span [a, b) of `spans` overlaps it."""
    n = len(t_end)
    mark = np.zeros(n + 1, dtype=np.int64)
    if len(spans):
        first = np.searchsorted(t_end, spans[:, 0], side="right")   # first snapshot ending after a
        last = np.searchsorted(t_start, spans[:, 1], side="left")    # snapshots starting before b
        ok = first < last
        np.add.at(mark, first[ok], 1)
        np.add.at(mark, last[ok], -1)
    return np.cumsum(mark)[:n] > 0


class RequestsPolicy(_Policy):
    system = "requests"
    summary = ("request-level truth of service runs (issue 42): the faulted tier's apps and sockets, and its "
               "callers' connections with a request outstanding, while it holds a request past its hop's "
               "quiet-time p99; no requests table: impact")
    params = (
        Param("tail", 1.0, _seconds, "s after a fault window's end in which a request that started "
              "before it still counts"),
        Param("margin", 1.0, _seconds, "s after each fault window left out of the quiet time"),
    )

    def label(self, data) -> pd.DataFrame:
        own = studies.of_data(data).label   # the study's own ground truth (streams: thesis 4.6.3), as every policy
        if own is not None:
            return own(data, {}, CAUSES)
        path = Path(data.run.path)
        hops, faults = _read(path)
        if hops is None:
            if str(path) not in _warned:
                _warned.add(str(path))
                print(f"warning: {path}: no request paths (no requests table, or an empty one: not a service run, or recorded before format 7): "
                      "labelled by the thesis's policy (impact)", file=sys.stderr, flush=True)
            return ImpactPolicy().label(data)
        return self._label(data, hops, faults)

    def _label(self, data, hops: pd.DataFrame, faults: pd.DataFrame) -> pd.DataFrame:
        from analysis.paths.nest_culprit import address_hosts, module_hosts
        from analysis.score.culprit import windows_of

        f = label_rows(data)
        n = f.n
        actual = np.zeros(n, dtype=bool)
        fault_id = np.full(n, -1, dtype=np.int64)
        windows = windows_of(faults)
        hops = hops.assign(start=pd.to_numeric(hops["start"], errors="coerce"),
                           end=pd.to_numeric(hops["end"], errors="coerce")).dropna(subset=["start"])
        snaps = data.snapshots
        seqs = snaps.index.to_numpy()
        t_end = snaps["mono"].to_numpy(float)
        t_start = snaps["start"].fillna(-np.inf).to_numpy(float)
        if len(windows) and len(hops):
            p99 = quiet_p99(hops, windows, self.values["margin"])
            hops = hops.assign(caller=callers(hops))
            mods = data.modules
            hosts = module_hosts(data)
            addr = address_hosts(data, hosts)
            kinds = mods["kind"].astype(str)
            far = pd.Series({mid: addr.get(str(a.get("dst"))) for mid, a in mods["attrs"].items()
                             if kinds[mid] == "tcp" and isinstance(a, dict)}, dtype=object)
            module = f.module
            seq_pos = np.searchsorted(seqs, data.counters["seq"].to_numpy(np.int64))
            outstanding = self._outstanding(data)
            ids = self._fault_ids(faults, windows)
            run_end = float(t_end[-1]) if len(t_end) else 0.0
            for wi, w in enumerate(windows.itertuples(index=False)):
                through = hops[(hops.host == w.node) & (hops.start < w.stop + self.values["tail"])
                               & (hops["end"].fillna(np.inf) > w.start)]
                due = through["start"].to_numpy(float) + np.array(
                    [p99.get((t, w.node), np.inf) for t in through["tier"]], dtype=float)
                ends = through["end"].fillna(run_end).to_numpy(float)
                late = due < ends
                spans = np.column_stack([due[late], ends[late]])
                held = held_snapshots(spans, t_start, t_end)
                own = np.isin(module, hosts.index[(hosts == w.node) & kinds.isin(["app", "socket"])].to_numpy())
                hit = own & held[seq_pos]
                who = through[late]["caller"].to_numpy(object)
                for c in pd.unique(who[pd.notna(who)]):
                    sp = np.column_stack([due[late][who == c], ends[late][who == c]])
                    held_c = held_snapshots(sp, t_start, t_end)
                    conns = far.index[(far == w.node) & (hosts.reindex(far.index) == c)].to_numpy()
                    hit |= np.isin(module, conns) & held_c[seq_pos] & outstanding
                fault_id[hit & (fault_id < 0)] = ids[wi]
                actual |= hit
        exclude = f.invalid.copy()
        stop = getattr(data, "stop", None)
        after = f.after(stop) if stop is not None else np.zeros(n, dtype=bool)
        exclude |= after
        cause = np.zeros(n, dtype=np.int8)
        cause[actual] = CAUSES.index("fault")
        cause[after & ~f.invalid] = CAUSES.index("after_end")
        cause[f.invalid] = CAUSES.index("invalid")
        return pd.DataFrame({"actual": actual, "exclude": exclude,
                             "cause": pd.Categorical.from_codes(cause, list(CAUSES)),
                             "fault": pd.arrays.IntegerArray(np.maximum(fault_id, 0), fault_id < 0)},
                            index=f.index, copy=False)

    @staticmethod
    def _fault_ids(faults: pd.DataFrame, windows: pd.DataFrame) -> list[int]:
        """The faults row id of each window (its first row)."""
        out = []
        start = pd.to_numeric(faults["start"], errors="coerce").to_numpy(float)
        for w in windows.itertuples(index=False):
            k = np.flatnonzero(start == w.start)
            out.append(int(faults["id"].iloc[k[0]]) if len(k) and "id" in faults else 0)
        return out

    @staticmethod
    def _outstanding(data) -> np.ndarray:
        """Per counters row: its TCP connection has a request outstanding at that snapshot by the
        run's tcp_info (last data sent after the last received) or its send queue; True without a
        TCP state (every caller connection counts)."""
        c = data.counters
        info = getattr(data, "tcp_info", None)
        queued = (c["queued"].to_numpy(float) > 0) & (c["dir"] == "out").to_numpy(bool)
        if info is None or "data_sent_at" not in info.columns or info.empty:
            return np.ones(len(c), dtype=bool)
        ti = info[["seq", "module", "data_sent_at", "data_recv_at"]].dropna(subset=["seq", "module"])
        ti = ti.astype({"seq": np.int64, "module": np.int64}).sort_values("seq")
        rows = c[["module", "seq"]].reset_index().astype({"seq": np.int64, "module": np.int64}).sort_values("seq")
        got = pd.merge_asof(rows, ti, on="seq", by="module", direction="backward").set_index("index").reindex(c.index)
        sent, recv = got["data_sent_at"].to_numpy(float), got["data_recv_at"].to_numpy(float)
        with np.errstate(invalid="ignore"):
            out = sent > np.where(np.isnan(recv), -np.inf, recv)
        # the send queue of this connection at this snapshot, either direction's row
        q = pd.Series(queued, index=c.index).groupby([c["module"], c["seq"]]).transform("max").to_numpy(bool)
        return out | q
