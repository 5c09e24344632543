"""Reading a run costs less than fetching its rows (issue 23, item 1): `nestlab accuracy` on a synthetic
15-minute run, from process start to files written, against Python's sqlite3 fetching that run's rows.

    .venv/bin/python bench/bench_read.py [--minutes 15] [--rounds 3] [--fresh]

The run is tests/support/synthetic.py's (as bench/bench_diagnose.py's: ~100 modules at 100 ms with
connection churn, 1.8 M counters rows). Measured in this one process, in alternation, `--rounds`
times each (the best of each is compared: the machine's other load only ever adds time):

- baseline: a fresh sqlite3 connection fetching every row of every table of run.db (fetchall);
- `nestlab accuracy RUN --variant flowdiagnoser:theta=2 --variant nest-cf --out DIR` as a child
  process: wall time from its start to its exit (imports included) and its peak RSS (/usr/bin/time's
  %M; os.wait4's where there is none).

A run as run-experiment leaves it has two copies (rundir/columnar.py): the counters' (the runner's, when
the run ends) and the stretches' (analysis/model/stretch_copy.py, written by the run's report). A reader's
copies live in its per-user cache (rundir/copies.py; here a temporary one), each checked on load
(Arrow validation, a CRC-32 of what the analysis reads): the figures include those checks. The rounds
time accuracy with both (the figure compared), and with the counters' alone (the stretches made from
it, as after a change to the code that makes them); the first analysis of a run with neither (an
older run: read from run.db, both copies written) is timed once. Targets: accuracy at most half the
fetch, under 400 MB.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rundir import columnar, copies  # noqa: E402
from rundir.layout import RunDir  # noqa: E402
from tests.support.synthetic import synthetic_run  # noqa: E402

RATIO_TARGET = 0.5
RSS_TARGET_MB = 400
VARIANTS = ("flowdiagnoser:theta=2", "nest-cf")


def fetch_all(db: Path) -> tuple[float, int]:
    """(seconds, rows): every row of every table, fetched by Python's sqlite3."""
    t0 = time.perf_counter()
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    n = 0
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        rows = conn.execute(f"SELECT * FROM {table}").fetchall()
        n += len(rows)
        del rows
    conn.close()
    return time.perf_counter() - t0, n


TIME = Path("/usr/bin/time")


def accuracy(run: Path, out: Path) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of `nestlab accuracy` in a child process, start to exit. The peak is
    /usr/bin/time's (%M) where there is one: a child forked from this process counts this process's
    pages until it execs, so its own rusage (os.wait4) can report this process's size instead."""
    nestlab = Path(sys.executable).parent / "nestlab"
    cmd = [str(nestlab) if nestlab.exists() else sys.executable, *([] if nestlab.exists() else ["-m", "nestlab.cli"]),
           "accuracy", str(run), *(a for v in VARIANTS for a in ("--variant", v)), "--out", str(out)]
    report = None
    if TIME.exists():
        report = Path(out) / "time.txt"
        cmd = [str(TIME), "-f", "%M", "-o", str(report), *cmd]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    err = proc.stderr.read().decode()
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"nestlab accuracy failed ({proc.returncode}):\n{err}")
    kb = int(report.read_text().split()[-1]) if report is not None else usage.ru_maxrss
    return seconds, kb / 1024


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=15)
    ap.add_argument("--rounds", type=int, default=3, help="measurements of each, in alternation")
    ap.add_argument("--fresh", action="store_true", help="regenerate the synthetic run")
    a = ap.parse_args(argv)

    run = Path(tempfile.gettempdir()) / f"nestlab-bench-read-{a.minutes:g}min"
    if a.fresh or not RunDir(run).db.exists():
        shutil.rmtree(run, ignore_errors=True)
        t0 = time.perf_counter()
        synthetic_run(run, seconds=a.minutes * 60)
        print(f"generated synthetic run in {time.perf_counter() - t0:.1f} s: {run}")
    db = RunDir(run).db
    out = Path(tempfile.mkdtemp(prefix="nestlab-bench-read-out-"))
    cache = Path(tempfile.mkdtemp(prefix="nestlab-bench-read-cache-"))
    os.environ[copies.CACHE_ENV] = str(cache / "nestlab")   # the children's per-user cache
    stretches_copy = copies.cached_path(run, columnar.STRETCHES)
    try:
        # An older run: no copy yet; the first analysis reads run.db and writes both copies (its cache).
        shutil.rmtree(RunDir(run).columnar, ignore_errors=True)
        first_s, first_mb = accuracy(run, out)
        # As the runner leaves a run: its counters copy (written again here, timed).
        t0 = time.perf_counter()
        columnar.write_after_run(run)
        write_s = time.perf_counter() - t0
        size_mb = columnar.copy_path(run).stat().st_size / 2**20
        # With the counters copy alone (the stretches made from it; as after a change to the code that
        # makes them), then with both (as run-experiment leaves a run: its report wrote the stretches').
        fetches, runs, counters_only = [], [], []
        for _ in range(a.rounds):
            fetches.append(fetch_all(db))
            stretches_copy.unlink(missing_ok=True)
            counters_only.append(accuracy(run, out))
            runs.append(accuracy(run, out))
        stretches_mb = stretches_copy.stat().st_size / 2**20 if stretches_copy.exists() else float("nan")
    finally:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
    fetch_s, rows = min(f for f, _ in fetches), fetches[0][1]
    acc_s = min(s for s, _ in runs)
    peak_mb = max(m for _, m in runs)
    ratio = acc_s / fetch_s
    print(f"run: {db} ({db.stat().st_size / 2**20:.0f} MB, {rows:,} rows); counters copy {size_mb:.0f} MB, "
          f"written in {write_s:.2f} s; stretches copy {stretches_mb:.0f} MB")
    print(f"sqlite3 fetch of every row     {fetch_s:6.2f} s   (rounds: {', '.join(f'{f:.2f}' for f, _ in fetches)})")
    print(f"nestlab accuracy {' '.join(VARIANTS)}")
    print(f"  start to files written        {acc_s:6.2f} s   (rounds: {', '.join(f'{s:.2f}' for s, _ in runs)}), "
          f"peak RSS {peak_mb:.0f} MB (rounds: {', '.join(f'{m:.0f}' for _, m in runs)})")
    print(f"  counters copy only            {min(s for s, _ in counters_only):6.2f} s   (makes the stretches, "
          f"writes their copy), peak RSS {max(m for _, m in counters_only):.0f} MB")
    print(f"  first analysis, no copy yet   {first_s:6.2f} s   (reads run.db, writes both copies), peak RSS "
          f"{first_mb:.0f} MB")
    print(f"ratio accuracy / fetch: {ratio:.2f} (target <= {RATIO_TARGET}); peak {peak_mb:.0f} MB "
          f"(target < {RSS_TARGET_MB} MB)")
    met = ratio <= RATIO_TARGET and peak_mb < RSS_TARGET_MB
    print("targets met" if met else "target missed: " + ", ".join(
        w for w, bad in (("time", ratio > RATIO_TARGET), ("memory", peak_mb >= RSS_TARGET_MB)) if bad))
    return 0


if __name__ == "__main__":
    sys.exit(main())
