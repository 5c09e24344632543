"""app_pause: every live process of a workload (or the one instance named) pauses its reads and
writes, through the LD_PRELOAD interceptor's signal handshake (backend.pause/resume on the process's
host). Each process is one part: its start is the pause acknowledged, its end the resume acknowledged,
both stamped by the process on its host's clock. The culprit is the application and its sockets.
With `target: {host: H}` (a monitored tier host) the processes are those of the service tier's
daemon group on H that the collector sees as applications (under the interceptor, with a data
socket; docs/faults.md, "Faults at tier hosts").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from harness.faults.base import FaultEnv, NoTarget, Part, target_json
from harness.faults.spec import FaultSpec, FaultTarget, Loc, SpecView
from harness.faults.tier_hosts import not_a_tier, observed_pids, tier_pids
from harness.interceptor.shm import InterceptorStateError
from rundir.faultkinds import FaultKindInfo

if TYPE_CHECKING:
    from harness.topology import Topology
    from harness.window import Window

# Its targets are the paused process's app module and that app's sockets (they stall with it).
INFO = FaultKindInfo("app_pause", colour="#fb6a4a", order=0, children="socket", key="app:{pid}")


class AppPauseSpec(FaultSpec):
    target_on_monitor: ClassVar[bool] = True
    host_targets: ClassVar[bool] = True   # {host: H}: the service tier's processes on H

    # Taken (a router, checked as one, and the faults row's at_node) though the pause needs none.
    at: str | None = Field(default=None, description="router that drops (network faults)")
    target: FaultTarget | None = None

    def check(self) -> None:
        if self.target is None:
            raise ValueError("app_pause needs 'target: {workload: N}' or 'target: {host: H}' (a tier's host)")

    def check_against(self, spec: SpecView, topology: Topology) -> tuple[Loc, str] | None:
        if not spec.interceptor:
            return ("kind",), "app_pause needs the interceptor (interceptor: true)"
        if self.target.host is not None:
            problem = not_a_tier(spec, self.target.host)
            return None if problem is None else (("target", "host"), problem)
        return None


@dataclass
class Paused:
    """A process paused: where it runs and the signals the handshake used."""

    host: str
    pid: int
    pause_signal: int
    resume_signal: int


class AppPause:
    info = INFO
    spec = AppPauseSpec

    def __init__(self, env: FaultEnv):
        self.env = env

    def setup(self, faults: Sequence[FaultSpec]) -> None:
        pass   # nothing shared: the interceptor is loaded into the clients when they start

    def teardown(self) -> None:
        pass

    def describe(self, action: Paused) -> str:
        return f"signal {action.pause_signal} (pause) / {action.resume_signal} (resume) to pid {action.pid}"

    def inject(self, window: Window, first_id: int) -> list[Part]:
        env = self.env
        f = env.spec.faults[window.spec_index]
        if f.target.host is not None:
            return self._pause_tier(f.target.host)
        procs = [p for i, p in env.workloads.live(f.target.workload)
                 if f.target.instance is None or i.index == f.target.instance]
        if not procs:
            raise NoTarget(f"workload {f.target.workload} had no live process")
        host = env.spec.workloads[f.target.workload].host
        # Pause them all first (each acknowledged on the host's clock), then describe them.
        shm = self._shm(host)
        paused: list[tuple[Any, Any]] = [(proc, env.backend.pause(host, shm, proc.pid)) for proc in procs]
        parts = []
        for proc, state in paused:
            action = Paused(host, proc.pid, state.pause_signal, state.resume_signal)
            target = target_json(description=f"pause pid {proc.pid} ({' '.join(proc.argv[:2])})",
                                 workload=f.target.workload, pid=proc.pid, module_key=f"app:{proc.pid}")
            parts.append(Part(target, self.describe(action), env.clocks.from_node(host, state.ack_mono), action))
        return parts

    def _shm(self, host: str) -> str | None:
        """The interceptor's directory on `host` (each monitored host has its own)."""
        return (self.env.shm_dirs or {}).get(host, self.env.shm_dir)

    def _pause_tier(self, host: str) -> list[Part]:
        """Every process of the tier's daemon group on `host` that runs with the interceptor, paused;
        all or none (a process that does not acknowledge resumes the others)."""
        env = self.env
        workload, tier, pids = tier_pids(env, host)
        shm = self._shm(host)
        # The processes NeST sees as applications (a master that only listens is none): the targets.
        pids = observed_pids(env, host, pids)
        if not pids:
            raise NoTarget(f"no process of the {tier} tier on {host} runs with the interceptor and a data socket")
        paused: list[tuple[int, Any]] = []
        try:
            for pid in pids:
                paused.append((pid, env.backend.pause(host, shm, pid)))
        except BaseException as e:   # e.g. Ctrl-C: the processes paused so far are no part, nothing would resume them
            self._resume_quietly(host, shm, [pid for pid, _ in paused])
            if isinstance(e, InterceptorStateError):
                raise NoTarget(f"the {tier} tier on {host}: {e}") from e
            raise
        parts = []
        for pid, state in paused:
            action = Paused(host, pid, state.pause_signal, state.resume_signal)
            target = target_json(description=f"pause the {tier} tier on {host}: pid {pid}", host=host, tier=tier,
                                 workload=workload, pid=pid, module_key=f"app:{pid}")
            parts.append(Part(target, self.describe(action), env.clocks.from_node(host, state.ack_mono), action))
        return parts

    def _resume_quietly(self, host: str, shm: str | None, pids: list[int]) -> None:
        """Resume each of `pids`, whatever the others do (one gone meanwhile is nothing to resume)."""
        for pid in pids:
            try:
                self.env.backend.resume(host, shm, pid)
            except InterceptorStateError:
                pass

    def heal(self, part: Part) -> float:
        p: Paused = part.action
        return self.env.clocks.from_node(p.host, self.env.backend.resume(p.host, self._shm(p.host), p.pid).ack_mono)
