"""A plug-in file (docs/plugins.md): one rule idea written twice, on the simple interface (`waiting`)
and on the array interface (`waiting-array`). Both give the same diagnosis, cell for cell.

    nestlab --plugin docs/examples/waiting_plugin.py compare RUN --variant waiting --variant waiting-array

The idea: a module that moved nothing while it had work (it waited, or something sat in its queue)
is STALLED, unless one of its children (a lower layer) is stuck the same way: then the blame passes
down and it is BLOCKED (passdown=off: never). A module that moved something is HEALTHY; one with
no work, DONTCARE.
"""

import numpy as np

from nestlab.plugin import BLOCKED, DIRS, DONTCARE, HEALTHY, STALLED, Param, RuleSystem, on_off, simple_rule

PASSDOWN = Param("passdown", True, on_off, "BLOCKED when a child is stuck too (off: STALLED)")


# ------------------------------------------------------------------ the simple interface: one cell at a time

def stuck(c) -> bool:
    """No progress while there was work: it waited, or something sat in its queue."""
    return not c.tm > 0 and ((c.wait or 0) > 0 or (c.queued or 0) > 0)


def waiting(cell, passdown=True):
    """stalled when a module had work and moved nothing, unless a child is stuck too"""
    if cell.counters.tm > 0:
        return "HEALTHY"
    if not stuck(cell.counters):
        return "DONTCARE"
    if passdown and any(stuck(child.counters) for child in cell.children):
        return "BLOCKED"
    return "STALLED"


WAITING = simple_rule("waiting", waiting, params=(PASSDOWN,), contract=1)


# ------------------------------------------------------------------ the array interface: every cell at once

def waiting_array(batch, passdown=True):
    parents, children = batch.edges           # every edge of every snapshot, as cell indices
    out = {}
    for d in DIRS:
        c = batch.counters(d)                 # flat arrays over the batch's cells
        moved = c.tm > 0
        stuck_ = ~moved & ((c.has_wait & (c.wait > 0)) | (c.has_queue & (c.queued > 0)))
        blocked = np.zeros(batch.n_cells, dtype=bool)
        if passdown:
            np.logical_or.at(blocked, parents, stuck_[children])   # a child of the cell is stuck
        result = np.full(batch.n_cells, DONTCARE, dtype=np.int8)
        result[moved] = HEALTHY
        result[stuck_] = STALLED
        result[stuck_ & blocked] = BLOCKED
        out[d] = (result, result == STALLED)
    return out


WAITING_ARRAY = RuleSystem(name="waiting-array", kind="label", params=(PASSDOWN,), diagnose=waiting_array,
                           summary="waiting, on the array interface", contract=1)

variants = [WAITING, WAITING_ARRAY]   # what the lab loads from this file
