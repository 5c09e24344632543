"""Rows of a damaged run left out of the scores (not of the evidence: their deltas are good): the
snapshots with no usable time, the neighbourhood of a fault whose window is unknown, and every module
while a fault whose target is lost may have acted (docs/analysis.md, "Reading awkward runs").
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from analysis.fault_reach import collateral_modules, fault_targets
from rundir.faultkinds import kinds_of


def leave_out_unknown_windows(faults: pd.DataFrame, unknown: dict, mods: pd.DataFrame, edges: pd.DataFrame,
                              t0: float, warnings: list[str], kinds: dict | None = None,
                              ) -> list[tuple[set[int] | None, float, float, str]]:
    """A fault whose window (or kind) is unknown labels nothing; its targets and their graph neighbours (the
    modules whose ground truth it decides) are not scored over the span it may have covered (the
    whole run when nothing is known). Returns those (modules, lo, hi, warning) for `unscored`; `kinds`:
    the run's fault kinds (rundir.faultkinds.kinds_of)."""
    out = []
    view = SimpleNamespace(modules=mods, edges=edges, fault_kinds=kinds if kinds is not None else kinds_of(None))
    for fid, (lo, hi, why) in unknown.items():
        row = faults[faults["id"] == fid].iloc[0]
        lo_, hi_ = (-np.inf, np.inf) if lo is None else (lo, hi)
        tm = row["target_module"]
        where = "over the whole run" if lo is None else f"from {lo - t0:.1f} s to {hi - t0:.1f} s"
        if tm is pd.NA or pd.isna(tm):
            warnings.append(f"fault {fid} ({row['kind']}): {why}, and its target is unknown: the fault is left out")
            continue
        targets = fault_targets(view, row["kind"], int(tm), lo_, hi_)
        around = targets | collateral_modules(view, targets, lo_, hi_)
        out.append((around, lo_, hi_, f"fault {fid} ({row['kind']}): {why}: the fault is left out, and its "
                    f"target and the {len(around) - 1} modules around it are not scored {where}"))
    return out


def leave_out_lost_targets(faults: pd.DataFrame, lost: list[tuple[int, int]], t0: float,
                           warnings: list[str]) -> list[tuple[set[int] | None, float, float, str]]:
    """Faults (id, recorded target module) whose target module does not exist and whose target does not
    resolve to a module could have targeted any module: none is scored while the fault may have acted
    (its window and the auto recovery margin after it, docs/schedules.md). Returns those (None = every
    module, lo, hi, warning) for `unscored`."""
    out = []
    for fid, recorded in lost:
        row = faults[faults["id"] == fid].iloc[0]
        what = (f"fault {fid} ({row['kind']}): target module {recorded} is not in the modules table, and its "
                "target does not resolve to a module either: it labels nothing")
        start, end = float(row["start"]), float(row["end"])
        if start != start:   # never took effect: it acted on nothing
            warnings.append(what)
            continue
        end = end if end == end else start
        lo, hi = start, end + (end - start) + 1.0
        out.append((None, lo, hi, f"{what}, and no module is scored from {lo - t0:.1f} s to {hi - t0:.1f} s, "
                    "while it may have acted"))
    return out


def unscored(counters: pd.DataFrame, snapshots: pd.DataFrame, seqs: np.ndarray,
             spans: list[tuple[set[int] | None, float, float, str]], warnings: list[str]) -> np.ndarray | None:
    """The rows of `counters` left out of the scores, not of the evidence (their deltas are good): the
    snapshots `seqs` (no usable time) and, per span, its modules (None: all) at every snapshot whose
    interval touches [lo, hi]; each span's warning gets the number of rows it leaves out."""
    if not len(seqs) and not spans:
        return None
    seq = counters["seq"].to_numpy(np.int64)
    mask = np.isin(seq, seqs)
    end = snapshots["mono"].reindex(seq).to_numpy(float)
    start = snapshots["start"].reindex(seq).fillna(-np.inf).to_numpy(float)
    module = counters["module"].to_numpy(np.int64)
    scored = ~counters["invalid"].to_numpy(bool)
    for mods, lo, hi, text in spans:
        m = (end > lo) & (start < hi)
        if mods is not None:
            m &= np.isin(module, np.fromiter(mods, dtype=np.int64, count=len(mods)))
        warnings.append(f"{text} ({int((m & scored & ~mask).sum())} module-snapshots)")
        mask |= m
    return mask
