"""A copy of what load_stretches makes of a run's counters (analysis.model.stretches), kept in the run directory
as `columnar/stretches.arrow` (rundir.columnar.write_arrays), so that a run analysed again is not cut
into stretches again: the counters of every cell of both directions, flat as analysis.model.batch lays them
out, memory-mapped, and per stretch its snapshots, modules and edges.

Making the stretches from the counters rows (carrying rows forward, the deltas and thesis 3.4's rule,
the cut into stretches) costs about 0.2 s on a 15-minute run of 1.8 M rows; mapping the copy a few ms.
What it holds is the part of load_stretches that reads the counters. The rest is made again each time
from run.db's small tables, as for a run without a copy: snapshots, modules, edges, which modules are
detached, remote addresses, TCP state, probes.

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


def read(run_dir: str | Path, k: dict | None) -> Parts | None:
    """The parts kept under key `k`, the cells' arrays read-only views of the mapped file; None when
    there is no such copy (none, another key, unreadable)."""
    got = columnar.read_arrays(run_dir, FILE, k) if k is not None else None
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
                     (list(meta["warnings"][0]), list(meta["warnings"][1])))
    except (KeyError, TypeError, ValueError):   # a copy of another shape: made again
        return None
