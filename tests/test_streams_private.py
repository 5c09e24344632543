"""The streams run's Flink cluster is private (issue 30, finding 5 and two of 6): an application
cluster that runs our job and takes no other (no `flink run`, no `POST /jobs`), web submission and
cancellation off, every listening socket on loopback (the Prometheus reporter has no host setting:
libloopbackbind turns its wildcard bind into loopback), ports chosen where no automatic port takes
them first, and the collector's scrape never goes through an http_proxy (docs/streams.md)."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.streams import cluster
from harness.streams.collector import StreamsCollector
from harness.streams.listeners import exposed, listening

LISTEN = ("import socket, sys, time; s = socket.socket(); s.bind(('0.0.0.0', 0)); s.listen(); "
          "print(s.getsockname()[1], flush=True); time.sleep(30)")


def test_the_config_turns_web_submission_off_and_binds_loopback(tmp_path):
    c = cluster.FlinkCluster.__new__(cluster.FlinkCluster)
    c.dir, c.home = tmp_path / "flink", tmp_path
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text("env:\n  java:\n    opts:\n      all: -Dflink.opens=1\n")
    c._ports()
    got = c.settings()
    assert got["web.submit.enable"] == "false" and got["web.cancel.enable"] == "false"
    for key in ("rest.bind-address", "rest.address", "jobmanager.bind-host", "taskmanager.bind-host",
                "blob.server.bind-host"):
        assert got[key] == "localhost", key
    assert got["env.java.opts.all"] == "-Dflink.opens=1 -Djava.net.preferIPv4Stack=true"
    assert len({c.rest.port, c.rpc_port, *c.metrics_ports}) == 4


def _listener(preload: bool) -> tuple[subprocess.Popen, int]:
    env = {"LD_PRELOAD": str(cluster.loopback_lib())} if preload else {}
    proc = subprocess.Popen([sys.executable, "-c", LISTEN], stdout=subprocess.PIPE, text=True, env=env)
    return proc, int(proc.stdout.readline())


@pytest.mark.parametrize("preload", [True, False])
def test_a_wildcard_bind_is_loopback_with_the_library_and_the_check_sees_it(preload):
    proc, port = _listener(preload)
    try:
        ports = listening(proc.pid)
        assert {p for _, p in ports} == {port}
        if preload:
            assert ports == {("127.0.0.1", port)} and exposed(ports) == []
        else:
            assert exposed(ports) == [("0.0.0.0", port)]    # what the cluster refuses to run with
    finally:
        proc.kill()
        proc.wait()


def test_free_ports_are_below_the_ephemeral_range():
    lo, _ = cluster.ephemeral_range()
    ports = [cluster.free_port() for _ in range(20)]
    assert all(p < lo for p in ports)
    for p in ports[:3]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


class _Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'flink_taskmanager_job_task_numRecordsIn{task_name="pe1",} 42.0\n'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_the_scrape_never_goes_through_an_http_proxy(monkeypatch):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proxy = socket.socket()
    proxy.bind(("127.0.0.1", 0))
    proxy.listen()
    proxy.settimeout(0.5)
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.getsockname()[1]}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    collector = StreamsCollector.__new__(StreamsCollector)
    collector.ports = (server.server_address[1],)
    collector.graph = SimpleNamespace(pes={"pe1": None})
    try:
        got = collector._scrape()
        with pytest.raises(TimeoutError):
            proxy.accept()                               # nothing came to the proxy
        assert got == {"pe1": {"numRecordsIn": 42.0}}
    finally:
        server.shutdown()
        proxy.close()


def _flink_ready() -> bool:
    return cluster.JOB_JAR.exists() and any(cluster.FLINK_VENV.glob("lib/python3*/site-packages/pyflink"))


class _Ledger:
    def add_process(self, pid, what):
        pass

    def drop_process(self, pid):
        pass


def _submit_with_flinks_client(c: cluster.FlinkCluster, graph_file: Path) -> subprocess.CompletedProcess:
    """What any local user could do: `flink run` a jar (ours will do) against the cluster's REST port."""
    return subprocess.run([str(c.home / "bin" / "flink"), "run", "-d", "-m", f"127.0.0.1:{c.rest.port}",
                           "-c", cluster.JOB_CLASS, str(cluster.JOB_JAR), str(graph_file), "intruder"],
                          env={**c.env, "LD_PRELOAD": ""}, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
@pytest.mark.skipif(not _flink_ready(), reason="Flink is not set up (./scripts/setup.sh)")
def test_a_started_cluster_runs_our_job_only_takes_no_job_or_jar_and_listens_on_loopback_only(tmp_path: Path):
    """Issue 30, finding 5's gap: a session cluster accepts `POST /jobs` (Flink's client's endpoint,
    no switch) from any local user; the application cluster runs the job it was started with only."""
    from harness.streams.graph import load_graph

    (tmp_path / "control").mkdir()
    graph_file = tmp_path / "graph.txt"
    graph_file.write_text(load_graph(Path(__file__).parents[1] / "graphs" / "mergetree.yaml")
                          .job_text(100, 64, tmp_path / "control", 4))
    c = cluster.FlinkCluster(tmp_path, _Ledger())
    procs = []
    try:
        job = c.start(graph_file, "ours")              # check_private passed: all on loopback
        procs = list(c.procs)
        ports = set().union(*(listening(p.pid) for p in c.procs))
        assert ports and exposed(ports) == []
        assert any(p in c.metrics_ports for _, p in ports) and any(p == c.rest.port for _, p in ports)
        run = _submit_with_flinks_client(c, graph_file)
        assert run.returncode != 0 and "Job has been submitted" not in run.stdout, run.stdout[-500:]
        with pytest.raises(RuntimeError, match="HTTP 4"):
            c.rest.call("POST", "/jobs", b"x", {"Content-Type": "multipart/form-data; boundary=b"})
        with pytest.raises(RuntimeError, match="HTTP 4.. .*(not allowed|Not Found)"):
            c.rest.call("POST", "/jars/upload", b"x", {"Content-Type": "multipart/form-data; boundary=b"})
        jobs = c.rest.get("/jobs/overview")["jobs"]
        assert [(j["jid"], j["name"], j["state"]) for j in jobs] == [(job, "ours", "RUNNING")]
        assert c.rest.get("/config")["features"]["web-submit"] is False
    finally:
        c.stop()
        time.sleep(0.5)
    assert len(procs) == 2 and all(p.poll() is not None for p in procs)   # the JVMs are gone
    assert not (tmp_path / "flink" / "tmp").exists()


def test_a_start_whose_port_was_taken_is_tried_again_with_other_ports(tmp_path, monkeypatch):
    c = cluster.FlinkCluster.__new__(cluster.FlinkCluster)
    c.dir, c.procs, c.job_id = tmp_path / "flink", [], None
    c._ports()
    monkeypatch.setattr(cluster, "JOB_JAR", tmp_path / "job.jar")
    (tmp_path / "job.jar").write_bytes(b"")
    tried, stopped = [], []

    def once(graph_file, name):
        tried.append((c.rest.port, c.metrics_ports))
        c.job_id = f"job{len(tried)}"
        if len(tried) < 3:
            raise cluster.PortTaken("taken")

    monkeypatch.setattr(c, "_start_once", once)
    monkeypatch.setattr(c, "stop", lambda: stopped.append(1))
    assert c.start(tmp_path / "graph.txt", "run") == "job3"
    assert len(tried) == 3 and len(stopped) == 2 and len(set(tried)) == 3   # new ports each time
    tried.clear()
    monkeypatch.setattr(c, "_start_once", lambda g, n: tried.append(1) or (_ for _ in ()).throw(cluster.PortTaken("x")))
    with pytest.raises(cluster.PortTaken):
        c.start(tmp_path / "graph.txt", "run")
    assert len(tried) == cluster.START_ATTEMPTS
