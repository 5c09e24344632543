"""The service's tiers, each a real daemon in its own host: MariaDB (`db`), memcached (`cache`),
gunicorn with our WSGI app (`apps`), nginx balancing over them (`web`).

Started in that order (each answers before the next starts: its listening socket on its own address,
its process alive, then a first real query), stopped in the reverse order by process group. Every
file a tier writes (configuration, MariaDB's data directory and its secure_file_priv directory, pid
files, nginx's temporary files, gunicorn's worker files, the app's hop logs and nginx's access log)
lives in the run's scratch directory, which the network lab removes at the end; the daemons' own logs
go to the run's logs. No system service, file or port outside the run's namespaces is used
(scripts/setup.sh disables the packages' system services), and each daemon listens on its host's
address only. MariaDB keeps its grant tables: the app's account may read and update the items table
and nothing else; root is reachable on the server's unix socket only (docs/service.md, "What the
tiers expose").

On testbed nodes (a node with a `workdir`: harness/backends/ssh) every tier's files are on its own node,
in `<workdir>/service-<i>/`, made and written there through the node's commands; the app runs from the
package installed on its node (`pythonpath`); the hop logs, nginx's access log and the load generator's
lines are brought back (collect()) for the requests table; the delay fault's switch file is written on
the app's node (set_delay). Every process and directory is in the run's ledger, so `nestlab cleanup`
stops and removes them after a killed runner.
"""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness.backends.base import Node, Proc
from harness.ledger import signals_held
from harness.service.app import statements
from harness.service.loadgen import HOT_KEYS
from rundir.errors import UserError

REPO = Path(__file__).resolve().parents[2]
WEB_PORT, APP_PORT, CACHE_PORT, DB_PORT = 80, 8000, 11211, 3306
ROWS = 1000                  # rows of the items table
SESSIONS = 64                # session keys in memcached (harness.service.app.SESSIONS)
READY_S = 20.0
SYSTEM_PYTHON = "/usr/bin/python3"   # Debian's gunicorn runs on it; it has pymemcache and pymysql
# The app's MariaDB account: SELECT and UPDATE on nestlab.items, nothing else (no FILE: no file
# statements), with a password made for the run; root is reachable only on the server's unix socket
DB_USER = "nestlab"
# program -> the Debian package scripts/setup.sh installs it from
PROGRAMS = {"nginx": "nginx", "gunicorn": "gunicorn", "memcached": "memcached", "mariadbd": "mariadb-server",
            "mariadb-install-db": "mariadb-server", "mariadb": "mariadb-client"}
MODULES = {"pymemcache": "python3-pymemcache", "pymysql": "python3-pymysql"}


def missing_packages() -> list[str]:
    """What the service tiers need and this machine lacks, as `program (package)`."""
    missing = [f"{p} ({pkg})" for p, pkg in PROGRAMS.items() if shutil.which(p) is None]
    probe = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if not importlib.util.find_spec(m)))"
    try:
        r = subprocess.run([SYSTEM_PYTHON, "-c", probe, *MODULES], capture_output=True, text=True, timeout=20)
        absent = r.stdout.split() if r.returncode == 0 else list(MODULES)
    except OSError:
        absent = list(MODULES)
    return missing + [f"{SYSTEM_PYTHON} module {m} ({MODULES[m]})" for m in absent]


def check_installed() -> None:
    missing = missing_packages()
    if missing:
        raise UserError(f"missing for the service workload: {', '.join(missing)}; run scripts/setup.sh "
                        "(it installs nginx, gunicorn, memcached, mariadb-server, python3-pymemcache, python3-pymysql)")


@dataclass(frozen=True)
class TierHosts:
    web: str
    apps: tuple[str, ...]
    cache: str
    db: str
    db_work: int = 0      # MD5 evaluations per miss query (the app's NESTLAB_SVC_DB_WORK)


# The interceptor's pause and resume signals in the tiers' daemons (app_pause at a tier host): glibc
# keeps RTMIN..RTMIN+2 for itself; no tier uses these.
TIER_PAUSE_SIGNALS = ("RTMIN+8", "RTMIN+9")


class ServiceTiers:
    """The tiers of one service workload: start(), the daemons' pids by tier, stop()."""

    def __init__(self, hosts: TierHosts, nodes: dict[str, Node], addresses: dict[str, str], scratch: Path,
                 logs: Path, on_process, host_env: dict[str, dict[str, str]] | None = None,
                 pythonpath=None, client: str | None = None):
        self.hosts, self.nodes, self.addresses, self.logs = hosts, nodes, addresses, logs.resolve()
        self.dir = scratch                 # the runner's (on Mininet: every tier's too)
        self.client = client               # the load generator's host (its lines are written there)
        self.pythonpath = pythonpath or (lambda host: str(REPO))   # where the app imports this package from
        self.on_process = on_process       # (proc, workload, role, host) as for the other servers
        self.procs: list[tuple[str, Proc]] = []   # (tier, process), in start order (kept after stop: pids())
        self.stopped: set[int] = set()
        self.db_password = secrets.token_hex(16)   # the app's MariaDB password, this run only
        # The interceptor's environment on each monitored host: its tier's daemons are observed like
        # its clients (app and socket modules); app_pause's signals are real-time ones (TIER_PAUSE_SIGNALS),
        # as nginx and gunicorn use SIGUSR1 and SIGUSR2 themselves.
        self.host_env = {h: {**e, "NESTLAB_PAUSE_SIGNAL": TIER_PAUSE_SIGNALS[0],
                             "NESTLAB_RESUME_SIGNAL": TIER_PAUSE_SIGNALS[1]}
                         for h, e in (host_env or {}).items() if e}

    @property
    def hops_dir(self) -> Path:
        return self.dir / "hops"

    @property
    def control_dir(self) -> Path:
        """Where the delay fault's switch files go (harness/faults/delay.py, app.added_delay)."""
        return self.dir / "control"

    def delay_file(self, host: str) -> str:
        return self.path(host, "control", f"delay-{host}")

    @property
    def access_log(self) -> Path:
        return self.dir / "nginx-access.tsv"

    # -- where a tier's files are: the runner's scratch directory, or its node's ----------------
    def remote(self, host: str) -> bool:
        """The tier on `host` runs on a testbed node (its files are there, not the runner's)."""
        return getattr(self.nodes.get(host), "workdir", None) is not None

    def path(self, host: str, *parts: str) -> str:
        """A file of the tier on `host`, where that tier runs."""
        base = f"{self.nodes[host].workdir}/{self.dir.name}" if self.remote(host) else str(self.dir)
        return "/".join([base, *parts])

    def mkdir(self, host: str, *paths: str) -> None:
        if self.remote(host):
            self.nodes[host].run(["mkdir", "-p", "--", *paths])
        else:
            for p in paths:
                Path(p).mkdir(parents=True, exist_ok=True)

    def write(self, host: str, path: str, text: str) -> None:
        """A file written atomically where `host` runs (a reader never sees half of it)."""
        if self.remote(host):
            self.nodes[host].run(["sh", "-c", 'cat > "$1.tmp" && mv -f -- "$1.tmp" "$1"', "sh", path], input=text)
        else:
            tmp = Path(path + ".tmp")
            tmp.write_text(text)
            tmp.replace(path)

    def read(self, host: str, path: str) -> str | None:
        if self.remote(host):
            r = self.nodes[host].run(["cat", "--", path], check=False)
            return r.stdout if r.returncode == 0 else None
        try:
            return Path(path).read_text()
        except OSError:
            return None

    def remove(self, host: str, path: str) -> None:
        if self.remote(host):
            self.nodes[host].run(["rm", "-f", "--", path], check=False)
        else:
            Path(path).unlink(missing_ok=True)

    def log_path(self, host: str, name: str) -> str:
        """Where a tier's daemon on `host` writes the log the runner calls logs/<name>."""
        node = self.nodes.get(host)
        return node.log_path(self.logs / name) if node is not None else str(self.logs / name)

    def loadgen_out(self) -> str:
        """Where the load generator writes its lines (on its node)."""
        return self.path(self.client, "loadgen.tsv") if self.client and self.remote(self.client) \
            else str(self.dir / "loadgen.tsv")

    # -- the delay fault's switch at an app tier (harness/faults/delay.py) ------------------------
    def set_delay(self, host: str, seconds: float) -> str:
        """The app on `host` holds each reply `seconds` (its switch file, read back); returns the file."""
        path = self.delay_file(host)
        self.write(host, path, f"{seconds:.6f}\n")
        got = self.read(host, path)
        try:
            ok = got is not None and float(got) == round(seconds, 6)
        except ValueError:
            ok = False
        if not ok:
            raise RuntimeError(f"{host}: delay switch {path} does not hold {seconds:g}")
        return path

    def clear_delay(self, host: str) -> None:
        self.remove(host, self.delay_file(host))

    def children(self, host: str, pids: list[int]) -> list[int]:
        """The children of `pids` on `host` (a gunicorn master's workers)."""
        out = []
        for pid in pids:
            text = self.read(host, f"/proc/{int(pid)}/task/{int(pid)}/children") or ""
            out += [int(c) for c in text.split() if c.isdigit()]
        return sorted(out)

    def collect(self) -> None:
        """Bring the hop logs, nginx's access log and the load generator's lines from the nodes into
        the runner's scratch directory (where request_rows reads them); nothing to do on Mininet."""
        self.hops_dir.mkdir(parents=True, exist_ok=True)
        web = self.hosts.web
        if self.remote(web):
            _get(self.nodes[web], self.path(web, "nginx-access.tsv"), self.access_log)
        for host in dict.fromkeys(self.hosts.apps):
            if not self.remote(host):
                continue
            listing = self.nodes[host].run(["ls", "-1", "--", self.path(host, "hops")], check=False).stdout
            for name in listing.split():
                if _HOP_FILE.fullmatch(name):
                    _get(self.nodes[host], self.path(host, "hops", name), self.hops_dir / name)
        if self.client and self.remote(self.client):
            _get(self.nodes[self.client], self.loadgen_out(), self.dir / "loadgen.tsv")

    def wall_minus_mono(self) -> float:
        """time.time() - CLOCK_MONOTONIC on the web host (nginx stamps its wall clock)."""
        node = self.nodes[self.hosts.web]
        if not self.remote(self.hosts.web):
            return time.time() - time.monotonic()
        r = node.run([SYSTEM_PYTHON, "-c", "import time; print(repr(time.time() - time.monotonic()))"])
        return float(r.stdout.strip())

    def url(self) -> str:
        return f"http://{self.addresses[self.hosts.web]}:{WEB_PORT}"

    def pids(self) -> dict[str, list[tuple[str, int]]]:
        """tier -> [(host, pid of its daemon)] (the process group leader)."""
        out: dict[str, list[tuple[str, int]]] = {}
        for tier, proc in self.procs:
            out.setdefault(tier, []).append((proc.node, proc.pid))
        return out

    # -- start -----------------------------------------------------------------------------------
    def start(self) -> None:
        for host in dict.fromkeys((self.hosts.web, *self.hosts.apps, self.hosts.cache, self.hosts.db,
                                   *([self.client] if self.client else []))):
            self.mkdir(host, self.path(host, "hops"), self.path(host, "control"))
        self._start_db()
        self._start_cache()
        for host in self.hosts.apps:
            self._start_app(host)
        self._start_web()

    def _spawn(self, tier: str, host: str, argv: list[str], port: int, env: dict | None = None) -> Proc:
        node = self.nodes[host]
        with signals_held():
            proc = node.start(argv, self.logs / f"service-{tier}-{host}.log",
                              env={**self.host_env.get(host, {}), **(env or {})})
            self.procs.append((tier, proc))
            self.on_process(proc, None, "server", host)
        _wait_listening(node, self.addresses[host], port, proc)
        return proc

    @property
    def db_files(self) -> str:
        """MariaDB's secure_file_priv: the one directory its file statements may read or write."""
        return self.path(self.hosts.db, "db", "files")

    def db_argv(self, host: str) -> list[str]:
        """mariadbd's command line: its grant tables on, listening on its host's address only, file
        statements confined to db_files, LOAD DATA LOCAL off, every file in the scratch directory."""
        d = self.path(host, "db")
        return ["mariadbd", "--no-defaults", f"--datadir={d}/data", f"--socket={d}/mysqld.sock",
                f"--pid-file={d}/mysqld.pid", f"--bind-address={self.addresses[host]}", f"--port={DB_PORT}",
                "--user=root", "--skip-name-resolve", f"--secure-file-priv={self.db_files}", "--local-infile=0",
                "--symbolic-links=0", "--innodb-buffer-pool-size=64M", f"--tmpdir={d}/tmp",
                "--max-connections=500"]

    def db_setup(self) -> str:
        """The SQL run as root on the server's socket: the schema and the app's account."""
        sql = statements()
        return (sql["schema"].replace("{last}", str(ROWS - 1)) + "\n"
                + sql["app_account"].replace("{user}", DB_USER).replace("{password}", self.db_password))

    def _start_db(self) -> None:
        host = self.hosts.db
        node, d = self.nodes[host], self.path(host, "db")
        self.mkdir(host, f"{d}/tmp", self.db_files)
        # root@localhost authenticated by the unix socket (the OS user root): the installer's default
        node.run(["mariadb-install-db", "--no-defaults", f"--datadir={d}/data", "--skip-test-db",
                  "--user=root"], timeout=120)
        self._spawn("db", host, self.db_argv(host), DB_PORT)
        # on stdin: the account's password never shows in a process list
        node.run(["mariadb", "--no-defaults", f"--socket={d}/mysqld.sock"], input=self.db_setup())

    def cache_argv(self, host: str) -> list[str]:
        """memcached's command line: TCP on its host's address only, UDP off; it writes no file."""
        return ["memcached", "-u", "root", "-l", self.addresses[host], "-p", str(CACHE_PORT), "-U", "0",
                "-m", "64", "-t", "2", "-c", "1024"]

    def _start_cache(self) -> None:
        host = self.hosts.cache
        addr = self.addresses[host]
        self._spawn("cache", host, self.cache_argv(host), CACHE_PORT)
        # The hot keys and the sessions: reads of them are hits from the first request on.
        warm = ("import sys; from pymemcache.client.base import Client; c = Client((sys.argv[1], int(sys.argv[2])));"
                f"c.set_many({{**{{f'item:{{k}}': b'value-%d' % k for k in range({HOT_KEYS})}},"
                f" **{{f'session:{{k}}': b'user-%d' % k for k in range({SESSIONS})}}}}, noreply=False)")
        self.nodes[host].run([SYSTEM_PYTHON, "-c", warm, addr, str(CACHE_PORT)])

    def _start_app(self, host: str) -> None:
        env = {"NESTLAB_SVC_CACHE": f"{self.addresses[self.hosts.cache]}:{CACHE_PORT}",
               "NESTLAB_SVC_DB": f"{self.addresses[self.hosts.db]}:{DB_PORT}",
               "NESTLAB_SVC_DB_USER": DB_USER, "NESTLAB_SVC_DB_PASSWORD": self.db_password,
               "NESTLAB_SVC_HOPS": self.path(host, "hops"), "NESTLAB_SVC_HOST": host, "NESTLAB_SVC_ROWS": str(ROWS),
               "NESTLAB_SVC_DB_WORK": str(self.hosts.db_work),
               "NESTLAB_SVC_CONTROL": self.path(host, "control")}
        self._spawn("app", host, self.app_argv(host), APP_PORT, env=env)
        node = self.nodes[host]
        deadline = time.monotonic() + READY_S   # the app answers (its module imported, its tiers reachable)
        while node.run(["/usr/bin/env", SYSTEM_PYTHON, "-c", _GET, f"http://{self.addresses[host]}:{APP_PORT}/item/0"],
                       check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{host}: the app does not answer /item/0 (see {self.logs}/service-app-{host}.log)")
            time.sleep(0.2)

    def app_argv(self, host: str) -> list[str]:
        """gunicorn's command line: its address only; its workers' heartbeat files in the scratch
        directory (by default they go to /tmp)."""
        tmp = self.path(host, f"gunicorn-{host}")
        self.mkdir(host, tmp)
        return ["gunicorn", "--bind", f"{self.addresses[host]}:{APP_PORT}", "--workers", "2",
                "--worker-class", "gthread", "--threads", "16", "--graceful-timeout", "2",
                "--worker-tmp-dir", tmp, "--pythonpath", self.pythonpath(host), "--chdir", self.path(host),
                "harness.service.app:application"]

    def web_conf(self, host: str) -> str:
        """nginx's configuration: it listens on its host's address only; its pid, temporary files and
        access log in the scratch directory, its error log in the run's logs."""
        d = self.path(host, "nginx")
        # max_fails=0: nginx never marks an app server down on its own (after a pause or a drop it
        # would refuse every request for fail_timeout, a second fault the spec did not ask for).
        upstreams = "".join(f"    server {self.addresses[a]}:{APP_PORT} max_fails=0;\n" for a in self.hosts.apps)
        return (
            "daemon off;\nmaster_process on;\nworker_processes 2;\nuser root;\n"
            f"pid {d}/nginx.pid;\nerror_log {self.log_path(host, f'service-web-{host}.error.log')} warn;\n"
            "events { worker_connections 1024; }\n"
            "http {\n"
            "  log_format hops '$http_x_request_id\\t$pid\\t$msec\\t$request_time\\t$status\\t$upstream_addr';\n"
            f"  access_log {self.path(host, 'nginx-access.tsv')} hops;\n"
            + "".join(f"  {k}_temp_path {d}/{v};\n" for k, v in
                      (("client_body", "body"), ("proxy", "proxy"), ("fastcgi", "fastcgi"), ("uwsgi", "uwsgi"),
                       ("scgi", "scgi")))
            + f"  upstream apps {{\n{upstreams}    keepalive 64;\n  }}\n"
            f"  server {{\n    listen {self.addresses[host]}:{WEB_PORT};\n"
            "    location / {\n      proxy_pass http://apps;\n      proxy_http_version 1.1;\n"
            '      proxy_set_header Connection "";\n      proxy_set_header X-Request-ID $http_x_request_id;\n'
            "    }\n  }\n}\n")

    def _start_web(self) -> None:
        host = self.hosts.web
        d = self.path(host, "nginx")
        self.mkdir(host, *(f"{d}/{sub}" for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi")))
        conf = f"{d}/nginx.conf"
        self.write(host, conf, self.web_conf(host))
        self._spawn("web", host, ["nginx", "-c", conf, "-p", d, "-e",
                                  self.log_path(host, f"service-web-{host}.error.log")], WEB_PORT)

    # -- stop ------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Every daemon's process group, in the reverse order (web first: no request reaches a
        stopped tier while another still runs)."""
        for _tier, proc in reversed(self.procs):
            if proc.pid in self.stopped:
                continue
            self.nodes[proc.node].stop(proc, timeout=5.0)
            self.on_process(proc, None, "ended", None)
            self.stopped.add(proc.pid)


_HOP_FILE = re.compile(r"hops-[A-Za-z0-9_.-]+-[0-9]+\.tsv")   # a hop log's name, as the app makes it


def _get(node: Node, remote: str, local: Path) -> None:
    """A file of the node's into `local` (nothing when the node has none)."""
    try:
        node.get(remote, local)
    except OSError:
        pass


# A GET from inside a host, with the system Python (every tier host has it); exit 0 on HTTP 200.
_GET = ("import sys, urllib.request; r = urllib.request.urlopen(sys.argv[1], timeout=5); "
        "sys.exit(0 if r.status == 200 else 1)")


def _wait_listening(node: Node, address: str, port: int, proc: Proc, timeout: float = READY_S) -> None:
    """Our daemon's socket, bound to its host's address, with the daemon still alive."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if node.run(["ss", "-ltnH", f"src = {address}:{port}"], check=False).stdout.strip():
            return
        time.sleep(0.1)
    log = proc.log.read_text(errors="replace")[-600:] if proc.log and proc.log.exists() else ""
    raise RuntimeError(f"{node.name}: {proc.argv[0]} did not start listening on {address}:{port}: {log.strip()}")
