"""`nestlab cleanup`: remove what runs that died left behind, as their ledgers list it.

A run killed with SIGKILL (or a crashed machine) leaves its ledger (harness/ledger.py) behind;
`cleanup` kills exactly those processes (after checking they are still what was recorded, since pids
get reused), deletes those links, and marks the run's manifest `interrupted`. For testbed nodes it
first stops the recorded processes, then brings back the collector's run.db and the logs, then undoes
and removes the same way, over SSH (harness/backends/ssh/cleanup.py); a node it cannot reach keeps the
ledger, so that `cleanup` can be run again. It never touches another live run or Mininet's other
users: unlike `mn -c`, it kills nothing by name pattern. It trusts a ledger only in a ledger directory
of the user running it that nobody else may write, and only if the ledger file, too, is that user's
and writable by nobody else (harness.ledger.untrusted): anything else is refused with one line and
left alone.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from harness import ledger
from harness.ledger import alive, kill_group, untrusted
from rundir.errors import UserError
from rundir.layout import RunDir
from rundir.manifest import ManifestError


def _mark_interrupted(run_dir: Path, reason: str) -> None:
    """A manifest still `running` (or without a status) becomes `interrupted` with `reason`; one that
    cannot be read, or would not fit the schema (rundir.manifest), is left as it is."""
    try:
        rd = RunDir.open(run_dir)
    except (OSError, ValueError):
        return
    if isinstance(rd.manifest, dict) and rd.status in (None, "running"):
        try:
            rd.update_manifest(status="interrupted", reason=reason)
        except ManifestError:
            pass


def _read_ledger(path: Path) -> tuple[dict | None, str | None]:
    """(the ledger's data, None), or (None, why it is not trusted). Opened without following a
    symbolic link, and checked on the open file: what is read is what was checked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None, "it is a symbolic link"
        return None, e.strerror or str(e)
    with os.fdopen(fd, "rb") as f:
        problem = untrusted(os.fstat(f.fileno()), "file")
        if problem:
            return None, problem
        try:
            data = json.loads(f.read())
        except (OSError, ValueError):
            return {}, None
    return (data if isinstance(data, dict) else {}), None


# The machine-wide settings a run may change for a moment (harness.backends.mininet.private_tcp_hash).
RESTORABLE_SYSCTLS = {"net.ipv4.tcp_child_ehash_entries"}


def cleanup(verbose: bool = False, include_live: bool = False) -> int:
    """Remove leftovers of runs whose runner is gone. Returns 0 (also when there was nothing), 2 when
    a ledger was refused (one line each on stderr, the ledger left alone). A ledger directory that
    is not a directory of the user running this, or that others may write, is refused as a whole
    (UserError): its ledgers could list anything to kill or delete."""
    def say(msg: str) -> None:
        if verbose:
            print(msg)

    where = ledger.LEDGER_DIR
    try:
        problem = untrusted(os.lstat(where), "directory")
    except FileNotFoundError:
        problem, where = None, None
    if problem:
        raise UserError(f"ledger directory {where}: {problem}; its ledgers are left alone")
    ledgers = sorted(where.glob("*.json")) if where is not None else []
    if not ledgers:
        say("cleanup: nothing to do")
        return 0
    refused = 0
    for path in ledgers:
        data, problem = _read_ledger(path)
        if problem:
            print(f"cleanup: refusing ledger {path}: {problem}; left alone", file=sys.stderr)
            refused += 1
            continue
        if not {"run_id", "run_dir", "runner_pid", "processes", "links"} <= set(data):
            path.unlink(missing_ok=True)   # not a ledger (or a torn one): as before, dropped
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
        for name, value in data.get("sysctls", {}).items():
            if name in RESTORABLE_SYSCTLS and str(value).isdigit():   # never an arbitrary write
                subprocess.run(["sysctl", "-qw", f"{name}={value}"], capture_output=True)
        for scratch in data.get("paths", []):
            shutil.rmtree(scratch, ignore_errors=True)
        for group in data.get("cgroups", []):
            remove_cgroup(group)
        _mark_interrupted(Path(data["run_dir"]), "runner died; cleaned up by `nestlab cleanup`")
        if complete:
            path.unlink(missing_ok=True)
        say(f"cleanup: run {data['run_id']}: {killed} process group(s) killed, {removed} link(s) removed")
    return 2 if refused else 0


def remove_cgroup(path: str, roots: Sequence[Path] | None = None) -> bool:
    """A run's cgroup (`slow`, on cgroup v2 or v1) emptied into its hierarchy's top cgroup and removed;
    only `<mount>/nestlab-*`, `<mount>` one of `roots` (default: this machine's cgroup mounts a CPU
    quota could be in, read from /proc/self/mountinfo)."""
    if roots is None:
        from harness.faults.cgroup import cpu_mounts

        roots = cpu_mounts()
    p = Path(path)
    root = p.parent
    if root not in [Path(r) for r in roots] or not p.name.startswith("nestlab-") or not p.is_dir():
        return False
    try:
        pids = (p / "cgroup.procs").read_text().split()
    except OSError:
        pids = []
    for pid in pids:
        try:
            (root / "cgroup.procs").write_text(pid)
        except OSError:
            pass   # exited meanwhile
    try:
        p.rmdir()
    except OSError:
        return False
    return True


def stale_ledgers() -> list[str]:
    """The run ids of ledgers whose runner is gone (a killed run's leftovers), for a new run to say so
    before it builds anything on top of them; ledgers that cannot be read are left to `cleanup`."""
    where = ledger.LEDGER_DIR
    found = []
    for path in sorted(where.glob("*.json")) if where.is_dir() else []:
        data, problem = _read_ledger(path)
        if problem is None and isinstance(data, dict) and "runner_pid" in data \
                and not alive(data["runner_pid"], data.get("runner_start")):
            found.append(str(data.get("run_id", path.stem)))
    return found


def refuse_on_leftovers() -> None:
    """UserError (one line) when a killed run left something behind: a new run would build on top of
    its links, rules and processes."""
    stale = stale_ledgers()
    if stale:
        raise UserError(f"a killed run left things behind ({', '.join(stale)}; ledgers in {ledger.LEDGER_DIR}): "
                        "run `nestlab cleanup` first")
