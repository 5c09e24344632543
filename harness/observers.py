"""What the layer on top (nestlab.observers) plugs into a run or a suite. The harness calls these and
never imports the analysis: the live line under the progress line, the report at the end of a run,
a run's headline scores in the suite's summary and the suite's pooled tables all come in from above,
as callables, and go out as values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass
class Headline:
    """A run's headline scores (the default variant, both directions): rates in %, None undefined."""

    tcp_tpr: float | None = None
    tcp_fpr: float | None = None
    tcp_ppv: float | None = None
    app_tpr: tuple[float, ...] = ()    # the TPR of each application row with one (iperf, wget)
    # which modules the three rates are of: "TCP" (a network run's TCP connections) or "conn" (a
    # streams run's stream connections, docs/streams.md)
    scope: str = "TCP"


class LiveLine(Protocol):
    """The progress view's second line, refreshed about once a second while a run records."""

    def refresh(self) -> None: ...

    def line(self, width: int = 160) -> str: ...

    def close(self) -> None: ...


@dataclass
class Observers:
    """Each is optional: without it the run goes on without that view or report."""

    # (run directory being recorded, warn(message)) -> its live line. Anything going wrong in it must
    # not touch the run: it warns once and goes quiet.
    live: Callable[[Path, Callable[[str], None]], LiveLine] | None = None
    # (a run just finished, quiet) -> its headline; writes <run>/analysis/. quiet: a suite's run, whose
    # tables go into <run>/logs/analysis.log instead of the terminal.
    report: Callable[[Path, bool], Headline | None] | None = None
    # a stored run -> its headline (a suite's runs kept by --resume)
    scores: Callable[[Path], Headline | None] | None = None
    # (a suite's complete runs, the suite directory) -> its tables, written to <suite>/analysis/
    pooled: Callable[[list[Path], Path], None] | None = None


NONE = Observers()
