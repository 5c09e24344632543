"""One run at a time on a machine: runs share the machine's network (one Mininet network at a time)
and the ledger directory, so a run or a suite holds an exclusive lock on `run.lock` in the ledger
directory for as long as it goes on. A second one is refused in one line naming the first. The lock
is the kernel's (flock): a runner that dies, even by SIGKILL, releases it.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from harness import ledger
from rundir.errors import UserError

LOCK_FILE = "run.lock"


@contextmanager
def machine_lock(what: str) -> Iterator[None]:
    """Hold the machine's run lock while the block runs; `what` (a spec or suite file) names this
    run to a second one. UserError (one line) when another run holds it."""
    directory = ledger.LEDGER_DIR
    ledger._private_dir(directory)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"another run is going on on this machine: {_holder(fd)}; one run at a time "
                            "(they share the network and the ledger): wait for it, or stop it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"what": what, "pid": os.getpid(), "since": time.time()}).encode(), 0)
        yield
    finally:
        os.close(fd)   # releases the lock


def _holder(fd: int) -> str:
    """The run holding the lock, as it described itself."""
    try:
        held = json.loads(os.pread(fd, 4096, 0) or b"{}")
        since = time.strftime("%H:%M:%S", time.localtime(float(held["since"])))
        return f"{held['what']} (pid {int(held['pid'])}, since {since})"
    except (OSError, ValueError, KeyError, TypeError):
        return "a run that did not say which"
