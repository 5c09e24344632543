"""Figures of one run (matplotlib, Agg backend; PNG).

- `diagnosis_overview`: the diagnosis of every module over time, one strip per module and
  direction (HEALTHY green, DONTCARE light blue, BLOCKED yellow, STALLED red; certainty-factor
  variants: blue..red by the certainty), with the fault windows shaded above and the ground
  truth's positive periods drawn as a black bar under each strip.
- `subgraph_figure`: thesis Figures 3.6-3.8 / NeST paper Figure 7 for one module's subgraph (its
  ancestors and descendants): a counter heatmap on top (thesis 3.5.4 colours: message counters
  white (0) -> light green -> dark green -> black (the row's largest delta); wait counters white ->
  yellow (25%) -> orange (50%) -> red (75%) -> black; queue lengths white -> blue -> black; rows
  that never change are left out; ancestors at the top) and, below, the inbound and outbound
  diagnosis timelines of the same modules (thesis 5.3.2 scale: STALLED +1, DONTCARE 0, BLOCKED
  -0.5, HEALTHY -1; certainty-factor variants: the certainty) with the fault windows shaded.
- `module_timeline`: thesis Figure 5.1: the lifespans of the monitored processes (top) and, for
  one workload, its processes with their sockets and TCP connections beneath (bottom).

`plot_run(data, scored, variant, out_dir)` draws them all for a run and returns the files.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from analysis import studies

# matplotlib on first use (Agg; labels are names from the run: text, never TeX): analysis.render.mpl
from analysis.render.mpl import plt, tight
from rundir import facts
from rundir.layout import fresh, output_dir

if TYPE_CHECKING:
    from matplotlib.patches import Patch

LABEL_Y = {"STALLED": 1.0, "DONTCARE": 0.0, "BLOCKED": -0.5, "HEALTHY": -1.0}
# overview strip colours: 0 absent, 1 HEALTHY, 2 DONTCARE, 3 BLOCKED, 4 STALLED, 5 not scored
STRIP_COLOURS = ["#ffffff", "#74c476", "#c6dbef", "#fed976", "#e31a1c", "#bdbdbd"]
STRIP_CODE = {"HEALTHY": 1, "DONTCARE": 2, "BLOCKED": 3, "STALLED": 4}


class _Colormaps(dict):
    """The heatmaps' colour maps, made on first use (matplotlib)."""

    def __missing__(self, key: str):
        from matplotlib.colors import LinearSegmentedColormap

        self.update({
            "tm": LinearSegmentedColormap.from_list("msgs", ["#ffffff", "#c7e9c0", "#41ab5d", "#00441b", "#000000"]),
            "wait": LinearSegmentedColormap.from_list(
                "wait", [(0, "#ffffff"), (0.25, "#ffff33"), (0.5, "#ff9900"), (0.75, "#e31a1c"), (1, "#000000")]),
            "queued": LinearSegmentedColormap.from_list("queued", ["#ffffff", "#9ecae1", "#08519c", "#000000"]),
        })
        return dict.__getitem__(self, key)


CMAPS = _Colormaps()
ABSENT = np.array([0.92, 0.92, 0.92, 1.0])
MAX_SUBGRAPH = 14
MAX_OVERVIEW = 48
DPI = 110


# ----------------------------------------------------------------------------- helpers



def short_name(data, m: int) -> str:
    """A module's label in figures and the report; with several monitored hosts, its host first
    (`db: tcp#12 :3306>:51234`, analysis.model.hosts)."""
    a = data.modules.loc[m]["attrs"]
    host = a.get("host") if isinstance(a, dict) else None
    label = _short_name(data, m, host)
    return f"{host}: {label}" if isinstance(host, str) and host else label


def _short_name(data, m: int, host) -> str:
    row = data.modules.loc[m]
    a = row["attrs"]
    kind = row["kind"]
    if kind == "app":
        name = str(row["name"])
        if isinstance(host, str) and name.startswith(f"{host}: "):
            name = name[len(host) + 2:]
        prog = name.split(" ")[0]
        return f"{prog}#{m}"
    if kind == "socket":
        return f"sock#{m} fd{a.get('fd', '?')}"
    if kind == "tcp":
        return f"tcp#{m} :{a.get('sport', '?')}>:{a.get('dport', '?')}"
    if kind == "ipeth":
        return f"ip+eth#{m}"
    if kind == "sconn":   # SRC:outI>DST:inJ, the connection's own name (docs/streams.md)
        return str(row["name"])
    return f"{kind}#{m}"


def _fault_windows(data) -> list[tuple[str, float, float, int | None]]:
    out = []
    for f in facts.took_effect(data.faults).itertuples(index=False):
        tm = None if pd.isna(f.target_module) else int(f.target_module)
        out.append((str(f.kind), float(f.start) - data.t0, float(f.end) - data.t0, tm))
    return out


def fault_colour(data, kind: str, default: str) -> str:
    """The colour of a fault kind's windows, as the run records the kind (rundir.faultkinds), or
    `default` for a kind without one."""
    info = data.fault_kinds.get(str(kind))
    return info.colour if info is not None and info.colour else default


def _with_children(data, kind: str) -> bool:
    info = data.fault_kinds.get(str(kind))
    return info is not None and info.children is not None


def _shade(ax, data, windows, alpha: float = 0.25) -> None:
    for kind, a, b, _ in windows:
        ax.axvspan(a, b, color=fault_colour(data, kind, "#cccccc"), alpha=alpha, lw=0, zorder=0)


def _fault_legend(data, windows) -> list[Patch]:
    from matplotlib.patches import Patch

    kinds = sorted({k for k, *_ in windows})
    infos = data.fault_kinds
    return [Patch(color=fault_colour(data, k, "#cccccc"), alpha=0.5,
                  label=f"{infos[k].shown if k in infos else k} fault") for k in kinds]


def _times(data) -> tuple[np.ndarray, np.ndarray]:
    """Snapshot seqs and their run-relative times."""
    s = data.snapshots
    return s.index.to_numpy(np.int64), s["mono"].to_numpy(float) - data.t0


def _graph(data) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
    down: dict[int, set[int]] = {}
    up: dict[int, set[int]] = {}
    for p, c in zip(data.edges["parent"], data.edges["child"], strict=True):
        down.setdefault(int(p), set()).add(int(c))
        up.setdefault(int(c), set()).add(int(p))
    return down, up


def _closure(start: int, nbrs: dict[int, set[int]]) -> list[int]:
    seen, todo, order = {start}, [start], []
    while todo:
        m = todo.pop(0)
        for n in sorted(nbrs.get(m, ())):
            if n not in seen:
                seen.add(n)
                todo.append(n)
                order.append(n)
    return order


KIND_ORDER = {"app": 0, "socket": 1, "tcp": 2, "ipeth": 3}


def subgraph(data, m: int, limit: int = MAX_SUBGRAPH) -> list[int]:
    """The module, its ancestors and its descendants, upper layers first (thesis 3.5.4)."""
    down, up = _graph(data)
    mods = {m, *_closure(m, up), *_closure(m, down)}
    kinds = data.modules["kind"]
    ordered = sorted(mods, key=lambda x: (KIND_ORDER.get(kinds.get(x, ""), 9), x))
    if len(ordered) > limit:
        # keep the module, its chain, then the busiest of the rest
        chain = {m, *_closure(m, up)}
        traffic = data.counters.groupby("module")["tm"].sum()
        rest = sorted((x for x in ordered if x not in chain), key=lambda x: -traffic.get(x, 0))
        keep = chain | set(rest[: max(0, limit - len(chain))])
        ordered = [x for x in ordered if x in keep]
    return ordered


def _diag_of(scored: pd.DataFrame, variant: str, modules=None) -> pd.DataFrame:
    """The rows of one variant (and of `modules`), one boolean mask: a report's frame has millions."""
    keep = (scored["variant"] == variant).to_numpy(bool)
    if modules is not None:
        keep = keep & np.isin(scored["module"].to_numpy(), list(modules))
    return scored[keep]


def _is_cf(diag: pd.DataFrame) -> bool:
    return bool(diag["label"].isna().all()) if len(diag) else False


def _matrix(frame: pd.DataFrame, value: str, modules: list[int], seqs: np.ndarray, fill=np.nan) -> np.ndarray:
    """modules x snapshots matrix of one column of a (module, seq) frame."""
    if frame.empty:
        return np.full((len(modules), len(seqs)), fill, dtype=float)
    return _grid(frame["module"].to_numpy(), frame["seq"].to_numpy(), frame[value].to_numpy(float),
                 modules, seqs, fill)


def _grid(mod: np.ndarray, seq: np.ndarray, values: np.ndarray, modules: list[int], seqs: np.ndarray,
          fill=np.nan) -> np.ndarray:
    """modules x snapshots matrix of values given per (module, seq); other modules left out."""
    out = np.full((len(modules), len(seqs)), fill, dtype=float)
    row = pd.Index(modules).get_indexer(mod)
    col = np.searchsorted(seqs, seq)
    ok = (row >= 0) & (col < len(seqs))
    out[row[ok], col[ok]] = values[ok]
    return out


def _strip_codes(label: pd.Series) -> np.ndarray:
    """Each row's overview colour (STRIP_CODE; 0 for anything else), by categories when it has them."""
    if isinstance(label.dtype, pd.CategoricalDtype):
        lut = pd.Series(label.cat.categories).astype(str).map(STRIP_CODE).fillna(0).to_numpy(float)
        return np.append(lut, 0.0)[label.cat.codes.to_numpy()]   # code -1 (no label): the 0 appended
    return label.astype(str).map(STRIP_CODE).fillna(0).to_numpy(float)


def _extent(t: np.ndarray) -> tuple[float, float]:
    if len(t) < 2:
        return (float(t[0]) - 0.05, float(t[0]) + 0.05) if len(t) else (0.0, 1.0)
    step = float(np.median(np.diff(t)))
    return float(t[0]) - step, float(t[-1])


# ----------------------------------------------------------------------------- figures


def _overview_rows(data, scored: pd.DataFrame, variant: str, modules: list[int] | None
                   ) -> tuple[list[int], int, pd.DataFrame]:
    """(the modules drawn, how many are left out, the variant's rows): by default the fault targets
    and the most often positive (at most MAX_OVERVIEW), ranked from the variant's arrays, and the
    rows of those modules only."""
    kinds = data.modules["kind"]
    hidden = 0
    if modules is None:
        mine = (scored["variant"] == variant).to_numpy(bool)
        mod = scored["module"].to_numpy()[mine]
        present = pd.unique(mod).tolist()
        if len(present) > MAX_OVERVIEW:
            # the fault targets first, then the modules with most positives (diagnosed or actual)
            targets = set(data.faults["target_module"].dropna().astype(int).tolist())
            hit = scored["positive"].to_numpy(bool)[mine] | (scored["actual"].to_numpy(bool)[mine]
                                                              & ~scored["exclude"].to_numpy(bool)[mine])
            group, ids = pd.factorize(mod)
            score = dict(zip(ids.tolist(), np.bincount(group, weights=hit, minlength=len(ids)).tolist(), strict=True))
            ranked = sorted(present, key=lambda m: (m not in targets, -int(score.get(m, 0)), m))
            hidden = len(present) - MAX_OVERVIEW
            present = ranked[:MAX_OVERVIEW]
        modules = sorted(present, key=lambda x: (KIND_ORDER.get(kinds.get(x, ""), 9), x))
        return modules, hidden, _diag_of(scored, variant, modules)
    return modules, hidden, _diag_of(scored, variant)


def _strips(dd: pd.DataFrame, modules: list[int], seqs: np.ndarray, cf: bool) -> tuple[np.ndarray, np.ndarray]:
    """One direction's overview: (the diagnosis, the ground truth) as modules x snapshots matrices."""
    mod, seq = dd["module"].to_numpy(), dd["seq"].to_numpy()
    if cf:
        val = _grid(mod, seq, dd["cf"].to_numpy(float), modules, seqs)
    else:
        codes = np.where(dd["exclude"].to_numpy(bool), 5, _strip_codes(dd["label"]))
        val = _grid(mod, seq, codes, modules, seqs, fill=0)
    kept = ~dd["exclude"].to_numpy(bool)
    return val, _grid(mod[kept], seq[kept], dd["actual"].to_numpy(float)[kept], modules, seqs, fill=0)


def diagnosis_overview(data, scored: pd.DataFrame, variant: str, path: Path,
                       modules: list[int] | None = None, dpi: int = DPI) -> Path:
    """Every module's diagnosis over time, inbound and outbound, with faults and ground truth."""
    seqs, t = _times(data)
    modules, hidden, diag = _overview_rows(data, scored, variant, modules)
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    cf = _is_cf(diag)
    # the matrices first, and the rows let go before drawing (drawing the images takes the most memory)
    # the study kind's panels (a streams run's connections have one direction: no empty Inbound one)
    panels = list(studies.of_data(data).panels)
    grids = {d: _strips(diag[(diag["dir"] == d).to_numpy(bool)], modules, seqs, cf) for d, _ in panels}
    del diag
    windows = _fault_windows(data)
    n = max(1, len(modules))
    fig, axes = plt.subplots(len(panels), 1, figsize=(13, 1.6 + 0.24 * n * len(panels)), sharex=True, squeeze=False)
    x0, x1 = _extent(t)
    for ax, (d, title) in zip(axes[:, 0], panels, strict=True):
        val, gt = grids[d]
        if cf:
            cmap = plt.get_cmap("RdBu_r").with_extremes(bad="#ffffff")
            img = ax.imshow(np.ma.masked_invalid(val), aspect="auto", interpolation="nearest", cmap=cmap,
                            vmin=-1, vmax=1, extent=(x0, x1, n - 0.5, -0.5))
            fig.colorbar(img, ax=ax, pad=0.01, fraction=0.02, label="certainty")
        else:
            ax.imshow(val, aspect="auto", interpolation="nearest", cmap=ListedColormap(STRIP_COLOURS),
                      vmin=-0.5, vmax=5.5, extent=(x0, x1, n - 0.5, -0.5))
        # ground truth: a black bar in the lower part of each strip where the answer is positive
        step = (x1 - x0) / max(1, len(seqs))
        for i in range(n):
            on = gt[i] > 0
            if on.any():
                edges = np.diff(np.concatenate([[0], on.astype(np.int8), [0]]))
                for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True):
                    ax.plot([t[a] - step, t[b - 1]], [i + 0.36, i + 0.36], color="black", lw=1.6,
                            solid_capstyle="butt")
        for kind, a, b, _ in windows:
            ax.axvspan(a, b, ymin=1.0, ymax=1.04, color=fault_colour(data, kind, "#999999"), clip_on=False)
            ax.axvline(a, color=fault_colour(data, kind, "#999999"), lw=0.6, alpha=0.8)
            ax.axvline(b, color=fault_colour(data, kind, "#999999"), lw=0.6, alpha=0.8, ls=":")
        ax.set_yticks(range(n))
        ax.set_yticklabels([short_name(data, m) for m in modules], fontsize=7)
        more = f" ({n} of {n + hidden} modules: the fault targets and the most often positive)" if hidden else ""
        ax.set_title(f"{title} diagnosis, {variant}{more}", fontsize=9, loc="left", pad=8)
        ax.set_xlim(x0, x1)
    axes[-1, 0].set_xlabel("time since workload start (s)")
    handles = [] if cf else [Patch(color=STRIP_COLOURS[c], label=lab) for lab, c in STRIP_CODE.items()]
    handles += [Patch(color=STRIP_COLOURS[5], label="not scored (invalid / excluded)")] if not cf else []
    handles += [plt.Line2D([], [], color="black", lw=1.6, label="ground truth positive")]
    handles += _fault_legend(data, windows)
    fig.legend(handles=handles, loc="lower center", ncol=min(8, len(handles)), fontsize=7, frameon=False)
    tight(fig, rect=(0, 0.04, 1, 1))
    fig.savefig(fresh(path), dpi=dpi)
    plt.close(fig)
    return path


def _heat_rows(data, modules: list[int]) -> list[tuple[str, np.ndarray, str]]:
    """(label, values over snapshots, colour map) for each counter row that changes."""
    seqs, _ = _times(data)
    c = data.counters[data.counters["module"].isin(modules)]
    rows = []
    for m in modules:
        cm = c[c["module"] == m]
        for d in ("in", "out"):
            cd = cm[cm["dir"] == d]
            valid = cd[~cd["invalid"]]
            for col, short, cmap, has in (("tm", "tm", "tm", None), ("wait", "wt", "wait", "has_wait"),
                                          ("queued", "q", "queued", "has_queue")):
                if has is not None and not cd[has].any():
                    continue
                v = _matrix(valid, col, [m], seqs)[0]
                finite = v[np.isfinite(v)]
                if finite.size == 0 or np.all(finite == finite[0]):
                    continue  # a counter that never changes gets no row (thesis 3.5.4)
                rows.append((f"{short_name(data, m)} {short}{d[0]} ({finite.min():.4g}-{finite.max():.4g})", v, cmap))
    return rows


def row_top(v: np.ndarray) -> float:
    """The value drawn black: the row's largest delta, taken as the 99th percentile of its nonzero
    values so that one outlier (a late snapshot, a first delta from zero) does not wash it out."""
    nz = v[np.isfinite(v) & (v > 0)]
    return float(np.percentile(nz, 99)) if nz.size else 0.0


def _heat_image(rows) -> np.ndarray:
    img = np.zeros((len(rows), len(rows[0][1]) if rows else 0, 4))
    for i, (_, v, cmap) in enumerate(rows):
        top = row_top(v)
        norm = np.where(np.isfinite(v), np.clip(v, 0, None) / top if top > 0 else 0.0, np.nan)
        rgba = CMAPS[cmap](np.nan_to_num(norm, nan=0.0))
        rgba[~np.isfinite(v)] = ABSENT
        img[i] = rgba
    return img


def subgraph_figure(data, scored: pd.DataFrame, variant: str, module: int, path: Path,
                    window: tuple[float, float] | None = None) -> Path:
    """Counter heatmap and diagnosis timelines of one module's subgraph (thesis Figs 3.6-3.8)."""
    mods = subgraph(data, module)
    seqs, t = _times(data)
    rows = _heat_rows(data, mods)
    diag = _diag_of(scored, variant, mods)
    cf = _is_cf(diag)
    # the faults that target a module of this subgraph (an app_pause targets the app's sockets too:
    # rundir.faultkinds' `children`)
    inside = set(mods)
    windows = [w for w in _fault_windows(data)
               if w[3] in inside or (w[3] is not None and _with_children(data, w[0])
                                     and inside & set(_graph(data)[0].get(w[3], ())))]
    h_heat = max(1.5, 0.17 * len(rows))
    fig, axes = plt.subplots(3, 1, figsize=(13, h_heat + 5.2), sharex=True,
                             gridspec_kw={"height_ratios": [h_heat, 2.4, 2.4]}, squeeze=False)
    ax = axes[0, 0]
    x0, x1 = _extent(t)
    if rows:
        ax.imshow(_heat_image(rows), aspect="auto", interpolation="nearest", extent=(x0, x1, len(rows) - 0.5, -0.5))
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([r[0] for r in rows], fontsize=6.5)
    else:
        ax.text(0.5, 0.5, "no counter changes", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
    for kind, a, b, _ in windows:
        ax.axvline(a, color=fault_colour(data, kind, "#999999"), lw=0.8)
        ax.axvline(b, color=fault_colour(data, kind, "#999999"), lw=0.8, ls=":")
    ax.set_title(f"Counter deltas, subgraph of {short_name(data, module)} ({data.modules['name'].get(module, '')})"
                 "   tm: messages, wt: wait ms, q: queue length; i/o: in/out; white = 0, black = row max",
                 fontsize=8, loc="left")
    styles = ["-", "--", "-.", ":"]
    colours = plt.get_cmap("tab10").colors
    for ax, d, title in ((axes[1, 0], "in", "Inbound"), (axes[2, 0], "out", "Outbound")):
        _shade(ax, data, windows)
        dd = diag[diag["dir"] == d]
        for k, m in enumerate(mods):
            g = dd[dd["module"] == m].sort_values("seq")
            if g.empty:
                continue
            if cf:
                y = g["cf"].to_numpy(float)
            else:
                y = g["label"].astype(str).map(LABEL_Y).to_numpy(float)
            y = np.where(g["exclude"].to_numpy(bool), np.nan, y)
            # break the line where the module is absent
            tt = data.snapshots["mono"].reindex(g["seq"]).to_numpy(float) - data.t0
            gap = np.concatenate([[False], np.diff(g["seq"].to_numpy()) > 1])
            y = np.where(gap, np.nan, y)
            off = (k - len(mods) / 2) * 0.012
            ax.plot(tt, y + off, drawstyle="steps-pre", lw=1.1, ls=styles[k % 4], color=colours[k % 10],
                    label=short_name(data, m))
        if cf:
            ax.axhspan(-1.05, 0, color="#eeeeee", zorder=0)
            ax.set_ylim(-1.08, 1.08)
            ax.set_ylabel("certainty", fontsize=8)
        else:
            ax.set_yticks(list(LABEL_Y.values()))
            ax.set_yticklabels(list(LABEL_Y.keys()), fontsize=7)
            ax.set_ylim(-1.15, 1.15)
        ax.set_title(f"{title} diagnosis, {variant}", fontsize=8, loc="left")
        ax.grid(axis="y", lw=0.3, alpha=0.5)
    axes[1, 0].legend(handles=axes[1, 0].get_legend_handles_labels()[0] + _fault_legend(data, windows),
                      fontsize=6.5, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    axes[2, 0].set_xlabel("time since workload start (s)")
    axes[2, 0].set_xlim(*(window or (x0, x1)))
    tight(fig)
    fig.savefig(fresh(path), dpi=DPI)
    plt.close(fig)
    return path


def _lanes(spans: list[tuple[float, float]]) -> list[list[tuple[float, float]]]:
    """Spread (start, length) spans over as few rows as possible without overlap."""
    lanes: list[list[tuple[float, float]]] = []
    for a, w in sorted(spans):
        for lane in lanes:
            if lane[-1][0] + lane[-1][1] <= a:
                lane.append((a, w))
                break
        else:
            lanes.append([(a, w)])
    return lanes


def module_timeline(data, path: Path, workload: int | None = None, max_apps: int = 12) -> Path:
    """Thesis Figure 5.1: lifespans of the monitored processes (top, one row per workload instance)
    and one workload expanded (bottom): its processes, and per application its sockets and TCP
    connections."""
    mods = data.modules
    end = float(data.snapshots["mono"].iloc[-1]) - data.t0
    windows = _fault_windows(data)
    host = data.info.monitor.host

    def span(born, died):
        b = float(born) - data.t0
        e = end if died is None or died != died else float(died) - data.t0
        return b, max(e - b, 0.05)

    procs = data.processes
    clients = procs[procs["role"] == "client"] if not procs.empty else procs
    if host and not clients.empty:
        clients = clients[clients["host"] == host]
    top: list[tuple[str, list[tuple[float, float]], str]] = []
    if not clients.empty:
        for wl, g in clients.groupby(clients["workload"].fillna(-1), sort=True):
            prog = str(g["cmdline"].iloc[0]).split(" ")[0].split("/")[-1]
            name = (f"w{int(wl)} " if wl >= 0 else "") + prog
            for k, lane in enumerate(_lanes([span(s, e) for s, e in zip(g["started"], g["ended"], strict=True)])):
                top.append((f"{name} ({len(lane)} run{'s' if len(lane) > 1 else ''})" if k == 0 else
                            f"{name} [{k + 1}] ({len(lane)})", lane, "#fcbba1"))
    else:
        for m, r in mods[mods["kind"] == "app"].iterrows():
            top.append((short_name(data, m), [span(r["born"], r["died"])], "#fcbba1"))
    if workload is None:
        wls = mods["workload"].dropna()
        workload = int(wls.min()) if len(wls) else None
    bottom: list[tuple[str, list[tuple[float, float]], str]] = []
    all_apps = mods[mods["kind"] == "app"]
    if workload is not None:
        sel = mods[mods["workload"] == workload]
        bottom_title = f"Workload {workload}: processes, applications, their sockets and TCP connections"
    elif len(all_apps):  # no workload known: the first application
        sel = all_apps.iloc[:1]
        bottom_title = f"{short_name(data, int(sel.index[0]))}: its sockets and TCP connections"
    else:
        sel = mods.iloc[:0]
        bottom_title = "No applications or workload modules"
    if len(sel):
        if workload is not None and not clients.empty:
            g = clients[clients["workload"] == workload]
            for k, lane in enumerate(_lanes([span(s, e) for s, e in zip(g["started"], g["ended"], strict=True)])):
                bottom.append((f"w{workload} processes" + (f" [{k + 1}]" if k else ""), lane, "#fcbba1"))
        down, _ = _graph(data)
        apps = sel[sel["kind"] == "app"]
        groups = []  # (label, app module or None, socket modules, tcp modules)
        for m in apps.index[:max_apps]:
            below = _closure(int(m), down)
            groups.append((short_name(data, int(m)), int(m),
                           [x for x in below if mods["kind"].get(x) == "socket"],
                           [x for x in below if mods["kind"].get(x) == "tcp"]))
        if apps.empty:  # no interceptor: TCP connections by process
            tcps = sel[sel["kind"] == "tcp"]
            for pid, g in tcps.groupby(tcps["attrs"].map(lambda a: a.get("pid"))):
                groups.append((f"pid {pid}", None, [], [int(x) for x in g.index]))
        for label, app, socks, tcps in groups:
            if app is not None:
                r = mods.loc[app]
                bottom.append((label, [span(r["born"], r["died"])], "#fb6a4a"))
            for kind, ms, colour in (("sockets", socks, "#cb181d"), ("TCP", tcps, "#67000d")):
                if ms:
                    spans = [span(mods.loc[x, "born"], mods.loc[x, "died"]) for x in ms]
                    for k, lane in enumerate(_lanes(spans)):
                        bottom.append((f"  {label} {kind} ({len(ms)})" if k == 0 else "", lane, colour))
        if len(apps) > max_apps:
            bottom.append((f"... {len(apps) - max_apps} more applications", [], "#ffffff"))
    n_top, n_bot = max(1, len(top)), max(1, len(bottom))
    fig, axes = plt.subplots(2, 1, figsize=(12, 1.8 + 0.28 * (n_top + n_bot)), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [n_top + 0.8, n_bot + 0.8]})
    for ax, rows, title in ((axes[0, 0], top, f"Processes on the monitored host {host or ''}"),
                            (axes[1, 0], bottom, bottom_title)):
        _shade(ax, data, windows, alpha=0.2)
        for i, (_label, spans, colour) in enumerate(rows):
            ax.broken_barh(spans, (i - 0.35, 0.7), facecolors=colour, edgecolor="black", lw=0.3)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([r[0] for r in rows], fontsize=7)
        ax.set_ylim(max(len(rows), 1) - 0.5, -0.5)
        ax.set_title(title, fontsize=9, loc="left")
        ax.grid(axis="x", lw=0.3, alpha=0.5)
    axes[1, 0].set_xlabel("time since workload start (s)")
    axes[1, 0].set_xlim(min(0.0, float(data.snapshots["mono"].iloc[0]) - data.t0), end)
    if windows:
        fig.legend(handles=_fault_legend(data, windows), fontsize=7, loc="upper right", frameon=False, ncol=3)
    tight(fig, rect=(0, 0, 1, 0.97))
    fig.savefig(fresh(path), dpi=DPI)
    plt.close(fig)
    return path


def default_subgraphs(data, limit: int = 3) -> list[int]:
    """Modules whose subgraph figure tells the run's story: for each fault kind in its report order
    (rundir.faultkinds), the application above its first target (or the target; or a workload's
    application, for a kind whose target all workloads share); a foreground application when there
    are no faults."""
    mods = data.modules
    _, up = _graph(data)
    picks: list[int] = []

    def top_of(m: int) -> int:
        anc = _closure(m, up)
        apps = [a for a in anc if mods["kind"].get(a) == "app"]
        return apps[0] if apps else m

    ranked = sorted((info.order, kind) for kind, info in data.fault_kinds.items() if info.order is not None)
    for _, kind in ranked:
        f = data.faults[(data.faults["kind"] == kind) & data.faults["target_module"].notna()]
        if f.empty:
            continue
        target = int(f["target_module"].iloc[0])
        if data.fault_kinds[kind].subgraph == "workload":
            apps = mods[(mods["kind"] == "app") & mods["wl_kind"].notna()]
            pick = int(apps.index[0]) if len(apps) else target
        else:
            pick = top_of(target)
        if pick not in picks:
            picks.append(pick)
    if not picks:
        apps = mods[mods["kind"] == "app"]
        tcps = mods[mods["kind"] == "tcp"]
        if len(apps):
            picks.append(int(apps.index[0]))
        elif len(tcps):
            picks.append(int(tcps.index[0]))
    return picks[:limit]


def plot_run(data, scored: pd.DataFrame, variant: str, out_dir: Path,
             modules: list[int] | None = None) -> list[Path]:
    """Every figure of a run into out_dir; returns the files written."""
    out_dir = Path(out_dir)
    output_dir(out_dir)
    if scored.empty or data.modules.empty:
        return []  # nothing was diagnosed: no figure to draw
    files = [diagnosis_overview(data, scored, variant, out_dir / "diagnosis-overview.png")]
    if studies.of_data(data).module_timeline:   # Figure 5.1: processes, sockets and TCP connections (not a streams run's)
        files.append(module_timeline(data, out_dir / "module-timeline.png"))
    for m in modules if modules is not None else default_subgraphs(data):
        files.append(subgraph_figure(data, scored, variant, m, out_dir / f"subgraph-{m}.png"))
    return files
