"""WAP5's message-linking algorithm (wap5-paper.txt, section 5.1): causal paths from a reconciled
trace with a send and a receive time per message and no call/return tags.

Step 1, the causal delay per node pair: for each message B>C, the latest message into B received
before it was sent (both times on B's clock); if that is within `x` seconds, the gap is a sample of
`d[B>C]`, else the message counts as spontaneous and adds no sample. `d[B>C]` is the mean of the
samples and `lambda[B>C] = 1/d[B>C]` (an exponential delay model), floored at `d_min`. One merged
sort of every node's arrivals and departures, then a forward fill: linear after the sort.

Step 2, possible parents: every message X>B received within `x` before B>C was sent is a possible
parent, weighted `exp(-lambda[B>C] * gap)`; spontaneity is weighted as a link of delay `y * d[B>C]`,
i.e. `exp(-y)`; the weights are normalised to sum to 1 (the link probabilities; `model="wap5"`,
linking_weights.py, which also holds the `model="edges"` alternative). Found with the same
merged sort and a short vectorised walk back over earlier arrivals, which stops at `x`, at
`max_parents` candidates, or where a link's probability would fall below `p_min` whatever the other
candidates (`exp(-gap/d) < p_min * exp(-y)`): such links are "probably false" and could never be
kept or tried both ways.

Step 3, path instances: a message whose most likely option is spontaneity is a root; every other
message hangs under its most likely parent (the "probably-true" links, and the most likely cause
below 0.5, which WAP5 makes try-both). A link is *try-both* if its probability is within
`ambiguity` of 0.5, or if it is a message's most likely cause with probability below 0.5. A tree
without try-both links is one instance; a tree with some has its first `k` try-both decisions (in
time order) tried both ways, so up to `2**k` instances; further ones keep their likely choice. An
instance's probability is the product of `p` over the links it includes and `1 - p` over the
possible links from its messages that it leaves out (WAP5's p1/p2 example). Patterns are aggregated
with the expected count (sum of instance probabilities) as `count` and the raw instance count in
`params["raw_counts"]`; node delays are weighted by instance probability (WAP5 5.2).

Choices where the paper is unclear: `d_min` (1 ms): the paper fits d from the samples and says
nothing of a pair whose samples are nearly all 0 (a node that forwards a call at once, as a web
server calling its application server does); its d of a fraction of a millisecond made a 1 ms wait
four means long, i.e. spontaneous, cutting the path in two (on Maketrace's web service, 18% of
web1>app1 calls at parallelism 1). The floor says that delays below the trace's timing precision
are not told apart. `model`: "wap5" (default) is the paper's; "edges" is a mixture over the input
edges, re-estimated for `rounds` rounds (linking_weights.py: the paper's remark that steps 1 and 2
could be iterated, with a share and a mean per input edge), looking `reach` times further back.
Measured on the web service it links 1-2 points more messages right at parallelism 1-2 and none at
4, and does not raise pattern precision (docs/seeds-tables.md): it stays an option.
`k` (the paper names the limit but not its value): default 4;
`ambiguity` ("close to 0.5"): 0.1; `p_min`: 0.01; `untraced`: WAP5's traces did not include the
clients (their requests come from outside, so they are spontaneous); a synthetic or lab trace records
the client too, and a single client's next request would otherwise link to its last reply, chaining
every request into one tree. "auto" treats the nodes that send calls and never receive one as such
untraced clients (the trace's call/return tags are read for this and nothing else; without tags
none, with a warning: pass the names); roots are the messages whose likeliest option is
spontaneity (the paper builds trees "from the root down" without saying which messages are roots).
`orphans`: "keep" (default) makes every likely-spontaneous message a root, as WAP5 does; "drop"
keeps only the trees rooted at an untraced client's message (a spontaneous message from a server is
then a fragment of a path whose link was lost: dropped from the trace or taken by a nearer message).
Trees are built from the linear-time forest of likeliest links; the try-both instances of the trees
with decisions are built in numpy (linking_instances.py), except the few whose instances depend on
the order of the walk through the tree, which _Instances walks in Python. Messages without a receive time (an untraced receiver) cannot be parents
(WAP5's A>B>A rule for them is not implemented; they are counted in the warnings).

Granularity (WAP5 2: its "nodes" span "entire computers down to single threads"): with
`granularity="thread"` a message a thread sends can only be caused by a message that same thread
received (host, pid, tid: the trace's `src_thread`/`dst_thread`), i.e. steps 1 and 2 look back over
the sending thread's arrivals only; d stays per tier node pair (a pool's threads share their node's
delays, and each thread alone has few samples), and patterns, node delays and culprits are per tier
node, as for the other algorithms. A node with any message of unknown thread is linked per node,
and so is one whose threads hand work to one another (most of its messages sent by a thread that
received nothing within `x`: an I/O thread reads, a worker sends; handoff_nodes, warned).
"auto" (default): thread when the trace has thread ids (the data: on Maketrace's web service with
thread pools, the sending thread's latest arrival is the true cause of 100% of messages at
parallelism 1-16, against 90-49% per node; with an event loop, one thread, at the web tier 97-79%:
docs/seeds-tables.md), else node: exactly the results without thread columns.

What limits it on RPC traces (measured, docs/seeds-tables.md): under the paper's monotone model the
likeliest cause of every message is the latest arrival at its sender. On Maketrace's web service
that is the true cause of 90% of messages at parallelism 1 (another request's message often arrives
in between: Poisson starts), 70% at 4, 49% at 16; a request comes out whole from likeliest links
only if all its messages do: 66% of requests at parallelism 1, 26% at 4. The wrong links cut trees
and graft the pieces onto others, and as the same interleavings recur, the pieces add up to false
patterns above 1% of the expected count. An RPC server's reply is also about as near the call it
serves as the nested reply before it, so those links sit near 0.5 and try-both spreads the count
over both shapes.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.paths.assemble import (
    Forest,
    Nodes,
    PatternTable,
    canonical_text,
    clocks,
    ensure_messages,
    forest_depth,
    forest_roots,
    int_order,
    kind_codes,
    node_codes,
    order_by,
    positions_in_runs,
    result_from_forest,
    subtree_hashes,
)
from analysis.paths.linking_instances import Batch, tree_hash, walk_order_matters
from analysis.paths.linking_weights import edge_weights, wap5_weights
from analysis.paths.model import PathsResult, edge_key, has_threads

VECTORISED = True          # try-both instances in numpy (False: every tree walked in Python, as before)
DEFAULTS: dict[str, object] = {
    "x": 2.0,               # s, longest real causal delay (WAP5: 2 s for CoDeeN/Coral, 0.1 s Slurpee)
    "y": 4.0,               # spontaneity weighs like a link of delay y*d
    "k": 4,                 # try-both decisions per tree (2**k instances at most)
    "ambiguity": 0.1,       # a link with |p - 0.5| <= ambiguity is tried both ways
    "p_min": 0.01,          # links that cannot reach this probability are not considered
    "max_parents": 32,      # possible parents kept per message
    "model": "wap5",        # link weights: "wap5" (the paper's) or "edges" (linking_weights.py)
    "d_min": 0.001,         # s, floor of d (see docstring)
    "rounds": 5,            # model="edges": rounds of re-estimating the shares and delays
    "reach": 4.0,           # model="edges": how much further back than the paper's cutoff to look
    "untraced": "auto",     # nodes treated as untraced clients: names, or "auto" (see docstring)
    "orphans": "keep",      # "drop": only trees rooted at an untraced client's message are kept
    "granularity": "auto",  # "thread", "node", or "auto": thread when the trace has thread ids
}
GRANULARITIES = ("auto", "node", "thread")


def link_groups(messages: pd.DataFrame, nodes: Nodes, granularity: str,
                per_node: np.ndarray | None = None) -> tuple[Nodes, str, list[str]]:
    """Who a message may be linked within (WAP5 2: "nodes" from computers down to single threads):
    per message the group of its sender (src) and of its receiver (dst), as a Nodes whose `n` is the
    number of groups. "node": the tier nodes themselves. "thread": (node, thread), so a message a
    thread sends can only be caused by a message that same thread received; a node with any message
    of an unknown thread (-1: untraced end, or a trace recorded without tids) falls back to the
    node as a whole, and so do the nodes marked in `per_node` (handoff_nodes). "auto": thread when the
    trace has thread columns with a known thread, else node. Returns the groups, the granularity used
    and warnings."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"linking: granularity must be one of {', '.join(GRANULARITIES)}, not {granularity!r}")
    threaded = has_threads(messages) and bool((messages["src_thread"].to_numpy() >= 0).any())
    if granularity == "node" or (granularity == "auto" and not threaded):
        return nodes, "node", []
    if not threaded:
        return nodes, "node", ["granularity=thread: the trace has no thread ids; linked per node"]
    st = messages["src_thread"].to_numpy(dtype=np.int64)
    dt = messages["dst_thread"].to_numpy(dtype=np.int64)
    seen = ~np.isnan(messages["t_recv"].to_numpy(dtype=np.float64))
    # a node is threaded only if every message it sends, and every one it receives, has its thread
    unknown = np.zeros(nodes.n, dtype=bool)
    unknown[nodes.src[st < 0]] = True
    unknown[nodes.dst[seen & (dt < 0)]] = True
    warnings = []
    if per_node is not None:
        unknown &= ~per_node        # said once, by the caller
    if unknown.any():
        warnings.append("granularity=thread: messages of unknown thread at "
                        f"{', '.join(sorted(str(x) for x in nodes.names[unknown]))}; linked per node there")
    if per_node is not None:
        unknown |= per_node
    st = np.where(unknown[nodes.src], -1, st)
    dt = np.where(unknown[nodes.dst], -1, dt)
    n = len(st)
    both = np.concatenate([nodes.src, nodes.dst]) * (int(max(st.max(), dt.max())) + 2) + np.concatenate([st, dt]) + 1
    codes, uniq = pd.factorize(both)
    return Nodes(np.arange(len(uniq)), codes[:n].astype(np.int64), codes[n:].astype(np.int64)), "thread", warnings


HANDOFF_SHARE = 0.5     # a node whose threads send this share of its messages with nothing received


def handoff_nodes(nodes: Nodes, t_out: np.ndarray, t_in: np.ndarray, arr: np.ndarray,
                  pos: np.ndarray, first: np.ndarray, x: float, skip: np.ndarray) -> np.ndarray:
    """Per node, whether its threads hand work to one another (an I/O thread reads, a worker sends):
    more than HANDOFF_SHARE of the messages it sends come from a thread that received nothing within
    `x` before. Linked per thread, they would all be spontaneous; such a node is linked per node.
    `skip`: nodes not checked (untraced clients, whose messages are roots anyway). A worker that
    also reads its own downstream replies is not caught (its earlier replies are inputs)."""
    has = pos > first
    has[has] = t_out[has] - t_in[arr[pos[has] - 1]] <= x
    sends = np.bincount(nodes.src, minlength=nodes.n)
    lone = np.bincount(nodes.src[~has], minlength=nodes.n)
    return (lone > HANDOFF_SHARE * np.maximum(sends, 1)) & ~skip


def untraced_nodes(messages: pd.DataFrame, nodes: Nodes, spec: object) -> set[str]:
    """The nodes whose messages WAP5 would see from one side only (its clients were not traced):
    "auto" takes the nodes that send calls and never receive one (needs call/return tags; none
    without them); else the names given."""
    if spec != "auto":
        return {spec} if isinstance(spec, str) else {str(s) for s in (spec or ())}
    calls = kind_codes(messages) == 1
    callers = np.unique(nodes.src[calls])
    called = np.unique(nodes.dst[calls])
    return {str(nodes.names[c]) for c in np.setdiff1d(callers, called)}


def _arrivals_and_departures(nodes: Nodes, t_out: np.ndarray, t_in: np.ndarray):
    """Arrivals (messages with a receive time) in (receiver, time) order, and per message the number
    of arrivals at its sender up to its send time (its position among them) and the first position
    of its sender's arrivals."""
    arr = np.flatnonzero(~np.isnan(t_in))
    arr = arr[order_by(nodes.dst[arr], t_in[arr])]
    pos, first = positions_in_runs(nodes.dst[arr], t_in[arr], nodes.src, t_out)
    return arr, pos, first


def causal_delays(nodes: Nodes, t_out: np.ndarray, t_in: np.ndarray, arr: np.ndarray,
                  pos: np.ndarray, first: np.ndarray, x: float, d_min: float = 1e-9) -> np.ndarray:
    """Step 1: d per message's (src, dst) pair (s; x where the pair has no sample)."""
    has = pos > first
    gap = np.full(len(t_out), np.inf)
    gap[has] = t_out[has] - t_in[arr[pos[has] - 1]]
    sample = gap <= x
    pair = nodes.src * nodes.n + nodes.dst
    s = np.bincount(pair[sample], weights=gap[sample], minlength=nodes.n * nodes.n)
    c = np.bincount(pair[sample], minlength=nodes.n * nodes.n)
    d = np.where(c > 0, s / np.maximum(c, 1), x)
    return np.maximum(d, d_min)[pair]


BLOCK = 1 << 18   # messages walked at once: the walk's temporaries stay small enough to be reused


def possible_parents(t_out: np.ndarray, t_in: np.ndarray, arr: np.ndarray, pos: np.ndarray,
                     first: np.ndarray, cutoff: np.ndarray, max_parents: int):
    """Step 2's candidates: (child, parent, gap) per possible link, each message's earlier arrivals
    at its sender within `cutoff` (per message, s), at most `max_parents` of them, latest first (a
    child's links appear in the order of the walk back in time: every message's latest candidate,
    then every second latest, ...). The walk stops at a message's own arrival (a node sending to
    itself). Walked a block of messages at a time (the walking messages carry their send time,
    cutoff and run start along, compressed each step), then laid out step by step: the order of
    walking all messages at once, without its large temporaries (fresh memory is paid for in page
    faults, as much as the walk itself)."""
    n = len(t_out)
    t_arr = t_in[arr]
    at = np.full(n, -1, dtype=np.int64)        # where each message arrives among the arrivals
    at[arr] = np.arange(arr.size)
    own = (at >= first) & (at < pos)           # ... among its own sender's, before it was sent
    selfish = bool(own.any())
    blocks: list[list[tuple[np.ndarray, np.ndarray]]] = []
    for lo in range(0, n, BLOCK):
        hi = min(n, lo + BLOCK)
        q = lo + np.flatnonzero(pos[lo:hi] > first[lo:hi])
        j, fq, tq, cq = pos[q] - 1, first[q], t_out[q], cutoff[q]
        sq = at[q] if selfish else None
        steps = []
        for step in range(max_parents):
            live = tq - t_arr[j] <= cq
            if step:
                live &= j >= fq
            if sq is not None:
                live &= j != sq
            if not live.all():
                q, j, fq, tq, cq = q[live], j[live], fq[live], tq[live], cq[live]
                if sq is not None:
                    sq = sq[live]
            if q.size == 0:
                break
            steps.append((q, arr[j]))
            j = j - 1
        blocks.append(steps)
    del at, own
    total = sum(len(q) for steps in blocks for q, _ in steps)
    child = np.empty(total, dtype=np.int64)
    parent = np.empty(total, dtype=np.int64)
    at_ = 0
    for step in range(max(map(len, blocks), default=0)):
        for steps in blocks:
            if step < len(steps):
                q, par = steps[step]
                child[at_:at_ + q.size] = q
                parent[at_:at_ + q.size] = par
                at_ += q.size
    del blocks
    gap = np.take(t_out, child)
    for a in range(0, total, BLOCK):
        gap[a:a + BLOCK] -= t_in[parent[a:a + BLOCK]]
    return child, parent, gap


def likeliest(child: np.ndarray, prob: np.ndarray, p_spont: np.ndarray,
              monotone: bool = False) -> np.ndarray:
    """Per message, the link position of its likeliest parent (-1: spontaneity is at least as likely
    as every link); among equally likely links the first in walk order (the later arrival).
    monotone: the weights fall with the gap (the paper's model), so the first link is the likeliest."""
    n = len(p_spont)
    if monotone:
        # the paper's weights fall with the gap: a child's first link in walk order is its likeliest
        first = np.full(n, -1, dtype=np.int64)
        for b in range(len(child), 0, -BLOCK):     # the links in reverse, a block at a time
            a = max(0, b - BLOCK)
            first[child[a:b][::-1]] = np.arange(b - 1, a - 1, -1)
        ok = first >= 0
        ok[ok] = prob[first[ok]] > p_spont[ok]
        return np.where(ok, first, -1)
    best_p = p_spont.copy()
    np.maximum.at(best_p, child, prob)
    top = np.flatnonzero((prob >= best_p[child]) & (prob > p_spont[child]))
    best_at = np.full(n, len(prob), dtype=np.int64)
    np.minimum.at(best_at, child[top], top)
    return np.where(best_at < len(prob), best_at, -1)


class _Instances:
    """Enumerates the try-both alternatives of one tree (WAP5 figure 4) and adds them to a table.
    The possible links are held as numpy arrays grouped by parent (CSR), not Python objects, so
    memory stays linear in the trace."""

    def __init__(self, nodes: Nodes, t_out, t_in, t_recv, child, parent, prob, map_parent):
        self.nodes, self.t_out, self.t_in, self.t_recv = nodes, t_out, t_in, t_recv
        order = int_order(parent)
        self.child, self.prob = child[order], prob[order]
        self.ptr = np.concatenate([[0], np.cumsum(np.bincount(parent, minlength=len(t_out)))])
        self.map_parent = map_parent
        self.names = [str(x) for x in nodes.names]
        self.edges: dict[tuple[int, int], str] = {}      # (src, dst) codes -> edge key
        self.labels: dict[tuple[int, int], str] = {}     # (src, dst) codes -> `src>dst` as patterns write it
        self.text_hash: dict[str, int] = {}               # pattern text -> its subtree hash

    def run(self, table: PatternTable, root: int, try_both: list[tuple[int, int, float]]) -> None:
        """try_both: (parent, child, p) decisions, the first k in time order."""
        links: dict[int, list[tuple[int, float, bool]]] = {}     # this tree's links, read once
        for mask in range(1 << len(try_both)):
            flips = {(pa, ch) for b, (pa, ch, _) in enumerate(try_both) if mask >> b & 1}
            self._one(table, root, flips, links)

    def _links(self, m: int) -> list[tuple[int, float, float, bool]]:
        """(child, log p, log(1 - p), likeliest) for every possible link out of message m (the logs
        taken once per link, not once per instance)."""
        lo, hi = int(self.ptr[m]), int(self.ptr[m + 1])
        kids = self.child[lo:hi]
        return [(c, math.log(max(p, 1e-300)), math.log(max(1 - p, 1e-300)), like) for c, p, like in
                zip(kids.tolist(), self.prob[lo:hi].tolist(), (self.map_parent[kids] == m).tolist(), strict=True)]

    def _one(self, table: PatternTable, root: int, flips: set[tuple[int, int]],
             links: dict[int, list[tuple[int, float, float, bool]]]) -> None:
        # the likeliest links, with the try-both ones in `flips` decided the other way
        children: dict[int, list[int]] = {}
        logp = 0.0
        stack, seen = [root], {root}
        while stack:
            m = stack.pop()
            out = links.get(m)
            if out is None:
                out = links[m] = self._links(m)
            for c, log_p, log_q, likeliest in out:
                take = likeliest != ((m, c) in flips) if flips else likeliest
                if take and c not in seen:
                    seen.add(c)
                    children.setdefault(m, []).append(c)
                    stack.append(c)
                    logp += log_p
                else:
                    logp += log_q
        weight = math.exp(logp)
        if weight <= 0:
            return
        names, src, dst = self.names, self.nodes.src, self.nodes.dst
        edges = self.edges
        delays: dict[str, float] = {}
        lat: dict[str, list[float]] = {}
        for m in seen:
            if not math.isnan(self.t_recv[m]):
                pair = (src[m], dst[m])
                edge = edges.get(pair)
                if edge is None:
                    edge = edges[pair] = edge_key(names[pair[0]], names[pair[1]])
                lat.setdefault(edge, []).append(self.t_recv[m] - self.t_out[m])
        for m, cs in children.items():
            for c in cs:
                node = names[src[c]]
                delays[node] = delays.get(node, 0.0) + self.t_out[c] - self.t_in[m]
        text = canonical_text(self.nodes, children, root, self.labels)
        key = self.text_hash.get(text)
        if key is None:             # the pattern's subtree hash, as the table's numpy-built ones
            key = self.text_hash[text] = tree_hash(children, root, src, dst)
        table.add_instance(text, weight, delays, lat, key=key)


def infer(messages: pd.DataFrame, **params) -> PathsResult:
    """Path patterns (expected counts), node delays and edge latencies by WAP5's message linking (see
    the module docstring for x, y, k, ambiguity, p_min, max_parents)."""
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"linking: unknown parameters {sorted(unknown)} (known: {sorted(DEFAULTS)})")
    p = {**DEFAULTS, **params}
    x, y, k = float(p["x"]), float(p["y"]), int(p["k"])
    m = ensure_messages(messages)
    nodes = node_codes(m)
    n = len(m)
    t_out, _ = clocks(m)
    t_recv = m["t_recv"].to_numpy(dtype=np.float64)
    t_in = t_recv.copy()                   # NaN: not seen by its receiver, never a parent
    warnings = []
    clients = untraced_nodes(m, nodes, p["untraced"])
    if clients:
        # WAP5 section 5.1: an untraced node's messages have no causes there, so messages into it
        # are nobody's parent and messages from it are spontaneous (path roots)
        client_codes = np.flatnonzero(np.isin(nodes.names.astype(str), sorted(clients)))
        into = np.isin(nodes.dst, client_codes)          # by code: no string per message
        t_in[into] = np.nan
    elif p["untraced"] == "auto":
        warnings.append("no call/return tags to tell the clients by; if one client sends "
                        "many requests, pass untraced=NAME (WAP5's clients were untraced) or its "
                        "requests chain into one another")
    p["untraced"] = sorted(clients)
    unseen = int(np.isnan(t_recv).sum())
    if unseen:
        warnings.append(f"{unseen} messages without a receive time cannot be parents")
    groups, p["granularity"], more = link_groups(m, nodes, str(p["granularity"]))
    warnings += more
    arr, pos, first = _arrivals_and_departures(groups, t_out, t_in)
    if p["granularity"] == "thread":
        skip = np.isin(nodes.names.astype(str), sorted(clients))
        handoff = handoff_nodes(nodes, t_out, t_in, arr, pos, first, x, skip)
        if handoff.any():
            warnings.append("granularity=thread: at " + ", ".join(sorted(str(v) for v in nodes.names[handoff]))
                            + f" most messages come from threads that received nothing within x={x:g} s "
                            "(work handed between threads); linked per node there")
            groups, _, _ = link_groups(m, nodes, "thread", per_node=handoff)
            arr, pos, first = _arrivals_and_departures(groups, t_out, t_in)
    # d stays per tier node pair (a thread pool's threads share their node's delays)
    d = causal_delays(nodes, t_out, t_in, arr, pos, first, x, float(p["d_min"]))
    # a link weaker than p_min whatever the other candidates (exp(-gap/d) < p_min * exp(-y)) is
    # "probably false" under the paper's model; the edge model may learn longer delays, so it looks
    # `reach` times further back
    reach = 1.0 if p["model"] == "wap5" else float(p["reach"])
    cutoff = np.minimum(x, reach * d * (y + math.log(1 / float(p["p_min"]))))
    child, parent, gap = possible_parents(t_out, t_in, arr, pos, first, cutoff, int(p["max_parents"]))
    if p["model"] == "wap5":
        prob, p_spont = wap5_weights(child, gap, d, y, n, reuse=True)
    elif p["model"] == "edges":
        prob, p_spont = edge_weights(child, parent, gap, nodes.src, nodes.dst, nodes.n, d, y,
                                     int(p["rounds"]), float(p["d_min"]))
    else:
        raise ValueError(f"linking: model must be 'wap5' or 'edges', not {p['model']!r}")
    del gap
    best = likeliest(child, prob, p_spont, monotone=p["model"] == "wap5")
    # no possible parent at all (a window of a few messages far apart): every message is a root
    map_parent = np.where(best >= 0, parent[np.maximum(best, 0)], -1) if len(parent) else np.full(len(best), -1)
    depth, map_parent = forest_depth(map_parent)        # cut any cycle (clock skew)
    root_of = forest_roots(map_parent)
    is_root = map_parent < 0
    if p["orphans"] == "drop" and clients:
        from_client = np.isin(nodes.src, np.flatnonzero(np.isin(nodes.names.astype(str), sorted(clients))))
        orphan = is_root & ~from_client
        warnings.append(f"{int(orphan.sum())} trees rooted at a traced node's spontaneous "
                        f"message left out (orphans='drop')")
        is_root &= ~orphan

    # per tree: log-probability of its likeliest instance (links in: p, possible links left out: 1-p)
    # (in place: the link arrays are the largest in memory, and fresh pages cost as much as the sums)
    included = np.empty(len(child), dtype=bool)
    for a in range(0, len(child), BLOCK):
        np.equal(map_parent[child[a:a + BLOCK]], parent[a:a + BLOCK], out=included[a:a + BLOCK])
    tree = root_of[parent]
    factor = np.subtract(1.0, prob)
    np.maximum(factor, 1e-300, out=factor)
    np.copyto(factor, prob, where=included)
    np.log(factor, out=factor)
    logp = np.bincount(tree, weights=factor, minlength=n)
    del factor
    ambiguous_tree = np.zeros(n, dtype=bool)
    amb = None
    if k > 0:
        amb = np.abs(prob - 0.5) <= float(p["ambiguity"])
        amb |= included & (prob < 0.5)
        ambiguous_tree[tree[amb]] = True
        ambiguous_tree &= is_root

    table = PatternTable(nodes.names)
    hashes = None
    if ambiguous_tree.any():
        hashes = subtree_hashes(nodes, map_parent, depth)     # the instances' and the forest's
        _enumerate(table, nodes, t_out, t_in, t_recv, child, parent, prob, amb, map_parent, root_of,
                   ambiguous_tree, k, depth, hashes)
    plain_roots = is_root & ~ambiguous_tree
    forest = Forest(map_parent, plain_roots, np.exp(logp), warnings, depth=depth, root_of=root_of, hashes=hashes)
    p["trees_enumerated"] = int(ambiguous_tree.sum())
    p["trees"] = int(is_root.sum())
    result = result_from_forest("linking", m, nodes, forest, p, table)
    # per message, its likeliest parent (the enumerated trees' too), in the trees kept
    result.parent = np.where(is_root[root_of], map_parent, -1)
    return result


def _enumerate(table: PatternTable, nodes: Nodes, t_out, t_in, t_recv, child, parent, prob, amb,
               map_parent, root_of, ambiguous_tree, k: int, depth: np.ndarray | None = None,
               hashes: np.ndarray | None = None) -> None:
    """The try-both instances of the trees marked ambiguous: their first k try-both decisions in
    time order, each tried both ways. In numpy (linking_instances.py) unless VECTORISED is off, or
    for the trees whose instances depend on the walk's order (linking_instances.walk_order_matters),
    which _Instances walks in Python."""
    amb_sel = np.flatnonzero(amb & ambiguous_tree[root_of[parent]])
    order = amb_sel[np.lexsort((t_out[child[amb_sel]], root_of[parent[amb_sel]]))]
    roots = root_of[parent[order]]
    starts = np.flatnonzero(np.r_[True, roots[1:] != roots[:-1]])
    ends = np.r_[starts[1:], len(order)]
    # each tree's first k decisions
    tree_of = np.repeat(np.arange(len(starts)), ends - starts)
    first_k = np.arange(len(order)) - starts[tree_of] < k
    dec, dec_tree = order[first_k], tree_of[first_k]
    tree_roots = roots[starts]
    walk = np.ones(len(starts), dtype=bool)
    if VECTORISED and len(starts):
        if depth is None:
            depth, _ = forest_depth(map_parent)
        batch = Batch(nodes, t_out, t_in, t_recv, child, parent, prob, map_parent, depth, hashes)
        graft = map_parent[child[dec]] != parent[dec]
        walk = walk_order_matters(dec_tree, graft, child[dec], parent[dec], batch.root_of, map_parent, batch.pre,
                                  batch.size, tree_roots, len(starts))
        fast = np.flatnonzero(~walk[dec_tree])
        dec_ptr = np.searchsorted(dec_tree[fast], np.flatnonzero(~walk), side="left")
        batch.add(table, tree_roots[~walk], np.r_[dec_ptr, len(fast)], dec[fast])
    if walk.any():
        inst = _Instances(nodes, t_out, t_in, t_recv, child, parent, prob, map_parent)
        bounds = np.searchsorted(dec_tree, np.arange(len(starts) + 1))
        for t in np.flatnonzero(walk).tolist():
            links = dec[bounds[t]:bounds[t + 1]]
            decisions = [(int(parent[i]), int(child[i]), float(prob[i])) for i in links]
            inst.run(table, int(tree_roots[t]), decisions)
