"""FlowDiagnoser (thesis chapter 2) with the NeST Θ rule (thesis 3.3.2), vectorised over time.

Per snapshot and direction every module gets HEALTHY, DONTCARE, BLOCKED or STALLED (Table 2.2):
(a) active -> HEALTHY; inactive and not HasWork -> DONTCARE (b); otherwise BLOCKED if it waited
(d) or, without a wait counter, can pass the blame (e); else STALLED (g, h).

How the algorithm maps onto arrays (docs/diagnosis.md has the long form):
- The analysis graph is the NS graph without the application's out-edges: sockets are the roots
  that HasWork assumes have work (thesis 3.6.2) and an application's result follows from its
  sockets (thesis 3.3.1): HEALTHY if one moved messages, else BLOCKED if one waited, else STALLED.
- Detached modules (analysis.model.stretches.Stretch: an upper layer elsewhere in the run, none in this
  stretch -- a TCP connection before the interceptor has reported its socket, or after close()
  while it lingers) are roots *without* assumed work: HasWork is false for them at the top level
  (still overridden by their own outbound queue with queues=on). So an inactive one is DONTCARE, not
  a STALLED root. A module that never has a parent in the run stays a root with work (thesis 3.6.2),
  and so does a socket in any case: the analysis graph never has its application above it.
- "A parent is BLOCKED" in HasWork (Algorithm 4, line 11) is computed as "the parent *waits*": it is
  inactive, has work, and either its wait counter grew or it has none. With Θ = 1 that is exactly
  BLOCKED (a waiting module without a wait counter always has the inactive child that takes the
  blame). With Θ > 1 it also covers a parent left STALLED by the Θ rule, whose lower layer must be
  STALLED as well ("both STALLED"), so work keeps flowing down the graph.
- CanPassBlame (Algorithm 5) with the Θ rule: a module without a wait counter passes the blame to
  an inactive child with work (no queue counter, or a non-empty one) only when at least Θ of that
  child's parents wait. Θ = 1 is the plain rule of Algorithm 5.
- Algorithms 1-2 (break cycles of active/no-work modules, merge strongly connected components)
  change nothing on an acyclic graph: every acyclic stretch is diagnosed in one pass over all its
  cells, level by level (analysis.model.batch). A stretch whose graph has cycles groups its snapshots by
  which cycle members are active or have an empty queue; each group gets its own DAG of
  super-modules (max-combined counters, thesis 2.3.2.2) and is diagnosed as one array.
- Queue counters are used only with `queues=on`, and only outbound: a module's own pending work is
  its outbound queue (the TCP send queue). Inbound, the queue (TCP receive queue) holds data the
  reader has not taken yet: it is the parent's work, not the module's, so inbound every module is
  treated as not supporting queued_msgs.
- `shared=on`: thesis 3.6.1, "Accounting for shared dependencies" (Figure 3.9(b)). TCP connections
  to the same remote address (`Stretch.remote`) share a virtual "path to X" module. Its counters are
  approximated as 3.6.1 says (active if a member is active, else potentially blocked if a member
  waits), and 3.6.1's rule for the members: with at least Θ waiting members and no active one the
  members are BLOCKED and the path takes the blame; otherwise the members keep their result. The
  ip+eth rule (3.3.2) is unchanged: when the whole interface is silent it decides as before. So
  shared=on only turns STALLED TCP connections into BLOCKED ones, when their whole path is silent
  while the interface moves packets. The path has no row in the accuracy tables: by 3.6.1's
  parsimony argument ("it is preferable to blame a single module that represents the path to S1H1
  than to separately blame three TCP connections"), its blame is counted nowhere, neither as TCP nor
  as ip+eth (whose scope 3.6.1 wants narrowed, not widened). docs/diagnosis.md has the long form.
- `tcpstate=on` (run format 4): a STALLED TCP connection stays STALLED only when its tcp_info state
  says TCP is stuck (backoff, retransmits, probes, ca_state Loss, or nothing heard from the peer for
  longer than its RTO); otherwise it is BLOCKED. The rules and why: analysis.variants.flowdiagnoser_tcpstate.
- `probe=on` (run format 5): where the silent-stack rule guesses (a waiting connection over a silent
  lower layer), the collector's probes of the connection's remote decide: answered, the connection is
  STALLED and the lower layer BLOCKED; not answered, the connection is BLOCKED and the lower layer
  keeps its blame. The evidence and the rules: analysis.model.probes, analysis.variants.flowdiagnoser_probe.
- `confirm=N` is applied over time (over_time, across stretches); `confirm_tcp=N` gives TCP modules
  their own N (0 = the same as confirm), so confirmation can apply to TCP connections alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from analysis.model.batch import Batch
from analysis.model.probes import AHEAD_S
from analysis.model.stretches import DIRS, KINDS, Counters, Stretch
from analysis.variants.base import (
    BLOCKED,
    DONTCARE,
    HEALTHY,
    STALLED,
    Param,
    RuleSystem,
    non_negative_int,
    on_off,
    positive_int,
    seconds,
)

if TYPE_CHECKING:   # networkx is imported by the cyclic path alone: most runs' graphs have no cycle
    import networkx as nx
from analysis.variants.flowdiagnoser_probe import probe_rule
from analysis.variants.flowdiagnoser_tcpstate import require as require_tcp_state
from analysis.variants.flowdiagnoser_tcpstate import tcp_state_rule

# ---------------------------------------------------------------- graph structure


@dataclass
class Shape:
    """The analysis graph of one stretch."""

    derived: dict[int, list[int]]   # application -> its children (its result follows theirs)
    edges: list[tuple[int, int]]    # analysis graph edges
    level: list[int]                # longest path from a root; -1 for derived applications
    cyclic: bool
    # As arrays (E, 2), each in the order of Stretch.edges: the analysis edges into level 1, 2, ...
    # (level_edges[0] is level 1's), those into a module without a level (on or below a cycle), and
    # the applications' edges (derived: app -> child).
    level_edges: list[np.ndarray] | None = None
    cycle_edges: np.ndarray | None = None
    app_edges: np.ndarray | None = None
    # Per module: a root of the analysis graph (level 0); a derived application; not a socket.
    root: np.ndarray | None = None
    derived_mask: np.ndarray | None = None
    not_socket: np.ndarray | None = None


def shape(st: Stretch) -> Shape:
    derived: dict[int, list[int]] = {}
    for p, c in st.edges:
        if st.kinds[p] == "app":
            derived.setdefault(p, []).append(c)
    edges = [(p, c) for p, c in st.edges if p not in derived and c not in derived]
    level = [-1] * st.n
    parents = [[] for _ in range(st.n)]
    for p, c in edges:
        parents[c].append(p)
    left = [len(parents[m]) for m in range(st.n)]
    children = [[] for _ in range(st.n)]
    for p, c in edges:
        children[p].append(c)
    frontier = [m for m in range(st.n) if m not in derived and not parents[m]]
    for m in frontier:
        level[m] = 0
    done = 0
    while frontier:  # Kahn's algorithm; what it cannot reach is on a cycle
        nxt = []
        for m in frontier:
            done += 1
            for c in children[m]:
                level[c] = max(level[c], level[m] + 1)
                left[c] -= 1
                if left[c] == 0:
                    nxt.append(c)
        frontier = nxt
    top = max(level, default=0)
    return Shape(derived, edges, level, done < st.n - len(derived),
                 [_edge_array([(p, c) for p, c in edges if level[c] == lv]) for lv in range(1, top + 1)],
                 _edge_array([(p, c) for p, c in edges if level[c] < 0]),
                 _edge_array([(p, c) for p, c in st.edges if p in derived]),
                 np.array(level, dtype=np.int64) == 0, np.array([m in derived for m in range(st.n)], dtype=bool),
                 np.array([k != "socket" for k in st.kinds], dtype=bool))


def _edge_array(edges: list[tuple[int, int]]) -> np.ndarray:
    return np.array(edges, dtype=np.int64).reshape(-1, 2)


def no_assumed_work(st: Stretch, not_socket: np.ndarray | None = None) -> np.ndarray:
    """Per module: a root of the analysis graph that HasWork must *not* assume has work.

    These are the detached modules (their upper layer is known elsewhere in the run, not here): a
    TCP connection whose socket is not reported yet, or is closed already, has no known demand
    above it, so an inactive one is not blamed as a stalled root. Sockets are excluded: the
    analysis graph leaves out the application's out-edges, so a socket is a root with assumed work
    whether its application is known or not (thesis 3.6.2). `not_socket`: that per module, when
    made already (Shape.not_socket).
    """
    if not_socket is None:
        not_socket = np.array([k != "socket" for k in st.kinds], dtype=bool)
    return st.detached & not_socket


# ---------------------------------------------------------------- all acyclic stretches at once

_APP, _SOCKET = KINDS.index("app"), KINDS.index("socket")


@dataclass
class _Cells:
    """Per-batch structure, shared by every FlowDiagnoser variant run on the batch."""

    batch: Batch
    cyclic: dict[int, Shape]  # the stretches whose graph has cycles (diagnose_cyclic), by index
    app_p: np.ndarray        # derived application cell edges: app, child
    app_c: np.ndarray
    derived: np.ndarray      # indices of the derived applications' cells
    root_work: np.ndarray    # bool per cell: a root (level 0) with assumed work (not no_assumed_work)
    levels: list[tuple[np.ndarray, np.ndarray]]  # levels 1, 2, ...: the analysis cell edges into the level
    unleveled: tuple[np.ndarray, np.ndarray]     # the analysis edges into a module without a level, and their stretches

    @cached_property
    def analysis_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Every analysis cell edge (parents, children): the levels' and those into cells without a
        level, by level."""
        rest = self.batch.stretch_edge_cells(*self.unleveled)
        parts = [*self.levels, rest]
        return np.concatenate([p for p, _ in parts]), np.concatenate([c for _, c in parts])


def _cells(batch: Batch) -> _Cells:
    return batch.shared("flowdiagnoser", lambda: _make_cells(batch))


def _levels(n: int, edges: np.ndarray, derived: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`shape`'s Kahn algorithm over many graphs at once (modules numbered 0..n-1 across them): per
    module its level (longest path from a root; -1 for a derived application, and for a module that
    no root reaches) and whether the algorithm took it (not: on or below a cycle). A module taken in
    round r is at level r (its parents were taken in earlier rounds, one of them in round r - 1), so
    the last round that reaches a module gives its level."""
    left = np.bincount(edges[:, 1], minlength=n)
    front = ~derived & (left == 0)
    level = np.where(front, 0, -1)
    done = front.copy()
    r = 0
    while True:
        out = front[edges[:, 0]]
        if not out.any():
            return level, done
        r += 1
        c = edges[out, 1]
        level[c] = r
        left -= np.bincount(c, minlength=n)
        front = np.zeros(n, dtype=bool)
        front[c] = True
        front &= left == 0
        done |= front


def _make_cells(batch: Batch) -> _Cells:
    """The analysis graphs of every stretch at once (`shape` one stretch at a time: the same levels;
    a stretch with cycles gets its Shape for diagnose_cyclic)."""
    sts = batch.stretches
    n = np.array([st.n for st in sts], dtype=np.int64)
    mbase = np.concatenate([[0], np.cumsum(n)])
    count = int(mbase[-1])
    kind = batch.module_kinds
    g, ek = batch.module_edges                       # module rows across the stretches
    e = g - mbase[ek][:, None]                        # each stretch's own
    app = kind[g[:, 0]] == _APP
    derived = np.zeros(count, dtype=bool)
    derived[g[app, 0]] = True
    analysis = ~derived[g[:, 0]] & ~derived[g[:, 1]]
    level, done = _levels(count, g[analysis], derived)
    ea, ka, into = e[analysis], ek[analysis], level[g[analysis, 1]]
    mod_k = np.repeat(np.arange(len(sts)), n)
    cyclic = np.bincount(mod_k[done], minlength=len(sts)) < n - np.bincount(mod_k[derived], minlength=len(sts))
    levels = [batch.stretch_edge_cells(ea[into == lv], ka[into == lv]) for lv in range(1, int(into.max(initial=0)) + 1)]
    app_p, app_c = batch.stretch_edge_cells(e[app], ek[app])
    detached = np.concatenate([np.zeros(0, dtype=bool), *(st.detached for st in sts)])
    root_work = np.repeat((level == 0) & ~(detached & (kind != _SOCKET)), batch.module_t)
    return _Cells(batch, {int(k): shape(sts[k]) for k in np.flatnonzero(cyclic)}, app_p, app_c,
                  np.flatnonzero(np.repeat(derived, batch.module_t)), root_work, levels, (ea[into < 0], ka[into < 0]))


def _batch_direction(batch: Batch, d: str, theta: int, queues: bool) -> np.ndarray:
    s = _cells(batch)
    c = batch.counters(d)
    n = batch.n_cells
    inactive = c.tm == 0
    waited = c.wait > 0
    hw = c.has_wait
    # A module *waits* when inactive, with work, and it waited (or cannot tell). With queues=on a
    # module with an outbound queue has work when the queue is not empty (`sure`), whatever is above;
    # every other module when it is a root with assumed work or a parent waits (`h`).
    could = inactive & (waited | ~hw)
    hq = q_work = sure = None
    if queues and d == "out":
        hq, q_work = c.has_queue, c.queued > 0
        sure = could & hq & q_work
        could &= ~hq
    h = s.root_work.copy()
    waits = could & h
    if sure is not None:
        waits |= sure
    for ep, ec in s.levels:  # HasWork, top down (Algorithm 4); a level's parents are all above it
        h[ec[waits[ep]]] = True
        np.logical_and(could, h, out=waits)
        if sure is not None:
            waits |= sure
    haswork = h if hq is None else np.where(hq, q_work, h)
    # CanPassBlame with Θ: an inactive child with work, under at least Θ waiting parents. (Only
    # leveled cells: the others, on or below a cycle, are diagnosed by diagnose_cyclic.)
    hit = [ec[waits[ep]] for ep, ec in s.levels]
    n_waiting = np.bincount(np.concatenate(hit) if hit else np.zeros(0, dtype=np.intp), minlength=n)
    takes_blame = inactive & (n_waiting >= theta)
    if hq is not None:
        takes_blame &= ~hq | q_work
    can_pass = np.zeros(n, dtype=bool)
    for ep, ec in s.levels:
        can_pass[ep[takes_blame[ec]]] = True
    active = ~inactive
    res = np.where(np.where(hw, waited, can_pass), np.int8(BLOCKED), np.int8(STALLED))
    np.copyto(res, np.int8(DONTCARE), where=~haswork)
    np.copyto(res, np.int8(HEALTHY), where=active)
    # Thesis 3.3.1: an application follows its sockets.
    moved = np.zeros(n, dtype=bool)
    moved[s.app_p[active[s.app_c]]] = True
    app_waited = np.zeros(n, dtype=bool)
    app_waited[s.app_p[(hw & waited)[s.app_c]]] = True
    k = s.derived
    res[k] = np.where(moved[k], HEALTHY, np.where(app_waited[k], BLOCKED, STALLED))
    for k, sh in s.cyclic.items():
        res[batch.offsets[k]:batch.offsets[k + 1]] = diagnose_cyclic(batch.stretches[k], sh, d, theta, queues).ravel()
    return res


def diagnose(batch: Batch, theta: int = 2, queues: bool = False, confirm: int = 1, shared: bool = False,
             tcpstate: bool = False, confirm_tcp: int = 0, probe: bool = False, probe_ahead: float = AHEAD_S):
    if tcpstate:
        require_tcp_state(batch)
    out = {}
    for d in DIRS:
        res = _batch_direction(batch, d, theta, queues)
        if shared:
            res = shared_paths(batch, d, res, theta)
        if probe:
            res = probe_rule(batch, d, res, probe_ahead, _cells(batch).analysis_edges)
        if tcpstate:
            res = tcp_state_rule(batch, res)
        out[d] = (res, res == STALLED)
    return out


# ---------------------------------------------------------------- shared dependencies (thesis 3.6.1)

_TCP = KINDS.index("tcp")


def shared_paths(batch: Batch, d: str, res: np.ndarray, theta: int) -> np.ndarray:
    """Thesis 3.6.1 over one direction's results: the "path to X" of TCP connections to the same
    remote address X takes the blame of its members when none of them is active and at least Θ of
    them wait; those members, STALLED so far (they could pass the blame to no lower layer), become
    BLOCKED. A member *waits* as in HasWork: inactive, BLOCKED or STALLED (it has work), and its wait
    counter grew or it has none. Only members without a wait counter move (Table 2.2 (e): a module
    with one is BLOCKED or STALLED by its own counter). Every other result stays as it was."""
    gid, n_groups = batch.remote_groups
    member = (gid >= 0) & (batch.kind_codes == _TCP)
    if not n_groups or not member.any():
        return res
    c = batch.counters(d)
    g = gid[member]
    inactive = c.tm[member] == 0
    r = res[member]
    waits = inactive & ((r == BLOCKED) | (r == STALLED)) & (~c.has_wait[member] | (c.wait[member] > 0))
    active = np.bincount(g, weights=~inactive, minlength=n_groups) > 0
    n_waiting = np.bincount(g, weights=waits, minlength=n_groups)
    path_blamed = ~active & (n_waiting >= theta)
    move = path_blamed[g] & (r == STALLED) & ~c.has_wait[member]
    if not move.any():
        return res
    res = res.copy()
    res[np.flatnonzero(member)[move]] = BLOCKED
    return res


# ---------------------------------------------------------------- stretches with cycles


def _dag_diagnose(g: nx.DiGraph, c: Counters, has_queue: np.ndarray, theta: int) -> np.ndarray:
    """Algorithms 3-5 with the Θ rule over an acyclic graph whose nodes are frozensets of modules
    (super-modules); node attribute 'work': a root of the analysis graph that HasWork assumes has
    work (not a detached one)."""
    import networkx as nx

    nodes = list(nx.topological_sort(g))
    pos = {n: i for i, n in enumerate(nodes)}
    t = c.tm.shape[1]
    k = len(nodes)
    tm, wait, q = np.empty((k, t)), np.empty((k, t)), np.empty((k, t))
    hw, hq = np.empty((k, t), dtype=bool), np.empty((k, t), dtype=bool)
    for i, n in enumerate(nodes):  # super-modules: max of the members' counters (thesis 2.3.2.2)
        m = sorted(n)
        tm[i] = c.tm[m].max(0)
        hw[i] = c.has_wait[m].any(0)
        wait[i] = np.where(c.has_wait[m], c.wait[m], 0.0).max(0)
        hq[i] = has_queue[m].any(0)
        q[i] = np.where(has_queue[m], c.queued[m], 0.0).max(0)
    inactive = tm == 0
    waited = wait > 0
    parents = [[pos[p] for p in g.predecessors(n)] for n in nodes]
    children = [[pos[ch] for ch in g.successors(n)] for n in nodes]
    haswork = np.empty((k, t), dtype=bool)
    waits = np.empty((k, t), dtype=bool)
    for i, n in enumerate(nodes):
        if g.nodes[n]["work"]:
            h = np.ones(t, dtype=bool)
        elif parents[i]:
            h = waits[parents[i]].any(0)
        else:  # its parents' edges were cut (active or no work), or a detached root
            h = np.zeros(t, dtype=bool)
        haswork[i] = np.where(hq[i], q[i] > 0, h)
        waits[i] = inactive[i] & haswork[i] & (waited[i] | ~hw[i])
    takes_blame = inactive & (~hq | (q > 0))
    for i in range(k):
        takes_blame[i] &= waits[parents[i]].sum(0) >= theta if parents[i] else False
    can_pass = np.zeros((k, t), dtype=bool)
    for i in range(k):
        if children[i]:
            can_pass[i] = takes_blame[children[i]].any(0)
    blocked = np.where(hw, waited, can_pass)
    res = np.where(~inactive, HEALTHY, np.where(~haswork, DONTCARE, np.where(blocked, BLOCKED, STALLED)))
    out = np.empty((c.tm.shape[0], t), dtype=np.int8)
    for i, n in enumerate(nodes):
        out[sorted(n)] = res[i]
    return out


def _condense(g: nx.DiGraph, removed: list[int], no_work: np.ndarray) -> nx.DiGraph:
    """Algorithms 1-2: drop the out-edges of `removed`, merge strongly connected components.

    no_work: per module, a root without assumed work (no_assumed_work)."""
    import networkx as nx

    w = g.copy()
    w.remove_edges_from([(m, ch) for m in removed for ch in g.successors(m)])
    comps = [frozenset(s) for s in nx.strongly_connected_components(w)]
    owner = {m: s for s in comps for m in s}
    dag = nx.DiGraph()
    for s in comps:
        # A super-module is a root when no edge of the original graph enters it from outside; a
        # root is assumed to have work unless it is made only of detached modules (a detached
        # module has no parent, so it is never on a cycle: in practice a lone detached module).
        root = all(owner.get(p) is s for m in s for p in g.predecessors(m))
        dag.add_node(s, work=root and not all(no_work[m] for m in s))
    dag.add_edges_from((owner[a], owner[b]) for a, b in w.edges if owner[a] is not owner[b])
    return dag


def diagnose_cyclic(st: Stretch, sh: Shape, d: str, theta: int, queues: bool) -> np.ndarray:
    """Result codes (modules x snapshots) of one direction of a stretch whose graph has cycles."""
    import networkx as nx

    c = st.counters[d]
    has_queue = c.has_queue if (queues and d == "out") else np.zeros_like(c.has_queue)
    g = nx.DiGraph()
    g.add_nodes_from(m for m in range(st.n) if m not in sh.derived)
    g.add_edges_from(sh.edges)
    cyc = sorted(m for comp in nx.strongly_connected_components(g)
                 for m in comp if len(comp) > 1 or g.has_edge(m, m))
    res = np.empty(c.tm.shape, dtype=np.int8)
    no_work = no_assumed_work(st)
    # Which cycle members are active or have no work decides how the cycles break (Algorithm 2).
    settled = (c.tm[cyc] > 0) | (has_queue[cyc] & (c.queued[cyc] == 0))
    patterns, group = np.unique(settled, axis=1, return_inverse=True)
    for k in range(patterns.shape[1]):
        cols = np.flatnonzero(group.ravel() == k)
        removed = [m for m, s in zip(cyc, patterns[:, k], strict=True) if s]
        res[:, cols] = _dag_diagnose(_condense(g, removed, no_work), c.take(cols), has_queue[:, cols], theta)
    for app, kids in sh.derived.items():
        moved = (c.tm[kids] > 0).any(0)
        waited = (c.has_wait[kids] & (c.wait[kids] > 0)).any(0)
        res[app] = np.where(moved, HEALTHY, np.where(waited, BLOCKED, STALLED))
    return res


# ---------------------------------------------------------------- over time


def confirmed(module: np.ndarray, seq: np.ndarray, positive: np.ndarray, confirm: int = 1) -> np.ndarray:
    """Thesis 2.2.1 option: positive only after `confirm` consecutive STALLED snapshots.

    Flat arrays of one direction; consecutive means seq numbers one apart for the same module.
    """
    if confirm <= 1 or len(positive) == 0:
        return positive
    order = np.lexsort((seq, module))
    m, s, p = module[order], seq[order], positive[order]
    cont = np.zeros(len(p), dtype=bool)
    cont[1:] = (m[1:] == m[:-1]) & (s[1:] == s[:-1] + 1) & p[:-1]
    idx = np.arange(len(p))
    start = np.maximum.accumulate(np.where(p & ~cont, idx, 0))  # where the current streak began
    out = np.empty_like(positive)
    out[order] = p & (idx - start + 1 >= confirm)
    return out


def over_time(confirm: int = 1, confirm_tcp: int = 0, **_):
    """The rule over consecutive snapshots for these parameters; None when there is nothing to do.
    `confirm_tcp` (0 = same as `confirm`) is the confirmation of TCP modules; `confirm` the others'."""
    tcp = confirm_tcp or confirm
    if confirm <= 1 and tcp <= 1:
        return None
    if tcp == confirm:
        return lambda module, seq, positive, kind=None: confirmed(module, seq, positive, confirm)

    def rule(module, seq, positive, kind):
        is_tcp = kind == _TCP
        return np.where(is_tcp, confirmed(module, seq, positive, tcp), confirmed(module, seq, positive, confirm))
    return rule


SYSTEM = RuleSystem(
    name="flowdiagnoser",
    kind="label",
    summary="FlowDiagnoser (thesis ch. 2, Algorithms 1-5, Table 2.2) with the NeST Θ rule (thesis 3.3.2); "
            "positive = STALLED",
    params=(
        Param("theta", 2, positive_int, "Θ: waiting connections needed above a silent lower layer to "
              "blame only the lower layer (1 = plain pass-the-blame)", shown=True),
        Param("queues", False, on_off, "use queue counters for HasWork/CanPassBlame (outbound queue = "
              "the module's own pending work); the thesis's NeST did not"),
        Param("confirm", 1, positive_int, "positive only after this many consecutive STALLED "
              "snapshots (thesis 2.2.1 suggests 2)"),
        Param("shared", False, on_off, "thesis 3.6.1 shared dependencies: TCP connections to one remote "
              "address share a 'path to X' that takes their blame (members BLOCKED) when >= Θ of them "
              "wait and none is active; the path has no table row (needs Stretch.remote)"),
        Param("tcpstate", False, on_off, "a STALLED TCP connection stays STALLED only when tcp_info says it "
              "is stuck (backoff, retransmits, probes, ca_state Loss, or no data/ACK for longer than its "
              "RTO), else BLOCKED; needs run format 4"),
        Param("confirm_tcp", 0, non_negative_int, "confirm for TCP modules alone: positive only after this "
              "many consecutive STALLED snapshots (0 = same as confirm)"),
        Param("probe", False, on_off, "where a waiting connection's lower layer is silent, the collector's "
              "probes of its remote decide: answered -> connection STALLED, lower layer BLOCKED; not answered "
              "-> connection BLOCKED, lower layer as the Θ rule says; answered after an unanswered burst while TCP backs "
              "off (recovering from a past outage) -> connection BLOCKED; no probe -> as without (run format 5)"),
        Param("probe_ahead", AHEAD_S, seconds, "probe=on: seconds after a snapshot a burst may "
              "be sent or its outcome come, and still count for it (the live engine waits as long)"),
    ),
    diagnose=diagnose,
    over_time=over_time,
    presets=("flowdiagnoser", "flowdiagnoser:theta=1", "flowdiagnoser:theta=3",
             "flowdiagnoser:queues=on", "flowdiagnoser:confirm=2", "flowdiagnoser:shared=on",
             "flowdiagnoser:tcpstate=on", "flowdiagnoser:confirm_tcp=2", "flowdiagnoser:probe=on",
             "flowdiagnoser:probe=on,tcpstate=on"),
)
