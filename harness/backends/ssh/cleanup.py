"""Cleaning up after a killed run on testbed nodes (the `remote` part of its ledger), for
`nestlab cleanup`: stop the recorded processes, bring back what the collector recorded and the logs,
run the undo commands (which the run wrote into the ledger), remove the run's directories."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from harness.backends.ssh.node import SCRATCH_MARK, SshNode
from harness.backends.ssh.provision import each
from harness.backends.ssh.retrieve import bring_back_recordings, fetch_logs
from harness.backends.ssh.transport import Connection, SshParams
from rundir.db import CHECKPOINT_SCRIPT, connect, snapshot_count
from rundir.errors import UserError
from rundir.layout import RunDir

STOP_WAIT_S = 10.0   # how long `cleanup` gives the recorded processes to end after SIGTERM

# Run on a node (as root) with the run's scratch directories there: the process groups of every
# process whose environment holds the run's mark (SshNode.start) get SIGTERM, then SIGKILL after 2 s
# what is left; never the group this script runs in (the command server's). Prints how many.
SWEEP_SCRIPT = f"""
import os, signal, sys, time
marks = {{("{SCRATCH_MARK}=" + p).encode() for p in sys.argv[1:]}}
mine = os.getpgid(0)
def marked():
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                with open(f"/proc/{{d}}/environ", "rb") as f:
                    env = set(f.read().split(b"\\0"))
            except OSError:
                continue
            if env & marks:
                out.add(int(d))
    return out
first = marked()
for sig in (signal.SIGTERM, signal.SIGKILL):
    for pid in marked():
        try:
            group = os.getpgid(pid)
            if group != mine:
                os.killpg(group, sig)
            os.kill(pid, sig)
        except OSError:
            pass
    deadline = time.monotonic() + 2
    while marked() and time.monotonic() < deadline:
        time.sleep(0.05)
print(len(first))
"""


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


def undo_all(nodes: dict[str, SshNode], entries: list[dict], done, failed) -> None:
    """Run the ledger's undo entries: each node's in the order they were written, the nodes at once
    (a fabric has hundreds: routes, sysctls, congestion-control routes on 36 nodes). done(entry)
    after each that ran; failed(entry, exception) for each that did not (check: a non-zero exit)."""
    by_node: dict[str, list[dict]] = {}
    for entry in entries:
        if entry["node"] in nodes:
            by_node.setdefault(entry["node"], []).append(entry)

    def undo(name: str) -> None:
        for entry in by_node[name]:
            try:
                nodes[name].run(entry["argv"], check=True)
            except Exception as e:  # noqa: BLE001 - the node's other entries still run
                failed(entry, e)
                continue
            done(entry)

    each(by_node, undo)


def sweep(nodes: dict[str, SshNode], paths: list[dict], say) -> int:
    """What the ledger does not list: a runner SIGKILLed between starting a process and writing it
    down leaves it running. Every process the run started carries its scratch directory in its
    environment (SshNode.start); SWEEP_SCRIPT ends their groups on each node. Returns how many."""
    swept = 0
    for name, node in nodes.items():
        mine = [e["path"] for e in paths if e["node"] == name]
        if not mine:
            continue
        try:
            r = node.run([node.p.python, "-c", SWEEP_SCRIPT, *mine], check=False, timeout=30)
            swept += int(r.stdout.strip() or 0)
        except Exception as e:  # noqa: BLE001 - the rest of the cleanup still matters
            say(f"cleanup: {name}: sweeping the run's unrecorded processes: {e}")
    return swept


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
    swept = sweep(nodes, remote.get("paths", []), say)
    rd = RunDir(Path(data["run_dir"]))
    salvages = remote.get("salvages") or ([{**remote["salvage"], "kind": "collector"}] if remote.get("salvage") else [])
    bring_back(nodes, salvages, rd, say)
    undo_all(nodes, remote.get("undo", []), done=lambda entry: None, failed=lambda entry, e: None)
    for entry in remote.get("paths", []):
        node = nodes.get(entry["node"])
        if node is not None:
            node.run(["rm", "-rf", "--", entry["path"]], check=False)
    for node in nodes.values():
        node.close()
        node.conn.close()
    say(f"cleanup: run {data['run_id']}: {killed} remote process group(s) killed on "
        f"{', '.join(sorted(nodes)) or 'no node'}" + (f", {swept} unrecorded process(es) swept" if swept else ""))
    return complete
