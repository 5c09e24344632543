"""Stretches of constant graph and their counter deltas, as arrays the rule variants run over, and
the readers that make them (run.db, the `diagnose --json` format).

A run is cut into *stretches*: maximal runs of consecutive snapshots over which the graph (modules
and edges) does not change. Each stretch holds, per direction ('in', 'out'), modules x snapshots
arrays of counter deltas, so a variant diagnoses a whole stretch at once instead of snapshot by
snapshot.

Two sources:
- `load_stretches(run_dir)`: run.db (rundir/db.py). Counters there are raw cumulative values; deltas
  are taken between consecutive snapshots of a module. A delta that goes negative is invalid (thesis
  3.4): the snapshot is discarded and the next one is compared with the last good value; when that
  one is lower too, the last good value was the spurious one, it is discarded as well, and the
  series re-baselines on the lower values. `Counters.invalid` marks those module/direction/snapshots
  (and snapshots without a measurement); the diagnosis still runs on them, the labeller drops them.
  A wait_ms decrease of at most 0.05 ms is not an event (a call of the interceptor finishing between
  the reader's look at the slot and its clock): the previous value carries over. analysis.model.deltas is
  the one place the rule lives; the collector stores what it read.
- `stretch_from_json(obj)`: the `nestlab diagnose --json` format (docs/diagnosis.md), whose values
  are already deltas.

`build_stretches` and `mark_detached` are load_run's last steps on their own, so that analysis.live
makes the stretches of a window of recent snapshots with the same code (docs/live.md).

A stretch also marks its *detached* modules: those with an upper layer elsewhere in the run but not
in this stretch (see `Stretch`), which the rule systems do not treat as roots with work.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from analysis.model import hosts, probes, stretch_copy, tcpstate, turnstate
from analysis.model.deltas import _QUEUED, series_deltas
from analysis.model.dense import (
    cell_places,
    dense_counter_rows,
    fill_counters,
    gather_counters,
    gather_index,
    presence_spans,
    stretch_edges,
    stretch_members,
)
from analysis.model.engine_metrics import EngineMetrics, read_engine_metrics
from rundir import columnar, read, repair
from rundir.db import connect
from rundir.errors import UserError
from rundir.layout import run_db

DIRS = ("in", "out")
KINDS = ("app", "socket", "tcp", "ipeth", "ip", "eth", "sconn")
JSON_COUNTERS = ("total_msgs", "wait_ms", "queued", "errors", "bytes")
# Kinds whose counters start at zero when the module is created, so the first snapshot a module
# appears in has a delta (from zero). An interface's counters predate the run: its first snapshot
# is only a baseline.
STARTS_AT_ZERO = ("app", "socket", "tcp")


@dataclass
class Counters:
    """One direction of one stretch. Every array is (modules, snapshots)."""

    tm: np.ndarray          # delta total_msgs (0 where the module has no counters in this direction)
    wait: np.ndarray        # delta wait_ms (0 where unsupported)
    has_wait: np.ndarray    # bool: wait_ms supported
    queued: np.ndarray      # current queue length (0 where unsupported)
    has_queue: np.ndarray   # bool: queued supported
    errors: np.ndarray      # delta errors (0 where unsupported)
    has_errors: np.ndarray  # bool: errors supported
    invalid: np.ndarray     # bool: no valid delta (thesis 3.4, first snapshot, missing row)

    @classmethod
    def empty(cls, m: int, t: int) -> Counters:
        z = np.zeros((m, t))
        f = np.zeros((m, t), dtype=bool)
        return cls(z, z.copy(), f, z.copy(), f.copy(), z.copy(), f.copy(), f.copy())

    def take(self, cols) -> Counters:
        """The same counters for a subset of the snapshots (columns)."""
        return Counters(*(getattr(self, f)[:, cols] for f in self.__dataclass_fields__))


@dataclass
class Stretch:
    """A graph that stays the same over `seqs`, with its counters per direction.

    `detached[m]`: module m has a parent (an upper layer) somewhere else in the run but none in
    this stretch -- a TCP connection the collector sees before the interceptor has reported its
    socket, or after the socket was closed while the connection lingers (FIN_WAIT, ...). Its upper
    layer is unknown here, so a rule system must not assume that it has work the way it does for a
    true root (a module that never has a parent in the run, e.g. every TCP connection when the
    interceptor is off). Only a module without a parent edge in the stretch can be detached (the
    flag is cleared on the others); JSON stretches have none.
    """

    modules: list[Any]                 # module ids: int (run.db) or str (JSON)
    kinds: list[str]
    edges: list[tuple[int, int]]       # (parent index, child index); parent = upper layer
    seqs: np.ndarray                   # snapshot seq numbers, shape (T,)
    counters: dict[str, Counters] = field(default_factory=dict)
    detached: np.ndarray | None = None  # bool (modules,); None = none detached
    # Per module, the remote peer it depends on (a TCP connection's remote address, attrs "dst";
    # JSON "remote"), None where unknown; None = unknown for all. flowdiagnoser:shared=on groups by it.
    remote: list[str | None] | None = None
    # Per module and snapshot, the connection's TCP state (analysis.model.tcpstate.TcpState: tcp_info's
    # backoff, ca_state, retransmits, probes, rto and last send/receive times, carried forward);
    # None = not recorded (run format <= 3, JSON). flowdiagnoser:tcpstate=on reads it.
    tcpstate: Any = None
    # The collector's probes as this stretch sees them (analysis.model.probes.StretchProbes); None = none
    # (runs of format <= 4 carry an empty one). flowdiagnoser:probe=on reads it.
    probes: Any = None
    # (buffers, start, stop) when the counters are views of buffers[d][field][start:stop], one flat
    # array per direction and field for a whole run (build_stretches): analysis.model.batch takes those.
    flat: Any = None
    # The monitored host of every module of the stretch (a run of several hosts: analysis.model.hosts);
    # None: one host, or not recorded.
    host: str | None = None

    def __post_init__(self):
        self.edges = sorted(set(self.edges))  # one canonical order: every variant relies on it
        detached = np.zeros(self.n, dtype=bool)
        if self.detached is not None:
            detached[:] = np.asarray(self.detached, dtype=bool)
            detached[[c for _, c in self.edges]] = False
        self.detached = detached

    @property
    def n(self) -> int:
        return len(self.modules)

    @property
    def t(self) -> int:
        return len(self.seqs)

    @cached_property
    def edge_array(self) -> np.ndarray:
        """`edges` as an (E, 2) array."""
        return np.asarray(self.edges, dtype=np.int64).reshape(-1, 2)

    @cached_property
    def parents(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.n)]
        for p, c in self.edges:
            out[c].append(p)
        return out

    @cached_property
    def children(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.n)]
        for p, c in self.edges:
            out[p].append(c)
        return out

    def take(self, cols) -> Stretch:
        """The same graph over a subset of the snapshots."""
        return Stretch(self.modules, self.kinds, self.edges, self.seqs[cols],
                       {d: c.take(cols) for d, c in self.counters.items()}, self.detached, self.remote,
                       None if self.tcpstate is None else self.tcpstate.take(cols),
                       None if self.probes is None else self.probes.take(cols), host=self.host)


# ---------------------------------------------------------------- JSON snapshots


def _fail(where: str, msg: str):
    raise UserError(f"{where}: {msg}")


def read_json(path: str | Path) -> Any:
    """Read a JSON file ('-' = stdin); one clear line on any problem."""
    import sys

    try:
        text = sys.stdin.read() if str(path) == "-" else Path(path).read_text()
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise UserError(f"{path}: invalid JSON: nested deeper than snapshots can be") from None


def _number(where: str, v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v or v < 0:
        _fail(where, f"expected a number >= 0 or null, got {json.dumps(v)}")
    return float(v)


def stretch_from_json(obj: Any, where: str = "input") -> Stretch:
    """Parse {"modules": [...], "snapshots": [...]} (docs/diagnosis.md) into one stretch.

    Values are deltas over the snapshot interval, except `queued` (current value). A missing key
    (or null) means unsupported; a module absent from a direction is inactive, extras unsupported.
    """
    if not isinstance(obj, dict):
        _fail(where, "expected a JSON object with 'modules' and 'snapshots'")
    mods = obj.get("modules")
    if not isinstance(mods, list) or not mods:
        _fail(where, "'modules' must be a non-empty list")
    ids: list[str] = []
    kinds: list[str] = []
    index: dict[str, int] = {}
    for i, m in enumerate(mods):
        w = f"{where}: modules[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("id"), str) or not m["id"]:
            _fail(w, "expected an object with a string 'id'")
        if m["id"] in index:
            _fail(w, f"duplicate module id {m['id']!r}")
        if m.get("kind") not in KINDS:
            _fail(w, f"kind must be one of {', '.join(KINDS)}, got {json.dumps(m.get('kind'))}")
        if m.get("remote") is not None and not isinstance(m["remote"], str):
            _fail(w, f"remote must be an address (a string) or null, got {json.dumps(m['remote'])}")
        index[m["id"]] = i
        ids.append(m["id"])
        kinds.append(m["kind"])
    edges = []
    for i, m in enumerate(mods):
        parents = m.get("parents", [])
        if not isinstance(parents, list):
            _fail(f"{where}: modules[{i}].parents", "expected a list of module ids")
        for p in parents:
            if p not in index:
                _fail(f"{where}: modules[{i}].parents", f"unknown module {json.dumps(p)}")
            edges.append((index[p], i))
    snaps = obj.get("snapshots")
    if not isinstance(snaps, list) or not snaps:
        _fail(where, "'snapshots' must be a non-empty list")
    n, t = len(ids), len(snaps)
    counters = {d: Counters.empty(n, t) for d in DIRS}
    for s, snap in enumerate(snaps):
        if not isinstance(snap, dict):
            _fail(f"{where}: snapshots[{s}]", "expected an object with 'in' and/or 'out'")
        for key in snap:
            if key not in DIRS:
                _fail(f"{where}: snapshots[{s}]", f"unknown direction {json.dumps(key)} (use 'in', 'out')")
        for d in DIRS:
            per = snap.get(d, {})
            if not isinstance(per, dict):
                _fail(f"{where}: snapshots[{s}].{d}", "expected an object: module id -> counters")
            c = counters[d]
            for mid, vals in per.items():
                w = f"{where}: snapshots[{s}].{d}.{mid}"
                if mid not in index:
                    _fail(w, "unknown module")
                if not isinstance(vals, dict):
                    _fail(w, "expected an object of counters")
                for k in vals:
                    if k not in JSON_COUNTERS:
                        _fail(w, f"unknown counter {json.dumps(k)} (known: {', '.join(JSON_COUNTERS)})")
                i = index[mid]
                v = {k: _number(f"{w}.{k}", vals.get(k)) for k in JSON_COUNTERS}
                c.tm[i, s] = v["total_msgs"] or 0.0  # required counter; missing counts as no messages
                for name, has in (("wait_ms", "has_wait"), ("queued", "has_queue"), ("errors", "has_errors")):
                    if v[name] is not None:
                        getattr(c, has)[i, s] = True
                        {"wait_ms": c.wait, "queued": c.queued, "errors": c.errors}[name][i, s] = v[name]
    return Stretch(ids, kinds, edges, np.arange(t), counters, remote=[m.get("remote") for m in mods])


# ---------------------------------------------------------------- run.db

@dataclass
class RunStretches:
    """A run directory read for analysis: its stretches and its module table."""

    path: Path
    stretches: list[Stretch]
    module_kind: dict[int, str]
    module_name: dict[int, str]
    seqs: np.ndarray  # every snapshot seq of the run, ascending
    mono: np.ndarray | None = None      # their times, never decreasing (rundir.read.read_snapshots)
    unscored: np.ndarray | None = None  # bool per snapshot: no usable interval (damaged time): not scored
    modules: list[tuple] = field(default_factory=list)  # (id, kind, name, key, attrs, born, died), as read
    edges: list[tuple] = field(default_factory=list)    # (parent, child, born, died), as read
    warnings: list[str] = field(default_factory=list)   # what was wrong with run.db, what was left out
    engine_metrics: EngineMetrics = field(default_factory=EngineMetrics)   # a streams run's (flink-backpressure)


def load_stretches(run_dir: str | Path) -> RunStretches:
    """Read a run directory (or a run.db path) into stretches of constant graph. What is wrong with
    run.db (rundir.read) is in `RunStretches.warnings`; sqlite3.Error when the file cannot be read."""
    path = Path(run_dir)
    db = run_db(path)
    if not db.is_file():
        raise UserError(f"{path}: no run.db here (expected a run directory)")
    warnings: list[str] = []
    conn = connect(db, readonly=True)
    try:
        seqs, mono, unscored, w = read.read_snapshots(conn, path)
        warnings += w
        mods, unknown_death, w = read.read_modules(conn)
        warnings += w
        edge_rows, w = read.read_edges(conn, mods)
        warnings += w
        now = columnar.stamp(db, conn)
        key = stretch_copy.key(now) if db.parent == path else None   # a run directory's own run.db
        notes: list[str] = []   # copies that failed their checks: said, not kept in the new copy
        copy = stretch_copy.read(path, key, notes)
        why = None if copy is None else stretch_copy.mismatch(
            copy, len(seqs), np.array([m[0] for m in mods], dtype=np.int64), tuple(Counters.__dataclass_fields__), DIRS)
        if why is not None:
            notes.append(f"{stretch_copy.FILE}: {why}; not used: the stretches made again from run.db")
            copy = None
        said = len(warnings)
        if copy is None:
            rows, unplaced = columnar.read_counters(db, conn, warnings, now, notes)
        else:
            warnings += copy.warnings[0]
        read_said = warnings[said:]
        warnings += notes
        tcp_rows = read.read_tcp_state(conn, warnings)
        probe_rows = read.read_probes(conn, warnings)
        engine = read_engine_metrics(conn, (k for _, k, *_ in mods))
    finally:
        conn.close()
    kind = {i: k for i, k, *_ in mods}
    name = {i: n for i, _, n, *_ in mods}
    run = RunStretches(path, [], kind, name, seqs, mono, unscored, mods, edge_rows, warnings, engine)
    if copy is not None:
        _from_copy(run, copy)
    elif len(seqs) and len(rows["seq"]) and kind:
        said = len(warnings)
        _from_rows(run, rows, unplaced, unknown_death)
        stretch_copy.write(path, key, _copy_of(run, mods, (read_said, warnings[said:])))
    elif len(seqs):
        run.modules = repair.fill_lives(mods, unknown_death, np.zeros(0, np.int64), np.zeros(0, np.int64), mono)
    if run.stretches:
        mark_detached(run.stretches, attached_modules(run.stretches), remote_addresses(mods))
        tcpstate.attach(run.stretches, tcp_rows, seqs, mono)
        probes.attach(run.stretches, probes.burst_table(probe_rows), seqs, mono, probes.module_remotes(mods))
        run.stretches = hosts.split_by_host(run.stretches, hosts.module_hosts(mods))   # several hosts: one each
        turnstate.attach(run.stretches, db, seqs, mods)   # format 8: whose turn (analysis.variants.whoseturn)
    return run


def _from_copy(run: RunStretches, copy: stretch_copy.Parts) -> None:
    """The stretches and the modules' lives kept in the stretches' copy (load_stretches, from run.db's
    small tables read again)."""
    distinct = list(map(tuple, copy.edges.tolist()))
    at = np.concatenate([[0], np.cumsum(copy.edge_counts)])
    starts, stops = copy.bounds[:, 0], copy.bounds[:, 1]
    edges = [distinct[i] for i in copy.edge_index.tolist()]
    run.stretches = make_stretches(run.seqs, run.module_kind, starts, stops, copy.members.tolist(), copy.sizes,
                                   edges, at, copy.cells)
    run.modules = [m if m[0] not in copy.lives else (*m[:5], *copy.lives[m[0]]) for m in run.modules]
    run.warnings += copy.warnings[1]


def _copy_of(run: RunStretches, mods: list[tuple], warnings: tuple[list[str], list[str]]) -> stretch_copy.Parts | None:
    """What the stretches' copy keeps of a run just cut into stretches (None: stretches made otherwise,
    not one run's flat arrays)."""
    sts = run.stretches
    flats = [st.flat for st in sts]
    if not sts or any(f is None or f[0] is not flats[0][0] for f in flats):
        return None
    buffers, lo, hi = flats[0][0], flats[0][1], flats[-1][2]
    starts = np.searchsorted(run.seqs, np.array([st.seqs[0] for st in sts]))
    distinct: dict[tuple[int, int], int] = {}
    index = [distinct.setdefault(e, len(distinct)) for st in sts for e in st.edges]
    lives = {m[0]: (f[5], f[6]) for m, f in zip(mods, run.modules, strict=True) if m[5:] != f[5:]}
    return stretch_copy.Parts(np.stack([starts, starts + np.array([st.t for st in sts])], axis=1),
                              np.fromiter((m for st in sts for m in st.modules), dtype=np.int64),
                              np.array([st.n for st in sts], dtype=np.int64),
                              np.array(list(distinct), dtype=np.int64).reshape(-1, 2), np.array(index, dtype=np.int64),
                              np.array([len(st.edges) for st in sts], dtype=np.int64),
                              {d: {f: a[lo:hi] for f, a in buffers[d].items()} for d in DIRS}, lives, warnings)


def _from_rows(run: RunStretches, rows: dict, unplaced, unknown_death: set[int]) -> None:
    """Cut a run into stretches from its counters rows (load_stretches without a copy)."""
    seqs, mono, kind, mods, warnings = run.seqs, run.mono, run.module_kind, run.modules, run.warnings
    rows, pos = repair.place_rows(rows, seqs, kind, warnings)
    ids = np.array([m[0] for m in mods], dtype=np.int64)   # read_modules orders them by id
    died = np.array([np.nan if m[6] is None else m[6] for m in mods], dtype=float)
    unknown = np.isin(ids, np.fromiter(unknown_death, dtype=np.int64, count=len(unknown_death)))
    # the first position after each module's life: alive at the end (or killed); death unknown: alive
    # until its last row (dense_counter_rows)
    end_pos = np.where(np.isnan(died), np.where(unknown, 0, len(seqs)), np.searchsorted(mono, died, side="left"))
    rows, pos = dense_counter_rows(rows, pos, (ids, end_pos.astype(np.int64)), seqs, by_direction=True)
    run.modules = repair.fill_lives(mods, unknown_death, rows["module"], pos, mono)

    # Deltas per direction on rows sorted by (module, seq): each direction one slice of the rows.
    zero_ids = np.fromiter((i for i, k in kind.items() if k in STARTS_AT_ZERO), dtype=np.int64)
    split = int(np.searchsorted(rows["out"], True))

    buf = {}

    def deltas(d: str) -> tuple:
        """One direction's rows as build_stretches takes them, made when it asks (one at a time in memory:
        the second direction's deltas go to the buffer of the first's)."""
        is_out = d == "out"
        sl = slice(split, None) if is_out else slice(0, split)
        mod = rows["module"][sl]
        vals, has, bad = repair.carry_over_bad(mod, rows["vals"][sl], rows["has"][sl], rows["bad"][sl])
        heads = np.flatnonzero(np.append(len(mod) > 0, mod[1:] != mod[:-1]))   # rows come a module at a time
        zero = np.repeat(np.isin(mod[heads], zero_ids), np.diff(np.append(heads, len(mod))))
        if buf.get("delta") is None or buf["delta"].shape[1] < len(mod):
            buf["delta"] = np.empty((3, len(mod)))
        delta, invalid = series_deltas(mod, vals, has, zero, pos[sl] == 0, buf["delta"])
        if bad.any():  # a bad value, and the delta after it (which spans it), are no measurement
            invalid |= bad
            invalid[1:] |= bad[:-1] & (mod[1:] == mod[:-1])
        lost = [m for m, o in unplaced.series if o == is_out]
        if lost:       # a row of this series could not be placed: its carried values are unknown
            invalid |= np.isin(mod, lost)
        if unplaced.from_seq is not None:
            invalid |= rows["seq"][sl] >= unplaced.from_seq
        return pos[sl], mod, delta, vals[:, _QUEUED], has, invalid

    per_dir = _Lazy(deltas)
    run.stretches = build_stretches(seqs, mono, kind, per_dir, rows["module"], pos, run.edges)


class _Lazy(dict):
    """A mapping whose values are made by `make(key)` each time they are asked for, never kept."""

    def __init__(self, make):
        super().__init__()
        self._make = make

    def __missing__(self, key):
        return self._make(key)


def build_stretches(seqs: np.ndarray, mono: np.ndarray, kind: dict[int, str], per_dir: dict[str, tuple],
                    row_module: np.ndarray, row_pos: np.ndarray, edge_rows: list[tuple]) -> list[Stretch]:
    """Cut snapshots `seqs` (times `mono`) into stretches of constant graph and fill their counters.

    per_dir[d] = (pos, module, delta (R, 3), queued, has (R, 4), invalid), rows in any order;
    row_module/row_pos: every dense counters row (either direction), a module being present where it
    has one; edge_rows: (parent, child, born, died) in monotonic time. Positions index `seqs`.
    `load_run` passes a whole run, analysis.live a window of recent snapshots.

    The stretches' counters are views of one flat array per field and direction, in the order of
    analysis.model.batch (stretch, module, snapshot), so a Batch of them takes it without a copy."""
    s_count = len(seqs)
    if s_count == 0 or len(row_module) == 0:
        return []
    # Module ids -> dense slots (memory follows the number of modules, not the largest id).
    ids = np.fromiter(sorted(kind), dtype=np.int64, count=len(kind))
    # Module presence (a counters row in either direction) as spans of positions; KeyError for a
    # present module of no kind.
    spans = presence_spans(ids, row_module, row_pos, s_count)
    change = {0, s_count, *spans[1].tolist(), *spans[2].tolist()}
    m = len(ids)
    e_ps, e_cs, e_a, e_b = (np.zeros(0, dtype=np.int64) for _ in range(4))
    if edge_rows:
        par, chi, born, died = zip(*edge_rows, strict=True)
        e_a = np.searchsorted(mono, np.array(born, dtype=float), side="left")
        e_b = np.searchsorted(mono, np.array([np.inf if d is None else d for d in died], dtype=float), side="left")
        live = (e_a < e_b) & (np.array(par) != np.array(chi))
        change.update(e_a[e_a < e_b].tolist(), e_b[e_a < e_b].tolist())

        def slots(mods):   # slot of each module id, m (no module) where it has none
            mods = np.array(mods, dtype=np.int64)
            k = np.minimum(np.searchsorted(ids, mods), max(m - 1, 0))
            return np.where((ids[k] == mods) if m else False, k, m)

        e_ps, e_cs, e_a, e_b = slots(par)[live], slots(chi)[live], e_a[live], e_b[live]
    bounds = np.array(sorted(c for c in change if 0 <= c <= s_count), dtype=np.int64)
    starts, stops = bounds[:-1], bounds[1:]
    members, n = stretch_members(starts, spans)   # slots present in each stretch, ascending
    full = np.flatnonzero(n)   # an interval where no module is present makes no stretch
    starts, stops, n = starts[full], stops[full], n[full]
    t = stops - starts
    hi = np.cumsum(n)
    lo = hi - n
    offsets = np.concatenate([[0], np.cumsum(n * t)])
    flat = {}
    buf = np.empty(int(offsets[-1]), dtype=np.int64)   # each cell's row, one direction after the other
    for d in DIRS:
        p_, mod, delta, queued, has, invalid = per_dir[d]
        gather = gather_index(ids, mod, p_, starts, t, members, n, buf)
        if gather is not None:   # each cell's row, in one pass
            flat[d] = gather_counters(*gather, delta, queued, has, invalid)
            del p_, mod, delta, queued, has, invalid, gather   # before the next direction's are made
            continue
        # Each row's cell: its stretch, its module's place there, its snapshot's.
        k, place = cell_places(starts, stops, s_count, members, lo, hi, ids, mod, p_)
        if not (place >= 0).all():   # rows of modules not in their stretch's graph: no cell
            keep = np.flatnonzero(place >= 0)
            k, place, p_, delta, queued, has, invalid = (a[keep] for a in (k, place, p_, delta, queued, has, invalid))
        cell = offsets[k] + place * t[k] + (p_ - starts[k])
        flat[d] = fill_counters(int(offsets[-1]), cell, delta, queued, has, invalid)
        del p_, mod, delta, queued, has, invalid, k, place, cell
    edges, at = stretch_edges(starts, members, n, m, e_ps, e_cs, e_a, e_b)
    return make_stretches(seqs, kind, starts, stops, ids[members].tolist(), n, edges, at, flat)


def make_stretches(seqs: np.ndarray, kind: dict[int, str], starts: np.ndarray, stops: np.ndarray, here: list[int],
                   n: np.ndarray, edges: list[tuple[int, int]], at: np.ndarray,
                   flat: dict[str, dict[str, np.ndarray]]) -> list[Stretch]:
    """Stretches [starts[j], stops[j]) of `seqs`, the j-th with the next n[j] modules of `here` and the
    edges edges[at[j]:at[j + 1]] (sorted, once each), their counters views of the flat per-cell arrays
    `flat[d][field]` (analysis.model.batch's order) -- build_stretches' last step, and the stretches' copy's."""
    kinds = list(map(kind.__getitem__, here))
    fields = list(Counters.__dataclass_fields__)
    t = stops - starts
    hi = np.cumsum(n)
    offsets = np.concatenate([[0], np.cumsum(n * t)])
    stretches = []
    for j, (a, b, i0, i1, o0, o1) in enumerate(zip(starts.tolist(), stops.tolist(), (hi - n).tolist(), hi.tolist(),
                                                 offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)):
        st = Stretch(here[i0:i1], kinds[i0:i1], [], seqs[a:b])
        st.edges = edges[at[j]:at[j + 1]]   # in Stretch's order already
        shape = (i1 - i0, b - a)
        for d in DIRS:
            st.counters[d] = Counters(*(flat[d][f][o0:o1].reshape(shape) for f in fields))
        st.flat = (flat, o0, o1)
        stretches.append(st)
    return stretches


def attached_modules(stretches: list[Stretch]) -> set:
    """Modules with a parent edge in some stretch. "Some stretch" rather than "some row of the edges
    table": an edge counts where the diagnosis sees it, with both ends present, so a module whose
    upper layer never shows up stays a root."""
    return {st.modules[c] for st in stretches for _, c in st.edges}


def remote_addresses(mods: list[tuple]) -> dict[int, str | None]:
    """Per module (rows as `RunStretches.modules`), a TCP connection's remote address (attrs "dst"), else None."""
    remote = {}
    for i, k, _name, _key, attrs, *_ in mods:
        dst = repair.as_dict(attrs).get("dst") if k == "tcp" else None
        remote[i] = dst if isinstance(dst, str) and dst else None
    return remote


def mark_detached(stretches: list[Stretch], attached: set, remote: dict) -> None:
    """Set `Stretch.detached` (see Stretch: a module attached somewhere, in `attached`, but without a
    parent edge in this stretch) and `Stretch.remote`."""
    known, child = attached.__contains__, itemgetter(1)
    for st in stretches:   # maps rather than comprehensions: ~100 modules a stretch, hundreds of stretches
        st.detached = np.fromiter(map(known, st.modules), dtype=bool, count=len(st.modules))
        st.detached[np.fromiter(map(child, st.edges), dtype=np.intp, count=len(st.edges))] = False
        st.remote = list(map(remote.get, st.modules))
