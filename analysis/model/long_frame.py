"""The counters' long frame (analysis.load.counters_frame) as arrays made straight from the stretches,
for readers that want a few of its columns over millions of rows without the frame itself (the
labels, the network health).

The frame's rows are stretch by stretch, direction by direction ('in', then 'out'), module by module,
snapshot by snapshot. A stretch's counters are (modules, snapshots) arrays, and those of a whole run
lie back to back per direction (analysis.model.batch.Batch: cell c of stretch k at offsets[k] + m * T_k + t),
so the frame row of direction d's cell c is c + offsets[k] + d * size_k: each column is one scatter
of the two directions' flat arrays, whatever the number of stretches.
"""

from __future__ import annotations

import itertools
from functools import cached_property

import numpy as np

from analysis.model.batch import Batch
from analysis.model.stretches import DIRS


def in_series_order(stretches: list) -> bool:
    """Whether a module's cells, stretch after stretch, are its snapshots in order: seqs rise within and
    across the stretches (those with snapshots), and no stretch holds a module twice (always so for
    load_stretches'). Then a row of the frame is one module, direction and snapshot, once."""
    last = None
    for st in stretches:
        if not st.t:
            continue
        if (last is not None and st.seqs[0] <= last) or np.any(np.diff(st.seqs) <= 0):
            return False
        if len(set(st.modules)) != st.n:
            return False
        last = st.seqs[-1]
    return True


class FrameRows:
    """Columns of counters_frame(run) for `stretches` (those with cells, in order), made on demand."""

    def __init__(self, stretches: list):
        self.stretches = [st for st in stretches if st.n * st.t]
        self.batch = Batch(self.stretches)
        n = np.array([st.n for st in self.stretches], dtype=np.int64)
        t = np.array([st.t for st in self.stretches], dtype=np.int64)
        self.n, self.t, self.size = n, t, n * t
        self.cells = self.batch.n_cells           # per direction
        self.total = len(DIRS) * self.cells
        self._rows: dict[str, np.ndarray] = {}

    @cached_property
    def in_series_order(self) -> bool:
        """in_series_order(the stretches): series_cells and analysis.model.label_input need it."""
        return in_series_order(self.stretches)

    # ------------------------------------------------------------------ layout

    @cached_property
    def blocks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per (stretch, module) block of cells: its stretch, its first cell, its module id."""
        k = np.repeat(np.arange(len(self.stretches), dtype=np.int64), self.n)
        local = np.arange(len(k), dtype=np.int64) - np.repeat(np.cumsum(self.n) - self.n, self.n)
        first = self.batch.offsets[:-1][k] + local * self.t[k]
        mods = np.fromiter(itertools.chain.from_iterable(st.modules for st in self.stretches), dtype=np.int64,
                           count=len(k))
        return k, first, mods

    def rows_of(self, d: str) -> np.ndarray:
        """The frame row of each of direction d's cells."""
        if d not in self._rows:
            shift = self.batch.offsets[:-1] + (DIRS.index(d) * self.size)
            self._rows[d] = np.arange(self.cells, dtype=np.int64) + np.repeat(shift, self.size)
        return self._rows[d]

    @cached_property
    def cell_module(self) -> np.ndarray:
        """Per cell (one direction): its module id."""
        k, _, mods = self.blocks
        return np.repeat(mods, self.t[k])

    @cached_property
    def cell_snapshot(self) -> np.ndarray:
        """Per cell (one direction): its snapshot's place in `seqs` (the stretches' seqs, concatenated)."""
        k, first, _ = self.blocks
        lens = self.t[k]
        base = (np.cumsum(self.t) - self.t)[k]            # the stretch's first place in `seqs`
        return np.arange(self.cells, dtype=np.int64) + np.repeat(base - first, lens)

    @cached_property
    def seqs(self) -> np.ndarray:
        return np.concatenate([np.asarray(st.seqs) for st in self.stretches]) if self.stretches else \
            np.zeros(0, dtype=np.int64)

    def series_cells(self, modules: np.ndarray) -> np.ndarray:
        """The cells (of one direction) of the given modules, by module, then snapshot."""
        k, first, mods = self.blocks
        pick = np.flatnonzero(np.isin(mods, modules))
        pick = pick[np.argsort(mods[pick], kind="stable")]   # stretch order kept: by snapshot
        lens = self.t[k[pick]]
        start = np.cumsum(lens) - lens
        return np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(first[pick] - start, lens)

    # ------------------------------------------------------------------ columns, in frame order

    def spread(self, per_dir: dict[str, np.ndarray]) -> np.ndarray:
        """One frame column from a per-cell array of each direction."""
        out = np.empty(self.total, dtype=per_dir[DIRS[0]].dtype)
        for d in DIRS:
            out[self.rows_of(d)] = per_dir[d]
        return out

    def counter(self, name: str) -> np.ndarray:
        """A counters column (tm, wait, has_wait, queued, has_queue, errors, invalid) in frame order."""
        return self.spread({d: getattr(self.batch.counters(d), name) for d in DIRS})
