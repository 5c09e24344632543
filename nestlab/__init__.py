"""nestlab: the composition layer on top of the lab (harness/) and the analysis (analysis/).

It holds the command line (`run-experiment`, `nestlab ...`: nestlab.cli and nestlab.commands), the
Python API (nestlab.api: `nestlab.open_run(...)`, docs/api.md), and is
the only place that wires the lab to the analysis: a run's summary, a suite's per-run scores and the
live progress view are the analysis's, handed to the harness as observers (nestlab.observers).
"""

from rundir import __version__

__all__ = ["StoredRun", "__version__", "accuracy_of", "open_run", "open_runs", "score"]


def __getattr__(name: str):
    """The Python API (nestlab.api), imported when first used: `import nestlab` alone stays light for
    the command line."""
    if name in ("StoredRun", "accuracy_of", "open_run", "open_runs"):
        from nestlab import api

        return getattr(api, name)
    if name == "score":
        from nestlab.scoring import score

        return score
    raise AttributeError(f"module 'nestlab' has no attribute {name!r}")
