"""The default of `--jobs` for the commands that spread work over processes (accuracy, compare,
plots and report over runs; paths over algorithms): every core this process may use."""

from __future__ import annotations

import os


def cores() -> int:
    """The cores this process may run on (its affinity; the machine's count where that is unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
