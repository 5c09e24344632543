"""Cost of the LD_PRELOAD interceptor on the hot path: one-byte send() calls on loopback.

    .venv/bin/python bench/bench_interceptor.py [--calls 300000] [--rounds 11] [--kinds eagain,tcp,unix]
                                                [--instructions] [--before OLD.so] [--no-timing]

Builds the library (make) and tests/interceptor/nestprobe.c (gcc, into a temporary directory), then
runs `nestprobe bench N KIND` without the library (baseline), with the library but no NESTLAB_SHM_DIR
(inert) and with it counting (active), interleaved, `rounds` times each. Each run makes N one-byte
send() calls and reports ns per call:

- eagain: on a full Unix socketpair with MSG_DONTWAIT, every call fails at once with EAGAIN. A real
  socket system call with no peer activity: the steadiest measure of what the library adds (the
  interceptor does the same work as on a successful send: two clock reads, two seqlock updates).
- unix:   on a Unix socketpair, a thread draining the other end.
- tcp:    on a loopback TCP connection, a thread draining the other end.

eagain runs an application at more than a million socket calls a second (each line gives the rate):
the interceptor's cost per call at that rate.

The sender runs on CPU 0 and the drain thread on CPU 1 (when there are two). Loopback sends with a
live reader vary by hundreds of ns from run to run on a small VM, so the added cost is the median of
the per-round differences (active - baseline), with their interquartile range. Target: <= 100 ns.

--instructions: user-space instructions per call counted by callgrind (valgrind), which no other load
moves, for bench/trace_calls.c's pairs (two calls an iteration: eagain, poll, write/read, ...) under the
library counting; --before OLD.so adds the same count for an earlier build of the library (a copy
kept before a change), so that a change's cost is measured in one run: "now - before" per call, and
times it beside the others (variant "before", counting like "active").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.interceptor import build, create_shm_dir, preload_env, remove_shm_dir  # noqa: E402

TARGET_NS = 100.0
LABELS = {"eagain": "send() failing with EAGAIN on a full Unix socketpair",
          "unix": "send() on a Unix socketpair, drained by a thread",
          "tcp": "send() on a loopback TCP connection, drained by a thread"}


def run(probe: Path, calls: int, kind: str, env: dict, cpus: tuple[int, int]) -> float:
    r = subprocess.run([str(probe), "bench", str(calls), kind, str(cpus[0]), str(cpus[1])], env=env,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"nestprobe failed ({r.returncode}): {r.stderr.strip()}")
    line = next(x for x in r.stdout.splitlines() if x.startswith("BENCH "))
    return json.loads(line[6:])["ns_per_call"]


INSN_PAIRS = ("eagain", "poll", "write/read", "send/recv", "sendmsg/recvmsg", "writev/readv")


def instructions(exe: Path, pair: str, env: dict) -> float:
    """User-space instructions per call (callgrind's Ir): the difference of two runs of different
    lengths, so that the program's start and end cancel out (2 rounds a run, 2 calls an iteration)."""
    counts = []
    for n in (1000, 3000):
        r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", str(exe), pair, str(n),
                            "1", "0"], env=env, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise SystemExit(f"valgrind trace_calls {pair} failed ({r.returncode}): {r.stderr.strip()[-300:]}")
        counts.append(int(next(x for x in r.stderr.splitlines() if "Collected" in x).split(":")[1]))
    return (counts[1] - counts[0]) / (2 * 2000 * 2)


def instruction_table(tmp: Path, envs: dict, before: Path | None) -> None:
    exe = tmp / "trace_calls"
    subprocess.run(["gcc", "-O2", "-I", str(REPO / "harness/interceptor"), "-o", str(exe),
                    str(REPO / "bench/trace_calls.c")], check=True)
    variants = {"baseline": envs["baseline"], "now": envs["active"]}
    if before is not None:
        variants["before"] = {**envs["active"], "LD_PRELOAD": str(before)}
    print("\nuser-space instructions per call (callgrind; bench/trace_calls.c, the library counting)")
    print(f"  {'pair':16s} " + " ".join(f"{k:>9s}" for k in variants)
          + ("   now-before" if before else "") + "   now-baseline")
    for pair in INSN_PAIRS:
        v = {k: instructions(exe, pair, e) for k, e in variants.items()}
        row = f"  {pair:16s} " + " ".join(f"{x:9.1f}" for x in v.values())
        if before is not None:
            row += f"   {v['now'] - v['before']:+10.1f}"
        print(row + f"   {v['now'] - v['baseline']:+12.1f}")


def quartiles(xs: list[float]) -> tuple[float, float]:
    if len(xs) < 4:
        return min(xs), max(xs)
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--kinds", default="eagain,tcp")
    ap.add_argument("--instructions", action="store_true", help="also count instructions per call (valgrind)")
    ap.add_argument("--before", type=Path, help="an earlier build of the library, counted beside this one")
    ap.add_argument("--no-timing", action="store_true", help="only the instruction counts")
    a = ap.parse_args(argv)
    if a.before is not None and not a.before.is_file():
        raise SystemExit(f"--before: no such library: {a.before}")
    if (a.instructions or a.before) and shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    kinds = [k for k in a.kinds.split(",") if k]
    for k in kinds:
        if k not in LABELS:
            raise SystemExit(f"--kinds: unknown kind {k!r} (expected some of {', '.join(LABELS)})")

    lib = build()
    tmp = Path(tempfile.mkdtemp(prefix="nestlab-bench-"))
    shm = create_shm_dir("nestlab-bench-")
    try:
        probe = tmp / "nestprobe"
        subprocess.run(["gcc", "-O2", "-pthread", "-I", str(REPO / "harness/interceptor"), "-o", str(probe),
                        str(REPO / "tests/interceptor/nestprobe.c")], check=True)
        clean = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("NESTLAB_")}
        envs = {
            "baseline": clean,
            "inert": {**clean, "LD_PRELOAD": str(lib)},
            "active": preload_env(shm, env=clean),
        }
        if a.instructions or a.before:
            instruction_table(tmp, envs, a.before)
        if a.before is not None:               # timed beside the others, as a fourth variant
            envs["before"] = {**envs["active"], "LD_PRELOAD": str(a.before)}
        if a.no_timing:
            return 0
        cpus = (0, 1) if (os.cpu_count() or 1) >= 2 else (0, 0)
        print(f"interceptor benchmark: {a.calls:,} one-byte send() calls per run, {a.rounds} interleaved rounds, "
              f"{os.cpu_count()} CPUs (sender on CPU {cpus[0]}, drainer on CPU {cpus[1]})")
        print(f"library: {lib}")
        summary = {}
        for kind in kinds:
            res: dict[str, list[float]] = {k: [] for k in envs}
            order = list(envs)
            for i in range(a.rounds):
                for name in order[i % len(order):] + order[:i % len(order)]:   # rotate: none always first
                    res[name].append(run(probe, a.calls, kind, envs[name], cpus))
            print(f"\n{kind}: {LABELS[kind]}")
            print("  ns per call    median     min     max")
            for name in envs:
                v = res[name]
                print(f"  {name:10s} {statistics.median(v):9.1f} {min(v):7.1f} {max(v):7.1f}"
                      f"   ({1e3 / statistics.median(v):.2f} M calls/s, best {1e3 / min(v):.2f})")
            for name in [x for x in ("inert", "active", "before") if x in envs]:
                diffs = [x - b for x, b in zip(res[name], res["baseline"], strict=True)]
                lo, hi = quartiles(diffs)
                med = statistics.median(diffs)
                ratio = statistics.median(res[name]) / statistics.median(res["baseline"])
                print(f"  added, {name:6s}: {med:+7.1f} ns/call (IQR {lo:+.1f} .. {hi:+.1f}), "
                      f"ratio to baseline {ratio:.3f}")
                if name == "active":
                    summary[kind] = (med, lo, hi, ratio)
        print("\nadded cost of an intercepted send() (active - baseline, median of paired rounds):")
        for kind, (med, lo, hi, ratio) in summary.items():
            print(f"  {kind:7s} {med:+7.1f} ns/call  (IQR {lo:+.1f} .. {hi:+.1f}; ratio {ratio:.3f})")
        ref = "eagain" if "eagain" in summary else kinds[0]
        med = summary[ref][0]
        print(f"target <= {TARGET_NS:.0f} ns/call, judged on '{ref}': {med:.1f} ns -> "
              f"{'within target' if med <= TARGET_NS else 'OVER TARGET'}")
    finally:
        remove_shm_dir(shm)
        for p in tmp.iterdir():
            p.unlink()
        tmp.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
