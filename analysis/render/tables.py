"""Formatting the score tables, shared by the Markdown/CSV/LaTeX writers (analysis.render.writers), the seed
comparisons (analysis.render.against) and the HTML report (analysis.render.html): rates as percentages with one
decimal (an undefined rate, zero denominator, is blank, never 0 or NaN), the rows of the accuracy,
across-runs and comparison tables as strings, the stalled-modules list (thesis Table 5.2), titles and notes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.evaluation import Evaluation
from analysis.health import SILENCE_WARN
from analysis.score.accuracy import ACROSS_INTERVAL, INTERVAL
from analysis.score.table_layout import COUNTS, RATES, ROWS, SECTIONS

TABLE_NOTE = (f"Rates in %; blank = undefined (no cases). ±: larger half-width of the row's TPR and FPR "
              f"intervals ({INTERVAL}; snapshots treated as independent), in percentage points "
              "(FNR, TNR alike; PPV, NPV intervals with --intervals and in accuracy.csv).")
ACROSS_RATES = ("TPR", "FPR", "PPV")
ACROSS_NOTE = ("Rates in %: pooled rate [95% interval across runs] (runs where the rate is defined; no interval "
               f"with fewer than 2); blank = undefined. Interval: {ACROSS_INTERVAL}, whole runs resampled with "
               "replacement and the pooled rate recomputed (runs are the independent unit). The ± column above "
               f"is the per-snapshot {INTERVAL}, which treats snapshots as independent and is usually "
               "narrower. Every run's rates: per_run.csv.")


# ----------------------------------------------------------------------------- rows and cells


def pct(v: float, digits: int = 1) -> str:
    """A fraction as a percentage with `digits` decimals; blank when undefined (None, NaN)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return f"{100.0 * v:.{digits}f}"


PM_RATES = ("TPR", "FPR")  # FNR, TNR have the same intervals; PPV, NPV with --intervals and in the CSV


def half_width(row: pd.Series, which: Sequence[str] = PM_RATES) -> float:
    """Largest half-width (fraction) of the defined TPR/FPR intervals of one table row; NaN if none."""
    widths = []
    for r in which:
        v, lo, hi = row[r], row[f"{r}_lo"], row[f"{r}_hi"]
        if not math.isnan(v):
            widths.append(max(v - lo, hi - v))
    return max(widths) if widths else math.nan


def accuracy_cells(t: pd.DataFrame, intervals: bool, rows: Sequence[str] = ROWS) -> list[list[str]]:
    """Table 3.3 rows as strings: section, row, counts, rates, ±; `rows`: those of the study's layout."""
    out = []
    for section in SECTIONS:
        first = True
        for row in rows:
            r = t.loc[(section, row)]
            rates = []
            for k in RATES:
                cell = pct(r[k])
                if intervals and cell:
                    cell += f" [{pct(r[f'{k}_lo'])}, {pct(r[f'{k}_hi'])}]"
                rates.append(cell)
            out.append([section if first else "", row, *(str(int(r[c])) for c in COUNTS), *rates,
                        pct(half_width(r))])
            first = False
    return out


def md_table(header: list[str], rows: list[list[str]], align: list[str]) -> str:
    """A Markdown table; align per column: "l" or "r"."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells):
        return "| " + " | ".join(c.rjust(w) if a == "r" else c.ljust(w)
                                 for c, w, a in zip(cells, widths, align, strict=True)) + " |"

    sep = "|" + "|".join(("-" * (w + 1) + ":") if a == "r" else ("-" * (w + 2))
                         for w, a in zip(widths, align, strict=True)) + "|"
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def delta_cell(v: float, good_if_up: bool) -> str:
    """A change in % for the comparison: **better**, *worse*, · none, blank undefined."""
    if v is None or math.isnan(v):
        return ""
    if v == 0:
        return "·"
    s = f"{v:+.1f}"
    good = (v > 0) == good_if_up
    return f"**{s}**" if good else f"*{s}*"


def across_cells(t: pd.DataFrame, x: pd.DataFrame, shown: Sequence[str] = ROWS) -> list[list[str]]:
    """The "Across runs" rows of one variant: section (first row of each), row, and TPR, FPR, PPV as
    `pooled [low, high] (runs)` from accuracy_table `t` and across_runs `x`; `shown`: the layout's rows."""
    rows = []
    for section in SECTIONS:
        for k, row in enumerate(shown):
            r, xr = t.loc[(section, row)], x.loc[(section, row)]
            cells = [section if k == 0 else "", row]
            for rate in ACROSS_RATES:
                cell = pct(r[rate])
                if cell:
                    lo, hi = pct(xr[f"{rate}_xlo"]), pct(xr[f"{rate}_xhi"])
                    cell += (f" [{lo}, {hi}]" if lo and hi else "") + f" ({int(xr[f'{rate}_runs'])})"
                cells.append(cell)
            rows.append(cells)
    return rows


ACROSS_HEADER = ["", "Module", *(f"{r} [95%] (runs)" for r in ACROSS_RATES)]


def compare_cells(c: pd.DataFrame, variants: list[str], keys: Sequence[tuple[str, str, str]] | None = None
                  ) -> tuple[list[str], list[list[str]], list[str]]:
    """Paper Table 8 layout: (header, rows, legend). Per row and direction, each variant's TP, FP, TPR,
    PPV and, against the first variant, the change in TP and FP in % (delta_cell: **bold** = better,
    *italic* = worse, · = no change). `keys`: the (section, row, shown as) of the study's comparison
    (a streams run's: its stream connections' row alone); None: every section and row of Table 3.3."""
    names = [f"V{i + 1}" for i in range(len(variants))]
    header = ["", "Module"]
    for i, n in enumerate(names):
        header += [f"{n} TP", f"{n} FP", f"{n} TPR", f"{n} PPV"]
        if i:
            header += [f"{n} ΔTP%", f"{n} ΔFP%"]
    rows = []
    keys = keys or [(s, r, r) for s in SECTIONS for r in ROWS]
    for j, (section, row, shown) in enumerate(keys):
        r = c.loc[(section, row)]
        first = j == 0 or keys[j - 1][0] != section   # a section's name on its first row only
        cells = [section if first else "", shown]
        for i, v in enumerate(variants):
            cells += [str(int(r[(v, "TP")])), str(int(r[(v, "FP")])), pct(r[(v, "TPR")]), pct(r[(v, "PPV")])]
            if i:
                cells += [delta_cell(r[(v, "dTP%")], good_if_up=True), delta_cell(r[(v, "dFP%")], good_if_up=False)]
        rows.append(cells)
    legend = [f"{n} = {v}" + (" (baseline)" if i == 0 else "") for i, (n, v) in enumerate(zip(names, variants,
                                                                                             strict=True))]
    return header, rows, legend


COMPARE_NOTE = ("TPR, PPV in %, blank = undefined. ΔTP%, ΔFP%: change against V1 in %; **bold** = better "
                "(more TP, fewer FP), *italic* = worse, · = no change, blank = undefined (V1 has none).")


_TEX_ESCAPE = {"&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$", "{": r"\{", "}": r"\}",
               "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}


def tex(s: str) -> str:
    return "".join(_TEX_ESCAPE.get(ch, ch) for ch in s)


# ----------------------------------------------------------------------------- stalled modules


def stalled_list(data, scored: pd.DataFrame, variant: str) -> pd.DataFrame:
    """Thesis Table 5.2 for a run: every module/direction ever diagnosed positive, most first.

    Columns: module, kind, name, dir, positive (STALLED count), DONTCARE, BLOCKED, HEALTHY (label
    variants), transient (single-snapshot stalls), longest (most consecutive positive snapshots),
    mean_s / max_s (duration of non-transient stalls, s), queued_min / queued_max (where the module
    has a queue), FP (positives the ground truth calls negative). Excluded rows are not counted.
    """
    s = scored[(scored["variant"] == variant) & ~scored["exclude"]]
    cols = ["module", "kind", "name", "dir", "positive", "DONTCARE", "BLOCKED", "HEALTHY", "transient",
            "longest", "mean_s", "max_s", "queued_min", "queued_max", "FP"]
    ever = s[s["positive"]][["module", "dir"]].drop_duplicates()
    if ever.empty:
        return pd.DataFrame(columns=cols)
    keys = pd.MultiIndex.from_arrays([s["module"], s["dir"].astype(str)])
    s = s[keys.isin(pd.MultiIndex.from_arrays([ever["module"], ever["dir"].astype(str)]))]
    s = s.sort_values(["module", "dir", "seq"], kind="stable")
    label = s["label"].astype(str).to_numpy() if "label" in s else np.full(len(s), "")
    cf = bool(s["label"].isna().all()) if "label" in s else True
    q = data.counters[data.counters["has_queue"]]
    qstats = q.groupby(["module", q["dir"].astype(str)], observed=True)["queued"].agg(["min", "max"])
    mono = data.snapshots["mono"]
    start = data.snapshots["start"].fillna(data.snapshots["mono"])
    mod = s["module"].to_numpy()
    dirs = s["dir"].astype(str).to_numpy()
    pos = s["positive"].to_numpy(bool)
    act = s["actual"].to_numpy(bool)
    seq = s["seq"].to_numpy()
    cut = np.flatnonzero((mod[1:] != mod[:-1]) | (dirs[1:] != dirs[:-1])) + 1
    recs = []
    for a, b in zip(np.r_[0, cut], np.r_[cut, len(s)], strict=True):
        p, sq = pos[a:b], seq[a:b]
        # runs of consecutive positive snapshots (adjacent seqs)
        brk = np.r_[True, ~p[:-1] | (np.diff(sq) != 1)] & p
        run_id = np.cumsum(brk)[p]
        first = sq[p][np.r_[True, run_id[1:] != run_id[:-1]]]
        last = sq[p][np.r_[run_id[1:] != run_id[:-1], True]]
        lengths = np.bincount(run_id)[1:]
        long = lengths > 1
        spans = mono.reindex(last[long]).to_numpy() - start.reindex(first[long]).to_numpy()
        m, d = int(mod[a]), str(dirs[a])
        lab = label[a:b]
        qs = qstats.loc[(m, d)] if (m, d) in qstats.index else None
        recs.append({
            "module": m, "kind": data.modules["kind"].get(m, ""), "name": data.modules["name"].get(m, ""),
            "dir": d, "positive": int(p.sum()),
            "DONTCARE": None if cf else int((lab == "DONTCARE").sum()),
            "BLOCKED": None if cf else int((lab == "BLOCKED").sum()),
            "HEALTHY": None if cf else int((lab == "HEALTHY").sum()),
            "transient": int((lengths == 1).sum()), "longest": int(lengths.max()),
            "mean_s": round(float(np.mean(spans)), 2) if spans.size else None,
            "max_s": round(float(np.max(spans)), 2) if spans.size else None,
            "queued_min": None if qs is None else int(qs["min"]), "queued_max": None if qs is None else int(qs["max"]),
            "FP": int((p & ~act[a:b]).sum()),
        })
    out = pd.DataFrame.from_records(recs, columns=cols)
    for c in ("DONTCARE", "BLOCKED", "HEALTHY", "queued_min", "queued_max"):
        out[c] = out[c].astype("Int64")
    return out.sort_values(["positive", "module"], ascending=[False, True], ignore_index=True)


# ----------------------------------------------------------------------------- titles and notes


def stalled_top(data, scored: pd.DataFrame, variant: str, cap: int) -> tuple[pd.DataFrame, int]:
    """(the first `cap` rows of stalled_list, how many rows it has), the list
    made of the modules shown only: it costs about a second per thousand module-directions ever
    positive, and the report shows twenty. Ranked as stalled_list sorts (most positives, then module;
    both directions of the last module taken), then sorted by it. Its whole list when a subset could
    say otherwise (a variant whose rows are partly without a label)."""
    rows, total = _stalled_rows(scored, variant, cap)   # its arrays let go before stalled_list runs
    return stalled_list(data, scored if rows is None else scored.iloc[rows], variant).iloc[:cap], total


def _stalled_rows(scored: pd.DataFrame, variant: str, cap: int) -> tuple[np.ndarray | None, int]:
    """(the rows of the module-directions stalled_top shows, or None for all; their number)."""
    keep = (scored["variant"] == variant).to_numpy(bool) & ~scored["exclude"].to_numpy(bool)
    pos = keep & scored["positive"].to_numpy(bool)
    mod = scored["module"].to_numpy(np.int64)
    d = scored["dir"]   # its codes (NaN: -1), or made
    dirs = d.cat.codes.to_numpy() if isinstance(d.dtype, pd.CategoricalDtype) else \
        pd.factorize(d, use_na_sentinel=False)[0]
    pm, pd_ = mod[pos], dirs[pos]
    o = np.lexsort((pd_, pm))
    pm, pd_ = pm[o], pd_[o]
    first = np.flatnonzero(np.r_[True, (pm[1:] != pm[:-1]) | (pd_[1:] != pd_[:-1])]) if len(pm) else o
    total = len(first)   # module-directions ever positive: stalled_list's rows
    na = scored["label"].isna().to_numpy(bool)[keep] if "label" in scored else np.ones(1, bool)
    if total <= cap or (na.any() and not na.all()):
        return None, total
    mods, ds = pm[first], pd_[first]
    count = np.diff(np.r_[first, len(pm)])
    rank = np.lexsort((mods, -count))
    c, m = count[rank[cap - 1]], mods[rank[cap - 1]]
    take = (count > c) | ((count == c) & (mods <= m))
    shown = np.unique(mods[take])
    if len(mod) and mod.min() >= 0 and mod.max() < 1 << 24:   # ids as a lookup table: no copy of the column
        table = np.zeros(int(mod.max()) + 1, dtype=bool)
        table[shown] = True
        cand = np.flatnonzero(keep & table[mod])
    else:
        cand = np.flatnonzero(keep & np.isin(mod, shown))
    nd = int(dirs.max()) + 2
    at = np.searchsorted(shown, mod[cand]) * nd + dirs[cand] + 1
    return cand[np.isin(at, np.searchsorted(shown, mods[take]) * nd + ds[take] + 1)], total


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")


def runs_title(ev: Evaluation) -> str:
    n = len(ev.runs)
    if n == 0:
        return "no runs"
    if n == 1:
        p = ev.runs[0]
        return f"run {p.parent.name}/{p.name}"
    exps = sorted({p.parent.name for p in ev.runs})
    return f"{n} runs ({', '.join(exps)})"


def overlap_note(ev: Evaluation) -> str:
    """The footnote on rows the labeller left out because faults overlapped (policy overlap=exclude),
    and, in streams runs, because a snapshot interval straddles a fault's start or end."""
    notes = []
    if ev.overlap_rows:
        notes.append(f"Left out: {ev.overlap_rows} module-snapshots where a fault's target was also another fault's "
                     "collateral (overlapping faults; ground truth ambiguous; policy overlap=exclude).")
    straddle = getattr(ev, "straddle_rows", 0)
    if straddle:
        notes.append(f"Left out: {straddle} connection-snapshots whose interval straddles the start or end of a "
                     "throttle at rate 0 (part fault, part not; ground truth ambiguous; docs/streams.md).")
    return " ".join(notes)


def skipped_note(ev: Evaluation) -> str:
    """The runs named but not analysed, and why (the tables do not count them)."""
    if not ev.skipped:
        return ""
    return "\n".join([f"Not analysed ({len(ev.skipped)} of {len(ev.skipped) + len(ev.runs)} runs; not counted "
                      "above):"] + [f"- {p}: {why}" for p, why in ev.skipped])


def warnings_note(ev: Evaluation) -> str:
    """What was wrong with the runs that were analysed (their warnings), for the files written."""
    lines = [f"- {p.parent.name}/{p.name}: {w}" for p, ws in ev.run_warnings.items() for w in ws]
    return "\n".join(["Warnings about the runs (what was wrong, what was left out):", *lines]) if lines else ""


# ----------------------------------------------------------------------------- network health


def _num(v, fmt="{:.1f}") -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


HEALTH_HEADER = ["Run", "quiet s", "RTT p50 ms", "RTT p99 ms", "RTT of snd/rcv", "queue drops (quiet)",
                 "backlog p50/max", "retrans (quiet)", "silence %", "busy"]


def health_row(name: str, h) -> list[str]:
    """A run's row of the network health table (h: rundir.manifest.RunHealth)."""
    quiet = f"{h.quiet_s:.0f}"
    drops = "" if h.queue_drops is None else f"{h.queue_drops} ({h.queue_drops_quiet})"
    backlog = "" if h.backlog_packets_max is None else f"{h.backlog_packets_median:g}/{h.backlog_packets_max}"
    rate = _num(None if h.silence_rate is None else 100 * h.silence_rate, "{:.2f}")
    flag = " !" if h.silence_rate is not None and h.silence_rate > SILENCE_WARN else ""
    timed = f"{h.rtt_senders}/{h.rtt_receivers}"
    return [name, quiet, _num(h.rtt_ms_median), _num(h.rtt_ms_p99), timed, drops, backlog,
            str(h.retransmissions_quiet), rate + flag, str(h.busy)]


HEALTH_NOTE = ("Network health, outside fault windows and their recovery margins (quiet time): the "
               "connections' RTT in their loaded direction (senders' tcpi_rtt, receivers' tcpi_rcv_rtt; snd/rcv: "
               "how many of each were timed; blank: no loaded-direction RTT); drops of the shaped links' "
               "queues in all (and in quiet time); "
               "queue backlog in packets; TCP retransmissions; silence: busy TCP module-snapshots "
               "(data queued to send, or in the middle of a received flow) without progress, "
               f"! above {100 * SILENCE_WARN:g}% (docs/analysis.md).")
