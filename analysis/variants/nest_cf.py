"""NeST certainty factors (paper section 3), vectorised over the cells of a run, some 100,000 at a time.

1. Activity state per module (Table 2): ACT (messages), WAIT / IDLE (wait counter grew / did not),
   and for modules without a wait counter ANW (a parent is WAIT or ANW), IGN (every parent is IDLE
   or IGN; a module with no parent is never IGN) or NONE. ANW and IGN propagate from parents, to
   their least fixed point (on a graph with cycles too).
   "Never IGN without a parent" is this system's form of FlowDiagnoser's "roots have work": a
   root is not taken as quiet. A *detached* module (analysis.model.stretches.Stretch: its upper layer is
   known elsewhere in the run, not here -- a TCP connection before the interceptor has reported
   its socket, or after close() while it lingers) is not a true root: with no known upper layer
   there is no demand on it, and "every parent is IDLE or IGN" holds (vacuously), so it is IGN
   like a connection under an idle socket, rather than NONE, which DT_OUT/DT_IN blame.
2. Extra observations: QZ / QNZ (the module's queue in that direction is empty / not) only for
   inactive modules (not ACT or WAIT) that report a queue; ERR when the error counter grew.
3. Phase one: for every edge (X parent, Y child) and every pair of observations, DT_OUT[B_X][B_Y]
   (X produces) and DT_IN[B_Y][B_X] (Y produces) give two certainty factors, folded into X's and
   Y's diagnosis with parallel_combine (Figure 3).
4. Phase two: for an edge whose two ends both wait (WAIT, ANW or NONE), X is absolved with ◀ = -0.6
   once for every other waiting parent of Y.
Positive = certainty factor (rounded to 1e-9) above `threshold`.

parallel_combine is addition in disguise: with L(x) = -ln(1 - x) for x >= 0 and ln(1 + x) for
x < 0, L(a ⊕ b) = L(a) + L(b) for every case of Figure 3 (±1 map to ±inf). So the fold does not
depend on the order of the edges, and is computed here as one sum per module. The one case the
paper leaves undefined, +1 ⊕ -1, is taken as total conflict: the result is 0, whatever else is
combined with it (absorbing, so the order stays irrelevant).

Switches (paper Table 8): anw=off and ign=off replace those states with NONE; queues=off drops QZ
and QNZ; errors=off drops ERR.
"""

from __future__ import annotations

import numpy as np

from analysis.model.batch import Batch
from analysis.model.stretches import DIRS, Counters
from analysis.variants.base import Param, RuleSystem, certainty, on_off
from analysis.variants.nest_cf_tables import (
    ABSENT,
    ABSOLVE_CO_PARENT,
    ACT,
    ANW,
    ERR,
    IDLE,
    IGN,
    NONE,
    QNZ,
    QZ,
    WAIT,
    arrays,
)

SIGMA = {d: arrays(d) for d in DIRS}
ROUND = 9  # decimals kept before comparing with the threshold: no sign from rounding noise


def to_sum(cf: np.ndarray) -> np.ndarray:
    """Certainty factor -> the additive scale of parallel_combine (±1 -> ±inf)."""
    cf = np.asarray(cf, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(cf >= 0, -np.log1p(-np.abs(cf)), np.log1p(-np.abs(cf)))


def from_sum(total: np.ndarray) -> np.ndarray:
    """The additive scale -> certainty factor: -expm1(-total) where total >= 0, else expm1(total)
    (one expm1 per element: of -total or total, negated after for the first)."""
    total = np.asarray(total)
    if total.dtype.kind != "f":   # (integers: the plain formula; -0 is 0 there)
        return np.where(total >= 0, -np.expm1(-total), np.expm1(total))
    up = total >= 0
    out = np.negative(total, where=up, out=total.copy())
    np.expm1(out, out=out)
    return np.negative(out, where=up, out=out)


# The tables on the additive scale, flattened: [producer obs * (ABSENT + 1) + consumer obs] (NaN: no
# update), and ◀. An element taken from here is to_sum of the element of SIGMA, bit for bit.
_W = ABSENT + 1
LSIGMA = {d: tuple(to_sum(t).ravel() for t in SIGMA[d]) for d in DIRS}
L_ABSOLVE = float(to_sum(np.array(ABSOLVE_CO_PARENT)))
# The values the fold adds: 0.0 for no update (adding 0.0 changes no sum: x + 0.0 is x, and a sum
# from 0.0 is never -0.0), ±inf for ±1 as on the additive scale.
_ADD = {d: tuple(np.where(np.isnan(t), 0.0, t) for t in LSIGMA[d]) for d in DIRS}


def combine(values: np.ndarray, cells: np.ndarray, n: int) -> np.ndarray:
    """parallel_combine of every value into its cell (0 where a cell gets nothing; NaN: no value), as
    a sum on the additive scale in the order given (the fold of the module docstring; diagnose's _fold
    does the same a piece at a time). A cell with a +1 sums to +inf, so from_sum makes it 1.0 (-1
    likewise); one with both sums to NaN (inf - inf): total conflict, 0. The finite sums of the other
    cells are those of the finite values alone, to the last bit."""
    sums = to_sum(values)
    return _total_cf(np.bincount(cells, weights=np.where(np.isnan(sums), 0.0, sums), minlength=n))


def _total_cf(total: np.ndarray) -> np.ndarray:
    """Certainty factors of per-cell sums on the additive scale; NaN (+inf and -inf: total conflict) -> 0."""
    with np.errstate(invalid="ignore"):
        cf = from_sum(total)
    cf[np.isnan(total)] = 0.0
    return cf


def _least_fixed_point(n: int, ep: np.ndarray, ec: np.ndarray, seed: np.ndarray, open_: np.ndarray,
                       every: bool = False) -> np.ndarray:
    """The least set S of cells in `open_` such that a cell is in S when one of its parents (every
    False) or every parent (every True) is in `seed` or in S. It only grows, so a round that adds
    nothing ends it; only edges into open cells count. `ep`, `ec` must hold every edge into an open
    cell (a superset is fine): "every parent" is "no edge into the cell misses"."""
    into = open_[ec]
    ep, ec = ep[into], ec[into]
    fixed = seed[ep]
    member = np.zeros(n, dtype=bool)
    size = -1
    while True:
        hit = fixed | member[ep]
        if every:
            missed = np.zeros(n, dtype=bool)
            missed[ec[~hit]] = True
            new = open_ & ~missed
        else:
            new = np.zeros(n, dtype=bool)
            new[ec[hit]] = True
        count = int(np.count_nonzero(new))
        if count == size:
            return member
        member, size = new, count


def states(batch: Batch, d: str, anw: bool = True, ign: bool = True) -> np.ndarray:
    """Activity state code of every cell (paper Table 2)."""
    ep, ec = batch.edges
    return _states(batch.counters(d), ep, ec, _rooted(batch) if ign else None, anw, ign)


def _rooted(batch: Batch) -> np.ndarray:
    """Per cell: the module has a parent or is detached (IGN needs one or the other)."""
    return batch.has_parent | batch.detached


def _states(c: Counters, ep: np.ndarray, ec: np.ndarray, rooted: np.ndarray | None, anw: bool,
            ign: bool) -> np.ndarray:
    """`states` of some cells: their counters, the edges between them (every edge into them), and
    `rooted` (_rooted; needed with ign)."""
    active = c.tm > 0
    st = np.where(c.has_wait, np.where(c.wait > 0, np.int8(WAIT), np.int8(IDLE)), np.int8(NONE))
    st[active] = ACT
    free = ~active & ~c.has_wait  # the modules whose state comes from their parents (tm is never negative)
    if not (anw or ign):
        return st
    into = free[ec]   # both fixed points look only at edges into free cells: select them once
    ep, ec = ep[into], ec[into]
    n = len(st)
    if anw:  # least fixed point: grows from nothing, one layer per round
        st[_least_fixed_point(n, ep, ec, st == WAIT, free)] = ANW
    if ign:
        candidate = free & (st == NONE) & rooted
        st[_least_fixed_point(n, ep, ec, st == IDLE, candidate, every=True)] = IGN
    return st


def observations(batch: Batch, d: str, anw=True, ign=True, queues=True, errors=True) -> np.ndarray:
    """(3, cells): slot 0 the activity state, slot 1 QZ/QNZ, slot 2 ERR; ABSENT where none."""
    return _observations(batch.counters(d), states(batch, d, anw, ign), queues, errors)


def _observations(c: Counters, st: np.ndarray, queues: bool, errors: bool) -> np.ndarray:
    obs = np.full((3, len(st)), ABSENT, dtype=np.int8)
    obs[0] = st
    if queues:
        seen = c.has_queue & (st != ACT) & (st != WAIT)   # inactive modules' queues
        obs[1][seen] = QZ
        obs[1][seen & (c.queued > 0)] = QNZ
    if errors:
        obs[2][c.has_errors & (c.errors > 0)] = ERR
    return obs


CHUNK = 1 << 17   # cells per piece (whole stretches): its arrays stay small, in cache


def _pieces(batch: Batch) -> list[tuple[int, int, int, int]]:
    """(first stretch, end stretch, first cell, end cell) of runs of whole stretches of about CHUNK
    cells, in order. No edge leaves its stretch, so each run can be diagnosed on its own."""
    def make() -> list[tuple[int, int, int, int]]:
        ends = batch.offsets[1:].tolist()
        out, k0, c0 = [], 0, 0
        for k, c1 in enumerate(ends):
            if c1 - c0 >= CHUNK or k == len(ends) - 1:
                out.append((k0, k + 1, c0, c1))
                k0, c0 = k + 1, c1
        return out
    return batch.shared("nest_cf_pieces", make)


def diagnose(batch: Batch, anw=True, ign=True, queues=True, errors=True, threshold=0.0):
    """Certainty factors, a few stretches at a time (_pieces): a piece's states, observations and
    fold need only its own cells and edges (made for the piece: Batch.piece_edges), so the arrays
    stay the size of a piece and the run's edges are never made at once."""
    cf = {d: np.empty(batch.n_cells) for d in DIRS}
    counters = {d: batch.counters(d) for d in DIRS}
    rooted = _rooted(batch) if ign else None
    for k0, k1, ca, cb in _pieces(batch):
        x, y = batch.piece_edges(k0, k1)
        cut = slice(ca, cb)
        for d in DIRS:
            c = Counters(*(getattr(counters[d], f)[cut] for f in Counters.__dataclass_fields__))
            st = _states(c, x, y, None if rooted is None else rooted[cut], anw, ign)
            cf[d][cut] = _fold(x, y, _observations(c, st, queues, errors), d)
    return {d: (cf[d], np.round(cf[d], ROUND) > threshold) for d in DIRS}


def _fold(x: np.ndarray, y: np.ndarray, obs: np.ndarray, d: str) -> np.ndarray:
    """Certainty factor of one direction of some cells: their observations and the edges between
    them (x parent, y child; every edge touching them).

    On the additive scale throughout (LSIGMA: to_sum of each table cell, taken once), with the
    values in the order the fold has always had them (slot pairs, then edges), so that each cell's
    sum is the same to the last bit whatever the speed-ups (an element-wise to_sum of every value
    gives the same numbers, at many times the cost). np.add.at adds the values one by one in the
    order given, as one bincount over all of them in that order would, so each block of values is
    added where it is made. A piece of whole stretches (diagnose) gives each of its cells the
    values, in the same order, that the whole run does: they all come from its own stretch."""
    n = obs.shape[1]
    total = np.zeros(n)
    slots = [i for i in range(3) if (obs[i] != ABSENT).any()]
    # Each cell's observation scaled as the table's row (producer) or column (consumer); the sum of
    # two is an index into the flattened table (at most 99: int8).
    row_p, col_c = (_W, 1) if d == "out" else (1, _W)
    as_p = {i: obs[i] * np.int8(row_p) for i in slots}
    as_c = {j: obs[j] * np.int8(col_c) for j in slots}
    seen = {i: obs[i] != ABSENT for i in slots if i}   # slot 0 (the state) is never ABSENT
    fx, fy = _ADD[d] if d == "out" else _ADD[d][::-1]   # "in": Y produces, X's value from sigma_C
    # Phase one: every pair of observations across every edge (X parent, Y child). The edges of
    # the pairs with slot i of X (i > 0) are picked once and then narrowed by Y's slot.
    hy = {j: seen[j][y] for j in seen}
    of_x = {i: np.flatnonzero(seen[i][x]) for i in seen}
    for i in slots:
        xi, yi = (x, y) if i == 0 else (x[of_x[i]], y[of_x[i]])
        for j in slots:
            if j == 0:
                xs, ys = xi, yi
            elif i == 0:
                xs, ys = x[hy[j]], y[hy[j]]
            else:
                k = seen[j][yi]
                xs, ys = xi[k], yi[k]
            if not len(xs):
                continue
            code = (as_p[i][xs] + as_c[j][ys]).astype(np.intp)
            np.add.at(total, xs, fx.take(code))
            np.add.at(total, ys, fy.take(code))
    # Phase two: absolve blocked co-parents, once per other waiting parent of the common child.
    st = obs[0]
    waiting = (st == WAIT) | (st == ANW) | (st == NONE)
    w_edge = waiting[x]
    n_waiting = np.bincount(y[w_edge], minlength=n)
    both = np.flatnonzero(w_edge & waiting[y])   # few edges: the others absolve nothing
    np.add.at(total, np.repeat(x[both], n_waiting[y[both]] - 1), L_ABSOLVE)
    return _total_cf(total)


SYSTEM = RuleSystem(
    name="nest-cf",
    kind="cf",
    summary="NeST certainty factors (paper section 3: activity states, DT_OUT/DT_IN, parallel_combine, "
            "two phases); positive = certainty above the threshold",
    params=(
        Param("anw", True, on_off, "ANW state (off: replaced by NONE, paper Table 8)"),
        Param("ign", True, on_off, "IGN state (off: replaced by NONE)"),
        Param("queues", True, on_off, "QZ/QNZ observations from queue counters"),
        Param("errors", True, on_off, "ERR observation from error counters"),
        Param("threshold", 0.0, certainty, "positive when the certainty factor is above this"),
    ),
    diagnose=diagnose,
    presets=("nest-cf", "nest-cf:anw=off", "nest-cf:ign=off", "nest-cf:anw=off,ign=off",
             "nest-cf:queues=off", "nest-cf:errors=off"),
)
