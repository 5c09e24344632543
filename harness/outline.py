"""A run's outline, used by the run loop (harness.runner) for every lab kind (harness.lab): the
signals that interrupt it, the failure that ends a recording (a lab's check raises it), and
guarded_run, which turns whatever happens into a status (complete, interrupted, failed), tears down
and records it."""

from __future__ import annotations

import signal
import traceback
from pathlib import Path

from rundir.errors import UserError


class RecordingStopped(Exception):
    """The collector exited or stopped writing snapshots while the run went on: the run fails, since
    what it would score from then on was never recorded."""


class Interrupted(BaseException):
    """SIGTERM/SIGHUP, raised wherever the run is. A BaseException, like KeyboardInterrupt, so that no
    `except Exception` on the way (ending a fault, starting a workload) swallows it."""

    def __init__(self, reason: str, code: int):
        super().__init__(reason)
        self.reason, self.code = reason, code


def _raise_interrupted(signum, frame):
    name = signal.Signals(signum).name
    raise Interrupted(f"received {name}", 128 + signum)


def guarded_run(body, teardown, logs: Path) -> int:
    """A run's outline, the same for every lab kind: body() with SIGTERM and SIGHUP raising
    Interrupted; then, whatever happened, teardown(status, reason) (complete, interrupted or failed,
    with why), the handlers put back, and a UserError raised again for its one-line message. Returns
    the exit code (128 + signal when interrupted)."""
    old = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGHUP)}
    status, reason, code, user_error = "complete", None, 0, None
    try:
        body()
    except Interrupted as e:
        status, reason, code = "interrupted", e.reason, e.code
    except KeyboardInterrupt:
        status, reason, code = "interrupted", "received SIGINT", 130
    except UserError as e:
        status, reason, code, user_error = "failed", str(e), 2, e
    except RecordingStopped as e:
        status, reason, code = "failed", f"recording stopped: {e}", 1
    except Exception as e:  # noqa: BLE001 - any failure must still tear down and be recorded
        status, reason, code = "failed", f"{type(e).__name__}: {e}", 1
        (logs / "runner-traceback.txt").write_text(traceback.format_exc())
    try:
        teardown(status, reason)
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for s, h in old.items():
            signal.signal(s, h)
    if user_error is not None:
        raise user_error
    return code
