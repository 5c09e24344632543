"""The kill campaign: N real runs of a short spec, each killed at a random moment (building, running,
tearing down, reporting) with SIGINT, SIGTERM or SIGKILL, then `nestlab cleanup`; after each, every
trace a run can leave is looked for (namespaces, links, NESTLAB rules, processes, scratch directories
and shared memory, ledgers, the sysctl) and the run's run.db must pass `PRAGMA integrity_check` and
read (rundir.runs.open_run and analysis.load.load_run_data, or one line saying why it cannot: a run
killed before its first snapshot). Not part of the test run (it takes about 15 s a run); as root:

    .venv/bin/python bench/kill_campaign.py [-n 50] [--seed 1] [--keep DIR]

Prints one line per run and a summary; exit status 1 when any run left a trace or a bad run.db.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from analysis.load import load_run_data  # noqa: E402
from rundir.errors import UserError  # noqa: E402
from rundir.layout import RunDir  # noqa: E402
from rundir.runs import open_run  # noqa: E402
from tests.support.env import leftovers  # noqa: E402

VENV_BIN = Path(sys.executable).parent
DURATION_S = 8
SPEC = f"""\
name: kill_campaign
topology: {REPO / "topologies" / "dumbbell.yaml"}
duration: {DURATION_S}s
monitor: site1n1
workloads:
  - {{kind: wget, host: site1n1, server: site2n1, file_size: 50MB}}
  - {{kind: iperf, host: site1n1, server: site2n2, direction: upload}}
faults:
  - {{kind: tcp_drop, at: x1, target: {{workload: 0}}, schedule: {{at: [2s], duration: 1s}}}}
  - {{kind: ip_drop, at: x1, schedule: {{at: [5s], duration: 1s}}}}
"""
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
# A run takes about DURATION_S + 6 s with its report: kill anywhere in that span.
KILL_WINDOW_S = (0.2, DURATION_S + 6.0)


def check_db(run: Path) -> str:
    """'ok', or what is wrong with the run's run.db."""
    db = RunDir(run).db
    if not db.is_file():
        return "no run.db"
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        (result,) = conn.execute("PRAGMA integrity_check").fetchone()
        conn.close()
    except sqlite3.Error as e:
        return f"integrity_check failed: {e}"
    if result != "ok":
        return f"integrity_check: {result}"
    try:
        load_run_data(open_run(run))
    except UserError as e:
        text = str(e)
        return "ok (nothing recorded yet)" if "no snapshots" in text else f"does not read: {text}"
    except Exception as e:  # noqa: BLE001 - exactly what the campaign looks for
        return f"does not read: {type(e).__name__}: {e}"
    return "ok"


def one(k: int, rng: random.Random, spec: Path, results: Path) -> dict:
    sig = rng.choice(SIGNALS)
    at = rng.uniform(*KILL_WINDOW_S)
    before = set(leftovers())
    existing = set(results.glob("kill_campaign/*-r0"))
    started = time.monotonic()
    # SIGINT as a terminal's Ctrl-C would deliver it: a campaign started in the background (nohup, &)
    # has it ignored, and a child would inherit that.
    proc = subprocess.Popen([VENV_BIN / "run-experiment", str(spec), "--results", str(results)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        proc.wait(timeout=at)
        killed = False       # it ended before its moment
    except subprocess.TimeoutExpired:
        proc.send_signal(sig)
        killed = True
    try:
        _, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        err += "\n(did not end within 90 s of the signal: SIGKILLed)"
    cleanup = subprocess.run([VENV_BIN / "nestlab", "cleanup"], capture_output=True, text=True)
    time.sleep(0.3)
    traces = sorted(set(leftovers()) - before)
    made = sorted(set(results.glob("kill_campaign/*-r0")) - existing)   # none: killed before it made one
    run = made[-1] if made else None
    status = "-"
    if run is not None and RunDir(run).manifest_path.is_file():
        status = RunDir.open(run).status or "?"
    return {"k": k, "signal": sig.name if killed else "none", "at": at, "code": proc.returncode,
            "wall": time.monotonic() - started, "status": status, "db": check_db(run) if run else "no run directory",
            "traces": traces, "cleanup": cleanup.returncode, "err": (err or "").strip().splitlines()[-1:]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", help="keep the runs in this directory (default: a temporary one, removed)")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="kill-campaign-"))
    work.mkdir(parents=True, exist_ok=True)
    spec = work / "kill_campaign.yaml"
    spec.write_text(SPEC)
    stale = leftovers()
    if stale:
        print(f"the machine is not clean before the campaign: {stale}; run `nestlab cleanup`", file=sys.stderr)
        return 2
    rows = []
    try:
        for k in range(args.n):
            r = one(k, rng, spec, work / "results")
            rows.append(r)
            bad = r["traces"] or not r["db"].startswith(("ok", "no run directory"))
            print(f"{k:3d} {r['signal']:8s} at {r['at']:5.1f} s  exit {r['code']!s:>4}  status {r['status']:11s} "
                  f"run.db {r['db']}{'  TRACES ' + str(r['traces']) if r['traces'] else ''}"
                  f"{'  <- BAD' if bad else ''}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    bad = [r for r in rows if r["traces"] or not r["db"].startswith(("ok", "no run directory"))]
    by_sig = Counter(r["signal"] for r in rows)
    by_status = Counter(r["status"] for r in rows)
    print(f"\n{len(rows)} runs: signals {dict(by_sig)}; manifests {dict(by_status)}; "
          f"run.db ok {sum(r['db'].startswith('ok') for r in rows)}, no run directory "
          f"{sum(r['db'] == 'no run directory' for r in rows)}; runs with traces left {sum(bool(r['traces']) for r in rows)}; "
          f"bad {len(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
