"""Live diagnosis: the offline analysis, applied to a run while it is recorded (docs/live.md).

`LiveEngine(run).refresh()` reads what the collector wrote since the last refresh (rundir.live_reader,
read-only), turns it into counter deltas with the offline rules and diagnoses a window of recent
snapshots with the offline code (analysis.model.stretches.build_stretches, analysis.diagnose), and returns
a `LiveView`: the modules at the newest *settled* snapshot with their state, how long each has been
STALLED, their recent rates, and the faults in force.

Where the offline diagnosis of snapshot t depends on later snapshots, and what the engine does:
- Counter deltas (analysis.model.deltas.series_deltas) are causal: a delta is decided by the rows up to
  its own. Thesis 3.4's retroactive discard (a good value followed by two lower ones) only changes
  `invalid`, which no rule reads. The engine carries each series' state across refreshes as an
  *anchor*: its last row that was not lower than the row before it (after that row the series is
  in step: the next delta is a plain difference), with its wait_ms as the jitter absorption left it.
  Each refresh feeds series_deltas the anchor, any rows after it, and the new rows; the result for
  the new rows is the offline one (a proof sketch in docs/live.md; tests check it).
- Detached modules (analysis.model.stretches.Stretch) look ahead without bound: a module with no parent yet
  is detached offline if it gets one later in the run, a root with assumed work if it never does.
  The engine knows the parents seen so far, so it diagnoses snapshot t once `lag` later snapshots
  are in (LAG_S, 1 s): the result then equals the offline one unless a module present at t without a
  parent gets its first parent more than `lag` snapshots after t. When the run has ended the future is
  known and every snapshot is settled.
- `confirm=N` looks back N-1 snapshots: the window keeps them.
- `probe=on` (analysis.model.probes): a snapshot's probe evidence needs the probes done and the snapshots
  taken up to `probe_ahead` seconds after it, and the start of its connection's silence. The engine
  settles t only once it has read a snapshot at least `probe_ahead` after t (the collector writes a
  probe's row with the first snapshot after its outcome), and carries the start of every silence
  going on at a window's first snapshot into the next window (`probe_carry`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import studies
from analysis.diagnose import as_variants, diagnose_stretches
from analysis.load import workload_from_cmdline
from analysis.model import deltas, probes
from analysis.model import stretches as sx
from analysis.model.engine_metrics import EngineMetrics, read_engine_metrics
from analysis.model.hosts import module_hosts, split_by_host
from analysis.model.stretches import DIRS, KINDS, STARTS_AT_ZERO
from analysis.model.tcpstate import attach as attach_tcpstate
from analysis.variants import LABELS
from rundir import facts
from rundir.db import TCP_STATE_COLUMNS
from rundir.errors import UserError
from rundir.layout import run_db
from rundir.live_reader import News, RunReader
from rundir.manifest import Manifest, Monitor, read_manifest_quietly
from rundir.repair import as_dict
from rundir.targets import choose_target, fault_target_key

LAG_S = 1.0     # a snapshot is diagnosed once this much later data is in (detached modules)
RATE_S = 1.0    # rates over the last second of settled snapshots
_CUM = [0, 1, 3]   # total_msgs, wait_ms, errors: the cumulative counters (stretches._CUM)


@dataclass
class LiveFault:
    id: int
    kind: str
    target: str            # the target's description
    at_node: str
    start: float | None
    end: float | None
    planned_duration: float | None
    module: int | None     # the module it targets, where the collector sees it

    def left(self, now: float) -> float | None:
        """Seconds until it is due to end."""
        if self.start is None or self.planned_duration is None:
            return None
        return self.start + self.planned_duration - now


@dataclass
class Row:
    """One module and direction at the view's snapshot."""

    module: int
    kind: str
    name: str
    dir: str
    state: str               # HEALTHY | DONTCARE | BLOCKED | STALLED (label variants); STALLED or '-' (cf)
    positive: bool
    stalled_s: float | None  # time since the module was last seen not STALLED (positive) in this direction
    msgs_s: float            # total_msgs per second over the last RATE_S
    wait_ms_s: float | None  # wait_ms per second (None: no wait counter)
    queued: float | None     # the queue now (None: no queue counter)
    by_design: bool = False  # an app or socket of a one-way workload in the direction it never uses


@dataclass
class LiveView:
    path: Path
    run_id: str
    experiment: str
    status: str                   # the manifest's: running, complete, interrupted, failed
    variant: str
    t0: float | None
    duration: float | None
    interval: float
    snapshots: int
    newest: float | None          # time of the newest snapshot read
    seq: int | None               # the settled snapshot shown (None: none yet)
    mono: float | None
    lag: int
    final: bool                   # the recording has ended and every snapshot is settled
    rows: list[Row] = field(default_factory=list)
    faults: list[LiveFault] = field(default_factory=list)     # in force at `now`
    now: float | None = None
    faults_begun: int = 0
    faults_planned: int | None = None
    cost_s: float = 0.0           # what the refresh that made this view took

    @property
    def stalled(self) -> list[Row]:
        """The positive rows, but those stalled by design (Row.by_design: the ground truth counts them
        as positives too, thesis 3.5.2, but they say nothing about a fault)."""
        return [r for r in self.rows if r.positive and not r.by_design]

    @property
    def by_design(self) -> list[Row]:
        return [r for r in self.rows if r.positive and r.by_design]


class LiveEngine:
    """Online diagnosis of one run with one variant; see the module docstring."""

    def __init__(self, run: str | Path, variant: str | None = None, lag_s: float = LAG_S, at_seq: int | None = None,
                 history: bool = False):
        path = Path(run)
        self.path = path.parent if path.is_file() else path
        db = run_db(path)
        if not db.is_file():
            raise UserError(f"{path}: no run.db here (expected a run directory)")
        # none named: the run's study kind's (streamsdiagnoser for a streams run, analysis.studies)
        (self.variant,) = as_variants([variant or studies.of_runs([self.path]).variant])
        params = self.variant.params
        self.probe = bool(params.get("probe"))
        self.ahead = float(params.get("probe_ahead", probes.AHEAD_S))
        # silences going on at the window's start (analysis.model.probes.ongoing)
        self.probe_carry: dict = {}
        # probe=on reads tcp_info too where recorded (backoff and the last data sent tell a connection
        # recovering from a past outage: analysis.model.probes), as the offline analysis does
        self.reader = RunReader(db, tcp_state=bool(params.get("tcpstate")) or self.probe, probes=self.probe)
        self.bursts = probes.burst_table(None)   # the probes read so far, per burst (probes.burst_table)
        self.endpoints: dict[int, str | None] = {}   # TCP module -> its remote 'ADDR:PORT' (probes)
        self.manifest = read_manifest_quietly(self.path)   # None: none yet, or unreadable
        interval = self.manifest.snapshot_interval if self.manifest is not None else None
        self.interval = float(interval or 0.1)
        self.lag = max(0, math.ceil(lag_s / self.interval - 1e-9))
        self.rate_k = max(1, round(RATE_S / self.interval))
        self.context = max(int(params.get("confirm", 1)), int(params.get("confirm_tcp", 0) or 0), 1) - 1
        self.at_seq = at_seq
        self.seqs = np.zeros(0, np.int64)
        self.mono = np.zeros(0)
        self.kind: dict[int, str] = {}
        self.modules: dict[int, tuple] = {}    # id -> (id, kind, name, key, attrs, born, died)
        self.edges: dict[int, list] = {}       # rowid -> [parent, child, born, died]
        self.remote: dict[int, str | None] = {}  # module -> remote address (Stretch.remote)
        self.hosts: dict[int, str | None] = {}   # module -> its monitored host (analysis.model.hosts)
        # Per direction, every live series (module) as arrays: its newest raw row (last_vals, last_has),
        # its anchor (apos, avals, ahas); and the rows after an anchor (pending), usually none.
        self.state = {d: {"mod": np.zeros(0, np.int64), "last_vals": np.zeros((0, 4)), "last_has": np.zeros((0, 4), bool),
                          "apos": np.zeros(0, np.int64), "avals": np.zeros((0, 4)), "ahas": np.zeros((0, 4), bool)}
                      for d in DIRS}
        self.pending = {d: {"mod": np.zeros(0, np.int64), "pos": np.zeros(0, np.int64), "vals": np.zeros((0, 4)),
                            "has": np.zeros((0, 4), bool)} for d in DIRS}
        self.died = np.zeros(0)                  # per module id: died (NaN: alive or unknown id)
        self.zero = np.zeros(0, dtype=bool)      # per module id: its counters start at zero
        self.buf: dict[str, list[dict]] = {d: [] for d in DIRS}   # deltas per position, see _deltas
        self.presence: list[np.ndarray] = []   # (module, pos) pairs of every dense row
        self.tcp_buf = np.zeros((0, 2 + len(TCP_STATE_COLUMNS)))      # (pos, module, *state) rows
        self.tcp_last: dict[int, np.ndarray] = {}                  # module -> its last row before the buffer
        self.attached: set[int] = set()
        self.settled = -1
        self.streak: dict[tuple[int, str], int] = {}   # (module, dir) -> position its STALLED streak began
        self.current: list[tuple[int, str, float, bool]] = []   # (module, dir, result, positive) at `settled`
        self.faults: list[tuple] = []
        self.clients: list[tuple] = []        # (pid, workload, cmdline) of the client processes
        self.fault_cache: dict[int, LiveFault] = {}
        self.history: dict[int, dict] | None = {} if history else None
        self.last_cost = 0.0

    def close(self) -> None:
        self.reader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ refresh

    def refresh(self, upto: int | None = None) -> LiveView:
        """Read what is new (snapshots <= upto, if given) and diagnose it; the view at the newest
        settled snapshot."""
        began = time.perf_counter()
        if self.manifest is None or self.manifest.status == "running":
            self.manifest = read_manifest_quietly(self.path) or self.manifest
        status = self.manifest.status if self.manifest is not None else "unknown"   # a bare run.db
        if self.at_seq is not None:
            upto = self.at_seq + self.lag if upto is None else min(upto, self.at_seq + self.lag)
        while True:
            news = self.reader.read(upto)
            self._ingest(news)
            ended = status not in ("running", "unknown") and not news.more and self.reader.seq >= news.last_seq
            final = ended and (upto is None or upto >= news.last_seq)
            self._settle(final)
            if news.more:
                continue
            if self._short_of_at(upto, news):   # --at with probe=on: read on until it settles
                upto += 1
                continue
            break
        self.faults = news.faults
        self.clients = news.clients
        self.last_cost = time.perf_counter() - began
        return self.view(status, final)

    def _short_of_at(self, upto: int | None, news: News) -> bool:
        if not self.probe or self.at_seq is None or upto is None or upto < self.at_seq + self.lag:
            return False
        at = int(np.searchsorted(self.seqs, self.at_seq, side="right")) - 1
        return upto < news.last_seq and self.settled < at

    def _ingest(self, news: News) -> None:
        for row in news.modules:
            self.modules[row[0]] = row
            self.kind[row[0]] = row[1]
        self.remote.update(sx.remote_addresses(news.modules))
        self.hosts.update(module_hosts(news.modules))
        if self.probe:
            self.endpoints.update(probes.module_remotes(news.modules))
            if news.probes is not None and len(news.probes):
                self.bursts = probes.merge_tables(self.bursts, probes.burst_table(news.probes))
        for mid, died in news.deaths.items():
            self.modules[mid] = (*self.modules[mid][:6], died)
        size = max(self.kind, default=0) + 1
        if size > len(self.died):
            self.died = np.concatenate([self.died, np.full(size - len(self.died), np.nan)])
            self.zero = np.concatenate([self.zero, np.zeros(size - len(self.zero), dtype=bool)])
        for row in news.modules:
            self.zero[row[0]] = row[1] in STARTS_AT_ZERO
        for mid, row in [(r[0], r) for r in news.modules] + [(m, self.modules[m]) for m in news.deaths]:
            self.died[mid] = np.nan if row[6] is None else row[6]
        for rowid, parent, child, born, died in news.edges:
            self.edges[rowid] = [parent, child, born, died]
        for rowid, died in news.edge_deaths.items():
            if rowid in self.edges:
                self.edges[rowid][3] = died
        if len(news.seqs) == 0:
            return
        p0 = len(self.seqs)
        floor = self.mono[-1] if p0 else -np.inf   # times made non-decreasing (rundir.read.read_snapshots)
        self.seqs = np.concatenate([self.seqs, news.seqs])
        self.mono = np.concatenate([self.mono, np.maximum.accumulate(np.maximum(news.mono, floor))])
        self._deltas(news.rows, p0)
        if news.tcp_rows is not None and len(news.tcp_rows):
            r = news.tcp_rows
            pos = np.searchsorted(self.seqs, r[:, 0])
            ok = (pos < len(self.seqs)) & (self.seqs[np.minimum(pos, len(self.seqs) - 1)] == r[:, 0])
            self.tcp_buf = np.concatenate([self.tcp_buf, np.column_stack([pos[ok], r[ok, 1:]])])

    def _deltas(self, rows: dict[str, np.ndarray], p0: int) -> None:
        """Dense rows and deltas of the new positions p0.. (see the module docstring)."""
        n = len(self.seqs)
        pos = p0 + np.searchsorted(self.seqs[p0:], rows["seq"])
        ok = (pos < n) & (rows["module"] < len(self.died))
        ok[ok] = (self.seqs[pos[ok]] == rows["seq"][ok]) & np.isin(rows["module"][ok], list(self.kind))
        rows = {k: v[ok] for k, v in rows.items()}
        pos = pos[ok]
        base = max(p0 - 1, 0)     # carried rows sit at p0 - 1: the values each live series holds there
        if p0 > 0:
            carry = [(st["mod"], np.full(len(st["mod"]), d == "out"), st["last_vals"], st["last_has"])
                     for d, st in self.state.items()]
            mod, out, vals, has = (np.concatenate(x) for x in zip(*carry, strict=True))
            rows = {"seq": np.concatenate([np.full(len(mod), self.seqs[base]), rows["seq"]]),
                    "module": np.concatenate([mod, rows["module"]]), "out": np.concatenate([out, rows["out"]]),
                    "vals": np.concatenate([vals, rows["vals"]]), "has": np.concatenate([has, rows["has"]])}
            pos = np.concatenate([np.full(len(mod), base), pos])
        # Each module's end: the first position after its life (those alive: after the newest snapshot).
        end = np.where(np.isnan(self.died), n, np.searchsorted(self.mono, self.died, side="left"))
        dense, dpos = sx.dense_counter_rows(rows, pos - base, (np.arange(len(end)), np.maximum(end - base, 0)),
                                            self.seqs[base:])
        dpos = dpos + base
        new = dpos >= p0
        dense = {k: v[new] for k, v in dense.items()}
        dpos = dpos[new]
        self.presence.append(np.column_stack([dense["module"], dpos]))
        for d in DIRS:
            sel = dense["out"] == (d == "out")
            self._series_deltas(d, dense["module"][sel], dpos[sel], dense["vals"][sel], dense["has"][sel], end < n)

    def _series_deltas(self, d: str, mod, pos, vals, has, dead) -> None:
        """series_deltas over anchor + pending + new rows of every series of one direction; then each
        series' new anchor: its last row not lower than the row before it."""
        st, pe = self.state[d], self.pending[d]
        parts = [(st["mod"], st["apos"], st["avals"], st["ahas"], np.zeros(len(st["mod"]), np.int8)),
                 (pe["mod"], pe["pos"], pe["vals"], pe["has"], np.ones(len(pe["mod"]), np.int8)),
                 (mod, pos, vals, has, np.full(len(mod), 2, np.int8))]
        mod, pos, vals, has, mark = (np.concatenate(x) for x in zip(*parts, strict=True))
        order = np.lexsort((pos, mod))
        mod, pos, vals, has, mark = mod[order], pos[order], vals[order], has[order], mark[order]
        r = len(mod)
        start = np.ones(r, dtype=bool)
        start[1:] = mod[1:] != mod[:-1]
        idx = np.arange(r)
        head = np.maximum.accumulate(np.where(start, idx, 0))     # each row's series' first row
        # An anchor's own delta is thrown away: never invalid for being a series' first row.
        kinds_zero = (mark[head] == 0) | self.zero[mod]
        delta, invalid = deltas.series_deltas(mod, vals, has, kinds_zero, (pos == 0) & (mark == 2))
        fresh = mark == 2
        self.buf[d].append({"pos": pos[fresh], "mod": mod[fresh], "delta": delta[fresh], "queued": vals[fresh, 2],
                            "has": has[fresh], "invalid": invalid[fresh]})
        adj = deltas.absorb_wait_jitter(vals, has, start)
        ok = has[:, _CUM].copy()
        ok[1:] &= has[:-1, _CUM]
        lower = np.zeros(r, dtype=bool)
        lower[1:] = ((adj[1:, _CUM] < adj[:-1, _CUM]) & ok[1:]).any(1)
        lower &= ~start
        good = np.maximum.accumulate(np.where(lower, 0, idx))    # a series' first row is never lower
        heads = np.flatnonzero(start)
        # each series' last row (no series at all: a direction without counters, a streams run's `in`)
        last = np.append(heads[1:], r) - 1 if len(heads) else heads
        j = good[last]
        keep = ~dead[mod[heads]]       # a series whose module died at a snapshot read gets no more rows
        self.state[d] = {"mod": mod[heads][keep], "last_vals": vals[last][keep], "last_has": has[last][keep],
                         "apos": pos[j][keep], "avals": adj[j][keep], "ahas": has[j][keep]}
        group = np.cumsum(start) - 1
        after = (idx > j[group]) & keep[group]
        self.pending[d] = {"mod": mod[after], "pos": pos[after], "vals": vals[after], "has": has[after]}

    # ------------------------------------------------------------------ diagnosis of a window

    def _settle(self, final: bool) -> None:
        n = len(self.seqs)
        to = n - 1 if final else n - 1 - self.lag
        if self.probe and not final and n:   # t waits for a snapshot probe_ahead after it
            to = min(to, int(np.searchsorted(self.mono + self.ahead, self.mono[-1], side="right")) - 1)
        if self.at_seq is not None:
            to = min(to, int(np.searchsorted(self.seqs, self.at_seq, side="right")) - 1)
        if to <= self.settled:
            return
        w0 = max(0, self.settled + 1 - self.context)
        stretches = self._window(w0, n)
        self.attached |= sx.attached_modules(stretches)
        sx.mark_detached(stretches, self.attached, self.remote)
        if self.reader.tcp_state:
            self._tcpstate(stretches, w0, n)
        if self.probe:
            probes.attach(stretches, self.bursts, self.seqs[w0:n], self.mono[w0:n], self.endpoints,
                          self.mono[w0 - 1] if w0 else -np.inf, self.probe_carry)
            nxt = max(0, to + 1 - self.context)    # the next window's first snapshot
            if nxt > w0:
                self.probe_carry = probes.ongoing(stretches, int(self.seqs[nxt - 1]))
        stretches = split_by_host(stretches, self.hosts)   # several monitored hosts: one stretch each
        cut = []
        for st in stretches:   # only what settles now (and the context before it) is diagnosed
            if st.seqs[0] <= self.seqs[to]:
                cut.append(st if st.seqs[-1] <= self.seqs[to] else st.take(np.flatnonzero(st.seqs <= self.seqs[to])))
        diags = diagnose_stretches(cut, [self.variant], engine_metrics=self._engine_metrics())
        self._record(diags, to)
        self.settled = to
        self._trim(max(0, min(to + 1 - self.context, to + 1 - self.rate_k)))

    def _engine_metrics(self) -> EngineMetrics | None:
        """A streams run's engine metrics as recorded so far (the rows of snapshots up to the settled
        one are in: the collector writes a snapshot's stream_tasks with it), as the offline analysis
        reads them; None for a run without stream connections."""
        if not any(k == "sconn" for k in self.kind.values()):
            return None
        return read_engine_metrics(self.reader.conn, self.kind.values())

    def _window(self, w0: int, n: int) -> list:
        per_dir = {}
        for d in DIRS:
            parts = [c for c in self.buf[d] if len(c["pos"])]
            if not parts:
                per_dir[d] = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 3)), np.zeros(0),
                              np.zeros((0, 4), bool), np.zeros(0, bool))
                continue
            c = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            keep = c["pos"] >= w0
            c = {k: v[keep] for k, v in c.items()}
            o = np.argsort(c["pos"], kind="stable")
            per_dir[d] = (c["pos"][o] - w0, c["mod"][o], c["delta"][o], c["queued"][o], c["has"][o], c["invalid"][o])
        pres = np.concatenate(self.presence) if self.presence else np.zeros((0, 2), np.int64)
        pres = pres[pres[:, 1] >= w0]
        edges = [tuple(e) for e in self.edges.values()]
        return sx.build_stretches(self.seqs[w0:n], self.mono[w0:n], self.kind, per_dir, pres[:, 0], pres[:, 1] - w0,
                               edges)

    def _tcpstate(self, stretches: list, w0: int, n: int) -> None:
        """Stretch.tcpstate: each connection's last tcp_info row carried forward (analysis.model.tcpstate)."""
        buf = self.tcp_buf
        before = np.concatenate([np.array(list(self.tcp_last.values())).reshape(-1, buf.shape[1]), buf[buf[:, 0] < w0]])
        carry = {int(r[1]): r for r in before}      # the latest row of each module before the window
        carry = np.array([np.concatenate([[w0], r[1:]]) for r in carry.values()]).reshape(-1, buf.shape[1])
        rows = np.concatenate([carry, buf[buf[:, 0] >= w0]])   # carried first: a row of its own wins
        frame = pd.DataFrame(rows[:, 1:], columns=["module", *TCP_STATE_COLUMNS])
        frame.insert(0, "seq", self.seqs[rows[:, 0].astype(np.int64)])
        attach_tcpstate(stretches, frame, self.seqs[w0:n], self.mono[w0:n])

    def _record(self, diags: list, to: int) -> None:
        """Streaks and history from the newly settled snapshots (settled + 1 .. to); the results at `to`."""
        label = self.variant.kind == "label"
        name = self.variant.name
        first, last = self.seqs[self.settled + 1], self.seqs[to]
        hits, cells = [], []     # (seq, module, dir) of positives; every cell when keeping history
        self.current = []
        for sd in diags:
            st = sd.stretch
            cols = np.flatnonzero(st.seqs >= first)
            if len(cols) == 0:
                continue
            mods = np.asarray(st.modules)
            for d in DIRS:
                res, pos = (a[:, cols] for a in sd.results[name][d])
                i, c = np.nonzero(pos)
                hits += zip(st.seqs[cols][c].tolist(), mods[i].tolist(), [d] * len(i), strict=True)
                if self.history is not None:
                    cells.append((np.repeat(mods, len(cols)), np.tile(st.seqs[cols], len(mods)), d, res.ravel(),
                                  pos.ravel()))
                if st.seqs[cols[-1]] == last:
                    self.current += zip(mods.tolist(), [d] * len(mods), res[:, -1].tolist(), pos[:, -1].tolist(),
                                        strict=True)
        by_seq: dict[int, set] = {}
        for seq, m, d in hits:
            by_seq.setdefault(seq, set()).add((m, d))
        for p in range(self.settled + 1, to + 1):
            stalled = by_seq.get(int(self.seqs[p]), set())
            for key in [k for k in self.streak if k not in stalled]:
                del self.streak[key]
            for key in stalled:
                self.streak.setdefault(key, p)
        if self.history is not None:
            for mods, seqs, d, res, pos in cells:
                for m, seq, r, positive in zip(mods.tolist(), seqs.tolist(), res.tolist(), pos.tolist(), strict=True):
                    self.history.setdefault(seq, {})[(m, d)] = (LABELS[int(r)] if label else r, positive)

    def _trim(self, keep: int) -> None:
        """Forget what no later window or rate needs (positions before `keep`)."""
        for d in DIRS:
            chunks = [c for c in self.buf[d] if len(c["pos"])]
            if chunks:
                c = {k: np.concatenate([p[k] for p in chunks]) for k in chunks[0]}
                sel = c["pos"] >= keep
                self.buf[d] = [{k: v[sel] for k, v in c.items()}]
        if self.presence:
            pres = np.concatenate(self.presence)
            self.presence = [pres[pres[:, 1] >= keep]]
        old = self.tcp_buf[:, 0] < keep
        for r in self.tcp_buf[old]:
            self.tcp_last[int(r[1])] = r
        self.tcp_buf = self.tcp_buf[~old]
        t = self.mono[keep] if keep < len(self.mono) else np.inf
        self.edges = {k: e for k, e in self.edges.items() if e[3] is None or e[3] > t}

    # ------------------------------------------------------------------ the view

    def view(self, status: str = "running", final: bool = False) -> LiveView:
        m = self.manifest or Manifest(format_version=0, status=status)
        n = len(self.seqs)
        to = self.settled if self.settled >= 0 else None
        now = float(self.mono[-1]) if n else None
        if self.at_seq is not None and to is not None:
            now = float(self.mono[to])
        planned = m.planned_faults if "planned_faults" in m.model_fields_set else None
        v = LiveView(self.path, str(m.run_id or self.path.name), str(m.experiment or m.spec.name or "?"),
                     status, self.variant.name, facts.manifest_t0(m), m.spec.duration, self.interval, n, now,
                     None if to is None else int(self.seqs[to]), None if to is None else float(self.mono[to]),
                     self.lag, final, now=now, faults_planned=len(planned) if planned is not None else None,
                     cost_s=self.last_cost)
        if to is not None:
            v.rows = self._rows(to)
        faults = [self._fault(f) for f in self.faults]
        if now is not None:
            v.faults = [f for f in faults if f.start is not None and f.start <= now and (f.end is None or f.end > now)]
            v.faults_begun = sum(1 for f in faults if f.start is not None and f.start <= now)
        return v

    def _rates(self, to: int) -> dict[tuple[int, str], tuple[float, float | None, float | None]]:
        """Per module and direction at `to`: messages and wait per second over the last RATE_S, the queue."""
        lo = max(0, to - self.rate_k)
        span = float(self.mono[to] - self.mono[lo]) if to > lo else self.interval
        out = {}
        for d in DIRS:
            chunks = [c for c in self.buf[d] if len(c["pos"])]
            if not chunks:
                continue
            c = {k: np.concatenate([p[k] for p in chunks]) for k in chunks[0]}
            sel = (c["pos"] > lo) & (c["pos"] <= to) & ~c["invalid"]
            size = int(c["mod"].max()) + 1
            msgs = np.bincount(c["mod"][sel], c["delta"][sel, 0], size) / span
            wait = np.bincount(c["mod"][sel], c["delta"][sel, 1], size) / span
            now = c["pos"] == to
            for m, has, queued in zip(c["mod"][now].tolist(), c["has"][now].tolist(), c["queued"][now].tolist(),
                                      strict=True):
                out[(m, d)] = (float(msgs[m]), float(wait[m]) if has[1] else None, queued if has[2] else None)
        return out

    def _idle_directions(self) -> dict[int, str]:
        """Module -> the direction its one-way workload never uses ('out' for a download, 'in' for an
        upload), for apps and sockets: the workload of the process (the manifest's spec), else the
        one its command line says (analysis.load.workload_from_cmdline)."""
        workloads = self.manifest.spec.workloads if self.manifest is not None else []
        by_pid: dict[int, str | None] = {}
        for pid, wl, cmdline in self.clients:
            direction = workloads[wl].direction if isinstance(wl, int) and 0 <= wl < len(workloads) else None
            by_pid[pid] = direction or workload_from_cmdline(str(cmdline or ""))[1]
        out = {}
        for m, row in self.modules.items():
            if row[1] in ("app", "socket"):
                pid = as_dict(row[4]).get("pid")
                idle = {"download": "out", "upload": "in"}.get(by_pid.get(pid) or "")
                if idle:
                    out[m] = idle
        return out

    def _rows(self, to: int) -> list[Row]:
        rates = self._rates(to)
        idle = self._idle_directions()
        label = self.variant.kind == "label"
        rows = []
        for m, d, r, positive in self.current:
            since = self.streak.get((m, d))
            stalled = None
            if positive and since is not None:
                stalled = float(self.mono[to] - self.mono[since - 1]) if since > 0 else (to + 1) * self.interval
            msgs, wait, queued = rates.get((m, d), (0.0, None, None))
            mod = self.modules.get(m, (m, "?", str(m)))
            if mod[1] == "sconn" and d == "in":   # a stream connection has one direction (docs/streams.md)
                continue
            state = LABELS[int(r)] if label else ("STALLED" if positive else "-")
            rows.append(Row(m, mod[1], mod[2], d, state, positive, stalled, msgs, wait, queued,
                            idle.get(m) == d))
        order = {s: i for i, s in enumerate(("STALLED", "BLOCKED", "HEALTHY", "DONTCARE", "-"))}
        kinds = {k: i for i, k in enumerate(KINDS)}
        rows.sort(key=lambda x: (not x.positive, -(x.stalled_s or 0.0), order.get(x.state, 9),
                                 kinds.get(x.kind, 9), x.name, x.dir))
        return rows

    def _fault(self, row: tuple) -> LiveFault:
        fid, kind, at_node, target, planned_duration, start, end = row
        known = self.fault_cache.get(fid)
        if known is not None and known.module is not None and known.start == start:   # resolved once
            known.end = end
            return known
        t = as_dict(target)
        module = None
        mon = self.manifest.monitor if self.manifest is not None else Monitor()
        key = fault_target_key(str(kind), t, mon.host, mon.interface)
        if isinstance(key, str):
            module = choose_target([(i, r[3], r[5]) for i, r in self.modules.items()], key, start)
        f = self.fault_cache[fid] = LiveFault(int(fid), str(kind), str(t.get("description") or key or _setting(t)), str(at_node),
                                          start, end, planned_duration, module)
        return f


def _setting(target: dict) -> str:
    """A streams fault's target as words (docs/streams.md: operator and rate, or a dropper on), else '?'."""
    op = target.get("operator")
    if not op:
        return "?"
    if "rate" in target:
        rate = target["rate"]
        return f"rate {'full' if rate is None else f'{rate:g}'} tuples/s"
    return "dropping" if target.get("on") else "forwarding"
