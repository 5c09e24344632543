"""The hostile-input campaign (issue 30): crafted run directories, derived copies, suite and shard
indexes, spec files and exports, and (issue 40; bench/hostile_cases_surfaces.py) message rings for
the drainer and plug-in files for root, each given to the command that reads it, in a child process
with a time limit, with the outcome it must have:

- `warn`: exit status 0 and a line on stderr (a warning or a note) holding the expected words;
- `exit2`: exit status 2 and one line, `error: ...`, holding the expected words;
- `ok`: exit status 0.

Never, in any case: a traceback, a hang (over --timeout, 10 s), a crash (a negative exit status: a
signal such as SIGSEGV), or a write outside the case's run and output directory (every file of the
campaign's workspace but those is snapshotted before and after: type, size, modification time, link
target). No network: the runs are tests/support's synthetic ones. Run as root (as the lab is): the
plug-in cases check what root refuses to run, and are left out under another user (nothing is
refused there).

    .venv/bin/python bench/hostile_campaign.py [--keep DIR] [--only WORD] [--timeout 10]

Prints a table of cases and outcomes and the count of unexpected ones (target 0); exit status 1 when
there is any.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from hostile_cases import CASES, Case, Workspace  # noqa: E402

NESTLAB = "import sys; from nestlab.cli import nestlab_main; sys.exit(nestlab_main(sys.argv[1:]))"
RUN_EXPERIMENT = "import sys; from nestlab.cli import run_experiment_main; sys.exit(run_experiment_main(sys.argv[1:]))"
TRACEDRAIN = "import sys; from harness.collector.tracedrain import main; sys.exit(main(sys.argv[1:]))"
PROGRAMS = {"nestlab": NESTLAB, "run-experiment": RUN_EXPERIMENT, "tracedrain": TRACEDRAIN}


def snapshot(root: Path, skip: tuple[Path, ...]) -> dict[str, tuple]:
    """Every path under root (links not followed) with its type, size, mtime and link target, but those
    under `skip` (where the case may write)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if not any((here / d) == s or s in (here / d).parents for s in skip)
                       and (here / d) not in skip]
        for name in dirnames + filenames:
            p = here / name
            if any(p == s or s in p.parents for s in skip):
                continue
            st = p.lstat()
            link = os.readlink(p) if stat.S_ISLNK(st.st_mode) else None
            kind = stat.S_IFMT(st.st_mode)
            out[str(p.relative_to(root))] = (kind, st.st_size if not stat.S_ISDIR(kind) else 0,
                                             st.st_mtime_ns if not stat.S_ISDIR(kind) else 0, link)
    return out


@dataclass
class Outcome:
    case: str
    what: str         # what the case is
    expected: str
    got: str
    unexpected: bool
    seconds: float
    detail: str


def judge(case: Case, code: int | None, err: str, wrote: list[str], seconds: float, timeout: float) -> tuple[str, bool]:
    if code is None:
        return f"hang (> {timeout:g} s)", True
    if code < 0:
        return f"crash (signal {-code})", True
    if "Traceback" in err:
        return "traceback", True
    if wrote:
        return f"wrote outside: {', '.join(wrote[:3])}", True
    lines = [line for line in err.splitlines() if line.strip()]
    if case.expect == "exit2":
        ok = code == 2 and lines and lines[-1].startswith("error: ") and all(w in lines[-1] for w in case.words) \
            and all(line.startswith(("warning: ", "note: ")) for line in lines[:-1])
        return (f"exit 2: {lines[-1][7:70]}" if code == 2 and lines else f"exit {code}"), not ok
    if code != 0:
        return f"exit {code}: {(lines or [''])[-1][:70]}", True
    if case.expect == "warn":
        said = [line for line in lines if all(w in line for w in case.words)]
        return (f"warned: {said[0][:70]}" if said else "no such warning"), not said
    return "ok", False


def run_case(ws: Workspace, case: Case, timeout: float) -> Outcome:
    where = ws.root / "cases" / case.name
    where.mkdir(parents=True)
    argv, allowed, *more = case.build(ws, where)
    skip = (*allowed, ws.cache, ws.home)   # home: the user's own caches (matplotlib's fonts)
    before = snapshot(ws.root, skip)
    code_text = PROGRAMS[case.program]
    env = {**os.environ, "PYTHONPATH": str(REPO), "NESTLAB_CACHE": str(ws.cache), "HOME": str(ws.home),
           "http_proxy": "http://127.0.0.1:9", "NO_COLOR": "1", "COLUMNS": "200", **(more[0] if more else {})}
    env.pop("NESTLAB_DEBUG", None)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code_text, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=where, env=env, start_new_session=True, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        code = None
    seconds = time.perf_counter() - t0
    after = snapshot(ws.root, skip)
    wrote = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    got, bad = judge(case, code, err, wrote, seconds, timeout)
    if not bad and case.check is not None:
        problem = case.check(ws, where)
        if problem:
            got, bad = f"check failed: {problem}", True
    return Outcome(case.name, case.what, case.expect + (f" {'/'.join(case.words)}" if case.words else ""), got, bad,
                   seconds, err[-2000:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="make the workspace here and keep it")
    ap.add_argument("--only", help="only the cases whose name holds this")
    ap.add_argument("--timeout", type=float, default=10.0, help="a case running longer hangs (default 10 s)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the stderr of unexpected outcomes")
    a = ap.parse_args(argv)
    root = a.keep or Path(tempfile.mkdtemp(prefix="nestlab-hostile-"))
    root.mkdir(parents=True, exist_ok=True)
    ws = Workspace.make(root)
    cases = [c for c in CASES if a.only is None or a.only in c.name]
    outcomes: list[Outcome] = []
    try:
        for case in cases:
            o = run_case(ws, case, a.timeout)
            outcomes.append(o)
            flag = "UNEXPECTED" if o.unexpected else "ok"
            print(f"{len(outcomes):3d} {o.case:38s} {o.expected[:44]:44s} {o.got[:60]:60s} {o.seconds:5.1f}s {flag}",
                  flush=True)
            if o.unexpected and a.verbose:
                print("      " + o.detail.replace("\n", "\n      "))
    finally:
        if a.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    bad = [o for o in outcomes if o.unexpected]
    kinds = {}
    for o in outcomes:
        kinds[o.case.split("_")[0]] = kinds.get(o.case.split("_")[0], 0) + 1
    print(f"\n{len(outcomes)} cases ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}); "
          f"{len(bad)} unexpected" + (f": {', '.join(o.case for o in bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
