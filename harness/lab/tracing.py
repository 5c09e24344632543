"""Message traces in the network lab (`trace: messages`; docs/service.md, "Message traces"): which
hosts' processes are traced, their interceptor environment with the message ring switched on, and the
drainer (harness/collector/tracedrain.py) that empties the rings into run.db while the run goes on.

Traced: a service workload's tiers and load generator (its client, web, app, cache and db hosts),
and the monitored hosts' intercepted clients. A traced host without an interceptor directory gets
one (its processes are then counted too; only the monitored host's counters become modules). Every
Mininet host shares this machine's /dev/shm and /proc, so one drainer, started in the monitored host,
reads every traced host's directory into run.db. On testbed nodes each traced node runs a drainer of
its own, writing a database there (Backend.trace_db) that the backend brings back at the end with
the node's clock offset (rundir/nodemerge.py; docs/ssh-backend.md, "Offsets"). Its last drain runs when it is stopped, after the servers: then
the traced table says how many events each process recorded, dropped (its ring was full) and lost,
and any drop or loss is a run warning and in the manifest's `trace`.
"""

from __future__ import annotations

from harness.backends.base import Proc
from harness.collector.tracedrain import command as drainer_command
from harness.faults.spec import monitor_host, monitored_hosts
from harness.interceptor import ENV_SHM_DIR, ENV_TRACE_EVENTS
from harness.ledger import signals_held
from rundir.messages import drop_warnings, trace_totals

# Events in each traced process's ring (64 bytes each: 4 MiB a process). The drainer empties the
# rings every snapshot interval (100 ms): at 80 requests/s the busiest tier (nginx) makes about
# 1,000 events a second, so a ring holds a minute of them, and a drainer held up for seconds loses none.
RING_EVENTS = 65536
STOP_S = 30.0


def traced_hosts(spec) -> list[str]:
    """The hosts whose processes are traced, in a stable order."""
    hosts: dict[str, None] = {}
    if spec.interceptor:
        hosts.update(dict.fromkeys(monitored_hosts(spec)))
    for w in spec.workloads:
        if w.kind == "service":
            hosts.update(dict.fromkeys(w.hosts))
    return list(hosts)


class MessageTracing:
    """The trace of one run: envs for the traced hosts, then the drainer from start() to stop()."""

    def __init__(self, spec, backend, topology_backend: str = ""):
        self.spec, self.backend = spec, backend
        self.dirs: dict[str, str] = {}
        self.procs: dict[str, Proc] = {}     # the host each drainer runs in -> the drainer
        self.totals: dict | None = None     # after stop(): rundir.messages.trace_totals

    def add_env(self, client_env: dict[str, dict[str, str]]) -> None:
        """Give every traced host an interceptor environment with the ring on (in place)."""
        for host in traced_hosts(self.spec):
            env = client_env.get(host)
            if not env:
                _, env = self.backend.interceptor(host)
                client_env[host] = env
            env[ENV_TRACE_EVENTS] = str(RING_EVENTS)
            self.dirs[host] = env[ENV_SHM_DIR]

    @property
    def separate(self) -> bool:
        """A drainer per traced node (testbed nodes), each writing a database there."""
        return self.backend.separate_collectors()

    def start(self, db: str, log, on_process) -> None:
        """The drainer in the monitored host (Mininet: every traced host's directory, into `db`), or one
        in every traced node (testbed: its own directory, into its node's database; its log
        tracedrain-<node>.log beside `log`)."""
        plan = {monitor_host(self.spec): (db, self.dirs, log)}
        if self.separate:
            plan = {h: (self.backend.trace_db(h), {h: d}, log.with_name(f"tracedrain-{h}.log"))
                    for h, d in self.dirs.items()}
        for host, (path, dirs, host_log) in plan.items():
            argv = drainer_command(self.backend.python(host), path, self.spec.snapshot_interval, dirs)
            with signals_held():
                proc = self.procs[host] = self.backend.node(host).start(argv, host_log)
                on_process(proc, None, "tracedrain", host)

    def stop(self, on_process) -> None:
        """Stop the drainers (each one's last drain), after every traced process ended."""
        failed = []
        for host, proc in list(self.procs.items()):
            code = self.backend.node(host).stop(proc, timeout=STOP_S)
            on_process(proc, None, "ended", None)
            if code not in (0, None):
                failed.append(f"{host}: status {code}" if self.separate else f"status {code}")
        self.procs = {}
        if failed:
            raise RuntimeError(f"the message drainer exited with {', '.join(failed)} (see its log)")

    @staticmethod
    def outcome(db_path) -> tuple[dict | None, list[str]]:
        """The run's trace totals (the manifest's `trace`) and its warnings (drops, losses)."""
        totals = trace_totals(db_path)
        return totals, drop_warnings(totals)
