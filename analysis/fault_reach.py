"""What a fault reaches: its *targets*, the modules it acts on (positives of the labelling policies
while they are impacted), and its *collateral*, the modules around them that its impact may reach
(docs/analysis.md, "Ground truth"). Load (analysis.unscored: the modules a damaged fault leaves out of
the scores) and the labelling policies (analysis.labels) both take them here.

- targets: the fault's target module and, for a kind that names them (rundir.faultkinds.FaultKindInfo
  `children`), its children of that module kind (app_pause: the application's sockets stall with it);
  the faults that have targets (`active_faults`) took effect and, by their kind's `stalls`, stall them;
- collateral: the targets' ancestors and descendants in the module graph while the fault was active.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rundir import facts


def active_faults(data) -> list[tuple[int, str, int, float, float]]:
    """(id, kind, target module, start, end) of the faults that took effect, have a target and stall it
    (their kind's `stalls`, rundir.faultkinds: every network kind's faults do)."""
    out = []
    kinds = data.fault_kinds
    for f in facts.took_effect(data.faults).itertuples(index=False):
        if f.target_module is pd.NA or pd.isna(f.target_module):
            continue
        if f.kind in kinds and not kinds[f.kind].culprit(f.target):
            continue
        out.append((int(f.id), str(f.kind), int(f.target_module), float(f.start), float(f.end)))
    return out


def edges_during(data, t0: float, t1: float) -> list[tuple[int, int]]:
    """(parent, child) of the module graph's edges that lived at some time in [t0, t1]."""
    e = data.edges
    if e.empty:
        return []
    died = e["died"].astype(float).fillna(np.inf).to_numpy()
    born = e["born"].astype(float).to_numpy()
    live = (born <= t1) & (died > t0)
    return list(zip(e["parent"].to_numpy()[live].tolist(), e["child"].to_numpy()[live].tolist(), strict=True))


def fault_targets(data, kind: str, target: int, t0: float, t1: float) -> set[int]:
    """The modules a fault targets: the target, and its children of the module kind its fault kind
    names (data.fault_kinds, rundir.faultkinds: app_pause -> the app and its sockets)."""
    out = {target}
    info = data.fault_kinds.get(kind)
    if info is not None and info.children:
        kinds = data.modules["kind"]
        out |= {c for p, c in edges_during(data, t0, t1) if p == target and kinds.get(c) == info.children}
    return out


def collateral_modules(data, targets: set[int], t0: float, t1: float) -> set[int]:
    """Ancestors and descendants of the targets in the graph while the fault was active."""
    edges = edges_during(data, t0, t1)
    down: dict[int, set[int]] = {}
    up: dict[int, set[int]] = {}
    for p, c in edges:
        down.setdefault(p, set()).add(c)
        up.setdefault(c, set()).add(p)
    found: set[int] = set()
    for nbrs in (down, up):
        todo = list(targets)
        seen = set(targets)
        while todo:
            m = todo.pop()
            for n in nbrs.get(m, ()):
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        found |= seen
    return found - targets
