"""nestlab: the composition layer on top of the lab (harness/) and the analysis (analysis/).

It holds the command line (`run-experiment`, `nestlab ...`: nestlab.cli and nestlab.commands) and is
the only place that wires the lab to the analysis: a run's summary, a suite's per-run scores and the
live progress view are the analysis's, handed to the harness as observers (nestlab.observers).
"""

from rundir import __version__

__all__ = ["__version__"]
