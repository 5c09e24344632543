"""The host-local operations of the faults aimed at a service tier, done where the tier runs.

A Mininet host shares this machine's /proc, cgroups and /dev/shm, so the runner does them itself, as
before. A testbed node (the SSH backend: `backend.remote`) has its own: each operation goes to the
node (docs/ssh-backend.md, 3b "Faults"):

- a daemon group's processes: read from the node's /proc by a few lines of Python (GROUP_SCRIPT; the
  node may have nothing of nestlab: a cache or database host that is neither monitored nor traced);
- a CPU quota (`slow`): harness/faults/cgroup.py's own source run there (`python3 -c <source> cap |
  release | remove`, standard library only), on the node's cgroup v2 or v1;
- the interceptor's files (a tier under the interceptor: its host is monitored or traced, so the
  package is there): the node agent (`python3 -m harness.agent observed | delay | undeferred`).

Every change a killed runner would leave on a node has its undo in the run's ledger (`undo_argv`):
the cgroup's removal, the group's SIGCONT, the reply delay set back to 0. Teardown and `nestlab
cleanup` run them (harness/backends/ssh/backend.py, cleanup.py).
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from harness.faults.cgroup import Hierarchy

if TYPE_CHECKING:
    from harness.faults.base import FaultEnv

CGROUP_SOURCE = (Path(__file__).resolve().parent / "cgroup.py").read_text()

# The live (not zombie) processes of process group argv[1], from the node's /proc (as nodeserver.py).
GROUP_SCRIPT = """\
import json, os, sys
g, out = int(sys.argv[1]), []
for n in os.listdir('/proc'):
    if n.isdigit():
        try:
            d = open('/proc/%s/stat' % n, 'rb').read()
        except OSError:
            continue
        f = d[d.rfind(b')') + 2:].split()
        if int(f[2]) == g and f[0] != b'Z':
            out.append(int(n))
print(json.dumps(sorted(out)))
"""

# SIGCONT to process group argv[1] if its leader is still the process started at argv[2] (field 22 of
# /proc/pid/stat): a tier_pause's undo, which never signals a group that reused the pid.
CONT_SCRIPT = """\
import os, signal, sys
pid, start = int(sys.argv[1]), sys.argv[2]
try:
    d = open('/proc/%d/stat' % pid, 'rb').read()
except OSError:
    sys.exit(0)
if d[d.rfind(b')') + 2:].split()[19].decode() == start:
    os.killpg(pid, signal.SIGCONT)
"""


def remote(env: FaultEnv) -> bool:
    return bool(getattr(getattr(env, "backend", None), "remote", False))


def _json(node, argv: list[str], what: str) -> Any:
    """One JSON answer of a command on `node` (the last line of its output)."""
    r = node.run(argv, check=False)
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RuntimeError(f"{node.name}: {what}: {(r.stderr or r.stdout).strip()[-300:] or 'no answer'}") from None
    if isinstance(out, dict) and "error" in out:
        if out.get("gone"):
            raise ProcessLookupError(out["error"])
        raise RuntimeError(f"{node.name}: {what}: {out['error']}")
    return out


def python(env: FaultEnv, host: str) -> str:
    """The node's Python (the topology's `python`)."""
    return env.backend.node(host).p.python


def local_group_pids(pgid: int, proc: str = "/proc") -> list[int]:
    """Every live process of a process group in this machine's /proc (Mininet hosts share its pids);
    zombies left out (a stopped master cannot reap them, and a Z task never shows a stop)."""
    out = []
    for stat in Path(proc).glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return sorted(out)


def group_pids(env: FaultEnv, host: str, pgid: int) -> list[int]:
    """Every live process of process group `pgid` on `host`."""
    if not remote(env):
        return local_group_pids(pgid)
    node = env.backend.node(host)
    return [int(p) for p in _json(node, [python(env, host), "-c", GROUP_SCRIPT, str(int(pgid))],
                                  f"the processes of group {pgid}")]


def application_pids(env: FaultEnv, host: str, shm: str, pids: list[int]) -> list[int]:
    """Those of `pids` the collector records as application modules (harness.agent.application_pids)."""
    if not remote(env):
        from harness.agent import application_pids as local

        return local(shm, pids)
    if not pids:
        return []
    return [int(p) for p in env.backend.agent(host, "observed", shm, ",".join(map(str, pids)))]


def set_host_delay(env: FaultEnv, host: str, shm: str, seconds: float, mode: int) -> list[int]:
    """The reply delay of every live process in `host`'s interceptor directory; their pids."""
    if not remote(env):
        from harness.interceptor.delay import set_host_delay as local

        return local(shm, seconds, mode)
    return [int(p) for p in env.backend.agent(host, "delay", shm, repr(float(seconds)), int(mode))]


def host_undeferred(env: FaultEnv, host: str, shm: str) -> int:
    if not remote(env):
        from harness.interceptor.delay import host_undeferred as local

        return local(shm)
    return int(env.backend.agent(host, "undeferred", shm))


def delay_undo(env: FaultEnv, host: str, shm: str) -> list[str]:
    """The ledger's undo of a reply delay on a node: every process's delay back to 0."""
    return [*env.backend.python(host), "-m", "harness.agent", "delay", shm, "0.0", "0"]


def cont_undo(env: FaultEnv, host: str, pgid: int, start: str) -> list[str]:
    """The ledger's undo of a stopped group on a node: SIGCONT, if the group's leader is still it."""
    return [python(env, host), "-c", CONT_SCRIPT, str(int(pgid)), str(start)]


class RemoteCap:
    """harness.faults.cgroup.CpuCap's part the `slow` kind uses, on a testbed node: the cgroup is made,
    capped, filled and released there, by cgroup.py's own code (`python3 -c <source> ...`)."""

    def __init__(self, env: FaultEnv, host: str, name: str, hierarchy: Hierarchy):
        self.env, self.host, self.node = env, host, env.backend.node(host)
        self.hierarchy = hierarchy
        self.path = PurePosixPath(hierarchy.mount) / name
        self.origin: dict[int, str] = {}
        self.limit = ""
        self.state: dict | None = None
        self.tried = False     # apply was asked: a release without its answer removes what may be there

    def _argv(self, *args: str) -> list[str]:
        return [python(self.env, self.host), "-c", CGROUP_SOURCE, *args]

    @property
    def enabled_cpu(self) -> bool:
        """This cap enabled v2's cpu controller (its release disables it again)."""
        return bool(self.state and self.state.get("enabled"))

    def undo_argv(self) -> list[str]:
        """The ledger's undo: the cgroup emptied and removed (what a killed runner's cap leaves)."""
        return self._argv("remove", str(self.path), *(["disable-cpu"] if self.enabled_cpu else []))

    def apply(self, pids: list[int], percent: float) -> None:
        """As CpuCap.apply, on the node (undone there on a failure; ProcessLookupError: nothing to cap)."""
        self.tried = True
        self.state = _json(self.node, self._argv("cap", self.path.name, repr(float(percent)), *map(str, pids)),
                           f"capping processes {pids} in {self.path}")
        self.origin = {int(p): c for p, c in self.state["origin"].items()}
        self.limit = self.state["limit"]

    def release(self) -> None:
        """As CpuCap.release, on the node; idempotent."""
        if self.state is not None:
            _json(self.node, self._argv("release", json.dumps(self.state)), f"releasing {self.path}")
        elif self.tried:   # the node's answer to apply never came: whatever it made goes
            _json(self.node, self.undo_argv(), f"removing {self.path}")
        self.state, self.tried, self.origin = None, False, {}


def remote_hierarchy(env: FaultEnv, host: str) -> Hierarchy:
    """The node's hierarchy with the cpu controller (v2, else v1); RuntimeError saying what is missing."""
    node = env.backend.node(host)
    h = _json(node, [python(env, host), "-c", CGROUP_SOURCE, "check"], "the cgroup cpu controller")
    return Hierarchy(int(h["version"]), Path(h["mount"]), h["root"])
