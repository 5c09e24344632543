"""Culprit accuracy per fault kind, for every diagnoser (issue 42 item 3): `nestlab compare` of runs with
fault windows writes `compare-culprit.csv` (docs/diagnosis.md, "Which tier?").

A *window* is one fault of a service run (a faults row, or the rows of one fault on several modules),
its culprit the tier host it acts on (analysis.paths.readers.fault_host: a delay, pause, slow or
`ip_drop`/`loss` of a host, and a `tcp_drop` whose target names the tier whose connection it drops).
Each diagnoser ranks hosts per window, and the window counts for AC@1 when the culprit is first, for
AC@3 when it is among the first three; a diagnoser that ranks no host in a window misses it (the
table's `misses`). How each one ranks:

- NeST's variants (`inputs: host`): their STALLED modules are votes for hosts (an application or socket
  for its host, an interface for its host, a TCP connection for both ends); a host's rise is its votes
  per snapshot in the window less those outside every window (analysis.paths.nest_culprit);
- nesting, linking, convolution (`inputs: trace`): each node's mean delay per link in the window less
  outside (analysis.paths.score.culprit_ranking);
- `hybrid` (`inputs: both`): whoseturn's and nesting's rankings summed by rank (Borda: a host k-th of
  H gets H - k points from each; ties to whoseturn's order), since each is blind where the other
  sees: nesting ranks by delay and sees nothing where requests stop, whoseturn sees held requests and
  stuck connections but a delayed reply that moves is no stall;
- `random` (`inputs: none`): the expected AC@1 and AC@3 of a uniform guess among the monitored hosts
  (1/H and min(3, H)/H), never a miss.

Per diagnoser and fault kind: the windows, AC@1 and AC@3 in percent pooled over the runs (hits over
windows), each with its 95% interval across runs (analysis.score.accuracy.bootstrap_pooled, 2 or more
runs), and the misses. Runs that are not service runs (no `requests` table and no `messages` table:
network and streams runs monitor one host, whose connections and interface the faults act on; there
is no tier to name) are left out with one line saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.score.accuracy import bootstrap_pooled

SEEDS = ("flowdiagnoser:theta=2", "nest-cf")   # NeST's two rule systems as the seeds have them
OURS = "whoseturn"
ALGORITHMS = ("nesting", "linking", "convolution")
INPUTS = {"nesting": "trace", "linking": "trace", "convolution": "trace", "hybrid": "both", "random": "none"}
COLUMNS = ["diagnoser", "inputs", "fault_kind", "windows", "ac1", "ac1_xlo", "ac1_xhi", "ac3", "ac3_xlo",
           "ac3_xhi", "misses", "runs"]
ROW_COLUMNS = ["run", "diagnoser", "inputs", "fault_kind", "window", "node", "hit1", "hit3", "miss", "ranking"]


def windows_of(faults: pd.DataFrame | None) -> pd.DataFrame:
    """node, start, stop, kind of each fault window with a tier host (module docstring)."""
    from analysis.paths.readers import fault_host
    from rundir.repair import as_dict

    cols = ["node", "start", "stop", "kind"]
    if faults is None or faults.empty:
        return pd.DataFrame(columns=cols)
    f = faults.copy()
    f["start"] = pd.to_numeric(f["start"], errors="coerce")
    f["stop"] = pd.to_numeric(f["end"], errors="coerce")
    f["node"] = [fault_host(a, t) or as_dict(t).get("host") for a, t in zip(f["at_node"], f["target"], strict=True)]
    f = f.dropna(subset=["start", "stop", "node"])
    out = pd.DataFrame({"node": f["node"].astype(str), "start": f["start"], "stop": f["stop"],
                        "kind": f["kind"].astype(str)}, columns=cols)
    return out.drop_duplicates(["node", "start", "stop"]).reset_index(drop=True)


def is_service(run: str | Path) -> bool:
    """A run with a message trace or request paths (a service workload; every run of format 7 has a
    requests table, empty without one)."""
    from rundir import read

    try:
        with read.run_db(Path(run)) as conn:
            return "messages" in read.tables(conn) or read.has_rows(conn, "requests")
    except Exception:   # noqa: BLE001 - unreadable: the other readers say why
        return False


def borda(*rankings: list[str]) -> list[str]:
    """Rankings summed by rank: a host k-th (from 0) of H gets H - k points from each ranking; ties
    keep the first ranking's order, then the next's."""
    points: dict[str, float] = {}
    order: list[str] = []
    for r in rankings:
        for k, h in enumerate(r):
            points[h] = points.get(h, 0.0) + len(r) - k
            if h not in order:
                order.append(h)
    return sorted(order, key=lambda h: (-points[h], order.index(h)))


def _rows(run: str, name: str, kind_of: Sequence[str], ranking: pd.DataFrame) -> list[dict]:
    out = []
    for (i, r), kind in zip(ranking.iterrows(), kind_of, strict=True):
        ranked = list(r["ranking"])
        out.append({"run": run, "diagnoser": name, "inputs": INPUTS.get(name, "host"), "fault_kind": kind,
                    "window": i, "node": r["node"], "hit1": float(bool(ranked) and ranked[0] == r["node"]),
                    "hit3": float(r["node"] in ranked[:3]), "miss": not ranked, "ranking": " ".join(ranked[:5])})
    return out


def run_culprits(run: str | Path, variants: Sequence[str], algorithms: Sequence[tuple[str, Callable]],
                 warn: Callable[[str], None] | None = None, data=None,
                 on_data: Callable | None = None, known: dict | None = None) -> list[dict]:
    """ROW_COLUMNS rows of one service run: one per diagnoser and fault window. data: the run's
    analysis.load.RunData when already loaded; on_data(run, data): called with it once loaded (the
    service view reads the tiers' latency from the same load); known: the black-box algorithms'
    rankings of this run from analysis.paths.versus.compare_blackbox, used when it ranked the same
    windows (a ranking's baseline is the time outside every window)."""
    from analysis.diagnose import diagnose_run
    from analysis.load import load_run_data
    from analysis.paths.nest_culprit import module_hosts, rankings
    from analysis.paths.score import culprit_ranking
    from rundir import read

    with read.run_db(Path(run)) as conn:
        faults = read.read_fault_rows(conn)
    win = windows_of(faults)
    if win.empty and on_data is None:
        return []
    if data is None:
        data = load_run_data(str(run))
    if on_data is not None:
        on_data(run, data)
    if win.empty:
        return []
    run = str(run)
    kinds = list(win["kind"])
    rows: list[dict] = []
    names = list(dict.fromkeys([*variants, OURS]))
    ranks = rankings(data, win[["node", "start", "stop"]], names, diagnose_run(data.run, names))
    for v in names:
        rows += _rows(run, v, kinds, ranks[v])
    if algorithms:
        from analysis.paths.readers import read_run
        from analysis.paths.versus import has_messages

        reuse = known is not None and _same_windows(known.get("windows"), win)
        if reuse and all(name in known for name, _ in algorithms):
            for name, _ in algorithms:
                ranks[name] = known[name]
                rows += _rows(run, name, kinds, ranks[name])
        elif has_messages(run):
            trace = read_run(run)
            for w in trace.warnings:
                if warn:
                    warn(w)
            trace.faults = win.assign(extra_s=np.nan)[["node", "start", "stop", "extra_s", "kind"]]
            for name, infer in algorithms:
                ranks[name] = culprit_ranking(trace, infer)
                rows += _rows(run, name, kinds, ranks[name])
        elif warn:
            warn("no messages table: the black-box algorithms have no trace to rank tiers by")
        if "nesting" in ranks:
            both = ranks[OURS].copy()
            both["ranking"] = [borda(a, b) for a, b in zip(ranks[OURS]["ranking"], ranks["nesting"]["ranking"],
                                                           strict=True)]
            rows += _rows(run, "hybrid", kinds, both)
    hosts = module_hosts(data).dropna().astype(str).unique()
    h = max(len(hosts), 1)
    for i, (node, kind) in enumerate(zip(win["node"], kinds, strict=True)):
        rows.append({"run": run, "diagnoser": "random", "inputs": "none", "fault_kind": kind, "window": i,
                     "node": node, "hit1": 1.0 / h, "hit3": min(3, h) / h, "miss": False, "ranking": ""})
    return rows


def _same_windows(a: pd.DataFrame | None, win: pd.DataFrame) -> bool:
    if a is None or len(a) != len(win):
        return False
    return bool((a["node"].astype(str).to_numpy() == win["node"].to_numpy()).all()
                and np.allclose(a[["start", "stop"]].to_numpy(float), win[["start", "stop"]].to_numpy(float)))


def pooled(rows: pd.DataFrame) -> pd.DataFrame:
    """COLUMNS: per diagnoser (in order of appearance) and fault kind, pooled over the runs."""
    out = []
    for (name, kind), g in rows.groupby(["diagnoser", "fault_kind"], sort=False):
        per = g.groupby("run", sort=False).agg(n=("hit1", "size"), k1=("hit1", "sum"), k3=("hit3", "sum"))
        rec = {"diagnoser": name, "inputs": g["inputs"].iloc[0], "fault_kind": kind, "windows": len(g),
               "misses": int(g["miss"].sum()), "runs": len(per)}
        for fig, k in (("ac1", "k1"), ("ac3", "k3")):
            rec[fig] = 100.0 * per[k].sum() / per["n"].sum()
            lo = hi = np.nan
            if len(per) >= 2:
                lo_a, hi_a = bootstrap_pooled(per[k].to_numpy(float)[None, :], per["n"].to_numpy(float)[None, :])
                lo, hi = 100.0 * float(lo_a[0]), 100.0 * float(hi_a[0])
            rec[f"{fig}_xlo"], rec[f"{fig}_xhi"] = lo, hi
        out.append(rec)
    return pd.DataFrame.from_records(out, columns=COLUMNS)


def compare_culprit(runs: Sequence[str | Path], variants: Sequence[str], names: Sequence[str] = ALGORITHMS,
                    warn: Callable[[str, str], None] | None = None,
                    on_data: Callable | None = None, data: dict | None = None, known: dict | None = None
                    ) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(per-window rows, pooled table, notes) over the service runs among `runs`; the others are left
    out, said in one note. on_data: run_culprits'; data: {run: its RunData} of runs already loaded;
    known: {run: run_culprits' known} (compare_blackbox's rankings)."""
    from analysis.paths.versus import chosen_algorithms
    from rundir.errors import UserError
    from rundir.runs import guarded

    algos = chosen_algorithms([n for n in names if n])
    service = [r for r in runs if is_service(r)]
    notes = []
    other = len(runs) - len(service)
    if other:
        notes.append(f"{other} run{'s' if other != 1 else ''} without a service workload left out of the culprit "
                     "table: a network or streams run monitors one host, and its faults act on that host's "
                     "connections or interface; there is no tier to name")
    rows: list[dict] = []
    for run in service:
        try:
            rows += guarded(run, run_culprits, run, list(dict.fromkeys([*SEEDS, *variants])), algos,
                            (lambda m, run=run: warn(str(run), m)) if warn else None,
                            data=(data or {}).get(run), on_data=on_data, known=(known or {}).get(str(run)))
        except UserError as e:
            if warn:
                warn(str(run), f"left out of the culprit table: {str(e).removeprefix(f'{run}: ')}")
    per = pd.DataFrame.from_records(rows, columns=ROW_COLUMNS)
    return per, pooled(per), notes


def _cell(r, fig: str) -> str:
    text = f"{r[fig]:.0f}"
    lo, hi = r[f"{fig}_xlo"], r[f"{fig}_xhi"]
    return text + (f" [{lo:.0f}, {hi:.0f}]" if lo == lo and hi == hi else "")


NOTE = ("Per fault kind (windows): AC@1 / AC@3 in %, pooled over the runs, [95% interval across runs] with 2 or "
        "more runs; misses: windows where the diagnoser ranked no host (counted as wrong). Rankings: "
        "analysis/score/culprit.py (docs/diagnosis.md, \"Which tier?\").")
TITLE = "Which tier? Culprit accuracy per fault kind"


def culprit_cells(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The table's header and rows: a row per diagnoser, a column (AC@1 / AC@3) per fault kind, the
    misses (the terminal's, the report's)."""
    kinds = list(dict.fromkeys(table["fault_kind"]))
    heads = ["diagnoser", "inputs"] + [f"{k} ({int(table[table.fault_kind == k].windows.max())}) AC@1 / AC@3"
                                       for k in kinds] + ["misses"]
    rows = []
    for name, g in table.groupby("diagnoser", sort=False):
        by = {r["fault_kind"]: r for r in g.to_dict("records")}
        cells = [f"{_cell(by[k], 'ac1')} / {_cell(by[k], 'ac3')}" if k in by else "–" for k in kinds]
        rows.append([name, g["inputs"].iloc[0], *cells, str(int(g["misses"].sum()))])
    return heads, rows


def culprit_markdown(table: pd.DataFrame, notes: Sequence[str]) -> str:
    """A row per diagnoser, a column pair (AC@1, AC@3) per fault kind."""
    if table.empty:
        return "\n".join([f"### {TITLE}", "", *notes, "", "No service run with fault windows."])
    heads, rows = culprit_cells(table)
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join([f"### {TITLE}", "", *lines, "", NOTE, *notes])


def write_culprit(per: pd.DataFrame, table: pd.DataFrame, notes: Sequence[str], out: Path) -> tuple[str, list[Path]]:
    """compare-culprit.csv (COLUMNS) and compare-culprit-windows.csv (a row per run, diagnoser and
    window) in `out`, and the markdown table."""
    from rundir.layout import fresh

    out.mkdir(parents=True, exist_ok=True)
    files = [out / "compare-culprit.csv", out / "compare-culprit-windows.csv"]
    table.to_csv(fresh(files[0]), index=False, na_rep="", float_format="%.4g")
    per.to_csv(fresh(files[1]), index=False, na_rep="", float_format="%.4g")
    return culprit_markdown(table, notes), files


def culprit_files(runs: Sequence[str | Path], variants: Sequence[str], names: Sequence[str], out: Path,
                  warn: Callable[[str, str], None] | None = None, on_data: Callable | None = None) -> list[Path]:
    """`nestlab compare`'s culprit section: the table printed, compare-culprit.csv and its windows
    written to `out`; the files."""
    per, table, notes = compare_culprit(runs, variants, names, warn, on_data)
    md, files = write_culprit(per, table, notes, out)
    print(f"\n{md}")
    return files
