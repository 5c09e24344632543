"""`nestlab cleanup`: remove what runs that died left behind, as their ledgers list it.

A run killed with SIGKILL (or a crashed machine) leaves its ledger (harness/ledger.py) behind;
`cleanup` kills exactly those processes (after checking they are still what was recorded, since pids
get reused), deletes those links, and marks the run's manifest `interrupted`. For testbed nodes it
first stops the recorded processes, then brings back the collector's run.db and the logs, then undoes
and removes the same way, over SSH (harness/backends/ssh/cleanup.py); a node it cannot reach keeps the
ledger, so that `cleanup` can be run again. It never touches another live run or Mininet's other
users: unlike `mn -c`, it kills nothing by name pattern.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from harness.ledger import LEDGER_DIR, alive, kill_group
from harness.manifest import ManifestError
from harness.store import RunDir


def _mark_interrupted(run_dir: Path, reason: str) -> None:
    """A manifest still `running` (or without a status) becomes `interrupted` with `reason`; one that
    cannot be read, or would not fit the schema (harness.manifest), is left as it is."""
    try:
        rd = RunDir.open(run_dir)
    except (OSError, ValueError):
        return
    if isinstance(rd.manifest, dict) and rd.manifest.get("status") in (None, "running"):
        rd.manifest["status"] = "interrupted"
        rd.manifest["reason"] = reason
        try:
            rd.write_manifest()
        except ManifestError:
            pass


def cleanup(verbose: bool = False, include_live: bool = False) -> int:
    """Remove leftovers of runs whose runner is gone. Returns 0 (also when there was nothing)."""
    def say(msg: str) -> None:
        if verbose:
            print(msg)

    ledgers = sorted(LEDGER_DIR.glob("*.json")) if LEDGER_DIR.is_dir() else []
    if not ledgers:
        say("cleanup: nothing to do")
        return 0
    for path in ledgers:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        if not include_live and alive(data["runner_pid"], data.get("runner_start")):
            say(f"cleanup: run {data['run_id']} is still running (pid {data['runner_pid']}); left alone")
            continue
        complete = True
        if data.get("remote"):
            from harness.backends.ssh.cleanup import cleanup_remote

            complete = cleanup_remote(data, say)
        killed = sum(kill_group(p["pid"], p.get("start")) for p in reversed(data["processes"]))
        removed = 0
        for link in data["links"]:
            if subprocess.run(["ip", "link", "del", link], capture_output=True).returncode == 0:
                removed += 1
        for scratch in data.get("paths", []):
            shutil.rmtree(scratch, ignore_errors=True)
        _mark_interrupted(Path(data["run_dir"]), "runner died; cleaned up by `nestlab cleanup`")
        if complete:
            path.unlink(missing_ok=True)
        say(f"cleanup: run {data['run_id']}: {killed} process group(s) killed, {removed} link(s) removed")
    return 0
