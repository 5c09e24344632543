"""What a collector source is: something that, once per snapshot, reports the modules it sees.

Sources run inside the monitored host's namespace. Each `poll()` returns one Observation per live
module; the collector (harness.collector.main) turns those into module births/deaths, edges and
counter rows. Adding a source (the interceptor for app and socket modules) means writing one class
with this interface and creating it in harness.collector.main.make_sources.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

# Per direction ('in', 'out'): counter name (rundir.db.COUNTER_FIELDS) -> raw cumulative value,
# except 'queued' which is the current value. A missing name means unsupported (stored as NULL).
# A source polled for hundreds of modules a snapshot (TCP) may give each direction as a tuple in
# COUNTER_FIELDS order instead (None = unsupported), which the collector stores without lookups.
Counters = dict[str, dict[str, float | int | None] | tuple]


@dataclass(slots=True)
class Observation:
    key: str                      # stable identity across snapshots, e.g. 'tcp:<inode>', 'ipeth:eth0'
    kind: str                     # app | socket | tcp | ipeth
    name: str                     # human label
    counters: Counters
    attrs: dict = field(default_factory=dict)    # recorded once, when the module is born
    children: list[str] = field(default_factory=list)  # keys of lower-layer modules it depends on
    # TCP modules, from tcp_info: (ca_state, retransmits, probes, backoff, rto_us, last_data_sent_ms,
    # last_data_recv_ms, last_ack_recv_ms, rtt_us, rttvar_us, rcv_rtt_us), the three last_* "ms ago". Stored in
    # the tcp_info table when they change (harness.collector.main.ModuleTracker).
    tcp_info: tuple[int, ...] | None = None
    # The very observation the source gave last snapshot, unchanged since (nothing to write for it
    # but that it lives): a source that knows may say so, so the collector's cost follows change.
    same: bool = False


class Source(Protocol):
    name: str

    def poll(self) -> list[Observation]:
        """Read the current state. Must be cheap: it runs every snapshot interval."""
        ...

    def close(self) -> None:
        ...
