"""Many stretches as one flat array of module-snapshot *cells*, so a variant runs in a fixed number of
array operations however often the graph changes.

Cell (stretch k, module m, snapshot t) has index offsets[k] + m * T_k + t. Every edge (p, c) of a
stretch becomes T_k cell edges (p, t) -> (c, t): a diagnosis never looks across snapshots, only
along edges within one snapshot, so the whole run is one big graph of cells.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from analysis.stretches import Counters, Stretch


@dataclass
class Batch:
    stretches: list[Stretch]
    offsets: np.ndarray = field(init=False)  # (K + 1,) first cell of each stretch
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        sizes = [st.n * st.t for st in self.stretches]
        self.offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])

    @property
    def n_cells(self) -> int:
        return int(self.offsets[-1])

    def per_module(self, values: list[np.ndarray], dtype=None) -> np.ndarray:
        """Broadcast one value per module of each stretch to that module's cells."""
        if not self.stretches:
            return np.zeros(0, dtype=dtype)
        return np.concatenate([np.repeat(np.asarray(v, dtype=dtype), st.t)
                               for v, st in zip(values, self.stretches, strict=True)])

    def edge_cells(self, edges: list[list[tuple[int, int]]]) -> tuple[np.ndarray, np.ndarray]:
        """Cell edges (parent cells, child cells) for a list of edges per stretch, in order:
        stretch, then edge, then snapshot."""
        ps, cs = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
        for st, off, es in zip(self.stretches, self.offsets[:-1], edges, strict=True):
            if not es:
                continue
            e = np.asarray(es, dtype=np.int64)
            t = np.arange(st.t, dtype=np.int64)
            ps.append((off + e[:, :1] * st.t + t).ravel())
            cs.append((off + e[:, 1:] * st.t + t).ravel())
        return np.concatenate(ps), np.concatenate(cs)

    @cached_property
    def detached(self) -> np.ndarray:
        """Per cell: the module is detached in its stretch (analysis.stretches.Stretch.detached)."""
        return self.per_module([st.detached for st in self.stretches], dtype=bool)

    @cached_property
    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Every edge of the NS graph, as cell edges."""
        return self.edge_cells([st.edges for st in self.stretches])

    def counters(self, d: str) -> Counters:
        """One direction's counters, flattened to cells."""
        if d not in self._cache:
            names = Counters.__dataclass_fields__
            if self.stretches:
                self._cache[d] = Counters(*(np.concatenate([getattr(st.counters[d], f).ravel()
                                                            for st in self.stretches]) for f in names))
            else:  # no cells (a run whose collector saw no module): empty, with the right dtypes
                self._cache[d] = Counters(*(a.ravel() for a in vars(Counters.empty(0, 0)).values()))
        return self._cache[d]

    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        """Cut a flat per-cell array back into modules x snapshots arrays, one per stretch."""
        return [flat[a:b].reshape(st.n, st.t)
                for st, a, b in zip(self.stretches, self.offsets[:-1], self.offsets[1:], strict=True)]

