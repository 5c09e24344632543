"""Cleaning up after a killed run on testbed nodes (the `remote` part of its ledger), for
`nestlab cleanup`: stop the recorded processes, bring back what the collector recorded and the logs,
run the undo commands (which the run wrote into the ledger), remove the run's directories."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from harness.backends.ssh.node import SshNode
from harness.backends.ssh.retrieve import bring_back_recordings, fetch_logs
from harness.backends.ssh.transport import Connection, SshParams
from rundir.db import CHECKPOINT_SCRIPT, connect, snapshot_count
from rundir.errors import UserError
from rundir.layout import RunDir

STOP_WAIT_S = 10.0   # how long `cleanup` gives the recorded processes to end after SIGTERM


def stop_recorded(nodes: dict[str, SshNode], processes: list[dict], say) -> int:
    """SIGTERM every recorded process group that is still the one recorded (the collector then commits
    and closes its run.db), wait until they are gone, SIGKILL what is left. Returns the groups
    signalled."""
    live: list[dict] = []
    for p in reversed(processes):
        node = nodes.get(p["node"])
        if node is None:
            continue
        try:
            if node.kill(p["pid"], p["start"], signal.SIGTERM):
                live.append(p)
        except Exception as e:  # noqa: BLE001
            say(f"cleanup: {p['node']}: pid {p['pid']}: {e}")
    signalled = len(live)
    deadline = time.monotonic() + STOP_WAIT_S
    while live and time.monotonic() < deadline:
        time.sleep(0.1)
        still = []
        for p in live:
            try:
                if nodes[p["node"]].kill(p["pid"], p["start"], 0):
                    still.append(p)
            except Exception:  # noqa: BLE001 - SIGKILLed below
                still.append(p)
        live = still
    for p in live:
        try:
            nodes[p["node"]].kill(p["pid"], p["start"], signal.SIGKILL)
        except Exception as e:  # noqa: BLE001
            say(f"cleanup: {p['node']}: pid {p['pid']}: {e}")
    return signalled


def _offsets(rd: RunDir) -> dict[str, float]:
    """Each node's clock offset as the run measured it at its start (its manifest), 0 where unknown."""
    try:
        manifest = json.loads(rd.manifest_path.read_text())
        nodes = (manifest.get("clock_offsets") or {}).get("nodes") or {}
        return {n: float(o.get("offset", 0.0)) for n, o in nodes.items()}
    except Exception:  # noqa: BLE001 - a damaged manifest: the recordings still come back, unconverted
        return {}


def bring_back(nodes: dict[str, SshNode], salvages: list[dict], rd: RunDir, say) -> None:
    """The killed run's recordings (every collector's run.db, every drainer's trace, merged on the
    reference clock with the offsets its manifest recorded) and every salvaged node's logs."""
    collectors = {e["node"]: e["db"] for e in salvages if e.get("kind", "collector") == "collector" and e["node"] in nodes}
    traces = {e["node"]: e["db"] for e in salvages if e.get("kind") == "trace" and e["node"] in nodes}
    reference = next(iter(collectors), None)
    if rd.db.exists() and reference is not None:
        try:
            if snapshot_count(rd.db) == 0:
                db = connect(rd.db)
                try:
                    errors = bring_back_recordings(
                        nodes, collectors, traces, reference, _offsets(rd), rd.path, db,
                        checkpoint=lambda name, path: nodes[name].run([nodes[name].p.python, "-c",
                                                                       CHECKPOINT_SCRIPT, path]))
                    n = snapshot_count(rd.db)
                    say(f"cleanup: brought back {n} snapshot(s) from {', '.join(collectors)}"
                        + (f" and the message traces of {', '.join(traces)}" if traces else ""))
                    for e in errors:
                        say(f"cleanup: could not bring back {e}")
                finally:
                    db.close()
        except Exception as e:  # noqa: BLE001
            say(f"cleanup: could not bring back run.db from {reference}: {e}")
    for name in dict.fromkeys(e["node"] for e in salvages):
        if name not in nodes:
            continue
        logs = next(e["logs"] for e in salvages if e["node"] == name)
        try:
            fetch_logs(nodes[name], logs, rd.logs)
        except Exception as e:  # noqa: BLE001 - the rest of the cleanup still matters
            say(f"cleanup: logs from {name}: {e}")


def cleanup_remote(data: dict, say) -> bool:
    """Undo what a killed run left on its testbed nodes (its ledger's `remote` part): stop its
    processes (the collector first commits and closes its run.db), bring back that run.db and the
    logs, undo its changes (the fault chain, the congestion-control routes), remove its directories.
    Returns True when every node was reached and everything is gone."""
    remote = data.get("remote") or {}
    params = {n: SshParams(**p) for n, p in (remote.get("nodes") or {}).items()}
    if not params:
        return True
    nodes: dict[str, SshNode] = {}
    complete = True
    for name, p in params.items():
        conn = Connection(p)
        try:
            conn.connect()
        except UserError as e:
            say(f"cleanup: {e}; run `nestlab cleanup` again when it is reachable")
            complete = False
            continue
        nodes[name] = SshNode(name, conn, None, "/")
        nodes[name].use_server = True
    # Stopped before anything is copied: a run.db copied while the collector writes can be stale or torn.
    killed = stop_recorded(nodes, remote.get("processes", []), say)
    rd = RunDir(Path(data["run_dir"]))
    salvages = remote.get("salvages") or ([{**remote["salvage"], "kind": "collector"}] if remote.get("salvage") else [])
    bring_back(nodes, salvages, rd, say)
    for entry in remote.get("undo", []):
        node = nodes.get(entry["node"])
        if node is not None:
            node.run(entry["argv"], check=False)
    for entry in remote.get("paths", []):
        node = nodes.get(entry["node"])
        if node is not None:
            node.run(["rm", "-rf", "--", entry["path"]], check=False)
    for node in nodes.values():
        node.close()
        node.conn.close()
    say(f"cleanup: run {data['run_id']}: {killed} remote process group(s) killed on "
        f"{', '.join(sorted(nodes)) or 'no node'}")
    return complete
