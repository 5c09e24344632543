"""The live diagnosis in run-experiment's progress view: which modules are STALLED now (default variant)
and the faults in force, as a second line under the progress line (analysis.live; docs/live.md).

The runner refreshes it about once a second in its main loop; a refresh reads only what the collector
wrote since the last one (a few ms). Anything going wrong here must not touch the run: the first
error turns the live diagnosis off for the rest of the run and becomes one warning.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from analysis.live import LiveEngine


def printable(text: str) -> str:
    """`text` safe for a terminal: control characters (an escape sequence in a module name or a
    manifest string, a newline) shown as \\xNN instead of acting on the terminal."""
    return text if text.isprintable() else "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


class LiveProgress:
    """A harness.observers.LiveLine over the run directory `path` being recorded; `warn(message)`
    records a warning of the run."""

    def __init__(self, path: Path, warn: Callable[[str], None]):
        self.path, self.warn = path, warn
        self.engine: LiveEngine | None = None
        self.view = None
        self.off = False

    def __enter__(self) -> LiveProgress:
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    def refresh(self) -> None:
        if self.off:
            return
        try:
            if self.engine is None:
                self.engine = LiveEngine(self.path)
            self.view = self.engine.refresh()
        except Exception as e:  # noqa: BLE001 - the run goes on without it
            self.off = True
            self.view = None
            self.close()
            self.warn(f"live diagnosis turned off: {type(e).__name__}: {e}")

    def line(self, width: int = 160) -> str:
        """`  STALLED at t 12.3 s: <module> (<dir> <for>), ... | <fault kind> <target> <left> s left`,
        the newest stalls first, cut to `width`."""
        v = self.view
        if v is None or v.mono is None:
            return ""
        t = v.mono - v.t0 if isinstance(v.t0, int | float) else 0.0
        stalled = sorted(v.stalled, key=lambda r: (r.stalled_s or 0.0))
        names = [printable(f"{r.name} ({r.dir} {r.stalled_s or 0:.1f} s)") for r in stalled]
        faults = [f"{f.kind} {f.target}" + ("" if f.left(v.now) is None else f" {max(0.0, f.left(v.now)):.1f} s left")
                  for f in v.faults]
        tail = printable(" | " + "; ".join(faults)) if faults else ""   # names from the run: never escapes
        expected = len(v.by_design)   # hidden: they say nothing about a fault (nestlab top --all lists them)
        tail += f" (+{expected} by design)" if expected else ""
        head = f"  STALLED at t {t:.1f} s: "
        if not names:
            return (head + "none" + tail)[:width]
        shown = names[:]
        while True:
            more = len(names) - len(shown)
            text = head + ", ".join(shown) + (f" +{more} more" if more else "") + tail
            if len(text) <= width or len(shown) <= 1:
                return text[:width]
            shown.pop()
