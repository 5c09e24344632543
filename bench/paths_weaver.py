"""The TraceWeaver-class reconstruction's own speed on the TraceWeaver artifact's traces (issue 43;
docs/blackbox.md, "The joint choice"): CPU time of `weaver.infer` as it is against the same code
without its joint choice (`joint_rounds=0`, the per-callee assignment alone: the baseline, measured
in the same run on the same imported traces) and without its whole-request term (`cross_rounds=0`,
the joint choice alone), in spans per second and as ratios, with each one's request accuracy.

    .venv/bin/python bench/paths_weaver.py --data DIR [--apps hotel,node,media] [--loads 25,50]
        [--repeat 3]

DIR is the artifact's data/ (bench/paths_artifact.py says where to get it). Each set is read once;
the two variants then run `--repeat` times, interleaved, and the median is printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from analysis.paths import weaver  # noqa: E402
from analysis.paths.accuracy import request_scores  # noqa: E402
from analysis.paths.spans import read_jaeger  # noqa: E402
from bench.paths_artifact import APPS, span_count  # noqa: E402

VARIANTS = {"per-callee (joint_rounds=0)": {"joint_rounds": 0},
            "joint choice alone (cross_rounds=0)": {"cross_rounds": 0},
            "as it is (joint choice and whole-request term)": {}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="the artifact's data/ folder")
    ap.add_argument("--apps", default="hotel,node,media")
    ap.add_argument("--loads", default="25,50,75,100,125,150")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    sets = []
    for app in a.apps.split(","):
        for load in (int(x) for x in a.loads.split(",")):
            folder = a.data / APPS[app].format(load)
            if folder.is_dir():
                sets.append((f"{app} {load}", span_count(folder), read_jaeger(folder)))
            else:
                print(f"{folder}: missing; skipped", file=sys.stderr)
    if not sets:
        print("no artifact sets found under --data", file=sys.stderr)
        return 2
    spans = sum(n for _, n, _ in sets)
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    acc: dict[str, dict[str, float]] = {v: {} for v in VARIANTS}
    for _ in range(max(1, a.repeat)):
        for name, params in VARIANTS.items():
            total = 0.0
            for label, _, trace in sets:
                t0 = time.process_time()
                result = weaver.infer(trace.messages, **params)
                total += time.process_time() - t0
                acc[name][label] = request_scores(result, trace)["request_accuracy"]
            cpu[name].append(total)
    print("| set | " + " | ".join(f"{v} %" for v in VARIANTS) + " |")
    print("|---|" + "---|" * len(VARIANTS))
    for label, _, _ in sets:
        print(f"| {label} | " + " | ".join(f"{100 * acc[v][label]:.1f}" for v in VARIANTS) + " |")
    base, joint, full = (statistics.median(cpu[v]) for v in VARIANTS)
    print(f"\n{spans:,} spans, CPU time (median of {len(cpu[next(iter(VARIANTS))])}):")
    for v in VARIANTS:
        m = statistics.median(cpu[v])
        print(f"  {v}: {m:.2f} s = {spans / m:,.0f} spans/s ({', '.join(f'{x:.2f}' for x in cpu[v])} s)")
    print(f"ratio (per-callee time / joint choice alone): {base / joint:.3f}; "
          f"(per-callee time / as it is): {base / full:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
