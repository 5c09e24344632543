"""Workloads: real servers (lighttpd, iperf -s) and real clients (wget, iperf) on the topology.

A wget instance downloads `count` copies of one file serially in one process (one application
module across the downloads, as in the seeds); with no count it is restarted whenever it ends
until the run ends. An iperf instance runs `iperf -c` with `parallel` connections (one thread
each) for the whole run; `direction: download` uses `-R`, `dual` uses `-d` (the server connects
back to the client's own listener, one thread per connection, in the same process).
"""

from __future__ import annotations

import ipaddress
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness.backends.base import Node, Proc
from harness.ledger import signals_held
from harness.mesh import client_argv as mesh_client_argv
from harness.mesh import pairs
from harness.service.paths import PathSources, loadgen_summary, request_rows
from harness.service.tiers import ServiceTiers, TierHosts, check_installed
from harness.spec import Spec, Workload
from rundir.errors import UserError
from rundir.facts import IPERF_PORT

HTTP_PORT = 80
FAST_FAILURE_S = 1.0
CLIENT_BINARIES = {"wget": "wget", "iperf": "iperf", "mesh": "iperf"}
SERVER_BINARIES = {"wget": "lighttpd", "iperf": "iperf", "mesh": "iperf"}


def check_binaries(spec: Spec) -> None:
    plain = [w for w in spec.workloads if w.kind != "service"]
    if len(plain) < len(spec.workloads):
        check_installed()
    needed = {CLIENT_BINARIES[w.kind] for w in plain} | {SERVER_BINARIES[w.kind] for w in plain}
    missing = sorted(b for b in needed if shutil.which(b) is None)
    if missing:
        raise UserError(f"missing program(s) for the workloads: {', '.join(missing)}; run scripts/setup.sh")


def stop_each(nodes: dict[str, Node], procs: list[Proc]) -> None:
    """Stop the processes: each node's one after another, the nodes at once (a testbed's nodes answer
    over SSH: a fabric's 64 clients on 16 hosts one by one took 8 s)."""
    by_node: dict[str, list[Proc]] = {}
    for proc in procs:
        by_node.setdefault(proc.node, []).append(proc)

    def stop(node: str) -> None:
        for proc in by_node[node]:
            nodes[node].stop(proc)

    with ThreadPoolExecutor(max_workers=min(16, len(by_node)) or 1) as pool:
        for f in [pool.submit(stop, n) for n in by_node]:
            f.result()


def _web_server_address(server: str, address) -> str:
    """The address lighttpd binds to, checked before it goes into its configuration (on a testbed
    the node reported it): an IPv4 address, nothing that could close the quotes or add a line."""
    if isinstance(address, str):
        try:
            return str(ipaddress.IPv4Address(address))
        except ValueError:
            pass
    raise UserError(f"{server}: refusing address {address!r} for the web server configuration: "
                    "not an IPv4 address")


@dataclass
class Instance:
    workload: int
    index: int
    proc: Proc | None = None
    runs: int = 0                                  # processes started for this instance so far
    not_before: float = 0.0                        # restart backoff after a process that failed at once
    backoff: float = 0.0
    host: str | None = None                        # a mesh's connection: its client host and server
    server: str | None = None


class Workloads:
    def __init__(self, spec: Spec, nodes: dict[str, Node], addresses: dict[str, str], logs: Path,
                 client_env: dict[str, dict[str, str]] | None = None, on_process=None, warn=None, python=None,
                 seed: int = 0, pods: dict[str, int | None] | None = None, pythonpath=None):
        self.spec, self.nodes, self.addresses, self.logs = spec, nodes, addresses, logs
        self.client_env = client_env or {}   # host -> extra environment of the clients started there
        self.on_process = on_process or (lambda *a, **k: None)   # (proc, workload, role, host)
        self.warn = warn or (lambda message, workload: print(f"warning: {message}", file=sys.stderr))
        self.servers: list[Proc] = []
        self.services: dict[int, ServiceTiers] = {}   # a service workload's tiers, by workload index
        self.seed = seed   # the repetition's: the service's load generator draws its arrivals from it
        self.pods = pods or {}   # each host's pod (a mesh connects hosts of other pods)
        self.python = python or (lambda host: [sys.executable])   # argv prefix running our modules on a host
        self.pythonpath = pythonpath                                # where this package is on a host (the app's)
        self.instances = [Instance(i, k) for i, w in enumerate(spec.workloads) if w.kind != "mesh"
                          for k in range(w.instances)]
        self.instances += self._mesh_instances()
        self.www = Path(tempfile.mkdtemp(prefix="nestlab-www-"))
        self.t0: float | None = None

    def _mesh_instances(self) -> list[Instance]:
        """One instance per connection of every mesh workload (harness/mesh.py)."""
        out = []
        for i, w in enumerate(self.spec.workloads):
            if w.kind == "mesh":
                out += [Instance(i, k, host=c, server=d)
                        for k, (c, d) in enumerate(pairs(w.members, self.pods, w.flows, self.seed, i))]
        return out

    def host_of(self, inst: Instance) -> str:
        return inst.host or self.spec.workloads[inst.workload].host

    # -- servers ---------------------------------------------------------------------------------
    def start_servers(self) -> None:
        wanted: dict[tuple[str, str], None] = {}
        for inst in self.instances:
            if inst.server is not None:   # a mesh connection's server
                wanted[("iperf", inst.server)] = None
        for i, w in enumerate(self.spec.workloads):
            if w.kind == "mesh":
                continue
            if w.kind == "service":
                self._start_service(i, w)
                continue
            wanted[(w.kind, w.server)] = None
        for kind, server in wanted:
            node = self.nodes[server]
            if kind == "wget":
                bind = _web_server_address(server, self.addresses[server])
                # The served files and the config live where the server runs: our scratch directory
                # on Mininet (every host shares this machine's files), the node's own on a testbed.
                www = f"{node.workdir}/www" if node.workdir else str(self.www)
                node.run(["mkdir", "-p", f"{www}/htdocs"])
                for size in sorted({w.file_size for w in self.spec.workloads
                                    if w.kind == "wget" and w.server == server}):
                    # sparse: instant, and lighttpd serves zeros from the page cache
                    node.run(["truncate", "-s", str(int(size)), f"{www}/htdocs/{self._file(size)}"])
                conf = f"{www}/lighttpd-{server}.conf"
                errorlog = node.log_path(self.logs / f"lighttpd-{server}.error.log")
                node.run(["sh", "-c", 'cat > "$1"', "sh", conf], input=(
                    f'server.document-root = "{www}/htdocs"\n'
                    f'server.bind = "{bind}"\nserver.port = {HTTP_PORT}\n'
                    f'server.errorlog = "{errorlog}"\n'
                    'server.max-keep-alive-requests = 1000\n'))
                argv, port = ["lighttpd", "-D", "-f", conf], HTTP_PORT
            else:
                argv, port = ["iperf", "-s", "-B", self.addresses[server], "-p", str(IPERF_PORT)], IPERF_PORT
            with signals_held():
                proc = node.start(argv, self.logs / f"server-{kind}-{server}.log")
                self.servers.append(proc)
                self.on_process(proc, None, "server", server)
            self._wait_listening(node, self.addresses[server], port, proc)

    def _start_service(self, i: int, w: Workload) -> None:
        hosts = TierHosts(w.web, tuple(w.apps), w.cache, w.db, w.db_work)
        # each tier's files where it runs: the runner's scratch directory on Mininet, its node's on a testbed
        tiers = self.services[i] = ServiceTiers(hosts, self.nodes, self.addresses, self.www / f"service-{i}",
                                                self.logs, self.on_process, self.client_env,
                                                pythonpath=self.pythonpath, client=w.client)
        tiers.start()

    def _loadgen_out(self, workload: int) -> Path:
        """The load generator's lines, as the runner reads them (brought back from a testbed's client)."""
        return self.www / f"service-{workload}" / "loadgen.tsv"

    def _service_argv(self, workload: int, w: Workload) -> list[str]:
        """The load generator: it stops arriving a second before the run's end (its last answers
        come in before the clients are stopped) and after at most `count` requests (default: twice
        what the rate offers in that time)."""
        seconds = max(1.0, self.spec.duration - w.start - 1.0)
        count = w.count or int(2 * w.rate * seconds) + 10
        mix = ",".join(f"{k}={v:g}" for k, v in w.mix.items())
        return [*self.python(w.client), "-m", "harness.service.loadgen", "--url", self.services[workload].url(),
                "--rate", f"{w.rate:g}", "--concurrency", str(w.concurrency), "--count", str(count),
                "--duration", f"{seconds:g}", "--seed", str(self.seed), "--mix", mix,
                "--out", self.services[workload].loadgen_out()]

    def service_records(self, wall_minus_mono: float | None = None,
                        offsets: dict[str, float] | None = None) -> tuple[list, dict[int, dict]]:
        """The requests table's rows of every service workload (harness.service.paths) and each load
        generator's summary, by workload. On testbed nodes the tiers' logs are brought back first,
        nginx's wall clock is read on its node, and every row is converted with the offset of the node
        that stamped it (`offsets`: host -> seconds to add)."""
        rows, summaries = [], {}
        for i, tiers in self.services.items():
            w = self.spec.workloads[i]
            inst = next((x for x in self.instances if x.workload == i), None)
            proc = inst.proc if inst is not None else None
            tiers.collect()
            daemons = {t: hp[0] for t, hp in tiers.pids().items() if t in ("cache", "db")}
            wall = tiers.wall_minus_mono() if wall_minus_mono is None else wall_minus_mono
            rows += request_rows(PathSources(w.client, proc.pid if proc else None, self._loadgen_out(i), w.web,
                                             tiers.access_log, tiers.hops_dir, daemons, wall, offsets))
            summary = None
            if proc is not None and proc.log:
                node = self.nodes[w.client]
                if node.workdir is None:
                    summary = loadgen_summary(proc.log)
                else:   # its log is on the client's node (brought back later with the others)
                    tail = node.run(["tail", "-n", "20", "--", node.log_path(proc.log)], check=False)
                    summary = loadgen_summary(text=tail.stdout) if tail.returncode == 0 else None
            if summary is not None:
                summaries[i] = {**summary, "concurrency": w.concurrency}
        return rows, summaries

    @staticmethod
    def _file(size: float) -> str:
        return f"file-{int(size)}"

    @staticmethod
    def _wait_listening(node: Node, address: str, port: int, proc: Proc, timeout: float = 10.0) -> None:
        """Wait for our server's socket: bound to its address (another server already listening on
        0.0.0.0 would not do), with our process still alive."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node.run(["ss", "-ltnH", f"src = {address}:{port}"], check=False).stdout.strip():
                time.sleep(0.05)
                if proc.poll() is None:
                    return
                break
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        log = proc.log.read_text()[-500:] if proc.log and proc.log.exists() else ""
        raise RuntimeError(f"{node.name}: server {' '.join(proc.argv)} did not start listening on port "
                           f"{port}: {log.strip()}")

    # -- clients ---------------------------------------------------------------------------------
    def _client_argv(self, w: Workload, workload: int, inst: Instance | None = None) -> list[str]:
        if w.kind == "service":
            return self._service_argv(workload, w)
        if w.kind == "mesh":
            return mesh_client_argv(self.addresses[inst.server], w.rate, max(1, int(self.spec.duration - w.start + 5)))
        server = self.addresses[w.server]
        if w.kind == "wget":
            url = f"http://{server}:{HTTP_PORT}/{self._file(w.file_size)}"
            # Serial downloads in one process; count=None restarts the process when it ends.
            return ["wget", "-q", "-O", "/dev/null", *([url] * (w.count or 1))]
        remaining = max(1, int(self.spec.duration - w.start + 5))  # the runner stops it at the end
        argv = ["iperf", "-c", server, "-p", str(IPERF_PORT), "-t", str(remaining), "-P", str(w.parallel)]
        return argv + {"upload": [], "download": ["-R"], "dual": ["-d"]}[w.direction]

    def start_due(self, now: float) -> int:
        """Start instances whose start time has come, and restart repeating wget instances that
        ended. Returns how many processes were started."""
        assert self.t0 is not None
        started = 0
        for inst in self.instances:
            w = self.spec.workloads[inst.workload]
            if now - self.t0 < w.start or (inst.proc is not None and inst.proc.poll() is None):
                continue
            if inst.proc is not None:
                if not getattr(inst.proc, "reported", False):
                    self._ended(inst)
                    self._schedule_restart(inst, now)
                if w.kind != "wget" or w.count is not None:
                    continue  # finished for good
                if now < inst.not_before:
                    continue
            log = self.logs / f"w{inst.workload}-{w.kind}-i{inst.index}-{inst.runs}.log"
            with signals_held():
                host = self.host_of(inst)
                inst.proc = self.nodes[host].start(self._client_argv(w, inst.workload, inst), log,
                                                   env=self.client_env.get(host))
                self.on_process(inst.proc, inst.workload, "client", host)
            inst.runs += 1
            started += 1
        return started

    def _schedule_restart(self, inst: Instance, now: float) -> None:
        """A repeating client that failed within a second is restarted after 1, 2, 4, 8 s, with a
        warning, instead of every tick (a dead or wrong server)."""
        proc, code = inst.proc, inst.proc.poll()
        if code not in (0, None) and now - proc.started < FAST_FAILURE_S:
            inst.backoff = min(max(2 * inst.backoff, 1.0), 8.0)
            inst.not_before = now + inst.backoff
            self.warn(f"workload {inst.workload} instance {inst.index}: {proc.argv[0]} exited with {code} "
                      f"after {now - proc.started:.1f} s; restarting in {inst.backoff:g} s (see {proc.log})",
                      inst.workload)
        else:
            inst.backoff = 0.0

    def _ended(self, inst: Instance) -> None:
        proc = inst.proc
        if proc is not None and getattr(proc, "reported", False) is False:
            proc.reported = True
            self.on_process(proc, inst.workload, "ended", None)

    def live(self, workload: int) -> list[tuple[Instance, Proc]]:
        return [(i, i.proc) for i in self.instances
                if i.workload == workload and i.proc is not None and i.proc.poll() is None]

    def stop_clients(self) -> None:
        running = [inst for inst in self.instances if inst.proc is not None]
        stop_each(self.nodes, [inst.proc for inst in running])
        for inst in running:
            self._ended(inst)

    def stop_servers(self) -> None:
        for tiers in self.services.values():
            tiers.stop()
        stop_each(self.nodes, self.servers)
        for proc in self.servers:
            self.on_process(proc, None, "ended", None)
        self.servers = []

    def remove_files(self) -> None:
        shutil.rmtree(self.www, ignore_errors=True)
