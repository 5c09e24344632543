"""delay: every reply an application tier of a service workload sends is held for `by` (Project5's
experiment: 200 ms added at one web server of a multi-tier service, docs/service.md).

    - {kind: delay, host: app2, by: 200ms, schedule: {at: [20s], duration: 10s}}

The app (harness/service/app.py) reads a switch file of its host's before each reply (a stat per
request): the fault writes the delay there and removes it, verified by reading it back; the window is
stamped when the file is in place (or gone). A request already past its switch check when the window
opens or closes takes the state it saw. netem is not available here (docs/faults.md), and the
interceptor's per-call delay, which would reach any tier (nginx, memcached, MariaDB), is issue 33's
still to come: this kind acts on the app tiers only.

The culprit is the target tier's application (its gunicorn workers on that host). When that host is
the monitored one (its tier's daemons then run with the interceptor), each worker's app module is a
target, one faults row each sharing the one switch; otherwise the one row names the host and the
gunicorn master's pid with no module (the collector watches the monitored host only), so on NeST's
side the window labels nothing, and the true effect is in the requests table (the app hop of that
host up by `by`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from harness.faults.base import FaultEnv, NoTarget, Part, target_json
from harness.faults.spec import FaultSpec, Footprint, SpecView, monitored_hosts
from harness.units import Duration
from rundir.db import monotonic
from rundir.faultkinds import FaultKindInfo

if TYPE_CHECKING:
    from harness.topology import Topology
    from harness.window import Window

INFO = FaultKindInfo("delay", colour="#8c6bb1", order=None)
MAX_DELAY_S = 10.0


def _service_of(spec: SpecView, host: str) -> int | None:
    """The service workload whose app tier runs on `host`."""
    for i, w in enumerate(spec.workloads):
        if w.kind == "service" and host in (w.apps or []):
            return i
    return None


class DelaySpec(FaultSpec):
    host: str | None = Field(default=None, description="ip_drop, loss: whose traffic (default: the monitor); "
                                                       "delay: the app tier's host whose replies are held")
    by: Duration | None = Field(default=None, description="delay: how long each reply is held, e.g. '200ms'")

    def check(self) -> None:
        if self.host is None:
            raise ValueError("delay needs 'host': the app tier's host whose replies are held, e.g. app2")
        if self.by is None:
            raise ValueError("delay needs 'by', e.g. '200ms'")
        if not 0 < self.by <= MAX_DELAY_S:
            raise ValueError(f"delay 'by' must be above 0 and at most {MAX_DELAY_S:g}s")

    def check_against(self, spec: SpecView, topology: Topology):
        if _service_of(spec, self.host) is None:
            apps = sorted({a for w in spec.workloads if w.kind == "service" for a in (w.apps or [])})
            return (("host",), f"{self.host!r} runs no app tier of a service workload (app tiers: "
                               f"{', '.join(apps) or 'none'}); delay acts on an app tier's replies")
        return None

    def footprint(self, spec: SpecView) -> Footprint:
        """The service workload it slows."""
        return Footprint(frozenset(), frozenset({(_service_of(spec, self.host), None)}))

    def same_action(self, other: FaultSpec) -> bool:
        return self.host == other.host

    def node(self, spec: SpecView) -> str:
        return self.host


def _workers(masters: list[int]) -> list[int]:
    """The gunicorn workers (the master's children; Mininet hosts share this machine's pids)."""
    out = []
    for pid in masters:
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except (OSError, ValueError):
            pass
    return sorted(out)


@dataclass
class Switch:
    path: Path
    seconds: float
    removed: float | None = None


class Delay:
    info = INFO
    spec = DelaySpec

    def __init__(self, env: FaultEnv):
        self.env = env
        self.switches: list[Switch] = []

    def setup(self, faults: Sequence[FaultSpec]) -> None:
        pass

    def teardown(self) -> None:
        for s in self.switches:
            if s.removed is None:
                s.path.unlink(missing_ok=True)
                s.removed = self.env.clocks.from_runner(monotonic())

    def describe(self, action: Switch) -> str:
        return f"{action.seconds * 1000:g} ms before each reply: {action.path} holds {action.seconds:g}"

    def inject(self, window: Window, first_id: int) -> list[Part]:
        env = self.env
        f = env.spec.faults[window.spec_index]
        i = _service_of(env.spec, f.host)
        tiers = env.workloads.services.get(i)
        if tiers is None:
            raise NoTarget(f"the service workload {i} has no tiers running")
        pids = [pid for host, pid in tiers.pids().get("app", []) if host == f.host]
        path = tiers.delay_file(f.host)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{f.by:.6f}\n")
        os.replace(tmp, path)   # atomic: the app never reads half a value
        if float(path.read_text()) != round(f.by, 6):
            raise RuntimeError(f"delay switch {path} does not hold {f.by:g}")
        action = Switch(path, f.by)
        self.switches.append(action)
        start = env.clocks.from_runner(monotonic())
        text = f"replies of the app tier on {f.host} held {f.by * 1000:g} ms"
        workers = _workers(pids) if f.host in monitored_hosts(env.spec) else []
        if not workers:   # not observed: one row, no module
            return [Part(target_json(description=text, host=f.host, tier="app", pids=pids, workload=i, by=f.by,
                                     module_key=None), self.describe(action), start, action)]
        # Observed (the monitored host's tier runs with the interceptor): each gunicorn worker's app
        # module is a culprit, one row each, sharing the one switch.
        return [Part(target_json(description=f"{text}: worker {w}", host=f.host, tier="app", pid=w, workload=i,
                                 by=f.by, module_key=f"app:{w}"), self.describe(action), start, action)
                for w in workers]

    def heal(self, part: Part) -> float:
        action: Switch = part.action
        if action.removed is None:
            action.path.unlink(missing_ok=True)
            if action.path.exists():
                raise RuntimeError(f"delay switch {action.path} still there")
            action.removed = self.env.clocks.from_runner(monotonic())
        return action.removed
