"""A local Flink cluster for one streams run: a JobManager and a TaskManager (the JVMs of PyFlink's
Flink distribution, in .venv-flink, built by scripts/setup.sh), our job's jar, and Flink's REST API.

Everything lives in the run directory (configuration, logs, Flink's temporary files) and every JVM
is its own process group in the run's ledger, so teardown and `nestlab cleanup` stop them on every
exit path.

The cluster is private (docs/streams.md, "A private cluster"): it is a standalone *application*
cluster, whose JobManager starts our job itself (`standalone-job.sh --job-classname`, the jar fetched
from its local path) and runs nothing else: its REST API has no job submission at all (no `POST
/jobs`, which a session cluster keeps whatever the settings), no jar upload, no cancellation; and
nothing listens outside loopback: REST and RPC are bound to localhost, and the JVMs run with
loopback/libloopbackbind.so preloaded, which turns a bind() to the wildcard address into one to
loopback (Flink's Prometheus reporter has no host setting) and with the IPv4 stack. After the start
every listening socket of the JVMs is checked (harness.streams.listeners): one outside loopback stops
the run. Ports are chosen below the kernel's ephemeral range (free_port), where no other process's
automatic port can take them before the JVM binds, and a start whose port was taken anyway is
retried with others. The network buffers are made small (docs/streams.md, "Bounded buffers") so that a PE
that stops reading backs its upstream up within seconds at 100 tuples/s, as Streams' queues did.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import re
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

from harness.ledger import Ledger, held_mask_preexec, kill_group, signals_held
from harness.streams.listeners import exposed, listening
from rundir.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
FLINK_VENV = ROOT / ".venv-flink"
JOB_JAR = FLINK_VENV / "nestlab-streams.jar"
JOB_CLASS = "streamsjob.NestlabStreamsJob"
READY_S = 60.0
LOOPBACK_DIR = Path(__file__).resolve().parent / "loopback"
LOOPBACK_LIB = LOOPBACK_DIR / "libloopbackbind.so"
START_ATTEMPTS = 3

# Flink's settings for the lab (Flink 2.1 config.yaml keys). Why each: docs/streams.md.
SETTINGS = {
    "jobmanager.bind-host": "localhost",
    "jobmanager.rpc.address": "localhost",
    "jobmanager.memory.process.size": "1024m",
    "taskmanager.bind-host": "localhost",
    "taskmanager.host": "localhost",
    "taskmanager.numberOfTaskSlots": "1",
    "taskmanager.memory.process.size": "1536m",
    # Bounded buffers: 4 KiB segments, 2 exclusive and 2 floating buffers per input, at most 2
    # buffers queued per output channel, no overdraft: about 400 tuples of 64 bytes per connection.
    "taskmanager.memory.segment-size": "4kb",
    "taskmanager.network.memory.buffers-per-channel": "2",
    "taskmanager.network.memory.floating-buffers-per-gate": "2",
    "taskmanager.network.memory.max-buffers-per-channel": "2",
    "taskmanager.network.memory.max-overdraft-buffers-per-gate": "0",
    "taskmanager.network.memory.buffer-debloat.enabled": "false",
    "rest.address": "localhost",
    "rest.bind-address": "localhost",
    # Private: no jar upload and run, no cancellation through the REST API, for anyone on this machine
    # (an application cluster has no job submission endpoint at all: docs/streams.md).
    "web.submit.enable": "false",
    "web.cancel.enable": "false",
    "web.rescale.enable": "false",
    "blob.server.bind-host": "localhost",
    "parallelism.default": "1",
    # The collector scrapes the TaskManager's Prometheus endpoint: every task's counters read in one
    # pass, at one moment (the REST API's per-vertex views were seen a second apart: 4.3.2's negative
    # queues of a whole second of tuples).
    "metrics.reporter.prom.factory.class": "org.apache.flink.metrics.prometheus.PrometheusReporterFactory",
    "restart-strategy.type": "none",   # a failed task fails the run, it is not quietly restarted
}


def flink_home() -> Path:
    """The Flink distribution inside PyFlink (NESTLAB_FLINK_HOME overrides)."""
    env = os.environ.get("NESTLAB_FLINK_HOME")
    if env:
        return Path(env)
    found = sorted(FLINK_VENV.glob("lib/python3*/site-packages/pyflink"))
    if not found:
        raise UserError(f"no Flink in {FLINK_VENV}: run ./scripts/setup.sh (it installs PyFlink and builds "
                        "the streams job)")
    return found[0]


def java_home() -> str:
    for candidate in (os.environ.get("JAVA_HOME"), "/usr/lib/jvm/java-17-openjdk-amd64"):
        if candidate and (Path(candidate) / "bin" / "java").exists():
            return candidate
    java = shutil.which("java")
    if java:
        return str(Path(os.path.realpath(java)).parents[1])
    raise UserError("no Java: streams runs need OpenJDK 17 (./scripts/setup.sh installs openjdk-17-jre-headless)")


def check_runner() -> None:
    """What a streams run needs here: Java, Flink and the job's jar (no root)."""
    java_home()
    flink_home()
    if not JOB_JAR.exists():
        raise UserError(f"no streams job jar {JOB_JAR}: run ./scripts/setup.sh (it builds it)")


def ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range: no other process's bind(0) or
    connect() is handed it before the JVM binds it (an ephemeral port freed here could be)."""
    lo, _ = ephemeral_range()
    low = 10000 if lo > 12000 else 1024
    for _ in range(200):
        port = random.randrange(low, lo)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:   # nothing free below the range (unlikely): the kernel's choice
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loopback_lib() -> Path:
    """The bind-to-loopback library for the JVMs, built when missing (gcc, as the interceptor)."""
    if not LOOPBACK_LIB.exists():
        r = subprocess.run(["make", "-s", "-C", str(LOOPBACK_DIR)], capture_output=True, text=True)
        if r.returncode != 0 or not LOOPBACK_LIB.exists():
            raise UserError(f"cannot build {LOOPBACK_LIB} (make -C {LOOPBACK_DIR}): {r.stderr.strip()[:200]}; "
                            "a streams run keeps its Flink cluster on loopback with it")
    return LOOPBACK_LIB


class PortTaken(RuntimeError):
    """A port given to a JVM was taken by another process before it bound it."""


class Rest:
    """Flink's REST API on localhost (one keep-alive connection)."""

    def __init__(self, port: int):
        self.port = port
        self.conn: http.client.HTTPConnection | None = None

    def call(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
             timeout: float = 10.0):
        for attempt in (0, 1):   # a keep-alive connection the server closed: open it again once
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                resp = self.conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt:
                    raise
                continue
            if resp.status >= 400:
                raise RuntimeError(f"Flink REST {method} {path}: HTTP {resp.status} {data[:300]!r}")
            return json.loads(data) if data else None
        return None

    def get(self, path: str):
        return self.call("GET", path)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class FlinkCluster:
    """Start, use and stop the run's cluster. `stop()` is safe on every path, twice."""

    def __init__(self, run_dir: Path, ledger: Ledger, on_process=lambda proc: None):
        self.dir = Path(run_dir).resolve() / "flink"
        self.ledger = ledger
        self.on_process = on_process
        self.home = flink_home()
        self.java = java_home()
        self.procs: list[subprocess.Popen] = []
        self.env: dict = {}
        self._ports()
        self.job_id: str | None = None

    def _ports(self) -> None:
        self.rest = Rest(free_port())
        # The JobManager and the TaskManager each start a reporter: the first takes the first port.
        self.metrics_ports = (free_port(), free_port())
        self.rpc_port = free_port()

    # -- start -------------------------------------------------------------------------------
    def settings(self) -> dict[str, str]:
        """The config.yaml the JVMs read (SETTINGS with this cluster's ports and directories)."""
        tmp = self.dir / "tmp"
        return {**SETTINGS, "jobmanager.rpc.port": str(self.rpc_port), "rest.port": str(self.rest.port),
                "metrics.reporter.prom.port": ",".join(map(str, self.metrics_ports)),
                "io.tmp.dirs": str(tmp), "web.tmpdir": str(tmp / "web"),   # not root's /tmp/flink-web-*
                # where the application cluster puts the job's fetched jars (Flink's default is /opt)
                "user.artifacts.base-dir": str(tmp / "artifacts"),
                # IPv4 sockets, so that a wildcard bind becomes 127.0.0.1 (libloopbackbind), not ::1
                "env.java.opts.all": " ".join(o for o in (_java_opts(self.home), "-Djava.net.preferIPv4Stack=true") if o)}

    def start(self, graph_file: Path, name: str) -> str:
        """Start the cluster with our job on `graph_file` as its one application, and wait until every
        task runs; the job's id."""
        if not JOB_JAR.exists():
            raise UserError(f"no streams job jar {JOB_JAR}: run ./scripts/setup.sh (it builds it)")
        for attempt in range(START_ATTEMPTS):
            try:
                self._start_once(graph_file, name)
                return self.job_id
            except PortTaken:
                self.stop()
                if attempt == START_ATTEMPTS - 1:
                    raise
                self._ports()   # another process took a port: new ones
        raise AssertionError("unreachable")

    def _start_once(self, graph_file: Path, name: str) -> None:
        conf, logs, tmp = self.dir / "conf", self.dir / "log", self.dir / "tmp"
        for d in (conf, logs, tmp):
            d.mkdir(parents=True, exist_ok=True)
        for f in (self.home / "conf").glob("log4j*.properties"):
            shutil.copy(f, conf / f.name)
        (conf / "config.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in self.settings().items()))
        self.env = {**os.environ, "FLINK_CONF_DIR": str(conf), "FLINK_LOG_DIR": str(logs),
                    "FLINK_PID_DIR": str(self.dir), "JAVA_HOME": self.java, "LD_PRELOAD": str(loopback_lib())}
        # Application mode: the JobManager runs our job's main() itself, with a job id we chose; the
        # jar is used where it lies (local://), the job's arguments follow.
        self.job_id = secrets.token_hex(16)
        # (--jars takes every value up to the next option: it goes first.)
        self._spawn("jobmanager", "standalone-job", ["--jars", _local_uri(JOB_JAR), "--job-classname", JOB_CLASS,
                                                     "--job-id", self.job_id, str(graph_file), name])
        self._wait(lambda: self.rest.get("/overview") is not None, "the JobManager's REST API")
        self._spawn("taskmanager", "taskmanager", [])
        self._wait(self._running, "running job")
        self.check_private()

    def _running(self) -> bool:
        try:
            job = self.rest.get(f"/jobs/{self.job_id}")
        except RuntimeError as e:
            if "HTTP 404" in str(e):   # the JobManager has not submitted it to itself yet
                return False
            raise
        if job["state"] in ("FAILED", "CANCELED", "FINISHED"):
            raise UserError(f"Flink job {self.job_id} is {job['state']}; see {self.dir / 'log'}")
        return job["state"] == "RUNNING" and bool(job["vertices"]) and \
            all(v["status"] == "RUNNING" for v in job["vertices"])

    def check_private(self) -> None:
        """Every port the JVMs listen on is on loopback (else RuntimeError: the run stops), and the
        REST and a metrics port are theirs (else PortTaken: started again with other ports)."""
        ports: set[tuple[str, int]] = set()
        for p in self.procs:
            ports |= listening(p.pid)
        out = exposed(ports)
        if out:
            raise RuntimeError(f"Flink listens outside loopback ({', '.join(f'{a}:{p}' for a, p in out)}); "
                               "refusing to run a cluster others can reach")
        mine = {p for _, p in ports}
        if self.rest.port not in mine or not mine & set(self.metrics_ports):
            raise PortTaken(f"Flink's ports {self.rest.port}, {self.metrics_ports} were taken by another process")

    def _spawn(self, role: str, script: str, args: list[str]) -> None:
        argv = [str(self.home / "bin" / f"{script}.sh"), "start-foreground", *args]
        with signals_held():
            out = open(self.dir / "log" / f"{role}.out", "ab")
            proc = subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, preexec_fn=held_mask_preexec(), cwd=self.dir)
            out.close()
            self.procs.append(proc)
            self.ledger.add_process(proc.pid, f"flink {role}")
            self.on_process(proc)

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    if self._bind_failed():
                        raise PortTaken(f"Flink {p.args[0]}: a port was taken before it bound it")
                    raise RuntimeError(f"Flink {p.args[0]} exited ({p.returncode}) before {what} was up; "
                                       f"see {self.dir / 'log'}")
            try:
                if ready():
                    return
            except (OSError, RuntimeError, http.client.HTTPException, ValueError):
                self.rest.close()
            time.sleep(0.2)
        raise RuntimeError(f"Flink: no {what} after {READY_S:.0f} s; see {self.dir / 'log'}")

    def _bind_failed(self) -> bool:
        for log in (self.dir / "log").glob("*"):
            try:
                if re.search(r"BindException|Address already in use", log.read_text(errors="replace")):
                    return True
            except OSError:
                continue
        return False

    # -- the job -------------------------------------------------------------------------------
    def job_state(self) -> str:
        return self.rest.get(f"/jobs/{self.job_id}")["state"]

    def alive(self) -> str | None:
        """None while every JVM runs, else what stopped."""
        for p in self.procs:
            if p.poll() is not None:
                return f"Flink {Path(p.args[0]).stem} exited ({p.returncode})"
        return None

    # -- stop ----------------------------------------------------------------------------------
    def stop(self) -> None:
        # No cancellation through the REST API (web.cancel.enable is off): the job ends with its JVMs.
        self.job_id = None
        self.rest.close()
        for p in reversed(self.procs):   # TaskManager first, then the JobManager
            kill_group(p.pid, None, timeout=10)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self.ledger.drop_process(p.pid)
        self.procs = []
        shutil.rmtree(self.dir / "tmp", ignore_errors=True)


def _local_uri(path: Path) -> str:
    """Flink's scheme for a file the JobManager uses where it lies (file:// would copy it)."""
    return "local" + path.resolve().as_uri()[len("file"):]


def _java_opts(home: Path) -> str:
    """The distribution's own JVM options (module opens Flink needs on Java 17)."""
    for line in (home / "conf" / "config.yaml").read_text().splitlines():
        if line.strip().startswith("all:"):
            return line.split("all:", 1)[1].strip()
    return ""
