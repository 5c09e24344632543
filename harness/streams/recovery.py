"""Per-connection counters from per-port counters (thesis 4.3, Appendix A) and the invariant
repair of 4.3.2. Pure logic: the streams collector feeds it one snapshot of port counters at a time.

The engine counts at ports: nSubmitted per output port, nProcessed per input port (4.1.3). A stream
connection SRC:outI -> DST:inJ needs its own submitted and processed counts:

- Case 2, fan-out (1 -> N): Streams' nSubmitted grows by the number of connections for each tuple
  submitted, so Appendix A divides a port's increase by its connections. Flink counts a tuple once
  per port (our PEs count at submit, and Flink copies it to every consumer), so each connection of
  the port is submitted the port's whole increase: `per_connection=False` (the default here).
  `per_connection=True` is the Streams counting, divided as Appendix A says.
- Case 3, fan-in (N -> 1): nProcessed of an input port is the sum over its connections, and which
  connection a tuple came from is unknowable. Appendix A's shadow counter nSubmittedToInputPort sums
  the (normalised) submitted counts of every connection into the port; each of those connections
  then gets the port's processed count and the port's queue: submitted-to-port - processed.
- Case 4 (M -> N) is the two together.
- Baselines (A.2): Flink's counters start at 0 with the job, which the collector watches from its
  submission, and the graph never changes during a run, so the baseline is 0. A counter that goes
  backwards (a task restarted) re-baselines the ports it touches: the run goes on from there.
- 4.3.2: a negative queue means the downstream counter was read "ahead" of the upstream one. Its
  absolute value is added to the connection's processed count in the *next* snapshot (the module
  looks active then, never stalled by a reading artefact); the negative queue itself is kept as read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.streams.graph import Connection

Port = tuple[str, int]   # (PE, port index)


@dataclass
class ConnectionCounts:
    total_msgs: float   # processed out of the connection, with 4.3.2's carries
    queued: float       # submitted into it minus processed out of it (may be negative)


@dataclass
class Recovery:
    connections: Sequence[Connection]
    per_connection: bool = False
    rebaselined: int = 0          # counters seen going backwards (a restarted task)

    def __post_init__(self) -> None:
        self.fan_out: dict[Port, int] = {}
        self.into: dict[Port, list[Connection]] = {}
        for c in self.connections:
            self.fan_out[(c.src, c.src_port)] = self.fan_out.get((c.src, c.src_port), 0) + 1
            self.into.setdefault((c.dst, c.dst_port), []).append(c)
        self._last: dict[tuple[str, Port], float] = {}
        self._submitted: dict[Port, float] = {}   # per output port: nTuplesSubmittedToConnectionX
        self._processed: dict[Port, float] = {}   # per input port, since the baseline
        self._carry: dict[str, float] = {}        # 4.3.2: added to total_msgs from now on
        self._pending: dict[str, float] = {}      # 4.3.2: added from the next snapshot

    def _step(self, side: str, port: Port, value: float | None) -> float:
        """The counter's increase since the last snapshot; a counter that went backwards restarted
        from 0 (re-baselined, A.2): its whole value is the increase."""
        last = self._last.get((side, port), 0.0)
        if value is None:
            return 0.0
        self._last[(side, port)] = value
        if value < last:
            self.rebaselined += 1
            return value
        return value - last

    def update(self, submitted: Mapping[Port, float], processed: Mapping[Port, float]) -> dict[str, ConnectionCounts]:
        """One snapshot: the engine's cumulative port counters (a port missing from a mapping keeps
        its last value) -> each connection's counters, by connection name."""
        for port, n in self.fan_out.items():
            step = self._step("out", port, submitted.get(port))
            self._submitted[port] = self._submitted.get(port, 0.0) + (step / n if self.per_connection else step)
        out: dict[str, ConnectionCounts] = {}
        for port, conns in self.into.items():
            done = self._processed[port] = self._processed.get(port, 0.0) + self._step("in", port, processed.get(port))
            to_port = sum(self._submitted.get((c.src, c.src_port), 0.0) for c in conns)   # nSubmittedToInputPort
            queued = to_port - done
            for c in conns:
                self._carry[c.name] = self._carry.get(c.name, 0.0) + self._pending.pop(c.name, 0.0)
                out[c.name] = ConnectionCounts(done + self._carry[c.name], queued)
                if queued < 0:
                    self._pending[c.name] = -queued
        return out
