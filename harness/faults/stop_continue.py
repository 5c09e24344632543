"""What server_pause and tier_pause share: a process group on a node stopped (SIGSTOP) and continued
(SIGCONT), each verified in the state of every thread of its processes, and every group still stopped
continued at teardown (an interrupted run), so that it can be stopped in turn. On a testbed node the
SIGCONT is in the run's ledger while the group is stopped (harness.faults.onnode.cont_undo), for
teardown and `nestlab cleanup` after a killed runner."""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.faults import onnode
from harness.faults.base import FaultEnv, Part
from harness.faults.spec import FaultSpec

if TYPE_CHECKING:
    from harness.backends.base import Proc

VERIFY_S = 2.0   # how long the pause (or continue) may take to show in every thread's state


@dataclass
class Stopped:
    node: str
    proc: Proc                    # the group's leader: signals go to its process group
    resumed: float | None = None
    undo: dict | None = None      # its entry in the ledger (testbed nodes)


def verify(node, pids: Sequence[int], stopped: bool) -> float:
    """The node's monotonic time once every thread of `pids` is (or no longer is) stopped; read on the
    node (/proc of its tasks), so that it works on testbed nodes too."""
    files = " ".join(f"/proc/{int(p)}/task/*/status" for p in pids)
    deadline = time.monotonic() + VERIFY_S
    while True:
        out = node.run(["sh", "-c", f"grep -h '^State:' {files}"], check=False).stdout
        states = [line.split()[1] for line in out.splitlines() if line.startswith("State:")]
        if states and all((s == "T") == stopped for s in states):
            return node.monotonic()
        if time.monotonic() > deadline:
            want = "stopped" if stopped else "running again"
            raise RuntimeError(f"{node.name}: pids {list(pids)} not {want} after {VERIFY_S:g}s (states {states})")
        time.sleep(0.01)


class StopContinue:
    """The shared half of a stop/continue fault kind; a kind adds its spec, info, inject and describe."""

    def __init__(self, env: FaultEnv):
        self.env = env
        self.paused: list[Stopped] = []

    def setup(self, faults: Sequence[FaultSpec]) -> None:
        pass

    def pids(self, action: Stopped) -> list[int]:
        """The processes whose threads show the stop (default: the leader's)."""
        return [action.proc.pid]

    def stop(self, node_name: str, proc: Proc) -> tuple[Stopped, float]:
        """Stop the group; returns the action and when the stop showed, on the reference clock."""
        node = self.env.backend.node(node_name)
        action = Stopped(node_name, proc)
        self.paused.append(action)
        ledger = self.env.ledger
        if onnode.remote(self.env) and ledger is not None:   # before the stop: a killed runner's is undone
            argv = onnode.cont_undo(self.env, node_name, proc.pid, proc.start_time)
            what = f"SIGCONT to process group {proc.pid} (a stopped fault's)"
            action.undo = {"node": node_name, "argv": argv, "what": what}
            ledger.add_undo(node_name, argv, what)
        node.signal(proc, signal.SIGSTOP)
        return action, self.env.clocks.from_node(node_name, verify(node, self.pids(action), stopped=True))

    def heal(self, part: Part) -> float:
        action: Stopped = part.action
        if action.resumed is None:
            node = self.env.backend.node(action.node)
            node.signal(action.proc, signal.SIGCONT)
            action.resumed = self.env.clocks.from_node(action.node, verify(node, self.pids(action), stopped=False))
            self._forget(action)
        return action.resumed

    def _forget(self, action: Stopped) -> None:
        if action.undo is not None and self.env.ledger is not None:
            self.env.ledger.drop_undo(action.undo)
            action.undo = None

    def teardown(self) -> None:
        for p in self.paused:
            if p.resumed is None:
                node = self.env.backend.node(p.node)
                node.signal(p.proc, signal.SIGCONT)
                p.resumed = self.env.clocks.from_node(p.node, node.monotonic())
                self._forget(p)
