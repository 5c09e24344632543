"""What the TraceWeaver-class reconstruction's costs can tell at best (issue 43, docs/blackbox.md "What
timing can tell"): per set, traceweaver's request accuracy as it is, beside the same joint choice with
every density (arrival-to-call, return-to-reply, the chain of gaps, the call graph's shapes, the join
gap) learned from the TRUE mapping, an oracle no algorithm has:

- *truth-learned*: one round of the joint choice from traceweaver's own mapping: where it is still
  wrong, the truth is no cheaper than what it chose (or is a tie), so no learning fixes it;
- *truth-learned, from the truth*: the same round started from the true mapping (ties, which whole-
  millisecond stamps and the histograms' bins make, then keep the truth): the calls it still moves
  are where these costs prefer a wrong mapping outright.

    .venv/bin/python bench/paths_weaver_ceiling.py --data DIR [--sets media:25,media:25x3,...]

A set is app:load, or app:loadxK: that set overlaid with K-1 time-shifted copies of itself (each
shifted by a random 0-0.5 s: more concurrency, its truth kept; the development sets' stand-in for
higher loads, issue 43). The default is the development sets and their overlays; nothing here is
tuned: it measures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from analysis.paths import weaver  # noqa: E402
from analysis.paths.accuracy import request_scores  # noqa: E402
from analysis.paths.callpairs import call_pairs, candidates, result, true_parents  # noqa: E402
from analysis.paths.model import Trace, Truth, as_messages  # noqa: E402
from analysis.paths.spans import read_jaeger  # noqa: E402
from analysis.paths.weaver_cross import join_costs  # noqa: E402
from analysis.paths.weaver_joint import HI, LO, refine  # noqa: E402
from bench.paths_artifact import APPS  # noqa: E402

DEFAULT_SETS = ("hotel:25,hotel:50,hotel:50x2,node:25,node:50,node:50x2,"
                "media:25,media:25x2,media:25x3,media:25x5")


def overlay(trace: Trace, copies: int, seed: int = 1, shift: float = 0.5) -> Trace:
    """The trace with copies-1 copies of itself, each shifted by a random 0..`shift` s (message ids,
    requests and causes renumbered): the same requests, more of them at once."""
    m, t = trace.messages, trace.truth
    rng = np.random.default_rng(seed)
    n, n_req, n_msg = len(m), int(t.request.max()) + 1, int(m["msg"].max()) + 1
    frames, req, cause = [], [], []
    for i in range(copies):
        f = m.copy()
        dt = rng.uniform(0, shift) if i else 0.0
        f["t_send"] += dt
        f["t_recv"] += dt
        f["msg"] = np.where(f["msg"] >= 0, f["msg"] + i * n_msg, -1)
        frames.append(f)
        req.append(np.where(t.request >= 0, t.request + i * n_req, -1))
        cause.append(np.where(t.cause >= 0, t.cause + i * n, -1))
    f = pd.concat(frames, ignore_index=True)
    for c in ("src", "dst", "kind"):
        f[c] = f[c].astype(str)
    order = np.argsort(f["t_send"].to_numpy(), kind="stable")
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    req, cause = np.concatenate(req)[order], np.concatenate(cause)[order]
    cause = np.where(cause >= 0, back[np.maximum(cause, 0)], -1)
    return Trace(as_messages(f.iloc[order].reset_index(drop=True)), Truth(req, cause), source=trace.source)


def ceiling(trace: Trace) -> dict[str, float]:
    """traceweaver's request accuracy, and the joint choice's with every density learned from the truth."""
    p = dict(weaver.DEFAULTS)
    inferred = weaver.infer(trace.messages)
    as_is = request_scores(inferred, trace)["request_accuracy"]
    cp = call_pairs(trace.messages)
    truth = true_parents(cp, trace.truth.cause)
    chosen = true_parents(cp, inferred.parent)              # traceweaver's mapping, read back as pairs
    child, parent, _ = candidates(cp, int(p["max_parents"]))
    per_decade = int(p["bins_per_decade"])
    key, pre, post = weaver.edge_bins(cp, child, parent, per_decade)
    own = weaver.edge_costs(key, pre, post, (truth[child] == parent).astype(np.float64),
                            int((HI - LO) * per_decade) + 1, float(p["kernel"]))
    # the join term folded into each edge's own cost as refine weighs it (passed as `extra`, refine
    # would choose again only where that term tells candidates apart)
    extra, _ = join_costs(cp, child, parent, truth, per_decade, float(p["kernel"]))
    own = own + extra / max(float(p["unary"]), 1e-9)
    out = {"as it is": as_is}
    for label, start in (("truth-learned", chosen), ("truth-learned, from the truth", truth)):
        got, _ = refine(cp, child, parent, own, start, p, rounds=1, learn_from=truth)
        out[label] = request_scores(result("traceweaver", cp, got, p), trace)["request_accuracy"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="the artifact's data/ folder")
    ap.add_argument("--sets", default=DEFAULT_SETS, help="app:load or app:loadxK, comma-separated")
    a = ap.parse_args(argv)
    rows, read = [], {}
    for item in a.sets.split(","):
        app, _, load = item.partition(":")
        load, _, copies = load.partition("x")
        folder = a.data / APPS[app].format(int(load))
        if not folder.is_dir():
            print(f"{folder}: missing; skipped", file=sys.stderr)
            continue
        if folder not in read:
            read[folder] = read_jaeger(folder)
        trace = read[folder] if not copies else overlay(read[folder], int(copies))
        rows.append((item, ceiling(trace)))
    if not rows:
        print("no artifact sets found under --data", file=sys.stderr)
        return 2
    cols = list(rows[0][1])
    print("| set | " + " | ".join(f"{c} %" for c in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for item, got in rows:
        print(f"| {item} | " + " | ".join(f"{100 * got[c]:.1f}" for c in cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
