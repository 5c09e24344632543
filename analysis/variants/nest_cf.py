"""NeST certainty factors (paper section 3), vectorised over every cell of a run at once.

1. Activity state per module (Table 2): ACT (messages), WAIT / IDLE (wait counter grew / did not),
   and for modules without a wait counter ANW (a parent is WAIT or ANW), IGN (every parent is IDLE
   or IGN; a module with no parent is never IGN) or NONE. ANW and IGN propagate from parents, to
   their least fixed point (on a graph with cycles too).
   "Never IGN without a parent" is this system's form of FlowDiagnoser's "roots have work": a
   root is not taken as quiet. A *detached* module (analysis.stretches.Stretch: its upper layer is
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

from analysis.cells import Batch
from analysis.stretches import DIRS
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
    with np.errstate(divide="ignore"):
        return np.where(cf >= 0, -np.log1p(-np.abs(cf)), np.log1p(-np.abs(cf)))


def from_sum(total: np.ndarray) -> np.ndarray:
    """The additive scale -> certainty factor."""
    return np.where(total >= 0, -np.expm1(-total), np.expm1(total))


def combine(values: np.ndarray, cells: np.ndarray, n: int) -> np.ndarray:
    """parallel_combine of every value into its cell (0 where a cell gets nothing)."""
    ok = ~np.isnan(values)
    values, cells = values[ok], cells[ok]
    pos = np.bincount(cells, weights=values == 1, minlength=n) > 0
    neg = np.bincount(cells, weights=values == -1, minlength=n) > 0
    finite = np.abs(values) < 1
    total = np.bincount(cells[finite], weights=to_sum(values[finite]), minlength=n)
    return np.where(pos & neg, 0.0, np.where(pos, 1.0, np.where(neg, -1.0, from_sum(total))))


def states(batch: Batch, d: str, anw: bool = True, ign: bool = True) -> np.ndarray:
    """Activity state code of every cell (paper Table 2)."""
    c = batch.counters(d)
    st = np.where(c.tm > 0, ACT, np.where(c.has_wait, np.where(c.wait > 0, WAIT, IDLE), NONE)).astype(np.int8)
    ep, ec = batch.edges
    free = (c.tm == 0) & ~c.has_wait  # the modules whose state comes from their parents
    n = batch.n_cells
    if anw:  # least fixed point: grows from nothing, one layer per round
        is_anw = np.zeros(n, dtype=bool)
        while True:
            new = np.zeros(n, dtype=bool)
            new[ec[(st[ep] == WAIT) | is_anw[ep]]] = True
            new &= free
            if np.array_equal(new, is_anw):
                break
            is_anw = new
        st[is_anw] = ANW
    if ign:
        n_parents = np.bincount(ec, minlength=n)
        candidate = free & (st == NONE) & ((n_parents > 0) | batch.detached)
        is_ign = np.zeros(n, dtype=bool)
        while True:
            quiet = np.bincount(ec, weights=(st[ep] == IDLE) | is_ign[ep], minlength=n)
            new = candidate & (quiet == n_parents)
            if np.array_equal(new, is_ign):
                break
            is_ign = new
        st[is_ign] = IGN
    return st


def observations(batch: Batch, d: str, anw=True, ign=True, queues=True, errors=True) -> np.ndarray:
    """(3, cells): slot 0 the activity state, slot 1 QZ/QNZ, slot 2 ERR; ABSENT where none."""
    c = batch.counters(d)
    st = states(batch, d, anw, ign)
    obs = np.full((3, len(st)), ABSENT, dtype=np.int8)
    obs[0] = st
    if queues:
        inactive = (st != ACT) & (st != WAIT)
        obs[1] = np.where(c.has_queue & inactive, np.where(c.queued > 0, QNZ, QZ), ABSENT)
    if errors:
        obs[2] = np.where(c.has_errors & (c.errors > 0), ERR, ABSENT)
    return obs


def diagnose_direction(batch: Batch, d: str, anw=True, ign=True, queues=True, errors=True) -> np.ndarray:
    """Certainty factor of every cell for one direction."""
    obs = observations(batch, d, anw, ign, queues, errors)
    sp, sc = SIGMA[d]
    ep, ec = batch.edges
    vals, cells = [], []
    slots = [i for i in range(3) if (obs[i] != ABSENT).any()]
    for i in slots:  # phase one: every pair of observations across every edge
        for j in slots:
            bx, by = obs[i][ep], obs[j][ec]
            both = (bx != ABSENT) & (by != ABSENT)
            bx, by, x, y = bx[both], by[both], ep[both], ec[both]
            if d == "out":  # X produces
                vals += [sp[bx, by], sc[bx, by]]
            else:  # Y produces
                vals += [sc[by, bx], sp[by, bx]]
            cells += [x, y]
    # Phase two: absolve blocked co-parents, once per other waiting parent of the common child.
    st = obs[0]
    waiting = (st == WAIT) | (st == ANW) | (st == NONE)
    n_waiting = np.bincount(ec, weights=waiting[ep], minlength=batch.n_cells).astype(np.int64)
    others = np.where(waiting[ep] & waiting[ec], n_waiting[ec] - 1, 0)
    rep = np.repeat(ep, others)
    vals.append(np.full(len(rep), ABSOLVE_CO_PARENT))
    cells.append(rep)
    return combine(np.concatenate(vals), np.concatenate(cells), batch.n_cells)


def diagnose(batch: Batch, anw=True, ign=True, queues=True, errors=True, threshold=0.0):
    out = {}
    for d in DIRS:
        cf = diagnose_direction(batch, d, anw, ign, queues, errors)
        out[d] = (cf, np.round(cf, ROUND) > threshold)
    return out


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
