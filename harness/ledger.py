"""The ledger of a run: a record, kept on disk while the run goes on, of everything it made.

While a run goes on, its ledger (/run/nestlab/<run-id>.json for root; see _ledger_dir) lists every
process group, Mininet shell, link and scratch directory it created, and on testbed nodes (the SSH
backend) how to reach each node, the remote process groups (node, pid, start time), the changes to
undo (the fault chain on a router) and the remote directories. Normal teardown empties and deletes it;
a run killed with SIGKILL leaves it behind for `nestlab cleanup` (harness/clean.py). A process is
known by its pid and its start time (pids get reused): `alive` and `kill_group` check both.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import threading
import time
from pathlib import Path

from rundir.errors import UserError


def _ledger_dir() -> Path:
    """/run/nestlab for root; a user running an SSH experiment (no root needed on the runner's
    machine) keeps ledgers in $XDG_RUNTIME_DIR/nestlab or ~/.local/state/nestlab. NESTLAB_LEDGER_DIR
    overrides both."""
    if "NESTLAB_LEDGER_DIR" in os.environ:
        return Path(os.environ["NESTLAB_LEDGER_DIR"])
    return _default_dir()


def _default_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/run/nestlab")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "nestlab" if runtime else Path.home() / ".local" / "state" / "nestlab"


LEDGER_DIR = _ledger_dir()
PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600


def untrusted(st: os.stat_result, kind: str) -> str | None:
    """Why a ledger directory (kind "directory") or ledger file ("file") with lstat/fstat result `st`
    cannot be trusted, or None: it must be a real directory or regular file (not a symbolic link),
    belong to the user running this, and be writable by nobody else. `nestlab cleanup` kills, deletes
    and removes what a ledger lists, so a ledger someone else could write is not acted on."""
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not (stat.S_ISDIR if kind == "directory" else stat.S_ISREG)(st.st_mode):
        return f"it is not a {kind}"
    if st.st_uid != os.geteuid():
        return f"it belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return f"others may write it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _private_dir(path: Path) -> None:
    """The ledger directory: created with mode 700 whatever the umask; one that exists must be a
    directory of this user that nobody else may write (one of the default places, always named by
    nestlab, is made private as well)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, PRIVATE_DIR)
        os.chmod(path, PRIVATE_DIR)   # the umask may have taken bits away: exactly 700
    except FileExistsError:
        if path == _default_dir():   # nestlab's own place: only ledgers are kept there
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
                os.chmod(path, PRIVATE_DIR)
    problem = untrusted(os.lstat(path), "directory")
    if problem:
        raise UserError(f"cannot keep the run's ledger in {path}: {problem}; set NESTLAB_LEDGER_DIR to a "
                        "directory of yours that only you may write")


def _proc_start_time(pid: int) -> int | None:
    """Process start time in clock ticks since boot: with the pid, a unique process identity."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def alive(pid: int, start_time: int | None = None) -> bool:
    st = _proc_start_time(pid)
    return st is not None and (start_time is None or st == start_time)


class Ledger:
    def __init__(self, run_id: str, run_dir: Path):
        try:
            _private_dir(LEDGER_DIR)
        except OSError as e:
            raise UserError(f"cannot keep the run's ledger in {LEDGER_DIR}: {e.strerror}; "
                            "set NESTLAB_LEDGER_DIR to a writable directory") from None
        self._lock = threading.RLock()
        self.path = LEDGER_DIR / f"{run_id}.json"
        self.data = {"run_id": run_id, "run_dir": str(run_dir), "runner_pid": os.getpid(),
                     "runner_start": _proc_start_time(os.getpid()), "processes": [], "links": [], "paths": []}
        self._save()

    def _save(self) -> None:
        with self._lock:   # the SSH backend records from several threads at once
            tmp = self.path.with_suffix(".tmp")
            tmp.unlink(missing_ok=True)
            # Mode 600 whatever the umask: created so (O_EXCL: never through a name already there), and set.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE)
            try:
                os.fchmod(fd, PRIVATE_FILE)
                with os.fdopen(fd, "w") as f:
                    fd = -1
                    f.write(json.dumps(self.data, indent=1))
            finally:
                if fd >= 0:
                    os.close(fd)
            os.replace(tmp, self.path)

    def add_process(self, pid: int, what: str) -> None:
        self.data["processes"].append({"pid": pid, "start": _proc_start_time(pid), "what": what})
        self._save()

    def drop_process(self, pid: int) -> None:
        self.data["processes"] = [p for p in self.data["processes"] if p["pid"] != pid]
        self._save()

    def add_links(self, names: list[str]) -> None:
        self.data["links"].extend(names)
        self._save()

    def add_path(self, path: Path | str) -> None:
        """A scratch directory of the run (served files, interceptor shared memory)."""
        self.data["paths"].append(str(path))
        self._save()

    def add_sysctl(self, name: str, value: str) -> None:
        """A machine-wide sysctl the run changed for a moment, with the value to put back."""
        self.data.setdefault("sysctls", {})[name] = value
        self._save()

    def add_cgroup(self, path: Path | str) -> None:
        """A cgroup the run made (the `slow` fault kind): emptied and removed by `nestlab cleanup`."""
        self.data.setdefault("cgroups", []).append(str(path))
        self._save()

    def drop_cgroup(self, path: Path | str) -> None:
        self.data["cgroups"] = [c for c in self.data.get("cgroups", []) if c != str(path)]
        self._save()

    def drop_sysctl(self, name: str) -> None:
        self.data.get("sysctls", {}).pop(name, None)
        self._save()

    # -- testbed nodes (harness.backends.ssh; called from several threads) ------------------------
    def _remote(self) -> dict:
        return self.data.setdefault("remote", {"nodes": {}, "processes": [], "undo": [], "paths": [],
                                               "salvage": None})

    def add_remote_node(self, node: str, params: dict) -> None:
        """How to reach a node again (host, port, user, key, known_hosts, sudo), for `cleanup`."""
        with self._lock:
            self._remote()["nodes"][node] = params
            self._save()

    def add_remote_process(self, node: str, pid: int, start: str, what: str) -> None:
        with self._lock:
            self._remote()["processes"].append({"node": node, "pid": pid, "start": start, "what": what})
            self._save()

    def drop_remote_process(self, node: str, pid: int) -> None:
        with self._lock:
            r = self._remote()
            r["processes"] = [p for p in r["processes"] if (p["node"], p["pid"]) != (node, pid)]
            self._save()

    def add_undo(self, node: str, argv: list[str], what: str) -> None:
        """A command that undoes a change made on a node (run by teardown, or by `cleanup`)."""
        with self._lock:
            self._remote()["undo"].append({"node": node, "argv": list(argv), "what": what})
            self._save()

    def drop_undo(self, entry: dict) -> None:
        with self._lock:
            r = self._remote()
            r["undo"] = [u for u in r["undo"] if u != entry]
            self._save()

    def add_remote_path(self, node: str, path: str) -> None:
        with self._lock:
            self._remote()["paths"].append({"node": node, "path": path})
            self._save()

    def drop_remote_path(self, node: str, path: str) -> None:
        with self._lock:
            r = self._remote()
            r["paths"] = [p for p in r["paths"] if (p["node"], p["path"]) != (node, path)]
            self._save()

    def set_salvage(self, node: str, db: str, logs: str, kind: str = "collector") -> None:
        """Where a collector's run.db (kind `collector`) or a drainer's trace (`trace`) and the node's logs
        are, so that `cleanup` can bring them back: one entry per node and kind in `salvages`, the first
        collector's also as `salvage` (what ledgers before several nodes held)."""
        with self._lock:
            r = self._remote()
            entry = {"node": node, "db": db, "logs": logs, "kind": kind}
            r["salvages"] = [e for e in r.get("salvages", []) if (e["node"], e.get("kind")) != (node, kind)] + [entry]
            if kind == "collector" and r.get("salvage") is None:
                r["salvage"] = {"node": node, "db": db, "logs": logs}
            self._save()

    def drop_remote_nodes(self) -> None:
        with self._lock:
            self.data.pop("remote", None)
            self._save()

    def remote_leftovers(self) -> bool:
        r = self.data.get("remote") or {}
        return bool(r.get("processes") or r.get("undo") or r.get("paths"))

    def close(self) -> None:
        """Delete the ledger: everything it lists is gone. Kept when testbed nodes still hold
        something (a node went away during teardown), or a machine-wide sysctl is still changed:
        `nestlab cleanup` retries."""
        if self.remote_leftovers() or self.data.get("sysctls"):
            self.data["runner_pid"] = -1   # no runner any more: cleanup may act on it
            self._save()
            return
        self.path.unlink(missing_ok=True)


HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_held():
    """Hold off SIGINT/SIGTERM/SIGHUP while a process is started and recorded: a signal in between
    would leave a process that teardown does not know about. They are delivered on exit.

    In the main thread (where Python runs every signal handler) they are deferred by a handler
    that notes them, not blocked: a blocked mask survives fork and exec, so every program started
    inside would need Popen's preexec_fn to unblock it, and preexec_fn rules out vfork (a start
    took ~200 ms instead of ~40 ms with 16 monitored hosts: 64 mesh clients held the fault
    schedule up by 20 s). Elsewhere they are blocked in the calling thread, as before."""
    if threading.current_thread() is not threading.main_thread():
        old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return
    pending: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _frame: pending.append(signum)) for s in HELD_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        for s in dict.fromkeys(pending):   # once each, to the handlers restored (or an outer hold)
            signal.raise_signal(s)


def held_mask_preexec():
    """Popen's preexec_fn for a program started under signals_held(): unblock_held_signals where
    this thread blocks them (then the child must not keep the mask), else None (Popen may vfork)."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    return unblock_held_signals if any(s in blocked for s in HELD_SIGNALS) else None


def unblock_held_signals() -> None:
    """For Popen's preexec_fn: a program started with the held signals blocked must not keep the
    mask, which survives exec. It would never see SIGTERM: teardown waited out every stop timeout
    and then SIGKILLed it (the collector lost its last write, each wget took 3 s to stop)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)


def kill_group(pid: int, start_time: int | None, timeout: float = 2.0) -> bool:
    """SIGTERM then SIGKILL the process group led by pid (only if pid is still that process)."""
    if not alive(pid, start_time):
        return False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for kill in (os.killpg, os.kill):  # the group, and the process if it left its group
            try:
                kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and alive(pid, start_time):
            try:  # reap it if it is our child
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.02)
        if not alive(pid, start_time):
            return True
    return not alive(pid, start_time)
