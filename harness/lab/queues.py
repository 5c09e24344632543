"""The shaped links' queue counters, read in a thread of their own (network health: queue drops).

Reading them costs a `tc` call per router or host (`Backend.queue_stats`): on the k = 4 fat-tree
that is 36 calls, 6-17 s a round on this machine with 16 monitored hosts, which in the runner's loop
held every fault and workload start up for as long. Here they are read every `interval` seconds
(or back to back when a round takes longer), each round stamped when it was read; the lab writes
the rounds to run.db from its own thread (`drain`), since run.db's connection is that thread's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class QueueSampler:
    def __init__(self, read: Callable[[], list[dict]], now: Callable[[], float], interval: float):
        self.read, self.now, self.interval = read, now, interval
        self.rounds: list[tuple[float, list[dict]]] = []
        self.error: Exception | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="queue-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            begun = self.now()
            try:
                stats = self.read()
            except Exception as e:  # noqa: BLE001 - a node going away at the end: kept, said once by the lab
                self.error = e
                return
            with self._lock:
                self.rounds.append((begun, stats))
            self._stop.wait(max(0.0, self.interval - (self.now() - begun)))

    def drain(self) -> list[tuple[float, list[dict]]]:
        """The rounds read since the last drain, oldest first."""
        with self._lock:
            rounds, self.rounds = self.rounds, []
        return rounds

    def stop(self, timeout: float = 60.0) -> list[tuple[float, list[dict]]]:
        """Stop reading (a round under way is finished) and return what was not drained."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return self.drain()
