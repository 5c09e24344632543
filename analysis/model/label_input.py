"""The rows a labelling policy reads (analysis.labels), one per row of the counters' long frame
(analysis.load.counters_frame): for every row whether it holds no measurement, and, at the rows a
policy asks about, the snapshot's interval and whether the module was idle; per module and direction
its rows in snapshot order (a *series*).

Two sources, one interface:
- `ArrayRows`, the frame's columns, when the frame is made (a damaged run, a frame given);
- `StretchRows`, the stretches' flat counters (analysis.model.long_frame) while it is not: it makes in full
  only what every policy reads in full (which rows are invalid, one-way, after the run's end) and reads
  times and counters at the rows asked for, the series of a fault's targets and neighbours. A
  15-minute run has 1.8 M rows; a policy looks at a few series of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import pandas as pd

from analysis.model.long_frame import FrameRows
from analysis.model.stretches import DIRS


def _idle(tm: np.ndarray, has_wait: np.ndarray, wait: np.ndarray) -> np.ndarray:
    """Idle = no messages and no waiting (observations IDLE and NONE, NeST paper 5.2)."""
    return (tm == 0) & ~(has_wait & (wait > 0))


def _resent_only(tcp: np.ndarray, out: np.ndarray, tm: np.ndarray, errors: np.ndarray) -> np.ndarray:
    """TCP's outbound message counter (data segments out) counts retransmissions, its error counter
    counts them alone (harness/collector/sockdiag.py): new data = the difference."""
    return tcp & out & (tm - errors <= 0)


def label_rows(data) -> ArrayRows | StretchRows:
    get = getattr(data, "counter_stretches", None)
    stretches = get() if get is not None else None
    if stretches:
        rows = FrameRows(stretches)
        if rows.in_series_order:
            return StretchRows(data, rows)
    return ArrayRows(data)


class ArrayRows:
    """The frame's columns as arrays."""

    def __init__(self, data):
        c = data.counters
        self.module = c["module"].to_numpy(np.int64)
        self.out = (c["dir"] == "out").to_numpy(bool)
        seq = c["seq"].to_numpy(np.int64)
        snaps = data.snapshots
        self._t_end = snaps["mono"].reindex(seq).to_numpy(float)
        self._t_start = snaps["start"].reindex(seq).to_numpy(float)
        idle = _idle(c["tm"].to_numpy(float), c["has_wait"].to_numpy(bool), c["wait"].to_numpy(float))
        tcp = np.isin(self.module, data.modules.index[data.modules["kind"] == "tcp"].to_numpy(np.int64))
        self._idle = {False: idle, True: idle | _resent_only(tcp, self.out, c["tm"].to_numpy(float),
                                                             c["errors"].to_numpy(float))}
        self.invalid = c["invalid"].to_numpy(bool)
        self.n = len(self.module)
        self.index = c.index
        order = np.lexsort((seq, self.out, self.module))
        key = self.module[order] * 2 + self.out[order]
        cuts = np.flatnonzero(np.diff(key)) + 1
        self.series: Mapping[tuple[int, bool], np.ndarray] = {}
        for part in np.split(order, cuts) if len(order) else []:
            self.series[(int(self.module[part[0]]), bool(self.out[part[0]]))] = part

    def t_start(self, rows: np.ndarray) -> np.ndarray:
        return self._t_start[rows]

    def t_end(self, rows: np.ndarray) -> np.ndarray:
        return self._t_end[rows]

    def idle(self, rows: np.ndarray, progress: bool = False) -> np.ndarray:
        """Idle at `rows`; progress=True: or a TCP module's outbound sent only retransmissions."""
        return self._idle[progress][rows]

    def oneway(self, up: np.ndarray, down: np.ndarray) -> np.ndarray:
        """Rows of modules in `up` inbound and of those in `down` outbound."""
        return (np.isin(self.module, up) & ~self.out) | (np.isin(self.module, down) & self.out)

    def after(self, stop: float) -> np.ndarray:
        """Rows whose snapshot ends after `stop`."""
        return self._t_end > stop


class _Series(Mapping):
    """(module, out?) -> its frame rows in snapshot order, each made when asked for from its blocks
    (a module's cells in one stretch and direction: consecutive rows)."""

    def __init__(self, keys: np.ndarray, starts: np.ndarray, lens: np.ndarray):
        cut = np.flatnonzero(np.diff(keys)) + 1
        lo, hi = np.concatenate([[0], cut]), np.concatenate([cut, [len(keys)]])
        self._at = {(int(k) >> 1, bool(int(k) & 1)): (a, b)
                    for k, a, b in zip(keys[lo].tolist(), lo.tolist(), hi.tolist(), strict=True)}
        self._starts, self._lens = starts, lens

    def __getitem__(self, key) -> np.ndarray:
        a, b = self._at[key]
        starts, lens = self._starts[a:b], self._lens[a:b]
        if b - a == 1:
            return np.arange(starts[0], starts[0] + lens[0], dtype=np.int64)
        first = np.cumsum(lens) - lens
        return np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(starts - first, lens)

    def __iter__(self) -> Iterator:
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._at)


class StretchRows:
    """The same, from the stretches' flat counters (analysis.model.long_frame.FrameRows, in series order)."""

    def __init__(self, data, rows: FrameRows):
        self.rows = rows
        self.n = rows.total
        self.index = pd.RangeIndex(rows.total)
        snaps = data.snapshots
        self._mono = snaps["mono"].reindex(rows.seqs).to_numpy(float)     # per place in rows.seqs
        self._start = snaps["start"].reindex(rows.seqs).to_numpy(float)
        self._tcp = data.modules.index[data.modules["kind"] == "tcp"].to_numpy(np.int64)
        self.invalid = rows.counter("invalid")
        k, first, mods = rows.blocks
        self._block_k, self._block_first, self._block_mod = k, first, mods
        offsets = rows.batch.offsets[:-1]
        # Each block in frame rows: stretch k's rows are its 'in' cells, then its 'out' cells.
        keys = np.concatenate([mods * 2 + di for di in range(len(DIRS))])
        starts = np.concatenate([first + offsets[k] + di * rows.size[k] for di in range(len(DIRS))])
        lens = np.concatenate([rows.t[k]] * len(DIRS))
        order = np.argsort(keys, kind="stable")   # a module's blocks stay in stretch order: by snapshot
        self.series = _Series(keys[order], starts[order], lens[order])
        self._frame_first = 2 * offsets          # stretch k's first frame row
        self._place0 = np.cumsum(rows.t) - rows.t   # stretch k's first place in rows.seqs

    def _where(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(stretch, is out, cell of its direction, snapshot's place in rows.seqs) of frame rows."""
        r = self.rows
        k = np.searchsorted(self._frame_first, rows, side="right") - 1
        local = rows - self._frame_first[k]
        out = local >= r.size[k]
        local = local - np.where(out, r.size[k], 0)
        return k, out, r.batch.offsets[k] + local, self._place0[k] + local % r.t[k]

    def t_start(self, rows: np.ndarray) -> np.ndarray:
        return self._start[self._where(rows)[3]]

    def t_end(self, rows: np.ndarray) -> np.ndarray:
        return self._mono[self._where(rows)[3]]

    def idle(self, rows: np.ndarray, progress: bool = False) -> np.ndarray:
        k, out, cell, _ = self._where(rows)
        got = np.zeros(len(rows), dtype=bool)
        for di, d in enumerate(DIRS):
            sel = np.flatnonzero(out == bool(di))
            if not len(sel):
                continue
            c, at = self.rows.batch.counters(d), cell[sel]
            idle = _idle(c.tm[at], c.has_wait[at], c.wait[at])
            if progress and d == "out":
                block = np.searchsorted(self._block_first, at, side="right") - 1
                tcp = np.isin(self._block_mod[block], self._tcp)
                idle |= _resent_only(tcp, np.ones(len(sel), dtype=bool), c.tm[at], c.errors[at])
            got[sel] = idle
        return got

    def oneway(self, up: np.ndarray, down: np.ndarray) -> np.ndarray:
        per_block = {d: np.isin(self._block_mod, up if d == "in" else down) for d in DIRS}
        return self.rows.spread({d: np.repeat(per_block[d], self.rows.t[self._block_k]) for d in DIRS})

    def after(self, stop: float) -> np.ndarray:
        late = self._mono > stop
        per_cell = late[self.rows.cell_snapshot]
        return self.rows.spread({d: per_cell for d in DIRS})
