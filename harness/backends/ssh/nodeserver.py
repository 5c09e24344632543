"""The command server the SSH backend runs on each testbed node (`python3 -u -c <this file>`).

Standard library only: it runs before anything but Python is installed. It reads one JSON request per
line on stdin and answers one JSON line on stdout, in order, with the request's "id"; no request goes
through a shell.

    {"op": "run", "argv": [...], "input": str|null, "timeout": s}  -> {"rc", "out", "err"}  (rc null: timed out)
    {"op": "spawn", "argv": [...], "cwd": dir, "log": file, "env": {...}}
                                                  -> {"pid", "start"}  (a new session: pid = process group)
    {"op": "kill", "pid": n, "start": t, "sig": n, "group": bool}
                                                  -> {"sent": bool}  (see below; sig 0: does it live on?)
    {"op": "clock"}                               -> {"t": CLOCK_MONOTONIC seconds, read in-process}

kill signals process group pid and process pid (only the process with "group": false) if pid is still
the process started at t (field 22 of /proc/pid/stat). Once that leader has exited, the members it
left in its group (a shell's children) are still signalled, as a group, if this server spawned the
group or signalled it while its leader lived (it records pgid and leader start time), and while some
process of the group is left (the kernel does not reuse a pid while it names a process group; a
process that now has the pid means the group is gone). The server ends at the end of its input;
processes it spawned live on (they are in their own sessions) until killed.

When a spawned process ends, a line "exit <pid> <code>" is written to stderr (code < 0: killed by
that signal), so the runner learns of it without asking.
"""

import json
import os
import subprocess
import sys
import threading
import time

_err_lock = threading.Lock()
_groups = {}                  # pgid -> start time of its leader: the groups this server may sweep
_groups_lock = threading.Lock()


def _stat(pid):
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2:].split()


def start_time(pid):
    f = _stat(pid)
    return f[19].decode() if f else None


def members(pgid):
    """The live (not zombie) processes of process group pgid."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            f = _stat(name)
            if f and f[0] != b"Z" and int(f[2]) == pgid:
                out.append(int(name))
    return out


def _reap(proc):
    code = proc.wait()
    if not members(proc.pid):   # nothing left of the group: it cannot come back, forget it
        with _groups_lock:
            _groups.pop(proc.pid, None)
    with _err_lock:
        sys.stderr.write(f"exit {proc.pid} {code}\n")
        sys.stderr.flush()


def run(q):
    try:
        r = subprocess.run(q["argv"], input=(q.get("input") or "").encode(), capture_output=True,
                           timeout=q.get("timeout"))
    except subprocess.TimeoutExpired:
        return {"rc": None, "out": "", "err": "timed out"}
    except OSError as e:
        return {"rc": 127, "out": "", "err": str(e)}
    return {"rc": r.returncode, "out": r.stdout.decode(errors="replace"), "err": r.stderr.decode(errors="replace")}


def spawn(q):
    try:
        log = open(q.get("log") or os.devnull, "ab")
    except OSError as e:
        return {"error": f"log {q.get('log')}: {e}"}
    try:
        proc = subprocess.Popen(q["argv"], cwd=q.get("cwd") or "/", stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, **(q.get("env") or {})})
    except OSError as e:
        return {"error": str(e)}
    finally:
        log.close()
    start = start_time(proc.pid)
    if start:
        with _groups_lock:
            _groups[proc.pid] = start
    threading.Thread(target=_reap, args=(proc,), daemon=True).start()
    return {"pid": proc.pid, "start": start}


def kill(q):
    pid, start, sig, group = int(q["pid"]), q.get("start"), int(q["sig"]), q.get("group", True)
    if not start:
        return {"sent": False}
    now = start_time(pid)
    if now == start:   # the leader is still the process we were told about
        if group:
            with _groups_lock:
                _groups[pid] = start
        sent = False
        for fn in (os.killpg, os.kill) if group else (os.kill,):
            try:
                fn(pid, sig)
                sent = True
            except (ProcessLookupError, PermissionError):
                pass
        return {"sent": sent}
    with _groups_lock:
        known = _groups.get(pid) == start
        if known and (now is not None or not members(pid)):   # pid reused, or the group is gone
            del _groups[pid]
            known = False
    if not (group and known):
        return {"sent": False}
    try:
        os.killpg(pid, sig)   # the leader has exited; the members it left behind have not
    except (ProcessLookupError, PermissionError):
        return {"sent": False}
    return {"sent": True}


def clock(q):
    return {"t": time.clock_gettime(time.CLOCK_MONOTONIC)}


OPS = {"run": run, "spawn": spawn, "kill": kill, "clock": clock}


def main():
    for line in sys.stdin:
        q = {}
        try:
            q = json.loads(line)
            a = OPS[q["op"]](q)
        except Exception as e:  # noqa: BLE001 - answered, never fatal
            a = {"error": f"{type(e).__name__}: {e}"}
        a["id"] = q.get("id") if isinstance(q, dict) else None
        sys.stdout.write(json.dumps(a) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
