"""server_pause: the server of the target workload (lighttpd, `iperf -s` on its server host) is
stopped (SIGSTOP to its process group) and continued (SIGCONT), verified both ways by the state of
every one of its threads (/proc/<pid>/task/*/status).

From the monitored host the remote peer simply stops: a download's server sends nothing more, an
upload's server stops reading, its receive window closes and the host's TCP sends zero-window probes.
The culprit, from the host's view, is the TCP connection: in the thesis's model the TCP module stands
for everything between the host's stack and the remote application (3.2: a connection that stops
delivering is stalled "in the TCP module or beyond"), the host's application and socket keep asking
(BLOCKED on TCP), and its interface keeps carrying other connections' traffic. So the targets are the
monitored host's connections to that server, each a faults row sharing the one pause; positive is
the TCP module of each, as for a tcp_drop (docs/faults.md, which also gives the other reading).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.faults.base import NoTarget, Part, target_json
from harness.faults.iptables import check_connection, connection_key
from harness.faults.spec import FaultSpec, FaultTarget, Footprint, SpecView, monitor_host, monitored_hosts
from harness.faults.stop_continue import StopContinue, Stopped
from rundir.faultkinds import FaultKindInfo

if TYPE_CHECKING:
    from harness.backends.base import Proc
    from harness.window import Window

INFO = FaultKindInfo("server_pause", colour="#c994c7", order=3)


class ServerPauseSpec(FaultSpec):
    target: FaultTarget | None = None

    def check(self) -> None:
        if self.target is None:
            raise ValueError("server_pause needs 'target: {workload: N}'")
        if getattr(self, "at", None) is not None:
            raise ValueError("server_pause stops the target workload's server; it has no 'at'")

    def footprint(self, spec: SpecView) -> Footprint:
        """Every workload its server serves (the same server host and program) stalls."""
        w = spec.workloads[self.target.workload]
        return Footprint(frozenset(), frozenset((i, None) for i, o in enumerate(spec.workloads)
                                                if (o.server, o.kind) == (w.server, w.kind)))

    def node(self, spec: SpecView) -> str:
        """The paused server's host."""
        return spec.workloads[self.target.workload].server



class ServerPause(StopContinue):
    info = INFO
    spec = ServerPauseSpec

    def describe(self, action: Stopped) -> str:
        return f"SIGSTOP / SIGCONT to process group {action.proc.pid} ({' '.join(action.proc.argv)}) on {action.node}"

    def server_of(self, fault: FaultSpec) -> Proc:
        w = self.env.spec.workloads[fault.target.workload]
        program = "lighttpd" if w.kind == "wget" else "iperf"
        for proc in self.env.workloads.servers:
            if proc.node == w.server and proc.argv and proc.argv[0] == program:
                return proc
        raise NoTarget(f"no {program} server running on {w.server}")

    def inject(self, window: Window, first_id: int) -> list[Part]:
        env = self.env
        f = env.spec.faults[window.spec_index]
        proc = self.server_of(f)
        w = env.spec.workloads[f.target.workload]
        conns = self.connections(f)
        action, start = self.stop(w.server, proc)
        text = self.describe(action)
        if not conns:
            return [Part(target_json(description=f"{w.kind} server on {w.server} stopped: no connection of "
                                                 f"{monitor_host(env.spec)} to it", server=w.server, server_pid=proc.pid,
                                     module_key=None), text, start, action)]
        return [Part(target_json(description=f"tcp {c['src']}:{c['sport']}>{c['dst']}:{c['dport']}: its "
                                             f"server stopped", server=w.server, server_pid=proc.pid, workload=wl,
                                 pid=pid, module_key=connection_key(c),
                                 **c), text, start, action)
                for c, pid, wl in conns]

    def connections(self, f: FaultSpec) -> list[tuple[dict, int, int]]:
        """(connection, pid, workload) of the monitored host's connections to the paused server."""
        env = self.env
        w = env.spec.workloads[f.target.workload]
        server = env.backend.address(w.server)
        out = []
        for wl, o in enumerate(env.spec.workloads):
            if o.host not in monitored_hosts(env.spec) or (o.server, o.kind) != (w.server, w.kind):
                continue
            for _, proc in env.workloads.live(wl):
                for c in env.backend.tcp_connections(o.host, proc.pid):
                    c = check_connection(o.host, c)
                    if c["dst"] == server:
                        out.append((c, proc.pid, wl))
        return out
