"""What a fault reaches: its *targets*, the modules it acts on (positives of the labelling policies
while they are impacted), and its *collateral*, the modules around them that its impact may reach
(docs/analysis.md, "Ground truth"). Load (analysis.unscored: the modules a damaged fault leaves out of
the scores) and the labelling policies (analysis.labels) both take them here.

- targets: the fault's target module and, for a kind that names them (rundir.faultkinds.FaultKindInfo
  `children`), its children of that module kind (app_pause: the application's sockets stall with it);
  a link fault of a fabric run (a `loss` with `link`, a `link_down`: its target names the link, no
  module) targets the TCP connections whose packets cross that link, either way, by the paths in the
  run's fabric.json (docs/fabric.md); the faults that have targets (`active_faults`) took effect and,
  by their kind's `stalls`, stall them;
- collateral: the targets' ancestors and descendants in the module graph while the fault was active.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rundir import facts
from rundir.fabric import fabric_path, read_fabric


def active_faults(data) -> list[tuple[int, str, set[int], float, float]]:
    """(id, kind, targets, start, end) of the faults that took effect, have targets and stall them
    (their kind's `stalls`, rundir.faultkinds: every network kind's faults do); targets as
    fault_targets() gives them, or a link fault's crossing connections (link_crossers)."""
    out = []
    kinds = data.fault_kinds
    crossers: dict[int, set[int]] | None = None
    for f in facts.took_effect(data.faults).itertuples(index=False):
        if f.kind in kinds and not kinds[f.kind].culprit(f.target):
            continue
        start, end = float(f.start), float(f.end)
        if f.target_module is pd.NA or pd.isna(f.target_module):
            link = f.target.get("link_index") if isinstance(f.target, dict) else None
            if link is None:
                continue
            if crossers is None:
                crossers = link_crossers(data)
            targets = crossers.get(int(link), set())
            if targets:
                out.append((int(f.id), str(f.kind), set(targets), start, end))
            continue
        out.append((int(f.id), str(f.kind), fault_targets(data, str(f.kind), int(f.target_module), start, end),
                    start, end))
    return out


def link_crossers(data) -> dict[int, set[int]]:
    """Link index -> the TCP modules whose connection's packets cross it, data or ACKs (a fabric run's
    fabric.json: every connection the collector saw, traced both ways on the routers); {} for a run
    without one."""
    path = getattr(getattr(data, "run", None), "path", None)
    if path is None or not fabric_path(path).is_file():
        return {}
    conns = read_fabric(path).get("connections") or {}
    out: dict[int, set[int]] = {}
    mods = data.modules
    for mid, kind, a in zip(mods.index, mods["kind"], mods["attrs"], strict=True):
        if kind != "tcp" or not isinstance(a, dict):
            continue
        key = f"{a.get('src')}:{a.get('sport')}>{a.get('dst')}:{a.get('dport')}"
        back = f"{a.get('dst')}:{a.get('dport')}>{a.get('src')}:{a.get('sport')}"
        for link in {*conns.get(key, ()), *conns.get(back, ())}:
            out.setdefault(int(link), set()).add(int(mid))
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
