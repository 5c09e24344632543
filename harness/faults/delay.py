"""delay: every reply a tier of a service workload sends is delayed by `by` (Project5's experiment:
200 ms added at one web server of a multi-tier service, docs/service.md).

    - {kind: delay, host: app2, by: 200ms, schedule: {at: [20s], duration: 10s}}
    - {kind: delay, host: db, by: 200ms, ...}        # db, web, cache: through the interceptor

An app tier: the app (harness/service/app.py) reads a switch file of its host's before each reply (a
stat per request): the fault writes the delay there and removes it, verified by reading it back.
The other tiers act through the interceptor (harness/interceptor/delay.py): the fault writes the delay
into the header of every live process's file in that host's interceptor directory and sets it back
to 0, each verified by reading it back; on a testbed node the node agent does it there
(harness.faults.onnode), with the setting back to 0 in the run's ledger meanwhile. How the library delays a reply (the first send on an accepted
socket after a receive there) depends on the daemon:

- db (MariaDB, a thread per connection): HOLD, the sending thread sleeps `by` before the call;
- web and cache (nginx and memcached, event loops: a few threads each answer many connections, so a
  hold would stop every connection of the thread; measured: memcached's 50 ms hold gave 275 ms cache
  calls at 30 requests/s): DEFER, the reply's bytes are queued and the call returns at once, and the
  library's own thread sends them `by` later, in order (harness/interceptor/defer.c). Its queue is
  bounded (NESTLAB_DEFER_MAX_BYTES, 64 MiB): a send it had no room for goes without the delay and is
  counted; the fault warns with the count when it ends.

So the host's daemons must run under the interceptor: the spec traces messages (`trace: messages`) or
monitors that host, else it is refused naming the field. The window is stamped when the switch (or
every header) is set, and when it is cleared. A request already past its check when the window opens
or closes takes the state it saw. netem is not available here (docs/faults.md).

The culprit is the target tier's application (its processes on that host). When that host is the
monitored one, each of its processes' app module is a target (app tier: each gunicorn worker), one
faults row each sharing the one action; otherwise the one row names the host and the pids with no
module (the collector watches the monitored host only), and the true effect is in the requests table
(that tier's hop up by `by`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field

from harness.faults import onnode
from harness.faults.base import FaultEnv, NoTarget, Part, target_json
from harness.faults.spec import FaultSpec, Footprint, SpecView, monitored_hosts
from harness.faults.tier_hosts import observed_pids
from harness.interceptor import ENV_SHM_DIR
from harness.interceptor.delay import DEFER, HOLD
from harness.units import Duration
from rundir.db import monotonic
from rundir.faultkinds import FaultKindInfo

if TYPE_CHECKING:
    from harness.topology import Topology
    from harness.window import Window

INFO = FaultKindInfo("delay", colour="#8c6bb1", order=None)
# Tiers whose daemon answers many connections from each of a few threads (an event loop): a hold
# would stop the thread, so every connection it serves would wait; their replies are deferred instead.
EVENT_LOOP_TIERS = {"web": "nginx", "cache": "memcached"}
MAX_DELAY_S = 10.0


def _tier_of(spec: SpecView, host: str) -> tuple[int, str] | None:
    """(service workload, tier) of the tier that runs on `host`: web, app, cache or db."""
    for i, w in enumerate(spec.workloads):
        if w.kind != "service":
            continue
        for tier, name in (("web", w.web), *(("app", a) for a in (w.apps or [])), ("cache", w.cache), ("db", w.db)):
            if name == host:
                return i, tier
    return None


def _intercepted(spec: SpecView, host: str) -> bool:
    """The host's tier runs under the interceptor: the spec traces messages or monitors it."""
    return getattr(spec, "trace", None) == "messages" or (spec.interceptor and host in monitored_hosts(spec))


class DelaySpec(FaultSpec):
    host: str | None = Field(default=None, description="ip_drop, loss: whose traffic (default: the monitor); "
                                                       "delay: the tier's host whose replies are held")
    by: Duration | None = Field(default=None, description="delay: how long each reply is held, e.g. '200ms'")

    def check(self) -> None:
        if self.host is None:
            raise ValueError("delay needs 'host': the tier's host whose replies are held, e.g. app2")
        if self.by is None:
            raise ValueError("delay needs 'by', e.g. '200ms'")
        if not 0 < self.by <= MAX_DELAY_S:
            raise ValueError(f"delay 'by' must be above 0 and at most {MAX_DELAY_S:g}s")

    def check_against(self, spec: SpecView, topology: Topology):
        found = _tier_of(spec, self.host)
        if found is None:
            tiers = sorted({h for w in spec.workloads if w.kind == "service"
                            for h in (w.web, *(w.apps or []), w.cache, w.db)})
            return (("host",), f"{self.host!r} runs no tier of a service workload (tiers: "
                               f"{', '.join(tiers) or 'none'}); delay acts on a tier's replies")
        if found[1] != "app" and not _intercepted(spec, self.host):
            return (("host",), f"delay at the {found[1]} tier on {self.host!r} acts through the interceptor: "
                               f"trace messages (`trace: messages`) or monitor {self.host}")
        return None

    def footprint(self, spec: SpecView) -> Footprint:
        """The service workload it slows."""
        found = _tier_of(spec, self.host)
        return Footprint(frozenset(), frozenset({(found[0] if found else None, None)}))

    def same_action(self, other: FaultSpec) -> bool:
        return self.host == other.host

    def node(self, spec: SpecView) -> str:
        return self.host


@dataclass
class Switch:
    """The app tier's switch file on its host (ServiceTiers.set_delay: on the app's node)."""

    path: str
    seconds: float
    removed: float | None = None
    tiers: Any = None
    host: str = ""

    def clear(self) -> None:
        self.tiers.clear_delay(self.host)


@dataclass
class Held:
    """The interceptor's hold of one host's replies: the delay in the headers of its processes' files."""

    shm_dir: str
    host: str
    seconds: float
    pids: list[int]
    removed: float | None = None
    tier: str = "db"
    undeferred: int = 0      # the host's sends a deferral had no room for, when the window opened
    env: Any = None          # the FaultEnv: the files are on the host's node (harness.faults.onnode)
    undo: dict | None = None   # its entry in the run's ledger (a testbed node)

    @property
    def mode(self) -> int:
        return DEFER if self.tier in EVENT_LOOP_TIERS else HOLD

    def clear(self) -> None:
        onnode.set_host_delay(self.env, self.host, self.shm_dir, 0.0, HOLD)   # every live process, also one born in the window
        if self.undo is not None and self.env.ledger is not None:
            self.env.ledger.drop_undo(self.undo)
            self.undo = None


class Delay:
    info = INFO
    spec = DelaySpec

    def __init__(self, env: FaultEnv):
        self.env = env
        self.switches: list[Switch] = []
        self.warnings: list[str] = []

    def setup(self, faults: Sequence[FaultSpec]) -> None:
        pass

    def teardown(self) -> None:
        for s in self.switches:
            if s.removed is None:
                s.clear()
                s.removed = self.env.clocks.from_runner(monotonic())

    def describe(self, action: Switch | Held) -> str:
        if isinstance(action, Held):
            how = "deferred (sent later by the library's thread)" if action.mode == DEFER else "held"
            return (f"{action.seconds * 1000:g} ms before each reply, {how}: the interceptor's reply_delay_ns in "
                    f"the headers of pids {', '.join(map(str, action.pids))} in {action.shm_dir}")
        return f"{action.seconds * 1000:g} ms before each reply: {action.path} holds {action.seconds:g}"

    def inject(self, window: Window, first_id: int) -> list[Part]:
        env = self.env
        f = env.spec.faults[window.spec_index]
        i, tier = _tier_of(env.spec, f.host)
        if tier != "app":
            return self._hold(f, i, tier)
        tiers = env.workloads.services.get(i)
        if tiers is None:
            raise NoTarget(f"the service workload {i} has no tiers running")
        pids = [pid for host, pid in tiers.pids().get("app", []) if host == f.host]
        # written atomically where the app runs (the app never reads half a value), and read back
        path = tiers.set_delay(f.host, f.by)
        action = Switch(path, f.by, tiers=tiers, host=f.host)
        self.switches.append(action)
        start = env.clocks.from_runner(monotonic())
        text = f"replies of the app tier on {f.host} held {f.by * 1000:g} ms"
        workers = tiers.children(f.host, pids) if f.host in monitored_hosts(env.spec) else []
        if not workers:   # not observed: one row, no module
            return [Part(target_json(description=text, host=f.host, tier="app", pids=pids, workload=i, by=f.by,
                                     module_key=None), self.describe(action), start, action)]
        # Observed (the monitored host's tier runs with the interceptor): each gunicorn worker's app
        # module is a culprit, one row each, sharing the one switch.
        return [Part(target_json(description=f"{text}: worker {w}", host=f.host, tier="app", pid=w, workload=i,
                                 by=f.by, module_key=f"app:{w}"), self.describe(action), start, action)
                for w in workers]

    def _count_undeferred(self, action: Held) -> None:
        """The sends of the window that went without the delay (the queue was full): a warning."""
        if action.mode != DEFER:
            return
        missed = onnode.host_undeferred(self.env, action.host, action.shm_dir) - action.undeferred
        if missed > 0:
            self.warnings.append(f"delay at the {action.tier} tier on {action.host}: {missed} send(s) not deferred "
                                 "(the interceptor's queue was full, NESTLAB_DEFER_MAX_BYTES): they went without "
                                 f"the {action.seconds * 1000:g} ms")

    def take_warnings(self) -> list[str]:
        """What went wrong while a window was in force, once (the lab puts it in the run's warnings)."""
        out, self.warnings = self.warnings, []
        return out

    def _hold(self, f, i: int, tier: str) -> list[Part]:
        """db, web, cache: the interceptor delays the replies of every process of the tier's host."""
        env = self.env
        shm = (getattr(env.workloads, "client_env", {}) or {}).get(f.host, {}).get(ENV_SHM_DIR)
        if not shm:
            raise NoTarget(f"{f.host}'s processes do not run under the interceptor")
        action = Held(shm, f.host, f.by, [], tier=tier, undeferred=onnode.host_undeferred(env, f.host, shm), env=env)
        self.switches.append(action)   # first: teardown clears what a hold interrupted midway (Ctrl-C) set
        if onnode.remote(env) and env.ledger is not None:   # a killed runner's delay is set back to 0
            argv, what = onnode.delay_undo(env, f.host, shm), f"the reply delay in {shm} back to 0 (a delay fault's)"
            action.undo = {"node": f.host, "argv": argv, "what": what}
            env.ledger.add_undo(f.host, argv, what)
        pids = action.pids = onnode.set_host_delay(env, f.host, shm, f.by, action.mode)
        start = env.clocks.from_runner(monotonic())
        if not pids:
            action.clear()   # nothing was set; its undo goes
            action.removed = start
            raise NoTarget(f"no process of the {tier} tier on {f.host} runs under the interceptor")
        text = f"replies of the {tier} tier on {f.host} {'deferred' if action.mode == DEFER else 'held'} {f.by * 1000:g} ms"
        # a row per process the collector records as an application module (a daemon's master that only
        # listens is none, and a row naming it would resolve to nothing); else one row without a module
        observed = observed_pids(env, f.host, sorted(pids))
        if not observed:
            return [Part(target_json(description=text, host=f.host, tier=tier, pids=pids, workload=i, by=f.by,
                                     module_key=None), self.describe(action), start, action)]
        return [Part(target_json(description=f"{text}: process {p}", host=f.host, tier=tier, pid=p, workload=i,
                                 by=f.by, module_key=f"app:{p}"), self.describe(action), start, action)
                for p in observed]

    def heal(self, part: Part) -> float:
        action = part.action
        if isinstance(action, Held):
            if action.removed is None:
                action.clear()
                action.removed = self.env.clocks.from_runner(monotonic())
                self._count_undeferred(action)
            return action.removed
        if action.removed is None:
            action.clear()
            if action.tiers.read(action.host, action.path) is not None:
                raise RuntimeError(f"delay switch {action.path} still there")
            action.removed = self.env.clocks.from_runner(monotonic())
        return action.removed
