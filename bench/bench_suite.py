"""Many runs at once: the thesis suite at --scale 15, synthesised, compared over 5 variants, one run
after the other (--jobs 1, the baseline) vs on every core (--jobs N).

    .venv/bin/python bench/bench_suite.py [--minutes 15] [--jobs N] [--fresh] [--runs 24]

The suite is 24 synthetic runs (tests/support/synthetic.py: ~100 modules, 100 ms snapshots, churn,
glitches) with the experiment names and fault groups of experiments/thesis-3.3.yaml: control (no
fault rows), app (app_pause of the first application, at the windows its counters pause), tcp
(tcp_drop of the first connection, at its own silent windows) and ip (ip_drop of the interface, at
the network-wide silences), each run its own seed, and the (module, seq) index of the counters the runner makes when a
recording ends. It sits with a suite index in
<tmp>/nestlab-bench-suite-<minutes>min/thesis-3.3-x15/ and is made again only with --fresh.

Each side is `nestlab compare SUITE --variant ...` (5 variants) in a process of its own, timed from
its start to its files written, after one untimed-for-the-ratio pass over every run (`nestlab accuracy
--jobs N`, printed as the first read: whatever a reader caches on a run's first read, both sides
find made). The machine's load average is printed beside the figures (other work on the two cores
slows the parallel side most), and each side's CPU time (the command, its fork server and workers):
divided by the processes, it is the wall time the side takes on cores of its own. The peak RSS is
that of the process tree (sampled every 20 ms from /proc, like the CPU time) and of the largest
single process; the files of the two sides must be the same, byte for byte. Target (issue 23): under 30 s on every core here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing import Pool
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from harness.suite import load_suite  # noqa: E402
from rundir.db import connect, ensure_indexes  # noqa: E402
from rundir.layout import RunDir  # noqa: E402
from tests.support.synthetic import _periods, synthetic_run  # noqa: E402

VARIANTS = ["flowdiagnoser:theta=2", "flowdiagnoser:theta=1", "flowdiagnoser:theta=3", "nest-cf", "nest-cf:anw=off"]
INTERVAL = 0.1
TARGET_S = 30.0


def _spans(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of True."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


def _fault_windows(seed: int, s: int, churn: int) -> dict[str, list[tuple[int, int]]]:
    """The synthetic run's own silent windows, drawn again from its seed in the order synthetic_run
    draws them: the network-wide silences, the first application's pauses, the first connection's."""
    rng = np.random.default_rng(seed)
    net = _periods(rng, s, every=int(45 / INTERVAL), length=int(2 / INTERVAL))
    pause = _periods(rng, s, every=int(120 / INTERVAL), length=int(3 / INTERVAL))
    died = min(s, churn + int(rng.integers(0, churn)))
    rng.integers(0, 2)
    conn = _periods(rng, died, every=int(90 / INTERVAL), length=int(1.5 / INTERVAL))
    return {"ip": _spans(net), "app": _spans(pause), "tcp": _spans(conn)}


def make_run(args: tuple[Path, str, int, float]) -> Path:
    """One synthetic run of the suite with the fault rows of its group."""
    path, name, seed, seconds = args
    synthetic_run(path, seconds=seconds, seed=seed)
    s = int(round(seconds / INTERVAL))
    group = name.split("-")[0]
    windows = _fault_windows(seed, s, int(60 / INTERVAL)).get(group, [])
    kind, target, key = {"ip": ("ip_drop", 1, "ipeth:1"), "app": ("app_pause", 2, "app:2"),
                         "tcp": ("tcp_drop", 4, "tcp:4")}.get(group, (None, None, None))
    rd = RunDir.open(path)
    conn = connect(rd.db)
    conn.executemany("INSERT INTO faults (spec_index, kind, at_node, target_module, target, planned_start, "
                     "planned_duration, start, \"end\", rule) VALUES (0, ?, 'x1', ?, ?, ?, ?, ?, ?, 'synthetic')",
                     [(kind, target, json.dumps({"module_key": key}), a * INTERVAL, (b - a) * INTERVAL,
                       1000.0 + a * INTERVAL, 1000.0 + b * INTERVAL) for a, b in windows])
    ensure_indexes(conn)   # as the runner does when the recording ends
    conn.commit()
    conn.close()
    rd.manifest.update(experiment=name, repetition=0, seed=seed)
    rd.manifest_path.write_text(json.dumps(rd.manifest) + "\n")
    return path


def make_suite(root: Path, minutes: float, runs: int, jobs: int) -> Path:
    suite = load_suite(REPO / "experiments" / "thesis-3.3.yaml", scale=15)
    base = root / suite.dir_name
    todo = [(base / exp.spec.name / "20260101-000000-r0", exp.spec.name, exp.seed_for(0), minutes * 60)
            for exp, _ in suite.planned()[:runs]]
    t0 = time.perf_counter()
    with Pool(jobs) as pool:
        pool.map(make_run, todo, chunksize=1)
    (base / "suite.json").write_text(json.dumps({
        "suite": suite.name, "scale": 15, "state": "complete", "synthetic": True,
        "runs": [{"experiment": name, "repetition": 0, "seed": seed, "run": str(p.relative_to(base)),
                  "status": "complete", "position": i} for i, (p, name, seed, _) in enumerate(todo)]}, indent=1))
    print(f"synthesised {len(todo)} runs of {minutes:g} min in {time.perf_counter() - t0:.0f} s: {base}")
    return base


def _tree(pid: int) -> dict[int, tuple[int, float]]:
    """pid and its descendants (the command, its fork server and workers): pid -> (VmRSS kB, CPU s)."""
    children: dict[int, list[int]] = {}
    info: dict[int, tuple[int, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/status") as f:
                kb = next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(d))
        info[int(d)] = (kb, (int(fields[11]) + int(fields[12])) / tick)   # utime + stime
    todo, out = [pid], {}
    while todo:
        p = todo.pop()
        out[p] = info.get(p, (0, 0.0))
        todo += children.get(p, [])
    return out


def measure(suite: Path, jobs: int, out: Path, variants=VARIANTS,
            command: str = "compare") -> tuple[float, int, int, float]:
    """(wall s, peak RSS of the tree in MB, of the largest process in MB, CPU s of the tree) of one
    compare, sampled every 20 ms from /proc (the workers are the fork server's children, not the
    command's: their CPU time is the last sample of each). The CPU time divided by the processes is
    the wall time the side would take on cores of its own: the figure that holds when other work
    shares the machine."""
    cmd = [str(REPO / ".venv" / "bin" / "nestlab"), command, str(suite), "--jobs", str(jobs), "--out", str(out)]
    for v in variants:
        cmd += ["--variant", v]
    peak = [0, 0]
    cpu: dict[int, float] = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    done = threading.Event()

    def sample():
        while not done.is_set():
            tree = _tree(proc.pid)
            peak[0] = max(peak[0], sum(kb for kb, _ in tree.values()))
            peak[1] = max(peak[1], max((kb for kb, _ in tree.values()), default=0))
            for p, (_, c) in tree.items():
                cpu[p] = max(cpu.get(p, 0.0), c)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"nestlab compare failed ({proc.returncode}): {err.strip()[-2000:]}")
    return wall, peak[0] // 1024, peak[1] // 1024, sum(cpu.values())


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv=None) -> int:
    cores = len(os.sched_getaffinity(0))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=15)
    ap.add_argument("--runs", type=int, default=24, help="the suite's first N runs (default all 24)")
    ap.add_argument("--jobs", type=int, default=cores, help=f"the parallel side's processes (default {cores})")
    ap.add_argument("--fresh", action="store_true", help="synthesise the suite again")
    ap.add_argument("--skip-serial", action="store_true", help="measure the parallel side only")
    a = ap.parse_args(argv)

    root = Path(tempfile.gettempdir()) / f"nestlab-bench-suite-{a.minutes:g}min"
    suite = root / "thesis-3.3-x15"
    index = suite / "suite.json"
    if a.fresh or not index.is_file() or len(json.loads(index.read_text())["runs"]) != a.runs:
        suite = make_suite(root, a.minutes, a.runs, cores)
    for db in sorted(suite.glob("*/*/run.db")):   # suites synthesised before the bench made the index
        conn = connect(db)
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'counters_module'").fetchone():
            ensure_indexes(conn)
            conn.commit()
        conn.close()
    print(f"suite: {a.runs} synthetic runs of {a.minutes:g} min ({suite}); variants: {', '.join(VARIANTS)}; "
          f"{cores} cores")
    out = Path(tempfile.mkdtemp(prefix="nestlab-bench-suite-out-"))
    first = measure(suite, a.jobs, out / "first", VARIANTS[:1], "accuracy")
    print(f"first read (accuracy, 1 variant, --jobs {a.jobs}): {first[0]:.1f} s; load average {_load()}")
    par = measure(suite, a.jobs, out / "parallel")
    print(f"parallel (--jobs {a.jobs}): {par[0]:6.1f} s, peak RSS {par[1]:,} MB in all, {par[2]:,} MB the largest "
          f"process; CPU {par[3]:.1f} s = {par[3] / a.jobs:.1f} s on {a.jobs} cores of its own; target < {TARGET_S:g} s: "
          f"{'met' if par[0] < TARGET_S else 'NOT met'}; load average {_load()}")
    if a.skip_serial:
        return 0
    ser = measure(suite, 1, out / "serial")
    print(f"serial   (--jobs 1): {ser[0]:6.1f} s, peak RSS {ser[1]:,} MB; CPU {ser[3]:.1f} s; load average {_load()}")
    same = sorted(p.name for p in (out / "serial").iterdir()) == sorted(p.name for p in (out / "parallel").iterdir()) \
        and all((out / "serial" / p.name).read_bytes() == (out / "parallel" / p.name).read_bytes()
                for p in (out / "serial").iterdir())
    print(f"ratio serial/parallel: {ser[0] / par[0]:.2f}x on {a.jobs} processes; per run: "
          f"{ser[0] / a.runs:.2f} s serial, {par[0] / a.runs:.2f} s of wall time in parallel; "
          f"files {'identical' if same else 'DIFFER'} ({out})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
