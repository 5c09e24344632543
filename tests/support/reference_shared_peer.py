"""Plain per-snapshot references for `flowdiagnoser:shared=on` (thesis 3.6.1) and `peer` (the PVFS
paper's peer comparison), written from docs/diagnosis.md one snapshot and one module at a time, with
dicts and lists; they share no code with analysis.variants.

Importing this module registers both in tests.support.reference.REFERENCE, so `reference(stretch,
variant)` covers every rule system: "flowdiagnoser" gets a wrapper that takes the `shared` parameter
(without it the plain reference runs unchanged), "peer" its own.
"""

from __future__ import annotations

import statistics

import numpy as np

from analysis.model.stretches import DIRS, Stretch
from analysis.variants import BLOCKED, DONTCARE, HEALTHY, STALLED
from tests.support import reference as _reference
from tests.support.reference import ref_flowdiagnoser

LOWER = ("ipeth", "ip", "eth")


def _confirm(pos: np.ndarray, confirm: int) -> np.ndarray:
    pos = pos.copy()
    if confirm > 1:
        streak = np.zeros(pos.shape[0], dtype=int)
        for t in range(pos.shape[1]):
            streak = np.where(pos[:, t], streak + 1, 0)
            pos[:, t] = streak >= confirm
    return pos


# ---------------------------------------------------------------- FlowDiagnoser, shared dependencies


def ref_flowdiagnoser_shared(stretch: Stretch, theta=2, queues=False, confirm=1, shared=False):
    """FlowDiagnoser; with shared=True, thesis 3.6.1's "path to X" for TCP connections to one remote."""
    if not shared:
        return ref_flowdiagnoser(stretch, theta=theta, queues=queues, confirm=confirm)
    base = ref_flowdiagnoser(stretch, theta=theta, queues=queues, confirm=1)
    remote = getattr(stretch, "remote", None) or [None] * stretch.n
    paths: dict = {}
    for m in range(stretch.n):
        if stretch.kinds[m] == "tcp" and remote[m] is not None:
            paths.setdefault(remote[m], []).append(m)
    out = {}
    for d in DIRS:
        c = stretch.counters[d]
        res = base[d][0].copy()
        for t in range(stretch.t):
            for members in paths.values():
                # The path's counters (3.6.1): active if any member is active ...
                if any(c.tm[m, t] > 0 for m in members):
                    continue
                # ... else potentially blocked through its waiting members.
                waiting = [m for m in members
                           if res[m, t] in (BLOCKED, STALLED) and (not c.has_wait[m, t] or c.wait[m, t] > 0)]
                if len(waiting) < theta:
                    continue
                for m in members:  # the path takes the blame; its members are BLOCKED
                    if res[m, t] == STALLED and not c.has_wait[m, t]:
                        res[m, t] = BLOCKED
        out[d] = (res, _confirm(res == STALLED, confirm))
    return out


# ---------------------------------------------------------------- peer comparison


def _peer_snapshot(stretch: Stretch, c, t: int, base: dict, k: float, min_peers: int) -> dict:
    kinds = stretch.kinds
    parents = {m: [p for p, ch in stretch.edges if ch == m] for m in range(stretch.n)}
    children = {m: [ch for p, ch in stretch.edges if p == m] for m in range(stretch.n)}
    tm = {m: float(c.tm[m, t]) for m in range(stretch.n)}

    def uses_the_layer_below(p):
        return tm[p] > 0 or (bool(c.has_wait[p, t]) and c.wait[p, t] > 0)

    busy = set()
    for m in range(stretch.n):
        if kinds[m] != "tcp":
            continue
        root = not parents[m] and not stretch.detached[m]
        if tm[m] > 0 or root or any(uses_the_layer_below(p) for p in parents[m]):
            busy.add(m)

    def outlier(m):
        for low in children[m]:
            if kinds[low] not in LOWER:
                continue
            peers = [p for p in parents[low] if p != m and p in busy and kinds[p] == "tcp"]
            if len(peers) < max(min_peers, 1):
                continue
            median = statistics.median([tm[p] for p in peers])
            if median > 0 and (tm[m] == 0 or tm[m] * k < median):
                return True
        return False

    def connections_above(low, seen):
        for p in parents[low]:
            if kinds[p] == "tcp":
                yield p
            elif kinds[p] in LOWER and p not in seen:
                seen.add(p)
                yield from connections_above(p, seen)

    out = {}
    for m in range(stretch.n):
        if kinds[m] == "tcp":
            if m in busy and outlier(m):
                out[m] = STALLED
            elif tm[m] > 0:
                out[m] = HEALTHY
            else:
                out[m] = BLOCKED if m in busy else DONTCARE
        elif kinds[m] in LOWER:
            above = {p for p in connections_above(m, {m}) if p in busy}
            if tm[m] > 0:
                out[m] = HEALTHY
            elif above and not any(tm[p] > 0 for p in above):
                out[m] = STALLED  # every busy connection above it is silent
            else:
                out[m] = DONTCARE
        else:
            out[m] = base[m]      # applications, sockets: FlowDiagnoser with Θ = 2
    return out


def ref_peer(stretch: Stretch, k=10.0, min_peers=2):
    fd = ref_flowdiagnoser(stretch, theta=2)
    out = {}
    for d in DIRS:
        c = stretch.counters[d]
        res = np.zeros((stretch.n, stretch.t), dtype=np.int8)
        for t in range(stretch.t):
            base = {m: int(fd[d][0][m, t]) for m in range(stretch.n)}
            for m, r in _peer_snapshot(stretch, c, t, base, k, min_peers).items():
                res[m, t] = r
        out[d] = (res, res == STALLED)
    return out


_reference.REFERENCE["flowdiagnoser"] = ref_flowdiagnoser_shared
_reference.REFERENCE["peer"] = ref_peer
