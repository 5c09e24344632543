"""The SSH backend: testbed nodes over SSH, with the same Node interface as Mininet.

SshBackend is what the runner uses when every node of the topology says where it lives: it connects
(transport.py), checks and provisions the nodes and verifies the network the testbed built
(provision.py), hands the runner its nodes (node.py), runs the node agent for host-local operations,
brings the run's data back (retrieve.py) and, at teardown, undoes everything the run's ledger lists.
docs/ssh-backend.md describes the topology file and the whole procedure.
"""

from __future__ import annotations

import json
import os
import platform
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from harness.backends.base import Clocks
from harness.backends.ssh import multipath, provision
from harness.backends.ssh.cleanup import undo_all
from harness.backends.ssh.node import SshNode
from harness.backends.ssh.provision import make_private_dir
from harness.backends.ssh.retrieve import bring_back_recordings, fetch_logs
from harness.backends.ssh.transport import Connection, connect_all, ssh_params
from harness.interceptor.pause import PauseState
from harness.ledger import Ledger
from harness.topology import Interface, Topology
from rundir.layout import RunDir

if TYPE_CHECKING:
    from rundir.recorder import RunRecorder

PROGRESS_S = 2.0    # how often the progress thread reads the collector's snapshot count on the node


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


class SshBackend:
    kind = "ssh"
    remote = True

    def __init__(self, topology: Topology, ledger: Ledger | None, spec, run_id: str):
        self.topology, self.ledger, self.spec, self.run_id = topology, ledger, spec, run_id
        self.params = ssh_params(topology)
        self.defaults = topology.spec.ssh
        self.conns: dict[str, Connection] = {}
        self.nodes: dict[str, SshNode] = {}
        self._interfaces: dict[str, list[Interface]] = {}
        self.control: dict[str, str | None] = {}
        self._clocks: Clocks | None = None
        self.shm_dirs: dict[str, str] = {}
        self.pkg: dict[str, str] = {}
        self.node_info: dict[str, dict] = {}
        self.remote_dbs: dict[str, str] = {}   # each monitored node's collector's run.db there
        self.trace_dbs: dict[str, str] = {}    # each traced node's drainer's database there
        self._progress: dict[str, int] = {}    # snapshot counts, as the progress thread last read them
        self._pollers: list[threading.Thread] = []
        self._poller_stop = threading.Event()
        self.routing: dict[str, dict] = {}    # ECMP: what multipath.verify found, for the manifest

    @classmethod
    def check_runner(cls) -> None:
        pass   # no root here: the ledger goes to the user's runtime directory (harness/ledger.py)

    def announce(self, step: str) -> str | None:
        topo = self.topology
        return {"preflight": f"connecting to {len(topo.spec.nodes)} testbed nodes of {topo.name} over SSH",
                "build": "verifying the network, installing, " + ("setting multipath routes, " if multipath.routers(topo) else "")
                + "measuring clocks"}.get(step)

    # -- preflight and build -------------------------------------------------------------------
    def preflight(self, programs=None) -> None:   # the nodes' programs are checked on them (provision)
        """Connect to every node (nothing is created on them yet): unreachable nodes, unknown or wrong
        host keys and refused logins end the run here with one line."""
        self.conns = connect_all(self.params)
        for name, conn in self.conns.items():
            base = f"{(self.defaults.workdir if self.defaults else '/tmp').rstrip('/')}"
            self.nodes[name] = SshNode(name, conn, self.ledger, f"{base}/nestlab-{self.run_id}-{_safe(name)}")
        if self.ledger:
            for name, p in self.params.items():
                self.ledger.add_remote_node(name, p.as_dict())

    def build(self) -> None:
        """Check the nodes, install and verify the network (at once: the interceptor builds meanwhile),
        install and verify the multipath routes of a bundle of parallel links or a fabric (multipath.py), set the
        congestion control, measure the clocks (provision.py)."""
        provision.check_nodes(self.nodes, provision.needed_programs(self.topology, self.spec),
                              self.defaults is None or self.defaults.install, self.node_info,
                              provision.needed_modules(self.spec))
        with ThreadPoolExecutor(max_workers=2) as pool:   # the interceptor builds while the network is checked
            steps = [pool.submit(self._install), pool.submit(self._verify_network)]
        for f in steps:
            if f.exception() is not None:
                raise f.exception()
        if multipath.routers(self.topology):   # a bundle's or a fabric's (multipath.py)
            multipath.install(self.nodes, self.topology, self._interfaces, self.ledger)
            self.routing = multipath.verify(self.nodes, self.topology, self._interfaces)
        provision.set_congestion_control(self.nodes, self.spec, self._interfaces, self.node_info, self.ledger,
                                         self.topology)
        self._clocks = self.measure_clocks()

    @property
    def reference(self) -> str:
        """The first monitored host: its clock is the run's reference."""
        return provision.monitored(self.spec)[0]

    def _install(self) -> None:
        self.pkg.update(provision.install(self.nodes, provision.package_nodes(self.spec, self.topology),
                                          self.node_info))

    def _verify_network(self) -> None:
        provision.verify_network(self.nodes, self.topology, self.spec, self.node_info, self.control,
                                 self._interfaces)

    def measure_clocks(self) -> Clocks:
        """Every node's and the runner's offset to the monitored host's clock, measured now."""
        return provision.measure_clocks(self.nodes, self.reference)

    def check_clocks(self) -> None:
        """Measure the clocks again during the run: a node whose offset moved (its clock stepped, it
        rebooted) or that no longer answers ends the run with one line naming it (SshError)."""
        if self._clocks is not None and self.nodes:
            provision.clock_drift(self._clocks, self.measure_clocks(), self.nodes)

    # -- what the runner asks ------------------------------------------------------------------
    def node(self, name: str) -> SshNode:
        return self.nodes[name]

    def interfaces(self, name: str) -> list[Interface]:
        return self._interfaces[name]

    def address(self, name: str) -> str:
        return self._interfaces[name][0].address

    def clocks(self, reference: str) -> Clocks:
        assert reference == self._clocks.reference
        return self._clocks

    def python(self, name: str) -> list[str]:
        """argv prefix that runs this package's modules on the node."""
        return ["env", f"PYTHONPATH={self.pkg[name]}", self.params[name].python]

    def pythonpath(self, name: str) -> str:
        """Where this package is on the node (a service's app imports it from there)."""
        return self.pkg[name]

    def separate_collectors(self) -> bool:
        """Each monitored node records with a collector of its own (one cannot reach another machine's
        namespaces); bring_back() merges them on the reference clock (rundir/nodemerge.py)."""
        return True

    def agent(self, name: str, *args: str, timeout: float = 30.0, server: bool = True):
        r = self.nodes[name].run([*self.python(name), "-m", "harness.agent", *map(str, args)],
                                 check=False, timeout=timeout, server=server)
        try:
            out = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RuntimeError(f"{name}: agent {' '.join(map(str, args))}: {(r.stderr or r.stdout).strip()}") from None
        if r.returncode != 0 or isinstance(out, dict) and "error" in out:
            raise RuntimeError(f"{name}: agent {args[0]}: {out.get('error') if isinstance(out, dict) else out}")
        return out

    def set_sysctls(self, name: str, values: dict[str, str]) -> None:
        """Each previous value in the ledger first (multipath.set_sysctls): teardown puts it back."""
        multipath.set_sysctls(self.nodes[name], values, self.ledger, purpose="the run",
                              missing="(this kernel has no such setting)")

    def tcp_connections(self, node: str, pid: int) -> list[dict]:
        return self.agent(node, "conns", pid)

    def pause(self, node: str, shm_dir: str, pid: int) -> PauseState:
        return PauseState(**self.agent(node, "pause", shm_dir, pid))

    def resume(self, node: str, shm_dir: str, pid: int) -> PauseState:
        return PauseState(**self.agent(node, "resume", shm_dir, pid))

    def interceptor(self, name: str) -> tuple[str, dict[str, str]]:
        """A shared-memory directory for the interceptor on the node, and the clients' environment."""
        from harness.interceptor import ENV_SHM_DIR, LIBRARY_NAME

        node = self.nodes[name]
        base = "/dev/shm" if node.exists("/dev/shm") else node.workdir
        shm = f"{base}/nestlab-{self.run_id}-{_safe(name)}"
        make_private_dir(node, shm)
        self.shm_dirs[name] = shm
        lib = f"{self.pkg[name]}/harness/interceptor/{LIBRARY_NAME}"
        return shm, {"LD_PRELOAD": lib, ENV_SHM_DIR: shm}

    def ignored_interfaces(self, name: str) -> list[str]:
        """The control interface: it carries the runner's SSH session, not the experiment."""
        control = self.control.get(name)
        return [control] if control else []

    # -- the collector's run.db on the node ------------------------------------------------------
    def collector_db(self, name: str, run_db: RunRecorder | None = None) -> str:
        """A run.db for the collector on the node (rundir.db's schema), merged into the run's `run_db`
        by bring_back()."""
        db = f"{self.nodes[name].workdir}/run.db"
        self.agent(name, "initdb", db)
        self.remote_dbs[name] = db
        if self.ledger:
            self.ledger.set_salvage(name, db, f"{self.nodes[name].workdir}/logs")
        return db

    def trace_db(self, name: str) -> str:
        """The database the message drainer on `name` writes (its messages and traced tables, made by the
        drainer), merged into the run's by bring_back() with the node's clock offset."""
        db = f"{self.nodes[name].workdir}/trace.db"
        self.trace_dbs[name] = db
        if self.ledger:
            self.ledger.set_salvage(name, db, f"{self.nodes[name].workdir}/logs", kind="trace")
        return db

    def snapshots(self, name: str, run_db: RunRecorder | None = None, server: bool = True) -> int:
        """Snapshots recorded so far (the progress thread passes server=False: the command server is
        the main thread's)."""
        return int(self.agent(name, "count", self.remote_dbs[name], timeout=10, server=server))

    def start_progress(self, name: str) -> None:
        """Keep `name`'s snapshot count current: a thread per node, so that a node that does not answer
        holds up no other node's count."""
        self._progress.setdefault(name, 0)
        thread = threading.Thread(target=self._poll_snapshots, args=(name,), name=f"progress-{name}", daemon=True)
        self._pollers.append(thread)
        thread.start()

    def _poll_snapshots(self, name: str) -> None:
        """A collector's snapshot count, for the progress line and the stall check (off the main loop).
        A node that does not answer keeps its last count, and one that does not answer an SSH keepalive
        either is marked gone (SshNode.check_alive): the lab's checks name it."""
        while not self._poller_stop.wait(PROGRESS_S):
            if not self.nodes[name].check_alive():   # beside the main thread's requests: marked gone, named
                return                                # by the lab's check of its collector
            try:
                self._progress[name] = self.snapshots(name, server=False)
            except Exception:  # noqa: BLE001 - progress only
                pass

    def progress_snapshots(self, name: str, run_db: RunRecorder | None = None) -> int:
        return self._progress.get(name, 0)

    def stop_progress(self) -> None:
        self._poller_stop.set()
        deadline = time.monotonic() + 15   # one wait for them all (a gone node's poll ends at its timeout)
        for thread in self._pollers:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    # -- the end of the run ----------------------------------------------------------------------
    def clocks_end(self) -> Clocks | None:
        """The clocks measured again (how far they drifted apart during the run)."""
        return self.measure_clocks() if self.nodes else None

    def bring_back(self, run_db: RunRecorder, run_dir: Path) -> None:
        """Copy every collector's run.db and every drainer's trace into the local run.db (several nodes:
        on the reference clock, rundir/nodemerge.py), and every node's logs into logs/."""
        errors = bring_back_recordings(self.nodes, self.remote_dbs, self.trace_dbs, self.reference,
                                       self._clocks, run_dir, run_db.db if run_db is not None else None,
                                       checkpoint=lambda name, db: self.agent(name, "checkpoint", db))
        logs = RunDir(run_dir).logs
        keep = set(os.listdir(logs)) if logs.is_dir() else set()   # no node replaces what is there
        for name, node in self.nodes.items():
            try:
                fetch_logs(node, f"{node.workdir}/logs", logs, keep)
            except Exception as e:  # noqa: BLE001
                errors.append(f"logs from {name}: {e}")
        if errors:
            raise RuntimeError("; ".join(errors))

    def manifest_monitor(self, name: str) -> dict:
        return {"control_interface": self.control.get(name)}

    def manifest_extra(self) -> dict:
        return {"nodes": self.node_records(), **({"routing": self.routing} if self.routing else {})}

    def node_records(self) -> dict[str, dict]:
        """What the manifest records about each node."""
        out = {}
        for name, p in self.params.items():
            out[name] = {"host": p.host, "port": p.port, "user": p.user, "control_interface": self.control.get(name),
                         "interfaces": [i.name for i in self._interfaces.get(name, [])],
                         **self.node_info.get(name, {})}
        return out

    def versions(self) -> dict[str, str | dict]:
        """The monitored host's kernel and Python and the programs on the nodes that use them; the
        runner machine's own kernel and Python under `runner`."""
        def first_line(node: str | None, argv: list[str]) -> str:
            if node is None:
                return "unused"
            r = self.nodes[node].run(argv, check=False, sudo=False)
            return ((r.stdout or r.stderr).strip().splitlines() or ["unavailable"])[0]

        spec = self.spec
        mon = self.reference
        servers = [w.server for w in spec.workloads if w.kind != "service"]
        web = next((w.server for w in spec.workloads if w.kind == "wget"), None)
        router = next((f.at for f in spec.faults if f.at), None)
        out = {"kernel": self.node_info[mon].get("kernel", ""), "python": self.node_info[mon].get("python", ""),
               "iperf": first_line(mon if any(w.kind in ("iperf", "mesh") for w in spec.workloads) else
                                   (servers[0] if servers else None), ["iperf", "-v"]),
               "wget": first_line(mon if any(w.kind == "wget" for w in spec.workloads) else None,
                                  ["wget", "--version"]),
               "lighttpd": first_line(web, ["lighttpd", "-v"]),
               "iptables": first_line(router, ["iptables", "--version"] if router else []),
               "runner": {"kernel": platform.release(), "python": platform.python_version()}}
        return out

    @property
    def link_model(self) -> list[dict]:
        """The testbed shapes the links (its delay nodes, as the exported NS file or profile asks);
        nestlab neither sets nor reads their queues and leaves the nodes' offloads as they are."""
        return [{"link": k, "a": lk.a, "b": lk.b, "bw": lk.bw, "queue": lk.queue_packets,
                 "shaped_by": "the testbed (docs/ssh-backend.md)", **({"path": lk.path} if lk.path is not None else {})}
                for k, lk in enumerate(self.topology.spec.links)]

    def queue_stats(self) -> list[dict]:
        return []   # the queues are on the testbed's delay nodes, which nestlab does not reach

    # -- teardown ------------------------------------------------------------------------------
    def teardown(self) -> None:
        errors = []
        for name, node in self.nodes.items():
            for proc in list(node.procs.values()):   # anything the runner did not stop
                try:
                    node.stop(proc, timeout=1.0)
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{name}: stopping pid {proc.pid}: {e}")
        if self.ledger:
            undo_all(self.nodes, list(self.ledger.data.get("remote", {}).get("undo", [])), done=self.ledger.drop_undo,
                     failed=lambda entry, e: errors.append(f"{entry['node']}: {entry['what']}: {e}"))
            for entry in list(self.ledger.data.get("remote", {}).get("paths", [])):
                node = self.nodes.get(entry["node"])
                if node is None:
                    continue
                try:
                    node.run(["rm", "-rf", "--", entry["path"]])
                    self.ledger.drop_remote_path(entry["node"], entry["path"])
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{entry['node']}: removing {entry['path']}: {e}")
        for node in self.nodes.values():
            node.close()
        for conn in self.conns.values():
            conn.close()
        if self.ledger and not errors:
            self.ledger.drop_remote_nodes()
        if errors:
            raise RuntimeError("; ".join(errors) + " (the ledger keeps them: run `nestlab cleanup`)")

