"""The streams collector: every snapshot interval, the running job's per-port counters (our PEs'
nProcessed_inI / nSubmitted_outJ, registered as Flink metrics) and Flink's own task metrics, read
in one scrape of the TaskManager's Prometheus reporter, turned into per-connection counters (harness.streams.recovery) and written
into run.db as a snapshot: stream connections as modules, PEs as edges (docs/streams.md).

It runs as a thread of the runner (Flink serves the counters over HTTP on this machine; no process of
ours needs to sit beside the tasks). One scrape reads every task's counters within milliseconds of
each other; Flink's REST API serves them per task from a store refreshed in the background, and
there the counters of adjacent PEs were seen a whole second apart (4.3.2's negative queues).
"""

from __future__ import annotations

import json
import re
import threading
import time
import traceback
import urllib.request
from pathlib import Path

from harness.streams.graph import Graph
from harness.streams.recovery import Recovery
from rundir.db import connect, monotonic
from rundir.layout import RunDir
from rundir.snapshots import SnapshotWriter

# Flink's task metrics recorded for the engine's own back-pressure reading (the baseline).
TASK_METRICS = ("busyTimeMsPerSecond", "backPressuredTimeMsPerSecond", "idleTimeMsPerSecond",
                "accumulateBusyTimeMs", "accumulateBackPressuredTimeMs", "accumulateIdleTimeMs",
                "numRecordsIn", "numRecordsOut")


_SAMPLE = re.compile(r"^(flink_taskmanager_job_task_\w+)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_SOURCE = re.compile(r"^Source:?[_ ]?")
# The reporter is on loopback: never through an http_proxy / HTTP_PROXY the environment names (urlopen
# would send the scrape, and what it reads, through whatever proxy that is).
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class StreamsCollector(threading.Thread):
    def __init__(self, ports: tuple[int, ...], graph: Graph, db_path: Path, interval: float):
        super().__init__(name="streams-collector", daemon=True)
        self.ports, self.graph = ports, graph
        self.db_path, self.interval = db_path, interval
        self.recovery = Recovery(graph.connections)
        self.stop_event = threading.Event()
        self.snapshots = 0
        self.error: str | None = None
        self.cpu_s = 0.0

    def _scrape(self) -> dict[str, dict[str, float]]:
        """One scrape of the TaskManager's Prometheus endpoint: per PE (Flink task), its metrics."""
        per_pe: dict[str, dict[str, float]] = {}
        for port in self.ports:
            try:
                with _DIRECT.open(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                continue   # the JobManager's reporter, or a port not taken: the other one has the tasks
            for line in text.splitlines():
                m = _SAMPLE.match(line)
                if not m:
                    continue
                labels = dict(_LABEL.findall(m.group(2)))
                task = _SOURCE.sub("", labels.get("task_name", ""))
                if task in self.graph.pes and _number(m.group(3)):
                    name = m.group(1).removeprefix("flink_taskmanager_job_task_operator_") \
                        .removeprefix("flink_taskmanager_job_task_")
                    per_pe.setdefault(task, {})[name] = float(m.group(3))
        return per_pe

    def _query(self) -> tuple[dict, dict, list[tuple]] | None:
        per_pe = self._scrape()
        submitted, processed, tasks = {}, {}, []
        for name, pe in self.graph.pes.items():
            values = per_pe.get(name)
            if values is None:
                return None   # not every task has reported yet (the job is starting)
            for i in range(pe.n_in):
                if f"nProcessed_in{i}" in values:
                    processed[(name, i)] = values[f"nProcessed_in{i}"]
            for j in range(pe.n_out):
                if f"nSubmitted_out{j}" in values:
                    submitted[(name, j)] = values[f"nSubmitted_out{j}"]
            tasks.append((name, *(values.get(k) for k in TASK_METRICS)))
        return submitted, processed, tasks

    def run(self) -> None:
        db = connect(self.db_path)
        writer = SnapshotWriter(db)
        cpu0 = time.thread_time()
        try:
            first_id, seq = writer.next_ids()
            ids = {c.name: first_id + k for k, c in enumerate(self.graph.connections)}
            kinds = {p.name: p.kind for p in self.graph.pes.values()}
            attrs = {c.name: json.dumps({"src": c.src, "src_port": c.src_port, "dst": c.dst, "dst_port": c.dst_port,
                                         "src_kind": kinds[c.src], "dst_kind": kinds[c.dst]})
                     for c in self.graph.connections}
            conns = self.graph.connections
            edges = [(ids[conns[p].name], ids[conns[c].name]) for p, c in self.graph.module_edges()]
            last: dict[str, tuple] = {}
            next_t = monotonic()
            while not self.stop_event.is_set():
                got = self._query()
                if got is None:
                    self.stop_event.wait(0.1)
                    continue
                submitted, processed, tasks = got
                now, wall = monotonic(), time.time()
                counts = self.recovery.update(submitted, processed)
                rows = []
                for c in conns:
                    v = counts[c.name]
                    values = (_int(v.total_msgs), None, _int(v.queued), None, None)
                    if last.get(c.name) != values:
                        rows.append((seq, ids[c.name], "out", *values))
                        last[c.name] = values
                first = self.snapshots == 0   # every connection is born at the first snapshot
                born = [(ids[c.name], "sconn", c.name, f"sconn:{c.name}", attrs[c.name], now)
                        for c in conns] if first else []
                writer.snapshot(seq, now, wall, born, [], rows, [], edges_born=edges if first else (),
                                stream_tasks=[(seq, *t) for t in tasks])
                seq += 1
                self.snapshots += 1
                next_t += self.interval
                self.stop_event.wait(max(0.0, next_t - monotonic()))
            writer.close(monotonic(), ids.values())
        except Exception as e:  # noqa: BLE001 - the runner sees the collector stop and fails the run
            self.error = f"{type(e).__name__}: {e}"
            (RunDir(self.db_path.parent).logs / "collector-traceback.txt").write_text(traceback.format_exc())
        finally:
            self.cpu_s = time.thread_time() - cpu0
            try:
                writer.meta({"collector_cpu_s": f"{self.cpu_s:.3f}", "collector": "streams (Flink REST)"})
            except Exception:  # noqa: BLE001
                pass
            db.close()

    def stop(self, timeout: float = 10.0) -> None:
        self.stop_event.set()
        self.join(timeout)


def _number(value) -> bool:
    try:
        float(value)
        return True
    except (TypeError, ValueError):
        return False


def _int(v: float) -> int | float:
    return int(v) if float(v).is_integer() else round(v, 3)
