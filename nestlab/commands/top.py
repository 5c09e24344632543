"""`nestlab top RUN`: the live diagnosis of a run in a terminal, after `top` (docs/live.md).

Header lines (the run, its time, the snapshots and how far they are diagnosed, the module states, the
faults in force), then one line per module and direction, STALLED first (longest first), then
BLOCKED, HEALTHY, DONTCARE. Refreshes every second (`-d`), `q` quits, `-n` stops after that many
frames, `-b` prints plain frames one after the other as `top -b` does (also what happens when stdout
is not a terminal). It attaches read-only (analysis.live, rundir.live_reader), to a running run or a
finished one (the last snapshot, or the one `--at` seconds after the workloads started).
"""

from __future__ import annotations

import argparse
import curses
import os
import sys
import time
from pathlib import Path

from analysis.live import LAG_S, LiveEngine, LiveView, Row
from nestlab.live_line import printable
from rundir import facts, read
from rundir.errors import UserError
from rundir.layout import RunDir
from rundir.manifest import read_manifest_quietly
from rundir.runs import guarded

STATES = ("STALLED", "BLOCKED", "HEALTHY", "DONTCARE")
# MSGS/S: total_msgs per second over the last second; WAIT%: wait_ms per second / 10 (the share of the
# time a socket spent blocked; an app sums its sockets); QUEUE: the queue now (TCP: bytes).
COLUMNS = f"{'KIND':<7}{'DIR':<4}{'STATE':<9}{'STALLED':>8}{'MSGS/S':>9}{'WAIT%':>7}{'QUEUE':>9}  MODULE"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("top", help="the live diagnosis of a running (or finished) run, like top: STALLED "
                                   "modules first, active faults (docs/live.md)")
    p.add_argument("run", help="a run directory (results/<experiment>/<run>), running or finished")
    p.add_argument("-d", "--delay", type=float, default=1.0, metavar="SECS", help="seconds between refreshes (1)")
    p.add_argument("-n", "--iterations", type=int, metavar="N", help="stop after N frames")
    p.add_argument("-b", "--batch", action="store_true",
                   help="batch mode: print plain frames, read no keys; without -n, on a finished run, one frame")
    p.add_argument("--at", type=float, metavar="SECONDS",
                   help="show the snapshot this many seconds after the workloads started (t0)")
    p.add_argument("--variant", default=None, help="rule variant (default flowdiagnoser:theta=2)")
    p.add_argument("--all", action="store_true", dest="show_all",
                   help="also list the stalls expected by design (the unused direction of one-way applications "
                        "and their sockets), which are hidden by default")
    p.add_argument("--lag", type=float, default=LAG_S, metavar="SECS",
                   help=f"diagnose a snapshot once this much later data is in ({LAG_S:g}; docs/live.md)")
    p.set_defaults(func=_top)


def _top(args: argparse.Namespace) -> int:
    if args.delay <= 0:
        raise UserError(f"-d {args.delay:g}: the delay must be more than 0 seconds")
    if args.iterations is not None and args.iterations < 1:
        raise UserError(f"-n {args.iterations}: give at least 1 iteration")
    if args.lag < 0:
        raise UserError(f"--lag {args.lag:g}: the lag cannot be negative")
    try:
        # Any failure on a damaged run is one line (as the offline analysis says it), never a traceback.
        return guarded(args.run, _show, args)
    except KeyboardInterrupt:
        return 0


def _show(args: argparse.Namespace) -> int:
    engine = None
    try:
        at_seq = None if args.at is None else seq_at(Path(args.run), args.at)
        engine = LiveEngine(args.run, args.variant, lag_s=args.lag, at_seq=at_seq)
        if args.batch or not sys.stdout.isatty():
            return batch(engine, args.delay, args.iterations, args.show_all)
        for name in ("COLUMNS", "LINES"):   # curses would take these over the window's real size
            os.environ.pop(name, None)
        return curses.wrapper(interactive, engine, args.delay, args.iterations, args.show_all)
    finally:
        if engine is not None:
            engine.close()


def seq_at(run: Path, seconds: float) -> int:
    """The last snapshot at most `seconds` after t0 (the first snapshot's time when t0 is unknown)."""
    db = RunDir(run).db if run.is_dir() else run
    if not db.is_file():
        raise UserError(f"{run}: no run.db here (expected a run directory)")
    seq = read.seq_at(db, facts.manifest_t0(read_manifest_quietly(db.parent)), seconds)
    if seq is None:
        raise UserError(f"{run}: no snapshot at or before --at {seconds:g} s")
    return seq


def batch(engine: LiveEngine, delay: float, iterations: int | None, show_all: bool = False) -> int:
    """N frames; without -n, frames until the one that can no longer change is printed (a finished
    run's last snapshot, or its `--at` snapshot)."""
    k = 0
    while True:
        view = engine.refresh()
        print("\n".join(frame(view, 10_000, show_all=show_all)), flush=True)
        k += 1
        if iterations is not None and k >= iterations:
            return 0
        if iterations is None and (view.final or (view.status not in ("running", "unknown")
                                                  and engine.at_seq is not None)):
            return 0
        print(flush=True)
        time.sleep(delay)


def interactive(screen, engine: LiveEngine, delay: float, iterations: int | None, show_all: bool = False) -> int:
    curses.curs_set(0)
    screen.timeout(int(delay * 1000))
    k = 0
    while True:
        view = engine.refresh()
        height, width = screen.getmaxyx()
        screen.erase()
        lines = frame(view, width - 1, height, show_all)
        header = lines.index(COLUMNS) if COLUMNS in lines else -1
        for y, line in enumerate(lines[:height]):
            attr = curses.A_REVERSE if y == header else curses.A_BOLD if y > header >= 0 and " STALLED " in line else 0
            screen.addnstr(y, 0, line, width - 1, attr)
        screen.refresh()
        k += 1
        if iterations is not None and k >= iterations:
            return 0
        key = screen.getch()   # waits `delay` for a key; space or any other key refreshes now
        if key in (ord("q"), ord("Q")):
            return 0


def _seconds(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s"


def _number(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if abs(v) < 1e6 else f"{v:.2g}"


def _since_t0(view: LiveView, t: float | None) -> float | None:
    return None if t is None or not isinstance(view.t0, int | float) else t - view.t0


def frame(view: LiveView, width: int, height: int | None = None, show_all: bool = False) -> list[str]:
    """One screen: header lines, the column heads, one line per module and direction; rows stalled by
    design (LiveView.by_design) only with show_all, so that a fault's target comes first."""
    t = _since_t0(view, view.now)
    when = "" if t is None else f"  t {t:.1f} s"
    if t is not None and isinstance(view.duration, int | float):
        when += f" of {view.duration:g} s" + (f", {max(0.0, view.duration - t):.1f} s left"
                                              if view.status == "running" else "")
    lines = [f"nestlab top - {view.run_id} ({view.experiment})  {view.status}{when}"]
    if view.seq is None:
        shown = "no snapshot diagnosed yet"
    else:
        at = _since_t0(view, view.mono)
        shown = (f"diagnosed to seq {view.seq}" + ("" if at is None else f" (t {at:.1f} s)")
                 + (", every snapshot settled" if view.final else f", lag {view.lag * view.interval:.1f} s"))
    lines.append(f"Snapshots: {view.snapshots} every {view.interval:g} s, {shown}; {view.variant}; "
                 f"refresh {view.cost_s * 1000:.1f} ms")
    counts = {s: sum(1 for r in view.rows if r.state == s) for s in STATES}
    other = sum(1 for r in view.rows if r.positive and r.state not in STATES)   # certainty-factor variants
    expected = len(view.by_design)
    hidden = f"; {expected} stalled by design{'' if show_all else ' hidden (--all shows them)'}" if expected else ""
    lines.append(f"Modules: {len({r.module for r in view.rows})} total; per direction "
                 + ", ".join(f"{n} {s.lower()}" for s, n in counts.items()) + (f", {other} positive" if other else "")
                 + hidden)
    planned = "" if view.faults_planned is None else f" of {view.faults_planned} planned"
    lines.append(f"Faults: {len(view.faults)} active, {view.faults_begun} begun{planned}")
    for f in view.faults:
        module = "" if f.module is None else f" (module {f.module})"
        lines.append(f"  {f.kind} {f.target}{module} at {f.at_node}: {_seconds(f.left(view.now))} left")
    lines.append("")
    lines.append(COLUMNS)
    room = None if height is None else max(0, height - len(lines))
    rows = view.rows if show_all else [r for r in view.rows if not (r.positive and r.by_design)]
    lines += [row_line(r) for r in rows[:room]]
    return [printable(line)[:width] for line in lines]   # names from the run: never escape sequences


def row_line(r: Row) -> str:
    stalled = "" if r.stalled_s is None else f"{r.stalled_s:.1f}s"
    wait = None if r.wait_ms_s is None else r.wait_ms_s / 10.0
    return (f"{r.kind:<7}{r.dir:<4}{r.state:<9}{stalled:>8}{_number(r.msgs_s):>9}{_number(wait):>7}"
            f"{_number(r.queued):>9}  {r.name}")
