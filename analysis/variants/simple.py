"""The simple interface for a rule prototype (docs/plugins.md): a plain Python function of one
module-snapshot cell, its counters and its graph neighbourhood, returning a label. The lab runs it
over every cell of the runs for the author, one call per cell: slow (about a microsecond-scale array
operation becomes a few microseconds of Python per cell; bench/bench_plugins.py measures it), and
exactly as scored as a system on the array interface.

    from nestlab.plugin import simple_rule

    def waiting(cell):
        if cell.counters.tm > 0:
            return "HEALTHY"
        return "STALLED" if cell.counters.wait else "DONTCARE"

    SYSTEM = simple_rule("waiting", waiting, summary="stalled when it waited and moved nothing", contract=1)

The function gets a Cell (below) and the variant's parameter values as keyword arguments, and returns
one of LABELS ("HEALTHY", "DONTCARE", "BLOCKED", "STALLED"; positive = STALLED) or a bool (True =
STALLED, False = HEALTHY).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis.model.stretches import DIRS
from analysis.variants.base import LABELS, STALLED, Param, RuleSystem


@dataclass(frozen=True)
class Counts:
    """One module's counters in one direction over one snapshot interval (thesis 3.4 deltas)."""

    tm: float                 # Δtotal_msgs: messages moved (a TCP connection: segments; an app: calls)
    wait: float | None        # Δwait_ms: ms spent waiting in the interval; None: no wait counter
    queued: float | None      # queued now (bytes of a TCP queue; tuples of a stream connection); None: none
    errors: float | None      # Δerrors; None: no error counter
    invalid: bool             # no valid delta here (a counter went back, first snapshot, missing row): not scored


@dataclass(frozen=True)
class Neighbour:
    module: Any               # run.db module id (an int; a str for JSON snapshots)
    kind: str                 # app | socket | tcp | ipeth | ip | eth | sconn
    counters: Counts          # in the same direction and snapshot as the cell


@dataclass(frozen=True)
class Cell:
    """One module in one direction at one snapshot, with its neighbours at that snapshot."""

    module: Any
    kind: str
    dir: str                  # "in" | "out"
    seq: int                  # run.db snapshots.seq
    counters: Counts
    parents: tuple[Neighbour, ...]    # upper layers (an app above its socket, a socket above its TCP connection)
    children: tuple[Neighbour, ...]   # lower layers
    detached: bool            # no parent here, though it has one elsewhere in the run (docs/diagnosis.md)

    @property
    def root(self) -> bool:
        """A true top of the graph: no parent anywhere in the run."""
        return not self.parents and not self.detached


_CODE = {name: i for i, name in enumerate(LABELS)}


class SimpleDiagnose:
    """A RuleSystem's diagnose on the array interface that calls `rule(cell, **params)` per cell
    (a class, not a closure: it pickles by reference like the rule it wraps)."""

    def __init__(self, name: str, rule: Callable[..., str | bool]):
        self.name, self.rule = name, rule

    def __call__(self, batch, **params) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        out = {}
        for d in DIRS:
            parts = [self._stretch(st, d, params) for st in batch.stretches]
            res = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int8)
            out[d] = (res, res == STALLED)
        return out

    def _stretch(self, st, d: str, params: dict) -> np.ndarray:
        c = st.counters[d]
        cols = [a.tolist() for a in (c.tm, c.wait, c.has_wait, c.queued, c.has_queue, c.errors, c.has_errors,
                                     c.invalid)]
        tm, wait, has_wait, queued, has_queue, errors, has_errors, invalid = cols
        counts = [[Counts(tm[m][t], wait[m][t] if has_wait[m][t] else None,
                          queued[m][t] if has_queue[m][t] else None, errors[m][t] if has_errors[m][t] else None,
                          invalid[m][t]) for t in range(st.t)] for m in range(st.n)]
        parents = [[] for _ in range(st.n)]
        children = [[] for _ in range(st.n)]
        for p, ch in st.edges:
            parents[ch].append(p)
            children[p].append(ch)
        detached = st.detached.tolist()
        seqs = np.asarray(st.seqs).tolist()
        res = np.empty((st.n, st.t), dtype=np.int8)
        rule = self.rule
        for m in range(st.n):
            module, kind, row = st.modules[m], st.kinds[m], counts[m]
            for t in range(st.t):
                cell = Cell(module, kind, d, seqs[t], row[t],
                            tuple(Neighbour(st.modules[p], st.kinds[p], counts[p][t]) for p in parents[m]),
                            tuple(Neighbour(st.modules[k], st.kinds[k], counts[k][t]) for k in children[m]),
                            detached[m])
                res[m, t] = self._code(rule(cell, **params), cell)
        return res.ravel()

    def _code(self, label, cell: Cell) -> int:
        if isinstance(label, bool | np.bool_):
            return STALLED if label else 0
        try:
            return _CODE[label]
        except (KeyError, TypeError):
            raise ValueError(f"rule {self.name!r} returned {label!r} for module {cell.module} ({cell.kind}) "
                             f"{cell.dir} at seq {cell.seq}; expected one of {', '.join(LABELS)} or a bool") from None


def simple_rule(name: str, rule: Callable[..., str | bool], summary: str = "", params: tuple[Param, ...] = (),
                presets: tuple[str, ...] = (), contract: int | None = None) -> RuleSystem:
    """A label RuleSystem from a rule on the simple interface (module docstring)."""
    return RuleSystem(name=name, kind="label", summary=summary or (rule.__doc__ or name).strip().splitlines()[0],
                      params=tuple(params), diagnose=SimpleDiagnose(name, rule), presets=presets or (name,),
                      contract=contract)
