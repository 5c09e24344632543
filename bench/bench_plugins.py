"""Plug-in speed: one rule written on the simple interface (a Python function per cell) and on the
array interface (docs/examples/waiting_plugin.py: `waiting`, `waiting-array`), on the same run.

    .venv/bin/python bench/bench_plugins.py [RUN] [--repeat 3]

RUN defaults to a synthetic 2-minute run (tests/support/synthetic.py: ~100 modules at 100 ms, with
connection churn and faults). Prints each interface's module-diagnoses per second (a module, a
direction, a snapshot; best of --repeat), the ratio of the two, `flowdiagnoser:theta=2`'s rate
measured in the same run as the baseline, and checks that both interfaces gave the same result,
cell for cell, and the same accuracy table.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

import nestlab  # noqa: E402
from analysis import plugins  # noqa: E402
from analysis.diagnose import as_variants  # noqa: E402
from analysis.model.batch import Batch  # noqa: E402


def rate(run, name: str, repeat: int) -> tuple[float, dict]:
    (v,) = as_variants([name])
    best, out = float("inf"), None
    for _ in range(repeat):
        batch = Batch(run.data.run.stretches)   # a fresh batch: nothing memoised from the last round
        t = time.perf_counter()
        out = v.diagnose(batch)
        best = min(best, time.perf_counter() - t)
    return 2 * batch.n_cells / best, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", help="a run directory (default: a synthetic 2-minute run)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    plugins.add_files([REPO / "docs" / "examples" / "waiting_plugin.py"])
    with tempfile.TemporaryDirectory() as tmp:
        path = args.run
        if path is None:
            from tests.support.synthetic import synthetic_run
            path = synthetic_run(Path(tmp) / "synthetic", seconds=120)
        run = nestlab.open_run(path)
        _ = run.data   # read once, outside the timings
        base, _ = rate(run, "flowdiagnoser:theta=2", args.repeat)
        simple, a = rate(run, "waiting", 1)
        array, b = rate(run, "waiting-array", args.repeat)
        same = all(np.array_equal(a[d][0], b[d][0]) and np.array_equal(a[d][1], b[d][1]) for d in ("in", "out"))
        ta = run.accuracy("waiting").drop(columns="variant")
        tb = run.accuracy("waiting-array").drop(columns="variant")
        print(f"run: {run.path} ({2 * Batch(run.data.run.stretches).n_cells:,} module-diagnoses)")
        print(f"flowdiagnoser:theta=2 (baseline, array): {base:>14,.0f} module-diagnoses/s")
        print(f"waiting-array (array interface):         {array:>14,.0f} module-diagnoses/s")
        print(f"waiting (simple interface):              {simple:>14,.0f} module-diagnoses/s "
              f"({1e6 / simple:.1f} µs each)")
        print(f"simple / array: 1/{array / simple:,.0f}; array / baseline: {array / base:.2f}")
        print(f"same result cell for cell: {same}; same accuracy table: {ta.equals(tb)}")
        return 0 if same and ta.equals(tb) else 1


if __name__ == "__main__":
    sys.exit(main())
