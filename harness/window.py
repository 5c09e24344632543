"""A planned fault window (a network fault's or a streams setting's): when it starts and how long it
holds, run-relative. Its own module so that network and streams specs share it without importing
each other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """A planned fault: spec_index into spec.faults, start and duration in run-relative seconds, and
    the recovery margin kept free after it on everything it touches."""

    spec_index: int
    start: float
    duration: float
    recovery: float = 0.0

    @property
    def end(self) -> float:
        return self.start + self.duration

    @property
    def reserved_until(self) -> float:
        """The end of the window's recovery margin (docs/schedules.md)."""
        return self.end + self.recovery
