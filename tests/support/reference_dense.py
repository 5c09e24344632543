"""The plain forms of load_stretches' array steps, as they were before analysis.model.dense (lexsort,
searchsorted, a stretch at a time): tests/test_dense.py checks the fast forms against them."""

from __future__ import annotations

import numpy as np

from analysis.model.stretches import DIRS, Counters, Stretch


def ref_dense_counter_rows(rows: dict[str, np.ndarray], pos: np.ndarray, lives: tuple[np.ndarray, np.ndarray],
                       seqs: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Carry stored counter rows forward to every snapshot of the module's lifetime.

    The collector writes a (module, direction) row only when its values change (format 2): a
    snapshot without a row has the values of the last row before it, until the module dies.
    pos: each row's snapshot position; lives: (module ids, sorted; the first position after each one's
    life), so that memory follows the number of modules, not the largest id.
    Returns the rows, one per (module, direction, position) from the first row to the end, and
    their positions. Dense input (format 1) comes back unchanged.
    """
    n = len(pos)
    if n == 0:
        return rows, pos
    s_count = len(seqs)
    group = rows["module"] * 2 + rows["out"]
    order = np.lexsort((pos, group))
    g, p = group[order], pos[order]
    first = np.ones(n, dtype=bool)
    first[1:] = g[1:] != g[:-1]
    heads = np.flatnonzero(first)
    last_row = np.append(heads[1:] - 1, n - 1)
    starts = p[heads]
    ids, end_pos = lives
    ends = np.maximum(end_pos[np.searchsorted(ids, g[heads] // 2)], p[last_row] + 1)
    lengths = ends - starts
    dense_g = np.repeat(g[heads], lengths)
    dense_pos = np.repeat(starts, lengths) + np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    src = order[np.searchsorted(g * s_count + p, dense_g * s_count + dense_pos, side="right") - 1]
    dense = {"seq": seqs[dense_pos], "module": dense_g // 2, "out": (dense_g % 2).astype(bool),
             "vals": rows["vals"][src], "has": rows["has"][src]}
    if "bad" in rows:
        dense["bad"] = rows["bad"][src]
    return dense, dense_pos



def ref_build_stretches(seqs: np.ndarray, mono: np.ndarray, kind: dict[int, str], per_dir: dict[str, tuple],
                    row_module: np.ndarray, row_pos: np.ndarray, edge_rows: list[tuple]) -> list[Stretch]:
    """Cut snapshots `seqs` (times `mono`) into stretches of constant graph and fill their counters.

    per_dir[d] = (pos, module, delta (R, 3), queued, has (R, 4), invalid), rows sorted by position;
    row_module/row_pos: every dense counters row (either direction), a module being present where it
    has one; edge_rows: (parent, child, born, died) in monotonic time. Positions index `seqs`.
    `load_run` passes a whole run, analysis.live a window of recent snapshots."""
    s_count = len(seqs)
    if s_count == 0 or len(row_module) == 0:
        return []
    # Module presence (a counters row in either direction) as unique (module, position) pairs.
    pairs = np.sort(row_module * s_count + row_pos)
    pairs = pairs[np.append(True, pairs[1:] != pairs[:-1])]
    pm, pp = pairs // s_count, pairs % s_count
    new_run = np.ones(len(pairs), dtype=bool)
    new_run[1:] = (pm[1:] != pm[:-1]) | (pp[1:] != pp[:-1] + 1)
    end_run = np.ones(len(pairs), dtype=bool)
    end_run[:-1] = new_run[1:]
    change = {0, s_count, *pp[new_run].tolist(), *(pp[end_run] + 1).tolist()}
    edge_span = []
    for parent, child, born, died in edge_rows:
        a = int(np.searchsorted(mono, born, side="left"))
        b = s_count if died is None else int(np.searchsorted(mono, died, side="left"))
        if a < b:
            edge_span.append((parent, child, a, b))
            change.update((a, b))
    bounds = sorted(c for c in change if 0 <= c <= s_count)
    by_pos = np.argsort(pp, kind="stable")
    pm_sorted, pp_sorted = pm[by_pos], pp[by_pos]
    # Module ids -> dense slots (memory follows the number of modules, not the largest id); a row of
    # a module not in `kind` gets no slot.
    ids = np.fromiter(sorted(kind), dtype=np.int64, count=len(kind))
    lookup = np.full(len(ids) + 1, -1, dtype=np.int64)
    slot = {}
    for d in DIRS:
        mod = per_dir[d][1]
        k = np.searchsorted(ids, mod)
        known = k < len(ids)
        known[known] = ids[k[known]] == mod[known]
        slot[d] = np.where(known, k, len(ids))   # the last lookup entry stays -1
    stretches = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        lo, hi = np.searchsorted(pp_sorted, [a, a + 1])
        here = sorted(pm_sorted[lo:hi].tolist())
        if not here:
            continue
        idx = {m: i for i, m in enumerate(here)}
        edges = [(idx[p], idx[c]) for p, c, ea, eb in edge_span
                 if ea <= a < eb and p in idx and c in idx and p != c]
        st = Stretch(here, [kind[m] for m in here], edges, seqs[a:b])
        here_slots = np.searchsorted(ids, here)
        lookup[here_slots] = np.arange(len(here))
        for d in DIRS:
            p_, mod, delta, queued, has, invalid = per_dir[d]
            c = Counters.empty(len(here), b - a)
            c.invalid[:] = True  # no row in this direction = no measurement
            lo, hi = np.searchsorted(p_, [a, b])
            r, col = lookup[slot[d][lo:hi]], p_[lo:hi] - a
            keep = np.flatnonzero(r >= 0)
            r, col, sel = r[keep], col[keep], lo + keep
            c.tm[r, col] = delta[sel, 0]
            c.wait[r, col] = delta[sel, 1]
            c.has_wait[r, col] = has[sel, 1]
            c.queued[r, col] = queued[sel]
            c.has_queue[r, col] = has[sel, 2]
            c.errors[r, col] = delta[sel, 2]
            c.has_errors[r, col] = has[sel, 3]
            c.invalid[r, col] = invalid[sel]
            st.counters[d] = c
        lookup[here_slots] = -1
        stretches.append(st)
    return stretches

