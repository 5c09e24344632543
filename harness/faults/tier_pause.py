"""tier_pause: a service tier's daemons on one host stopped (SIGSTOP to the daemon's process group:
nginx, gunicorn and its workers, memcached or MariaDB) and continued (SIGCONT), verified both ways by
the state of every thread of every process of the group (docs/service.md; issue 33 item 5's paused
tier, e.g. a paused cache). On a testbed node all of it is read and done on the node
(harness.faults.onnode), and the SIGCONT is in the run's ledger while the group is stopped.

    - {kind: tier_pause, host: cache, schedule: {at: [20s], duration: 3s}}

The culprit is the paused tier's application on that host. When that host is monitored (its
daemons then run with the interceptor), each process of the group that the collector sees as an
application (one with a data socket) is a target, `app:<pid>`, one faults row each sharing the one pause; otherwise the one row names the host, the tier and the group
leader's pid with no module (the collector does not watch that host): NeST's labels have no
positive module in the window, and the true effect is in the requests table (the tier's hops, and
every hop above it, waiting for the window's length).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.faults import onnode
from harness.faults.base import Part, target_json
from harness.faults.onnode import local_group_pids as group_pids
from harness.faults.stop_continue import StopContinue, Stopped
from harness.faults.tier_hosts import TierHostSpec, observed_pids, tier_daemon, tier_on
from rundir.faultkinds import FaultKindInfo

if TYPE_CHECKING:
    from harness.window import Window

INFO = FaultKindInfo("tier_pause", colour="#e7298a", order=None)
TIERS = ("web", "app", "cache", "db")


class TierPauseSpec(TierHostSpec):
    def check(self) -> None:
        if self.host is None:
            raise ValueError("tier_pause needs 'host': the host of the service tier to stop, e.g. cache")


class TierPause(StopContinue):
    info = INFO
    spec = TierPauseSpec

    def pids(self, action: Stopped) -> list[int]:
        return onnode.group_pids(self.env, action.node, action.proc.pid)   # on the node where the tier runs

    def describe(self, action: Stopped) -> str:
        return f"SIGSTOP / SIGCONT to process group {action.proc.pid} ({' '.join(action.proc.argv[:3])}) on {action.node}"

    def inject(self, window: Window, first_id: int) -> list[Part]:
        env = self.env
        f = env.spec.faults[window.spec_index]
        i, tier, proc = tier_daemon(env, f.host)
        action, start = self.stop(f.host, proc)
        pids = self.pids(action)
        text = f"the {tier} tier on {f.host} stopped"
        observed = observed_pids(env, f.host, pids)   # its application modules, when the host is monitored
        if not observed:
            return [Part(target_json(description=text, host=f.host, tier=tier, pid=proc.pid, pids=pids, workload=i,
                                     module_key=None), self.describe(action), start, action)]
        return [Part(target_json(description=f"{text}: pid {p}", host=f.host, tier=tier, pid=p, workload=i,
                                 module_key=f"app:{p}"), self.describe(action), start, action) for p in observed]


__all__ = ["TierPause", "TierPauseSpec", "group_pids", "tier_on"]
