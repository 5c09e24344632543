"""Array steps of load_stretches (analysis.model.stretches) in linear time: ordering counters rows by series
and snapshot, carrying them forward to every snapshot of a module's life, and cutting the run into
stretches with their counters filled in one pass.

The general tools (numpy's lexsort, searchsorted of every row) cost O(R log R) over the run's R
counters rows; a 15-minute run at 100 ms has about 2 M. Here each step takes what the data already
give: rows arrive in snapshot order per series (the collector writes them so), series and snapshot
numbers are small integers (a stable radix sort), and every position of a module's life is known
(a forward fill instead of a search). Where the data are not so (rows out of order in a damaged
run), each step falls back to the general tool, with the same result: every function here returns
exactly what the plain sort or search would.

Rows usually come as runs of one module at consecutive positions (run_heads): presence is then a
span per run (presence_spans), rows already complete need no carrying forward (complete_series), and
each cell of a stretch takes its row by a gather (gather_index) rather than each row being scattered
to its cell. Memory touched for the first time costs here about as much as the arithmetic, so
temporaries as long as the rows are avoided (chunks, one buffer reused).
"""

from __future__ import annotations

import numpy as np

# Above this many module x snapshot cells, the presence of modules is found by sorting, not in a
# bool matrix of that size (64 MB).
_MATRIX_CELLS = 1 << 26


def stable_order(keys: np.ndarray, bound: int) -> np.ndarray:
    """np.argsort(keys, kind="stable") for integer keys in [0, bound): a radix sort when they fit in 16
    bits (numpy sorts those in linear time), else numpy's stable sort."""
    if bound <= 1 << 16 and len(keys):
        return np.argsort(keys.astype(np.uint16), kind="stable")
    return np.argsort(keys, kind="stable")


def lex_sorted(major: np.ndarray, minor: np.ndarray) -> bool:
    """Rows already in (major, minor) order (ties allowed), so a stable lexsort would leave them."""
    if len(major) < 2:
        return True
    step = major[1:] - major[:-1]
    return bool(((step > 0) | ((step == 0) & (minor[1:] >= minor[:-1]))).all())


def module_slots(ids: np.ndarray, mod: np.ndarray) -> np.ndarray:
    """Each row's module as its index in `ids` (sorted), len(ids) where it is not there; rows that come
    in runs of one module (as load_stretches has them) are looked up once a run."""
    m = len(ids)
    if m == 0 or len(mod) == 0:
        return np.full(len(mod), m, dtype=np.int64)
    heads = np.flatnonzero(np.append(True, mod[1:] != mod[:-1]))
    one = mod[heads]
    k = np.minimum(np.searchsorted(ids, one), m - 1)
    slot = np.where(ids[k] == one, k, m)
    return slot if len(heads) == len(mod) else np.repeat(slot, np.diff(np.append(heads, len(mod))))


def series_order(module: np.ndarray, out: np.ndarray, pos: np.ndarray, ids: np.ndarray,
                 by_direction: bool = False) -> np.ndarray:
    """The stable order of rows by series, then position: series by (module, direction), or with
    `by_direction` by (direction, module); ties in their order; None when the rows are in that order
    already. `ids`: sorted module ids, where every row's module usually is (else the general lexsort)."""
    slot = module_slots(ids, module)
    if len(ids) and (slot < len(ids)).all():
        group = out * len(ids) + slot if by_direction else slot * 2 + out
        if lex_sorted(group, pos):   # already in order (the columnar copy keeps its rows so)
            return None
        order = stable_order(group, 2 * len(ids))
        if lex_sorted(group[order], pos[order]):
            return order
    return np.lexsort((pos, module, out) if by_direction else (pos, module * 2 + out))


def dense_counter_rows(rows: dict[str, np.ndarray], pos: np.ndarray, lives: tuple[np.ndarray, np.ndarray],
                       seqs: np.ndarray, by_direction: bool = False) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Carry stored counter rows forward to every snapshot of the module's lifetime.

    The collector writes a (module, direction) row only when its values change (format 2): a
    snapshot without a row has the values of the last row before it, until the module dies.
    pos: each row's snapshot position; lives: (module ids, sorted; the first position after each one's
    life), so that memory follows the number of modules, not the largest id.
    Returns the rows, one per (module, direction, position) from the first row to the end, and
    their positions, by module, direction and position (`by_direction`: by direction, module and
    position, so each direction's rows are one slice). Of two rows at one position of a series, the
    later one holds.
    """
    n = len(pos)
    if n == 0:
        return rows, pos
    ids, end_pos = lives
    if by_direction and complete_series(rows["module"], rows["out"], pos, lives):
        return _as_dense(rows, rows["module"], rows["out"]), pos   # as below, found in one pass
    order = series_order(rows["module"], rows["out"], pos, ids, by_direction)
    if order is None:   # in order already: the rows themselves, not copies
        mod, out, p = rows["module"], rows["out"], pos
    else:
        mod, out, p = rows["module"][order], rows["out"][order], pos[order]
    first = np.ones(n, dtype=bool)
    first[1:] = (mod[1:] != mod[:-1]) | (out[1:] != out[:-1])
    heads = np.flatnonzero(first)
    last_row = np.append(heads[1:] - 1, n - 1)
    starts = p[heads]
    ends = np.maximum(end_pos[np.searchsorted(ids, mod[heads])], p[last_row] + 1)
    lengths = ends - starts
    total = int(lengths.sum())
    last_of_tie = np.ones(n, dtype=bool)        # the later of two rows at one position holds
    last_of_tie[:-1] = first[1:] | (p[1:] != p[:-1])
    if total == n and last_of_tie.all():        # every position has its row already (format 1)
        dense_pos, src = p, order
        if src is None:
            return _as_dense(rows, mod, out), dense_pos
    else:
        order = np.arange(n) if order is None else order
        mod, out = np.repeat(mod[heads], lengths), np.repeat(out[heads], lengths)
        base = np.cumsum(lengths) - lengths      # first dense row of each series
        dense_pos = np.repeat(starts - base, lengths) + np.arange(total)
        series = np.cumsum(first) - 1
        at = base[series] + (p - starts[series])   # each sorted row's dense row
        mark = np.full(total, -1, dtype=np.int64)
        keep = np.flatnonzero(last_of_tie)
        mark[at[keep]] = keep
        src = order[np.maximum.accumulate(mark)]   # the last row at or before each dense row
    dense = {"seq": seqs[dense_pos], "module": mod, "out": out.astype(bool),
             "vals": rows["vals"][src], "has": rows["has"][src]}
    if "bad" in rows:
        dense["bad"] = rows["bad"][src]
    return dense, dense_pos


def _as_dense(rows: dict[str, np.ndarray], mod: np.ndarray, out: np.ndarray) -> dict[str, np.ndarray]:
    """dense_counter_rows' answer for rows that are dense and in order already: the rows themselves."""
    dense = {"seq": rows["seq"], "module": mod, "out": out.astype(bool, copy=False), "vals": rows["vals"],
             "has": rows["has"]}
    if "bad" in rows:
        dense["bad"] = rows["bad"]
    return dense


def presence(slot: np.ndarray, row_pos: np.ndarray, m: int, s_count: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (module slot, position) with a row, once, sorted by slot then position (slots < m)."""
    if m * s_count <= _MATRIX_CELLS:
        seen = np.zeros((m, s_count), dtype=bool)
        seen[slot, row_pos] = True
        pm, pp = np.nonzero(seen)
        return pm, pp
    pairs = np.unique(slot * s_count + row_pos)
    return pairs // s_count, pairs % s_count


def cell_places(starts: np.ndarray, stops: np.ndarray, s_count: int, slots: np.ndarray, lo: np.ndarray,
                hi: np.ndarray, ids: np.ndarray, mod: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(stretch, place) of each row: the stretch [starts[k], stops[k]) holding its position, and its
    module's place among that stretch's modules, `slots[lo[k]:hi[k]]` (ascending slots of `ids`);
    place -1 where the row's module is not among them (or no stretch holds its position)."""
    m, k_count = len(ids), len(starts)
    at = np.full(s_count + 1, -1, dtype=np.int64)   # position -> stretch; s_count: none
    lengths = stops - starts
    at[np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))] = \
        np.repeat(np.arange(k_count), lengths)
    k = at[np.where((pos >= 0) & (pos < s_count), pos, s_count)]
    slot = module_slots(ids, mod)
    n = hi - lo
    stretch_of = np.repeat(np.arange(k_count, dtype=np.int64), n)
    member = np.concatenate([slots[a:b] for a, b in zip(lo, hi, strict=True)]) if k_count else np.zeros(0, np.int64)
    local = np.arange(len(member)) - np.repeat(np.cumsum(n) - n, n)
    if k_count * (m + 1) <= _MATRIX_CELLS:   # a (stretch, slot) -> place table
        table = np.full(k_count * (m + 1), -1, dtype=np.int64)
        table[stretch_of * (m + 1) + member] = local
        place = np.where(k >= 0, table[np.maximum(k, 0) * (m + 1) + slot], -1)
        return k, place
    key = stretch_of * (m + 1) + member   # sorted: stretches in order, slots ascending in each
    want = k * (m + 1) + slot
    g = np.minimum(np.searchsorted(key, want), max(len(key) - 1, 0))
    found = (k >= 0) & (len(key) > 0) & (key[g] == want) if len(key) else np.zeros(len(k), dtype=bool)
    return k, np.where(found, local[g] if len(key) else -1, -1)


def fill_counters(n_cells: int, cell: np.ndarray, delta: np.ndarray, queued: np.ndarray, has: np.ndarray,
                  invalid: np.ndarray) -> dict[str, np.ndarray]:
    """One direction's counters of every stretch as flat per-cell arrays (analysis.model.batch's order), with
    rows of deltas put in their `cell`; a cell without a row has no measurement (invalid)."""
    out = {f: np.zeros(n_cells) for f in ("tm", "wait", "queued", "errors")}
    out.update({f: np.zeros(n_cells, dtype=bool) for f in ("has_wait", "has_queue", "has_errors")})
    out["invalid"] = np.ones(n_cells, dtype=bool)
    out["tm"][cell] = delta[:, 0]
    out["wait"][cell] = delta[:, 1]
    out["has_wait"][cell] = has[:, 1]
    out["queued"][cell] = queued
    out["has_queue"][cell] = has[:, 2]
    out["errors"][cell] = delta[:, 2]
    out["has_errors"][cell] = has[:, 3]
    out["invalid"][cell] = invalid
    return out


def flat_view(arrays: list[np.ndarray]) -> np.ndarray | None:
    """The arrays as one flat array without a copy, when they lie back to back in one buffer in this
    order (load_stretches makes each stretch's counters so); None otherwise."""
    if not arrays:
        return None
    base = arrays[0].base
    if base is None or base.ndim != 1 or not base.flags.c_contiguous or any(a.base is not base for a in arrays):
        return None
    item = base.itemsize
    start = (arrays[0].__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    at = start
    for a in arrays:
        if not a.flags.c_contiguous or a.__array_interface__["data"][0] != base.__array_interface__["data"][0] + at * item:
            return None
        at += a.size
    return base[start:at]


_CHUNK = 1 << 15
# Largest table of (parent place, child place) pairs stretch_edges marks distinct edges in.
_TABLE_CELLS = 1 << 22


def run_heads(mod: np.ndarray, pos: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The first row of each run of rows of one module (and direction, `out`) at consecutive
    positions; a chunk at a time, so that no temporary is as long as the rows."""
    n = len(mod)
    brk = np.empty(max(n - 1, 0), dtype=bool)
    step = np.empty(min(_CHUNK, len(brk)), dtype=np.int64)
    other = np.empty(len(step), dtype=bool)
    for a in range(0, len(brk), _CHUNK):
        b = min(a + _CHUNK, len(brk))
        k = b - a
        np.subtract(pos[a + 1:b + 1], pos[a:b], out=step[:k])
        np.not_equal(step[:k], 1, out=brk[a:b])
        np.not_equal(mod[a + 1:b + 1], mod[a:b], out=other[:k])
        brk[a:b] |= other[:k]
        if out is not None:
            np.not_equal(out[a + 1:b + 1], out[a:b], out=other[:k])
            brk[a:b] |= other[:k]
    heads = np.flatnonzero(brk)
    heads += 1
    return np.concatenate([np.zeros(min(n, 1), dtype=heads.dtype), heads])


def complete_series(module: np.ndarray, out: np.ndarray, pos: np.ndarray, lives: tuple[np.ndarray, np.ndarray]) -> bool:
    """Rows already as dense_counter_rows(by_direction=True) makes them: each (direction, module)
    series one run of consecutive positions from its first row to the end of the module's life (or its
    last row), series by direction then module; every module in `lives`."""
    ids, end_pos = lives
    if len(module) == 0 or len(ids) == 0:
        return False
    heads = run_heads(module, pos, out)
    o, m = out[heads].astype(np.int8), module[heads]
    if not ((o[1:] > o[:-1]) | ((o[1:] == o[:-1]) & (m[1:] > m[:-1]))).all():
        return False   # a series in two runs (a gap, a tie) or out of order
    k = np.minimum(np.searchsorted(ids, m), len(ids) - 1)
    last = pos[np.append(heads[1:], len(pos)) - 1]
    return bool((ids[k] == m).all() and (end_pos[k] <= last + 1).all())


def presence_spans(ids: np.ndarray, row_module: np.ndarray, row_pos: np.ndarray,
                   s_count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each module is present (has a row), as maximal spans [a, b) of positions: (slot, a, b),
    by slot then a -- the runs of `presence`'s pairs. Rows that come as runs of one module at
    consecutive positions (as load_stretches has them) are taken a run at a time; KeyError for a
    row's module not in `ids` (the first such row's)."""
    m = len(ids)
    heads = run_heads(row_module, row_pos)
    if len(heads) <= len(row_module) // 4:
        slot = module_slots(ids, row_module[heads])
        if (slot == m).any():
            raise KeyError(int(row_module[heads[np.flatnonzero(slot == m)[0]]]))
        a = row_pos[heads]
        b = row_pos[np.append(heads[1:], len(row_pos)) - 1] + 1
        order = np.lexsort((a, slot))
        slot, a, b = slot[order], a[order], b[order]
        # Merge overlapping or touching spans of one module (its rows in both directions).
        reach = np.maximum.accumulate(slot * (s_count + 1) + b)   # per slot, the furthest end so far
        new = np.ones(len(slot), dtype=bool)
        new[1:] = (slot[1:] != slot[:-1]) | (slot[1:] * (s_count + 1) + a[1:] > reach[:-1])
        first = np.flatnonzero(new)
        last = np.append(first[1:], len(slot)) - 1
        return slot[first], a[first], reach[last] - slot[first] * (s_count + 1)
    slot = module_slots(ids, row_module)
    if (slot == m).any():
        raise KeyError(int(row_module[np.flatnonzero(slot == m)[0]]))
    pm, pp = presence(slot, row_pos, m, s_count)
    new_run = np.ones(len(pm), dtype=bool)
    new_run[1:] = (pm[1:] != pm[:-1]) | (pp[1:] != pp[:-1] + 1)
    end_run = np.ones(len(pm), dtype=bool)
    end_run[:-1] = new_run[1:]
    return pm[new_run], pp[new_run], pp[end_run] + 1


def stretch_members(starts: np.ndarray, spans: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The modules present in each stretch [starts[k], starts[k + 1]), whose bounds include every
    span's ends: (their slots, ascending in each stretch, stretch after stretch; their count per
    stretch)."""
    slot, a, b = spans
    k0, k1 = np.searchsorted(starts, a), np.searchsorted(starts, b)
    length = k1 - k0
    total = int(length.sum())
    k = np.repeat(k0 - np.cumsum(length) + length, length) + np.arange(total)
    order = stable_order(k, len(starts))   # spans come by slot: slots stay ascending in a stretch
    return np.repeat(slot, length)[order], np.bincount(k, minlength=len(starts))


def gather_index(ids: np.ndarray, mod: np.ndarray, pos: np.ndarray, starts: np.ndarray, t: np.ndarray,
                 members: np.ndarray, n: np.ndarray, buf: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """For one direction's rows, each cell's row (analysis.model.batch's order: stretch k over positions
    [starts[k], starts[k] + t[k]), its n[k] modules `members` in order, then snapshot) and the cells
    without one (their index is 0) -- what cell_places' scatter would fill -- when the rows come in
    one run of consecutive positions per module, modules ascending (as load_stretches has them);
    None when they do not (or there are none). `buf`: an int64 array of one per cell to write it to."""
    r = len(mod)
    if r == 0 or len(members) == 0:
        return None
    heads = run_heads(mod, pos)
    run_mod = mod[heads]
    if not (run_mod[1:] > run_mod[:-1]).all():
        return None
    m = len(ids)
    first, last = pos[heads], pos[np.append(heads[1:], r) - 1]
    run_of = np.full(m + 1, -1, dtype=np.int64)
    run_of[module_slots(ids, run_mod)] = np.arange(len(heads))
    run_of[m] = -1   # rows of modules not in `ids`: no cell
    k = np.repeat(np.arange(len(starts)), n)   # each block's stretch (a block: one module in one stretch)
    bt, b0 = t[k], starts[k]
    run = run_of[members]
    cell0 = np.cumsum(bt) - bt
    src0 = heads[run] + (b0 - first[run])
    whole = (run >= 0) & (first[run] <= b0) & (b0 + bt - 1 <= last[run])
    n_cells = int(bt.sum())
    # Consecutive cells of a block take consecutive rows: a running sum of steps of 1, each block
    # starting with the jump to its first row (in place: one array of one per cell).
    inv = np.ones(n_cells, dtype=np.int64) if buf is None else buf
    if buf is not None:
        inv.fill(1)
    inv[0] = src0[0]
    inv[cell0[1:]] = src0[1:] - src0[:-1] - bt[:-1] + 1
    np.cumsum(inv, out=inv)
    if whole.all():
        return inv, np.zeros(0, dtype=np.int64)
    part = np.flatnonzero(~whole)   # blocks the module's rows do not cover (or only in part)
    pl, pr = bt[part], run[part]
    cells = np.repeat(cell0[part] - np.cumsum(pl) + pl, pl) + np.arange(int(pl.sum()))
    at = cells - np.repeat(cell0[part] - b0[part], pl)   # each cell's position
    rr = np.repeat(pr, pl)
    held = (rr >= 0) & (first[rr] <= at) & (at <= last[rr])
    missing = cells[~held]
    inv[missing] = 0
    return inv, missing


def gather_counters(inv: np.ndarray, missing: np.ndarray, delta: np.ndarray, queued: np.ndarray, has: np.ndarray,
                    invalid: np.ndarray) -> dict[str, np.ndarray]:
    """fill_counters by gathering each cell's row (gather_index) instead of scattering rows to cells:
    the same arrays."""
    out = {}
    for f, src, dtype, none in (("tm", delta[:, 0], float, 0.0), ("wait", delta[:, 1], float, 0.0),
                                ("queued", queued, float, 0.0), ("errors", delta[:, 2], float, 0.0),
                                ("has_wait", has[:, 1], bool, False), ("has_queue", has[:, 2], bool, False),
                                ("has_errors", has[:, 3], bool, False), ("invalid", invalid, bool, True)):
        a = np.take(np.asarray(src, dtype=dtype), inv)
        a[missing] = none
        out[f] = a
    return out


def stretch_edges(starts: np.ndarray, members: np.ndarray, n: np.ndarray, m: int, e_ps: np.ndarray, e_cs: np.ndarray,
                  e_a: np.ndarray, e_b: np.ndarray) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Each stretch's edges as Stretch keeps them: (parent place, child place) among its `members`
    (n[k] slots < m per stretch k, ascending), sorted, once each. An edge (slots e_ps, e_cs; m = no
    module) lives in the stretches that start in [e_a, e_b); it counts where both ends are present.
    Returns (the edges of every stretch, one after the other; where each stretch's begin, and the end)."""
    k_count = len(starts)
    # A stretch's places keep the order of slots: edges by slots are by places in every stretch.
    by_slots = np.lexsort((e_cs, e_ps))
    e_ps, e_cs, e_a, e_b = e_ps[by_slots], e_cs[by_slots], e_a[by_slots], e_b[by_slots]
    k0, k1 = np.searchsorted(starts, e_a), np.searchsorted(starts, e_b)
    length = np.maximum(k1 - k0, 0)
    total = int(length.sum())
    k = np.repeat(k0 - np.cumsum(length) + length, length) + np.arange(total)
    edge = np.repeat(np.arange(len(e_a)), length)
    by_stretch = stable_order(k, k_count)   # stretch after stretch, edges still by slots
    k, edge = k[by_stretch], edge[by_stretch]
    # A module's place in a stretch: where (stretch, slot) is among the members' (stretch, slot).
    stride = m + 1
    key = np.repeat(np.arange(k_count, dtype=np.int64), n) * stride + members
    first = np.cumsum(n) - n

    def place(slots):
        want = k * stride + slots
        g = np.minimum(np.searchsorted(key, want), max(len(key) - 1, 0))
        return np.where(key[g] == want, g - first[k], -1) if len(key) else np.full(len(want), -1)

    lp, lc = place(e_ps[edge]), place(e_cs[edge])
    keep = (lp >= 0) & (lc >= 0)
    keep[1:] &= (k[1:] != k[:-1]) | (lp[1:] != lp[:-1]) | (lc[1:] != lc[:-1])   # an edge twice: once
    k, lp, lc = k[keep], lp[keep], lc[keep]
    # One tuple per distinct edge, shared by the stretches that have it (fewer objects to collect).
    width = int(n.max()) if len(n) else 0
    code = lp * width + lc
    if width * width <= _TABLE_CELLS:
        seen = np.zeros(width * width, dtype=bool)
        seen[code] = True
        distinct = np.flatnonzero(seen)
    else:
        distinct = np.unique(code)
    which = np.searchsorted(distinct, code)
    pairs = [(p, c) for p, c in zip((distinct // width).tolist(), (distinct % width).tolist(), strict=True)] \
        if width else []
    return list(map(pairs.__getitem__, which.tolist())), np.searchsorted(k, np.arange(k_count + 1))
