"""Request accuracy of every black-box algorithm on traces nobody here made (issue 43; docs/blackbox.md,
"On the TraceWeaver artifact's traces"): the DeathStarBench traces published with TraceWeaver
(SIGCOMM'24), Jaeger JSON, 1000 traces per set, in its repository's data/ folder.

    .venv/bin/python bench/paths_artifact.py --data DIR [--apps hotel,node,media] [--loads 25,50]
        [--algorithms all] [--out FILE] [--jobs N]

DIR is the artifact's data/ (fetch its repository: `git clone` it, or a snapshot; nothing of it is
kept in this repository). Per application and load: the spans, the import's time, and per algorithm
the share of requests whose whole inferred tree is the true one (accuracy.request_scores), the
mapping accuracy, and its time per million spans. Then the throughput of import and all algorithms
together in spans per second, beside a baseline measured in the same run: Python's json.loads of the
same files (what reading them costs at the least), as a ratio; and the import's own decode alone
(the files read and decoded by its msgspec fast path's typed decoder, no span handled: the floor of
this import), as the decode-bound ratio. Each in wall time and in CPU time (this process's and its
--jobs workers', the last line): on a machine shared with other work the wall-time ratio moves with the others' load
between the baseline's measurement and the algorithms', the CPU-time one hardly. Last, each part's
CPU seconds (the import, each algorithm) and the throughput without traceweaver's share. With
`--jobs N` the algorithms run at once in N forked workers after each import (as `nestlab paths
--jobs N`): the wall time is then what a user waits for on N free cores, the CPU time the work
done, a little more than one after another (the forks, the results pickled back).

Development sets (tuned on): hotel and node at loads 25 and 50. The others are the held-back check.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from analysis.paths.accuracy import request_scores  # noqa: E402
from analysis.paths.algorithms import ALGORITHMS, algorithm  # noqa: E402
from analysis.paths.parallel import COST, run_tasks  # noqa: E402
from analysis.paths.spans import _DECODER, read_jaeger  # noqa: E402

APPS = {"hotel": "hotel_reservation/hotel_load{}", "node": "nodejs_microservices/node_load{}",
        "media": "media_microservices/media_load{}"}
DEV = {("hotel", 25), ("hotel", 50), ("node", 25), ("node", 50)}


def _cpu() -> float:
    """CPU seconds of this process and of its reaped children (the --jobs workers)."""
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime


class Clock:
    """Wall and CPU (this process's, and its --jobs workers') seconds since it was made: on a shared
    machine the CPU time is what the others' load does not inflate (or hardly: caches and memory are
    shared)."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), _cpu()

    def took(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, _cpu() - self.cpu


def baseline(folder: Path) -> tuple[float, float]:
    c = Clock()
    for f in sorted(folder.glob("*.json")):
        json.loads(f.read_bytes())
    return c.took()


def decode_floor(folder: Path) -> tuple[float, float]:
    """Seconds (wall, CPU) to read the files and decode them with the import's typed decoder, nothing more."""
    c = Clock()
    for f in sorted(folder.glob("*.json")):
        _DECODER.decode(f.read_bytes())
    return c.took()


def _timed(infer, messages) -> tuple:
    c = Clock()
    result = infer(messages)
    return (result, *c.took())


def one(folder: Path, names: list[str], jobs: int = 1) -> dict:
    """Import, then the algorithms: one after another (jobs 1), or in `jobs` forked workers at once
    (parallel.run_tasks, as `nestlab paths --jobs`): then the phase's wall and CPU time (this
    process's and the workers') are the algorithms' together, and each algorithm's own is its
    worker's. The request scores are taken afterwards, outside the times."""
    c = Clock()
    trace = read_jaeger(folder)
    t_import, cpu_import = c.took()
    spans = int((trace.messages["kind"].astype(str) == "call").sum())   # a span per call (in-service spans aside)
    row = {"messages": len(trace.messages), "calls": spans, "import_s": t_import, "import_cpu": cpu_import,
           "algorithms": {}}
    c = Clock()
    done, _ = run_tasks([partial(_timed, algorithm(n)[0], trace.messages) for n in names], jobs,
                        [COST.get(n, 1.0) for n in names])
    row["phase_s"], row["phase_cpu"] = c.took()
    for name, (result, took, cpu) in zip(names, done, strict=True):
        row["algorithms"][name] = {**request_scores(result, trace), "seconds": took, "cpu": cpu}
    return row


def span_count(folder: Path) -> int:
    return sum(len(t.get("spans", ())) for f in sorted(folder.glob("*.json"))
               for t in json.loads(f.read_bytes()).get("data", ()))


def set_arguments(ap: argparse.ArgumentParser) -> None:
    """The options naming the artifact's sets and the algorithms (this bench's and paths_sets.py's)."""
    ap.add_argument("--data", type=Path, required=True, help="the artifact's data/ folder")
    ap.add_argument("--apps", default="hotel,node,media")
    ap.add_argument("--loads", default="25,50,75,100,125,150")
    ap.add_argument("--algorithms", default="all")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    set_arguments(ap)
    ap.add_argument("--out", type=Path, help="also write the Markdown table here")
    ap.add_argument("--jobs", type=int, default=1,
                    help="algorithms at once, in forked workers after each import (nestlab paths --jobs; 1)")
    a = ap.parse_args(argv)
    names = list(ALGORITHMS) if a.algorithms == "all" else a.algorithms.split(",")
    head = ["set", "spans", "import s", *[f"{n} %" for n in names], *[f"{n} s/M" for n in names]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    # request accuracy in the scope TraceWeaver's artifact scores (accuracy.call_accuracy)
    scope = ["| " + " | ".join(["set", *[f"{n} %" for n in names]]) + " |", "|" + "---|" * (len(names) + 1)]
    tot_spans = tot_time = tot_base = tot_floor = tot_import = 0.0
    cpu = {"time": 0.0, "base": 0.0, "floor": 0.0, "import": 0.0}
    cpu_of = dict.fromkeys(names, 0.0)          # per algorithm, CPU s over the sets
    for app in a.apps.split(","):
        for load in (int(x) for x in a.loads.split(",")):
            folder = a.data / APPS[app].format(load)
            if not folder.is_dir():
                print(f"{folder}: missing; skipped", file=sys.stderr)
                continue
            n_spans = span_count(folder)
            base, base_cpu = baseline(folder)
            floor, floor_cpu = decode_floor(folder)
            row = one(folder, names, a.jobs)
            algos = row["algorithms"]
            took = row["import_s"] + row["phase_s"]
            cpu["time"] += row["import_cpu"] + row["phase_cpu"]
            cpu["base"] += base_cpu
            cpu["floor"] += floor_cpu
            cpu["import"] += row["import_cpu"]
            for n in names:
                cpu_of[n] += algos[n]["cpu"]
            tot_spans, tot_time, tot_base = tot_spans + n_spans, tot_time + took, tot_base + base
            tot_floor, tot_import = tot_floor + floor, tot_import + row["import_s"]
            label = f"{app} {load}" + (" (dev)" if (app, load) in DEV else "")
            acc = [f"{100 * algos[n]['request_accuracy']:.1f}" if algos[n]["request_accuracy"] == algos[n]["request_accuracy"]
                   else "–" for n in names]
            per_m = [f"{algos[n]['seconds'] / n_spans * 1e6:.0f}" for n in names]
            lines.append("| " + " | ".join([label, f"{n_spans:,}", f"{row['import_s']:.2f}", *acc, *per_m]) + " |")
            print(lines[-1], flush=True)
            calls = [f"{100 * algos[n]['call_accuracy']:.1f}" if algos[n]["call_accuracy"] == algos[n]["call_accuracy"]
                     else "–" for n in names]
            scope.append("| " + " | ".join([label, *calls]) + " |")
    text = "\n".join(lines)
    if len(scope) > 2:
        text += "\n\nrequest accuracy in the artifact's scope (call_accuracy: calls only, at services called " \
                "from one service alone):\n\n" + "\n".join(scope)
    if tot_time:
        text += (f"\n\nimport and {len(names)} algorithms: {tot_spans:,.0f} spans in {tot_time:.1f} s = "
                 f"{tot_spans / tot_time:,.0f} spans/s; baseline (json.loads of the same files): "
                 f"{tot_spans / tot_base:,.0f} spans/s; ratio {tot_base / tot_time:.3f}\n"
                 f"import alone: {tot_spans / tot_import:,.0f} spans/s; its decode alone (read + msgspec "
                 f"typed decode): {tot_spans / tot_floor:,.0f} spans/s; decode-bound ratio (decode / import "
                 f"and all algorithms) {tot_floor / tot_time:.3f}, (decode / import) {tot_floor / tot_import:.3f}\n"
                 f"in CPU time (this process's and its workers'; what a shared machine's load hardly changes): import and "
                 f"{len(names)} algorithms {tot_spans / cpu['time']:,.0f} spans/s; baseline {tot_spans / cpu['base']:,.0f} "
                 f"spans/s; ratio {cpu['base'] / cpu['time']:.3f}; import alone {tot_spans / cpu['import']:,.0f} spans/s; "
                 f"decode alone {tot_spans / cpu['floor']:,.0f} spans/s\n"
                 f"CPU s: import {cpu['import']:.2f}, " + ", ".join(f"{n} {cpu_of[n]:.2f}" for n in names)
                 + f" (of {cpu['time']:.2f}); "
                 + " ".join(f"without {n}: {tot_spans / (cpu['time'] - cpu_of[n]):,.0f} spans/s;" for n in names
                            if n == "traceweaver"))
    if tot_time:
        text += (f"\njobs {a.jobs} on cores {sorted(os.sched_getaffinity(0))} of {os.cpu_count()}; "
                 f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
