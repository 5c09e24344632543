"""The LD_PRELOAD interceptor: where the built library is and how to start a process under it.

The C source is next to this file (the .c files by concern, listed in internal.h; nestintercept.h is the
shared-memory format); `make -C harness/interceptor` builds libnestintercept.so from every .c file there
(scripts/setup.sh does it on install). Next to it, in Python: the reader
of the library's shared memory (harness.interceptor.shm), the reader of its message ring (harness.interceptor.ring) and the
pause/resume handshake (harness.interceptor.pause); the collector source of app and socket modules is
harness.collector.appsockets. docs/interceptor.md describes the whole thing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from rundir.errors import UserError

HERE = Path(__file__).resolve().parent
LIBRARY_NAME = "libnestintercept.so"

# Environment variables read by the library.
ENV_SHM_DIR = "NESTLAB_SHM_DIR"                # per-process counter files (unset: library inert)
ENV_COLLECTOR_SOCK = "NESTLAB_COLLECTOR_SOCK"  # Unix datagram socket for new process/socket hints
ENV_PAUSE_SIGNAL = "NESTLAB_PAUSE_SIGNAL"      # default SIGUSR1; 'none' disables pause/resume
ENV_RESUME_SIGNAL = "NESTLAB_RESUME_SIGNAL"    # default SIGUSR2; equal to the pause signal: toggle
ENV_MAX_FDS = "NESTLAB_MAX_FDS"                # slots per process (default 4096)
ENV_TRACE_EVENTS = "NESTLAB_TRACE_EVENTS"      # message tracing: events in each process's ring (unset: off)


def library_path() -> Path:
    """The built library, or a UserError that says how to build it."""
    lib = HERE / LIBRARY_NAME
    if not lib.is_file():
        raise UserError(f"the interceptor library {lib} is not built: run `make -C {HERE}` "
                        "(scripts/setup.sh does it; it needs gcc and make)")
    return lib


def build(quiet: bool = True) -> Path:
    """Run make in the source directory (a no-op when up to date) and return the library."""
    if shutil.which("make") is None:
        raise UserError("building the interceptor needs `make` (and gcc): apt-get install make gcc libc6-dev")
    r = subprocess.run(["make", "-s", "-C", str(HERE)], capture_output=True, text=True)
    if r.returncode != 0:
        raise UserError(f"building the interceptor failed (make -C {HERE}):\n{r.stderr.strip()}")
    if not quiet and r.stderr.strip():
        print(r.stderr.strip())
    return library_path()


def create_shm_dir(prefix: str = "nestlab-", base: str = "/dev/shm") -> Path:
    """A new run-specific directory for the counter files, mode 0700 (readable only by its owner)."""
    root = base if os.path.isdir(base) else None
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    os.chmod(path, 0o700)
    return path


def remove_shm_dir(path: str | os.PathLike) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _signame(sig: int | str | signal.Signals | None) -> str | None:
    if sig is None:
        return None
    if isinstance(sig, str):
        return sig
    return str(int(sig))


def preload_env(shm_dir: str | os.PathLike, collector_sock: str | os.PathLike | None = None,
                env: Mapping[str, str] | None = None, *,
                pause_signal: int | str | None = None, resume_signal: int | str | None = None,
                max_fds: int | None = None, trace_events: int | None = None) -> dict[str, str]:
    """The environment of a workload process run under the interceptor.

    Starts from `env` (default os.environ), puts the library first in LD_PRELOAD (keeping what was
    there) and sets the NESTLAB_* variables.
    """
    out = dict(os.environ if env is None else env)
    lib = str(library_path())
    rest = [p for p in out.get("LD_PRELOAD", "").replace(":", " ").split() if p and p != lib]
    out["LD_PRELOAD"] = " ".join([lib, *rest])
    out[ENV_SHM_DIR] = str(shm_dir)
    if collector_sock is not None:
        out[ENV_COLLECTOR_SOCK] = str(collector_sock)
    else:
        out.pop(ENV_COLLECTOR_SOCK, None)
    for key, val in ((ENV_PAUSE_SIGNAL, _signame(pause_signal)), (ENV_RESUME_SIGNAL, _signame(resume_signal))):
        if val is not None:
            out[key] = val
    if max_fds is not None:
        out[ENV_MAX_FDS] = str(int(max_fds))
    if trace_events:
        out[ENV_TRACE_EVENTS] = str(int(trace_events))
    else:
        out.pop(ENV_TRACE_EVENTS, None)
    return out
