"""The report's network health figures (matplotlib, Agg; PNG bytes).

- `health_figure(data, health)`: one run over time: the connections' smoothed RTT (median and
  maximum over the live connections), the backlog of the busiest shaped queues with their drops
  marked, and TCP's retransmissions per snapshot; fault windows shaded, their recovery margins
  lighter (the time analysis.health leaves out as not quiet).
- `health_runs_figure(ev)`: every run of an evaluation side by side: the silence rate against its
  warning threshold, RTT median and p99, and queue drops and retransmissions in quiet time.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import pandas as pd

from analysis.health import SILENCE_WARN, loaded_rtt
from analysis.render.html.faults import fault_windows
from analysis.render.mpl import plt, tight  # matplotlib on first use (Agg; names never TeX)
from analysis.render.plots import fault_colour

DPI = 80
MAX_QUEUES = 3


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return buf.getvalue()


def _shade(ax, data) -> None:
    for w in fault_windows(data):
        colour = fault_colour(data, w.fault.kind, "#cccccc")
        ax.axvspan(w.start - data.t0, w.end - data.t0, color=colour, alpha=0.3, lw=0, zorder=0)
        ax.axvspan(w.end - data.t0, w.margin_end - data.t0, color=colour, alpha=0.1, lw=0, zorder=0)


def _rtt(data, t: pd.Series) -> tuple[np.ndarray, np.ndarray] | None:
    """Per snapshot: median and maximum RTT (ms) in the loaded direction (analysis.health.loaded_rtt)
    over the live TCP connections (samples carried forward)."""
    s = loaded_rtt(data)
    if s is None:
        return None
    s = s.dropna(subset=["rtt_us"])
    if s.empty:
        return None
    wide = s.pivot_table(index="seq", columns="module", values="rtt_us", aggfunc="last")
    wide = wide.reindex(t.index).ffill()
    alive = data.counters[data.counters["module"].isin(wide.columns) & (data.counters["dir"] == "out")]
    live = pd.DataFrame(False, index=t.index, columns=wide.columns)
    for m, g in alive.groupby("module"):
        live.loc[live.index.isin(g["seq"]), m] = True
    v = wide.where(live).to_numpy(float) / 1000.0
    with warnings.catch_warnings():   # snapshots without a live connection: all-NaN rows
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(v, axis=1), np.nanmax(v, axis=1)


def health_figure(data, health=None) -> bytes:
    """One run's network health over time (module docstring)."""
    t = data.snapshots["mono"] - data.t0
    fig, axes = plt.subplots(3, 1, figsize=(12, 5.4), sharex=True, squeeze=False)
    ax = axes[0, 0]
    rtt = _rtt(data, t)
    if rtt is None:
        ax.text(0.5, 0.5, "no RTT samples recorded", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.plot(t.to_numpy(), rtt[0], lw=1, color="#1f77b4", label="median over connections")
        ax.plot(t.to_numpy(), rtt[1], lw=0.8, color="#d62728", alpha=0.8, label="maximum")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, loc="upper right", frameon=False)
    ax.set_ylabel("RTT ms", fontsize=8)
    ax.set_title("RTT of the TCP connections in their loaded direction (senders: tcpi_rtt, receivers: "
                 "tcpi_rcv_rtt)", fontsize=9, loc="left")
    ax = axes[1, 0]
    q = data.queue_stats
    if q is None or q.empty:
        ax.text(0.5, 0.5, "no queue samples (older run, or queues on the testbed)", ha="center", va="center",
                transform=ax.transAxes)
    else:
        sent = q.groupby(["node", "interface"])["sent_packets"].agg(lambda s: float(s.max() - s.min()))
        for (node, iface) in sent.sort_values(ascending=False).index[:MAX_QUEUES]:
            g = q[(q["node"] == node) & (q["interface"] == iface)].sort_values("mono")
            x = g["mono"].to_numpy(float) - data.t0
            line, = ax.plot(x, g["backlog_packets"].to_numpy(float), lw=1, drawstyle="steps-post",
                            label=f"{node}:{iface}")
            dropped = np.diff(g["drops"].to_numpy(float), prepend=g["drops"].iloc[0]) > 0
            if dropped.any():
                ax.plot(x[dropped], g["backlog_packets"].to_numpy(float)[dropped], "v", ms=4, color=line.get_color())
        ax.legend(fontsize=7, loc="upper right", frameon=False, title="▼ drops", title_fontsize=7)
    ax.set_ylabel("backlog pkts", fontsize=8)
    ax.set_title(f"Backlog of the busiest shaped queues (at most {MAX_QUEUES})", fontsize=9, loc="left")
    ax = axes[2, 0]
    c = data.counters
    tcp = data.modules.index[data.modules["kind"] == "tcp"]
    r = c[(c["dir"] == "out") & c["module"].isin(tcp) & ~c["invalid"]].groupby("seq")["errors"].sum()
    ax.vlines(t.reindex(r.index).to_numpy(), 0, r.to_numpy(float), color="#555555", lw=1)   # one collection: quick
    ax.set_ylim(bottom=0)
    ax.set_ylabel("segments", fontsize=8)
    ax.set_title("TCP retransmissions per snapshot, all connections", fontsize=9, loc="left")
    ax.set_xlabel("time since workload start (s); fault windows shaded, recovery margins lighter", fontsize=8)
    for row in axes[:, 0]:
        _shade(row, data)
        row.tick_params(labelsize=7)
        row.grid(axis="y", lw=0.3, alpha=0.5)
    if health is not None and health.silence_rate is not None:
        fig.suptitle(f"silence rate {100 * health.silence_rate:.2f}% of {health.busy} busy TCP module-snapshots "
                     f"in quiet time (warning above {100 * SILENCE_WARN:g}%)", fontsize=9, x=0.01, ha="left")
    tight(fig)
    return _png(fig)


def health_runs_figure(names: list[str], healths: list) -> bytes:
    """Every run's health figures side by side (module docstring); `healths` may hold None."""
    n = len(names)
    fig, axes = plt.subplots(1, 3, figsize=(12, 1.4 + 0.22 * n), sharey=True, squeeze=False)
    y = np.arange(n)

    def val(h, attr, scale=1.0):
        v = None if h is None else getattr(h, attr)
        return np.nan if v is None else float(v) * scale

    sil = np.array([val(h, "silence_rate", 100.0) for h in healths])
    ax = axes[0, 0]
    ax.barh(y, np.nan_to_num(sil), color=np.where(sil > 100 * SILENCE_WARN, "#e31a1c", "#74a9cf"))
    ax.axvline(100 * SILENCE_WARN, color="black", lw=0.8, ls="--")
    ax.set_title(f"silence % (warning above {100 * SILENCE_WARN:g}%)", fontsize=9, loc="left")
    ax = axes[0, 1]
    ax.plot([val(h, "rtt_ms_median") for h in healths], y, "o", ms=4, label="median")
    ax.plot([val(h, "rtt_ms_p99") for h in healths], y, "x", ms=4, label="p99")
    if np.nanmax([val(h, "rtt_ms_p99") for h in healths] + [0.0]) > 0:
        ax.set_xscale("log")   # one run's p99 can be 100 times the others'
    ax.set_title("RTT ms (log), quiet time", fontsize=9, loc="left")
    ax.legend(fontsize=7, frameon=False)
    ax = axes[0, 2]
    ax.barh(y - 0.2, [np.nan_to_num(val(h, "queue_drops_quiet")) for h in healths], height=0.4, label="queue drops")
    ax.barh(y + 0.2, [np.nan_to_num(val(h, "retransmissions_quiet")) for h in healths], height=0.4,
            label="retransmissions")
    ax.set_title("in quiet time", fontsize=9, loc="left")
    ax.legend(fontsize=7, frameon=False)
    axes[0, 0].set_yticks(y)
    axes[0, 0].set_yticklabels(names, fontsize=7)
    axes[0, 0].set_ylim(n - 0.5, -0.5)
    for ax in axes[0]:
        ax.tick_params(labelsize=7)
        ax.grid(axis="x", lw=0.3, alpha=0.5)
    tight(fig)
    return _png(fig)
