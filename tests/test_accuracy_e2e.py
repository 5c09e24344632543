"""End to end: a short real run with every fault kind, then the accuracy table command on it, and
the run's HTML report (written by run-experiment) opened in headless Chromium."""

from __future__ import annotations

import csv
import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from tests.support import chromium
from tests.support.env import REPO, VENV_BIN, write
from tests.support.report_page import accuracy_cells_compared, outside_refs

pytestmark = [pytest.mark.root, pytest.mark.slow]

SPEC = f"""\
name: e2e_all
topology: {REPO / "topologies" / "dumbbell.yaml"}
duration: 24s
seed: 2
monitor: site1n1
workloads:
  - {{kind: wget, host: site1n1, server: site2n1, file_size: 500MB}}
  - {{kind: iperf, host: site1n1, server: site2n2, direction: upload, parallel: 2}}
faults:
  - {{kind: tcp_drop, at: x1, target: {{workload: 0}}, schedule: {{at: [5s], duration: 2s}}}}
  - {{kind: app_pause, target: {{workload: 1}}, schedule: {{at: [11s], duration: 2s}}}}
  - {{kind: ip_drop, at: x1, schedule: {{at: [17s], duration: 2s}}}}
"""
ROWS = ["iperf", "wget", "socket", "s:iperf", "s:wget", "TCP", "ip+eth", "all modules"]


def test_every_fault_kind_then_the_accuracy_table(tmp_path, no_leftovers):
    results = tmp_path / "results"
    r = subprocess.run([VENV_BIN / "run-experiment", str(write(tmp_path, "all.yaml", SPEC)), "--results", str(results)],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (run,) = results.glob("e2e_all/*")
    run_out = r.stdout + r.stderr
    assert "| Inbound" in r.stdout and "tables and figures written to" in r.stdout + r.stderr
    faults = json.loads((run / "manifest.json").read_text())["counts"]["faults"]
    assert faults == 3

    out = tmp_path / "tables"
    r = subprocess.run([VENV_BIN / "nestlab", "accuracy", str(run), "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert {p.name for p in out.iterdir()} >= {"accuracy.md", "accuracy.csv", "accuracy.tex"}
    table = {(row["section"], row["row"]): row for row in csv.DictReader((out / "accuracy.csv").open())}
    assert set(table) == {(s, r) for s in ("Inbound", "Outbound", "Total") for r in ROWS}
    for row in table.values():
        n = {k: int(row[k]) for k in ("Total", "AP", "AN", "TP", "TN", "FP", "FN")}
        assert n["TP"] + n["FN"] == n["AP"] and n["TN"] + n["FP"] == n["AN"] and n["AP"] + n["AN"] == n["Total"]
        for rate in ("TPR", "FPR", "PPV", "TNR", "FNR", "NPV"):
            assert row[rate] == "" or 0 <= float(row[rate]) <= 100  # undefined = blank, never NaN
    for name in ("iperf", "wget", "socket", "s:iperf", "s:wget"):
        row = table[("Total", name)]
        assert int(row["AP"]) > 0 and float(row["TPR"]) >= 95, (name, row)
    # Each fault found its target: positives in the TCP and ip+eth rows too.
    assert int(table[("Total", "TCP")]["TP"]) > 0 and int(table[("Total", "ip+eth")]["TP"]) > 0

    # The report run-experiment wrote, as the summary names it, in a real browser: nothing fetched,
    # every figure loaded, its tables equal to accuracy.csv for the same variants.
    (named,) = re.findall(r"^report: (\S+)$", run_out, re.M)
    page = Path(named) if Path(named).is_absolute() else REPO / named
    assert page == run / "analysis" / "report.html" and page.stat().st_size > 0
    assert outside_refs(page.read_text()) == []
    if chromium.browser() is None:
        pytest.fail("chromium is missing: scripts/setup.sh installs it")
    seen = chromium.devtools_load(page, tmp_path)
    assert [u for u in seen["requested"] if u != page.as_uri() and not u.startswith("data:")] == []
    assert seen["imgs"] >= 6 and seen["ok"] == seen["imgs"]
    both = tmp_path / "both"
    # The report's variants: the seeds' two rule systems and, the run having probes, the lab's probe variant.
    shown = ["flowdiagnoser:theta=2", "flowdiagnoser:probe=on", "nest-cf"]
    r = subprocess.run([VENV_BIN / "nestlab", "accuracy", str(run), *(a for v in shown for a in ("--variant", v)),
                        "--out", str(both)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    dom = chromium.dump_dom(page, tmp_path)
    canonical = ["flowdiagnoser:theta=2", "flowdiagnoser:theta=2,probe=on", "nest-cf"]   # as tables name them
    assert accuracy_cells_compared(dom, pd.read_csv(both / "accuracy.csv"), canonical) > 0
    two = tmp_path / "two"   # the API example's variants
    r = subprocess.run([VENV_BIN / "nestlab", "accuracy", str(run), "--variant", "flowdiagnoser:theta=2",
                        "--variant", "nest-cf", "--out", str(two)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr

    # The Python API's documented example on this real run, and its accuracy equal to the CSV above.
    import contextlib
    import io

    import nestlab
    from tests.test_api import _example

    names = {"RUN": str(run)}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(_example(), "docs/api.md", "exec"), names)   # noqa: S102 - the documented example
    assert names["table"].to_csv(index=False, na_rep="") == (two / "accuracy.csv").read_text()
    assert len(names["faults"]) == 3 and len(nestlab.open_run(run).snapshots) > 200
