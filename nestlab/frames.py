"""The frames `nestlab dump` writes (docs/api.md), for other tools (pandas, R, DuckDB): the API's frames
with a `run` column first in every table, so that the tables of many runs concatenate, and one dtype
per column whatever a run holds (an empty table, a column all NULL, an older format's missing
column): whole numbers as nullable Int64, measurements as float64, flags as bool, the rest as text.
"""

from __future__ import annotations

import pandas as pd

from rundir.db import TCP_STATE_COLUMNS

INTS = {"id", "spec_index", "target_module", "workload", "seq", "module", "parent", "child", "pid", "exit_code",
        "fault", "burst", "sport", "rtt_us", "rttvar_us", "backoff", "ca_state", "retransmits", "probes", "rto_us",
        "rcv_rtt_us"}
FLOATS = {"born", "died", "mono", "start", "end", "planned_start", "planned_duration", "started", "ended", "tm",
          "wait", "queued", "errors", "cf", "sent", "done", "rtt_ms", "data_sent_at", "data_recv_at", "ack_recv_at"}
BOOLS = {"has_wait", "has_queue", "has_errors", "invalid", "positive", "actual", "exclude"}
TCP_INFO_COLUMNS = ("seq", "module", "rtt_us", "rttvar_us", *TCP_STATE_COLUMNS, "rcv_rtt_us")


def dump_frames(run, variants: list[str], policy: str | None) -> dict[str, pd.DataFrame]:
    """The frames one run is dumped as, by file name."""
    tcp_info = run.tcp_info if run.tcp_info is not None else pd.DataFrame(columns=list(TCP_INFO_COLUMNS))
    frames = {"modules": run.modules, "snapshots": run.snapshots, "counters": run.counters, "faults": run.faults,
              "edges": run.data.edges, "processes": run.data.processes, "diagnosis": run.diagnose(variants),
              "labels": run.labels(policy), "tcp_info": tcp_info.reindex(columns=list(TCP_INFO_COLUMNS)),
              "probes": run.probes}
    return {name: typed(frame, run.name) for name, frame in frames.items()}


def typed(frame: pd.DataFrame, run: str) -> pd.DataFrame:
    """`frame` (its index as columns) with `run` first and each column in its one dtype."""
    frame = frame.reset_index() if frame.index.name is not None else frame.reset_index(drop=True)
    out = {"run": pd.Series([run] * len(frame), dtype="string")}
    for col in frame.columns:
        s = frame[col]
        if col in INTS:
            num = pd.to_numeric(s, errors="coerce")
            whole = num.dropna()
            out[col] = num.astype("Int64") if (whole == whole.round()).all() else num.astype(float)
        elif col in FLOATS:
            out[col] = pd.to_numeric(s, errors="coerce").astype(float)
        elif col in BOOLS:
            out[col] = s.fillna(False).astype(bool)
        else:   # text (categories as their labels), NA where missing; dicts and lists stay for the writer
            values = [None if _missing(v) else (v if isinstance(v, dict | list | tuple) else str(v))
                      for v in s.astype(object)]
            nested = any(isinstance(v, dict | list | tuple) for v in values)
            out[col] = pd.Series(values, dtype=object if nested else "string")
    return pd.DataFrame(out)


def _missing(v) -> bool:
    return v is None or (not isinstance(v, dict | list | tuple) and pd.isna(v))
