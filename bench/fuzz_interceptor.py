"""Differential fuzz of the interceptor's wrapped calls (issue 40, deliver 2: the library is never why a
program dies): the same cases run without the library, under it counting, and under it with the delay
fault's deferral armed and message tracing on must give the same return values and errno, with no crash
and no hang.

    .venv/bin/python bench/fuzz_interceptor.py [--cases 3000] [--seed 1] [--show 20]

Builds the library (make) and bench/fuzz_calls.c (gcc, into a temporary directory); each case is a fork
child of fuzz_calls with its own descriptors (listener, a loopback TCP connection whose next send is a
reply, Unix stream and datagram pairs, a pipe, /dev/null, a memfd, an epoll set, closed and reused fd
numbers) and one call with random and boundary arguments (bad pointers, huge and wrapping lengths and
counts, closed, reused and foreign fds, random flags, a SIGALRM whose handler sends on a socket during
the call). Prints the cases and calls covered, the differences (first --show of them) and the cases
that died or hung in any mode; exit status 1 when there is any.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.interceptor import build, create_shm_dir, preload_env, remove_shm_dir  # noqa: E402

MODES = ("baseline", "counting", "deferral")
CHUNK = 500   # cases per run of fuzz_calls (each mode's files are removed between runs)


def compile_fuzzer(out: Path) -> Path:
    exe = out / "fuzz_calls"
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-I", str(REPO / "harness/interceptor"), "-o",
                    str(exe), str(REPO / "bench/fuzz_calls.c")], check=True)
    return exe


def run_mode(exe: Path, mode: str, seed: int, first: int, count: int) -> dict[int, str]:
    """Case number -> its line after the number ("call args -> rc errno", or "call -> signal N")."""
    clean = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("NESTLAB_")}
    shm = create_shm_dir("nestlab-fuzz-") if mode != "baseline" else None
    try:
        env = clean if shm is None else {**preload_env(shm, env=clean), "NESTLAB_MAX_FDS": "64"}
        if mode == "deferral":   # and message tracing on: every part of the library at work
            env["NESTLAB_TRACE_EVENTS"] = "1024"
        args = [str(exe), str(seed), str(first), str(count)] + (["defer"] if mode == "deferral" else [])
        r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60 + 6 * count)
        if r.returncode != 0:
            raise SystemExit(f"fuzz_calls ({mode}) failed ({r.returncode}): {r.stderr.strip()[-300:]}")
    finally:
        if shm is not None:
            remove_shm_dir(shm)
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("CASE "):
            _, n, rest = line.split(" ", 2)
            out[int(n)] = rest
    return out


def outcome(line: str) -> str:
    return line.rsplit(" -> ", 1)[-1]


def fuzz(exe: Path, seed: int, cases: int) -> dict:
    """Run every mode over the cases; returns what differed, what died, and what was covered."""
    res: dict[str, dict[int, str]] = {m: {} for m in MODES}
    for first in range(0, cases, CHUNK):
        n = min(CHUNK, cases - first)
        for m in MODES:
            res[m].update(run_mode(exe, m, seed, first, n))
    calls: collections.Counter[str] = collections.Counter()
    failed: collections.Counter[str] = collections.Counter()
    diffs, died, libc = [], [], []   # libc: died with the library as without it (not the library's doing)
    for n in range(cases):
        lines = {m: res[m].get(n, "(no line) -> missing") for m in MODES}
        base = lines["baseline"]
        calls[base.split(" ", 1)[0]] += 1
        failed[base.split(" ", 1)[0]] += outcome(base).startswith("-1 ")
        for m in MODES:
            o = outcome(lines[m])
            if o.startswith(("signal", "hang", "exit", "missing")):
                (libc if m != "baseline" and o == outcome(base) else died).append((n, m, lines[m]))
        for m in MODES[1:]:
            if outcome(lines[m]) != outcome(base):
                diffs.append((n, m, base, lines[m]))
    died = [d for d in died if d[1] != "baseline" or all(x[0] != d[0] for x in libc)]
    return {"calls": calls, "failed": failed, "diffs": diffs, "died": died, "libc": libc}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--show", type=int, default=20, help="differences and deaths printed")
    a = ap.parse_args(argv)
    if a.cases < 1:
        raise SystemExit("--cases: at least 1")
    build()
    tmp = Path(tempfile.mkdtemp(prefix="nestlab-fuzz-"))
    try:
        exe = compile_fuzzer(tmp)
        r = fuzz(exe, a.seed, a.cases)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    calls, failed = r["calls"], r["failed"]
    print(f"interceptor differential fuzz: {a.cases} cases (seed {a.seed}), each without the library, counting, "
          f"and with the deferral armed; {len(calls)} calls")
    print(f"  {'call':24s} cases  failing (-1) without the library")
    for c, k in sorted(calls.items()):
        print(f"  {c:24s} {k:5d}  {failed[c]:5d}")
    for n, m, base, got in r["diffs"][:a.show]:
        print(f"DIFFERENT case {n} ({m}):\n    without: {base}\n    with:    {got}")
    for n, m, line in r["died"][:a.show]:
        print(f"DIED case {n} ({m}): {line}")
    if r["libc"]:
        print(f"({len(r['libc'])} case runs died with the library as without it: the call's own doing)")
    print(f"differences: {len(r['diffs'])}; crashes or hangs: {len(r['died'])} "
          f"-> {'OK' if not r['diffs'] and not r['died'] else 'UNEXPECTED'}")
    return 1 if r["diffs"] or r["died"] else 0


if __name__ == "__main__":
    sys.exit(main())
