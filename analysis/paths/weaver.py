"""A TraceWeaver-class reconstruction (after Ashok et al., SIGCOMM'24, sections 3-4; our own
implementation from the paper, none of its code): at each service, the incoming calls are mapped to
the outgoing calls jointly, as an assignment that honours the call graph and the delays learned from
the trace itself, solved exactly with scipy's linear_sum_assignment (the Hungarian method's kin).

Over call pairs (callpairs.py). For each outgoing call c from a service X to a service D, the
candidates are the incoming calls p at X that enclose it (arrived before c left, replied after c's
return arrived). Per *key* (p's caller A, X, D):

- **call graph**: P(N >= j), the share of incoming calls A>X making at least j calls to D, from the
  current mapping (the paper's call graph, inferred from the trace where it is not given);
- **delays**: the densities of the gap from p's arrival to c's departure (`pre`) and from c's return
  to p's reply (`post`), as histograms over log-spaced bins (`bins_per_decade`), smoothed from the
  second round on by a triangular kernel whose width follows each key's spread under the current
  mapping (Silverman's rule times `kernel`): a tight delay keeps its resolution, a spread one (the
  media traces' nginx stamps whole milliseconds) no longer has empty bins between its samples. The
  first round's histograms (the scoreboard's, spread by the wrong candidates) are not smoothed.

The cost of giving c to p as p's j-th call to D is -log f_pre - log f_post - log P(N >= j); each
incoming call offers `max_calls` slots per D; a call no slot takes is a root (cost `leave_cost`).
The calls to D of the pairs connected through shared candidates are solved together, in windows of
at most `window` calls in time order (slots used by earlier windows stay used). It starts from
delays learned from every candidate, each call's weight shared among its candidates (Project5's
scoreboard: the true delays pile up, the others spread), and a call graph from the latest-started
guess, then alternates solving and learning from the mapping for `rounds` rounds (an EM of hard
assignments; it stops early once a round changes nothing).

Then TraceWeaver's joint choice (weaver_joint.py): per incoming call a ranked set of tuples of its
outgoing calls (every callee at once, shaped by the call graph, scored by the chain of gaps between
consecutive calls beside these costs), and a maximum-weight independent set over the tuples of
concurrent requests (HiGHS). `joint_rounds=0` leaves the per-callee mapping above as the result.
Then whole-request consistency (weaver_cross.py): where the mapping shows a service joining a
request's several incoming calls, the gap from the others' replies to each outgoing call, learned
and added to the costs, and the joint choice once more where it tells candidates apart.

What is simplified against the paper: the per-callee call graph is per (caller, service, callee)
with no order among sibling calls (the joint choice's shapes are whole visits, still unordered), and
the delays are per key, not per sibling position; no batching by time windows of the paper's size,
no confidence scores. Tried and left out here (development sets, issue 43): the gaps between
consecutive calls scored call by call inside the per-callee assignment, against the current
mapping of the other calls: +0.4 to +0.6 points on hotel at load 50, -1 to -1.7 on media at load
25; scored per whole tuple in the joint choice they help.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import linear_sum_assignment
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from analysis.paths.callpairs import call_pairs, candidates, pick, result
from analysis.paths.model import PathsResult
from analysis.paths.weaver_cross import join_costs
from analysis.paths.weaver_joint import HI, JOINT_DEFAULTS, LO, MAX_KERNEL, check, log_bins, refine

DEFAULTS: dict[str, object] = {
    "max_parents": 64,          # candidate incoming calls per outgoing call
    "rounds": 3,                # learn-and-solve rounds
    "bins_per_decade": 10,      # delay histogram resolution (log10 of seconds)
    "max_calls": 4,             # slots per incoming call and callee (calls to one service)
    "leave_cost": 60.0,         # cost of leaving a call without a parent (a root)
    "window": 400,              # calls solved together at most
    "kernel": 2.0,              # delay histograms smoothed: Silverman's bandwidth times this
    "cross_rounds": 1,          # rounds with the whole-request term (weaver_cross.py; 0: none)
    **JOINT_DEFAULTS,           # the joint choice that follows (weaver_joint.py)
}
_bins = log_bins


def _log_density(key: np.ndarray, b: np.ndarray, weight: np.ndarray, n_bins: int, kernel: float = 0) -> np.ndarray:
    """Per candidate, log of the smoothed histogram density of its bin within its key (weights: the
    current mapping's). kernel > 0: each bin also holds its neighbours' mass, with weights falling
    linearly to 0 beyond a half-width per key by Silverman's rule (sqrt(6) x 1.06 x the key's
    spread in bins x n^-1/5, times `kernel`; at most MAX_KERNEL bins): tight delays keep their
    resolution, spread ones are smoothed. Plus half a count."""
    cell = key * n_bins + b
    codes, uniq = pd.factorize(cell)
    mass = np.bincount(codes, weights=weight, minlength=len(uniq))
    kcodes, kuniq = pd.factorize(key)
    total = np.bincount(kcodes, weights=weight, minlength=len(kuniq))
    if kernel:
        ku = kcodes[np.unique(codes, return_index=True)[1]]             # each cell's key code
        bf = b.astype(np.float64)
        tot = np.maximum(total, 1e-12)
        mean = np.bincount(kcodes, weights=weight * bf, minlength=len(kuniq)) / tot
        var = np.bincount(kcodes, weights=weight * bf * bf, minlength=len(kuniq)) / tot - mean ** 2
        half = kernel * np.sqrt(6) * 1.06 * np.sqrt(np.maximum(var, 0)) * np.maximum(total, 1) ** -0.2
        half = np.minimum(half, MAX_KERNEL)[ku]                          # per cell
        cells, own, wsum = pd.Index(uniq), mass, np.ones(len(uniq))
        for d in range(1, MAX_KERNEL + 1):
            w = np.maximum(0.0, 1.0 - d / (half + 1))
            if not w.any():
                break
            for side in (-d, d):
                at = cells.get_indexer(uniq + side)           # the cell `side` bins away, if any
                at[(uniq + side) // n_bins != uniq // n_bins] = -1     # another key's
                mass = mass + w * np.where(at >= 0, own[at], 0.0)
            wsum = wsum + 2 * w
        mass = mass / wsum
    return np.log((mass[codes] + 0.5) / (total[kcodes] + 0.5 * n_bins))


def edge_bins(cp, child: np.ndarray, parent: np.ndarray, per_decade: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per candidate edge (outgoing call child, enclosing incoming call parent): its key (parent's
    caller, the service, child's callee) and the bins of its `pre` and `post` gaps."""
    nn = cp.nodes.n
    pre = _bins(cp.out_start[child] - cp.in_start[parent], per_decade)
    post = _bins(cp.in_end[parent] - cp.out_end[child], per_decade)
    return (cp.caller[parent] * nn + cp.callee[parent]) * nn + cp.callee[child], pre, post


def edge_costs(key: np.ndarray, pre: np.ndarray, post: np.ndarray, weight: np.ndarray, n_bins: int,
               kernel: float) -> np.ndarray:
    """Per candidate edge, -log f_pre - log f_post, the densities learned with these weights (the
    mapping's edges 1, the others 0; the first round's scoreboard shares)."""
    return -(_log_density(key, pre, weight, n_bins, kernel) + _log_density(key, post, weight, n_bins, kernel))


def _count_costs(key: np.ndarray, parent: np.ndarray, chosen_parent: np.ndarray, chosen_key: np.ndarray,
                 n_parents_of_key: dict[int, int], max_calls: int) -> dict[int, np.ndarray]:
    """Per key, -log P(N >= j) for j = 1..max_calls, from the current mapping (N: calls to the key's
    callee made by one incoming call of the key's caller)."""
    keys = np.unique(key)
    at_least = np.zeros((len(keys), max_calls))
    if len(chosen_key):
        o = np.lexsort((chosen_parent, chosen_key))
        ck, cpar = chosen_key[o], chosen_parent[o]
        new = np.r_[True, (ck[1:] != ck[:-1]) | (cpar[1:] != cpar[:-1])]
        starts = np.flatnonzero(new)
        counts = np.diff(np.r_[starts, len(ck)])          # calls per (key, incoming call)
        at = np.searchsorted(keys, ck[starts])
        for j in range(1, max_calls + 1):
            at_least[:, j - 1] = np.bincount(at, weights=counts >= j, minlength=len(keys))
    n_in = np.maximum([n_parents_of_key.get(k, 0) for k in keys.tolist()], 1).astype(np.float64)
    out: dict[int, np.ndarray] = {}
    for i, k in enumerate(keys.tolist()):
        out[k] = -np.log((at_least[i] + 0.5) / (n_in[i] + 1.0))
    return out


def infer(messages: pd.DataFrame, **params) -> PathsResult:
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"traceweaver: unknown parameters {sorted(unknown)} (known: {sorted(DEFAULTS)})")
    p = {**DEFAULTS, **params}
    check(p)
    cp = call_pairs(messages)
    n, nn = cp.n, cp.nodes.n
    child, parent, rank = candidates(cp, int(p["max_parents"]))
    chosen = pick(child, parent, rank.astype(np.float64), n)          # the start: latest-started
    if child.size == 0:
        return result("traceweaver", cp, chosen, p)
    per_decade = int(p["bins_per_decade"])
    n_bins = int((HI - LO) * per_decade) + 1
    key, pre, post = edge_bins(cp, child, parent, per_decade)
    # incoming calls per (caller, service): the denominators of the call graph's shares
    in_key = cp.caller * nn + cp.callee
    n_in = pd.Series(in_key).value_counts()
    n_parents_of_key = {int(k): int(n_in.get(int(k) // nn, 0)) for k in np.unique(key).tolist()}
    max_calls = int(p["max_calls"])
    # the components of calls to one callee sharing candidates, solved one by one
    dest = cp.callee[child]
    pcode, _ = pd.factorize(parent * nn + dest)
    graph = coo_matrix((np.ones(child.size), (child, n + pcode)), shape=(n + pcode.max() + 1,) * 2)
    _, comp = connected_components(graph, directed=False)
    comp_of = comp[child]
    order = np.lexsort((cp.out_start[child], comp_of))
    bounds = np.flatnonzero(np.r_[True, comp_of[order][1:] != comp_of[order][:-1], True])
    # the first round's delays from every candidate, each call's weight shared among its candidates
    # (Project5's scoreboard): the true delays pile up, the others spread; later rounds: the mapping's
    weight = 1.0 / np.bincount(child, minlength=n)[child]
    for r in range(max(1, int(p["rounds"]))):
        if r:
            weight = (chosen[child] == parent).astype(np.float64)
        kernel = float(p["kernel"]) if r else 0.0   # the scoreboard's spread is no delay's spread
        cost = edge_costs(key, pre, post, weight, n_bins, kernel)
        has = chosen[child] == parent
        slots = _count_costs(key, parent, parent[has], key[has], n_parents_of_key, max_calls)
        before = chosen
        chosen = _solve(child, parent, key, cost, slots, order, bounds, n, max_calls,
                        float(p["leave_cost"]), int(p["window"]), cp.out_start)
        if r and np.array_equal(chosen, before):
            break                                   # settled: another round would change nothing
    chosen, warnings = refine(cp, child, parent, cost, chosen, p)
    # whole-request consistency (weaver_cross.py): the join gap learned from this mapping's
    # requests, then the joint choice again where it tells candidates apart, for `cross_rounds`
    for _ in range(int(p["cross_rounds"]) if int(p["joint_rounds"]) else 0):
        extra, joined = join_costs(cp, child, parent, chosen, per_decade, float(p["kernel"]))
        if not joined:
            break                                   # no request reaches a service twice: nothing to add
        before = chosen
        chosen, more = refine(cp, child, parent, cost, chosen, p, extra, rounds=1)
        warnings += more
        if np.array_equal(chosen, before):
            break
    return result("traceweaver", cp, chosen, p, warnings)


def _solve(child, parent, key, cost, slots, order, bounds, n, max_calls, leave_cost, window, out_start):
    """The assignment, component by component (and window by window within a large one)."""
    chosen = np.full(n, -1, dtype=np.int64)
    if not len(key):
        return chosen
    # the slot costs as a table row per key (a row look-up per candidate, not a dict look-up)
    kcode, kuniq = pd.factorize(key)
    table = np.array([slots[int(k)] for k in kuniq.tolist()], dtype=np.float64).reshape(len(kuniq), max_calls)
    first = table[kcode, 0]
    # components of one call (the most): its cheapest candidate, all at once
    comp_len = np.diff(bounds)
    comp_of = np.repeat(np.arange(len(comp_len)), comp_len)          # per position in `order`
    kid = child[order]
    single = np.zeros(len(comp_len), dtype=bool)
    lo = np.minimum.reduceat(kid, bounds[:-1])
    hi = np.maximum.reduceat(kid, bounds[:-1])
    single[:] = lo == hi
    alone = order[single[comp_of]]
    if alone.size:
        total = cost[alone] + first[alone]
        got = pick(child[alone], parent[alone], total, n)
        best = np.full(n, np.inf)
        np.minimum.at(best, child[alone], total)
        keep = got >= 0
        keep &= best < leave_cost
        chosen[keep] = got[keep]
    # each component's calls and candidates ranked in it at once (np.unique's order and inverse per
    # component, without a numpy round per component: most are a handful of calls)
    par = parent[order]
    row, kids, kptr = _dense(comp_of, kid, len(comp_len))
    col, pars, pptr = _dense(comp_of, par, len(comp_len))
    vals = cost[order][:, None] + table[kcode[order]]                # per candidate, its slots' costs
    multi = np.flatnonzero(~single)
    k_of, q_of = np.diff(kptr)[multi], np.diff(pptr)[multi]
    small = k_of <= window
    _solve_small(multi[small], k_of[small], q_of[small], bounds, row, col, kids, kptr, pars, pptr,
                 vals, max_calls, leave_cost, chosen)
    for c in multi[~small].tolist():
        a, b = bounds[c], bounds[c + 1]
        idx = order[a:b]
        kids_all = pd.unique(child[idx])
        used: dict[int, int] = {}                   # parent -> slots taken by earlier windows
        for w0 in range(0, len(kids_all), window):
            sel = idx[np.isin(child[idx], kids_all[w0:w0 + window])]
            _assign(child[sel], parent[sel], kcode[sel], cost[sel], table, used, chosen, max_calls, leave_cost)
    return chosen


def _solve_small(comps, k_of, q_of, bounds, row, col, kids, kptr, pars, pptr, vals, max_calls,
                 leave_cost, chosen) -> None:
    """The components of at most `window` calls, those of one shape (calls, candidates) at once: their
    cost matrices built as one array (the same matrices as one by one), then one exact assignment per
    component."""
    if not len(comps):
        return
    j = np.arange(max_calls)
    shape = k_of * (int(q_of.max()) + 1) + q_of
    for s in np.unique(shape).tolist():
        cs = comps[shape == s]
        k, q = int(k_of[shape == s][0]), int(q_of[shape == s][0])
        m = np.full((len(cs), k, q * max_calls + k), 1e9)
        # every candidate of these components: its component's slot in `cs`, its row and columns
        lo, hi = bounds[cs], bounds[cs + 1]
        pos = np.repeat(lo - np.r_[0, np.cumsum(hi - lo)[:-1]], hi - lo) + np.arange(int((hi - lo).sum()))
        g = np.repeat(np.arange(len(cs)), hi - lo)
        m[g[:, None], row[pos][:, None], col[pos][:, None] * max_calls + j] = vals[pos]
        m[:, np.arange(k), q * max_calls + np.arange(k)] = leave_cost
        got = np.empty((len(cs), k), dtype=np.int64)
        for i in range(len(cs)):
            got[i] = linear_sum_assignment(m[i])[1]       # rows come back in order, all assigned (k <= columns)
        ok = (got < q * max_calls) & (np.take_along_axis(m, got[:, :, None], axis=2)[:, :, 0] < 1e9)
        gi, ri = np.nonzero(ok)
        chosen[kids[kptr[cs[gi]] + ri]] = pars[pptr[cs[gi]] + got[gi, ri] // max_calls]


def _dense(group: np.ndarray, value: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank of each value among its group's distinct values, sorted; those distinct values, group
    after group; each group's start in them): np.unique(return_inverse) of every group at once."""
    order = np.lexsort((value, group))
    g, v = group[order], value[order]
    new = np.ones(len(v), dtype=bool)
    new[1:] = (g[1:] != g[:-1]) | (v[1:] != v[:-1])
    dense = np.cumsum(new) - 1
    ptr = np.searchsorted(g[new], np.arange(n_groups + 1))
    rank = np.empty(len(v), dtype=np.int64)
    rank[order] = dense - ptr[g]
    return rank, v[new], ptr


def _rank(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(a, return_inverse=True) for the small arrays of one component, without its overhead."""
    order = a.argsort(kind="stable")
    s = a[order]
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    inv = np.empty(len(s), dtype=np.int64)
    inv[order] = np.cumsum(new) - 1
    return s[new], inv


def _assign(child, parent, kcode, cost, table, used, chosen, max_calls, leave_cost) -> None:
    """One exact assignment of calls (to one callee) to their candidates' slots."""
    kids, row = _rank(child)
    pars, col = _rank(parent)
    k, q = len(kids), len(pars)
    key_of = np.empty(q, dtype=np.int64)
    key_of[col] = kcode                             # one callee: a parent's key is its own
    # slot j of a parent is its (taken + j + 1)-th call: cost -log P(N >= taken + j + 1)
    j = np.arange(max_calls)
    if used:
        taken = np.array([used.get(int(x), 0) for x in pars.tolist()], dtype=np.int64)
        at = taken[:, None] + j[None, :]
        extra = np.where(at < max_calls, table[key_of[:, None], np.minimum(at, max_calls - 1)], 1e9)
    else:
        extra = table[key_of]
    m = np.full((k, q * max_calls + k), 1e9)
    cols = col[:, None] * max_calls + j[None, :]
    m[row[:, None], cols] = cost[:, None] + extra[col]
    m[np.arange(k), q * max_calls + np.arange(k)] = leave_cost
    r, c = linear_sum_assignment(m)
    ok = (c < q * max_calls) & (m[r, c] < 1e9)
    got = pars[c[ok] // max_calls]
    chosen[kids[r[ok]]] = got
    if used is not None:
        for x in got.tolist():
            used[x] = used.get(x, 0) + 1
