"""python -m analysis.fabric RUN_OR_DIR ... [--out DIR]: the fabric diagnosers on every fabric run
found (directories holding fabric.json), scored per link: the tables printed, the CSVs written
(analysis/fabric/score.py). A run with no faults in its spec is a control run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.fabric.inputs import load_run, windows
from analysis.fabric.nest import host_views
from analysis.fabric.score import accuracy, alarms, diagnose, write
from rundir.errors import UserError
from rundir.fabric import FABRIC_FILE, read_manifest_json


def _runs(paths: list[str]) -> list[Path]:
    out = []
    for p in map(Path, paths):
        if not p.exists():
            raise UserError(f"{p}: no such run or directory")
        out += sorted(f.parent for f in ([p / FABRIC_FILE] if (p / FABRIC_FILE).is_file() else p.rglob(FABRIC_FILE)))
    if not out:
        raise UserError(f"no fabric run (a directory with {FABRIC_FILE}) under {', '.join(paths)}")
    return out


def _interval(x) -> str:
    return "-" if x is None else f"{100 * x[0]:5.1f} [{100 * x[1]:.1f}, {100 * x[2]:.1f}]"


def _print_nest(views, no_nest: list[str]) -> None:
    """Per fault kind: windows, the first host NeST blames on the faulty link's connections, windows
    with any STALLED TCP module, retransmitting connections and those LOSSY by 007's blamed links."""
    print(f"\nNeST ({'flowdiagnoser:theta=2'}) host view:")
    print(f"{'fault kind':20} {'windows':>7} {'first host on link %':>21} {'any STALLED %':>14} "
          f"{'retransmitting':>14} {'LOSSY by votes':>14}")
    groups: dict[str, list] = {}
    for v in views:
        groups.setdefault(v.window.label, []).append(v)
    for label, vs in sorted(groups.items()):
        faulty = [v for v in vs if v.window.truth]
        first = f"{100 * sum(v.first_on_link for v in faulty) / len(faulty):.1f}" if faulty else "-"
        print(f"{label:20} {len(vs):7d} {first:>21} {100 * sum(bool(v.hosts) for v in vs) / len(vs):14.1f} "
              f"{sum(v.retransmitting for v in vs):14d} {sum(v.lossy for v in vs):14d}")
    if no_nest:
        print(f"(NeST's diagnosis could not be made of {len(no_nest)} run(s): {', '.join(no_nest[:3])})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.fabric", description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+")
    p.add_argument("--out", help="where the CSVs go (default: the first path given)")
    p.add_argument("--nest", action="store_true", help="NeST's host view beside (runs its diagnosis on every run)")
    a = p.parse_args(argv)
    try:
        runs = _runs(a.paths)
        verdicts, names, views, no_nest = [], {}, [], []
        for path in runs:
            run = load_run(path)
            spec = read_manifest_json(path).get("spec") or {}
            mine = diagnose(run, control_run=not spec.get("faults"))
            verdicts += mine
            names = {lk["index"]: lk["name"] for lk in run.links}
            if a.nest:
                blamed = {v.window.start: v.blamed for v in mine if v.diagnoser == "007"}
                got = host_views(run, windows(run), blamed)
                views += got or []
                if got is None:
                    no_nest.append(path.name)
        acc, al = accuracy(verdicts, len(names)), alarms(verdicts)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{len(runs)} fabric run(s), {len({(v.window.run, v.window.start) for v in verdicts})} windows")
    print(f"{'diagnoser':11} {'fault kind':34} {'windows':>7}  {'AC@1 % [95%]':22} {'AC@3 % [95%]':22}")
    for x in acc:
        print(f"{x.diagnoser:11} {x.fault_kind:34} {x.windows:7d}  {_interval(x.ac1):22} {_interval(x.ac3):22}")
    print(f"\n{'diagnoser':11} {'precision % [95%]':22} {'recall % [95%]':22} {'control h':>9} {'false alarms/h':>14}")
    for x in al:
        per_hour = "-" if x.per_hour is None else f"{x.per_hour:.2f} ({x.false_alarms})"
        print(f"{x.diagnoser:11} {_interval(x.precision):22} {_interval(x.recall):22} {x.control_hours:9.3f} {per_hour:>14}")
    if a.nest:
        _print_nest(views, no_nest)
    for f in write(Path(a.out) if a.out else Path(a.paths[0]), verdicts, acc, al, names):
        print(f"wrote {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
