"""Ground truth: which module, direction and snapshot should be diagnosed positive (STALLED).

A labelling policy turns a run (analysis.load.RunData) into one label per row of its counters:
`actual` (the correct diagnosis is positive) and `exclude` (not scored at all), plus `cause`, why a
row is positive or excluded. Policies are named like rule variants, `name:key=value,...`; see
`POLICIES` and `nestlab policies`. Any object with a `name` and a `label(data) -> DataFrame` method
can stand in for one (docs/analysis.md).

The default, `impact`, is the seeds' criteria (thesis 3.5.2, NeST paper 5.2-5.3):

1. Impacted by a fault that targets it: `tcp_drop` -> that TCP module, `ip_drop` -> the monitored
   interface's ip+eth module, `app_pause` -> the application and its sockets. From the fault's
   start, once the module's message counter and wait counter (where it has one) are both zero in a
   direction, the module is impacted in that direction until they rise again: an *impact period*.
   It may outlast the fault (retransmission back-off); a fault may cause several, when the counters
   rise and fall to zero again while it is still active. Only while the fault is active can a new
   period start. The counters must *become* zero: the direction must have carried traffic within
   `lookback` seconds before the fault (or since its start), so a direction that is idle anyway
   (the outbound data of a download connection) is not counted as impacted. lookback=0 drops
   this requirement. With `direction=data` (the default) that traffic must include data: a
   direction that carried only a request (wget's GET on a download connection) or only ACKs (the
   interface's outbound direction under downloads) is not the flow's direction and is not
   impacted. The thesis says so of the request (3.5.2, note 6: "This ignores the initial request
   traffic"), and its ip+eth TPR of 100% in both directions (Table 3.3) is only reachable if ACK-only
   directions were not positives, since no rule can blame a direction with no work to do.
   `direction=any` counts messages of any size (the criterion before 2026-11-23).
2. One-way workloads: the applications and sockets of an upload-only workload are positive inbound,
   those of a download-only workload (wget, iperf -R) outbound, at every snapshot. Sockets of a
   two-way iperf (-d) are one-way each: remote port 5001 upload, local port 5001 download.
3. Everything else is negative. The seeds call these criteria conservative: modules that a fault
   silences without targeting it (the TCP connections under a dropped interface, a single flow's
   interface under a dropped connection) are negatives, and blaming them counts as a false
   positive. `collateral=exclude` leaves such impact periods out of the scores instead, and
   `collateral=positive` counts them as positives (the module was stalled, if not at fault).
   A collateral module is an ancestor or descendant of a target in the graph during the fault.

`aftereffect=exclude` scores apart what TCP's back-off leaves after a fault ended (issue 35): the
snapshots of an impact period (a target's, or a neighbour's as `collateral` finds it) that begin at
or after the fault's end are left out (cause `aftereffect`), the period taken to go on until new data
moves (as `retrans=continues` takes it): a retransmission that went unanswered, or that a second
fault of the same connection dropped, leaves the connection silent by the first fault's doing. By the seeds those are a target's
positives and a neighbour's negatives; the module is silent only because its retransmission timer,
backed off during the outage, has not fired yet (docs/diagnosis.md, "After-effects").

Rows whose counters were discarded as invalid (thesis 3.4: a counter that went backwards, a
module's first snapshot as a baseline, a missing row) are always excluded. So are, by default
(`after_end=exclude`), snapshots that end after the run's end (the `run_end` event), when the runner
is stopping the workloads: an iperf that stops writing and reads its final report there is the
harness's doing, not a fault's. `after_end=keep` scores them.

Faults are scheduled apart by default (docs/schedules.md), so that no fault's collateral covers
another's target. Where a spec allows overlap, a target's impact period may fall inside another
fault's collateral (a tcp_drop's connection while an ip_drop silences the whole interface): the
right answer there is ambiguous, and by default (`overlap=exclude`) those rows are left out of the
scores and counted (cause `overlap`; the accuracy table's footnote gives the number).
`overlap=keep` scores them as the fault's positives, as the seeds did.

`window` is a simpler, less conservative policy: targets are positive in every snapshot that
overlaps the fault window, extended by `tail` seconds, whatever their counters say.

Streams runs (stream connections, thesis chapter 4) are labelled by every policy as thesis 4.6.3 says
(analysis.labels_streams): positive exactly for the connections into a throttle at rate 0 while it is
active, a snapshot interval that straddles such a fault's start or end left out (cause `straddle`),
droppers never positive.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import pandas as pd

from analysis import studies
from analysis.fault_reach import active_faults, collateral_modules
from analysis.model.label_input import ArrayRows, StretchRows, label_rows
from analysis.plugins import Registry, check_contract, check_name
from analysis.variants.base import Param, on_off, parse_named

Rows = ArrayRows | StretchRows   # what a policy reads (analysis.model.label_input)
CAUSES = ("", "oneway", "fault", "collateral", "invalid", "after_end", "overlap", "straddle", "aftereffect")


class LabelPolicy(Protocol):
    name: str

    def label(self, data) -> pd.DataFrame:
        """Aligned with data.counters (same index): bool `actual`, bool `exclude`, str `cause`,
        and Int64 `fault` (the fault id behind a fault or collateral positive, else <NA>)."""
        ...


# ----------------------------------------------------------------------------- parameters


def _seconds(text: str) -> float:
    v = float(text.rstrip("s"))
    if not v >= 0 or math.isinf(v):
        raise ValueError("expected seconds >= 0")
    return v


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
        return text
    return parse


# ----------------------------------------------------------------------------- shared pieces


def impact_mask(t_start: np.ndarray, t_end: np.ndarray, idle: np.ndarray, invalid: np.ndarray,
                f0: float, f1: float, lookback: float) -> np.ndarray:
    """Impact periods of one module/direction series (sorted by time) for a fault active [f0, f1].

    A snapshot covers (t_start, t_end]. A period starts at an idle snapshot that ends after f0 and
    begins before f1, provided the series was active within `lookback` s before f0 or since (0: no
    such requirement); it lasts until the first active snapshot. Invalid snapshots neither start nor
    end a period (they are excluded from scoring anyway).
    """
    n = len(t_end)
    out = np.zeros(n, dtype=bool)
    i0 = int(np.searchsorted(t_end, f0, side="right"))
    if i0 >= n:
        return out
    if lookback > 0:
        pre = slice(int(np.searchsorted(t_end, f0 - lookback, side="left")), i0)
        seen = bool(np.any(~idle[pre] & ~invalid[pre]))
    else:
        seen = True
    in_period = False
    for i in range(i0, n):
        starts_after_fault = not (t_start[i] < f1) if t_start[i] == t_start[i] else False
        if invalid[i]:
            out[i] = in_period
            if not in_period and starts_after_fault:
                break
            continue
        if idle[i]:
            if in_period:
                out[i] = True
            elif seen and not starts_after_fault:
                in_period = out[i] = True
            elif starts_after_fault:
                break
        else:
            in_period = False
            seen = True
            if starts_after_fault:
                break
    return out


# direction=data: a direction carried data when, over the lookback and the fault, it moved at least
# MIN_DATA_BYTES beyond PACKET_OVERHEAD_BYTES per packet (ip+eth counts whole frames; TCP, sockets and
# apps count payload). A GET request (~150 B) or an ACK stream (66-100 B frames) stays below; one
# full-sized segment is 1,448 B, and a bulk flow moves megabytes a second.
MIN_DATA_BYTES = 4096
PACKET_OVERHEAD_BYTES = 100


class DataCarried:
    """Whether a module direction carried data over a span, from the run's cumulative bytes and
    messages (the loaded run's `histories`, analysis.load.CounterHistories: rows written on change and
    carried forward; a run without them: unknown)."""

    def __init__(self, data):
        self.data = data
        self.mono = data.snapshots["mono"]
        self.histories = getattr(data, "histories", None)
        self.cache: dict[tuple[int, bool], tuple[np.ndarray, np.ndarray, np.ndarray] | None] = {}

    def close(self) -> None:
        if self.histories is not None:
            self.histories.close()

    def _series(self, module: int, out: bool):
        key = (module, out)
        if key not in self.cache:
            rows = self.histories.get(module, out) if self.histories is not None else None
            if rows is not None:
                seq, msgs, nbytes = rows
                self.cache[key] = (self.mono.reindex(seq).to_numpy(float), msgs, nbytes)
            else:
                self.cache[key] = None
        return self.cache[key]

    def carried_data(self, module: int, out: bool, t0: float, t1: float) -> bool:
        """Whether the direction moved data in (t0, t1]; True when unknown (no bytes recorded, or a
        counter that went backwards), which is direction=any's answer."""
        series = self._series(module, out)
        if series is None:
            return True
        t, msgs, nbytes = series

        def at(when: float) -> tuple[float, float]:
            i = int(np.searchsorted(t, when, side="right")) - 1
            return (msgs[max(i, 0)], nbytes[max(i, 0)])   # before the first row: the first row

        (m0, b0), (m1, b1) = at(t0), at(t1)
        if m1 < m0 or b1 < b0:
            return True
        kinds = self.data.modules["kind"]
        overhead = PACKET_OVERHEAD_BYTES * (m1 - m0) if kinds.get(module) == "ipeth" else 0.0
        return (b1 - b0) - overhead >= MIN_DATA_BYTES


def _oneway(data, f: Rows) -> np.ndarray:
    ow = data.modules["oneway"]
    return f.oneway(ow.index[ow == "upload"].to_numpy(np.int64), ow.index[ow == "download"].to_numpy(np.int64))


def _result(f: Rows, oneway: np.ndarray, fault_pos: np.ndarray, fault_id: np.ndarray,
            coll_pos: np.ndarray, coll_id: np.ndarray, collateral: str, index,
            after_end: np.ndarray | None = None, masked: np.ndarray | None = None) -> pd.DataFrame:
    if collateral == "negative":
        coll_pos = np.zeros_like(coll_pos)
    actual = oneway | fault_pos
    exclude = f.invalid.copy()
    if masked is not None:
        exclude |= masked
    if after_end is not None:
        exclude |= after_end
    if collateral == "positive":
        actual |= coll_pos
    elif collateral == "exclude":
        exclude |= coll_pos & ~actual
    cause = np.full(len(actual), 0, dtype=np.int8)
    cause[coll_pos & (actual | exclude)] = 3
    cause[fault_pos] = 2
    if masked is not None:
        cause[masked] = 6
    cause[oneway] = 1
    cause[f.invalid] = 4
    if after_end is not None:
        cause[after_end & ~f.invalid] = 5
    # The fault of a fault's positive, else of the collateral it is (the ids are id + 1, 0 for none;
    # a row of cause 3 is no fault's positive).
    three = cause == 3
    code = np.where(three, coll_id, fault_id) if three.any() else fault_id
    return pd.DataFrame({
        "actual": actual,
        "exclude": exclude,
        "cause": pd.Categorical.from_codes(cause, list(CAUSES)),
        "fault": pd.arrays.IntegerArray(code - 1, code == 0),   # Int64, NA where none
    }, index=index, copy=False)


# ----------------------------------------------------------------------------- policies


class _Policy:
    system: str = ""
    summary: str = ""
    params: tuple[Param, ...] = ()

    def __init__(self, **values: Any):
        self.values = {p.name: p.default for p in self.params}
        self.values.update(values)

    @property
    def name(self) -> str:
        parts = [f"{p.name}={p.text(self.values[p.name])}" for p in self.params
                 if self.values[p.name] != p.default]
        return self.system + (":" + ",".join(parts) if parts else "")

    def __repr__(self) -> str:
        return f"<label policy {self.name}>"

    def _faults(self, data, f: Rows, mark: Callable[..., np.ndarray], mark_masking: Callable[..., np.ndarray]):
        """Rows that are a fault's positives (targets), and a fault's collateral: `coll_pos` as the
        policy marks it (for collateral=exclude/positive), `cover` for overlap=exclude: every row
        of a neighbour from the fault's start until it is active again, whether or not it carried
        anything just before (`mark_masking`), marked on the series that hold a fault's positive. A target still backing off from its own fault when
        another fault silences its neighbourhood is covered by the second fault."""
        n = f.n
        fault_pos = np.zeros(n, dtype=bool)
        # The fault of each row as its id + 1 (0: none), so that rows no fault touches are never written.
        fault_id = np.zeros(n, dtype=np.int64)
        coll_pos = np.zeros(n, dtype=bool)
        coll_id = np.zeros(n, dtype=np.int64)
        cover = np.zeros(n, dtype=bool)
        tail = np.zeros(n, dtype=bool)   # impact rows wholly after their fault's end (aftereffect=exclude)
        need_tail = self.values.get("aftereffect", "keep") == "exclude"
        need_coll = self.values.get("collateral", "negative") != "negative" or need_tail
        need_cover = self.values.get("overlap", "exclude") == "exclude"
        covering = []   # (neighbours, f0, f1) of each fault, for `cover` once every target's rows are known
        for fid, _kind, targets, f0, f1 in active_faults(data):
            groups = [(targets, fault_pos, fault_id, mark)]
            if need_coll or need_cover:
                neighbours = collateral_modules(data, targets, f0, f1)
                if need_coll:
                    groups.append((neighbours, coll_pos, coll_id, mark))
                if need_cover:
                    covering.append((neighbours, f0, f1))
            for mods, pos, ids, how in groups:
                for m in mods:
                    for out in (False, True):
                        rows = f.series.get((m, out))
                        if rows is None:
                            continue
                        hit = rows[how(rows, f0, f1, (m, out))]
                        pos[hit] = True
                        if need_tail:
                            long = rows[self._mark_tail(f, rows, f0, f1, (m, out))]
                            tail[long[f.t_start(long) >= f1]] = True
                        if ids is not None:
                            ids[hit] = np.where(ids[hit] == 0, fid + 1, ids[hit])
        # `cover` counts only where it meets a fault's positive (label: fp & cover), so a neighbour
        # series with none of those rows is not marked (an ip_drop's neighbours are every connection).
        for mods, f0, f1 in covering:
            for m in mods:
                for out in (False, True):
                    rows = f.series.get((m, out))
                    if rows is not None and fault_pos[rows].any():
                        cover[rows[mark_masking(rows, f0, f1, (m, out))]] = True
        self._tail = tail if need_tail else None
        return fault_pos, fault_id, coll_pos, coll_id, cover

    def label(self, data) -> pd.DataFrame:
        own = studies.of_data(data).label   # the study's own ground truth (streams: thesis 4.6.3)
        if own is not None:
            return own(data, self.values, CAUSES)
        f = label_rows(data)
        oneway = _oneway(data, f) if self.values.get("oneway", True) else np.zeros(f.n, dtype=bool)
        fp, fi, cp, ci, cover = self._faults(data, f, lambda *a: self._mark(f, *a), lambda *a: self._mark_masking(f, *a))
        stop = getattr(data, "stop", None)
        after = None
        if self.values.get("after_end", "exclude") == "exclude" and stop is not None:
            after = f.after(stop)
        # A target's impact while another fault's collateral covers it (possible only where the
        # spec allowed overlap): ambiguous, left out unless overlap=keep.
        masked = fp & cover if self.values.get("overlap", "exclude") == "exclude" else None
        out = _result(f, oneway, fp, fi, cp, ci, self.values.get("collateral", "negative"),
                      f.index, after, masked)
        tail = getattr(self, "_tail", None)
        if tail is not None:
            # aftereffect=exclude: a fault's impact after the fault ended (a target's or a neighbour's
            # silence while TCP backs off), scored apart; one-way and invalid rows keep their cause.
            left = tail & ~oneway & ~f.invalid
            out["exclude"] = out["exclude"].to_numpy() | left
            cause = out["cause"].cat.codes.to_numpy().copy()
            cause[left] = CAUSES.index("aftereffect")
            out["cause"] = pd.Categorical.from_codes(cause, list(CAUSES))
        return out

    def _mark(self, f: Rows, rows: np.ndarray, f0: float, f1: float, key: tuple[int, bool]) -> np.ndarray:
        """The rows of series `key` (module, out?) that fault [f0, f1] marks."""
        raise NotImplementedError

    def _mark_masking(self, f: Rows, rows: np.ndarray, f0: float, f1: float, key: tuple[int, bool]) -> np.ndarray:
        return self._mark(f, rows, f0, f1, key)

    def _mark_tail(self, f: Rows, rows: np.ndarray, f0: float, f1: float, key: tuple[int, bool]) -> np.ndarray:
        """The rows of series `key` whose snapshots from the fault's end on are its after-effect
        (aftereffect=exclude): by default the rows `_mark` marks."""
        return self._mark(f, rows, f0, f1, key)


class ImpactPolicy(_Policy):
    system = "impact"
    summary = ("the seeds' criteria (thesis 3.5.2, NeST paper 5.2-5.3): impact periods of targeted "
               "modules, one-way workloads' idle direction")
    params = (
        Param("lookback", 1.0, _seconds, "s before a fault in which the direction must have carried "
                    "traffic for its counters to 'become' zero (0: not required)"),
        Param("direction", "data", _choice("data", "any"),
                    "data: that traffic must include data (the flow's direction; not a request or ACKs "
                    "alone, thesis 3.5.2 note 6); any: messages of any size"),
        Param("retrans", "ends", _choice("ends", "continues"),
                    "a TCP retransmission ends an impact period (the seeds: 'ends whenever the counters "
                    "increase again, usually due to local retransmissions'), or continues it until new data"),
        Param("oneway", True, on_off, "apps/sockets of upload-only (download-only) workloads are "
                    "positive inbound (outbound)"),
        Param("collateral", "negative", _choice("negative", "exclude", "positive"),
                    "impact periods of modules a fault silences without targeting them (graph neighbours)"),
        Param("after_end", "exclude", _choice("exclude", "keep"),
                    "snapshots after the run's end, while the runner stops the workloads"),
        Param("overlap", "exclude", _choice("exclude", "keep"),
                    "a target's impact while another fault's collateral covers it (overlapping faults)"),
        Param("aftereffect", "keep", _choice("keep", "exclude"),
                    "impact after the fault ended (TCP backing off: a target's tail, a neighbour's silence): "
                    "keep as the seeds score it, or exclude from the scores (cause aftereffect)"),
    )

    _carried: DataCarried | None = None

    def label(self, data) -> pd.DataFrame:
        self._carried = DataCarried(data) if self.values["direction"] == "data" else None
        try:
            return super().label(data)
        finally:
            if self._carried is not None:
                self._carried.close()
            self._carried = None

    def _mark(self, f, rows, f0, f1, key):
        lookback = self.values["lookback"]
        if self._carried is not None and lookback > 0:
            if not self._carried.carried_data(*key, f0 - lookback, f1):
                return np.zeros(len(rows), dtype=bool)
        return self._impact(f, rows, f0, f1, lookback)

    def _mark_masking(self, f, rows, f0, f1, key):
        return self._impact(f, rows, f0, f1, 0.0)

    def _mark_tail(self, f, rows, f0, f1, key):
        # The silence a fault leaves goes on until new data moves: a retransmission that went
        # unanswered (or was dropped again) is no progress, whatever `retrans` says of the impact.
        lookback = self.values["lookback"]
        if self._carried is not None and lookback > 0:
            if not self._carried.carried_data(*key, f0 - lookback, f1):
                return np.zeros(len(rows), dtype=bool)
        idle = f.idle(rows, progress=True)
        return impact_mask(f.t_start(rows), f.t_end(rows), idle, f.invalid[rows], f0, f1, lookback)

    def _impact(self, f: Rows, rows: np.ndarray, f0: float, f1: float, lookback: float) -> np.ndarray:
        idle = f.idle(rows, progress=self.values["retrans"] == "continues")
        return impact_mask(f.t_start(rows), f.t_end(rows), idle, f.invalid[rows], f0, f1, lookback)


class WindowPolicy(_Policy):
    system = "window"
    summary = "targets positive in every snapshot overlapping the fault window (+ tail), counters aside"
    params = (
        Param("tail", 0.0, _seconds, "s after the fault's end still counted positive"),
        Param("oneway", True, on_off, "as for impact"),
        Param("collateral", "negative", _choice("negative", "exclude", "positive"),
                    "graph neighbours of the targets during the window"),
        Param("after_end", "exclude", _choice("exclude", "keep"), "as for impact"),
        Param("overlap", "exclude", _choice("exclude", "keep"), "as for impact"),
    )

    def _mark(self, f, rows, f0, f1, key):
        ts = f.t_start(rows)
        return (f.t_end(rows) > f0) & ((ts < f1 + self.values["tail"]) | np.isnan(ts))


# The project's own entry points (pyproject.toml [project.entry-points] group nestlab.policies), for an
# install older than them.
BUILTINS = (("impact", "analysis.labels:ImpactPolicy"), ("window", "analysis.labels:WindowPolicy"),
            ("requests", "analysis.labels_requests:RequestsPolicy"))


def check_policy(obj, builtin: bool) -> str | None:
    """What is wrong with a policy's definition (a class like _Policy: system, summary, params, and
    instances made from parameter values with a name and label(data)), or None."""
    if not isinstance(obj, type):
        return f"not a class but {type(obj).__name__}"
    problem = check_name(getattr(obj, "system", None)) or check_contract(obj, builtin)
    if problem:
        return problem
    if not callable(getattr(obj, "label", None)):
        return "it has no label(data) method"
    if not all(isinstance(p, Param) for p in getattr(obj, "params", ())):
        return "its params are not all Param objects"
    return None


# The registry of labelling policies: a mapping by name like every registry (parse_named looks it up),
# from the entry points of `nestlab.policies` and plug-in files (analysis.plugins).
POLICIES: Registry = Registry("label policy", "policies", check_policy,
                              lambda cls: cls.system, lambda: list(BUILTINS))
DEFAULT_POLICY = "impact"


def parse_policy(spec: str | LabelPolicy | None) -> LabelPolicy:
    """'impact', 'impact:lookback=2,collateral=exclude', 'window:tail=1' (UserError on a bad spec)."""
    if spec is None:
        spec = DEFAULT_POLICY
    if not isinstance(spec, str):
        return spec
    cls, values = parse_named(spec, "label policy", POLICIES)
    return cls(**values)


def label_run(data, policy: str | LabelPolicy | None = None) -> pd.DataFrame:
    """data.counters with the policy's labels joined on (actual, exclude, cause, fault); policy None:
    the run's study kind's (analysis.studies)."""
    pol = parse_policy(policy if policy is not None else studies.of_data(data).policy)
    labels = pol.label(data)
    return data.counters.join(labels)
