"""What the fault kinds aimed at a service tier's host share (issue 33 item 5; docs/faults.md, "Faults
at tier hosts"): which tier runs on a host, the processes of that tier there (its daemon's process
group: nginx and its workers, gunicorn and its workers, memcached, mariadbd), and a spec check that a
host target names a tier; `TierHostSpec`, the spec rules of the kinds that act on one tier host's
processes (slow, tier_pause).

tcp_drop and app_pause take `target: {host: H}`; slow and tier_pause `host: H` (and the same spelling).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from harness.faults import onnode
from harness.faults.base import NoTarget
from harness.faults.spec import FaultSpec, Footprint, Loc, SpecView

if TYPE_CHECKING:
    from harness.faults.base import FaultEnv
    from harness.topology import Topology


def tier_on(spec: SpecView, host: str) -> tuple[int, str] | None:
    """(service workload, tier) of the tier running on `host` (tier: web, app, cache or db)."""
    for i, w in enumerate(spec.workloads):
        if w.kind != "service":
            continue
        for tier, h in w.tier_hosts.items():
            if h == host and tier != "client":
                return i, "app" if tier.startswith("app") else tier
    return None


def not_a_tier(spec: SpecView, host: str) -> str | None:
    """The spec error when `host` runs no service tier (None: it runs one)."""
    if tier_on(spec, host) is not None:
        return None
    tiers = sorted({h for w in spec.workloads if w.kind == "service"
                    for t, h in w.tier_hosts.items() if t != "client"})
    return f"{host!r} runs no tier of a service workload (tier hosts: {', '.join(tiers) or 'none'})"


class TierHostSpec(FaultSpec):
    """The spec rules of a kind acting on the processes of the service tier on one host (`host: H`):
    the host must run a tier, the fault's footprint is that tier's service workload, one action per host."""

    host: str | None = Field(default=None, description="ip_drop, loss: whose traffic (default: the monitor); "
                                                       "delay: the app tier's host whose replies are held")

    def check_against(self, spec: SpecView, topology: Topology) -> tuple[Loc, str] | None:
        problem = not_a_tier(spec, self.host)
        return None if problem is None else (("host",), problem)

    def footprint(self, spec: SpecView) -> Footprint:
        """The service workload the tier belongs to."""
        return Footprint(frozenset(), frozenset({(tier_on(spec, self.host)[0], None)}))

    def same_action(self, other: FaultSpec) -> bool:
        return self.host == other.host

    def node(self, spec: SpecView) -> str:
        return self.host


def tier_daemon(env: FaultEnv, host: str) -> tuple[int, str, Any]:
    """(service workload, tier, daemon process) of the tier on `host`; NoTarget when it is not running."""
    found = tier_on(env.spec, host)
    if found is None:
        raise NoTarget(f"{host} runs no service tier")
    i, tier = found
    tiers = env.workloads.services.get(i)
    proc = next((p for t, p in (tiers.procs if tiers else []) if p.node == host and t == tier), None)
    if proc is None or proc.poll() is not None:
        raise NoTarget(f"no {tier} daemon running on {host}")
    return i, tier, proc


def tier_pids(env: FaultEnv, host: str) -> tuple[int, str, list[int]]:
    """(service workload, tier, every process of the tier's daemon group on `host`)."""
    i, tier, proc = tier_daemon(env, host)
    pids = onnode.group_pids(env, host, proc.pid)
    if not pids:
        raise NoTarget(f"the {tier} daemon on {host} has no live process")
    return i, tier, pids


def observed_pids(env: FaultEnv, host: str, pids: list[int]) -> list[int]:
    """Those of `pids` that the collector records as application modules on a monitored `host`: a
    process under the interceptor (a counter file in the host's directory) that has had a data socket
    (harness.agent.application_pids; on a testbed node, read there)."""
    from harness.faults.spec import monitored_hosts

    shm = (getattr(env, "shm_dirs", None) or {}).get(host)
    if host not in monitored_hosts(env.spec) or shm is None:
        return []
    return onnode.application_pids(env, host, shm, pids)
