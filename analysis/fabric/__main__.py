"""python -m analysis.fabric RUN_OR_DIR ... [--out DIR] [--nest]: the fabric diagnosers on every fabric
run found (directories holding fabric.json), scored per link: the tables printed, the CSVs written
(analysis/fabric/view.py; `nestlab compare` of fabric runs shows the same). A run with no faults in
its spec is a control run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.fabric.view import fabric_view, markdown, write_view
from rundir.errors import UserError


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.fabric", description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+")
    p.add_argument("--out", help="where the CSVs go (default: the first path given)")
    p.add_argument("--nest", action="store_true", help="NeST's host view beside (runs its diagnosis on every run)")
    a = p.parse_args(argv)
    try:
        view = fabric_view(a.paths, nest=a.nest)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(markdown(view))
    for f in write_view(view, Path(a.out) if a.out else Path(a.paths[0])):
        print(f"wrote {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
