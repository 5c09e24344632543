"""The report's section per fault: its window, kind and target, what each variant said about the
target and its neighbours during the window and the recovery margin after it, and the counters
around it (a small SVG drawn here: quick to make, small to embed).

Times are seconds since the run's workload start (t0). A snapshot belongs to a period when its
interval (previous snapshot, this snapshot] overlaps it. The recovery margin is the one the labeller
and the network health use (rundir.facts.recovery_after, the spec's `isolation.recovery`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.health import fault_spans
from analysis.load import targets_nothing
from analysis.render.html.html import details, esc, svg_img, table
from analysis.render.plots import KIND_ORDER, fault_colour, short_name
from rundir import facts

PRE_S = 2.0            # counters shown from this long before the window ...
POST_S = 1.0           # ... to this long after the recovery margin
MAX_NEIGHBOURS = 8     # modules next to the target shown (the target's parents and children)
MAX_COUNTER_ROWS = 14  # rows of the counters figure
LABEL_ORDER = ("STALLED", "BLOCKED", "DONTCARE", "HEALTHY")


@dataclass
class FaultTimes:
    """A fault that took effect: its row of RunData.faults and its times (monotonic seconds)."""

    fault: object
    start: float
    end: float
    margin_end: float


def fault_windows(data) -> list[FaultTimes]:
    """The faults that took effect (a verified start), in order, with their recovery margins."""
    last = float(data.snapshots["mono"].iloc[-1])
    rows = list(facts.took_effect(data.faults).itertuples(index=False))
    out = []
    for f, (a, b) in zip(rows, fault_spans(data), strict=True):
        end = float(f.end) if f.end is not None and f.end == f.end else last
        out.append(FaultTimes(f, a, end, b if math.isfinite(b) else last))
    return out


class BySeq:
    """A (module, dir, seq) frame sorted by snapshot, to take the rows of a range of snapshots quickly
    (a run's scored frame has a row per variant, module, direction and snapshot)."""

    def __init__(self, frame: pd.DataFrame):
        seq = frame["seq"].to_numpy()
        order = np.argsort(seq, kind="stable")
        self.frame = frame.iloc[order]
        self.seq = seq[order]

    def between(self, seqs: np.ndarray, modules=None) -> pd.DataFrame:
        """The rows of snapshots min(seqs)..max(seqs) (none for no seqs), of `modules` if given."""
        if len(seqs) == 0:
            return self.frame.iloc[:0]
        a, b = np.searchsorted(self.seq, [seqs.min(), seqs.max()], side="left")[0], \
            np.searchsorted(self.seq, seqs.max(), side="right")
        rows = self.frame.iloc[a:b]
        return rows if modules is None else rows[rows["module"].isin(list(modules))]


def _seqs(data, a: float, b: float) -> np.ndarray:
    """Snapshots whose interval (start, mono] overlaps (a, b)."""
    s = data.snapshots
    mono = s["mono"].to_numpy(float)
    start = s["start"].fillna(s["mono"]).to_numpy(float)
    return s.index.to_numpy()[(mono > a) & (start < b)]


def neighbours(data, m: int, a: float, b: float, scored: BySeq, counters: BySeq) -> list[tuple[int, str]]:
    """(module, "above" | "below") joined to `m` by an edge alive during (a, b): the parents and
    children, at most MAX_NEIGHBOURS, those with ground-truth positives in the window and the busiest first."""
    e = data.edges
    alive = (e["born"] <= b) & (e["died"].isna() | (e["died"] >= a))
    found = [(int(p), "above") for p in e.loc[alive & (e["child"] == m), "parent"]]
    found += [(int(c), "below") for c in e.loc[alive & (e["child"] != m) & (e["parent"] == m), "child"]]
    found = list(dict.fromkeys(found))
    if len(found) > MAX_NEIGHBOURS:
        seqs = _seqs(data, a, b)
        ids = [x for x, _ in found]
        pos = scored.between(seqs, ids).groupby("module")["actual"].sum()
        traffic = counters.between(seqs, ids).groupby("module")["tm"].sum()
        found.sort(key=lambda x: (-int(pos.get(x[0], 0)), -float(traffic.get(x[0], 0.0)), x[0]))
        found = found[:MAX_NEIGHBOURS]
    kinds = data.modules["kind"]
    return sorted(found, key=lambda x: (x[1] != "above", KIND_ORDER.get(kinds.get(x[0], ""), 9), x[0]))


def _tally(sub: pd.DataFrame, period: np.ndarray) -> dict:
    """(variant, module, dir, period) -> what was said and the truth, over the rows of `sub`;
    `period` is each row's "window" or "margin"."""
    valid = ~sub["invalid"].to_numpy(bool)
    scored = ~sub["exclude"].to_numpy(bool)
    frame = pd.DataFrame({
        "variant": sub["variant"].astype(str).to_numpy(), "module": sub["module"].to_numpy(),
        "dir": sub["dir"].astype(str).to_numpy(), "period": period,
        "n": valid.astype(int), "pos": (sub["positive"].to_numpy(bool) & valid).astype(int),
        "cf": np.where(valid, sub["cf"].to_numpy(float), np.nan), "rows": 1, "scored": scored.astype(int),
        "actual": (sub["actual"].to_numpy(bool) & scored).astype(int)})
    labels = sub["label"].astype(str).to_numpy()
    for lab in LABEL_ORDER:
        frame[lab] = ((labels == lab) & valid).astype(int)
    g = frame.groupby(["variant", "module", "dir", "period"], sort=False).agg(
        {"n": "sum", "pos": "sum", "cf": "max", "rows": "sum", "scored": "sum", "actual": "sum",
         **{lab: "sum" for lab in LABEL_ORDER}})
    return {k: r for k, r in zip(g.index, g.to_dict("records"), strict=True)}


def _said(r: dict | None, cf: bool) -> str:
    """What one variant said over some snapshots of one module and direction (HTML)."""
    if r is None or not r["n"]:
        return "–"
    if cf:
        return f"positive {r['pos']}/{r['n']} · cf max {r['cf']:.2f}"
    return " ".join(f'<span class="lab {lab}">{lab} {r[lab]}</span>' for lab in LABEL_ORDER
                    if r[lab]) + f' <span class="meta">/{r["n"]}</span>'


def _truth(r: dict | None) -> str:
    if r is None:
        return "–"
    out = f"positive {r['actual']}/{r['scored']}"
    return out + (f" · {r['rows'] - r['scored']} not scored" if r["rows"] > r["scored"] else "")


def said_table(data, scored: BySeq, variants: list[str], w: FaultTimes, modules: list[tuple[int, str]]) -> str:
    """Per module and direction: the ground truth and each variant's diagnoses, window and margin."""
    win, mar = _seqs(data, w.start, w.end), _seqs(data, w.end, w.margin_end)
    mar = np.setdiff1d(mar, win)
    sub = scored.between(np.union1d(win, mar), [m for m, _ in modules])
    tally = _tally(sub, np.where(sub["seq"].isin(win).to_numpy(), "window", "margin"))
    cf = {v: bool(sub.loc[sub["variant"] == v, "label"].isna().all()) if len(sub) else False for v in variants}
    header = ["Module", "Role", "Dir", "Truth: window", "Truth: margin"]
    for v in variants:
        header += [f"{v}: window", f"{v}: margin"]
    rows = []
    for m, role in modules:
        for d in ("in", "out"):
            name = esc(short_name(data, m))
            cells = [(f"<b>{name}</b>" if role == "target" else name) if d == "in" else "", role if d == "in" else "", d]
            cells += [_truth(tally.get((variants[0], m, d, p))) for p in ("window", "margin")]
            for v in variants:
                cells += [_said(tally.get((v, m, d, p)), cf[v]) for p in ("window", "margin")]
            rows.append(cells)
    return table(header, rows, raw=True, cap=None, cls="said")


# ----------------------------------------------------------------------------- the counters figure


def _ticks(lo: float, hi: float) -> list[float]:
    """At most about 12 round ticks between lo and hi (seconds), for a window of any length."""
    span = max(hi - lo, 1e-6)
    step = next((s for s in (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600) if span / s <= 12), None)
    if step is None:   # over 2 hours: a 1-2-5 step of 10-minute multiples
        step = 600 * next(m * 10 ** e for e in range(12) for m in (1, 2, 5) if span / (600 * m * 10 ** e) <= 12)
    return [k * step for k in range(math.ceil(lo / step), math.floor(hi / step) + 1)]


def _short(v: float) -> str:
    """A number in at most about 6 characters: 1229, 14.5k, 2.87M."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= 10 * div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.4g}"


def counters_svg(data, w: FaultTimes, modules: list[tuple[int, str]], counters: BySeq) -> str:
    """The counter deltas of the target and its neighbours from PRE_S before the window to POST_S
    after the margin: one row per counter that changes (messages tm, wait ms wt, queue length q; per
    direction), each scaled to its own maximum (shown at the right), as an SVG document."""
    lo, hi = w.start - PRE_S, w.margin_end + POST_S
    seqs = _seqs(data, lo, hi)
    snaps = data.snapshots.loc[seqs]
    t1 = snaps["mono"].to_numpy(float) - data.t0
    t0 = snaps["start"].fillna(snaps["mono"]).to_numpy(float) - data.t0
    c = counters.between(seqs, [m for m, _ in modules])
    # plain arrays: this runs once per fault, and pandas' per-call overhead would dominate
    mod, dirs, sq = c["module"].to_numpy(), c["dir"].astype(str).to_numpy(), c["seq"].to_numpy()
    invalid = c["invalid"].to_numpy(bool)
    cols = {k: c[k].to_numpy(float) for k in ("tm", "wait", "queued")}
    has = {"wait": c["has_wait"].to_numpy(bool), "queued": c["has_queue"].to_numpy(bool)}
    rows = []
    for m, _role in modules:
        for d in ("in", "out"):
            sel = np.flatnonzero((mod == m) & (dirs == d))
            if not sel.size:
                continue
            at = np.searchsorted(seqs, sq[sel])
            for col, short in (("tm", "tm"), ("wait", "wt"), ("queued", "q")):
                if col in has and not has[col][sel].any():
                    continue
                v = np.full(len(seqs), np.nan)
                v[at] = np.where(invalid[sel], np.nan, cols[col][sel])
                fin = v[np.isfinite(v)]
                if fin.size == 0 or np.all(fin == fin[0]):
                    continue
                rows.append((f"{short_name(data, m)} {short}{d[0]}", v))
    more = max(0, len(rows) - MAX_COUNTER_ROWS)
    rows = rows[:MAX_COUNTER_ROWS]
    label_w, plot_w, right_w, row_h, top = 250, 560, 90, 20, 18
    width = label_w + plot_w + right_w
    height = top + row_h * max(1, len(rows)) + (14 if more else 4)
    x0, x1 = (w.start - data.t0 - PRE_S), (w.margin_end - data.t0 + POST_S)

    def x(t: float) -> float:
        return label_w + (min(max(t, x0), x1) - x0) / (x1 - x0) * plot_w

    colour = fault_colour(data, w.fault.kind, "#999999")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, sans-serif" font-size="10">',
             f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
             f'<rect x="{x(w.start - data.t0):.1f}" y="{top}" width="{x(w.end - data.t0) - x(w.start - data.t0):.1f}" '
             f'height="{height - top}" fill="{colour}" fill-opacity="0.35"/>',
             f'<rect x="{x(w.end - data.t0):.1f}" y="{top}" width="{x(w.margin_end - data.t0) - x(w.end - data.t0):.1f}" '
             f'height="{height - top}" fill="{colour}" fill-opacity="0.12"/>']
    for tick in _ticks(x0, x1):
        parts.append(f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{top - 3}" y2="{height}" stroke="#e3e3e3"/>'
                     f'<text x="{x(tick):.1f}" y="{top - 6}" text-anchor="middle" fill="#555">{tick:g}s</text>')
    for i, (label, v) in enumerate(rows):
        y_base = top + (i + 1) * row_h - 3
        scale = (row_h - 6) / float(np.nanmax(v)) if np.nanmax(v) > 0 else 0.0
        parts.append(f'<line x1="{label_w}" x2="{label_w + plot_w}" y1="{y_base}" y2="{y_base}" stroke="#cfcfcf"/>'
                     f'<text x="{label_w - 6}" y="{y_base - 3}" text-anchor="end">{esc(label)}</text>'
                     f'<text x="{label_w + plot_w + 6}" y="{y_base - 3}" fill="#555">max {_short(np.nanmax(v))}</text>')
        path, pen, last_y = [], False, None
        for a, b, val in zip(t0, t1, v, strict=True):
            if not np.isfinite(val):
                pen = False
                continue
            y = round(y_base - val * scale, 1)
            if not pen:
                path.append(f"M{x(a):.1f},{y:g}")
            elif y != last_y:
                path.append(f"V{y:g}")
            elif path[-1].startswith("H"):
                path.pop()   # the same level goes on: one segment
            path.append(f"H{x(b):.1f}")
            pen, last_y = True, y
        if path:
            parts.append(f'<path d="{"".join(path)}" fill="none" stroke="#1b5e20" stroke-width="1.3"/>')
    if not rows:
        parts.append(f'<text x="{label_w}" y="{top + 14}" fill="#555">no counter of these modules changes here</text>')
    if more:
        parts.append(f'<text x="{label_w}" y="{height - 3}" fill="#555">... {more} more counter rows not shown</text>')
    parts.append("</svg>")
    return "".join(parts)


# ----------------------------------------------------------------------------- sections


def _no_module(f) -> bool:
    """The fault has no target module (None, NaN or pd.NA: `x != x` of pd.NA is NA, no bool)."""
    return f.target_module is None or bool(pd.isna(f.target_module))


def _no_target_text(data, f) -> str:
    """Why a fault has no target module: it targets none the collector watches (valid: a path_blackhole
    no monitored connection crosses), or its target was not recorded (the run lacks the module)."""
    if targets_nothing(f, data.info.monitor, data.fault_kinds):
        return "none: targets no monitored module"
    return "target not recorded"


def _text(v) -> str:
    """A faults row's text field ('' for None, NaN, pd.NA)."""
    return "" if v is None or (not isinstance(v, str) and bool(pd.isna(v))) else str(v)


def _head(data, w: FaultTimes) -> str:
    f = w.fault
    a, b, m = w.start - data.t0, w.end - data.t0, w.margin_end - data.t0
    target = (f"target {_no_target_text(data, f)}" if _no_module(f)
              else f"target {short_name(data, int(f.target_module))} ({data.modules['key'].get(int(f.target_module), '')})")
    return (f"window {a:.2f}–{b:.2f} s ({b - a:.2f} s) · recovery margin to {m:.2f} s · {target}"
            + (f" · at {f.at_node}" if getattr(f, "at_node", None) else ""))


def fault_section(data, scored: BySeq, counters: BySeq, variants: list[str], w: FaultTimes) -> str:
    """One fault: heading, the variants' table and the counters figure."""
    f = w.fault
    body = [f'<p class="meta">{esc(_head(data, w))}</p>']
    if _no_module(f):
        why = ("This fault targets no module the collector watches (valid: it labels nothing; "
               f"{esc(_text(f.description) or f.kind)})." if targets_nothing(f, data.info.monitor, data.fault_kinds)
               else "The target was not observed by the collector: nothing to show.")
        body.append(f'<p class="note">{why}</p>')
    else:
        tm = int(f.target_module)
        near = neighbours(data, tm, w.start, w.end, scored, counters)
        layers = [x for x in near if x[1] == "above"] + [(tm, "target")] + [x for x in near if x[1] == "below"]
        body.append(said_table(data, scored, variants, w, layers))
        svg = counters_svg(data, w, [(tm, "target"), *near], counters)   # the target's rows first (the figure is capped)
        body.append(f"<figure>{svg_img(svg, f'counters around fault {int(f.id)}')}"
                    "<figcaption>Counter deltas per snapshot of the target and its neighbours, each row scaled "
                    "to its maximum; fault window shaded, recovery margin lighter.</figcaption></figure>")
    return f'<div class="fault {esc(f.kind)}">' + "\n".join(body) + "</div>"


def anchor(data, fault_id: int) -> str:
    """The id of a fault's section, unique in a report of many runs."""
    p = data.info.path
    return "fault-" + "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in f"{p.parent.name}-{p.name}-{fault_id}")


def _target(data, f) -> str:
    return _no_target_text(data, f) if _no_module(f) else short_name(data, int(f.target_module))


def faults_table(data, scored: BySeq, variant: str, windows: list[FaultTimes], budget: int) -> str:
    """Every fault of the run in one table: window, kind, target, and for the target the ground truth
    and `variant`'s STALLED snapshots in the window; the first `budget` link to their sections."""
    rows = []
    for w in windows:
        f = w.fault
        a, b = w.start - data.t0, w.end - data.t0
        seqs = _seqs(data, w.start, w.end)
        if _no_module(f):
            truth = said = "–"
            target = _no_target_text(data, f)
        else:
            g = scored.between(seqs, [int(f.target_module)])
            g = g[(g["variant"] == variant) & ~g["invalid"]]
            truth = f"{int((g['actual'] & ~g['exclude']).sum())}/{int((~g['exclude']).sum())}"
            said = f"{int(g['positive'].sum())}/{len(g)}"
            target = short_name(data, int(f.target_module))
        fid = int(f.id)
        link = f'<a href="#{anchor(data, fid)}">{fid}</a>' if len(rows) < budget else str(fid)
        rows.append([link, esc(f.kind), esc(target), esc(_text(f.description)), f"{a:.2f}", f"{b - a:.2f}",
                     f"{w.margin_end - w.end:.2f}", truth, said])
    header = ["#", "Kind", "Target", "Description", "Start s", "Length s", "Margin s", "Target: truth positive",
              f"Target: {variant} positive"]
    return (table(header, rows, raw=True, cap=300, rest="nestlab report RUN shows one run's", sep_col=None)
            + '<p class="note">Start: seconds since the workloads started; margin: the recovery margin after the '
              "window. Target columns: of the target's module-direction-snapshots in the window (both directions), "
              "how many the ground truth calls positive (of those scored) and how many the variant did.</p>")


def faults_part(data, scored: pd.DataFrame, variants: list[str], budget: int, open_: bool = False
                ) -> tuple[str, int]:
    """The faults of one run: the overview table and up to `budget` fault sections (collapsible,
    `open_`: shown open). Returns (HTML, sections used)."""
    windows = fault_windows(data)
    missed = len(data.faults) - len(windows)
    if not len(data.faults):
        return '<p class="note">No faults in this run.</p>', 0
    scored_ix, counters_ix = BySeq(scored), BySeq(data.counters)
    parts = [faults_table(data, scored_ix, variants[0], windows, budget)]
    if missed:
        parts.append(f'<p class="note">{missed} recorded fault(s) did not take effect (no verified start).</p>')
    shown = windows[:max(0, budget)]
    for w in shown:
        f = w.fault
        descr = _text(f.description)
        what = f" · {esc(descr)}" if descr and descr != f.kind else ""
        summary = (f"Fault {int(f.id)} · {esc(f.kind)} · {esc(_target(data, f))}{what} "
                   f'<span class="meta">{w.start - data.t0:.1f}–{w.end - data.t0:.1f} s</span>')
        parts.append(details(summary, fault_section(data, scored_ix, counters_ix, variants, w), open_=open_,
                             attrs={"id": anchor(data, int(f.id))}))
    if len(shown) < len(windows):
        parts.append(f'<p class="note">Sections shown for the first {len(shown)} of {len(windows)} faults '
                     "(the report keeps to a size that opens quickly); `nestlab report RUN` for one run shows more.</p>")
    return "\n".join(parts), len(shown)
