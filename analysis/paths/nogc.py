"""Pausing Python's cyclic garbage collector while a black-box algorithm or an import runs (issue 43,
throughput).

They allocate millions of small containers (tuples of links, dicts of pattern sums, decoded spans),
few of which form reference cycles; each allocation burst triggers collections that walk every live
container again, the loaded trace's among them: a tenth of the time on the TraceWeaver artifact's
sets. Reference counting still frees everything that is not a cycle; the few cycles made meanwhile
(a recursive closure per pattern text) are collected once the collector is back on."""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

F = TypeVar("F", bound=Callable)


@contextmanager
def paused() -> Iterator[None]:
    """The collector off inside (if it was on: nested pauses leave it to the outermost)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def without_gc(fn: F) -> F:
    """`fn`, run with the collector paused (its attributes, e.g. DEFAULTS, kept)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with paused():
            return fn(*args, **kwargs)
    return run  # type: ignore[return-value]
