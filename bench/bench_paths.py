"""The seeds' running-time table (blackbox-debugging-slides.txt slide 28; wap5-paper.txt 5.3/6.5)
beside ours (issue 31, item 6):

    .venv/bin/python bench/bench_paths.py [--quick] [--only nesting|convolution|linking]

Traces are Maketrace's web-service simulation (analysis/paths/maketrace.py, web_service(), seed 1),
sized to the seeds' traces: nesting on 20k, 200k and 2M messages (the slides' multi-tier traces: 50,
500, 5,000 s); convolution at a 20 ms step on a 234k-message trace of 2,000 s (the slides' PetStore
trace) and on a one-hour trace (issue 31's target: <= 60 s); linking on a one-hour trace of CoDeeN's
size (4.7M messages; WAP5: five to ten minutes). The parallelism is whatever gives the seeds'
message count in the seeds' duration. Linking reads no tags and is told that the one client is
untraced (WAP5's clients were: their requests arrive from outside). Linking at k=4 also runs on a
300k-message trace twice, with its try-both instances built in numpy and walked in Python (the
implementation before, `linking.VECTORISED = False`; the same results), and the ratio is printed.
`--case TEXT` runs only the cases whose label contains TEXT.

Each case runs in a child process (a fresh interpreter, so peak memory is the case's own): the trace
is generated, then timed in that process are the baseline (`model.as_messages` of the trace's rows
in random order: the copy, dtypes and sort by send time that reading a trace costs) and the algorithm (CPU time,
`time.process_time`, as the slides report, and wall time). Peak memory: the rise of the child's peak
RSS (getrusage) over its RSS just before the algorithm started, i.e. what the algorithm needed on top
of the loaded trace. Messages per CPU second and the ratio to the baseline are printed; the targets
(nesting and linking >= 1 M messages/s, convolution of an hour <= 60 s) are checked and misses said.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# (algorithm, label, messages, duration s, theirs: CPU, memory, params)
CASES = [
    ("nesting", "multi-tier (short)", 20_164, 50, "0.23 s", "1.5 MB", {}),
    ("nesting", "multi-tier", 202_520, 500, "2.27 s", "13.8 MB", {}),
    ("nesting", "multi-tier (long)", 2_026_658, 5000, "23.97 s", "136.8 MB", {}),
    ("convolution", "PetStore-sized, 20 ms", 234_036, 2000, "6,301 s", "25.0 MB", {"step": 0.02}),
    ("convolution", "one hour, 20 ms", 1_000_000, 3600, "1-4 h (WAP5)", "< 1 MB", {"step": 0.02}),
    ("linking", "CoDeeN-sized, k=0", 4_702_865, 3600, "-", "-", {"k": 0, "untraced": "client"}),
    # the same messages with Maketrace's thread model on (pools of 16): linking per thread
    ("linking", "CoDeeN-sized, k=0, threads", 4_702_865, 3600, "-", "-",
     {"k": 0, "untraced": "client", "threads": 16}),
    ("linking", "CoDeeN-sized (1 h)", 4_702_865, 3600, "5-10 min (WAP5)", "O(n)", {"untraced": "client"}),
    # the try-both instances built in numpy against the walk in Python they replaced, same trace
    ("linking", "300k, k=4", 300_000, 230, "-", "-", {"untraced": "client"}),
    ("linking", "300k, k=4, walked", 300_000, 230, "-", "-", {"untraced": "client", "vectorised": False}),
]
QUICK = {"multi-tier (long)": 400_000, "CoDeeN-sized (1 h)": 300_000, "CoDeeN-sized, k=0": 300_000,
         "CoDeeN-sized, k=0, threads": 300_000,
         "one hour, 20 ms": 300_000}
MSGS_PER_S_TARGET = 1e6
CONV_HOUR_TARGET_S = 60.0


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def child(algorithm: str, messages: int, duration: float, params: dict) -> dict:
    """In the child: generate, baseline, algorithm; the figures."""
    import importlib

    sys.path.insert(0, str(REPO))
    from analysis.paths.maketrace import maketrace, web_service

    probe = maketrace(web_service(), duration=20.0, parallelism=4, seed=1)
    per_s = len(probe.messages) / 20.0
    par = 4 * messages / max(per_s * duration, 1)
    params = dict(params)
    trace = maketrace(web_service(), duration=duration, parallelism=par, seed=1,
                      tags=algorithm == "nesting", threads=params.pop("threads", None))
    m = trace.messages
    del probe, trace
    from analysis.paths.model import as_messages

    shuffled = m.sample(frac=1.0, random_state=1)
    t0 = time.process_time()
    as_messages(shuffled)
    baseline = time.process_time() - t0
    del shuffled
    module = importlib.import_module(f"analysis.paths.{algorithm}")
    infer = module.infer
    if "vectorised" in params:      # linking: the instances walked in Python (the implementation before)
        module.VECTORISED = params.pop("vectorised")
    rss0 = _rss_mb()
    w0, c0 = time.perf_counter(), time.process_time()
    result = infer(m, **params)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"messages": len(m), "duration": duration, "parallelism": par, "baseline_s": baseline,
            "cpu_s": cpu, "wall_s": wall, "peak_mb": peak - rss0, "patterns": len(result.patterns)}


def run_case(algorithm: str, messages: int, duration: float, params: dict) -> dict:
    code = (f"import json, sys; sys.path.insert(0, {str(REPO / 'bench')!r}); "
            f"from bench_paths import child; "
            f"print(json.dumps(child({algorithm!r}, {messages}, {duration}, {params!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    if out.returncode:
        raise SystemExit(f"bench_paths: {algorithm} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the seeds' running-time table beside ours")
    ap.add_argument("--quick", action="store_true", help="smaller large cases (a smoke run)")
    ap.add_argument("--only", choices=("nesting", "convolution", "linking"))
    ap.add_argument("--case", metavar="TEXT", help="only the cases whose label contains TEXT (e.g. 'k=0')")
    args = ap.parse_args(argv)
    header = (f"{'algorithm':<12} {'trace':<22} {'messages':>10} {'dur s':>6} {'theirs CPU':>16} "
              f"{'theirs mem':>10} {'CPU s':>7} {'wall s':>7} {'peak MB':>8} {'M msg/s':>7} "
              f"{'read s':>7} {'x read':>7}")
    print(header)
    print("-" * len(header))
    misses = []
    cpu_of = {}
    for algorithm, label, messages, duration, cpu_theirs, mem_theirs, params in CASES:
        if args.only and algorithm != args.only or args.case and args.case not in label:
            continue
        n = QUICK.get(label, messages) if args.quick else messages
        dur = duration * n / messages
        r = run_case(algorithm, n, dur, params)
        rate = r["messages"] / r["cpu_s"] / 1e6 if r["cpu_s"] > 0 else float("inf")
        cpu_of[label] = r["cpu_s"]
        print(f"{algorithm:<12} {label:<22} {r['messages']:>10,} {r['duration']:>6.0f} {cpu_theirs:>16} "
              f"{mem_theirs:>10} {r['cpu_s']:>7.2f} {r['wall_s']:>7.2f} {r['peak_mb']:>8.1f} "
              f"{rate:>7.2f} {r['baseline_s']:>7.3f} {r['cpu_s'] / max(r['baseline_s'], 1e-9):>7.1f}",
              flush=True)
        if algorithm in ("nesting", "linking") and "300k" not in label and rate < MSGS_PER_S_TARGET / 1e6:
            misses.append(f"{algorithm} ({label}): {rate:.2f} M messages/s < 1 M/s")
        if algorithm == "convolution" and "hour" in label and r["cpu_s"] > CONV_HOUR_TARGET_S:
            misses.append(f"convolution of one hour at 20 ms: {r['cpu_s']:.1f} s > 60 s")
    if "300k, k=4" in cpu_of and "300k, k=4, walked" in cpu_of:
        print(f"\nlinking's try-both instances in numpy: {cpu_of['300k, k=4, walked'] / cpu_of['300k, k=4']:.1f}x "
              "faster than walked in Python (same trace, same results)")
    print()
    print("targets: " + ("all met" if not misses else "missed: " + "; ".join(misses)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
