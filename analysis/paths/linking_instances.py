"""Linking's try-both instances (WAP5 figure 4; linking.py step 3), built in numpy.

An instance is its tree's likeliest links with some of its first `k` try-both decisions flipped: a
flipped likeliest link drops the child's subtree; a flipped other link grafts the child's subtree
(its likeliest subtree in the forest) under the link's parent. linking._Instances builds each
instance by a walk in Python; this module builds the instances of many trees at once:

- the forest is laid out in preorder, so every subtree is one slice of messages;
- an instance is a copy of its tree's slice and of the slices of the subtrees its decisions may
  graft, with each copied message's parent taken from the forest, cut where a decision drops the
  link, and set to the decision's parent where one grafts it; what hangs from the instance's root
  after that is the instance;
- its weight is the sum over its messages of their links' log factors (log p for a link taken, log
  1 - p for one left out: per message once, for the forest's choice) plus the change of each flipped
  decision whose parent is in the instance; its pattern is the subtree hash of the copy (the
  forest's hash where a copied row's subtree is the forest's, recomputed above a changed link:
  Batch.copy_hashes), named once per distinct hash; node delays and edge latencies are summed per
  pattern with the instance weights, as PatternTable.add_instance would.

A tree where the walk's order matters is left to linking._Instances (`walk_order_matters`): where
a grafted child is already in the tree and the walk may reach it first from its likeliest parent,
or two grafted subtrees overlap (the walk gives a child to whichever parent it reaches first). The
copies are made a chunk of trees at a time (`MAX_ROWS`), so memory stays bounded.
"""

from __future__ import annotations

from bisect import bisect_left
from functools import partial

import numpy as np

from analysis.paths.assemble import (
    _GOLD,
    Nodes,
    PatternTable,
    child_term,
    forest_roots,
    key_sums,
    label_hashes,
    mix,
    subtree_hashes,
)
from analysis.paths.model import edge_key, token

MAX_ROWS = 1_000_000      # copied messages per chunk of trees (bounds the memory)


def preorder(parent: np.ndarray, depth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pre, size) per message of a forest: its position in a preorder of the whole forest and the
    size of its subtree, so that the subtree of v is the messages at positions pre[v] to pre[v] +
    size[v] - 1."""
    n = len(parent)
    size = np.ones(n, dtype=np.int64)
    order = np.argsort(-depth, kind="stable")
    bounds = np.flatnonzero(np.diff(depth[order])) + 1
    levels = np.split(order, bounds)
    for level in levels:                      # deepest first
        p = parent[level]
        has = p >= 0
        np.add.at(size, p[has], size[level][has])
    off = np.zeros(n, dtype=np.int64)
    kids = np.flatnonzero(parent >= 0)
    kids = kids[np.argsort(parent[kids], kind="stable")]
    if kids.size:
        run = np.r_[True, parent[kids][1:] != parent[kids][:-1]]
        csum = np.cumsum(size[kids])
        start = np.maximum.accumulate(np.where(run, np.arange(kids.size), 0))
        before = csum - size[kids] - (csum[start] - size[kids[start]])
        off[kids] = 1 + before
    pre = np.zeros(n, dtype=np.int64)
    roots = np.flatnonzero(parent < 0)
    pre[roots] = np.cumsum(size[roots]) - size[roots]
    for level in levels[::-1]:                # shallowest first
        p = parent[level]
        has = p >= 0
        pre[level[has]] = pre[p[has]] + off[level[has]]
    return pre, size


def walk_order_matters(tree_of_dec: np.ndarray, graft: np.ndarray, dchild: np.ndarray, dparent: np.ndarray,
                       root_of: np.ndarray, map_parent: np.ndarray, pre: np.ndarray, size: np.ndarray,
                       tree_root: np.ndarray, n_trees: int) -> np.ndarray:
    """Per tree, whether its instances depend on the walk's order, i.e. whether it is left to the
    walk in Python: two grafts whose subtrees overlap (one child in the other's subtree, or the
    same child); more than one graft whose child is in the tree
    itself (an inner graft); or an inner graft whose parent is under the child, or whose child is
    the tree's root. (One inner graft is built in numpy: the walk gives its child to whichever of
    its two parents it reaches first, Batch.m1_first.)"""
    bad = np.zeros(n_trees, dtype=bool)
    g = np.flatnonzero(graft)
    inner = root_of[dchild[g]] == tree_root[tree_of_dec[g]]
    gi, go = g[inner], g[~inner]
    # outer grafts from one other tree: the walk's order matters where their subtrees overlap
    c = dchild[go]
    o = np.lexsort((pre[c], root_of[c], tree_of_dec[go]))
    c, tr = c[o], tree_of_dec[go][o]
    group = np.cumsum(np.r_[True, (tr[1:] != tr[:-1]) | (root_of[c][1:] != root_of[c][:-1])]) if c.size else c
    span = int(pre.max(initial=0) + size.max(initial=0)) + 1
    ends = np.maximum.accumulate(group * span + pre[c] + size[c]) if c.size else c
    overlap = np.r_[False, (group[1:] == group[:-1]) & (ends[:-1] - group[1:] * span > pre[c][1:])] if c.size \
        else np.zeros(0, dtype=bool)
    bad[tr[overlap]] = True
    n_inner = np.bincount(tree_of_dec[gi], minlength=n_trees)
    bad |= n_inner > 1
    m1, m2, ch = dparent[gi], map_parent[dchild[gi]], dchild[gi]
    under_c = (pre[ch] <= pre[m1]) & (pre[m1] < pre[ch] + size[ch])
    bad[tree_of_dec[gi][(m2 < 0) | (m1 == m2) | under_c]] = True
    return bad


class Batch:
    """The instances of a set of trees whose walk order does not matter (module docstring)."""

    def __init__(self, nodes: Nodes, t_out, t_in, t_recv, child, parent, prob, map_parent, depth,
                 hashes: np.ndarray | None = None):
        self.nodes, self.t_out, self.t_in, self.t_recv = nodes, t_out, t_in, t_recv
        self.child, self.parent, self.prob, self.map_parent = child, parent, prob, map_parent
        self.pre, self.size = preorder(map_parent, depth)
        self.depth = depth
        self.by_pre = np.empty_like(self.pre)
        self.by_pre[self.pre] = np.arange(len(self.pre))
        likeliest = map_parent[child] == parent
        self.log_p = np.log(np.maximum(prob, 1e-300))
        self.log_q = np.log(np.maximum(1 - prob, 1e-300))
        self.likeliest = likeliest
        self.root_of = forest_roots(map_parent)
        self.like_link = np.full(len(t_out), -1, dtype=np.int64)   # per message, its likeliest link
        self.like_link[child[likeliest]] = np.flatnonzero(likeliest)
        # per message, the log factors of its links as the forest chose them
        self.base = np.bincount(parent, weights=np.where(likeliest, self.log_p, self.log_q), minlength=len(t_out))
        self.held = Hashed(nodes.names)
        # the forest's subtree hashes, and per message the sum over its children that its hash mixes
        # in: a copied row whose subtree is the forest's has its message's hash (copy_hashes)
        self.hash = subtree_hashes(nodes, map_parent, depth) if hashes is None else hashes
        self.label = label_hashes(nodes.src, nodes.dst)
        kids = np.flatnonzero(map_parent >= 0)
        self.childsum = np.zeros(len(t_out), dtype=np.uint64)
        np.add.at(self.childsum, map_parent[kids], child_term(self.hash[kids]))

    def m1_first(self, m1: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Whether the walk (linking._Instances: a stack; a message's links pushed in link order, so
        its children are visited last link first) reaches m1 before c's likeliest parent m2, both in
        one tree and neither under c: m1 above m2, or, below their common ancestor, m1's branch
        entered by a later link than m2's."""
        pre, size, up, link = self.pre, self.size, self.map_parent, self.like_link
        out = np.zeros(len(m1), dtype=bool)
        for i, (a, b) in enumerate(zip(m1.tolist(), up[c].tolist(), strict=True)):
            if pre[a] <= pre[b] < pre[a] + size[a]:
                out[i] = True            # m1 above m2
                continue
            if pre[b] <= pre[a] < pre[b] + size[b]:
                continue                 # m2 above m1
            while not (pre[up[a]] <= pre[b] < pre[up[a]] + size[up[a]]):
                a = up[a]                # m1's branch below the common ancestor
            while up[b] != up[a]:
                b = up[b]                # m2's
            out[i] = link[a] > link[b]
        return out

    def copy_hashes(self, par: np.ndarray, natural: np.ndarray, msg: np.ndarray) -> np.ndarray:
        """assemble.subtree_hashes of the copied rows (parents `par`; `natural`: each row's parent
        as the forest has it, within its segment), computed only for the rows whose subtree the
        instances changed, the ancestors of a changed link's old and new parent: every other row
        has its message's forest hash. A changed row's hash is its message's childsum with the
        terms of the children it lost taken out and those of the children it gained or whose own
        subtree changed put in (wrapping sums of uint64: the same bits in any order), rows done
        nearest the changes first. Most of the copies' rows are not computed at all."""
        h = self.hash[msg]
        moved = np.flatnonzero(par != natural)
        if not moved.size:
            return h
        old, new = natural[moved], par[moved]
        # the changed rows: old and new parents of the moved ones and their ancestors, each with
        # its greatest distance from such a parent (a row's changed children are nearer)
        dist = np.full(len(par), -1, dtype=np.int32)
        front = np.r_[old[old >= 0], new[new >= 0]]
        step = 0
        while front.size:             # (repeats in the front cost less than making it unique)
            dist[front] = step
            front = par[front]
            front = front[front >= 0]
            step += 1
        todo = np.flatnonzero(dist >= 0)
        cs = self.childsum[msg[todo]]
        at = partial(np.searchsorted, todo)
        gone = old >= 0
        np.subtract.at(cs, at(old[gone]), child_term(self.hash[msg[moved[gone]]]))
        came = (new >= 0) & (dist[moved] < 0)      # moved rows whose own subtree is the forest's
        np.add.at(cs, at(new[came]), child_term(self.hash[msg[moved[came]]]))
        label = self.label[msg[todo]]
        order = np.argsort(dist[todo], kind="stable")
        bounds = np.flatnonzero(np.diff(dist[todo][order])) + 1
        for level in np.split(order, bounds):
            rows = todo[level]
            with np.errstate(over="ignore"):
                hv = mix(label[level] ^ mix(cs[level] + _GOLD))
            h[rows] = hv
            up = par[rows]
            has = up >= 0
            term = child_term(hv[has])
            same = natural[rows[has]] == up[has]      # its old term is in the parent's forest sum
            with np.errstate(over="ignore"):
                term[same] -= child_term(self.hash[msg[rows[has][same]]])
            np.add.at(cs, at(up[has]), term)
        return h

    def add(self, table: PatternTable, roots: np.ndarray, dec_ptr: np.ndarray, dec_link: np.ndarray) -> None:
        """Add the instances of the trees rooted at `roots` (decisions dec_link[dec_ptr[i]:dec_ptr[i+1]]
        for roots[i], in bit order) to the table, a chunk of trees at a time."""
        kk = np.diff(dec_ptr)
        heads = self.child[dec_link]
        tree_of_dec = np.repeat(np.arange(len(roots)), kk)
        graft = ~self.likeliest[dec_link] & (self.root_of[heads] != roots[tree_of_dec])
        graft_rows = np.zeros(len(roots), dtype=np.int64)
        np.add.at(graft_rows, tree_of_dec[graft], self.size[heads[graft]])
        rows = (self.size[roots] + graft_rows) << kk
        start = 0
        while start < len(roots):
            stop = start + max(1, int(np.searchsorted(np.cumsum(rows[start:]), MAX_ROWS, side="right")))
            lo, hi = dec_ptr[start], dec_ptr[stop]
            self._chunk(table, roots[start:stop], dec_ptr[start:stop + 1] - lo, dec_link[lo:hi])
            start = stop
        table.pending.append(self.held)

    def _chunk(self, table: PatternTable, roots, dec_ptr, dec_link) -> None:
        pre, size, by_pre = self.pre, self.size, self.by_pre
        t = len(roots)
        kk = np.diff(dec_ptr)
        tree_of_dec = np.repeat(np.arange(t), kk)
        bit = np.arange(len(dec_link)) - dec_ptr[tree_of_dec]
        dchild, dparent = self.child[dec_link], self.parent[dec_link]
        graft = ~self.likeliest[dec_link]
        inner = graft & (self.root_of[dchild] == roots[tree_of_dec])
        graft &= ~inner
        # segments per tree: the tree itself, then each (outer) graft's subtree
        g = np.flatnonzero(graft)
        seg_tree = np.r_[np.arange(t), tree_of_dec[g]]
        seg_head = np.r_[roots, dchild[g]]
        seg_dec = np.r_[np.full(t, -1), g]
        o = np.argsort(seg_tree, kind="stable")
        seg_tree, seg_head, seg_dec = seg_tree[o], seg_head[o], seg_dec[o]
        seg_size = size[seg_head]
        seg_ptr = np.searchsorted(seg_tree, np.arange(t + 1))
        seg_off = np.cumsum(seg_size) - seg_size
        seg_off = seg_off - seg_off[seg_ptr[:-1]][seg_tree]           # offset within its tree's copy
        tree_rows = np.add.reduceat(seg_size, seg_ptr[:-1]) if t else np.zeros(0, np.int64)
        # instances: every mask of each tree's decisions
        n_inst = 1 << kk
        inst_tree = np.repeat(np.arange(t), n_inst)
        inst_mask = np.arange(len(inst_tree)) - np.repeat(np.cumsum(n_inst) - n_inst, n_inst)
        inst_rows = tree_rows[inst_tree]
        inst_base = np.cumsum(inst_rows) - inst_rows
        # (instance, segment) pairs, then rows
        nseg = np.diff(seg_ptr)[inst_tree]
        pair_inst = np.repeat(np.arange(len(inst_tree)), nseg)
        pair_seg = seg_ptr[inst_tree][pair_inst] + (np.arange(len(pair_inst)) - np.repeat(np.cumsum(nseg) - nseg, nseg))
        psize = seg_size[pair_seg]
        row_pair = np.repeat(np.arange(len(pair_inst)), psize)
        r = np.arange(len(row_pair)) - np.repeat(np.cumsum(psize) - psize, psize)
        row_seg = pair_seg[row_pair]
        row_inst = pair_inst[row_pair]
        msg = by_pre[pre[seg_head[row_seg]] + r]
        row = np.arange(len(msg))
        mask = inst_mask[row_inst]
        tree = inst_tree[row_inst]
        # parents: the forest's, within the segment
        natural = np.where(r > 0, row - (pre[msg] - pre[np.maximum(self.map_parent[msg], 0)]), -1)
        par = natural.copy()
        # a dropped link: the row's likeliest link is one of its tree's decisions, flipped here
        n = len(self.t_out)
        drop_bit = np.full(n, -1, dtype=np.int64)
        drop_tree = np.full(n, -1, dtype=np.int64)
        keep_dec = ~graft & ~inner
        drop_bit[dchild[keep_dec]] = bit[keep_dec]
        drop_tree[dchild[keep_dec]] = tree_of_dec[keep_dec]
        db = drop_bit[msg]
        dropped = (r > 0) & (db >= 0) & (drop_tree[msg] == tree) & ((mask >> np.maximum(db, 0)) & 1).astype(bool)
        par[dropped] = -1
        # a graft's head: under the decision's parent (in the tree's own segment) when flipped here
        head = (r == 0) & (seg_dec[row_seg] >= 0)
        hd = seg_dec[row_seg][head]
        on = ((mask[head] >> bit[hd]) & 1).astype(bool)
        base_row = inst_base[row_inst[head]]
        par[np.flatnonzero(head)] = np.where(on, base_row + pre[dparent[hd]] - pre[roots[tree[head]]], -1)
        # an inner graft: the child, in the tree's own segment, moves under the graft's parent where
        # flipped, if the walk reaches that parent first or the child's likeliest link is not taken
        ii = np.flatnonzero(inner)
        if ii.size:
            dec_of_tree = np.full(t, -1, dtype=np.int64)
            dec_of_tree[tree_of_dec[ii]] = ii
            i_inst = np.flatnonzero(dec_of_tree[inst_tree] >= 0)
            i_dec = dec_of_tree[inst_tree[i_inst]]
            i_inst, i_dec = i_inst[((inst_mask[i_inst] >> bit[i_dec]) & 1).astype(bool)], \
                i_dec[((inst_mask[i_inst] >> bit[i_dec]) & 1).astype(bool)]
            r0 = inst_base[i_inst] - pre[roots[inst_tree[i_inst]]]
            c = dchild[i_dec]
            m1_row, m2_row, c_row = r0 + pre[dparent[i_dec]], r0 + pre[self.map_parent[c]], r0 + pre[c]
            own_bit = drop_bit[c]
            own_flipped = (own_bit >= 0) & ((inst_mask[i_inst] >> np.maximum(own_bit, 0)) & 1).astype(bool)
            # neither parent is under the child: each still hangs from its instance's root
            m1_ok = top_rows(par, m1_row) == inst_base[i_inst]
            m2_ok = top_rows(par, m2_row) == inst_base[i_inst]
            took = m1_ok & (self.m1_first(dparent[i_dec], c) | ~m2_ok | own_flipped)
            par[c_row[took]] = m1_row[took]
        # what hangs from each instance's root
        reach = forest_roots(par) == inst_base[row_inst]
        logw = np.bincount(row_inst[reach], weights=self.base[msg[reach]], minlength=len(inst_tree))
        # the flipped decisions whose parent is in the instance
        di = np.repeat(np.arange(len(inst_tree)), kk[inst_tree])
        dj = dec_ptr[inst_tree][di] + (np.arange(len(di)) - np.repeat(np.cumsum(kk[inst_tree]) - kk[inst_tree],
                                                                      kk[inst_tree]))
        flipped = ((inst_mask[di] >> bit[dj]) & 1).astype(bool)
        p_row = inst_base[di] + pre[dparent[dj]] - pre[roots[inst_tree[di]]]
        live = flipped & reach[p_row]
        lk = dec_link[dj[live]]
        delta = np.where(self.likeliest[lk], self.log_q[lk] - self.log_p[lk], self.log_p[lk] - self.log_q[lk])
        logw += np.bincount(di[live], weights=delta, minlength=len(inst_tree))
        if ii.size:
            # an inner graft the walk reached after the likeliest parent took the child: the
            # graft's link is left out (1 - p) after all
            lost = m1_ok & ~took
            lk = dec_link[i_dec[lost]]
            logw += np.bincount(i_inst[lost], weights=self.log_q[lk] - self.log_p[lk], minlength=len(inst_tree))
            # one that took it: the child's likeliest link, reached after, is left out (1 - p)
            extra = took & m2_ok & ~own_flipped
            own = self.like_link[c[extra]]
            logw += np.bincount(i_inst[extra], weights=self.log_q[own] - self.log_p[own], minlength=len(inst_tree))
        weight = np.exp(logw)
        kept = weight > 0
        # patterns: the subtree hash of each instance's root
        h = self.copy_hashes(par, natural, msg)
        inst_ok = np.flatnonzero(kept)
        pid, uniq = _factorize(h[inst_base[inst_ok]])
        pat_of_inst = np.full(len(inst_tree), -1, dtype=np.int64)
        pat_of_inst[inst_ok] = pid
        held = self.held
        held.keys.append(uniq)
        held.count.append(np.bincount(pid, weights=weight[inst_ok], minlength=len(uniq)))
        held.raw.append(np.bincount(pid, minlength=len(uniq)))
        in_pat = reach & (pat_of_inst[row_inst] >= 0)
        w_row = weight[row_inst]
        nn = self.nodes.n
        # node delays: each link in an instance, at its child's sender
        lr = np.flatnonzero(in_pat & (par >= 0))
        d = self.t_out[msg[lr]] - self.t_in[msg[par[lr]]]
        k, v = _sums(pat_of_inst[row_inst[lr]] * nn + self.nodes.src[msg[lr]], d * w_row[lr])
        held.d_key.append(uniq[k // nn])
        held.d_node.append(k % nn)
        held.d_sum.append(v)
        # edge latencies: each message of an instance seen by its receiver
        lat = self.t_recv[msg] - self.t_out[msg]
        sr = np.flatnonzero(in_pat & ~np.isnan(lat))
        k, (v, w) = _pair_sums(pat_of_inst[row_inst[sr]], self.nodes.src[msg[sr]] * nn + self.nodes.dst[msg[sr]],
                               nn * nn, lat[sr] * w_row[sr], w_row[sr])
        held.l_key.append(uniq[k // (nn * nn)])
        held.l_edge.append(k % (nn * nn))
        held.l_sum.append(v)
        held.l_w.append(w)
        # one instance of each pattern not met before, to name it if it is among the most frequent
        first = np.full(len(uniq), -1, dtype=np.int64)
        first[pid[::-1]] = inst_ok[::-1]
        new = ~np.isin(uniq, held.rep_keys_array())
        rep_inst = np.zeros(len(inst_tree), dtype=bool)
        rep_inst[first[new]] = True
        rr = np.flatnonzero(reach & rep_inst[row_inst])
        group_start = np.flatnonzero(np.r_[True, row_inst[rr][1:] != row_inst[rr][:-1]])
        at = np.full(len(msg), -1, dtype=np.int64)     # a kept row's place within its instance's kept rows
        at[rr] = np.arange(len(rr)) - np.repeat(group_start, np.diff(np.r_[group_start, len(rr)]))
        local = np.where(par[rr] >= 0, at[np.maximum(par[rr], 0)], -1)
        held.add_reps(h[inst_base[row_inst[rr]]], self.nodes.src[msg[rr]], self.nodes.dst[msg[rr]], local, h[rr])


class Hashed:
    """Instance patterns held by subtree hash (assemble.PatternTable.pending): counts, node-delay and
    latency sums per hash, and one instance of each (its messages' src, dst and parent within it)
    to name it. `resolve` names only those among the table's `max_patterns` most frequent (with
    ties) and counts the rest as left out, so the table reads as if every instance had been added
    by its text."""

    def __init__(self, names: np.ndarray):
        self.names = names
        self.keys: list[np.ndarray] = []
        self.count: list[np.ndarray] = []
        self.raw: list[np.ndarray] = []
        self.d_key, self.d_node, self.d_sum = [], [], []
        self.l_key, self.l_edge, self.l_sum, self.l_w = [], [], [], []
        self.rep_parts: list[tuple[np.ndarray, ...]] = []
        self._rep_keys = np.zeros(0, dtype=np.uint64)

    def rep_keys_array(self) -> np.ndarray:
        return self._rep_keys

    def add_reps(self, key, src, dst, local, sub) -> None:
        """One instance per pattern: its root's hash (`key`, per row; an instance's rows together),
        its rows' nodes, parents (rows within it) and subtree hashes (`sub`)."""
        if key.size:
            self.rep_parts.append((key, src, dst, local, sub))
            self._rep_keys = np.union1d(self._rep_keys, key[np.r_[True, key[1:] != key[:-1]]])

    def resolve(self, table: PatternTable, max_patterns: int) -> None:
        if not self.keys:
            return
        keys, inv = np.unique(np.concatenate(self.keys), return_inverse=True)
        count = np.bincount(inv, weights=np.concatenate(self.count), minlength=len(keys))
        raw = np.bincount(inv, weights=np.concatenate(self.raw), minlength=len(keys)).astype(np.int64)
        by_hash = dict(table.by_hash)
        hashed = set(by_hash.values())
        for text in table.count:            # texts added without their hash (walked instances)
            if text not in hashed:
                by_hash.setdefault(hash_of_text(text, self.names), text)
        known = np.array([by_hash.get(k) is not None for k in keys.tolist()], dtype=bool)
        merged = dict(table.count)
        for k, c in zip(keys[known].tolist(), count[known].tolist(), strict=True):
            merged[by_hash[k]] += c
        unknown = np.flatnonzero(~known)
        every = np.r_[np.fromiter(merged.values(), dtype=np.float64, count=len(merged)), count[unknown]]
        if len(every) > max_patterns:
            line = -np.partition(-every, max_patterns - 1)[max_patterns - 1]
            name = unknown[count[unknown] >= line]
        else:
            name = unknown
        table.left_out += len(unknown) - len(name)
        table.left_count += float(count[np.setdiff1d(unknown, name)].sum())
        chosen = np.r_[np.flatnonzero(known), name]
        delays, lats = self._sums_of(keys, chosen)
        texts = self._texts(keys[name])
        for i in chosen.tolist():
            k = int(keys[i])
            text = by_hash.get(k) or texts[k]
            table.add_bulk(text, float(count[i]), int(raw[i]), delays.get(k, {}), lats.get(k, {}), key=k)

    def _sums_of(self, keys: np.ndarray, chosen: np.ndarray):
        names = [str(x) for x in self.names]
        nn = len(names)
        want = set(keys[chosen].tolist())
        delays: dict[int, dict[str, float]] = {}
        dk, dn, ds = (np.concatenate(x) for x in (self.d_key, self.d_node, self.d_sum))
        sel = np.isin(dk, keys[chosen])
        for k, node, v in zip(dk[sel].tolist(), dn[sel].tolist(), ds[sel].tolist(), strict=True):
            if k in want:
                d = delays.setdefault(k, {})
                d[names[node]] = d.get(names[node], 0.0) + v
        lats: dict[int, dict[str, tuple[float, float]]] = {}
        edges: dict[int, str] = {}
        lk, le, ls, lw = (np.concatenate(x) for x in (self.l_key, self.l_edge, self.l_sum, self.l_w))
        sel = np.isin(lk, keys[chosen])
        for k, e, v, w in zip(lk[sel].tolist(), le[sel].tolist(), ls[sel].tolist(), lw[sel].tolist(), strict=True):
            d = lats.setdefault(k, {})
            edge = edges.get(e)
            if edge is None:
                edge = edges[e] = edge_key(names[e // nn], names[e % nn])
            s0, w0 = d.get(edge, (0.0, 0.0))
            d[edge] = (s0 + v, w0 + w)
        return delays, lats

    def _texts(self, keys: np.ndarray) -> dict[int, str]:
        """The canonical text of each pattern in `keys`, from its held instance: each distinct
        subtree (by its subtree hash) named once, over all of them. A held part's rows as lists,
        children as one list sorted by parent (the part's rows, parents made part-wide), read by
        bisection."""
        out: dict[int, str] = {}
        want = set(keys.tolist())
        names = [token(x) for x in self.names.tolist()]
        memo: dict[int, str] = {}
        for key, src, dst, local, sub in self.rep_parts:
            first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])   # each held instance's first row
            ends = np.r_[first[1:], len(key)]
            take = np.array([j for j, k in enumerate(key[first].tolist()) if k in want and k not in out],
                            dtype=np.int64)
            if not take.size:
                continue
            # only the rows of the instances named (a part holds one instance of every new pattern,
            # most never among the most frequent), renumbered 0.. in their order
            size = ends[take] - first[take]
            new_first = np.cumsum(size) - size
            inst = np.repeat(np.arange(len(take)), size)
            rows = first[take][inst] + np.arange(len(inst)) - new_first[inst]
            lp = local[rows]
            par = np.where(lp >= 0, lp + new_first[inst], -1)
            kids = np.flatnonzero(par >= 0)
            kids = kids[np.argsort(par[kids], kind="stable")]
            tree = _Rows(par[kids].tolist(), kids.tolist(), src[rows].tolist(), dst[rows].tolist(),
                         sub[rows].tolist(), names, memo)
            for j, s in zip(take.tolist(), new_first.tolist(), strict=True):
                k = int(key[first[j]])
                if k not in out:
                    out[k] = tree.text(s)
        return out


class _Rows:
    """canonical_text of held rows' subtrees (children: kids[j] for by_parent[j] == i, by_parent
    sorted), memoised by subtree hash."""

    def __init__(self, by_parent, kids, src, dst, sub, names, memo) -> None:
        self.by_parent, self.kids, self.src, self.dst, self.sub = by_parent, kids, src, dst, sub
        self.names, self.memo = names, memo

    def text(self, i: int) -> str:
        got = self.memo.get(self.sub[i])
        if got is not None:
            return got
        lo = bisect_left(self.by_parent, i)
        hi = bisect_left(self.by_parent, i + 1, lo)
        text = f"{self.names[self.src[i]]}>{self.names[self.dst[i]]}"
        if hi > lo:
            text += "(" + ",".join(sorted([self.text(c) for c in self.kids[lo:hi]])) + ")"
        self.memo[self.sub[i]] = text
        return text


_MASK = (1 << 64) - 1


def _mix_int(x: int) -> int:
    x &= _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def tree_hash(children: dict[int, list[int]], root: int, src, dst) -> int:
    """assemble.subtree_hashes's hash of the tree under `root` (children: message -> its children)."""
    def h(m: int) -> int:
        label = _mix_int(int(src[m]) * 1_000_003 + int(dst[m]) + 1)
        childsum = 0
        for c in children.get(m, ()):
            childsum = (childsum + _mix_int(h(c) ^ 0x94D049BB133111EB)) & _MASK
        return _mix_int(label ^ _mix_int(childsum + 0x9E3779B97F4A7C15))

    return h(root)


def hash_of_text(text: str, names: np.ndarray) -> int:
    """assemble.subtree_hashes's hash of a canonical pattern's root, from its text (node codes:
    positions in `names`)."""
    from analysis.paths.render import parse_pattern

    code = {str(n): i for i, n in enumerate(names)}

    def h(m) -> int:
        label = _mix_int(code[m.src] * 1_000_003 + code[m.dst] + 1)
        childsum = 0
        for c in m.children:
            childsum = (childsum + _mix_int(h(c) ^ 0x94D049BB133111EB)) & _MASK
        return _mix_int(label ^ _mix_int(childsum + 0x9E3779B97F4A7C15))

    return h(parse_pattern(text))


def _factorize(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    uniq, inverse = np.unique(h, return_inverse=True)
    return inverse.astype(np.int64), uniq


def top_rows(par: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """forest_roots(par)[rows], by climbing from those rows only (a few, in a large forest)."""
    top = rows.copy()
    live, up = np.arange(len(top)), par[top]
    while True:
        keep = up >= 0
        live, up = live[keep], up[keep]
        if not live.size:
            return top
        top[live] = up
        up = par[up]


def _pair_sums(major: np.ndarray, minor: np.ndarray, n_minor: int, *values: np.ndarray):
    """key_sums of the keys major * n_minor + minor (minor below n_minor), the keys ascending and
    the sums in the arrays' order as key_sums gives them, with the minor codes made dense first (a
    few of n_minor occur) so that the key range stays small enough to count into."""
    if not major.size:
        return np.zeros(0, dtype=np.int64), [np.zeros(0) for _ in values]
    used = np.flatnonzero(np.bincount(minor, minlength=n_minor))
    dense = np.zeros(n_minor, dtype=np.int64)
    dense[used] = np.arange(len(used))
    keys, sums = key_sums(major * len(used) + dense[minor], (int(major.max()) + 1) * len(used), *values)
    return keys // len(used) * n_minor + used[keys % len(used)], sums


def _sums(key: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys, sum of value per key)."""
    keys, (sums,) = key_sums(key, int(key.max(initial=-1)) + 1, value)
    return keys, sums
