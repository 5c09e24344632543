"""A streams run's engine metrics as the analysis reads them (run format 6, docs/streams.md): Flink's
per-task time metrics (run.db's `stream_tasks`) and each stream connection's ends (the operators it
leads from and into). load_stretches reads them with the rest of the run (RunStretches.engine_metrics),
diagnose_stretches hands them to the variants in their Batch, and the engine's baseline
(analysis.variants.flink_backpressure) reads them there: a variant never opens the run itself.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

import pandas as pd

from rundir import streams
from rundir.db import STREAM_TASK_COLUMNS


@dataclass(frozen=True)
class EngineMetrics:
    # stream_tasks rows (rundir.db.STREAM_TASK_COLUMNS; rundir.streams.read_stream_tasks), sorted by
    # (operator, seq); empty when the run recorded none (a network run, a streams run before format 6)
    tasks: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=STREAM_TASK_COLUMNS))
    # per sconn module id: (upstream operator, downstream operator), None where the run does not say
    ends: dict[int, tuple[str | None, str | None]] = field(default_factory=dict)


def read_engine_metrics(conn: sqlite3.Connection, module_kinds) -> EngineMetrics:
    """A run's engine metrics, read through `conn` when it has stream connections (kind `sconn` among
    `module_kinds`); none otherwise (no stream connection: the baseline diagnoses nothing). Rows of
    stream_tasks left out for bad values are not reported: they are the baseline's input alone."""
    if not any(k == "sconn" for k in module_kinds):
        return EngineMetrics()
    return EngineMetrics(streams.read_stream_tasks(conn, []), streams.read_connection_ends(conn))
