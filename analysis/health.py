"""Network health of a run: was the emulated network quiet enough that its TCP and ip+eth rows
measure the diagnoser rather than the network? (DESIGN.md, "Fidelity"; docs/analysis.md)

Every figure is taken outside every fault window and its recovery margin (the *quiet* snapshots;
the margin as the spec's `isolation.recovery` gives it, rundir.facts), and before the
runner stops the workloads:

- RTT: median and p99 of each connection's RTT in its loaded direction, over the stored samples.
  A connection that sends more data segments than it receives is a sender: its smoothed tcpi_rtt
  times its data. A receiver's tcpi_rtt times only its own few segments (a download's GET: 0.1 ms
  before any queue builds), so a receiver's RTT is tcpi_rcv_rtt, the kernel's receive-side estimate
  (run format 5; 0, i.e. not yet measured, is left out). A run recorded before format 5 has no
  receivers' RTT: the figures cover its senders alone, and a warning says so (or says the run has
  no loaded-direction RTT at all).
- Queue: drops of the shaped links' queues (in all, and in quiet time), and the backlog (median and
  maximum, packets) of the busiest one, from the runner's samples of the leaf qdiscs (about 1/s).
- Retransmissions: TCP's retransmitted segments (tcpi_total_retrans) in quiet snapshots.
- Silence rate: the share of *busy* TCP module-snapshots in which the connection made no progress.
  Busy outbound: the send queue held data at the start of the snapshot (data to send). Busy
  inbound: the connection received data before and receives data again later (a silence in the
  middle of a flow; the receiver cannot see whether its peer has data to send). A healthy
  connection with data to move sends or receives something every 100 ms; a silent busy one looks
  to the diagnoser exactly like a stalled one.

Above SILENCE_WARN the run is flagged: its TCP rows measure the network, not the diagnoser.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import studies
from analysis.model.long_frame import FrameRows
from rundir import facts
from rundir.manifest import RunHealth

SILENCE_WARN = 0.02   # 2%: above this, silences of healthy connections dominate the TCP rows


def fault_spans(data) -> list[tuple[float, float]]:
    """[start, end + recovery margin] of every fault that took effect (rundir.facts.fault_spans)."""
    return facts.fault_spans(data.faults, data.info.spec.isolation)


def quiet_snapshots(data) -> pd.Series:
    """Per snapshot seq: True when its interval (start, mono] touches no fault span and it ends before
    the runner stopped the workloads."""
    snaps = data.snapshots
    end = snaps["mono"].to_numpy(float)
    start = snaps["start"].fillna(snaps["mono"]).to_numpy(float)
    quiet = np.ones(len(snaps), dtype=bool)
    for a, b in fault_spans(data) + list(getattr(data, "uncertain", [])):   # + faults of unknown window
        quiet &= ~((end > a) & (start < b))
    if data.stop is not None:
        quiet &= end <= data.stop
    return pd.Series(quiet, index=snaps.index)


def _tcp_series(data, tcp_ids: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    """Per direction, the TCP modules' counters rows by module, then seq: module, seq, tm, queued
    (0 where not supported), errors, invalid. From the stretches' arrays while the long frame is not
    made (analysis.model.long_frame), else from the frame."""
    stretches = data.counter_stretches()
    rows = FrameRows(stretches) if stretches else None
    out = {}
    if rows is not None and rows.in_series_order:
        sel = rows.series_cells(tcp_ids)
        mod, seq = rows.cell_module[sel], rows.seqs[rows.cell_snapshot[sel]]
        for d in ("in", "out"):
            c = rows.batch.counters(d)
            out[d] = {"module": mod, "seq": seq, "tm": c.tm[sel], "queued": c.queued[sel] * c.has_queue[sel],
                      "errors": c.errors[sel], "invalid": c.invalid[sel]}
        return out
    c = data.counters
    module = c["module"].to_numpy(np.int64)
    tcp = np.isin(module, tcp_ids)
    is_out = (c["dir"] == "out").to_numpy(bool)
    seq = c["seq"].to_numpy(np.int64)
    for d in ("in", "out"):
        sel = np.flatnonzero(tcp & (is_out if d == "out" else ~is_out))
        sel = sel[np.lexsort((seq[sel], module[sel]))]   # by module and seq, stably
        out[d] = {"module": module[sel], "seq": seq[sel], "tm": c["tm"].to_numpy(float)[sel],
                  "queued": c["queued"].to_numpy(float)[sel] * c["has_queue"].to_numpy(bool)[sel],
                  "errors": c["errors"].to_numpy(float)[sel], "invalid": c["invalid"].to_numpy(bool)[sel]}
    return out


def _silences(series: dict[str, dict[str, np.ndarray]], quiet: pd.Series) -> dict[str, tuple[int, int]]:
    """Per direction: (busy, silent) TCP module-snapshots in quiet time (`_tcp_series`' rows)."""
    out = {}
    for d in ("out", "in"):
        s = series[d]
        mod, tm = s["module"], s["tm"]
        if not len(mod):
            out[d] = (0, 0)
            continue
        first = np.ones(len(mod), dtype=bool)
        first[1:] = mod[1:] != mod[:-1]
        if d == "out":
            busy = ~first & (np.roll(s["queued"], 1) > 0)
        else:   # in the middle of a received flow: data before and after it, in the same module
            moved = (tm > 0).astype(np.int64)
            total = np.cumsum(moved)
            heads = np.flatnonzero(first)
            group = np.cumsum(first) - 1
            ends = np.append(heads[1:], len(mod)) - 1
            before = total - moved - (total[heads] - moved[heads])[group]
            after = total[ends][group] - total
            busy = (before > 0) & (after > 0)
        ok = busy & ~s["invalid"] & _at(quiet, s["seq"])
        out[d] = (int(ok.sum()), int((ok & (tm == 0)).sum()))
    return out


def _at(quiet: pd.Series, seq: np.ndarray) -> np.ndarray:
    """quiet at each seq (False where it has none); quiet's seqs ascending, as the snapshots'."""
    seqs, values = quiet.index.to_numpy(np.int64), quiet.to_numpy(bool)
    if not len(seqs):
        return np.zeros(len(seq), dtype=bool)
    if seqs[-1] - seqs[0] == len(seqs) - 1:   # consecutive seqs (a run without gaps): a seq is its place
        k = np.clip(seq - seqs[0], 0, len(seqs) - 1)
    else:
        k = np.minimum(np.searchsorted(seqs, seq), len(seqs) - 1)
    return values[k] & (seqs[k] == seq)


def _queues(data, h: RunHealth) -> None:
    """Drops of every shaped queue (in all and in quiet time); backlog of the busiest one (the
    bottleneck's loaded direction: the other end mostly carries ACKs and is empty)."""
    q = data.queue_stats
    if q is None or q.empty:
        return
    spans = fault_spans(data)
    drops = drops_quiet = sent = 0
    busiest, busiest_sent = None, -1
    for _, g in q.groupby(["node", "interface"], sort=False):
        g = g.sort_values("mono")
        d = g["drops"].astype(float).to_numpy()
        n = g["sent_packets"].astype(float).to_numpy()
        drops += int(d[-1] - d[0])
        sent += int(n[-1] - n[0])
        t = g["mono"].to_numpy(float)
        for k in range(1, len(g)):
            if not any(t[k] > a and t[k - 1] < b for a, b in spans) and (data.stop is None or t[k] <= data.stop):
                drops_quiet += int(d[k] - d[k - 1])
        if n[-1] - n[0] > busiest_sent:
            busiest, busiest_sent = g["backlog_packets"].astype(float).to_numpy(), n[-1] - n[0]
    h.queue_drops, h.queue_drops_quiet, h.queue_sent_packets = drops, drops_quiet, sent
    h.backlog_packets_median = float(np.median(busiest))
    h.backlog_packets_max = int(busiest.max())


def receivers(data, tcp_ids, series=None) -> set[int]:
    """The TCP modules that received more data segments than they sent over the run (`series`:
    _tcp_series', when made)."""
    series = series if series is not None else _tcp_series(data, np.asarray(tcp_ids, dtype=np.int64))
    seen, moved = [], {}
    for d in ("in", "out"):
        s = series[d]
        valid = ~s["invalid"]
        ids, at = np.unique(s["module"][valid], return_inverse=True)
        seen.append(ids)
        moved[d] = dict(zip(ids.tolist(), np.bincount(at, weights=s["tm"][valid], minlength=len(ids)).tolist(),
                            strict=True))
    return {m for m in np.union1d(*seen).tolist() if moved["in"].get(m, 0.0) > moved["out"].get(m, 0.0)}


def loaded_rtt(data, tcp_ids=None, series=None) -> pd.DataFrame | None:
    """The tcp_info rows of TCP modules as (seq, module, rtt_us, receiver): each connection's RTT in
    its loaded direction (module docstring); rtt_us NaN where that is not measured. None: no tcp_info."""
    info = data.tcp_info
    if info is None or "rtt_us" not in info:
        return None
    if tcp_ids is None:
        tcp_ids = data.modules.index[data.modules["kind"] == "tcp"]
    rows = info[info["module"].isin(tcp_ids)]
    recv = rows["module"].isin(receivers(data, tcp_ids, series)).to_numpy(bool)
    rtt = rows["rtt_us"].to_numpy(float).copy()
    if "rcv_rtt_us" in rows:
        rcv = rows["rcv_rtt_us"].to_numpy(float)
        rtt[recv] = np.where(rcv[recv] > 0, rcv[recv], np.nan)
    else:
        rtt[recv] = np.nan
    return pd.DataFrame({"seq": rows["seq"].to_numpy(), "module": rows["module"].to_numpy(), "rtt_us": rtt,
                         "receiver": recv})


def _rtts(data, tcp_ids, quiet: pd.Series, h: RunHealth, series) -> None:
    """RTT figures in the loaded direction (senders' tcpi_rtt, receivers' tcpi_rcv_rtt) in quiet time."""
    rows = loaded_rtt(data, tcp_ids, series)
    rows = rows[quiet.reindex(rows["seq"]).fillna(False).to_numpy(bool)]
    timed = rows.dropna(subset=["rtt_us"])
    rtt = timed["rtt_us"].to_numpy(float) / 1000.0
    if rtt.size:
        h.rtt_ms_median, h.rtt_ms_p99 = float(np.median(rtt)), float(np.percentile(rtt, 99))
        h.rtt_samples = int(rtt.size)
    h.rtt_senders = int(timed.loc[~timed["receiver"], "module"].nunique())
    h.rtt_receivers = int(timed.loc[timed["receiver"], "module"].nunique())
    unmeasured = int(rows.loc[rows["receiver"], "module"].nunique()) - h.rtt_receivers
    if unmeasured > 0:
        why = ("recorded before format 5, which has no tcpi_rcv_rtt" if "rcv_rtt_us" not in data.tcp_info
               else "tcpi_rcv_rtt was never measured")
        if h.rtt_senders:
            h.warnings.append(f"no loaded-direction RTT for {unmeasured} receiving connection(s) ({why}); "
                              f"the RTT figures cover the {h.rtt_senders} sending one(s) only")
        else:
            h.warnings.append(f"this run has no loaded-direction RTT: its {unmeasured} connection(s) "
                              f"receive ({why}; their tcpi_rtt times only their own requests)")


def network_health(data) -> RunHealth | None:
    """The health figures of one run (analysis.load.RunData); None where network health does not apply
    to its study kind (a streams run: no RTTs, queues or TCP connections to judge). The silence-rate
    warning only where the study says a silence is one (a service's idle keep-alive connections are
    silent by design)."""
    study = studies.of_data(data)
    if not study.network_health:
        return None
    quiet = quiet_snapshots(data)
    span = (data.snapshots["mono"] - data.snapshots["start"]).fillna(0.0).to_numpy(float)
    h = RunHealth(quiet_snapshots=int(quiet.sum()), snapshots=len(quiet), quiet_s=float(span[quiet.to_numpy()].sum()))
    tcp_ids = data.modules.index[data.modules["kind"] == "tcp"]
    series = _tcp_series(data, tcp_ids.to_numpy(np.int64))
    info = data.tcp_info
    if info is not None and not info.empty and "rtt_us" in info:
        _rtts(data, tcp_ids, quiet, h, series)
    out = series["out"]
    retrans = _at(quiet, out["seq"]) & ~out["invalid"]
    h.retransmissions_quiet = int(out["errors"][retrans].sum())
    _queues(data, h)
    sil = _silences(series, quiet)
    h.busy_out, h.silent_out = sil["out"]
    h.busy_in, h.silent_in = sil["in"]
    h.busy, h.silent = h.busy_out + h.busy_in, h.silent_out + h.silent_in
    h.silence_rate = h.silent / h.busy if h.busy else None
    h.silence_threshold = SILENCE_WARN
    if info is None:
        h.warnings.append("no RTT samples (a run of format 2 or older)")
    if h.silence_rate is not None and h.silence_rate > SILENCE_WARN and study.silence_warning:
        h.warnings.append(f"silence rate {100 * h.silence_rate:.1f}% is above {100 * SILENCE_WARN:g}%: healthy "
                          "connections with data to move went silent outside faults, so this run's TCP rows "
                          "measure the network, not the diagnoser")
    return h
