"""Values of a damaged or hand-edited run.db made safe to use: numbers where numbers belong, rows
placed on snapshots, bad values carried over, module lives completed, fault rows checked. No SQL here
(rundir.read fetches the rows); every check says what it found in one warning and what it left out
(docs/analysis.md, "Reading awkward runs").

SQLite stores any value in any column, so a damaged run.db can hold text where a number belongs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from typing import Any

import numpy as np
import pandas as pd

from rundir.db import FAULT_COLUMNS, FAULT_KINDS

NUMBER = (int, float)


def is_number(v: Any) -> bool:
    """A finite int or float (not a bool, not text)."""
    return isinstance(v, NUMBER) and not isinstance(v, bool) and math.isfinite(v)


def shown(v: Any) -> str:
    """A stored value as a warning shows it: text quoted, at most 30 characters."""
    text = repr(v) if isinstance(v, str | bytes) else f"{v:g}" if isinstance(v, float) else str(v)
    return text if len(text) <= 30 else text[:27] + "..."


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def place_rows(rows: dict[str, np.ndarray], seqs: np.ndarray, kind: dict[int, str],
               warnings: list[str]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Rows -> snapshot positions. Rows of modules not in the modules table are left out. A row of a
    snapshot missing from the snapshots table holds the values the module had at the next snapshot
    (a row is written only when values change), so it moves there unless that snapshot has its own."""
    pos = _exact_positions(rows, seqs, kind)
    if pos is not None:   # the common case: nothing to leave out or move
        return rows, pos
    pos = np.searchsorted(seqs, rows["seq"])
    exact = (pos < len(seqs)) & (seqs[np.minimum(pos, len(seqs) - 1)] == rows["seq"])
    known_mod = np.isin(rows["module"], np.fromiter(kind, dtype=np.int64, count=len(kind)))
    after_end = ~exact & (pos >= len(seqs))
    orphan = ~exact & ~after_end
    for n, what in ((int((~known_mod).sum()), "of modules that are not in the modules table; left out"),
                    (int((after_end & known_mod).sum()), "after the last snapshot; left out"),
                    (int((orphan & known_mod).sum()), "of snapshots missing from the snapshots table; their "
                     "values are carried to the next snapshot")):
        if n:
            warnings.append(f"counters: {n} row{'s' if n != 1 else ''} {what}")
    keep = known_mod & ~after_end
    if not keep.all():
        rows = {k: v[keep] for k, v in rows.items()}
        pos = pos[keep]
    if orphan[keep].any():   # one row per (module, direction, position): the latest seq
        group = rows["module"] * 2 + rows["out"]
        order = np.lexsort((rows["seq"], pos, group))
        g, p = group[order], pos[order]
        last = np.ones(len(order), dtype=bool)
        last[:-1] = (g[1:] != g[:-1]) | (p[1:] != p[:-1])
        order = np.sort(order[last])
        rows = {k: v[order] for k, v in rows.items()}
        pos = pos[order]
        rows["seq"] = seqs[pos]
    return rows, pos


def _exact_positions(rows: dict[str, np.ndarray], seqs: np.ndarray, kind: dict[int, str]) -> np.ndarray | None:
    """place_rows' positions when every row is of a known module and of a snapshot in `seqs`, found
    without a search: the snapshots' seqs are consecutive (the collector numbers them so) and rows come
    in runs of one module (the columnar copy's order); None when it is not so (place_rows searches)."""
    seq, mod = rows["seq"], rows["module"]
    n = len(seqs)
    if n == 0 or len(seq) == 0 or seq.dtype.kind != "i" or int(seqs[-1]) - int(seqs[0]) != n - 1 or not (seqs[1:] > seqs[:-1]).all():
        return None
    heads = np.flatnonzero(mod[1:] != mod[:-1]) + 1
    if len(heads) > len(mod) // 8:   # not in runs of a module: isin is as cheap
        return None
    one = np.append(mod[:1], mod[heads])
    if not np.isin(one, np.fromiter(kind, dtype=np.int64, count=len(kind))).all():
        return None
    lo, hi = int(seq.min()), int(seq.max())
    if lo < seqs[0] or hi > seqs[-1]:
        return None
    # seqs[0] == 0: a row's seq is its position (a view: no one writes to it)
    return seq if seqs[0] == 0 and seq.dtype == np.intp else (seq - seqs[0]).astype(np.intp, copy=False)


def carry_over_bad(mod: np.ndarray, vals: np.ndarray, has: np.ndarray,
                   bad: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows sorted by (module, position): a bad row takes the values of the last good row of its module
    (none: unsupported), so it neither counts as a decrease nor becomes the next row's baseline."""
    if not bad.any():
        return vals, has, bad
    idx = np.arange(len(bad))
    last_good = np.maximum.accumulate(np.where(bad, -1, idx))
    src = np.maximum(last_good, 0)
    same = (last_good >= 0) & (mod[src] == mod)
    vals, has = vals.copy(), has.copy()
    fill = np.flatnonzero(bad & same)
    vals[fill], has[fill] = vals[src[fill]], has[src[fill]]
    none = np.flatnonzero(bad & ~same)
    vals[none], has[none] = 0.0, False
    return vals, has, bad


def fill_lives(mods: list[tuple], unknown_death: set[int], module: np.ndarray, pos: np.ndarray,
               mono: np.ndarray) -> list[tuple]:
    """Modules with a born that was not a number born at their first row, and those whose death is
    unknown dead at the snapshot after their last row (None: alive at the end)."""
    if not unknown_death and all(m[5] is not None for m in mods):
        return mods
    ids = np.array([m[0] for m in mods], dtype=np.int64)   # sorted (rundir.read.read_modules)
    first = np.full(len(ids), len(mono), dtype=np.int64)   # per module, not per id: ids may be huge
    last = np.full(len(ids), -1, dtype=np.int64)
    slot = np.searchsorted(ids, module)
    np.minimum.at(first, slot, pos)
    np.maximum.at(last, slot, pos)
    out = []
    for k_, (mid, k, n, key, attrs, born, died) in enumerate(mods):
        if born is None:
            born = float(mono[first[k_]]) if last[k_] >= 0 else float(mono[0])
        if mid in unknown_death and 0 <= last[k_] and last[k_] + 1 < len(mono):
            died = float(mono[last[k_] + 1])
        out.append((mid, k, n, key, attrs, born, died))
    return out


# ----------------------------------------------------------------------------- faults


def as_dict(text: Any) -> dict:
    """A JSON object stored as text (attrs, target) as a dict; {} when it is anything else."""
    if isinstance(text, dict):
        return text
    try:
        v = json.loads(text) if text else {}
    except (TypeError, json.JSONDecodeError):
        return {}
    return v if isinstance(v, dict) else {}


def _time(v: Any) -> float | None | str:
    """A stored time: a float, None (NULL), or 'bad' (anything else)."""
    if v is None or (isinstance(v, float) and v != v):
        return None
    return float(v) if is_number(v) else "bad"


def fault_rows(faults: pd.DataFrame, t0: float | None, warnings: list[str],
               known: Collection[str] = FAULT_KINDS) -> tuple[pd.DataFrame, dict]:
    """The faults with numbers where numbers belong: a target_module that is not an integer is unknown
    (resolved from the target); planned times that are not numbers are unknown. Returns the faults and,
    for each fault whose window is unknown (a start or end that is not a time, an end before the
    start) or whose kind is unknown (it cannot be labelled), the span (lo, hi) it may have covered,
    from what is known of its times and plan (None: nothing is known) and why. `known`: the kinds the run
    may hold (rundir.faultkinds.kinds_of its manifest)."""
    rows, unknown = [], {}
    for r in faults.itertuples(index=False):
        start, end = _time(r.start), _time(r.end)
        tm = None if _time(r.target_module) is None else r.target_module
        if tm is not None and not (is_number(tm) and float(tm).is_integer()):
            warnings.append(f"fault {r.id} ({r.kind}): target module {shown(tm)} is not a module id; "
                            "taken as unknown")
            tm = None
        ps, pd_ = (_time(v) for v in (r.planned_start, r.planned_duration))
        ps, pd_ = (None if v == "bad" else v for v in (ps, pd_))
        why = None
        if start == "bad" or end == "bad":
            which = "start" if start == "bad" else "end"
            why = f"its {which} {shown(r.start if which == 'start' else r.end)} is not a time; its window is unknown"
        elif start is not None and end is not None and end < start:
            why = (f"it ends ({end - (t0 or 0):.3f} s) before it starts ({start - (t0 or 0):.3f} s); its window is "
                   "unknown")
        elif str(r.kind) not in known and start is not None:
            why = f"its kind {shown(r.kind)} is not one this nestlab knows (a newer run?)"
        if why is not None:
            known = [v for v in (start, end) if isinstance(v, float)]
            if t0 is not None and ps is not None:
                known += [t0 + ps, t0 + ps + (pd_ or 0.0)]
            if known:
                lo, hi = min(known), max(known)
                hi += (pd_ + 1.0) if pd_ is not None else (hi - lo) + 1.0   # the auto recovery margin
                unknown[int(r.id)] = (lo, hi, why)
            else:
                unknown[int(r.id)] = (None, None, why)
            start = end = None
        rows.append((int(r.id), r.spec_index, str(r.kind), r.at_node, as_dict(r.target),
                     None if tm is None else int(tm), ps, pd_, start, end))
    out = pd.DataFrame(rows, columns=FAULT_COLUMNS)
    for c in ("start", "end", "planned_start", "planned_duration"):
        out[c] = pd.to_numeric(out[c]).astype(float)
    return out, unknown
