"""Plain per-snapshot reference implementations of the rule variants.

These follow the seeds line by line, one snapshot at a time, with dicts and networkx, and share no
code with analysis.variants except the diagnosis-table data. The property tests
(tests/test_diagnosis_property.py) require the vectorised variants to give identical results,
tests/test_diagnosis_reference.py checks the references themselves, and bench/bench_diagnose.py
measures both.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from analysis.diagnose import diagnose_stretches
from analysis.model.stretches import DIRS, Stretch
from analysis.variants import BLOCKED, DONTCARE, HEALTHY, STALLED, Variant
from analysis.variants.nest_cf_tables import ABSOLVE_CO_PARENT, OBS, cell

# ---------------------------------------------------------------- FlowDiagnoser


def _module_counters(stretch: Stretch, d: str, t: int, use_queues: bool) -> list[dict]:
    c = stretch.counters[d]
    return [{"tm": float(c.tm[i, t]),
             "wait": float(c.wait[i, t]) if c.has_wait[i, t] else None,
             "q": float(c.queued[i, t]) if use_queues and c.has_queue[i, t] else None}
            for i in range(stretch.n)]


def _fd_graphs(stretch: Stretch):
    apps = {p for p, _ in stretch.edges if stretch.kinds[p] == "app"}
    dgraph = nx.DiGraph()
    dgraph.add_nodes_from(i for i in range(stretch.n) if i not in apps)
    dgraph.add_edges_from((p, c) for p, c in stretch.edges if p not in apps and c not in apps)
    kids = {a: [c for p, c in stretch.edges if p == a] for a in apps}
    # Detached modules (an upper layer elsewhere in the run, none here) are roots without assumed
    # work; sockets keep it (their application is never above them in the analysis graph).
    no_work = {m for m in range(stretch.n)
               if stretch.detached[m] and stretch.kinds[m] != "socket"
               and not any(c == m for _, c in stretch.edges)}
    return dgraph, kids, no_work


def _fd_snapshot(dgraph, kids, no_work, cnt, theta, literal=False):
    """Algorithms 1-5 for one snapshot; literal=True is the plain chapter 2 algorithm (no Θ)."""
    # Algorithm 2: BreakNonBlockedCycles
    wgraph = dgraph.copy()
    for m in list(wgraph.nodes):
        if cnt[m]["tm"] > 0 or (cnt[m]["q"] is not None and cnt[m]["q"] == 0):
            wgraph.remove_edges_from(list(wgraph.out_edges(m)))
    # MergeStronglyConnectedComponents: super-modules with max-combined counters
    dag = nx.condensation(wgraph)
    sup = {}
    for s in dag.nodes:
        members = dag.nodes[s]["members"]
        waits = [cnt[m]["wait"] for m in members if cnt[m]["wait"] is not None]
        qs = [cnt[m]["q"] for m in members if cnt[m]["q"] is not None]
        sup[s] = {"tm": max(cnt[m]["tm"] for m in members),
                  "wait": max(waits) if waits else None,
                  "q": max(qs) if qs else None,
                  "root": all(p in members for m in members for p in dgraph.predecessors(m))
                  and not all(m in no_work for m in members)}
    diagnosis = {}
    memo = {}

    def has_work(s):  # Algorithm 4
        x = sup[s]
        if x["q"] is not None:
            return x["q"] > 0
        if x["root"]:
            return True
        if literal:
            return any(diagnosis[p] == BLOCKED for p in dag.predecessors(s))
        return any(waits(p) for p in dag.predecessors(s))

    def waits(s):
        # NeST: a parent passes work down when it is inactive, has work and waited (or cannot
        # tell: no wait counter) -- BLOCKED, or STALLED by the Θ rule.
        if s not in memo:
            x = sup[s]
            memo[s] = x["tm"] == 0 and has_work(s) and (x["wait"] is None or x["wait"] > 0)
        return memo[s]

    def can_pass_blame(s):  # Algorithm 5 (+ Θ: enough waiting parents above the child)
        for ch in dag.successors(s):
            x = sup[ch]
            if x["tm"] == 0:
                if x["q"] is not None and x["q"] == 0:
                    continue
                if literal or sum(waits(p) for p in dag.predecessors(ch)) >= theta:
                    return True
        return False

    for s in nx.topological_sort(dag):  # Algorithm 3
        x = sup[s]
        if x["tm"] > 0:
            diagnosis[s] = HEALTHY
        elif not has_work(s):
            diagnosis[s] = DONTCARE
        elif x["wait"] is not None:
            diagnosis[s] = BLOCKED if x["wait"] > 0 else STALLED
        else:
            diagnosis[s] = BLOCKED if can_pass_blame(s) else STALLED
    out = {m: diagnosis[s] for s in dag.nodes for m in dag.nodes[s]["members"]}
    for a, ks in kids.items():  # thesis 3.3.1
        if any(cnt[k]["tm"] > 0 for k in ks):
            out[a] = HEALTHY
        elif any(cnt[k]["wait"] is not None and cnt[k]["wait"] > 0 for k in ks):
            out[a] = BLOCKED
        else:
            out[a] = STALLED
    return out


def ref_flowdiagnoser(stretch: Stretch, theta=2, queues=False, confirm=1, literal=False):
    dgraph, kids, no_work = _fd_graphs(stretch)
    out = {}
    for d in DIRS:
        res = np.zeros((stretch.n, stretch.t), dtype=np.int8)
        for t in range(stretch.t):
            cnt = _module_counters(stretch, d, t, queues and d == "out")
            diag = _fd_snapshot(dgraph, kids, no_work, cnt, theta, literal)
            for m, r in diag.items():
                res[m, t] = r
        pos = res == STALLED
        if confirm > 1:
            streak = np.zeros(stretch.n, dtype=int)
            for t in range(stretch.t):
                streak = np.where(pos[:, t], streak + 1, 0)
                pos[:, t] = streak >= confirm
        out[d] = (res, pos)
    return out


# ---------------------------------------------------------------- NeST certainty factors

ACT, NONE, IDLE, WAIT, ANW, IGN, QZ, QNZ, ERR = OBS


CONFLICT = float("nan")  # +1 ⊕ -1: total conflict, absorbing; reported as 0


def parallel_combine(a: float, b: float) -> float:
    """Paper Figure 3, one step at a time; +1 ⊕ -1 (undefined there) is an absorbing conflict."""
    if a != a:
        return a
    if abs(a) == 1 or abs(b) == 1:
        if a == -b:
            return CONFLICT
        return a if abs(a) == 1 else b
    if a >= 0 and b >= 0:
        return a + b - a * b
    if a < 0 and b < 0:
        return a + b + a * b
    return (a + b) / (1 - min(abs(a), abs(b)))


def _cf_snapshot(stretch, d, t, anw, ign, queues, errors):
    c = stretch.counters[d]
    n = stretch.n
    parents = {m: [p for p, ch in stretch.edges if ch == m] for m in range(n)}
    state = {}
    for m in range(n):
        if c.tm[m, t] > 0:
            state[m] = ACT
        elif c.has_wait[m, t]:
            state[m] = WAIT if c.wait[m, t] > 0 else IDLE
        else:
            state[m] = NONE
    changed = True
    while changed:  # ANW / IGN propagate from parents (least fixed point)
        changed = False
        for m in range(n):
            # A detached module (no upper layer known here, one elsewhere in the run) takes part:
            # "every parent is IDLE or IGN" holds for it, so it is IGN; a true root is never IGN.
            if c.tm[m, t] > 0 or c.has_wait[m, t] or state[m] != NONE or not (parents[m] or stretch.detached[m]):
                continue
            ps = [state[p] for p in parents[m]]
            if anw and any(s in (WAIT, ANW) for s in ps):
                state[m] = ANW
                changed = True
            elif ign and all(s in (IDLE, IGN) for s in ps):
                state[m] = IGN
                changed = True
    obs = {}
    for m in range(n):
        o = [state[m]]
        if queues and c.has_queue[m, t] and state[m] not in (ACT, WAIT):
            o.append(QNZ if c.queued[m, t] > 0 else QZ)
        if errors and c.has_errors[m, t] and c.errors[m, t] > 0:
            o.append(ERR)
        obs[m] = o
    diag = [0.0] * n
    for x, y in stretch.edges:
        if d == "out":
            for bx in obs[x]:
                for by in obs[y]:
                    sp, sc, _, _ = cell("out", bx, by)
                    if sp is not None:
                        diag[x] = parallel_combine(diag[x], sp)
                    if sc is not None:
                        diag[y] = parallel_combine(diag[y], sc)
        else:
            for by in obs[y]:
                for bx in obs[x]:
                    sp, sc, _, _ = cell("in", by, bx)
                    if sp is not None:
                        diag[y] = parallel_combine(diag[y], sp)
                    if sc is not None:
                        diag[x] = parallel_combine(diag[x], sc)
    waiting = {m for m in range(n) if state[m] in (WAIT, ANW, NONE)}
    for x, y in stretch.edges:
        if x in waiting and y in waiting:
            for p in parents[y]:
                if p != x and p in waiting:
                    diag[x] = parallel_combine(diag[x], ABSOLVE_CO_PARENT)
    return [0.0 if v != v else v for v in diag]


def ref_nest_cf(stretch: Stretch, anw=True, ign=True, queues=True, errors=True, threshold=0.0):
    out = {}
    for d in DIRS:
        cf = np.zeros((stretch.n, stretch.t))
        for t in range(stretch.t):
            cf[:, t] = _cf_snapshot(stretch, d, t, anw, ign, queues, errors)
        out[d] = (cf, np.round(cf, 9) > threshold)
    return out


REFERENCE = {"flowdiagnoser": ref_flowdiagnoser, "nest-cf": ref_nest_cf}


def reference(stretch: Stretch, variant: Variant):
    """The reference result of a variant on one stretch: dir -> (result, positive)."""
    return REFERENCE[variant.system.name](stretch, **variant.params)


def assert_same(fast: dict, ref: dict, what: str = "") -> None:
    """Labels and positives identical; certainty factors equal up to floating-point rounding (the
    fast path sums on the additive scale of parallel_combine, the reference folds step by step)."""
    for d in DIRS:
        res, pos = fast[d]
        rres, rpos = ref[d]
        if res.dtype.kind == "f":
            np.testing.assert_allclose(res, rres, rtol=0, atol=1e-12, err_msg=f"{what} {d} cf")
        else:
            np.testing.assert_array_equal(res, rres, err_msg=f"{what} {d} result")
        np.testing.assert_array_equal(pos, rpos, err_msg=f"{what} {d} positive")


def assert_batch_equals_reference(stretches: list[Stretch], variant: Variant) -> None:
    """Several stretches diagnosed in one batch (seqs made distinct, as in a run) give each stretch
    its own reference result: the fast path's batching does not leak across stretches."""
    for k, s in enumerate(stretches):
        s.seqs = s.seqs + 100 * k
    for sd in diagnose_stretches(stretches, [variant]):
        assert_same(sd.results[variant.name], reference(sd.stretch, variant), variant.name)
