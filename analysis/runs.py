"""Finding stored runs and reading what the analysis needs from them.

`find_runs(specs, results_root)` turns what a user types into run directories. Each spec may be
- a run directory (holds run.db; manifest.json expected),
- a directory tree holding runs at any depth (an experiment's directory, a whole results/ tree),
- a glob ('results/net_fault/2026*', quoted so the shell leaves it alone),
- an experiment name: the directory of that name under the results root.

`open_run(path)` checks a run directory and says, in one line each, what is wrong with it: a run
still recording or whose machine died (status `running`), an interrupted or failed run, a missing
manifest, an older or newer `format_version`, missing tables, a run.db cut short or holding fewer
snapshots than the manifest counts (a lost WAL). What cannot be analysed at all raises
harness.errors.UserError; what can be analysed partly is analysed, with a warning. Damage inside
run.db (analysis.damage: values that are not numbers, times that go back, faults whose window or
target is unknown) leaves rows out of the scores, never changes one (docs/analysis.md, "Reading
awkward runs"). `guarded(run, fn, ...)` turns any failure of one run into one line.

`load_run_data(info)` reads one run for labelling, scoring and plotting: the diagnosis engine's Run
(analysis.stretches.load_run: stretches of constant graph, counter deltas and the invalid mask), the
same counters as one long frame, and the modules, edges, processes, faults and workloads.

The manifest is read once, as a harness.manifest.Manifest (the schema the runner writes with); the
analysis reads its attributes.
"""

from __future__ import annotations

import glob
import json
import os
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from analysis import damage
from analysis.stretches import DIRS, Run, load_run
from analysis.tcpstate import STATE_COLUMNS, has_state_columns
from harness.errors import UserError
from harness.manifest import Manifest, ManifestError, Monitor, RunSpec, SpecWorkload, read_manifest
from harness.store import FORMAT_VERSION, connect, resolve_fault_targets

REQUIRED_TABLES = ("modules", "snapshots", "counters")
OPTIONAL_TABLES = ("edges", "processes", "faults", "events")
HEALTH_TABLES = ("tcp_info", "queue_stats")   # format 3; older runs have no network health data
GLOB_CHARS = set("*?[")
# Ports the seeds' workloads use: iperf writes to remote port 5001 and reads on local port 5001
# (thesis 3.7); a web client reads from remote port 80.
IPERF_PORT = 5001
T = TypeVar("T")


@dataclass
class RunInfo:
    """A run directory that can be analysed, with what is known about its state."""

    path: Path
    manifest: Manifest | None         # None: no manifest.json, or one that could not be read
    status: str                       # complete | interrupted | failed | running | unknown
    format_version: int | None
    tables: set[str]
    warnings: list[str] = field(default_factory=list)

    @property
    def experiment(self) -> str:
        return (self.manifest.experiment if self.manifest is not None else None) or self.path.parent.name

    @property
    def spec(self) -> RunSpec:
        """The manifest's resolved spec (empty without a manifest)."""
        return self.manifest.spec if self.manifest is not None else RunSpec()

    @property
    def monitor(self) -> Monitor:
        """The manifest's monitored host (empty without a manifest)."""
        return self.manifest.monitor if self.manifest is not None else Monitor()

    @property
    def name(self) -> str:
        return f"{self.experiment}/{self.path.name}"


# ----------------------------------------------------------------------------- finding runs


def _is_run_dir(p: Path) -> bool:
    return (p / "run.db").is_file() or (p / "manifest.json").is_file()


SUITE_INDEX = "suite.json"   # harness.suiterun: a suite directory's list of its current runs


def suite_members(root: Path) -> list[Path] | None:
    """The runs a suite directory's index names (its current runs, in plan order: a run that
    --resume replaced is not among them), or None when `root` holds no suite index."""
    index = root / SUITE_INDEX
    if not index.is_file():
        return None
    try:
        runs = json.loads(index.read_text()).get("runs", [])
    except (OSError, ValueError) as e:
        raise UserError(f"{index}: unreadable suite index ({e})") from None
    return [root / r["run"] for r in runs if r.get("run") and _is_run_dir(root / r["run"])]


def _runs_under(root: Path) -> list[Path]:
    if _is_run_dir(root):
        return [root]
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("analysis", "logs") and not d.startswith("."))
        if SUITE_INDEX in filenames:
            found += suite_members(Path(dirpath)) or []
            dirnames[:] = []  # a suite's runs are the ones its index names
        elif "run.db" in filenames or "manifest.json" in filenames:
            found.append(Path(dirpath))
            dirnames[:] = []  # a run does not hold runs
    return found


def find_runs(specs: list[str] | tuple[str, ...], results_root: str | Path = "results") -> list[Path]:
    """Run directories named by `specs` (see the module docstring), in order, without duplicates."""
    if not specs:
        raise UserError("name at least one run: a run directory, a directory of runs, a glob, "
                        "or an experiment name")
    out: list[Path] = []
    for spec in specs:
        p = Path(spec)
        if p.is_file() and p.name in ("run.db", "manifest.json"):
            paths = [p.parent]
        elif p.is_dir():
            paths = _runs_under(p)
            if not paths:
                raise UserError(f"{spec}: no runs here (no run.db or manifest.json at any depth)")
        elif GLOB_CHARS & set(spec):
            matches = sorted(glob.glob(spec))
            if not matches:
                raise UserError(f"{spec}: the glob matches nothing")
            paths = [r for m in matches if Path(m).is_dir() for r in _runs_under(Path(m))]
            if not paths:
                raise UserError(f"{spec}: the glob matches no run directories")
        elif (Path(results_root) / spec).is_dir() and "/" not in spec:
            paths = _runs_under(Path(results_root) / spec)
            if not paths:
                raise UserError(f"{spec}: experiment directory {Path(results_root) / spec} holds no runs yet")
        else:
            known = sorted(d.name for d in Path(results_root).iterdir() if d.is_dir()) \
                if Path(results_root).is_dir() else []
            hint = f" (experiments under {results_root}/: {', '.join(known)})" if known else ""
            raise UserError(f"{spec}: not a run directory, a directory of runs, a glob or an "
                            f"experiment name{hint}")
        for r in paths:
            r = r.resolve()
            if r not in out:
                out.append(r)
    return out


def common_root(paths: list[Path]) -> Path:
    """The deepest directory holding every path (the run itself for one run)."""
    return Path(os.path.commonpath([str(p.resolve()) for p in paths]))


# ----------------------------------------------------------------------------- checking a run


def _db_version(value: Any, warnings: list[str]) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        warnings.append(f"run.db meta: format_version {damage.shown(value)} is not a number; ignored")
        return None


def open_run(path: str | Path) -> RunInfo:
    """Check a run directory (module docstring); raises UserError when nothing can be analysed."""
    path = Path(path)
    warnings: list[str] = []
    try:
        manifest = read_manifest(path / "manifest.json")
    except ManifestError as e:
        manifest = None
        warnings.append(f"manifest.json {e.detail}; workloads and fault plan unknown")
    else:
        if manifest is None:
            warnings.append("no manifest.json (incomplete run); workloads are guessed from command lines")
    db = path / "run.db"
    if not db.is_file():
        raise UserError(f"{path}: no run.db (the run never started recording, or this is not a run directory)")
    damage.check_file(db)
    try:
        conn = connect(db, readonly=True)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            db_version = None
            if "meta" in tables:
                row = conn.execute("SELECT value FROM meta WHERE key='format_version'").fetchone()
                db_version = _db_version(row[0], warnings) if row else None
            if manifest is not None and "snapshots" in tables:
                lost = damage.counts_warning(conn, manifest.counts)
                if lost:
                    warnings.append(lost)
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise damage.db_error(path, e) from None
    if manifest is not None:
        for what, v, instead in (("t0", manifest.t0, "the time origin is the first snapshot"),
                                 ("spec.duration", manifest.spec.duration, "the run's end is its run_end event")):
            if v is not None and not (damage.is_number(v) and v >= 0):
                warnings.append(f"manifest.json: {what} {damage.shown(v)} is not a time; {instead}")
    version = manifest.format_version if manifest is not None else db_version
    if version is not None and version > FORMAT_VERSION:
        raise UserError(f"{path}: format_version {version} is newer than this nestlab reads "
                        f"({FORMAT_VERSION}); update nestlab")
    if version is None:
        warnings.append(f"no format_version recorded; reading it as version {FORMAT_VERSION}")
    elif version < FORMAT_VERSION:
        warnings.append(f"older format_version {version} (current {FORMAT_VERSION}); reading what it holds")
    missing = [t for t in REQUIRED_TABLES if t not in tables]
    if missing:
        raise UserError(f"{path}: run.db has no {', '.join(missing)} table; not a nestlab run, or a format "
                        "too old to analyse")
    lacking = [t for t in OPTIONAL_TABLES if t not in tables]
    if lacking:
        warnings.append(f"run.db has no {', '.join(lacking)} table; analysing without it")
    status = manifest.status if manifest is not None else "unknown"
    reason = manifest.reason if manifest is not None else None
    if status == "running":
        warnings.append("status 'running': still recording, or the machine died; analysing what was recorded")
    elif status in ("interrupted", "failed"):
        warnings.append(f"run {status}{': ' + str(reason) if reason else ''}; analysing what was recorded")
    return RunInfo(path, manifest, status, version, tables, warnings)


# ----------------------------------------------------------------------------- reading a run


DEBUG_ENV = "NESTLAB_DEBUG"   # set: a run that fails unexpectedly raises with its traceback


def guarded(run: str | Path, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    """fn(*args) for one run, with every failure as one line (UserError): a run.db SQLite cannot read,
    or anything the analysis did not expect of a damaged run (its type and message; the traceback
    with NESTLAB_DEBUG=1). UserError and OSError pass as they are (harness.cli prints them)."""
    try:
        return fn(*args, **kw)
    except (UserError, OSError):   # OSError: a file the user names or writes (nestlab's one line)
        raise
    except sqlite3.Error as e:
        raise damage.db_error(Path(run), e) from None
    except Exception as e:   # noqa: BLE001 - a damaged run must not end in a traceback
        if os.environ.get(DEBUG_ENV):
            raise
        text = " ".join(str(e).split())
        raise UserError(f"{run}: cannot be analysed: {type(e).__name__}: {text[:200]} (a damaged run? "
                        f"{DEBUG_ENV}=1 shows where)") from None


def read_run(path: str | Path) -> RunData:
    """open_run and load_run_data, every failure one line (guarded)."""
    return guarded(path, lambda: load_run_data(open_run(path)))


@dataclass
class RunData:
    """One run read for the analysis. Frames use run.db module ids and snapshot seqs."""

    info: RunInfo
    run: Run                    # analysis.stretches.Run (give it to diagnose_run to avoid reading twice)
    snapshots: pd.DataFrame     # seq (index), mono, start (mono of the previous snapshot)
    counters: pd.DataFrame      # module, dir, seq, tm, wait, has_wait, queued, has_queue, errors, invalid
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
    #                                         analysis.tcpstate.STATE_COLUMNS (None: not recorded)
    queue_stats: pd.DataFrame | None = None  # mono, node, interface, cumulative counters, backlog
    uncertain: list[tuple[float, float]] = field(default_factory=list)  # spans of faults whose window or
    #                             target is unknown (a damaged run): not quiet time (analysis.health)
    unscored: np.ndarray | None = None   # bool per counters row: left out of the scores (analysis.damage)

    @property
    def path(self) -> Path:
        return self.info.path


def _frame(conn, sql: str, columns: list[str]) -> pd.DataFrame:
    try:
        rows = conn.execute(sql).fetchall()
    except sqlite3.OperationalError:
        rows = []
    return pd.DataFrame(rows, columns=columns)


def counters_frame(run: Run) -> pd.DataFrame:
    """The counter deltas of every stretch as one long frame (one row per module, dir, snapshot)."""
    parts: dict[str, list[np.ndarray]] = {k: [] for k in
                                          ("module", "dir", "seq", "tm", "wait", "has_wait", "queued",
                                           "has_queue", "errors", "invalid")}
    for st in run.stretches:
        mod = np.repeat(np.asarray(st.modules, dtype=np.int64), st.t)
        seq = np.tile(st.seqs, st.n)
        for di, d in enumerate(DIRS):
            c = st.counters[d]
            parts["module"].append(mod)
            parts["dir"].append(np.full(mod.size, di, dtype=np.int8))
            parts["seq"].append(seq)
            parts["tm"].append(c.tm.ravel())
            parts["wait"].append(c.wait.ravel())
            parts["has_wait"].append(c.has_wait.ravel())
            parts["queued"].append(c.queued.ravel())
            parts["has_queue"].append(c.has_queue.ravel())
            parts["errors"].append(c.errors.ravel())
            parts["invalid"].append(c.invalid.ravel())
    if not parts["module"]:
        return pd.DataFrame({"module": pd.Series([], dtype=np.int64),
                             "dir": pd.Categorical([], categories=list(DIRS)),
                             "seq": pd.Series([], dtype=np.int64), "tm": [], "wait": [],
                             "has_wait": pd.Series([], dtype=bool), "queued": [],
                             "has_queue": pd.Series([], dtype=bool), "errors": [],
                             "invalid": pd.Series([], dtype=bool)})
    flat = {k: np.concatenate(v) for k, v in parts.items()}
    flat["dir"] = pd.Categorical.from_codes(flat["dir"], list(DIRS))
    return pd.DataFrame(flat)


def _argv0(cmdline: str) -> str:
    first = (cmdline or "").split(" ", 1)[0]
    return os.path.basename(first)


def _guess_workload(cmdline: str) -> tuple[str | None, str | None]:
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
        raise damage.db_error(info.path, e) from None


def _load(info: RunInfo) -> RunData:
    warnings = list(info.warnings)
    run = load_run(info.path)
    warnings += run.warnings
    conn = connect(info.path / "run.db", readonly=True)
    try:
        procs = damage.numeric_frame(
            conn, "processes", "SELECT pid, workload, role, host, cmdline, started, ended, exit_code FROM processes "
            "ORDER BY started", ["pid", "workload", "role", "host", "cmdline", "started", "ended", "exit_code"],
            ("pid", "started"), warnings, optional=("workload", "ended", "exit_code"))
        ends = damage.numeric_frame(conn, "events", "SELECT mono FROM events WHERE kind = 'run_end'", ["mono"],
                                    ("mono",), warnings).sort_values("mono")
        faults = _frame(conn, f"SELECT {', '.join(damage.FAULT_COLUMNS)} FROM faults ORDER BY id", damage.FAULT_COLUMNS)
        health = {t: None for t in HEALTH_TABLES}
        if "tcp_info" in info.tables:
            # Format 4 adds the state columns (analysis.tcpstate); older runs have the RTTs only.
            optional = ("rtt_us", "rttvar_us", *(STATE_COLUMNS if has_state_columns(conn) else ()))
            cols = ["seq", "module", *optional]
            seen: list[str] = []   # load_run warned about the state columns already
            health["tcp_info"] = damage.numeric_frame(
                conn, "tcp_info", f"SELECT {', '.join(cols)} FROM tcp_info", cols, ("seq", "module"), seen,
                optional=optional)
            warnings += [w for w in seen if w not in warnings]
        if "queue_stats" in info.tables:
            cols = ["mono", "node", "interface", "sent_packets", "sent_bytes", "drops", "overlimits", "requeues",
                    "backlog_packets", "backlog_bytes"]
            health["queue_stats"] = damage.numeric_frame(
                conn, "queue_stats", f"SELECT {', '.join(cols)} FROM queue_stats ORDER BY mono", cols,
                tuple(c for c in cols if c not in ("node", "interface")), warnings)
            health["queue_stats"] = health["queue_stats"].sort_values("mono", ignore_index=True)
    finally:
        conn.close()
    if len(run.seqs) == 0:
        raise UserError(f"{info.path}: no snapshots recorded; nothing to analyse")
    snaps = pd.DataFrame({"mono": run.mono}, index=pd.Index(run.seqs, name="seq"))
    snaps["start"] = snaps["mono"].shift(1)
    manifest_t0 = info.manifest.t0 if info.manifest is not None else None
    manifest_t0 = manifest_t0 if damage.is_number(manifest_t0) else None
    t0 = manifest_t0 if manifest_t0 is not None else float(snaps["mono"].iloc[0])
    end = float(snaps["mono"].iloc[-1])
    workloads = list(info.spec.workloads)

    mods = pd.DataFrame(run.modules, columns=["id", "kind", "name", "key", "attrs", "born", "died"])
    mods["attrs"] = [damage.as_dict(a) for a in mods["attrs"]]
    mods = mods.set_index("id")
    mods = _attach_workloads(mods, procs, workloads, warnings)
    edges = pd.DataFrame(run.edges, columns=["parent", "child", "born", "died"])

    faults, unknown = damage.fault_rows(faults, manifest_t0, warnings)
    lost: list[tuple[int, int]] = []
    faults = _resolve_faults(faults, mods, info.monitor, end, warnings, unknown, lost)
    spans = damage.leave_out_unknown_windows(faults, unknown, mods, edges, t0, warnings)
    spans += damage.leave_out_lost_targets(faults, lost, t0, warnings)
    counters = counters_frame(run)
    unscored = damage.unscored(counters, snaps, run.seqs[run.unscored], spans, warnings)
    stop = float(ends["mono"].iloc[0]) if len(ends) else None
    duration = info.spec.duration
    if stop is None and manifest_t0 is not None and damage.is_number(duration) and duration >= 0:
        stop = manifest_t0 + duration
    return RunData(info, run, snaps, counters, mods, edges, procs, faults, workloads, t0, stop,
                   warnings, health["tcp_info"], health["queue_stats"], [(lo, hi) for _, lo, hi, _ in spans],
                   unscored)


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
        cands = by_pid.get(int(pid)) if damage.is_number(pid) else None
        if not cands:
            return None
        before = [c for c in cands if c[0] <= born + 1.0] or cands  # pid reuse: the latest started before
        return before[-1]

    guessed = False
    wl_idx, wl_kind, wl_dir = [], [], []
    for _mid, row in mods.iterrows():
        a = row["attrs"]
        idx = kind = direction = None
        if row["kind"] in ("app", "socket", "tcp"):
            p = proc_of(a.get("pid"), float(row["born"]))
            if p is not None and p[1] is not None and p[1] == p[1]:
                idx = int(p[1])
                if 0 <= idx < len(workloads):
                    kind, direction = workloads[idx].kind, workloads[idx].direction
            if kind is None:
                k, d = _guess_workload(str((p[2] if p is not None else "") or a.get("cmdline") or ""))
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
    tcp_by_inode = {r["attrs"].get("inode"): r["attrs"] for _, r in mods[mods["kind"] == "tcp"].iterrows()}
    oneway = []
    for _mid, row in mods.iterrows():
        d = row["wl_direction"]
        if row["kind"] not in ("app", "socket") or d is None:
            oneway.append(None)
        elif d in ("upload", "download"):
            oneway.append(d)
        elif row["kind"] == "socket":
            oneway.append(_socket_direction(row["attrs"], tcp_by_inode.get(row["attrs"].get("inode"))))
        else:
            oneway.append(None)
    mods["oneway"] = oneway
    mods["rows"] = [module_rows(k, w) for k, w in zip(mods["kind"], mods["wl_kind"], strict=True)]
    return mods


def module_rows(kind: str, wl_kind: str | None) -> tuple[str, ...]:
    """The rows of the accuracy table (thesis Table 3.3) a module counts in."""
    if kind == "app":
        return ((wl_kind,) if wl_kind in ("iperf", "wget") else ()) + ("all modules",)
    if kind == "socket":
        return ("socket",) + ((f"s:{wl_kind}",) if wl_kind in ("iperf", "wget") else ()) + ("all modules",)
    if kind == "tcp":
        return ("TCP", "all modules")
    if kind in ("ipeth", "ip", "eth"):
        return ("ip+eth", "all modules")
    return ("all modules",)


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or v != v


def _resolve_faults(faults: pd.DataFrame, mods: pd.DataFrame, monitor: Monitor, end: float,
                    warnings: list[str], unknown_window: Iterable[int] = (),
                    lost: list[tuple[int, int]] | None = None) -> pd.DataFrame:
    """Fill in target modules the runner could not resolve (or that are not in the modules table),
    ends of faults still active at the end; `monitor` is the manifest's (host and interface of the
    monitored host). Faults in `unknown_window` (see analysis.damage.fault_rows) are already reported.
    Faults whose recorded target module does not exist and whose target does not resolve go into
    `lost` as (id, recorded module) (analysis.damage.leave_out_lost_targets reports them)."""
    modules = [(int(mid), key, float(born)) for mid, key, born in zip(mods.index, mods["key"], mods["born"], strict=True)]
    known = {m for m, _, _ in modules}
    rows = list(faults.itertuples(index=False))
    todo = [i for i, row in enumerate(rows) if _missing(row.target_module) or int(row.target_module) not in known]
    found = resolve_fault_targets([(rows[i].kind, rows[i].target, rows[i].start) for i in todo], modules,
                                  monitor.host, monitor.interface, missing_start=end)
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
            elif tm is None and row.id not in unknown_window:
                warnings.append(f"fault {row.id} ({row.kind}): target module unknown; it labels nothing")
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
