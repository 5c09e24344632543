"""TraceWeaver's joint choice (after Ashok et al., SIGCOMM'24, section 4; our own implementation from
the paper's method, none of its code), run on the mapping weaver.py's per-callee assignment settles:

1. **Candidate mappings per incoming call.** Each incoming call p at a service X offers a ranked set
   of *tuples*: a choice of the outgoing calls it encloses, one set for its whole visit at X (every
   callee at once, where weaver.py's assignment sees one callee at a time). A tuple honours the
   call graph: its callees are one of the *shapes* (multisets of callees) that incoming calls of
   p's key (caller, X) make under the current mapping, each with its share (at most `shapes` of
   them, the empty one included); p's current tuple is always a candidate too.
2. **Scored by the chain of delays** the paper learns per service: from p's arrival to its first
   call, from each call to the next (from the previous call's return when it came back before the
   next left, else from its departure: parallel calls leave in a burst), and from the last return
   to p's reply; each gap's density a histogram per (key, callee before, callee after), learned from
   the current mapping and smoothed like weaver.py's. A request's parallel fan-out leaves in a tight
   burst, so a tuple mixing two requests' bursts pays for it even where p's own stamps (nginx's
   whole milliseconds) cannot tell two requests apart. Cost: -log P(shape) - sum of log densities.
   Per p the `top_k` cheapest tuples are kept (every combination when there are at most
   `max_combos`, else the best `top_k` by each call's own cost per callee, combined).
3. **A joint choice across concurrent requests**: a maximum-weight independent set over the tuples
   (each incoming call takes exactly one tuple, the empty one included; no two chosen tuples share an
   outgoing call; each call left out costs `leave_cost`, as a root), as a 0-1 program solved by
   HiGHS (scipy.optimize.milp), exactly, per component of incoming calls linked through shared
   candidate calls, in chunks of at most `chunk` incoming calls in time order (calls taken by an
   earlier chunk stay taken). A component where every incoming call's best tuple is disjoint from
   the others' needs no solver. A chunk HiGHS does not solve within `milp_seconds` keeps the
   per-callee assignment's mapping (counted in a warning).

Only components where some outgoing call has two or more candidates are looked at: elsewhere the
mapping is forced. The whole is repeated `joint_rounds` times, the model relearned from the result.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

FLOOR = 1e-7                    # s: delays below a tenth of a µs share the first bin
LO, HI = -7.0, 3.0              # log10 s range of the histograms
MAX_KERNEL = 8                  # bins: the widest smoothing
JOINT_DEFAULTS: dict[str, object] = {
    "joint_rounds": 1,          # rounds of the joint choice (0: weaver.py's per-callee mapping only)
    "top_k": 8,                 # candidate tuples kept per incoming call
    "shapes": 4,                # call-graph shapes tried per incoming call
    "max_combos": 256,          # every combination enumerated up to this many, else a beam
    "chunk": 300,               # incoming calls solved together at most
    "unary": 1.0,               # weight of each call's own cost (weaver.py's) beside the chain's
    "milp_seconds": 5.0,        # HiGHS's time limit per chunk (then the per-callee mapping stays)
}
_MIX = np.random.default_rng(43).integers(1, 2**62, size=1 << 16, dtype=np.int64)   # shape hashing


def log_bins(x: np.ndarray, per_decade: int) -> np.ndarray:
    """Log-spaced bins of durations in seconds (below FLOOR: the first bin)."""
    v = np.log10(np.maximum(x, FLOOR))
    return np.clip(((v - LO) * per_decade).astype(np.int64), 0, int((HI - LO) * per_decade))


def _table(code: np.ndarray, b: np.ndarray, n_keys: int, n_bins: int, kernel: float) -> np.ndarray:
    """Per key code, the log density of each bin (half a count added; smoothed by a triangular kernel
    of Silverman's width for the key's spread times `kernel`, as weaver._log_density); a last row
    for keys never seen: uniform."""
    mass = np.zeros((n_keys + 1, n_bins))
    np.add.at(mass, (code, b), 1.0)
    total = mass.sum(axis=1)
    if kernel and len(code):
        tot = np.maximum(total[:n_keys], 1e-12)
        bf = b.astype(np.float64)
        mean = np.bincount(code, weights=bf, minlength=n_keys) / tot
        var = np.bincount(code, weights=bf * bf, minlength=n_keys) / tot - mean ** 2
        half = kernel * np.sqrt(6) * 1.06 * np.sqrt(np.maximum(var, 0)) * np.maximum(total[:n_keys], 1) ** -0.2
        half = np.r_[np.minimum(half, MAX_KERNEL), 0.0][:, None]
        own, out, wsum = mass, mass.copy(), np.ones((n_keys + 1, 1))
        for d in range(1, MAX_KERNEL + 1):
            w = np.maximum(0.0, 1.0 - d / (half + 1))
            if not w.any():
                break
            out[:, d:] += w * own[:, :-d]
            out[:, :-d] += w * own[:, d:]
            wsum = wsum + 2 * w
        mass = out / wsum
    return np.log((mass + 0.5) / (total[:, None] + 0.5 * n_bins))


class Model:
    """The call graph's shapes and the chain's gap densities, learned from a mapping."""

    def __init__(self, cp, chosen: np.ndarray, per_decade: int, kernel: float, n_shapes: int):
        self.cp, self.per_decade, self.nn = cp, per_decade, cp.nodes.n
        self.n_bins = int((HI - LO) * per_decade) + 1
        self.in_key = cp.caller * self.nn + cp.callee
        n = cp.n
        kids = np.flatnonzero(chosen >= 0)
        self.shape_hash = np.zeros(n, dtype=np.int64)
        np.add.at(self.shape_hash, chosen[kids], _MIX[cp.callee[kids] % len(_MIX)])
        # shares of each shape per incoming key, and each key's most common shapes (as callee lists)
        frame = pd.DataFrame({"key": self.in_key, "shape": self.shape_hash, "p": np.arange(n)})
        counts = frame.groupby(["key", "shape"], sort=False).agg(n=("p", "size"), p=("p", "first")).reset_index()
        total = counts.groupby("key")["n"].transform("sum")
        counts["logp"] = np.log((counts["n"] + 0.5) / (total + 1.0))
        self.logp = dict(zip(zip(counts["key"].tolist(), counts["shape"].tolist(), strict=True), counts["logp"].tolist(), strict=False))
        self.floor = {int(k): float(np.log(0.5 / (t + 1.0))) for k, t in counts.groupby("key")["n"].sum().items()}
        counts = counts.sort_values(["key", "n"], ascending=[True, False])
        counts = counts[counts.groupby("key").cumcount() < n_shapes]
        by_parent = pd.Series(cp.callee[kids]).groupby(chosen[kids]).agg(lambda s: sorted(s.tolist()))
        self.shapes: dict[int, list[tuple[int, dict[int, int], float]]] = {}
        for key, shp, p, lp in zip(counts["key"].tolist(), counts["shape"].tolist(), counts["p"].tolist(),
                                   counts["logp"].tolist(), strict=True):
            callees = by_parent.get(p, [])
            need: dict[int, int] = {}
            for d in callees:
                need[d] = need.get(d, 0) + 1
            self.shapes.setdefault(key, []).append((shp, need, lp))
        # the chain's gaps of every current tuple, and their density tables
        order = np.lexsort((cp.out_start[kids], chosen[kids]))
        par, kid = chosen[kids][order], kids[order]
        gk, gv, _ = self._tuple_gaps(np.arange(n), par, kid)
        self.codes = pd.Index(pd.unique(gk))
        self.table = _table(self.codes.get_indexer(gk), log_bins(gv, per_decade), len(self.codes),
                            self.n_bins, kernel)

    def costs(self, owner: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The chain's cost of tuples: rows (tuple, call) with owner[tuple] its incoming call; tuples
        with no row are empty. Without the shape's prior."""
        cp = self.cp
        t_of, kid = rows[:, 0], rows[:, 1]
        order = np.lexsort((cp.out_start[kid], t_of))
        t_of, kid = t_of[order], kid[order]
        # tuples as pseudo-parents: gaps keyed by their owner's key (the `par` of _gaps is a tuple id)
        keys, vals, tid = self._tuple_gaps(owner, t_of, kid)
        idx = self.codes.get_indexer(keys)
        idx[idx < 0] = len(self.codes)
        lg = self.table[idx, log_bins(vals, self.per_decade)]
        return -np.bincount(tid, weights=lg, minlength=len(owner))

    def _tuple_gaps(self, owner, t_of, kid):
        cp, nn = self.cp, self.nn
        IN, OUT = nn, nn + 1
        p_of = owner[t_of]
        base = self.in_key[p_of] * (nn + 2)
        first = np.r_[True, t_of[1:] != t_of[:-1]] if len(t_of) else np.zeros(0, bool)
        last = np.r_[t_of[1:] != t_of[:-1], True] if len(t_of) else np.zeros(0, bool)
        prev = np.maximum(np.r_[-1, kid[:-1]], 0) if len(kid) else kid
        before = np.where(first, IN, cp.callee[prev])
        back = cp.out_end[prev]
        since = np.where(back <= cp.out_start[kid], back, cp.out_start[prev])
        since = np.where(first, cp.in_start[p_of], since)
        keys = [(base + before) * (nn + 2) + cp.callee[kid]]
        vals = [cp.out_start[kid] - since]
        tids = [t_of]
        if len(t_of):
            starts = np.flatnonzero(first)
            latest_back = np.maximum.reduceat(cp.out_end[kid], starts)
            tt, ll = t_of[starts], kid[last]
            keys.append((self.in_key[owner[tt]] * (nn + 2) + cp.callee[ll]) * (nn + 2) + OUT)
            vals.append(cp.in_end[owner[tt]] - latest_back)
            tids.append(tt)
        empty = np.setdiff1d(np.arange(len(owner)), t_of)
        pe = owner[empty]
        keys.append((self.in_key[pe] * (nn + 2) + IN) * (nn + 2) + OUT)
        vals.append(cp.in_end[pe] - cp.in_start[pe])
        tids.append(empty)
        return np.concatenate(keys), np.concatenate(vals), np.concatenate(tids)


def refine(cp, child: np.ndarray, parent: np.ndarray, unary: np.ndarray, chosen: np.ndarray,
           p: dict) -> tuple[np.ndarray, list[str]]:
    """The joint choice, from the per-callee mapping `chosen` (a parent pair per pair, -1: a root) and
    the candidate edges (child, parent) with each edge's own cost `unary` (weight.py's last round's,
    used to order a callee's candidates when not every combination is tried)."""
    n, warnings = cp.n, []
    if int(p["joint_rounds"]) <= 0 or child.size == 0:
        return chosen, warnings
    n_cand = np.bincount(child, minlength=n)
    # components over parents (node p) and calls (node n + c) linked by candidate edges; only
    # those where some call has a choice
    graph = coo_matrix((np.ones(child.size), (n + child, parent)), shape=(2 * n, 2 * n))
    _, comp = connected_components(graph, directed=False)
    amb = np.unique(comp[n + child[n_cand[child] >= 2]])
    sel = np.isin(comp[parent], amb)
    e_child, e_parent, e_cost = child[sel], parent[sel], unary[sel]
    o = np.lexsort((e_cost, cp.callee[e_child], e_parent))
    e_child, e_parent, e_cost = e_child[o], e_parent[o], e_cost[o]
    ps = np.unique(e_parent)
    if not ps.size:
        return chosen, warnings
    ptr = np.searchsorted(e_parent, np.r_[ps, n])
    at = {int(x): (int(a), int(b)) for x, a, b in zip(ps.tolist(), ptr[:-1].tolist(), ptr[1:].tolist(), strict=True)}
    ps = ps[np.lexsort((cp.in_start[ps], comp[ps]))]
    cut = np.flatnonzero(np.r_[True, comp[ps][1:] != comp[ps][:-1]])
    chunks = []
    for a, b in zip(cut.tolist(), np.r_[cut[1:], len(ps)].tolist(), strict=True):
        chunks += [ps[x:min(x + int(p["chunk"]), b)] for x in range(a, b, int(p["chunk"]))]
    big = np.bincount(comp[ps], minlength=comp.max() + 1)[comp[ps]] > int(p["chunk"])
    failed = 0
    for _ in range(int(p["joint_rounds"])):
        model = Model(cp, chosen, int(p["bins_per_decade"]), float(p["kernel"]), int(p["shapes"]))
        new, taken = chosen.copy(), np.zeros(n, dtype=bool)
        # the components of at most `chunk` incoming calls, all at once (one program for those
        # whose best tuples collide); the larger ones chunk by chunk in time order
        groups = [ps[~big]] if (~big).any() else []
        groups += chunks
        for ch in groups:
            got = _choose(ch.tolist(), at, e_child, e_cost, comp, model, chosen, taken, p)
            if got is None:
                failed += 1
                continue
            kids = np.concatenate([e_child[slice(*at[x])] for x in ch.tolist()])
            kids = kids[~taken[kids]]
            new[kids] = -1
            owners, calls = got
            new[calls] = owners
            taken[calls] = True
        if np.array_equal(new, chosen):
            break
        chosen = new
    if failed:
        warnings.append(f"traceweaver: {failed} groups of concurrent calls not solved within "
                        f"{p['milp_seconds']} s: their per-callee mapping kept")
    return chosen, warnings


def _choose(ps: list[int], at: dict, e_child: np.ndarray, e_cost: np.ndarray, comp: np.ndarray, model: Model,
            chosen: np.ndarray, taken: np.ndarray, p: dict) -> tuple[np.ndarray, np.ndarray] | None:
    """The chosen tuples of these incoming calls as (owner, call) rows; None: not solved in time."""
    cp, top_k, max_combos = model.cp, int(p["top_k"]), int(p["max_combos"])
    owner, rows, prior, forced, own = [], [], [], [], {}
    for x in ps:
        sl = slice(*at[x])
        kids = [c for c in e_child[sl].tolist() if not taken[c]]
        own.update(((x, c), v) for c, v in zip(e_child[sl].tolist(), e_cost[sl].tolist(), strict=True))
        by: dict[int, list[int]] = {}
        for c in kids:
            by.setdefault(int(cp.callee[c]), []).append(c)
        key = int(model.in_key[x])
        floor = model.floor.get(key, -10.0)
        seen: set[tuple[int, ...]] = set()
        current = tuple(sorted(c for c in kids if chosen[c] == x))
        cur_hash = int(_MIX[cp.callee[list(current)] % len(_MIX)].sum()) if current else 0
        options = [(current, model.logp.get((key, cur_hash), floor), True)]
        if current:
            options.append(((), model.logp.get((key, 0), floor), False))
        for _, need, lp in model.shapes.get(key, []):
            if any(len(by.get(d, ())) < k for d, k in need.items()):
                continue
            pools = [by[d] for d in need]
            size = np.prod([len(q) for q in pools], dtype=np.float64)
            if size > max_combos:     # a beam: each callee's best candidates by their own cost
                m = max(top_k, int(max_combos ** (1 / max(1, sum(need.values())))))
                pools = [q[:m] for q in pools]
            combos = itertools.product(*[itertools.combinations(q, k) for q, k in zip(pools, need.values(), strict=True)])
            for combo in itertools.islice(combos, max_combos):
                options.append((tuple(sorted(itertools.chain.from_iterable(combo))), lp, False))
        for t, lp, is_current in options:
            if t in seen:
                continue
            seen.add(t)
            tid = len(owner)
            owner.append(x)
            rows += [(tid, c) for c in t]
            prior.append(lp)
            forced.append(is_current)
    owner_a = np.asarray(owner, dtype=np.int64)
    rows_a = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
    cost = model.costs(owner_a, rows_a) - np.asarray(prior)
    if float(p["unary"]):           # beside the chain, each call's own cost (weaver.py's pre and post)
        uc = np.fromiter((own[(o, c)] for o, c in zip(owner_a[rows_a[:, 0]].tolist(), rows_a[:, 1].tolist(), strict=True)),
                         dtype=np.float64, count=len(rows_a))
        cost += float(p["unary"]) * np.bincount(rows_a[:, 0], weights=uc, minlength=len(owner_a))
    size = np.bincount(rows_a[:, 0], minlength=len(owner_a))
    value = cost - float(p["leave_cost"]) * size            # minimised
    # the top_k per incoming call (its current tuple always kept)
    order = np.lexsort((value, owner_a))
    rank = np.arange(len(order)) - np.searchsorted(owner_a[order], owner_a[order])
    keep = (rank < top_k)[np.argsort(order)] | np.asarray(forced)
    best = np.zeros(len(owner_a), dtype=bool)
    best[order[rank == 0]] = True
    # incoming calls whose best tuples collide, and everyone of their components: a program each
    in_best = rows_a[best[rows_a[:, 0]]]
    calls, first, counts = np.unique(in_best[:, 1], return_index=True, return_counts=True)
    clash = np.zeros(comp.max() + 1, dtype=bool)
    clash[comp[owner_a[in_best[np.isin(in_best[:, 1], calls[counts > 1]), 0]]]] = True
    hard = clash[comp[owner_a]] & keep
    pick = best & ~clash[comp[owner_a]]
    if hard.any():
        tids = np.flatnonzero(hard)
        remap = np.full(len(owner_a), -1)
        remap[tids] = np.arange(len(tids))
        r = rows_a[hard[rows_a[:, 0]]]
        got = _mwis(remap[r[:, 0]], r[:, 1], owner_a[tids], value[tids], float(p["milp_seconds"]))
        if got is None:
            return None
        pick[tids[got]] = True
    r = rows_a[pick[rows_a[:, 0]]]
    return owner_a[r[:, 0]], r[:, 1]


def _mwis(t_of: np.ndarray, call: np.ndarray, owner: np.ndarray, value: np.ndarray,
          seconds: float) -> np.ndarray | None:
    """The tuples to take: exactly one per incoming call, no call in two, the least total value; a
    0-1 program for HiGHS. None when it finds no solution in time."""
    n_t = len(owner)
    _, prow = np.unique(owner, return_inverse=True)
    _, crow = np.unique(call, return_inverse=True)
    one = coo_matrix((np.ones(n_t), (prow, np.arange(n_t))), shape=(int(prow.max()) + 1, n_t)).tocsr()
    most = coo_matrix((np.ones(len(call)), (crow, t_of)), shape=(int(crow.max(initial=-1)) + 1, n_t)).tocsr()
    cons = [LinearConstraint(one, 1, 1)]
    if most.shape[0]:
        cons.append(LinearConstraint(most, 0, 1))
    res = milp(value, constraints=cons, integrality=np.ones(n_t), bounds=Bounds(0, 1),
               options={"time_limit": seconds})
    if res.x is None:
        return None
    return np.flatnonzero(res.x > 0.5)
