"""A local Flink cluster for one streams run: a JobManager and a TaskManager (the JVMs of PyFlink's
Flink distribution, in .venv-flink, built by scripts/setup.sh), our job's jar, and Flink's REST API.

Everything lives in the run directory (configuration, logs, Flink's temporary files) and every JVM
is its own process group in the run's ledger, so teardown and `nestlab cleanup` stop them on every
exit path. The network buffers are made small (docs/streams.md, "Bounded buffers") so that a PE
that stops reading backs its upstream up within seconds at 100 tuples/s, as Streams' queues did.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

from harness.ledger import Ledger, kill_group, signals_held, unblock_held_signals
from rundir.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
FLINK_VENV = ROOT / ".venv-flink"
JOB_JAR = FLINK_VENV / "nestlab-streams.jar"
JOB_CLASS = "streamsjob.NestlabStreamsJob"
READY_S = 60.0

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        self.rest = Rest(free_port())
        # The JobManager and the TaskManager each start a reporter: the first takes the first port.
        self.metrics_ports = (free_port(), free_port())
        self.job_id: str | None = None

    # -- start -------------------------------------------------------------------------------
    def start(self) -> None:
        if not JOB_JAR.exists():
            raise UserError(f"no streams job jar {JOB_JAR}: run ./scripts/setup.sh (it builds it)")
        conf, logs, tmp = self.dir / "conf", self.dir / "log", self.dir / "tmp"
        for d in (conf, logs, tmp):
            d.mkdir(parents=True, exist_ok=True)
        for f in (self.home / "conf").glob("log4j*.properties"):
            shutil.copy(f, conf / f.name)
        settings = {**SETTINGS, "jobmanager.rpc.port": str(free_port()), "rest.port": str(self.rest.port),
                    "metrics.reporter.prom.port": ",".join(map(str, self.metrics_ports)),
                    "io.tmp.dirs": str(tmp), "env.java.opts.all": _java_opts(self.home)}
        (conf / "config.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in settings.items()))
        env = {**os.environ, "FLINK_CONF_DIR": str(conf), "FLINK_LOG_DIR": str(logs), "FLINK_PID_DIR": str(self.dir),
               "JAVA_HOME": self.java}
        self._spawn("jobmanager", env, logs)
        self._wait(lambda: self.rest.get("/overview") is not None, "the JobManager's REST API")
        self._spawn("taskmanager", env, logs)
        self._wait(lambda: (self.rest.get("/overview") or {}).get("slots-available", 0) >= 1,
                   "a TaskManager slot")

    def _spawn(self, role: str, env: dict, logs: Path) -> None:
        argv = [str(self.home / "bin" / f"{role}.sh"), "start-foreground"]
        with signals_held():
            out = open(logs / f"{role}.out", "ab")
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, preexec_fn=unblock_held_signals, cwd=self.dir)
            out.close()
            self.procs.append(proc)
            self.ledger.add_process(proc.pid, f"flink {role}")
            self.on_process(proc)

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"Flink {p.args[0]} exited ({p.returncode}) before {what} was up; "
                                       f"see {self.dir / 'log'}")
            try:
                if ready():
                    return
            except (OSError, RuntimeError, http.client.HTTPException, ValueError):
                self.rest.close()
            time.sleep(0.2)
        raise RuntimeError(f"Flink: no {what} after {READY_S:.0f} s; see {self.dir / 'log'}")

    # -- the job -------------------------------------------------------------------------------
    def submit(self, graph_file: Path, name: str) -> str:
        """Upload the job's jar, run it on `graph_file`, and wait until every task runs."""
        boundary = uuid.uuid4().hex
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"jarfile\"; filename=\"nestlab-streams.jar\""
                f"\r\nContent-Type: application/x-java-archive\r\n\r\n").encode() + JOB_JAR.read_bytes() \
            + f"\r\n--{boundary}--\r\n".encode()
        up = self.rest.call("POST", "/jars/upload", body,
                            {"Content-Type": f"multipart/form-data; boundary={boundary}"}, timeout=60)
        jar_id = Path(up["filename"]).name
        run = self.rest.call("POST", f"/jars/{jar_id}/run",
                             json.dumps({"entryClass": JOB_CLASS, "programArgsList": [str(graph_file), name]}).encode(),
                             {"Content-Type": "application/json"}, timeout=120)
        self.job_id = run["jobid"]

        def running() -> bool:
            job = self.rest.get(f"/jobs/{self.job_id}")
            if job["state"] in ("FAILED", "CANCELED", "FINISHED"):
                raise UserError(f"Flink job {self.job_id} is {job['state']}; see {self.dir / 'log'}")
            return job["state"] == "RUNNING" and all(v["status"] == "RUNNING" for v in job["vertices"])
        self._wait(running, "running job")
        return self.job_id

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
        if self.job_id is not None:
            try:
                self.rest.call("PATCH", f"/jobs/{self.job_id}?mode=cancel", timeout=5)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and self.job_state() not in ("CANCELED", "FAILED", "FINISHED"):
                    time.sleep(0.1)
            except Exception:  # noqa: BLE001 - the JVMs are stopped below whatever the job's state
                pass
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


def _java_opts(home: Path) -> str:
    """The distribution's own JVM options (module opens Flink needs on Java 17)."""
    for line in (home / "conf" / "config.yaml").read_text().splitlines():
        if line.strip().startswith("all:"):
            return line.split("all:", 1)[1].strip()
    return ""
