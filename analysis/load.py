"""Loading a run for the analysis: the first step of the pipeline (analysis.pipeline).

`load_run_data(info)` reads one run for labelling, scoring and plotting: the diagnosis engine's
stretches (analysis.model.stretches.load_stretches: stretches of constant graph, counter deltas and the
invalid mask), the same counters as one long frame, and the modules (with their workload, one-way
direction and table rows), edges, processes, faults and workloads. Damage inside run.db (values that
are not numbers, times that go back, faults whose window or target is unknown) leaves rows out of the
scores, never changes one (analysis.unscored; docs/analysis.md, "Reading awkward runs"). The run
directory is read through rundir only.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import unscored as unscored_rows
from analysis.model.stretches import DIRS, RunStretches, load_stretches
from analysis.score.table_layout import module_rows
from rundir import facts, read, repair
from rundir.db import connect
from rundir.errors import UserError
from rundir.facts import IPERF_PORT
from rundir.faultkinds import FaultKindInfo, kinds_of
from rundir.layout import RunDir
from rundir.manifest import Monitor, SpecWorkload
from rundir.runs import HEALTH_TABLES, RunInfo, guarded, open_run
from rundir.targets import resolve_fault_targets


def read_run(path: str | Path) -> RunData:
    """open_run and load_run_data, every failure one line (guarded)."""
    return guarded(path, lambda: load_run_data(open_run(path)))


@dataclass
class RunData:
    """One run read for the analysis. Frames use run.db module ids and snapshot seqs."""

    info: RunInfo
    run: RunStretches           # analysis.model.stretches (give it to diagnose_run to avoid reading twice)
    snapshots: pd.DataFrame     # seq (index), mono, start (mono of the previous snapshot)
    # module, dir, seq, tm, wait, has_wait, queued, has_queue, errors, invalid: `counters`, made from the
    # stretches when first asked for (the diagnosis does not need it; so it is not made while it runs)
    _counters: pd.DataFrame | None
    modules: pd.DataFrame       # id (index), kind, name, key, attrs (dict), born, died, workload,
    #                             wl_kind ('wget'|'iperf'|None), oneway ('upload'|'download'|None), rows
    edges: pd.DataFrame         # parent, child, born, died
    processes: pd.DataFrame     # pid, workload, role, host, cmdline, started, ended, exit_code
    faults: pd.DataFrame        # id, kind, target (dict), target_module, start, end, description
    workloads: list[SpecWorkload]  # the resolved spec's workloads (may be empty)
    t0: float                   # the run's time origin (manifest t0, else the first snapshot)
    stop: float | None = None   # when the runner stopped the workloads (the run_end event), if known
    warnings: list[str] = field(default_factory=list)
    tcp_info: pd.DataFrame | None = None     # seq, module, rtt_us, rttvar_us, format 4 also the
    #                                         rundir.db.TCP_STATE_COLUMNS (None: not recorded)
    queue_stats: pd.DataFrame | None = None  # mono, node, interface, cumulative counters, backlog
    uncertain: list[tuple[float, float]] = field(default_factory=list)  # spans of faults whose window or
    #                             target is unknown (a damaged run): not quiet time (analysis.health)
    unscored: np.ndarray | None = None   # bool per counters row: left out of the scores (analysis.unscored)
    # cumulative messages and bytes per module direction, as recorded (labels' direction=data reads them)
    histories: CounterHistories | None = None

    @property
    def path(self) -> Path:
        return self.info.path

    @property
    def fault_kinds(self) -> dict[str, FaultKindInfo]:
        """The fault kinds the run may hold, as its manifest records them (rundir.faultkinds)."""
        return kinds_of(self.info.manifest)

    @property
    def counters(self) -> pd.DataFrame:
        """The counter deltas of every stretch as one long frame (counters_frame), made on first use."""
        if self._counters is None:
            self._counters = counters_frame(self.run)
        return self._counters

    @counters.setter
    def counters(self, frame: pd.DataFrame) -> None:
        self._counters = frame

    def counter_stretches(self) -> list | None:
        """The stretches whose counters are `counters`' rows as counters_frame lays them out (stretch by
        stretch, direction by direction, module by module, snapshot by snapshot), for a reader that
        wants those arrays without the long frame (analysis.labels); None once the frame is made (it may
        have been assigned or edited since: the frame is then what counts)."""
        return self.run.stretches if self._counters is None else None


class CounterHistories:
    """Per module direction, its cumulative messages and bytes as recorded (run.db's counters rows: a
    row when they change), which the frames do not hold (message deltas only): a labelling policy asks
    for a few series (a fault's targets), so each is read when first asked for, through one read-only
    connection that `close` releases (a later ask opens it again)."""

    def __init__(self, db: Path | None):
        self.db = db if db is not None and db.is_file() else None
        self.conn: sqlite3.Connection | None = None
        self.cache: dict[tuple[int, bool], tuple[np.ndarray, np.ndarray, np.ndarray] | None] = {}

    def get(self, module: int, out: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(seq, total messages, bytes) of the rows of module's direction (out: outbound) that hold both
        values, in seq order; None when there is none (or no run.db)."""
        key = (module, out)
        if key not in self.cache:
            if self.conn is None and self.db is not None:
                self.conn = connect(self.db, readonly=True)
            rows = [] if self.conn is None else read.counter_history(self.conn, module, out)
            rows = [r for r in rows if r[2] is not None and r[1] is not None]
            self.cache[key] = (np.array([r[0] for r in rows], dtype=np.int64),
                               np.array([r[1] for r in rows], float),
                               np.array([r[2] for r in rows], float)) if rows else None
        return self.cache[key]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def counters_frame(run: RunStretches) -> pd.DataFrame:
    """The counter deltas of every stretch as one long frame (one row per module, dir, snapshot): stretch
    by stretch, direction by direction, module by module, snapshot by snapshot. Each column is filled
    in place and handed to the frame without a copy (one copy of the rows in memory, not three)."""
    fields = ("tm", "wait", "has_wait", "queued", "has_queue", "errors", "invalid")
    stretches = [st for st in run.stretches if st.n * st.t]
    if not stretches:
        return pd.DataFrame({"module": pd.Series([], dtype=np.int64),
                             "dir": pd.Categorical([], categories=list(DIRS)),
                             "seq": pd.Series([], dtype=np.int64), "tm": [], "wait": [],
                             "has_wait": pd.Series([], dtype=bool), "queued": [],
                             "has_queue": pd.Series([], dtype=bool), "errors": [],
                             "invalid": pd.Series([], dtype=bool)})
    total = len(DIRS) * sum(st.n * st.t for st in stretches)
    first = stretches[0].counters[DIRS[0]]
    cols = {"module": np.empty(total, dtype=np.int64), "dir": np.empty(total, dtype=np.int8),
            "seq": np.empty(total, dtype=np.int64)}
    cols.update((f, np.empty(total, dtype=getattr(first, f).dtype)) for f in fields)
    o = 0
    for st in stretches:
        mods = np.asarray(st.modules, dtype=np.int64)
        size = st.n * st.t
        for di, d in enumerate(DIRS):
            c = st.counters[d]
            sl = slice(o, o + size)
            cols["module"][sl] = np.repeat(mods, st.t)
            cols["dir"][sl] = di
            cols["seq"][sl] = np.tile(st.seqs, st.n)
            for f in fields:
                cols[f][sl] = getattr(c, f).ravel()
            o += size
    cols["dir"] = pd.Categorical.from_codes(cols["dir"], list(DIRS))
    return pd.DataFrame(cols, copy=False)


def _argv0(cmdline: str) -> str:
    first = (cmdline or "").split(" ", 1)[0]
    return os.path.basename(first)


def workload_from_cmdline(cmdline: str) -> tuple[str | None, str | None]:
    """(kind, direction) from a client command line, for runs without a usable workload mapping."""
    prog = _argv0(cmdline)
    args = (cmdline or "").split()
    if prog == "wget":
        return "wget", "download"
    if prog == "iperf" and "-c" in args:
        return "iperf", "download" if "-R" in args else "dual" if "-d" in args else "upload"
    return None, None


def _socket_direction(attrs: dict, tcp_attrs: dict | None) -> str | None:
    """Which way a socket of a two-way (iperf -d) process carries data: thesis 3.7's port rule."""
    a = dict(tcp_attrs or {})
    a.update({k: v for k, v in attrs.items() if v not in (None, "")})
    if a.get("dport") == IPERF_PORT:
        return "upload"
    if a.get("sport") == IPERF_PORT or a.get("accepted"):
        return "download"
    return None


def load_run_data(info: RunInfo | str | Path) -> RunData:
    """Read one run (module docstring). UserError when it holds nothing to analyse."""
    if not isinstance(info, RunInfo):
        info = open_run(info)
    try:
        return _load(info)
    except sqlite3.Error as e:
        raise read.db_error(info.path, e) from None


def _load(info: RunInfo) -> RunData:
    warnings = list(info.warnings)
    run = load_stretches(info.path)
    warnings += run.warnings
    conn = connect(RunDir(info.path).db, readonly=True)
    try:
        procs = read.read_processes(conn, warnings)
        ends = read.read_run_ends(conn, warnings)
        faults = read.read_fault_rows(conn)
        health = {t: None for t in HEALTH_TABLES}
        if "tcp_info" in info.tables:
            health["tcp_info"] = read.read_tcp_info(conn, warnings)
        if "queue_stats" in info.tables:
            health["queue_stats"] = read.read_queue_stats(conn, warnings)
    finally:
        conn.close()
    if len(run.seqs) == 0:
        raise UserError(f"{info.path}: no snapshots recorded; nothing to analyse")
    snaps = pd.DataFrame({"mono": run.mono}, index=pd.Index(run.seqs, name="seq"))
    snaps["start"] = snaps["mono"].shift(1)
    manifest_t0 = facts.manifest_t0(info.manifest)
    t0 = facts.time_origin(info.manifest, float(snaps["mono"].iloc[0]))
    end = float(snaps["mono"].iloc[-1])
    workloads = list(info.spec.workloads)

    mods = pd.DataFrame(run.modules, columns=["id", "kind", "name", "key", "attrs", "born", "died"])
    mods["attrs"] = [repair.as_dict(a) for a in mods["attrs"]]
    mods = mods.set_index("id")
    mods = _attach_workloads(mods, procs, workloads, warnings)
    edges = pd.DataFrame(run.edges, columns=["parent", "child", "born", "died"])

    kinds = kinds_of(info.manifest)
    faults, unknown = repair.fault_rows(faults, manifest_t0, warnings, kinds)
    lost: list[tuple[int, int]] = []
    faults = _resolve_faults(faults, mods, info.monitor, end, warnings, unknown, lost, kinds)
    spans = unscored_rows.leave_out_unknown_windows(faults, unknown, mods, edges, t0, warnings, kinds)
    spans += unscored_rows.leave_out_lost_targets(faults, lost, t0, warnings)
    counters = None
    if len(run.seqs[run.unscored]) or spans:   # a damaged run: the rows it leaves out need the frame
        counters = counters_frame(run)
    unscored = unscored_rows.unscored(counters, snaps, run.seqs[run.unscored], spans, warnings)
    stop = facts.workloads_stopped(ends["mono"].to_numpy(float), info.manifest)
    gap = facts.recording_cut_short(end, stop, info.manifest.snapshot_interval if info.manifest else None)
    if gap is not None:
        warnings.append(f"snapshots stop {gap:.1f} s before the workloads did (at t = {end - t0:.1f} s of "
                        f"{stop - t0:.1f} s): the recording ended early (did the collector die?); the rest of "
                        "the run is not in the tables")
    return RunData(info, run, snaps, counters, mods, edges, procs, faults, workloads, t0, stop,
                   warnings, health["tcp_info"], health["queue_stats"], [(lo, hi) for _, lo, hi, _ in spans],
                   unscored, CounterHistories(RunDir(info.path).db))


def _attach_workloads(mods: pd.DataFrame, procs: pd.DataFrame, workloads: list[SpecWorkload],
                      warnings: list[str]) -> pd.DataFrame:
    """Each module's workload (index), its kind (wget|iperf) and one-way direction, and table rows."""
    clients = procs[procs["role"] == "client"] if not procs.empty else procs
    by_pid: dict[int, list[tuple[float, Any, str]]] = {}
    for pid, wl, started, cmd in zip(clients.get("pid", []), clients.get("workload", []),
                                     clients.get("started", []), clients.get("cmdline", []), strict=False):
        if not (_missing(pid) or _missing(started)):
            by_pid.setdefault(int(pid), []).append((float(started), wl, cmd))

    def proc_of(pid: Any, born: float):
        cands = by_pid.get(int(pid)) if repair.is_number(pid) else None
        if not cands:
            return None
        before = [c for c in cands if c[0] <= born + 1.0] or cands  # pid reuse: the latest started before
        return before[-1]

    guessed = False
    wl_idx, wl_kind, wl_dir = [], [], []
    for a, mkind, born in zip(mods["attrs"], mods["kind"], mods["born"], strict=True):   # not iterrows: 1,000s of modules
        idx = kind = direction = None
        if mkind in ("app", "socket", "tcp"):
            p = proc_of(a.get("pid"), float(born))
            if p is not None and p[1] is not None and p[1] == p[1]:
                idx = int(p[1])
                if 0 <= idx < len(workloads):
                    kind, direction = workloads[idx].kind, workloads[idx].direction
            if kind is None:
                k, d = workload_from_cmdline(str((p[2] if p is not None else "") or a.get("cmdline") or ""))
                if k is not None:
                    kind, direction, guessed = k, d, True
        wl_idx.append(idx)
        wl_kind.append(kind)
        wl_dir.append(direction)
    if guessed and workloads:
        warnings.append("some client processes have no recorded workload; kind and direction taken from "
                        "their command lines")
    mods["workload"] = pd.array(wl_idx, dtype="Int64")
    mods["wl_kind"] = wl_kind
    mods["wl_direction"] = wl_dir

    # One-way direction (thesis 3.5.2): apps and sockets of upload-only or download-only workloads.
    # Sockets of a two-way (dual) iperf carry one direction each (thesis 3.7 port rule).
    tcp_by_inode = {a.get("inode"): a for a, k in zip(mods["attrs"], mods["kind"], strict=True) if k == "tcp"}
    oneway = []
    for a, mkind, d in zip(mods["attrs"], mods["kind"], mods["wl_direction"], strict=True):
        if mkind not in ("app", "socket") or d is None:
            oneway.append(None)
        elif d in ("upload", "download"):
            oneway.append(d)
        elif mkind == "socket":
            oneway.append(_socket_direction(a, tcp_by_inode.get(a.get("inode"))))
        else:
            oneway.append(None)
    mods["oneway"] = oneway
    mods["rows"] = [module_rows(k, w) for k, w in zip(mods["kind"], mods["wl_kind"], strict=True)]
    return mods


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or v != v


def targets_nothing(row, monitor: Monitor, kinds: dict[str, FaultKindInfo] | None = None) -> bool:
    """Whether a faults row knowingly targets no module the collector watches: its target JSON records
    `module_key: null` (a path_blackhole no monitored connection crosses), or, for runs recorded before
    module_key, its kind's key rule is for the monitored host and the target names another host (an
    ip_drop of another host). A target whose fields are missing is not known to target nothing."""
    t = row.target if isinstance(row.target, dict) else {}
    if "module_key" in t:
        return t["module_key"] is None
    info = (kinds or kinds_of(None)).get(row.kind)
    return bool(info is not None and info.key_host and t.get("host", monitor.host) != monitor.host)


def _resolve_faults(faults: pd.DataFrame, mods: pd.DataFrame, monitor: Monitor, end: float,
                    warnings: list[str], unknown_window: Iterable[int] = (),
                    lost: list[tuple[int, int]] | None = None,
                    kinds: dict[str, FaultKindInfo] | None = None) -> pd.DataFrame:
    """Fill in target modules the runner could not resolve (or that are not in the modules table),
    ends of faults still active at the end; `monitor` is the manifest's (host and interface of the
    monitored host). Faults in `unknown_window` (see rundir.repair.fault_rows) are already reported.
    Faults whose recorded target module does not exist and whose target does not resolve go into
    `lost` as (id, recorded module) (analysis.unscored.leave_out_lost_targets reports them)."""
    modules = [(int(mid), key, float(born)) for mid, key, born in zip(mods.index, mods["key"], mods["born"], strict=True)]
    known = {m for m, _, _ in modules}
    rows = list(faults.itertuples(index=False))
    todo = [i for i, row in enumerate(rows) if _missing(row.target_module) or int(row.target_module) not in known]
    found = resolve_fault_targets([(rows[i].kind, rows[i].target, rows[i].start) for i in todo], modules,
                                  monitor.host, monitor.interface, missing_start=end, kinds=kinds or kinds_of(None))
    resolved = dict(zip(todo, found, strict=True))
    targets, ends, descr = [], [], []
    lost = lost if lost is not None else []
    for i, row in enumerate(rows):
        t = row.target
        tm = row.target_module
        if i in resolved:
            tm = resolved[i]
            if not _missing(row.target_module) and tm is not None:
                warnings.append(f"fault {row.id} ({row.kind}): target module {int(row.target_module)} is not in "
                                f"the modules table; resolved from its target: module {tm} ({mods.at[tm, 'key']})")
            elif not _missing(row.target_module):
                lost.append((int(row.id), int(row.target_module)))
            elif tm is None and row.id not in unknown_window and not targets_nothing(row, monitor, kinds):
                # A fault that knowingly targets no module the collector watches (a path_blackhole no
                # monitored connection crosses, an ip_drop of another host) is valid: no warning.
                warnings.append(f"fault {row.id} ({row.kind}): its target module was not recorded; it labels nothing")
        targets.append(None if tm is None else int(tm))
        e = row.end
        if not _missing(row.start) and _missing(e):
            warnings.append(f"fault {row.id} ({row.kind}) has no recorded end; taken as active until the end")
            e = end
        ends.append(e)
        descr.append(t.get("description") or row.kind)
    faults = faults.copy()
    faults["target_module"] = pd.array(targets, dtype="Int64")
    faults["end"] = pd.array(ends, dtype=float) if ends else faults["end"]
    faults["description"] = descr
    skipped = faults["start"].isna() & ~faults["id"].isin(list(unknown_window))
    if skipped.any():
        warnings.append(f"{int(skipped.sum())} fault(s) never took effect (no start recorded); ignored")
    return faults
