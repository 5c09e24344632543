"""The embedded default backend: the topology as Mininet hosts on this machine.

Every node (routers included) is a Mininet Host; there are no switches and no controller, so Open
vSwitch is not needed. Routers forward with static routes. Bandwidth limits use TCLink (HTB) with a
pfifo of the link's `queue` packets under the HTB class, and segmentation offloads are off on every
interface (docs/link-model.md); rate, queue and offloads are checked after the build. Delay and loss need netem, which this kernel may lack: a
topology asking for them is refused rather than silently built without them.

Processes run in a node's namespaces through `mnexec -a <shell pid>`, each in its own session so
that its whole process group can be signalled (Mininet's own node.popen processes survive
net.stop(), and its cleanup kills every Mininet shell on the machine; we use neither).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import interceptor as _interceptor
from harness.agent import tcp_connections
from harness.backends.base import ClockOffset, Clocks, Proc
from harness.fabric import check_fabric, seed_script
from harness.interceptor.pause import PauseState, pause_process, resume_process
from harness.ledger import Ledger, held_mask_preexec, kill_group, signals_held
from harness.routing import HASH_SYSCTLS, check_multipath, route_command
from harness.topology import Interface, Topology
from rundir.db import monotonic
from rundir.errors import UserError

if TYPE_CHECKING:
    from rundir.recorder import RunRecorder

REPO = Path(__file__).resolve().parent.parent.parent

REQUIRED_BINARIES = ("mnexec", "ip", "tc", "ethtool", "iptables", "iptables-restore", "sysctl")
HTB_HANDLE = 5     # Mininet's TCLink: root qdisc 5: htb, class 5:1 at the link's rate
LEAF_HANDLE = 10   # our pfifo under 5:1 (where Mininet would put netem)
# Segmentation offloads, turned off on every emulated interface (ethtool -K names; lro is often
# '[fixed] off' on veth, and ethtool accepts turning it off anyway), and ethtool -k's labels.
OFFLOADS = ("tso", "gso", "gro", "lro")
OFFLOAD_LABELS = {"tso": "tcp-segmentation-offload", "gso": "generic-segmentation-offload",
                  "gro": "generic-receive-offload", "lro": "large-receive-offload"}


def _mininet():
    try:
        from mininet.link import Link, TCLink
        from mininet.log import setLogLevel
        from mininet.net import Mininet
    except ImportError:
        raise UserError("Mininet is not importable from this Python; run scripts/setup.sh "
                        "(it builds .venv from Debian's python3, which has Mininet)") from None
    return Mininet, Link, TCLink, setLogLevel


def netem_available() -> bool:
    """Try a netem qdisc in a throwaway network namespace (gone when the command exits)."""
    r = subprocess.run(["unshare", "-n", "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                       capture_output=True)
    return r.returncode == 0


class MininetNode:
    workdir = None   # every host shares this machine's files

    def __init__(self, name: str, host, ledger: Ledger | None):
        self.name, self.host, self.ledger = name, host, ledger

    @property
    def pid(self) -> int:
        return self.host.pid

    def _argv(self, argv: list[str]) -> list[str]:
        return ["mnexec", "-a", str(self.host.pid), *argv]

    def run(self, argv, check=True, timeout=30.0, input=None) -> subprocess.CompletedProcess:
        r = subprocess.run(self._argv(argv), capture_output=True, text=True, timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise RuntimeError(f"{self.name}: {' '.join(argv)} failed ({r.returncode}): "
                               f"{(r.stderr or r.stdout).strip()}")
        return r

    def start(self, argv, log: Path | None, env=None) -> Proc:
        out = open(log, "ab") if log else subprocess.DEVNULL
        try:
            handle = subprocess.Popen(self._argv(argv), stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True,
                                      env={**os.environ, **(env or {})}, preexec_fn=held_mask_preexec())
        finally:
            if log:
                out.close()
        if self.ledger:
            self.ledger.add_process(handle.pid, f"{self.name}: {' '.join(argv)}")
        return Proc(self.name, handle.pid, list(argv), log, monotonic(), handle)

    def signal(self, proc: Proc, sig: int, group: bool = True) -> None:
        try:
            (os.killpg if group else os.kill)(proc.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, proc: Proc, timeout: float = 3.0) -> int | None:
        if proc.handle is not None and proc.handle.poll() is None:
            self.signal(proc, signal.SIGTERM)
            try:
                proc.handle.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(proc, signal.SIGKILL)
                proc.handle.wait(5)
        # The leader may be gone while others in its group live on (shell loops): sweep the group.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.ledger:
            self.ledger.drop_process(proc.pid)
        return proc.handle.returncode if proc.handle is not None else None

    def monotonic(self) -> float:
        return monotonic()  # every Mininet namespace shares the host's CLOCK_MONOTONIC

    def put(self, local: Path, remote: str) -> None:
        if Path(local).resolve() != Path(remote).resolve():
            shutil.copyfile(local, remote)

    def get(self, remote: str, local: Path) -> None:
        if Path(local).resolve() != Path(remote).resolve():
            shutil.copyfile(remote, local)

    def log_path(self, log: Path) -> str:
        return str(log)


def _first_line(argv: list[str]) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=5)
        return (r.stdout or r.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "unavailable"


# Each host's namespace gets its own TCP socket hash of this many buckets rather than sharing the
# machine's (262,144 buckets here). sock_diag walks every bucket of the hash it dumps, so with the
# shared one the collector paid ~1 ms of kernel time per dump whatever the number of connections:
# 2.4 ms a snapshot at 100 connections against 0.3 ms with a private hash (bench/bench_collector.py).
# 16,384 buckets keep chains short up to thousands of connections.
CHILD_EHASH_ENTRIES = 16384
_CHILD_EHASH = Path("/proc/sys/net/ipv4/tcp_child_ehash_entries")


@contextlib.contextmanager
def private_tcp_hash(ledger: Ledger | None, entries: int = CHILD_EHASH_ENTRIES):
    """While inside, new network namespaces get a private TCP hash (Linux >= 6.1, the sysctl
    net.ipv4.tcp_child_ehash_entries, read when a namespace is created). The machine's value is put
    back on the way out; the ledger remembers it in case the runner dies inside (`nestlab cleanup`).
    A machine where the sysctl is missing or already set by its owner is left as it is."""
    try:
        before = _CHILD_EHASH.read_text().strip()
    except OSError:
        before = None
    if before != "0":
        yield
        return
    name = "net.ipv4.tcp_child_ehash_entries"
    if ledger:
        ledger.add_sysctl(name, before)
    try:
        _CHILD_EHASH.write_text(str(entries))
        yield
    finally:
        with signals_held():   # put back and forgotten together: a signal between would lose one of them
            _CHILD_EHASH.write_text(before)
            if ledger:
                ledger.drop_sysctl(name)


class MininetBackend:
    kind = "mininet"
    remote = False   # the collector writes the run's own run.db

    def __init__(self, topology: Topology, ledger: Ledger | None = None, spec: Any = None,
                 run_id: str | None = None):
        """`spec`: the run's spec (its congestion control, the programs its workloads need), or for a
        network alone (tests, benchmarks) nothing or just the congestion control's name (cubic)."""
        self.topology, self.ledger, self.run_id = topology, ledger, run_id
        self.spec = None if spec is None or isinstance(spec, str) else spec
        self.cc = self.spec.congestion_control if self.spec is not None else (spec or "cubic")
        self.net = None
        self.nodes: dict[str, MininetNode] = {}
        self.shm_dirs: list[Path] = []
        self.link_model: list[dict] = []   # what _check_shaping verified, for the manifest

    @classmethod
    def check_runner(cls) -> None:
        if os.geteuid() != 0:
            raise UserError("run-experiment needs root (Mininet namespaces, tc, iptables); try sudo")

    def announce(self, step: str) -> str | None:
        if step == "build":
            topo = self.topology
            return f"building topology {topo.name} ({len(topo.spec.nodes)} nodes, {len(topo.spec.links)} links)"
        return None

    def preflight(self, programs: Callable[[], None] | None = None) -> None:
        """Root, the programs, Mininet, netem where the links need it; for a run, also its workloads'
        programs and the interceptor library (a clear error now if it is not built)."""
        if os.geteuid() != 0:
            raise UserError("the Mininet backend needs root (network namespaces, tc, iptables)")
        missing = [b for b in REQUIRED_BINARIES if shutil.which(b) is None]
        if missing:
            raise UserError(f"missing program(s): {', '.join(missing)}; run scripts/setup.sh")
        _mininet()
        doc = getattr(self.topology, "doc", None)
        for k, link in enumerate(self.topology.spec.links):
            for field in ("delay", "loss"):
                if getattr(link, field) and not netem_available():
                    msg = (f"{field} needs the netem qdisc, which this kernel does not have; "
                           "remove it (bandwidth limits work, via HTB)")
                    raise doc.error(("links", k, field), msg) if doc else UserError(msg)
        if programs is not None:   # the workloads' programs (harness.workloads.check_binaries)
            programs()
        if self.spec is not None:
            if self.spec.interceptor:
                _interceptor.library_path()

    def build(self) -> None:
        Mininet, Link, TCLink, setLogLevel = _mininet()
        setLogLevel("critical")  # tc chatter (HTB quantum warnings); shaping is verified below
        Mininet.inited = True  # skip fixLimits(): it lowers host-wide TCP buffer limits
        topo = self.topology
        self.net = Mininet(topo=None, controller=None, build=False, autoSetMacs=False, waitConnected=False)
        with private_tcp_hash(self.ledger):
            for name in topo.spec.nodes:
                host = self.net.addHost(name, ip=None)
                self.nodes[name] = MininetNode(name, host, self.ledger)
                if self.ledger:
                    self.ledger.add_process(host.pid, f"mininet shell {name}")
        for k, link in enumerate(topo.spec.links):
            ia = next(i for i in topo.interfaces[link.a] if i.link == k)
            ib = next(i for i in topo.interfaces[link.b] if i.link == k)
            if self.ledger:
                self.ledger.add_links([ia.name, ib.name])
            params = {"intfName1": ia.name, "intfName2": ib.name}
            if link.bw:
                netem = {}
                if link.delay or link.loss:  # only where netem exists (preflight): netem is then the leaf
                    netem = {"delay": f"{link.delay * 1e3:g}ms" if link.delay else None, "loss": link.loss,
                             "max_queue_size": link.queue_packets}
                self.net.addLink(link.a, link.b, cls=TCLink, bw=link.bw / 1e6, **netem, **params)
            else:
                self.net.addLink(link.a, link.b, cls=Link, **params)
        for name, node in self.nodes.items():
            self._configure(name, node)
        self._link_model()
        self._check_shaping()
        self._check_multipath()

    def _configure(self, name: str, node: MininetNode) -> None:
        topo = self.topology
        # IPv4 only: IPv6 link-local chatter (ND, MLD) would reach hosts even during an ip_drop.
        script = ["sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
                  "ip link set lo up"]
        for intf in topo.interfaces[name]:
            script += [f"ip addr flush dev {intf.name}", f"ip addr add {intf.address}/{intf.prefixlen} dev {intf.name}",
                       f"ip link set {intf.name} up"]
        if topo.is_router(name):
            # A multipath route spreads connections by their 5-tuple, each keeping its path, as a
            # real router does. Policy 3 (custom fields: addresses, protocol, ports) and not 1 (L4):
            # policy 1 takes a forwarded packet's skb->hash when it has one, and across veth that is
            # the sending socket's random txhash, which TCP changes on every RTO (sk_rethink_txhash):
            # the route lookups of path_blackhole disagreed with forwarding, and a connection on a
            # dead path moved to another one at its next timeout (measured, docs/faults.md).
            script.append("sysctl -qw net.ipv4.ip_forward=1 " + " ".join(f"{k}={v}" for k, v in HASH_SYSCTLS.items()))
            script += seed_script(topo, name)   # a fabric's routers hash apart (harness/fabric.py)
            script += [route_command(dst, vias) for dst, vias in topo.routes(name)]
        else:
            # Congestion control per route: a namespace may only pick algorithms in the host's
            # tcp_allowed_congestion_control list, and changing that list would touch the host.
            intf = topo.interfaces[name][0]
            subnet = f"10.0.{intf.link + 1}.0/24"
            script.append(f"ip route replace {subnet} dev {intf.name} src {intf.address} congctl {self.cc}")
            script.append(f"ip route replace default via {topo.gateway(name)} congctl {self.cc}")
        r = node.run(["sh", "-ec", "; ".join(script)], check=False)
        if r.returncode != 0:
            msg = r.stderr.strip()
            if "congctl" in msg or "congestion" in msg.lower():
                raise UserError(f"congestion_control: {self.cc!r} is not available in this kernel")
            raise RuntimeError(f"configuring {name}: {msg}")

    def _check_multipath(self) -> None:
        """The bundle's routes and hashing as harness.routing.check_multipath verifies them, for the
        manifest's `routing`."""
        self.routing = check_multipath(self.topology, self.nodes)
        fabric = check_fabric(self.topology, self.nodes, lambda node, msg: RuntimeError(f"{node}: {msg}"))
        if fabric:
            self.routing["fabric"] = fabric

    def _shaped_ends(self):
        """(link index, node, interface) of both ends of every bandwidth-limited link."""
        for k, link in enumerate(self.topology.spec.links):
            if link.bw:
                for end in (link.a, link.b):
                    yield k, end, next(i for i in self.topology.interfaces[end] if i.link == k)

    def _link_model(self) -> None:
        """The testbed's link model (docs/link-model.md): a wire-packet queue of `queue` packets as the
        leaf of each HTB class, and no segmentation offloads anywhere, so a queue slot is one packet
        and not a 64 KB aggregate."""
        for k, end, intf in self._shaped_ends():
            link = self.topology.spec.links[k]
            if link.delay or link.loss:
                continue  # Mininet made netem the leaf, with limit = the queue
            self.nodes[end].run(["tc", "qdisc", "replace", "dev", intf.name, "parent", f"{HTB_HANDLE}:1",
                                 "handle", f"{LEAF_HANDLE}:", "pfifo", "limit", str(link.queue_packets)])
        for name, intfs in self.topology.interfaces.items():
            for intf in intfs:
                self.nodes[name].run(["ethtool", "-K", intf.name, *(w for f in OFFLOADS for w in (f, "off"))])

    def _check_shaping(self) -> None:
        """Verify what was asked for took effect, as `tc` and `ethtool` report it, and keep the
        verified link model for the manifest: each shaped end has the HTB rate and the pfifo limit,
        and no interface has a segmentation offload on."""
        model: list[dict] = []
        for k, link in enumerate(self.topology.spec.links):
            model.append({"link": k, "a": link.a, "b": link.b, "bw": link.bw, "queue": link.queue_packets,
                          "ends": {}, **({"path": link.path} if link.path is not None else {})})
        for k, end, intf in self._shaped_ends():
            link = self.topology.spec.links[k]
            out = self.nodes[end].run(["tc", "class", "show", "dev", intf.name]).stdout
            m = re.search(r"htb .*?rate (\d+(?:\.\d+)?)([KMG]?)bit", out)
            scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}
            rate = float(m.group(1)) * scale[m.group(2)] if m else 0.0
            if abs(rate - link.bw) > 0.01 * link.bw:
                raise RuntimeError(f"shaping did not take effect on {intf.name}: wanted "
                                   f"{link.bw / 1e6:g} Mbit/s, tc shows {out.strip() or 'no class'}")
            leaf = self._leaves(end).get(intf.name)
            kind = "netem" if (link.delay or link.loss) else "pfifo"
            if leaf is None or leaf.get("kind") != kind or leaf.get("options", {}).get("limit") != link.queue_packets:
                raise RuntimeError(f"the queue did not take effect on {intf.name}: wanted {kind} limit "
                                   f"{link.queue_packets} under HTB class {HTB_HANDLE}:1, tc shows {leaf}")
            model[k]["ends"][end] = {"interface": intf.name, "rate": rate, "qdisc": kind,
                                     "limit": leaf["options"]["limit"]}
        for name, intfs in self.topology.interfaces.items():
            for intf in intfs:
                state = self._offloads(name, intf.name)
                on = [f for f, v in state.items() if v]
                if on:
                    raise RuntimeError(f"segmentation offloads still on for {intf.name}: {', '.join(on)}")
                end = model[intf.link]["ends"].setdefault(name, {"interface": intf.name})
                end["offloads"] = {f: "off" for f in state}
        self.link_model = model

    def _offloads(self, node: str, ifname: str) -> dict[str, bool]:
        """ethtool's view of the offloads we turn off: feature -> on? ('[fixed]' off ones count as off)."""
        out = self.nodes[node].run(["ethtool", "-k", ifname]).stdout
        state = {}
        for feature, label in OFFLOAD_LABELS.items():
            m = re.search(rf"^{label}: (on|off)", out, re.M)
            if m:
                state[feature] = m.group(1) == "on"
        return state

    def queue_stats(self) -> list[dict]:
        """Cumulative counters and the backlog of every shaped link end's queue (the runner samples
        them during the run: queue drops are part of a run's network health). One `tc` call per
        node, not per interface (a fat-tree has 96 shaped ends on 36 nodes)."""
        ends: dict[str, list[str]] = {}
        for _k, end, intf in self._shaped_ends():
            ends.setdefault(end, []).append(intf.name)
        out = []
        for end, names in ends.items():
            leaves = self._leaves(end)
            for name in names:
                leaf = leaves.get(name) or {}
                out.append({"node": end, "interface": name, "sent_packets": leaf.get("packets"),
                            "sent_bytes": leaf.get("bytes"), "drops": leaf.get("drops"),
                            "overlimits": leaf.get("overlimits"), "requeues": leaf.get("requeues"),
                            "backlog_packets": leaf.get("qlen"), "backlog_bytes": leaf.get("backlog")})
        return out

    def _leaves(self, node: str) -> dict[str, dict]:
        """Interface -> the leaf qdisc under its HTB class, as `tc -s -j` reports them for the node."""
        out = self.nodes[node].run(["tc", "-s", "-j", "qdisc", "show"]).stdout
        return {q["dev"]: q for q in json.loads(out or "[]") if q.get("parent") == f"{HTB_HANDLE}:1" and "dev" in q}

    def node(self, name: str) -> MininetNode:
        return self.nodes[name]

    # -- what the runner asks: on Mininet every host shares this machine's /proc, files and clock,
    # so host-local operations run here, in-process (harness.agent does the same over SSH). --------
    def interfaces(self, name: str) -> list[Interface]:
        return self.topology.interfaces[name]

    def address(self, name: str) -> str:
        return self.topology.address(name)

    def clocks(self, reference: str) -> Clocks:
        """Every namespace shares this machine's CLOCK_MONOTONIC: all offsets are 0."""
        return Clocks(reference, {n: ClockOffset() for n in self.topology.spec.nodes}, ClockOffset())

    def python(self, name: str) -> list[str]:
        return ["env", f"PYTHONPATH={REPO}", sys.executable]

    def pythonpath(self, name: str) -> str:
        return str(REPO)

    def separate_collectors(self) -> bool:
        return False   # one collector reaches every host's namespace, on one clock (harness.collector.hosts)

    def trace_db(self, name: str) -> str | None:
        return None    # one drainer writes the run's own run.db

    def check_clocks(self) -> None:
        pass           # one clock

    def ignored_interfaces(self, name: str) -> list[str]:
        return []   # every interface of a Mininet host is the experiment's

    # -- the collector writes the run's own run.db: its progress is read there, nothing comes back --
    def collector_db(self, name: str, run_db: RunRecorder) -> str:
        return str(run_db.path.resolve())

    def snapshots(self, name: str, run_db: RunRecorder) -> int:
        return run_db.snapshot_count()

    def start_progress(self, name: str) -> None:
        pass

    def progress_snapshots(self, name: str, run_db: RunRecorder) -> int:
        return run_db.snapshot_count()

    def stop_progress(self) -> None:
        pass

    def clocks_end(self) -> Clocks | None:
        return None   # one clock: nothing drifts

    def bring_back(self, run_db: RunRecorder, run_dir: Path) -> None:
        pass          # run.db and the logs were written in the run directory

    # -- the manifest ------------------------------------------------------------------------------
    def manifest_monitor(self, name: str) -> dict:
        return {}

    def manifest_extra(self) -> dict:
        return {"routing": self.routing} if getattr(self, "routing", None) else {}

    def tcp_connections(self, node: str, pid: int) -> list[dict]:
        return tcp_connections(pid)

    def set_sysctls(self, name: str, values: dict[str, str]) -> None:
        """In the node's own namespace (net.* are per namespace): gone with it at teardown."""
        self.node(name).run(["sysctl", "-qw", *(f"{k}={v}" for k, v in values.items())])

    def pause(self, node: str, shm_dir: str, pid: int) -> PauseState:
        return pause_process(shm_dir, pid)

    def resume(self, node: str, shm_dir: str, pid: int) -> PauseState:
        return resume_process(shm_dir, pid)

    def interceptor(self, name: str, prefix: str = "nestlab-") -> tuple[str, dict[str, str]]:
        shm = _interceptor.create_shm_dir(prefix=prefix)
        if self.ledger:
            self.ledger.add_path(shm)
        self.shm_dirs.append(shm)
        return str(shm), _interceptor.preload_env(shm, env={})

    def teardown(self) -> None:
        for shm in self.shm_dirs:
            _interceptor.remove_shm_dir(shm)
        self.shm_dirs = []
        if self.net is None:
            return
        for node in self.nodes.values():
            shell = node.host.shell
            if shell is not None:
                node.host.terminate()
                kill_group(shell.pid, None, timeout=1.0)
                if self.ledger:
                    self.ledger.drop_process(shell.pid)
        for link in self.net.links:
            try:
                link.delete()
            except Exception:  # noqa: BLE001 - already gone with its namespace
                pass
        # veth ends that never made it into a namespace would remain in ours; delete any left.
        for intfs in self.topology.interfaces.values():
            for intf in intfs:
                subprocess.run(["ip", "link", "del", intf.name], capture_output=True)
        self.net = None

    def versions(self) -> dict[str, str]:
        """This machine's kernel and Python, Mininet, and the programs the run uses here."""
        import mininet.net

        local = {"kernel": platform.release(), "python": platform.python_version()}
        return {**local, "mininet": getattr(mininet.net, "VERSION", "unknown"), "iperf": _first_line(["iperf", "-v"]),
                "wget": _first_line(["wget", "--version"]), "lighttpd": _first_line(["lighttpd", "-v"]),
                "iptables": _first_line(["iptables", "--version"])}
