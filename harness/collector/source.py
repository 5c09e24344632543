"""What a collector source is: something that, once per snapshot, reports the modules it sees.

Sources run inside the monitored host's namespace. A source either gives every live module each
snapshot (`poll()`: one Observation per live module; the collector finds births and deaths with
`Changes`), or only what moved (`report()`: a Report of the modules born or changed and the keys of
those that died), which a source of thousands of mostly idle modules (TCP) does so that the
collector's cost follows change, not the host's size. The collector (harness.collector.main) turns
reports into module births/deaths, edges and counter rows. Adding a source (the interceptor for app
and socket modules) means writing one class with this interface and creating it in
harness.collector.main.make_sources.
"""

from __future__ import annotations

from collections.abc import Callable
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


@dataclass(slots=True)
class Report:
    """One source's snapshot as births and deaths: `changed` holds the modules born since the last
    report and those whose values may have moved (a live module left out has the values it last
    had, and lives on); `gone` the keys of modules reported before that are no longer live.
    `unchanged()`, on demand (the prober), the keys of the live modules left out."""

    changed: list[Observation]
    gone: list[str] = field(default_factory=list)
    unchanged: Callable[[], list[str]] = list


class Changes:
    """A Report from a source that sees every live module each snapshot: all of them changed, and
    gone the keys reported last time and missing now. For sources of a few modules (interfaces,
    applications); and the reference the births-and-deaths sources are tested against."""

    def __init__(self):
        self.keys: dict[str, None] = {}   # the keys of the last report, in its order

    def __call__(self, observations: list[Observation]) -> Report:
        keys = dict.fromkeys(ob.key for ob in observations)
        gone = [k for k in self.keys if k not in keys]
        self.keys = keys
        return Report(observations, gone)


class Source(Protocol):
    name: str

    def poll(self) -> list[Observation]:
        """Read the current state: every live module. Must be cheap: it runs every snapshot interval."""
        ...

    # Optionally, instead of poll() for the collector: def report(self) -> Report (births, changes, deaths).

    def close(self) -> None:
        ...


def reporter(src: Source) -> Callable[[], Report]:
    """What gives a source's snapshot as a Report: its own report(), else its poll() through Changes."""
    report = getattr(src, "report", None)
    if report is not None:
        return report
    changes = Changes()
    return lambda: changes(src.poll())
