"""matplotlib, imported when a figure is first drawn: the Agg backend, and labels as plain text (names
from the run: modules, nodes, commands; '$x$' is not math here).

matplotlib costs about 0.4 s to import, most of a short command's start (`nestlab accuracy` draws
nothing): the modules that draw (analysis.render.plots, analysis.render.html.figures) take `plt` from
here, which imports pyplot on its first use.
"""

from __future__ import annotations

import warnings
from typing import Any

_pyplot: Any = None


def pyplot() -> Any:
    """matplotlib.pyplot, set up (Agg, no TeX) on the first call."""
    global _pyplot
    if _pyplot is None:
        import matplotlib

        matplotlib.use("Agg")
        matplotlib.rcParams["text.parse_math"] = False
        import matplotlib.pyplot as plt

        _pyplot = plt
    return _pyplot


class _Pyplot:
    """Stands for matplotlib.pyplot: any attribute imports it."""

    def __getattr__(self, name: str) -> Any:
        return getattr(pyplot(), name)


plt = _Pyplot()


def tight(fig, **kw) -> None:
    """fig.tight_layout(**kw) (quietly: for very short runs matplotlib cannot always fit the margins),
    then without the placeholder layout engine it leaves, for which savefig draws the whole figure
    once more before drawing it (a third of a large figure's save; the layout is done and the drawing
    the same). The engine is kept when rcParams would make a new one."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout(**kw)
    rc = pyplot().rcParams
    if not (rc["figure.autolayout"] or rc["figure.constrained_layout.use"]):
        fig.set_layout_engine(None)
