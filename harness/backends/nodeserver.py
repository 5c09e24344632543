"""The command server the SSH backend runs on each testbed node (`python3 -u -c <this file>`).

Standard library only: it runs before anything but Python is installed. It reads one JSON request per
line on stdin and answers one JSON line on stdout, in order, with the request's "id"; no request goes
through a shell.

    {"op": "run", "argv": [...], "input": str|null, "timeout": s}  -> {"rc", "out", "err"}  (rc null: timed out)
    {"op": "spawn", "argv": [...], "cwd": dir, "log": file, "env": {...}}
                                                  -> {"pid", "start"}  (a new session: pid = process group)
    {"op": "kill", "pid": n, "start": t, "sig": n} -> {"sent": bool}  (group and process, if pid is still
                                                     the process started at t, field 22 of /proc/pid/stat)
    {"op": "clock"}                               -> {"t": CLOCK_MONOTONIC seconds, read in-process}

When a spawned process ends, a line "exit <pid> <code>" is written to stderr (code < 0: killed by
that signal), so the runner learns of it without asking. The server ends at the end of its input;
processes it spawned live on (they are in their own sessions) until killed.
"""

import json
import os
import subprocess
import sys
import threading
import time

_err_lock = threading.Lock()


def start_time(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2:].split()[19].decode()


def _reap(proc):
    code = proc.wait()
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
    threading.Thread(target=_reap, args=(proc,), daemon=True).start()
    return {"pid": proc.pid, "start": start_time(proc.pid)}


def kill(q):
    pid = int(q["pid"])
    if start_time(pid) != q.get("start"):
        return {"sent": False}
    sent = False
    for fn in (os.killpg, os.kill):
        try:
            fn(pid, int(q["sig"]))
            sent = True
        except (ProcessLookupError, PermissionError):
            pass
    return {"sent": sent}


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
