"""Online against offline: what analysis.live settled while a run grew, against analysis.diagnose on the
whole run (the agreement rule of docs/live.md)."""

from __future__ import annotations

from pathlib import Path

from analysis.diagnose import as_variants, diagnose_stretches
from analysis.live import LiveEngine
from analysis.model.stretches import DIRS, load_stretches
from analysis.variants import DEFAULT_VARIANT, LABELS
from tests.support.grow import Grower


def offline(run: Path, variant: str = DEFAULT_VARIANT) -> dict[int, dict]:
    """seq -> {(module, dir): (label or certainty factor, positive)} for every module present."""
    (v,) = as_variants([variant])
    out: dict[int, dict] = {}
    for sd in diagnose_stretches(load_stretches(run), [v]):
        st = sd.stretch
        for d in DIRS:
            res, pos = sd.results[v.name][d]
            for i, m in enumerate(st.modules):
                for c, seq in enumerate(st.seqs.tolist()):
                    r = LABELS[int(res[i, c])] if v.kind == "label" else float(res[i, c])
                    out.setdefault(seq, {})[(m, d)] = (r, bool(pos[i, c]))
    return out


def differences(online: dict[int, dict], off: dict[int, dict]) -> list[tuple[int, dict]]:
    """(seq, {cell: (offline, online)}) wherever they differ; a snapshot missing online counts."""
    out = []
    for seq in sorted(set(off) | set(online)):
        a, b = off.get(seq, {}), online.get(seq, {})
        if a != b:
            out.append((seq, {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}))
    return out


def stalled_sets(results: dict[int, dict]) -> dict[int, frozenset]:
    return {seq: frozenset(k for k, (_, positive) in cells.items() if positive) for seq, cells in results.items()}


def grow_and_watch(src: Path, dst: Path, step: int, variant: str = DEFAULT_VARIANT, lag_s: float = 1.0,
                   check=None) -> LiveEngine:
    """Replay `src` into `dst` `step` snapshots at a time, refreshing an engine after each step and once
    more when the run has ended; `check(engine)` after every refresh. Returns the (closed) engine."""
    grower = Grower(src, dst)
    engine = LiveEngine(dst, variant, lag_s=lag_s, history=True)
    try:
        for upto in range(step - 1, grower.last + step, step):
            grower.grow(upto)
            engine.refresh()
            if check is not None:
                check(engine)
        grower.finish()
        engine.refresh()
    finally:
        grower.close()
        engine.close()
    return engine


def lag_exceptions(run: Path, lag: int) -> set[tuple[int, int]]:
    """(seq, module) where the agreement rule allows online and offline to differ: a module without a
    parent at that snapshot whose first parent comes more than `lag` snapshots later, and the modules
    below it (its lower layers, whose work it decides) (docs/live.md)."""
    stretches = load_stretches(run).stretches
    first: dict[int, int] = {}
    for st in stretches:
        for _, c in st.edges:
            m = st.modules[c]
            first[m] = min(first.get(m, int(st.seqs[0])), int(st.seqs[0]))
    out = set()
    for st in stretches:
        for i in set(range(st.n)) - {c for _, c in st.edges}:
            late = [seq for seq in st.seqs.tolist() if st.modules[i] in first and first[st.modules[i]] - seq > lag]
            below, todo = {i}, [i]
            while todo:
                for c in st.children[todo.pop()]:
                    if c not in below:
                        below.add(c)
                        todo.append(c)
            out |= {(seq, st.modules[j]) for seq in late for j in below}
    return out


def outside_the_rule(diffs: list[tuple[int, dict]], allowed: set[tuple[int, int]]) -> list:
    """The differences the agreement rule does not allow."""
    return [(seq, cell) for seq, cells in diffs for cell in cells if (seq, cell[0]) not in allowed]
