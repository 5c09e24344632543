"""The seeds' accuracy results regenerated on Maketrace (issue 31, item 6; docs/seeds-tables.md,
"Black-box path inference"): fixed seeds, printed as Markdown tables.

    .venv/bin/python bench/paths_accuracy.py [--duration 300] [--out FILE]

1. Slide 26, "added 200 msec delay in WS2": Maketrace's web-service simulation with 200 ms added to
   web2's replies for a third of the trace; for each algorithm, web2's mean delay per link outside
   and inside the fault window and the node whose delay rose most (score.culprit_ranking).
2. Slide 29, accuracy against parallelism (paths in flight at once: 1, 2, 4, 8, 16).
3. Slide 30, the other results: clock skew (each node's clock off by up to 0.1-20 ms), drop rate
   (1%, 5%), delay variance (10%, 30%), noise (5%, 15% extra unrelated call/return messages between
   the same nodes). Nesting is shown with both of its timestamp choices under skew, and with
   orphan call trees left out (orphans="drop") under drops and noise.
4. Linking's ceiling: per parallelism, the share of messages whose true cause is the latest arrival
   at their sender (what WAP5's monotone model makes the likeliest parent) and of requests all of
   whose causes are.
5. Linking at thread granularity (`--sections threads`): Maketrace's thread model (thread pools of
   16 and of 4 threads per node, and an nginx-like event loop, one thread, at web1 and web2 with
   pools of 16 elsewhere), per parallelism: the ceiling per sending thread, and linking's scores per
   node (the same messages: the thread model changes no timing) and per thread, with the paper's
   try-both limit (k = 4, the default) and without try-both (k = 0).

"linking (edges)" is linking with model="edges" (analysis/paths/linking_weights.py), beside the
paper's model.

Accuracy is analysis/paths/score.py's: recall and precision of the common patterns (>= 1% of the
requests), recall of the rare ones, and the count-weighted error of the per-node delays in the found
common patterns.
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from analysis.paths import convolution, linking, nesting  # noqa: E402
from analysis.paths.maketrace import Fault, maketrace, web_service  # noqa: E402
from analysis.paths.score import culprit_ranking, score  # noqa: E402

# linking reads no tags; Maketrace's one client is named as untraced, as WAP5's clients were
ALGORITHMS = {"nesting": (nesting.infer, True),
              "linking": (partial(linking.infer, untraced="client"), False),
              "linking (edges)": (partial(linking.infer, untraced="client", model="edges"), False),
              "convolution": (convolution.infer, False)}


def _pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.0f}%"


def _num(x: float, fmt: str = ".1f") -> str:
    return "-" if x != x else format(x, fmt)


def table(rows: list[list[str]], head: list[str]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _web2(result) -> tuple[float, float]:
    """web2's mean delay per link (node_delays) and per path through it (the count-weighted mean of
    its summed delay over the patterns that visit it)."""
    nd = result.node_delays
    got = nd.loc[nd["node"] == "web2", "mean_s"]
    per_link = float(got.iloc[0]) if len(got) else float("nan")
    pats = [(p.count, p.node_delays["web2"]) for p in result.patterns if "web2" in p.node_delays]
    total = sum(c for c, _ in pats)
    per_path = sum(c * d for c, d in pats) / total if total else float("nan")
    return per_link, per_path


def added_delay(duration: float, seed: int) -> str:
    start, stop = duration / 3, 2 * duration / 3
    rows = []
    for name, (infer, tags) in ALGORITHMS.items():
        tr = maketrace(web_service(), duration=duration, parallelism=2, seed=seed, tags=tags,
                       faults=[Fault("web2", 0.2, start, stop)])
        t = tr.messages["t_send"].to_numpy()
        inside = (t >= start) & (t < stop)
        before = _web2(infer(tr.messages[~inside].reset_index(drop=True)))
        during = _web2(infer(tr.messages[inside].reset_index(drop=True)))
        rank = culprit_ranking(tr, infer)
        top = rank["ranking"].iloc[0][:3] if len(rank) else []
        rows.append([name, _num(before[0] * 1000), _num(during[0] * 1000),
                     _num((during[0] - before[0]) * 1000), _num(before[1] * 1000),
                     _num(during[1] * 1000), _num((during[1] - before[1]) * 1000), ", ".join(top)])
    return table(rows, ["algorithm", "web2 per link outside (ms)", "inside", "rise",
                        "web2 per path outside (ms)", "inside", "rise", "rise ranking (top 3)"])


def _scores(name: str, seed: int, duration: float, **kw) -> dict:
    infer, tags = ALGORITHMS[name]
    params = kw.pop("params", {})
    tr = maketrace(web_service(), duration=duration, seed=seed, tags=tags, **kw)
    t0 = time.process_time()
    result = infer(tr.messages, **params)
    s = score(result, tr)
    s["cpu_s"] = time.process_time() - t0
    s["messages"] = len(tr.messages)
    return s


def _row(label: str, name: str, s: dict) -> list[str]:
    return [label, name, f"{s['messages']:,}", _pct(s["pattern_recall"]), _pct(s["pattern_precision"]),
            _pct(s["rare_recall"]), _pct(s["request_recall"]), _num(s["delay_error_pct"])]


HEAD = ["setting", "algorithm", "messages", "common recall", "common precision", "rare recall",
        "requests found", "delay error %"]


def parallelism(duration: float, seed: int, algorithms: tuple[str, ...]) -> str:
    rows = []
    for par in (1, 2, 4, 8, 16):
        for name in algorithms:
            rows.append(_row(f"parallelism {par}", name, _scores(name, seed, duration, parallelism=par)))
    return table(rows, HEAD)


def others(duration: float, seed: int, algorithms: tuple[str, ...]) -> str:
    settings = [("baseline (var 10%)", {}),
                ("clock skew 1 ms", {"clock_skew": 0.001}),
                ("clock skew 5 ms", {"clock_skew": 0.005}),
                ("clock skew 20 ms", {"clock_skew": 0.02}),
                ("drop rate 1%", {"drop_rate": 0.01}),
                ("drop rate 5%", {"drop_rate": 0.05}),
                ("delay variance 30%", {"delay_sd": 0.3}),
                ("noise 5%", {"noise": 0.05}),
                ("noise 15%", {"noise": 0.15})]
    rows = []
    for label, kw in settings:
        for name in algorithms:
            rows.append(_row(label, name, _scores(name, seed, duration, parallelism=2, **kw)))
        if "clock skew" in label and "nesting" in algorithms:
            s = _scores("nesting", seed, duration, parallelism=2, params={"timestamps": "send"}, **kw)
            rows.append(_row(label, "nesting (send times)", s))
        if ("drop" in label or "noise" in label) and "nesting" in algorithms:
            s = _scores("nesting", seed, duration, parallelism=2, params={"orphans": "drop"}, **kw)
            rows.append(_row(label, "nesting (orphans dropped)", s))
    return table(rows, HEAD)


def _latest_right(tr, granularity: str) -> tuple[float, float]:
    """The share of linked messages whose true cause is the latest arrival at their sender's node or
    thread (linking.link_groups), and of requests all of whose causes are (client untraced)."""
    import numpy as np
    import pandas as pd

    from analysis.paths.assemble import clocks, node_codes, positions_in_runs

    m, truth = tr.messages, tr.truth
    nodes = node_codes(m)
    groups, _, _ = linking.link_groups(m, nodes, granularity)
    t_out, _ = clocks(m)
    t_in = m["t_recv"].to_numpy(dtype=np.float64).copy()
    t_in[nodes.names[nodes.dst] == "client"] = np.nan
    arr = np.flatnonzero(~np.isnan(t_in))
    arr = arr[np.lexsort((t_in[arr], groups.dst[arr]))]
    pos, first = positions_in_runs(groups.dst[arr], t_in[arr], groups.src, t_out)
    latest = np.where(pos > first, arr[np.maximum(pos - 1, 0)], -1)
    linked = truth.cause >= 0
    right = np.where(linked, latest == truth.cause, True)
    whole = pd.Series(right).groupby(truth.request).all()
    return float(right[linked].mean()), float(whole[whole.index >= 0].mean())


THREAD_MODELS = (("pools of 16", 16), ("pools of 4", 4),
                 ("event loop at web", {"web1": 1, "web2": 1, "*": 16}))


def thread_granularity(duration: float, seed: int) -> str:
    rows = []
    for par in (1, 2, 4, 8, 16):
        for model, threads in THREAD_MODELS:
            tr = maketrace(web_service(), duration=duration, parallelism=par, seed=seed, tags=False,
                           threads=threads)
            runs = [("node", "node", {}), ("thread", "thread", {}), ("thread, k=0", "thread", {"k": 0})]
            for label, gran, extra in runs:
                if gran == "node" and model != THREAD_MODELS[0][0]:
                    continue            # the same messages whatever the thread model
                msg_ok, req_ok = _latest_right(tr, gran)
                result = linking.infer(tr.messages, untraced="client", granularity=gran, **extra)
                s = score(result, tr)
                rows.append([str(par), "-" if gran == "node" else model, label, f"{len(tr.messages):,}",
                             _pct(msg_ok), _pct(req_ok), _pct(s["pattern_recall"]),
                             _pct(s["pattern_precision"]), _pct(s["request_recall"]),
                             _num(s["delay_error_pct"])])
    return table(rows, ["parallelism", "threads", "linking per", "messages", "causes the latest arrival",
                        "requests all so", "common recall", "common precision", "requests found",
                        "delay error %"])


def thread_added_delay(duration: float, seed: int) -> str:
    """Slide 26's 200 ms at web2 (parallelism 2, fault in the middle third) with the thread model:
    the rise of web2's delay per link and the nodes ranked by their rise, per node and per thread."""
    rows = []
    for model, threads in (("-", None), *THREAD_MODELS[::2]):
        tr = maketrace(web_service(), duration=duration, parallelism=2, seed=seed, tags=False,
                       threads=threads, faults=[Fault("web2", 0.2, duration / 3, 2 * duration / 3)])
        for k in (4, 0):
            infer = partial(linking.infer, untraced="client", k=k)
            r = culprit_ranking(tr, infer).iloc[0]
            rank = list(r["ranking"])
            rows.append([model, "node" if threads is None else "thread", str(k), ", ".join(rank[:3]),
                         _num(1000 * r["rise_s"]) if rank and rank[0] == "web2" else "-"])
    return table(rows, ["threads", "linking per", "k", "rise ranking (top 3)", "web2's rise per link (ms)"])


def recency_ceiling(duration: float, seed: int) -> str:
    """What WAP5's monotone model can get right at best: per parallelism, the share of messages whose
    true cause is the latest arrival at their sender (the likeliest parent under the paper's model)
    and the share of requests all of whose messages' causes are, with the client untraced."""
    import numpy as np
    import pandas as pd

    from analysis.paths.assemble import clocks, node_codes, positions_in_runs

    rows = []
    for par in (1, 2, 4, 8, 16):
        tr = maketrace(web_service(), duration=duration, parallelism=par, seed=seed, tags=False)
        m, truth = tr.messages, tr.truth
        nodes = node_codes(m)
        t_out, _ = clocks(m)
        t_in = m["t_recv"].to_numpy(dtype=np.float64).copy()
        t_in[nodes.names[nodes.dst] == "client"] = np.nan
        arr = np.flatnonzero(~np.isnan(t_in))
        arr = arr[np.lexsort((t_in[arr], nodes.dst[arr]))]
        pos, first = positions_in_runs(nodes.dst[arr], t_in[arr], nodes.src, t_out)
        latest = np.where(pos > first, arr[np.maximum(pos - 1, 0)], -1)
        linked = truth.cause >= 0
        right = np.where(linked, latest == truth.cause, True)
        whole = pd.Series(right).groupby(truth.request).all()
        rows.append([str(par), f"{len(m):,}", _pct(float(right[linked].mean())),
                     _pct(float(whole[whole.index >= 0].mean()))])
    return table(rows, ["parallelism", "messages", "messages caused by the latest arrival",
                        "requests with every cause the latest arrival"])


SECTIONS = ("added", "parallelism", "others", "ceiling", "threads")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the seeds' accuracy results on Maketrace")
    ap.add_argument("--duration", type=float, default=300.0, help="trace length, s (default 300)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, help="also write the tables here (Markdown)")
    ap.add_argument("--sections", help=f"comma-separated, of {', '.join(SECTIONS)} (default: all)")
    args = ap.parse_args(argv)
    ap_sections = set(args.sections.split(",")) if args.sections else set(SECTIONS)
    algorithms = tuple(ALGORITHMS)
    parts = []
    if "added" in ap_sections:
        parts += ["### Slide 26: 200 ms added at web2 (Maketrace web service, parallelism 2, "
                  f"{args.duration:g} s, fault in the middle third)\n", added_delay(args.duration, args.seed)]
    if "parallelism" in ap_sections:
        parts += ["\n### Slide 29: accuracy against parallelism\n",
                  parallelism(args.duration, args.seed, algorithms)]
    if "others" in ap_sections:
        parts += ["\n### Slide 30: clock skew, drops, delay variance, noise (parallelism 2)\n",
                  others(args.duration, args.seed, algorithms)]
    if "ceiling" in ap_sections:
        parts += ["\n### Linking's ceiling: causes that are the latest arrival (client untraced)\n",
                  recency_ceiling(args.duration, args.seed)]
    if "threads" in ap_sections:
        parts += ["\n### Linking at thread granularity: thread pools and an event loop\n",
                  thread_granularity(args.duration, args.seed),
                  "\nThe 200 ms at web2 (slide 26's case) with threads:\n",
                  thread_added_delay(args.duration, args.seed)]
    text = "\n".join(parts) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
