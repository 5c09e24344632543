"""A real suite on Mininet: SIGTERM in the middle of its second run, then --resume, which runs the
rest without repeating the complete run; the interrupted run stays on disk, out of the tables."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time

import pytest

from rundir.runs import find_runs
from tests.support.env import REPO, VENV_BIN, write

pytestmark = [pytest.mark.root, pytest.mark.slow]

SUITE = f"""\
suite: resumable
seed: 3
defaults: {{topology: {REPO / "topologies" / "dumbbell.yaml"}, duration: 8s, monitor: site1n1}}
experiments:
  - name: first
    workloads: [{{kind: wget, host: site1n1, server: site2n1, file_size: 10MB}}]
  - name: second
    workloads: [{{kind: iperf, host: site1n1, server: site2n2}}]
    seeds: [1, 2]
"""


def _snapshots(db) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("SELECT count(*) FROM snapshots").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_sigterm_mid_suite_then_resume_runs_only_the_rest(tmp_path, no_leftovers):
    path = write(tmp_path, "suite.yaml", SUITE)
    res = tmp_path / "res"
    root = res / "resumable"
    cmd = [str(VENV_BIN / "run-experiment"), str(path), "--results", str(res)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:   # the second run records
        try:
            runs = json.loads((root / "suite.json").read_text())["runs"]
        except (OSError, ValueError):
            runs = []
        if len(runs) > 1 and runs[1]["status"] == "running" and _snapshots(root / runs[1]["run"] / "run.db") > 10:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out
    index = json.loads((root / "suite.json").read_text())
    assert index["state"] == "interrupted", out
    assert [r["status"] for r in index["runs"]] == ["complete", "interrupted", "planned"], out
    first, cut = index["runs"][0]["run"], index["runs"][1]["run"]
    assert json.loads((root / cut / "manifest.json").read_text())["status"] == "interrupted"
    assert "--resume` runs the rest" in out

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=60)   # no flag: refused
    assert again.returncode == 2 and "--resume" in again.stderr and len(again.stderr.strip().splitlines()) == 1

    resumed = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "1 kept from before (--resume)" in resumed.stderr
    index = json.loads((root / "suite.json").read_text())
    assert index["state"] == "complete"
    assert [r["status"] for r in index["runs"]] == ["complete"] * 3
    assert index["runs"][0]["run"] == first            # kept, not run again
    assert index["runs"][1]["run"] != cut
    complete = [m.parent for m in root.glob("*/*/manifest.json")
                if json.loads(m.read_text())["status"] == "complete"]
    assert len(complete) == 3                          # no complete run made twice
    assert (root / cut / "run.db").is_file()           # the interrupted run is still there ...
    members = find_runs(["resumable"], res)
    assert (root / cut).resolve() not in members and len(members) == 3   # ... and out of the tables
    assert (root / "analysis" / "accuracy.md").is_file()                  # the suite's pooled table
