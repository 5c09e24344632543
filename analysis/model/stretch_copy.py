"""A copy of what load_stretches makes of a run's counters (analysis.model.stretches), kept in the run directory
as `columnar/stretches.arrow` (rundir.columnar.write_arrays), so that a run analysed again is not cut
into stretches again: the counters of every cell of both directions, flat as analysis.model.batch lays them
out, memory-mapped, and per stretch its snapshots, modules and edges.

Making the stretches from the counters rows (carrying rows forward, the deltas and thesis 3.4's rule,
the cut into stretches) costs about 0.2 s on a 15-minute run of 1.8 M rows; mapping the copy a few ms.
What it holds is the part of load_stretches that reads the counters. The rest is made again each time
from run.db's small tables, as for a run without a copy: snapshots, modules, edges, which modules are
detached, remote addresses, TCP state, probes.

Where it lives and how it is checked on load (Arrow validation, checksum) is rundir.copies' and
rundir.columnar's; `mismatch` checks what it says against the run (bounds, ids, edges, cell counts),
since a checksum anyone can recompute proves no more than that nobody edited it by hand.
The copy is used only under the key it was written with: run.db's stamp (rundir.columnar.stamp: its
size, modification time and change counter, ...) and a digest of the source of the code that makes
stretches (CODE), so a run that changed or code that changed makes it again. run.db stays the record;
deleting `columnar/` is always safe.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from rundir import columnar

FILE = columnar.STRETCHES
VERSION = 2   # 2: the cells' fields named in the head
# The modules whose code decides what the stretches' arrays hold: a change to any makes new copies.
CODE = ("analysis.model.stretches", "analysis.model.dense", "analysis.model.deltas", "rundir.read", "rundir.repair", "rundir.columnar",
        "analysis.model.stretch_copy")


@cache
def code_digest() -> str:
    h = hashlib.sha256()
    for name in CODE:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        h.update(name.encode())
        h.update(Path(path).read_bytes() if path else b"?")
    return h.hexdigest()[:16]


def key(stamp: dict) -> dict | None:
    """The key of a copy made from run.db as `stamp` says it is now (None: no stamp, no copy)."""
    return {"version": VERSION, "code": code_digest(), "run": stamp} if stamp else None


@dataclass
class Parts:
    """What the copy holds, as plain arrays and lists."""

    bounds: np.ndarray                      # (K, 2) each stretch's positions [start, stop) in the run's seqs
    members: np.ndarray                     # module ids, stretch after stretch
    sizes: np.ndarray                       # (K,) modules per stretch
    edges: np.ndarray                       # (D, 2) the distinct (parent, child) places of any stretch
    edge_index: np.ndarray                  # every stretch's edges, stretch after stretch, as rows of `edges`
    edge_counts: np.ndarray                 # (K,) edges per stretch
    cells: dict[str, dict[str, np.ndarray]]  # direction -> Counters field -> flat per-cell array
    lives: dict[int, tuple]                 # module id -> (born, died) where the counters set them
    warnings: tuple[list[str], list[str]] = field(default_factory=lambda: ([], []))  # reading, placing rows


def write(run_dir: str | Path, k: dict | None, parts: Parts | None) -> Path | None:
    """Keep `parts` under key `k`; None when not written (no key or parts, an unwritable directory)."""
    if k is None or parts is None:
        return None
    meta = {"bounds": parts.bounds.tolist(), "members": parts.members.tolist(), "sizes": parts.sizes.tolist(),
            "edges": parts.edges.reshape(-1).tolist(), "edge_index": parts.edge_index.tolist(),
            "edge_counts": parts.edge_counts.tolist(),
            "lives": [[m, b, d] for m, (b, d) in sorted(parts.lives.items())],
            "warnings": [list(parts.warnings[0]), list(parts.warnings[1])],
            "cells": {d: list(fields) for d, fields in parts.cells.items()}}   # Counters' fields, per direction
    cols = {f"{d}_{f}": a for d, fields in parts.cells.items() for f, a in fields.items()}
    return columnar.write_arrays(run_dir, FILE, k, cols, meta)


def read(run_dir: str | Path, k: dict | None, warnings: list[str] | None = None) -> Parts | None:
    """The parts kept under key `k`, the cells' arrays read-only views of the mapped file; None when
    there is no such copy (none, another key, unreadable), and (a line in `warnings`) when one fails
    its checksum or its shape (rundir.columnar.read_arrays, mismatch)."""
    got = columnar.read_arrays(run_dir, FILE, k, warnings) if k is not None else None
    if got is None:
        return None
    cols, meta = got
    try:
        cells = {d: {f: cols[f"{d}_{f}"] for f in fields} for d, fields in meta["cells"].items()}
        return Parts(np.asarray(meta["bounds"], dtype=np.int64).reshape(-1, 2),
                     np.asarray(meta["members"], dtype=np.int64), np.asarray(meta["sizes"], dtype=np.int64),
                     np.asarray(meta["edges"], dtype=np.int64).reshape(-1, 2),
                     np.asarray(meta["edge_index"], dtype=np.int64), np.asarray(meta["edge_counts"], dtype=np.int64),
                     cells,
                     {int(m): (b, d) for m, b, d in meta["lives"]},
                     ([str(w) for w in meta["warnings"][0]], [str(w) for w in meta["warnings"][1]]))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError):   # another shape
        if warnings is not None:
            warnings.append(f"{FILE}: not a stretches copy of this code; not used: made again from run.db")
        return None


def mismatch(parts: Parts, n_seqs: int, ids: np.ndarray, fields: tuple[str, ...], dirs: tuple[str, ...]
             ) -> str | None:
    """What in `parts` cannot be of the run whose snapshots number `n_seqs` and whose module ids are
    `ids` (sorted), or None: a copy whose checksum holds may still have been made to lie (the checksum
    is not a secret), and an index out of range must not fail the run or pick the wrong rows."""
    k = len(parts.sizes)
    b = parts.bounds
    if len(b) != k or len(parts.edge_counts) != k:
        return "stretch counts disagree"
    if k and ((b[:, 0] < 0).any() or (b[:, 1] > n_seqs).any() or (b[:, 1] <= b[:, 0]).any()
              or (b[1:, 0] < b[:-1, 1]).any()):
        return "stretch bounds outside the run's snapshots or out of order"
    if (parts.sizes < 0).any() or int(parts.sizes.sum()) != len(parts.members):
        return "stretch sizes disagree with their members"
    if len(parts.members) and not np.isin(parts.members, ids).all():
        return "a stretch member is not a module of the run"
    if (parts.edge_counts < 0).any() or int(parts.edge_counts.sum()) != len(parts.edge_index):
        return "edge counts disagree with the edges"
    if len(parts.edge_index) and ((parts.edge_index < 0).any() or (parts.edge_index >= len(parts.edges)).any()):
        return "an edge index is out of range"
    if len(parts.edge_index):
        # an edge is a pair of positions among its stretch's members
        ends = parts.edges[parts.edge_index]
        n = np.repeat(parts.sizes, parts.edge_counts)[:, None]
        if ((ends < 0) | (ends >= n)).any():
            return "an edge joins positions outside its stretch"
    cells = int((parts.sizes * (b[:, 1] - b[:, 0])).sum()) if k else 0
    if set(parts.cells) != set(dirs):
        return "not the directions of the stretches"
    for d, got in parts.cells.items():
        if set(got) != set(fields) or any(len(a) != cells for a in got.values()):
            return f"the {d} cells are not the stretches' ({cells} cells)"
    if any(m not in set(ids.tolist()) for m in parts.lives):
        return "a module life of a module not in the run"
    return None
