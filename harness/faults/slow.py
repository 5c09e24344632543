"""slow: a service tier's processes on one host capped at a share of a CPU by a cgroup CPU quota, on
cgroup v2 or, where the cpu controller is bound to v1, cgroup v1 (issue 33 item 5; docs/faults.md,
"`slow`: a tier under a CPU quota").

    - {kind: slow, host: db, cpu: 20%, schedule: {at: [20s], duration: 10s}}
    - {kind: slow, target: {host: db}, cpu: 20%, ...}       (the same)

The window starts when every process of the tier's daemon group is in the run's cgroup with its
quota verified (v2 `cpu.max`, v1 `cpu.cfs_quota_us`), and ends when they are back where they came
from and the cgroup is gone (harness.faults.cgroup.CpuCap); teardown releases a window still in
force on every exit path. The culprit is the tier's application: when `host` is monitored each
process of the group that the collector sees as an application is a target, `app:<pid>`, one faults
row each sharing the one cap; otherwise one row names the host and tier with no module. Each row records the hierarchy used
(`hierarchy`: 'cgroup v1' or 'cgroup v2', `cgroup`: the directory, `limit`: what was written). A
machine with neither v2's nor v1's cpu controller refuses the spec before anything starts.

On a testbed node (the SSH backend) the cgroup is the node's: made, capped, filled and released
there by cgroup.py's own code (harness.faults.onnode.RemoteCap), its removal in the run's ledger
while it exists; a node without the cpu controller ends the run before t0 in one line naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import Field

from harness.faults import onnode
from harness.faults.base import FaultEnv, NoTarget, Part, target_json
from harness.faults.cgroup import CpuCap, Hierarchy, NoCpuController, cpu_hierarchy, cpu_problem
from harness.faults.spec import FaultSpec, Loc, SpecView
from harness.faults.tier_hosts import TierHostSpec, observed_pids, tier_pids
from harness.units import Percent
from rundir.db import monotonic
from rundir.errors import UserError
from rundir.faultkinds import FaultKindInfo

if TYPE_CHECKING:
    from harness.topology import Topology
    from harness.window import Window

INFO = FaultKindInfo("slow", colour="#a6761d", order=None)


class SlowSpec(TierHostSpec):
    cpu: Percent | None = Field(default=None, description="slow: the tier's CPU share under the quota, e.g. '20%'")

    def check(self) -> None:
        if self.host is None:
            raise ValueError("slow needs 'host' (or 'target: {host: H}'): the host of the service tier to slow, e.g. db")
        if self.cpu is None:
            raise ValueError("slow needs 'cpu': the tier's share of one CPU under the quota, e.g. '20%'")
        if not 0 < self.cpu < 100:
            raise ValueError("slow 'cpu' must be above 0% and below 100%")

    def check_against(self, spec: SpecView, topology: Topology) -> tuple[Loc, str] | None:
        problem = TierHostSpec.check_against(self, spec, topology)
        if problem is not None:
            return problem
        missing = cpu_problem() if getattr(topology, "backend", "mininet") == "mininet" else None   # a node's: at setup
        if missing is not None:
            return ("cpu",), f"slow needs the cgroup cpu controller (v2 or v1), and this machine has none: {missing}"
        return None


@dataclass
class Capped:
    host: str
    tier: str
    cap: CpuCap | onnode.RemoteCap
    cpu: float
    released: float | None = None
    undo: dict | None = None    # its entry in the run's ledger (a testbed node)


class Slow:
    info = INFO
    spec = SlowSpec

    def __init__(self, env: FaultEnv):
        self.env = env
        self.capped: list[Capped] = []
        self.hierarchies: dict[str, Hierarchy] = {}   # testbed nodes: each slowed host's, found at setup

    def setup(self, faults: Sequence[FaultSpec]) -> None:
        """On testbed nodes: each slowed host's cgroup hierarchy with the cpu controller, or one line."""
        if not onnode.remote(self.env):
            return
        for host in dict.fromkeys(f.host for f in faults):
            try:
                self.hierarchies[host] = onnode.remote_hierarchy(self.env, host)
            except RuntimeError as e:
                raise UserError(f"{host}: slow needs the cgroup cpu controller (v2 or v1) on the node: {e}") from None

    def describe(self, action: Capped) -> str:
        return (f"{action.cap.hierarchy.name} {action.cap.path}: {action.cap.limit} ({action.cpu:g}% of a CPU) "
                f"for the {action.tier} tier on {action.host}")

    def cap_for(self, host: str) -> CpuCap | onnode.RemoteCap:
        name = f"nestlab-{self.env.run_id}-{host}"
        if onnode.remote(self.env):
            return onnode.RemoteCap(self.env, host, name, self.hierarchies[host])
        try:
            hierarchy = cpu_hierarchy()
        except NoCpuController as e:   # checked with the spec; gone since (a remount): skip the window
            raise NoTarget(str(e)) from None
        return CpuCap(name, hierarchy)

    def inject(self, window: Window, first_id: int) -> list[Part]:
        env = self.env
        f = env.spec.faults[window.spec_index]
        workload, tier, pids = tier_pids(env, f.host)
        cap = self.cap_for(f.host)
        action = Capped(f.host, tier, cap, f.cpu)
        self.capped.append(action)
        self._record(action)   # a killed run's cgroup: `nestlab cleanup` removes it
        try:
            cap.apply(pids, f.cpu)   # undoes itself on a failure
            if isinstance(cap, onnode.RemoteCap) and cap.enabled_cpu and env.ledger is not None:
                old = action.undo   # its undo now disables v2's cpu controller too
                self._record(action)
                env.ledger.drop_undo(old)
        except BaseException as e:
            self._release(action)
            if isinstance(e, ProcessLookupError):   # the tier's processes exited meanwhile: nothing to cap
                raise NoTarget(f"the {tier} tier on {f.host} has no process left to cap") from None
            raise
        start = env.clocks.from_runner(monotonic())
        text = f"the {tier} tier on {f.host} capped at {f.cpu:g}% of a CPU"
        pids = sorted(cap.origin)
        where = {"hierarchy": cap.hierarchy.name, "cgroup": str(cap.path), "limit": cap.limit}
        observed = observed_pids(env, f.host, pids)   # its application modules, when the host is monitored
        if not observed:
            return [Part(target_json(description=text, host=f.host, tier=tier, pids=pids, workload=workload,
                                     cpu=f.cpu, module_key=None, **where), self.describe(action), start, action)]
        return [Part(target_json(description=f"{text}: pid {p}", host=f.host, tier=tier, pid=p, workload=workload,
                                 cpu=f.cpu, module_key=f"app:{p}", **where), self.describe(action), start, action)
                for p in observed]

    def _record(self, action: Capped) -> None:
        ledger = self.env.ledger
        if ledger is None:
            return
        if isinstance(action.cap, onnode.RemoteCap):
            argv, what = action.cap.undo_argv(), f"the slow fault's cgroup {action.cap.path} removed"
            action.undo = {"node": action.host, "argv": argv, "what": what}
            ledger.add_undo(action.host, argv, what)
        else:
            ledger.add_cgroup(action.cap.path)

    def _forget(self, action: Capped) -> None:
        ledger = self.env.ledger
        if ledger is None:
            return
        if action.undo is not None:
            ledger.drop_undo(action.undo)
            action.undo = None
        elif not isinstance(action.cap, onnode.RemoteCap):
            ledger.drop_cgroup(action.cap.path)

    def _release(self, action: Capped) -> None:
        action.cap.release()
        action.released = self.env.clocks.from_runner(monotonic())
        self.capped.remove(action)
        self._forget(action)

    def heal(self, part: Part) -> float:
        action: Capped = part.action
        if action.released is None:
            self._release(action)
        return action.released

    def teardown(self) -> None:
        for action in list(self.capped):   # an interrupted run: no process stays capped
            self._release(action)
