"""TraceWeaver's joint choice (after Ashok et al., SIGCOMM'24; our own implementation, none of its
code: the paper's text was not to be had here, its method was read from its artifact's source, which
ranks candidate mappings per incoming span and picks among them with a commercial MWIS solver), run
on the mapping weaver.py's per-callee assignment settles:

1. **Candidate mappings per incoming call.** Each incoming call p at a service X offers a ranked set
   of *tuples*: a choice of the outgoing calls it encloses, one set for its whole visit at X (every
   callee at once, where weaver.py's assignment sees one callee at a time). A tuple honours the
   call graph: its callees are one of the *shapes* (multisets of callees) that incoming calls of
   p's key (caller, X) make under the current mapping, each with its share (at most `shapes` of
   them); p's current tuple and the empty one are always candidates too.
2. **Scored by the chain of delays** the artifact learns per service: from p's arrival to its first
   call, from each call to the next (from the previous call's return when it came back before the
   next left, else from its departure: parallel calls leave in a burst), and from the last return
   to p's reply; each gap's density a histogram per (key, callee before, callee after), learned from
   the current mapping and smoothed like weaver.py's (calls leaving in the same µs are chained in
   callee order, never in the export's row order). A request's parallel fan-out leaves in a tight
   burst, so a tuple mixing two requests' bursts pays for it even where p's own stamps (nginx's
   whole milliseconds) cannot tell two requests apart. Cost: -log P(shape) - the chain's log
   densities + `unary` x each call's own cost (weaver.py's arrival-to-call and return-to-reply
   densities: the chain alone reads a call that leaves late among parallel siblings as a long gap
   after the one before). Per p the `top_k` cheapest tuples are kept; a shape's combinations are
   all tried up to `max_combos`, else those of each callee's best candidates by their own cost.
3. **A joint choice across concurrent requests**: a maximum-weight independent set over the tuples
   (each incoming call takes exactly one tuple, the empty one included; no two chosen tuples share an
   outgoing call; each call left out costs `leave_cost`, as a root), as a 0-1 program for HiGHS
   (scipy.optimize.milp): its linear relaxation first, over every component of incoming calls
   linked by shared candidate calls whose best tuples collide (a component where they do not needs
   no solver), then the 0-1 program on the components where the relaxation is fractional (24 of
   14,870 tuples on media_load150). Before HiGHS, the parts of at most five incoming calls are
   solved exactly by enumeration (weaver_small.py). Components of more than `chunk` incoming calls are solved in
   chunks in time order (calls taken by an earlier chunk stay taken: greedy between chunks, so a
   chunk may leave a call a later one cannot take; on the artifact's 18 sets the largest component
   has 80 incoming calls, so none is chunked). Where HiGHS finds no solution
   within `milp_seconds`, that part keeps the per-callee mapping (counted in a warning). Ties (many
   with whole-millisecond stamps) leave calls where the per-callee assignment put them.

Only components where some outgoing call has two or more candidates are looked at: elsewhere the
mapping is forced. The whole is repeated up to `joint_rounds` times, the model relearned from the
result, until a round moves at most `settle` of the calls that have a choice of parent (on the
artifact's sets: one round, two for media and hotel 25, where a second round moved 0-1% of them,
at the first's cost): the chain's densities are learned from the per-callee
mapping first, and where that mixes many requests' calls (a short trace: 80 requests of twins
reaching a service in the same instant, tests/test_paths_rivals.py) one round learns a blurred chain
and picks worse than the per-callee mapping (45% against 53%), three rounds find them all.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from analysis.paths import weaver_small
from rundir.errors import UserError

FLOOR = 1e-7                    # s: delays below a tenth of a µs share the first bin
LO, HI = -7.0, 3.0              # log10 s range of the histograms
MAX_KERNEL = 8                  # bins: the widest smoothing
JOINT_DEFAULTS: dict[str, object] = {
    "joint_rounds": 3,          # rounds of the joint choice at most (0: weaver.py's per-callee mapping only)
    "settle": 0.02,             # no further round once one moves at most this share of the calls with a choice
    "top_k": 8,                 # candidate tuples kept per incoming call
    "shapes": 4,                # call-graph shapes tried per incoming call
    "max_combos": 256,          # every combination enumerated up to this many, else a beam
    "chunk": 300,               # incoming calls solved together at most
    "unary": 2.0,               # weight of each call's own cost (weaver.py's) beside the chain's
    "milp_seconds": 5.0,        # HiGHS's time limit per chunk (then the per-callee mapping stays)
}
TIE = 1e-6                      # per call a tuple leaves where the per-callee assignment put it
_MIX = np.random.default_rng(43).integers(1, 2**62, size=1 << 16, dtype=np.int64)   # shape hashing


def check(p: dict) -> None:
    """The joint choice's parameters in range, else one line for the user (--param)."""
    least = {"joint_rounds": 0, "cross_rounds": 0, "top_k": 1, "shapes": 1, "max_combos": 1, "chunk": 1}
    for k, lo in least.items():
        if not int(p[k]) >= lo:
            raise UserError(f"traceweaver: --param {k}={p[k]}: must be at least {lo}")
    if not 0 <= float(p["settle"]) <= 1:
        raise UserError(f"traceweaver: --param settle={p['settle']}: must be a share from 0 to 1")
    if not 0 <= float(p["unary"]) < np.inf:
        raise UserError(f"traceweaver: --param unary={p['unary']}: must be a number >= 0")
    if not 0 < float(p["milp_seconds"]) < np.inf:
        raise UserError(f"traceweaver: --param milp_seconds={p['milp_seconds']}: must be a number of seconds > 0")


def log_bins(x: np.ndarray, per_decade: int) -> np.ndarray:
    """Log-spaced bins of durations in seconds (below FLOOR: the first bin)."""
    v = np.log10(np.maximum(x, FLOOR))
    return np.clip(((v - LO) * per_decade).astype(np.int64), 0, int((HI - LO) * per_decade))


def density_table(code: np.ndarray, b: np.ndarray, n_keys: int, n_bins: int, kernel: float) -> np.ndarray:
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


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The indices lo[0]..hi[0]-1, lo[1]..hi[1]-1, ... as one array."""
    ln = np.maximum(hi - lo, 0)
    return np.repeat(lo - np.r_[0, np.cumsum(ln)[:-1]], ln) + np.arange(int(ln.sum()))


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
        # (numpy: pandas' groupby cost more than the rest of this; the same groups and order)
        o = np.lexsort((self.shape_hash, self.in_key))               # stable: a group's rows by index
        k_s, h_s = self.in_key[o], self.shape_hash[o]
        cut = np.flatnonzero(np.r_[True, (k_s[1:] != k_s[:-1]) | (h_s[1:] != h_s[:-1])])
        g_key, g_shape, g_first = k_s[cut], h_s[cut], o[cut]         # first: the first incoming call
        g_n = np.diff(np.r_[cut, n])
        kcut = np.flatnonzero(np.r_[True, g_key[1:] != g_key[:-1]])
        k_total = np.add.reduceat(g_n, kcut)
        total = np.repeat(k_total, np.diff(np.r_[kcut, len(g_key)]))
        g_logp = np.log((g_n + 0.5) / (total + 1.0))
        self.logp = dict(zip(zip(g_key.tolist(), g_shape.tolist(), strict=True), g_logp.tolist(), strict=True))
        self.floor = dict(zip(g_key[kcut].tolist(), np.log(0.5 / (k_total + 1.0)).tolist(), strict=True))
        # per key its most common shapes, ties in the order they first appear
        rank_o = np.lexsort((g_first, -g_n, g_key))
        g_key, g_n, g_first, g_logp = g_key[rank_o], g_n[rank_o], g_first[rank_o], g_logp[rank_o]
        within = np.arange(len(g_key)) - np.searchsorted(g_key, g_key)
        top = within < n_shapes
        counts = {"key": g_key[top], "p": g_first[top], "logp": g_logp[top]}
        # the shapes tried, by key: each as its sorted callees (those of one incoming call that made it)
        o = np.lexsort((cp.callee[kids], chosen[kids]))
        by_par, by_callee = chosen[kids][o], cp.callee[kids][o]
        rep = counts["p"]
        lo, hi = np.searchsorted(by_par, rep, "left"), np.searchsorted(by_par, rep, "right")
        self.sh_key = counts["key"]
        self.sh_logp = counts["logp"]
        self.sh_len = hi - lo
        self.sh_start = np.r_[0, np.cumsum(self.sh_len)[:-1]].astype(np.int64)
        self.el_callee = by_callee[_ranges(lo, hi)]
        # the chain's gaps of every current tuple, and their density tables
        order = np.lexsort((kids, cp.callee[kids], cp.out_start[kids], chosen[kids]))   # ties: by callee
        par, kid = chosen[kids][order], kids[order]
        gk, gv, _ = self._tuple_gaps(np.arange(n), par, kid)
        self.codes = pd.Index(pd.unique(gk))
        self.table = density_table(self.codes.get_indexer(gk), log_bins(gv, per_decade), len(self.codes),
                            self.n_bins, kernel)

    def costs(self, owner: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The chain's cost of tuples: rows (tuple, call) with owner[tuple] its incoming call; tuples
        with no row are empty. Without the shape's prior."""
        cp = self.cp
        t_of, kid = rows[:, 0], rows[:, 1]
        order = np.lexsort((kid, cp.callee[kid], cp.out_start[kid], t_of))     # as Model's
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
        empty = np.flatnonzero(np.bincount(t_of, minlength=len(owner)) == 0)
        pe = owner[empty]
        keys.append((self.in_key[pe] * (nn + 2) + IN) * (nn + 2) + OUT)
        vals.append(cp.in_end[pe] - cp.in_start[pe])
        tids.append(empty)
        return np.concatenate(keys), np.concatenate(vals), np.concatenate(tids)


def refine(cp, child: np.ndarray, parent: np.ndarray, unary: np.ndarray, chosen: np.ndarray,
           p: dict, extra: np.ndarray | None = None, rounds: int | None = None,
           learn_from: np.ndarray | None = None) -> tuple[np.ndarray, list[str]]:
    """The joint choice, from the per-callee mapping `chosen` (a parent pair per pair, -1: a root) and
    the candidate edges (child, parent) with each edge's own cost `unary` (weight.py's last round's,
    used to order a callee's candidates when not every combination is tried); `extra`, a cost per
    edge added as it is (weaver_cross.py's whole-request term): then only the components where it
    differs among some call's candidates are chosen again (elsewhere it changes nothing); `rounds`
    in place of `joint_rounds`; `learn_from`, a mapping the model is learned from in place of the
    current one (bench/paths_weaver_ceiling.py passes the truth: what these costs can tell at best)."""
    n, warnings = cp.n, []
    if int(p["joint_rounds"]) <= 0 or child.size == 0:
        return chosen, warnings
    n_cand = np.bincount(child, minlength=n)
    n_choice = int((n_cand >= 2).sum())               # calls with a choice of parent
    # components over parents (node p) and calls (node n + c) linked by candidate edges; only
    # those where some call has a choice
    graph = coo_matrix((np.ones(child.size), (n + child, parent)), shape=(2 * n, 2 * n))
    _, comp = connected_components(graph, directed=False)
    choice = n_cand[child] >= 2
    if extra is not None:           # the calls whose candidates the extra term tells apart
        lo = np.full(n, np.inf)
        hi = np.full(n, -np.inf)
        np.minimum.at(lo, child, extra)
        np.maximum.at(hi, child, extra)
        choice &= (hi - lo)[child] > 1e-9
    amb = np.unique(comp[n + child[choice]])
    sel = np.isin(comp[parent], amb)
    e_child, e_parent, e_cost = child[sel], parent[sel], unary[sel]
    if extra is not None:           # as weighed in _choose: own costs times `unary`, the extra as it is
        e_cost = e_cost + extra[sel] / max(float(p["unary"]), 1e-9)
    o = np.lexsort((e_cost, cp.callee[e_child], e_parent))
    e_child, e_parent, e_cost = e_child[o], e_parent[o], e_cost[o]
    ps = np.unique(e_parent)
    if not ps.size:
        return chosen, warnings
    ps = ps[np.lexsort((cp.in_start[ps], comp[ps]))]
    cut = np.flatnonzero(np.r_[True, comp[ps][1:] != comp[ps][:-1]])
    big = np.bincount(comp[ps], minlength=comp.max() + 1)[comp[ps]] > int(p["chunk"])
    chunks = []                                       # the large components' chunks, in time order
    for a, b in zip(cut.tolist(), np.r_[cut[1:], len(ps)].tolist(), strict=True):
        if big[a]:
            chunks += [ps[x:min(x + int(p["chunk"]), b)] for x in range(a, b, int(p["chunk"]))]
    failed = 0
    for _ in range(int(p["joint_rounds"]) if rounds is None else rounds):
        model = Model(cp, chosen if learn_from is None else learn_from, int(p["bins_per_decade"]),
                      float(p["kernel"]), int(p["shapes"]))
        new, taken = chosen.copy(), np.zeros(n, dtype=bool)
        # the components of at most `chunk` incoming calls, all at once (one program for those
        # whose best tuples collide); the larger ones chunk by chunk in time order
        groups = [ps[~big]] if (~big).any() else []
        groups += chunks
        for ch in groups:
            mine = np.isin(e_parent, ch) & ~taken[e_child]
            got = _choose(ch, e_parent[mine], e_child[mine], e_cost[mine], comp, model, chosen, p)
            if got is None:
                failed += 1
                continue
            new[e_child[mine]] = -1
            owners, calls = got
            new[calls] = owners
            taken[calls] = True
        moved = int((new != chosen).sum())
        chosen = new
        if moved <= float(p["settle"]) * n_choice:
            break                                 # settled: another round would move next to nothing
    if failed:
        warnings.append(f"traceweaver: {failed} groups of concurrent calls not solved within "
                        f"{p['milp_seconds']} s: their per-callee mapping kept")
    return chosen, warnings


def _options(ps: np.ndarray, e_par: np.ndarray, e_kid: np.ndarray, model: Model, chosen: np.ndarray,
             top_k: int, max_combos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The candidate tuples of the incoming calls `ps` over their open candidate edges (e_par, e_kid,
    sorted by parent, callee and own cost): (owner, prior, current, row_tuple, row_edge): each tuple's
    incoming call, its shape's log share, whether it is the current mapping's, and its calls as rows
    (tuple, index into the edges). First each incoming call's current tuple, then its empty one, then
    every shape's combinations of candidates (callees in the shape's order; a callee twice in a shape
    takes two distinct calls in the order of their cost), at most `max_combos` per shape."""
    cp, nn = model.cp, model.nn
    pool_key = e_par * nn + cp.callee[e_kid]
    # the current tuples and the empty ones
    cur = chosen[e_kid] == e_par
    h = np.zeros(cp.n, dtype=np.int64)
    np.add.at(h, e_par[cur], _MIX[cp.callee[e_kid[cur]] % len(_MIX)])
    keys = model.in_key[ps]
    floor = [model.floor.get(k, -10.0) for k in keys.tolist()]
    lp_cur = [model.logp.get((k, x), f) for k, x, f in zip(keys.tolist(), h[ps].tolist(), floor, strict=True)]
    lp_empty = [model.logp.get((k, 0), f) for k, f in zip(keys.tolist(), floor, strict=True)]
    n_p = len(ps)
    slot = np.zeros(cp.n, dtype=np.int64)
    slot[ps] = np.arange(n_p)
    owner = [ps, ps]
    prior = [np.asarray(lp_cur), np.asarray(lp_empty)]
    current = [np.ones(n_p, dtype=bool), np.zeros(n_p, dtype=bool)]
    row_t, row_e = [slot[e_par[cur]]], [np.flatnonzero(cur)]
    # (incoming call, shape) instances, expanded one element of the shape at a time
    lo = np.searchsorted(model.sh_key, keys, "left")
    hi = np.searchsorted(model.sh_key, keys, "right")
    shape = _ranges(lo, hi)
    ip = np.repeat(ps, hi - lo)
    length = model.sh_len[shape]
    width = int(length.max(initial=0))
    # each element's pool of candidates; a shape the candidates cannot fill is dropped
    big = np.zeros(len(shape))
    ok = np.ones(len(shape), dtype=bool)
    for pos in range(width):
        act = length > pos
        d = model.el_callee[model.sh_start[shape[act]] + pos]
        q = ip[act] * nn + d
        have = np.searchsorted(pool_key, q, "right") - np.searchsorted(pool_key, q, "left")
        rep = np.zeros(act.sum(), dtype=np.int64)
        if pos:
            same = d == model.el_callee[model.sh_start[shape[act]] + pos - 1]
            rep = np.where(same, _run(same), 0)
        ok[act] &= have > rep
        big[act] += np.log(np.maximum(have, 1))
    keep_each = np.where(big > np.log(max_combos),
                         np.maximum(top_k, np.floor(max_combos ** (1 / np.maximum(length, 1)))), np.inf)
    inst = np.flatnonzero(ok)
    t_inst = inst.copy()                                  # one partial tuple per instance, to expand
    picks = np.full((len(inst), max(width, 1)), -1, dtype=np.int64)
    last = np.full(len(inst), -1, dtype=np.int64)
    for pos in range(width):
        act = length[t_inst] > pos
        a = np.flatnonzero(act)
        sh = shape[t_inst[a]]
        d = model.el_callee[model.sh_start[sh] + pos]
        q = ip[t_inst[a]] * nn + d
        st = np.searchsorted(pool_key, q, "left")
        ln = np.minimum(np.searchsorted(pool_key, q, "right") - st, keep_each[t_inst[a]]).astype(np.int64)
        same = (d == model.el_callee[model.sh_start[sh] + pos - 1]) if pos else np.zeros(len(a), bool)
        first = np.where(same, last[a] - st + 1, 0)       # a callee twice: the next call after the last
        k = np.maximum(ln - first, 0)
        src = np.repeat(a, k)
        off = np.repeat(first - np.r_[0, np.cumsum(k)[:-1]], k) + np.arange(int(k.sum()))
        grown = picks[src]
        grown[:, pos] = np.repeat(st, k) + off
        rest = np.flatnonzero(~act)
        t_inst = np.r_[t_inst[rest], t_inst[src]]
        picks = np.vstack([picks[rest], grown])
        last = np.r_[last[rest], np.repeat(st, k) + off]
        o = np.argsort(t_inst, kind="stable")             # at most max_combos per instance
        t_inst, picks, last = t_inst[o], picks[o], last[o]
        rank = np.arange(len(t_inst)) - np.searchsorted(t_inst, t_inst)
        cap = rank < max_combos
        t_inst, picks, last = t_inst[cap], picks[cap], last[cap]
    base = 2 * n_p
    owner.append(ip[t_inst])
    prior.append(model.sh_logp[shape[t_inst]])
    current.append(np.zeros(len(t_inst), dtype=bool))
    r, c = np.nonzero(picks >= 0)
    row_t.append(base + r)
    row_e.append(picks[r, c])
    return (np.concatenate(owner), np.concatenate(prior), np.concatenate(current), np.concatenate(row_t),
            np.concatenate(row_e))


def _run(same: np.ndarray) -> np.ndarray:
    """Per position, how many positions before it in a row are `same` (the run length so far)."""
    idx = np.arange(len(same))
    start = np.maximum.accumulate(np.where(~same, idx, 0))
    return idx - start


def _choose(ps: np.ndarray, e_par: np.ndarray, e_kid: np.ndarray, e_cost: np.ndarray, comp: np.ndarray,
            model: Model, chosen: np.ndarray, p: dict) -> tuple[np.ndarray, np.ndarray] | None:
    """The chosen tuples of these incoming calls as (owner, call) rows; None: not solved in time."""
    top_k = int(p["top_k"])
    owner, prior, forced, row_t, row_e = _options(ps, e_par, e_kid, model, chosen, top_k, int(p["max_combos"]))
    # the same tuple twice (a shape's combination that is the current one): the first kept
    mix = np.random.default_rng(0).integers(1, 2**62, size=max(len(e_kid), 1), dtype=np.int64)
    h = np.zeros(len(owner), dtype=np.int64)
    np.add.at(h, row_t, mix[row_e])
    dup = pd.DataFrame({"o": owner, "h": h}).duplicated().to_numpy()
    if dup.any():
        ok = ~dup
        remap = np.cumsum(ok) - 1
        keep_rows = ok[row_t]
        owner, prior, forced = owner[ok], prior[ok], forced[ok]
        row_t, row_e = remap[row_t[keep_rows]], row_e[keep_rows]
    rows_a = np.c_[row_t, e_kid[row_e]]
    cost = model.costs(owner, rows_a) - prior
    if float(p["unary"]):           # beside the chain, each call's own cost (weaver.py's pre and post)
        cost += float(p["unary"]) * np.bincount(row_t, weights=e_cost[row_e], minlength=len(owner))
    size = np.bincount(row_t, minlength=len(owner))
    value = cost - float(p["leave_cost"]) * size            # minimised
    # ties (whole-millisecond stamps make many): the per-callee assignment's calls stay where they are
    value -= TIE * np.bincount(row_t, weights=chosen[e_kid[row_e]] == e_par[row_e], minlength=len(owner))
    # the top_k per incoming call (its current tuple always kept)
    order = np.lexsort((value, owner))
    rank = np.arange(len(order)) - np.searchsorted(owner[order], owner[order])
    keep = (rank < top_k)[np.argsort(order)] | forced
    best = np.zeros(len(owner), dtype=bool)
    best[order[rank == 0]] = True
    # incoming calls whose best tuples collide, and everyone of their components: one program
    in_best = rows_a[best[rows_a[:, 0]]]
    calls, counts = np.unique(in_best[:, 1], return_counts=True)
    clash = np.zeros(comp.max() + 1, dtype=bool)
    clash[comp[owner[in_best[np.isin(in_best[:, 1], calls[counts > 1]), 0]]]] = True
    hard = clash[comp[owner]] & keep
    pick = best & ~clash[comp[owner]]
    if hard.any():
        tids = np.flatnonzero(hard)
        remap = np.full(len(owner), -1)
        remap[tids] = np.arange(len(tids))
        r = rows_a[hard[rows_a[:, 0]]]
        got = _mwis(remap[r[:, 0]], r[:, 1], owner[tids], value[tids], comp[owner[tids]],
                    float(p["milp_seconds"]))
        if got is None:
            return None
        pick[tids[got]] = True
    r = rows_a[pick[rows_a[:, 0]]]
    return owner[r[:, 0]], r[:, 1]


def _mwis(t_of: np.ndarray, call: np.ndarray, owner: np.ndarray, value: np.ndarray, group: np.ndarray,
          seconds: float) -> np.ndarray | None:
    """The tuples to take: exactly one per incoming call, no call in two, the least total value. First
    the incoming calls whose best tuple collides with nobody take it (weaver_small.reduce); then the
    small parts (weaver_small.split) by enumeration, the rest by HiGHS (_highs). None: not in time."""
    alive = weaver_small.reduce(t_of, call, owner, value)
    live, (t_of, call) = _subset(alive, t_of, call)
    owner, value, group = owner[live], value[live], group[live]
    taken, rest = weaver_small.split(t_of, call, owner, value)
    if not rest.any():
        return live[taken]
    tids, (t_of, call) = _subset(rest, t_of, call)
    got = _highs(t_of, call, owner[tids], value[tids], group[tids], seconds)
    return None if got is None else np.sort(live[np.r_[taken, tids[got]]])


def _subset(mask: np.ndarray, t_of: np.ndarray, call: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """The tuples of `mask` (their old numbers) and their rows (tuple renumbered, call)."""
    tids = np.flatnonzero(mask)
    remap = np.full(len(mask), -1)
    remap[tids] = np.arange(len(tids))
    r = mask[t_of]
    return tids, (remap[t_of[r]], call[r])


def _highs(t_of: np.ndarray, call: np.ndarray, owner: np.ndarray, value: np.ndarray, group: np.ndarray,
           seconds: float) -> np.ndarray | None:
    """The tuples to take as a 0-1 program for HiGHS. Its linear relaxation first (mostly integral
    here: then it is the answer); the groups (independent parts: `group`, a component label per
    tuple) where it is fractional are then solved as 0-1 programs. None when HiGHS finds no solution in time."""
    one, most = _matrices(t_of, call, owner)
    cons = [LinearConstraint(one, 1, 1)] + ([LinearConstraint(most, 0, 1)] if most.shape[0] else [])
    lp = milp(value, constraints=cons, bounds=Bounds(0, 1), options={"time_limit": seconds})
    if lp.x is None:
        return None
    x = lp.x
    frac = (x > 1e-6) & (x < 1 - 1e-6)
    if not frac.any():
        return np.flatnonzero(x > 0.5)
    redo = np.isin(group, np.unique(group[frac]))
    tids = np.flatnonzero(redo)
    remap = np.full(len(owner), -1)
    remap[tids] = np.arange(len(tids))
    r = redo[t_of]
    one, most = _matrices(remap[t_of[r]], call[r], owner[tids])
    cons = [LinearConstraint(one, 1, 1)] + ([LinearConstraint(most, 0, 1)] if most.shape[0] else [])
    ip = milp(value[tids], constraints=cons, integrality=np.ones(len(tids)), bounds=Bounds(0, 1),
              options={"time_limit": seconds})
    if ip.x is None:
        return None
    take = (x > 0.5) & ~redo
    take[tids[ip.x > 0.5]] = True
    return np.flatnonzero(take)


def _matrices(t_of: np.ndarray, call: np.ndarray, owner: np.ndarray):
    """The program's rows: one per incoming call (its tuples sum to 1), one per outgoing call (at
    most 1) that tuples of two or more incoming calls hold (a call only one incoming call's tuples
    hold cannot be taken twice: that one takes a single tuple)."""
    n_t = len(owner)
    _, prow = np.unique(owner, return_inverse=True)
    # outgoing calls held by tuples of more than one incoming call
    o = np.lexsort((prow[t_of], call))
    c_s, p_s = call[o], prow[t_of][o]
    first = np.r_[True, c_s[1:] != c_s[:-1]]
    new_owner = np.r_[True, (c_s[1:] != c_s[:-1]) | (p_s[1:] != p_s[:-1])]
    shared = np.add.reduceat(new_owner, np.flatnonzero(first)) > 1 if len(c_s) else np.zeros(0, bool)
    keep = np.zeros(len(call), dtype=bool)
    keep[o] = np.repeat(shared, np.diff(np.r_[np.flatnonzero(first), len(c_s)]))
    _, crow = np.unique(call[keep], return_inverse=True)
    one = coo_matrix((np.ones(n_t), (prow, np.arange(n_t))), shape=(int(prow.max()) + 1, n_t)).tocsr()
    most = coo_matrix((np.ones(int(keep.sum())), (crow, t_of[keep])),
                      shape=(int(crow.max(initial=-1)) + 1, n_t)).tocsr()
    return one, most
