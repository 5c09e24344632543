"""A test-only stand-in for the black-box algorithms: each message is caused by the latest message
its sender received before sending it, at most `x` s before (else it starts a path), whatever the
request: exact when paths never overlap and start more than `x` apart (very low parallelism). Lets the CLI and the scoring be tested before the real algorithms land."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.paths.model import PathPattern, PathsResult, pattern_of
from analysis.paths.readers import latest_received_causes


def infer(messages: pd.DataFrame, x: float = 0.05, **params) -> PathsResult:
    n = len(messages)
    parent = latest_received_causes(messages, np.zeros(n, dtype=np.int64))
    late = (parent >= 0) & (messages["t_send"].to_numpy() - messages["t_recv"].to_numpy()[np.maximum(parent, 0)] > x)
    parent[late] = -1
    src = messages["src"].astype(str).to_numpy()
    dst = messages["dst"].astype(str).to_numpy()
    t_send, t_recv = messages["t_send"].to_numpy(), messages["t_recv"].to_numpy()
    has = parent >= 0
    delay = np.full(n, np.nan)
    delay[has] = t_send[has] - t_recv[parent[has]]
    # root of every message, by pointer jumping
    root = np.where(has, parent, np.arange(n))
    for _ in range(64):
        nxt = root[root]
        if (nxt == root).all():
            break
        root = nxt
    groups: dict[str, list[int]] = {}
    order = np.argsort(root, kind="stable")
    bounds = np.flatnonzero(np.r_[True, root[order][1:] != root[order][:-1], True])
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        rows = order[a:b]                       # one tree, rows in time order (its root first)
        local = {int(r): i for i, r in enumerate(rows)}
        par = [local.get(int(parent[r]), -1) for r in rows]
        text = pattern_of(src[rows], dst[rows], par, local[int(root[rows[0]])])
        groups.setdefault(text, []).append(int(root[rows[0]]))
    frame = pd.DataFrame({"root": root, "node": src, "delay": delay})
    per_path = frame.dropna().groupby(["root", "node"])["delay"].sum()
    patterns = []
    for pat, roots in groups.items():
        sub = per_path[per_path.index.get_level_values(0).isin(roots)]
        means = (sub.groupby(level=1).sum() / len(roots)).to_dict()
        patterns.append(PathPattern(pat, float(len(roots)), means))
    patterns.sort(key=lambda p: -p.count)
    nd = frame.dropna().groupby("node")["delay"].agg(["mean", "count"]).reset_index()
    nd.columns = ["node", "mean_s", "count"]
    el = pd.DataFrame({"src": src, "dst": dst, "lat": t_recv - t_send}).groupby(["src", "dst"])["lat"] \
        .agg(["mean", "count"]).reset_index()
    el.columns = ["src", "dst", "mean_s", "count"]
    return PathsResult("oracle", patterns, nd, el, params={"x": x, **params})
