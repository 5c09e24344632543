"""manifest.json: the one schema of a run's manifest, for the runner that writes it and the analysis
that reads it (docs/run-format.md explains every key).

`Manifest` is lenient the way a reader of old and new runs must be: only `format_version` and
`status` are required (every runner since the first wrote both from its first write), every other
key may be missing (format 2 has no `link_model` nor `health`, format 1 and 2 plan no `recovery`),
and keys this version does not know are kept (`extra="allow"`), so a newer run still reads and a
manifest round-trips unchanged.

Writer: `rundir.layout.RunDir.update_manifest(key=...)` takes the schema's keys only and validates the
whole manifest with `validate_manifest` before writing it (the file holds the keys in the order they
were first given); `nestlab cleanup`'s rewrite goes through the same method. Reader:
`read_manifest(path)`, used by `rundir.runs.open_run`; readers use the model's attributes, never
loose keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from rundir.errors import UserError
from rundir.faultkinds import FaultKindInfo


class ManifestError(UserError):
    """A manifest that cannot be read or does not fit the schema; the message is one line."""

    def __init__(self, path: Path | str, detail: str):
        super().__init__(f"{path}: {detail}")
        self.path, self.detail = Path(path), detail


class _Record(BaseModel):
    """A part of the manifest: keys it does not declare are kept as they are."""

    model_config = ConfigDict(extra="allow")


# ----------------------------------------------------------------------------- the resolved spec


class SpecWorkload(_Record):
    """A workload of the resolved spec (harness.spec.Workload, every default filled in)."""

    kind: str | None = None                  # wget | iperf
    host: str | None = None
    server: str | None = None
    role: str | None = None                  # foreground | background
    instances: int | None = None
    start: float | None = None
    file_size: float | None = None
    count: int | None = None
    direction: str | None = None             # upload | download | dual (iperf), download (wget)
    parallel: int | None = None


class SpecFaultTarget(_Record):
    workload: int | None = None
    instance: int | None = None
    host: str | None = None                  # a tier's host (tcp_drop, app_pause: docs/faults.md)


class SpecFault(_Record):
    """A fault of the resolved spec (harness.spec.Fault)."""

    kind: str | None = None                  # a fault kind (Manifest.fault_kinds, rundir.faultkinds)
    at: str | None = None
    host: str | None = None
    target: SpecFaultTarget | None = None
    path: int | None = None                  # path_blackhole
    rate: float | None = None                # loss, percent
    schedule: dict[str, Any] | None = None


class SpecIsolation(_Record):
    """The spec's `isolation` (format 3; older specs had none: the defaults)."""

    overlap: bool = False
    recovery: Literal["auto"] | float = "auto"


class SpecProbe(_Record):
    """The spec's `probe` (format 5; None: probes off, or a run recorded before them)."""

    after: float | None = None
    every: float | None = None
    timeout: float | None = None
    count: int | None = None
    host_rate: float | None = None
    remote_rate: float | None = None
    hold: float | None = None


class RunSpec(_Record):
    """The resolved spec: harness.spec.Spec dumped as JSON (units in seconds and bytes)."""

    name: str | None = None
    description: str | None = None
    topology: str | None = None
    duration: float | None = None
    snapshot_interval: float | None = None
    seed: int | None = None
    repetitions: int | None = None
    monitor: str | list[str] | None = None   # a list: several monitored hosts (format 7, no bump: docs/run-format.md)
    congestion_control: str | None = None
    interceptor: bool | None = None
    probe: SpecProbe | None = None
    workloads: list[SpecWorkload] = []
    faults: list[SpecFault] = []
    isolation: SpecIsolation = SpecIsolation()


# ----------------------------------------------------------------------------- where it ran


class Interface(_Record):
    """A derived interface (harness.topology.Interface)."""

    node: str | None = None
    name: str | None = None
    address: str | None = None
    prefixlen: int | None = None
    peer: str | None = None
    peer_address: str | None = None
    link: int | None = None


class TopologyRecord(_Record):
    name: str | None = None
    file: str | None = None
    spec: dict[str, Any] = {}                # the topology file, validated (harness.topology)
    addresses: dict[str, list[Interface]] = {}


class NodeRecord(_Record):
    """ssh: a testbed node, and what was found on it (kernel, Python, ... as extra keys)."""

    host: str | None = None
    port: int | None = None
    user: str | None = None
    control_interface: str | None = None
    interfaces: list[str] = []


class ClockOffset(_Record):
    offset: float | None = None
    rtt: float | None = None
    samples: int | None = None
    method: str | None = None


class ClockOffsets(_Record):
    """Each node's (and the runner's) clock offset to the monitored host (harness.backends.base.Clocks)."""

    reference: str | None = None
    runner: ClockOffset | None = None
    nodes: dict[str, ClockOffset] = {}


class Monitor(_Record):
    """The host whose stack the collector watched."""

    host: str | None = None
    address: str | None = None
    interface: str | None = None
    control_interface: str | None = None     # ssh: left out of the recording


class PlannedFault(_Record):
    """A planned fault window (harness.spec.Window): seconds after t0."""

    spec_index: int
    start: float
    duration: float
    recovery: float | None = None            # format 3


class LinkEnd(_Record):
    """Mininet: one end of a link as verified after the build (docs/link-model.md)."""

    interface: str | None = None
    rate: float | None = None                # bit/s (shaped ends)
    qdisc: str | None = None                 # pfifo (netem where delay/loss)
    limit: int | None = None                 # packets
    offloads: dict[str, str] = {}            # tso, gso, gro, lro: off


class LinkModel(_Record):
    """A topology link as built (format 3)."""

    link: int | None = None
    a: str
    b: str
    bw: float | None = None
    queue: int | None = None
    ends: dict[str, LinkEnd] = {}            # Mininet
    shaped_by: str | None = None             # ssh: the testbed
    path: int | None = None                  # which link of a bundle of parallel links (ECMP)


class RunHealth(_Record):
    """The run's network health, computed by analysis.health.network_health and added to the manifest
    when the run's report is made (docs/analysis.md, "Network health")."""

    quiet_snapshots: int = 0                 # snapshots outside every fault window and recovery margin
    snapshots: int = 0
    quiet_s: float = 0.0                     # the time they cover
    rtt_ms_median: float | None = None      # in each connection's loaded direction (analysis.health)
    rtt_ms_p99: float | None = None
    rtt_samples: int = 0
    rtt_senders: int = 0                     # connections timed by tcpi_rtt (they send more than they receive)
    rtt_receivers: int = 0                   # ... by tcpi_rcv_rtt (format 5 on)
    queue_drops: int | None = None           # None: no queue samples (older run, testbed-shaped links)
    queue_drops_quiet: int | None = None
    queue_sent_packets: int | None = None
    backlog_packets_median: float | None = None
    backlog_packets_max: int | None = None
    retransmissions_quiet: int = 0
    busy: int = 0                            # busy TCP module-snapshots (both directions) in quiet time
    silent: int = 0                          # of those, without progress
    busy_out: int = 0
    silent_out: int = 0
    busy_in: int = 0
    silent_in: int = 0
    warnings: list[str] = []
    silence_rate: float | None = None        # silent / busy (None: nothing busy)
    silence_threshold: float | None = None   # the rate above which the run is flagged

    def as_dict(self) -> dict[str, Any]:
        """Every key, as JSON data (what health.json and the manifest hold)."""
        return self.model_dump(mode="json")


class ServiceLoad(_Record):
    """A service workload's load generator, as it reported at its end (harness.service.loadgen)."""

    offered_rate: float | None = None        # the spec's rate (Poisson arrivals per second)
    achieved_rate: float | None = None       # answers per second of the arrivals' time
    seconds: float | None = None             # from its first arrival's time to its last's
    sent: int | None = None
    refused: int | None = None               # arrivals that found `concurrency` requests in flight
    done: int | None = None
    errors: int | None = None                # answers other than 200, and no answer
    concurrency: int | None = None


class Counts(_Record):
    snapshots: int | None = None
    modules: int | None = None
    faults: int | None = None


class TraceRecord(_Record):
    """A run's message trace (`trace: messages`), as its drainer left it (rundir.messages.trace_totals)."""

    processes: int = 0                       # traced processes (rows of the traced table)
    events: int = 0                          # message rows recorded
    dropped: int = 0                         # events dropped: a ring was full (warned)
    lost: int = 0                            # events reserved and never written (warned)
    hosts: dict[str, int] = {}               # events recorded per host
    # testbed nodes: the offset (and its round trip: the error bound is half of it) each traced node's
    # message times were converted with onto the reference clock (docs/ssh-backend.md, "Offsets")
    clock: dict[str, ClockOffset] | None = None


# ----------------------------------------------------------------------------- the manifest


class Manifest(_Record):
    """manifest.json (docs/run-format.md), format versions 1-5 and, for the keys it knows, later."""

    format_version: int
    status: str                              # running | complete | interrupted | failed
    reason: str | None = None                # why a run was interrupted or failed
    run_id: str | None = None
    experiment: str | None = None
    repetition: int | None = None
    seed: int | None = None
    spec_file: str | None = None
    spec_digest: str | None = None           # Experiment.digest: what --resume compares
    suite: str | None = None                 # the suite (results/<suite>/suite.json) the run belongs to
    spec: RunSpec = RunSpec()
    topology: TopologyRecord | None = None
    backend: str | None = None               # mininet | ssh | flink
    # The study kind the run belongs to (network | streams | service; docs/studies.md). Runs recorded
    # before it: study_of derives it from the rest of the manifest.
    study: str | None = None
    nodes: dict[str, NodeRecord] | None = None
    clock: str | None = None
    clock_offsets: ClockOffsets | None = None
    clock_offsets_end: ClockOffsets | None = None
    monitor: Monitor = Monitor()
    monitored: list[Monitor] | None = None   # several monitored hosts (format 7, no bump): each (monitor: the first)
    congestion_control: str | None = None
    snapshot_interval: float | None = None
    planned_faults: list[PlannedFault] = []
    # The fault kinds the spec uses, by name, as their modules declare them (rundir.faultkinds; None:
    # a run recorded before kinds were recorded, read with rundir.faultkinds.LEGACY).
    fault_kinds: dict[str, FaultKindInfo] | None = None
    link_model: list[LinkModel] | None = None
    routing: dict[str, Any] | None = None    # Mininet, multipath topologies: per router the verified ECMP routes
    fabric: dict[str, Any] | None = None     # a fabric (docs/fabric.md): what fabric.json holds, in counts
    health: RunHealth | None = None
    service: dict[str, ServiceLoad] | None = None   # format 7: by service workload index
    trace: TraceRecord | None = None         # format 7, `trace: messages`: the message trace's totals
    versions: dict[str, str | dict[str, str]] = {}
    start_wall: float | None = None
    start_mono: float | None = None
    t0: float | None = None                  # monotonic time the workloads started
    end_wall: float | None = None
    end_mono: float | None = None
    counts: Counts | None = None
    warnings: list[str] = []

    def as_json(self) -> dict[str, Any]:
        """The manifest as JSON data: the keys it was given, with their values."""
        return self.model_dump(mode="json", exclude_unset=True)


def study_of(m: Manifest | None) -> str | None:
    """The study kind of a run (docs/studies.md): the manifest's `study`, or for a run recorded before
    the manifest named it, derived here and only here from what it holds: a stream engine's backend
    (`flink`) is a streams run, a spec with a `service` workload a service run, one with a `mesh`
    workload a fabric run, any other a network run. None without a manifest. Fabric runs recorded
    before the fabric study kind existed (2026-12-03) say `network`: read as fabric runs."""
    if m is None:
        return None
    mesh = any(w.kind == "mesh" for w in m.spec.workloads)
    if m.study:
        return "fabric" if m.study == "network" and mesh else m.study
    if m.backend == "flink":
        return "streams"
    if any(w.kind == "service" for w in m.spec.workloads):
        return "service"
    return "fabric" if mesh else "network"


def _first_error(e: ValidationError) -> str:
    errors = e.errors(include_url=False)
    err = errors[0]
    where = ".".join(str(p) for p in err["loc"]) or "the top level"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    got = err.get("input")
    shown = "" if err["type"] == "missing" or isinstance(got, dict | list) else f", got {got!r}"
    return f"{where}: {err['msg']}{shown}{more}"


def validate_manifest(data: Any, path: Path | str = "manifest.json") -> Manifest:
    """`data` as a Manifest; ManifestError (one line: the key and what is wrong) when it does not fit."""
    try:
        return Manifest.model_validate(data)
    except ValidationError as e:
        raise ManifestError(path, f"malformed: {_first_error(e)}") from None


def read_manifest(path: Path | str) -> Manifest | None:
    """The manifest of a run directory (or a manifest.json path); None when there is none.
    ManifestError (one line) when it cannot be read or does not fit the schema."""
    path = Path(path)
    if path.is_dir():
        path = path / "manifest.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except RecursionError:   # JSON nested deeper than the parser goes
        raise ManifestError(path, "unreadable (RecursionError)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ManifestError(path, f"unreadable ({e})") from None
    return validate_manifest(data, path)


def read_manifest_quietly(path: Path | str) -> Manifest | None:
    """The manifest of a run directory, or None when there is none or it cannot be read: for views
    that show what they can (the live view, a suite's summary) and report damage elsewhere."""
    try:
        return read_manifest(path)
    except ManifestError:
        return None
