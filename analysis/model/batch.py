"""Many stretches as one flat array of module-snapshot *cells*, so a variant runs in a fixed number of
array operations however often the graph changes.

Cell (stretch k, module m, snapshot t) has index offsets[k] + m * T_k + t. Every edge (p, c) of a
stretch becomes T_k cell edges (p, t) -> (c, t): a diagnosis never looks across snapshots, only
along edges within one snapshot, so the whole run is one big graph of cells.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

import numpy as np

from analysis.model.dense import flat_view
from analysis.model.engine_metrics import EngineMetrics
from analysis.model.stretches import KINDS, Counters, Stretch

T = TypeVar("T")


def _readonly(a: np.ndarray) -> np.ndarray:
    view = a.view()
    view.flags.writeable = False
    return view


def _flat(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays flattened into one, in order: a read-only view when they lie back to back in one
    buffer (analysis.model.dense.flat_view), else a copy."""
    view = flat_view(arrays)
    return np.concatenate([a.ravel() for a in arrays]) if view is None else _readonly(view)


def _cell_edges(arrays: list[np.ndarray], ts: list[int], starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cell edges of stretches with these (E, 2) edge arrays, snapshot counts and first cells."""
    lens = [len(a) for a in arrays]
    if not sum(lens):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return _edges_cells(np.concatenate(arrays), np.repeat(np.asarray(ts, dtype=np.int64), lens),
                        np.repeat(np.asarray(starts, dtype=np.int64), lens))


def _edges_cells(e: np.ndarray, t: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cell edges of edges e (E, 2) whose stretches have t snapshots and first cell `start` (per
    edge), in order: edge, then snapshot."""
    # Cell edge i of stretch edge j is (first cell of j's module) + (i - first cell edge of j): the
    # constant part per stretch edge, repeated, plus one shared arange (fewer passes).
    base = start - (np.cumsum(t) - t)
    at = np.arange(int(t.sum()), dtype=np.int64)
    ends = []
    for col in (0, 1):
        out = np.repeat(base + e[:, col] * t, t)
        out += at
        ends.append(out)
    return ends[0], ends[1]


@dataclass
class Batch:
    stretches: list[Stretch]
    # Where the stretches come from (a run directory, a JSON file), for errors that name it; None for
    # stretches made in memory.
    source: str | None = None
    # A streams run's engine metrics (flink-backpressure reads them): the loaded run's
    # (RunStretches.engine_metrics), or given with stretches made in memory; None: the stretches come
    # from no run (JSON snapshots; in memory, none given).
    engine_metrics: EngineMetrics | None = None
    offsets: np.ndarray = field(init=False)  # (K + 1,) first cell of each stretch
    _flat_counters: dict[str, Counters] = field(default_factory=dict, init=False, repr=False)
    _shared: dict[str, object] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        sizes = [st.n * st.t for st in self.stretches]
        self.offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])

    def shared(self, key: str, make: Callable[[], T]) -> T:
        """What `make()` returns, made once per batch under `key` and shared by the variants that ask
        for it (the variants of one system, e.g. flowdiagnoser:theta=1 and theta=2, diagnose the same
        batch). A key is one variant module's, holding one type, which that module reads through its
        own typed accessor (e.g. analysis.variants.flowdiagnoser._cells)."""
        if key not in self._shared:
            self._shared[key] = make()
        return self._shared[key]  # type: ignore[return-value]

    @property
    def n_cells(self) -> int:
        return int(self.offsets[-1])

    def per_module(self, values: list[np.ndarray], dtype=None) -> np.ndarray:
        """Broadcast one value per module of each stretch to that module's cells."""
        if not self.stretches:
            return np.zeros(0, dtype=dtype)
        flat = np.concatenate([np.asarray(v, dtype=dtype).ravel() for v in values])
        if len(values) != len(self.stretches) or len(flat) != len(self.module_t):
            raise ValueError("per_module: one value per module of each stretch")
        return np.repeat(flat, self.module_t)   # one repeat, not one per stretch

    @cached_property
    def module_t(self) -> np.ndarray:
        """Per module of each stretch, in cell order: its number of snapshots (cells)."""
        return np.repeat(np.array([st.t for st in self.stretches], dtype=np.int64),
                         [st.n for st in self.stretches])

    def edge_cells(self, edges: list[list[tuple[int, int]]]) -> tuple[np.ndarray, np.ndarray]:
        """Cell edges (parent cells, child cells) for a list of edges per stretch, in order:
        stretch, then edge, then snapshot."""
        arrays = [a if es is st.edges else np.asarray(es, dtype=np.int64).reshape(-1, 2)
                  for a, st, es in zip(self.edge_arrays, self.stretches, edges, strict=True)]
        return _cell_edges(arrays, [st.t for st in self.stretches], self.offsets[:-1])

    def stretch_edge_cells(self, e: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cell edges (parent cells, child cells) of edges e (E, 2), each of stretch k[i] (module
        indices of that stretch), in order: edge, then snapshot."""
        t = np.array([st.t for st in self.stretches], dtype=np.int64)[k]
        return _edges_cells(np.asarray(e, dtype=np.int64).reshape(-1, 2), t, self.offsets[k])

    def piece_edges(self, k0: int, k1: int) -> tuple[np.ndarray, np.ndarray]:
        """The cell edges of stretches k0..k1-1 (a slice of `edges`), numbered from their first cell
        (offsets[k0]): for work on a few stretches at a time, without the whole run's edges."""
        return _cell_edges(self.edge_arrays[k0:k1], [st.t for st in self.stretches[k0:k1]],
                           self.offsets[k0:k1] - self.offsets[k0])

    @cached_property
    def module_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Every edge of every stretch as an (E, 2) array of module rows (module m of stretch k is row
        mstarts[k] + m: the order of module_kinds), in order (stretch, then edge), and each edge's
        stretch."""
        lens = [len(a) for a in self.edge_arrays]
        k = np.repeat(np.arange(len(self.stretches)), lens)
        starts = np.concatenate([[0], np.cumsum([st.n for st in self.stretches], dtype=np.int64)])
        e = np.concatenate([np.zeros((0, 2), dtype=np.int64), *self.edge_arrays])
        return e + starts[k][:, None], k

    @cached_property
    def edge_arrays(self) -> list[np.ndarray]:
        """Stretch.edge_array of every stretch, each distinct edge list converted once (a run's
        stretches mostly repeat a few graphs; the conversion costs more than comparing the lists)."""
        memo: dict[tuple, np.ndarray] = {}
        out = []
        for st in self.stretches:
            key = tuple(st.edges)
            a = memo.get(key)
            if a is None:
                a = memo[key] = st.edge_array
            out.append(a)
        return out

    @cached_property
    def detached(self) -> np.ndarray:
        """Per cell: the module is detached in its stretch (analysis.model.stretches.Stretch.detached)."""
        return self.per_module([st.detached for st in self.stretches], dtype=bool)

    @cached_property
    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Every edge of the NS graph, as cell edges."""
        return self.edge_cells([st.edges for st in self.stretches])

    def counters(self, d: str) -> Counters:
        """One direction's counters, flattened to cells."""
        if d not in self._flat_counters:
            names = Counters.__dataclass_fields__
            shared = self._shared_flat(d)
            if shared is not None:   # load_stretches lays them out back to back: no copy (read-only)
                self._flat_counters[d] = Counters(*(_readonly(shared[f]) for f in names))
            elif self.stretches:
                self._flat_counters[d] = Counters(*(_flat([getattr(st.counters[d], f) for st in self.stretches])
                                                    for f in names))
            else:  # no cells (a run whose collector saw no module): empty, with the right dtypes
                self._flat_counters[d] = Counters(*(a.ravel() for a in vars(Counters.empty(0, 0)).values()))
        return self._flat_counters[d]

    def _shared_flat(self, d: str) -> dict[str, np.ndarray] | None:
        """The flat arrays of direction d when the stretches are consecutive pieces of one run's
        (Stretch.flat, as build_stretches made them and still holding them), else None."""
        marks = [st.flat for st in self.stretches]
        if not marks or any(m is None for m in marks):
            return None
        buffers, lo, hi = marks[0][0], marks[0][1], marks[-1][2]
        if any(m[0] is not buffers for m in marks) or any(a[2] != b[1] for a, b in zip(marks, marks[1:], strict=False)):
            return None
        if any(st.counters[d].tm.base is not buffers[d]["tm"] for st in self.stretches):
            return None   # counters replaced since
        return {f: a[lo:hi] for f, a in buffers[d].items()}

    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        """Cut a flat per-cell array back into modules x snapshots arrays, one per stretch."""
        return [flat[a:b].reshape(st.n, st.t)
                for st, a, b in zip(self.stretches, self.offsets[:-1], self.offsets[1:], strict=True)]

    # ------------------------------------------------------------ kinds, parents and groups of cells

    @cached_property
    def module_kinds(self) -> np.ndarray:
        """Per module of each stretch, in order: its kind as an index into
        analysis.model.stretches.KINDS (-1 if unknown). Each distinct kinds list is converted once (a
        run's stretches mostly repeat a few)."""
        code = {k: i for i, k in enumerate(KINDS)}
        memo: dict[tuple, np.ndarray] = {}
        parts = [np.zeros(0, dtype=np.int8)]
        for st in self.stretches:
            key = tuple(st.kinds)
            a = memo.get(key)
            if a is None:
                a = memo[key] = np.array([code.get(k, -1) for k in key], dtype=np.int8)
            parts.append(a)
        return np.concatenate(parts)

    @cached_property
    def kind_codes(self) -> np.ndarray:
        """Per cell: the module's kind as an index into analysis.model.stretches.KINDS (-1 if unknown)."""
        return np.repeat(self.module_kinds, self.module_t)

    @cached_property
    def has_parent(self) -> np.ndarray:
        """Per cell: the module has a parent (an upper layer) in its stretch."""
        memo: dict[tuple[int, int], np.ndarray] = {}   # Batch.edge_arrays shares equal edge lists' arrays
        flags = []
        for st, e in zip(self.stretches, self.edge_arrays, strict=True):
            f = memo.get((id(e), st.n))
            if f is None:
                f = memo[(id(e), st.n)] = np.zeros(st.n, dtype=bool)
                f[e[:, 1]] = True
            flags.append(f)
        return self.per_module(flags, dtype=bool)

    def cell_groups(self, keys: list[list]) -> tuple[np.ndarray, int]:
        """Group the cells of each snapshot by a key per module: `keys[k][m]` for module m of stretch k
        (None: in no group). Returns (per cell a group number, -1 for none; the number of groups). Cells
        share a group when they are in the same stretch and snapshot and their modules' keys are equal."""
        parts, base = [np.zeros(0, dtype=np.int64)], 0
        for st, ks in zip(self.stretches, keys, strict=True):
            if len(ks) != st.n:
                raise ValueError(f"{len(ks)} keys for a stretch of {st.n} modules")
            local: dict = {}
            g = np.array([-1 if key is None else local.setdefault(key, len(local)) for key in ks], dtype=np.int64)
            cells = base + g[:, None] * st.t + np.arange(st.t, dtype=np.int64)
            parts.append(np.where(g[:, None] >= 0, cells, -1).ravel())
            base += len(local) * st.t
        return np.concatenate(parts), base

    @cached_property
    def remote_groups(self) -> tuple[np.ndarray, int]:
        """`cell_groups` keyed by each module's remote peer: the optional per-module list
        `Stretch.remote` (for a TCP connection its remote address; None where unknown). A stretch
        without it puts no module in a group."""
        return self.cell_groups([list(getattr(st, "remote", None) or [None] * st.n) for st in self.stretches])

    @cached_property
    def tcpstate(self) -> dict[str, np.ndarray] | None:
        """Per cell, the optional `Stretch.tcpstate` (analysis.model.tcpstate.TcpState) flattened: "known" and
        every state field, plus "mono" (the snapshot's time); a stretch without it is unknown
        everywhere (known False, fields NaN). None when no stretch has it."""
        if all(st.tcpstate is None for st in self.stretches):
            return None
        from analysis.model.tcpstate import TcpState
        from rundir.db import TCP_STATE_COLUMNS
        states = [st.tcpstate if st.tcpstate is not None else TcpState.unknown(st.n, st.t) for st in self.stretches]
        out = {f: np.concatenate([getattr(s, f).ravel() for s in states]) for f in ("known", *TCP_STATE_COLUMNS)}
        out["mono"] = np.concatenate([np.broadcast_to(s.mono, (st.n, st.t)).ravel()
                                      for s, st in zip(states, self.stretches, strict=True)])
        return out
