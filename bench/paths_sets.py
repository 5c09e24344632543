"""Throughput of `nestlab paths` over several trace sets in one command (issue 43): the TraceWeaver
artifact's sets given at once (`--jaeger SET...`), every algorithm, with `--jobs 1` (one set after
another, in the process) and `--jobs N` (each set imported and analysed whole in a forked worker).

    .venv/bin/python bench/paths_sets.py --data DIR [--jobs 2] [--rounds 3] [--algorithms all]

Each round runs the command as a user would (a fresh `python -m nestlab.cli paths ... --no-score
--top 0`, its output to a scratch directory), `--jobs 1` and `--jobs N` interleaved, then the
baseline of the same round: Python's json.loads of the same files in this process. Per run the wall
time (what the user waits for) and the CPU time (the command's and its workers', from the children's
rusage: what a shared machine's load hardly changes), each as spans per second and as a ratio to the
baseline's (json.loads on one core: a ratio above 1 with N jobs is the cores' doing). Then the
medians over the rounds, the cores the command may use and the load average. The command's start-up
(Python, pandas, the project's imports; about 0.5 s) and writing paths.csv are inside its times.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.paths_artifact import APPS, set_arguments, span_count  # noqa: E402


def _children_cpu() -> float:
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return c.ru_utime + c.ru_stime


def command(sets: list[Path], jobs: int, algorithms: str, out: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one `nestlab paths` over the sets (its workers' CPU counted: they are reaped
    by the command, and it by us)."""
    argv = [sys.executable, "-m", "nestlab.cli", "paths", "--jaeger", *map(str, sets), "-a", algorithms,
            "--jobs", str(jobs), "--no-score", "--top", "0", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cpu, wall = _children_cpu(), time.perf_counter()
    r = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - wall, _children_cpu() - cpu
    if r.returncode:
        raise SystemExit(f"nestlab paths failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    return took


def baseline(sets: list[Path]) -> tuple[float, float]:
    """(wall s, CPU s) of json.loads of every file of the sets, here, one after another."""
    cpu, wall = time.process_time(), time.perf_counter()
    for folder in sets:
        for f in sorted(folder.glob("*.json")):
            json.loads(f.read_bytes())
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    set_arguments(ap)
    ap.add_argument("--jobs", type=int, default=2, help="the parallel runs' --jobs (2)")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    sets = [a.data / APPS[app].format(load) for app in a.apps.split(",") for load in map(int, a.loads.split(","))]
    sets = [s for s in sets if s.is_dir()]
    if not sets:
        raise SystemExit(f"{a.data}: none of the artifact's sets found")
    spans = sum(span_count(s) for s in sets)
    runs: dict[str, list[tuple[float, float]]] = {"json.loads": [], "jobs 1": [], f"jobs {a.jobs}": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for jobs in (1, a.jobs):
                runs[f"jobs {jobs}"].append(command(sets, jobs, a.algorithms, Path(tmp)))
            runs["json.loads"].append(baseline(sets))
            print(f"round {r + 1}: " + "; ".join(f"{k} wall {v[-1][0]:.2f} s, CPU {v[-1][1]:.2f} s"
                                                for k, v in runs.items()), flush=True)
    base_wall = statistics.median(w for w, _ in runs["json.loads"])
    base_cpu = statistics.median(c for _, c in runs["json.loads"])
    print(f"\n{len(sets)} sets, {spans:,} spans, `nestlab paths --jaeger SETS -a {a.algorithms} --no-score`, "
          f"medians of {a.rounds} rounds:")
    for name, got in runs.items():
        wall, cpu = statistics.median(w for w, _ in got), statistics.median(c for _, c in got)
        print(f"  {name:>10}: wall {wall:6.2f} s = {spans / wall:9,.0f} spans/s (ratio to json.loads "
              f"{base_wall / wall:.3f}); CPU {cpu:6.2f} s = {spans / cpu:9,.0f} spans/s (ratio {base_cpu / cpu:.3f})")
    print(f"cores this process may use: {sorted(os.sched_getaffinity(0))} of {os.cpu_count()}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
