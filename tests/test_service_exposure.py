"""What the service tiers expose (issue 40 item 10, docs/service.md "What the tiers expose"): each
daemon listens on its host's address only and writes only in the run's scratch directory, and MariaDB
keeps its grant tables: the app's account reads and updates the items table and nothing else (no
`SELECT ... INTO OUTFILE`, no `LOAD DATA LOCAL`), root is reachable on the unix socket only, and even
root's file statements stay in secure_file_priv.

The first tests read the command lines and configuration the tiers are started with. The last starts
the real tiers (harness.service.tiers.ServiceTiers, as the lab does) in a network namespace of the
test's own with one loopback address per tier host, no Mininet, and tries each of those from there;
it needs root and the tier packages (scripts/setup.sh), and removes the namespace on every path."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from harness.backends.mininet import MininetNode
from harness.service.tiers import DB_USER, ServiceTiers, TierHosts, missing_packages

ADDR = {"db": "10.99.0.1", "cache": "10.99.0.2", "app1": "10.99.0.3", "web": "10.99.0.4"}
HOSTS = TierHosts(web="web", apps=("app1",), cache="cache", db="db")


def tiers(tmp_path: Path, nodes: dict | None = None) -> ServiceTiers:
    return ServiceTiers(HOSTS, nodes or {}, ADDR, tmp_path / "scratch", tmp_path / "logs", lambda *a: None)


def test_mariadb_keeps_its_grant_tables_and_confines_file_statements(tmp_path):
    t = tiers(tmp_path)
    argv = t.db_argv("db")
    assert "--skip-grant-tables" not in argv
    assert f"--bind-address={ADDR['db']}" in argv and "--local-infile=0" in argv
    priv = [a for a in argv if a.startswith("--secure-file-priv=")]
    assert priv == [f"--secure-file-priv={t.db_files}"] and Path(t.db_files).is_relative_to(t.dir)
    for opt in ("--datadir=", "--socket=", "--pid-file=", "--tmpdir="):
        (value,) = [a.split("=", 1)[1] for a in argv if a.startswith(opt)]
        assert Path(value).is_relative_to(t.dir), opt
    setup = t.db_setup()
    grants = [line for line in setup.splitlines() if line.startswith("GRANT")]
    assert grants == [f"GRANT SELECT, UPDATE ON nestlab.items TO '{DB_USER}'@'%';"]
    assert t.db_password in setup and len(t.db_password) == 32


def test_the_other_tiers_listen_on_their_hosts_address_and_write_in_the_scratch_directory(tmp_path):
    t = tiers(tmp_path)
    cache = t.cache_argv("cache")
    assert cache[cache.index("-l") + 1] == ADDR["cache"] and cache[cache.index("-U") + 1] == "0"   # no UDP
    app = t.app_argv("app1")
    assert app[app.index("--bind") + 1] == f"{ADDR['app1']}:8000"
    assert Path(app[app.index("--worker-tmp-dir") + 1]).is_relative_to(t.dir)   # not /tmp
    conf = t.web_conf("web")
    listens = [line.split()[1] for line in conf.splitlines() if line.strip().startswith("listen ")]
    assert listens == [f"{ADDR['web']}:80;"]
    for line in conf.splitlines():
        words = line.split()
        if words and (words[0].endswith("_temp_path") or words[0] in ("pid", "access_log")):
            assert Path(words[1].rstrip(";")).is_relative_to(t.dir), line
        if words and words[0] == "error_log":
            assert Path(words[1]).is_relative_to(t.logs), line


class NetnsNode(MininetNode):
    """A tier host: the lab's own Mininet node, its commands run in the test's namespace."""

    def __init__(self, name: str, ns: str):
        super().__init__(name, None, None)
        self.ns = ns

    def _argv(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *argv]


@pytest.fixture
def netns():
    ns = f"nestlab-svc-{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        for a in ADDR.values():
            subprocess.run(["ip", "-n", ns, "addr", "add", f"{a}/32", "dev", "lo"], check=True)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def sql(node: NetnsNode, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return node.run(["mariadb", "--no-defaults", "--connect-timeout=5", *args], check=False, input=stdin)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a network namespace)")
@pytest.mark.skipif(bool(missing_packages()), reason="needs the service tiers' packages (scripts/setup.sh)")
@pytest.mark.timeout(240)
def test_the_real_tiers_expose_nothing_beyond_what_the_app_needs(netns, tmp_path):
    nodes = {h: NetnsNode(h, netns) for h in ADDR}
    (tmp_path / "logs").mkdir()
    t = tiers(tmp_path, nodes)
    outfile = tmp_path / "outfile"           # outside the scratch directory
    try:
        t.start()
        app, db = nodes["app1"], nodes["db"]
        # the app reads an item the cache does not hold: through MariaDB, on its own account
        miss = ("import sys, urllib.request; r = urllib.request.urlopen(sys.argv[1], timeout=10); "
                "print(r.status, r.headers['X-Request-Type'])")
        got = app.run(["/usr/bin/python3", "-c", miss, f"http://{ADDR['web']}/item/999"], check=False)
        assert got.stdout.split()[:1] == ["200"], (got.stdout, got.stderr, (t.logs).iterdir())
        as_app = ["-h", ADDR["db"], "-u", DB_USER, f"-p{t.db_password}", "nestlab"]
        assert sql(app, *as_app, "-e", "SELECT value FROM items WHERE id = 7").stdout.split() == ["value", "value-7"]
        r = sql(app, *as_app, "-e", f"SELECT 'x' INTO OUTFILE '{outfile}'")
        assert r.returncode != 0 and "Access denied" in r.stderr, r.stderr
        (tmp_path / "local.tsv").write_text("5000\tinjected\t0\n")
        r = sql(app, *as_app, "--local-infile=1", "-e",
                f"LOAD DATA LOCAL INFILE '{tmp_path / 'local.tsv'}' INTO TABLE items")
        assert r.returncode != 0, r.stdout
        assert sql(app, *as_app, "-e", "SELECT count(*) FROM items WHERE id = 5000").stdout.split()[-1] == "0"
        r = sql(app, *as_app, "-e", "DROP TABLE items")
        assert r.returncode != 0 and "denied" in r.stderr, r.stderr
        r = sql(app, "-h", ADDR["db"], "-u", "root", "-e", "SELECT 1")        # root: the socket only
        assert r.returncode != 0 and "denied" in r.stderr, r.stderr
        r = sql(db, f"--socket={t.dir / 'db' / 'mysqld.sock'}", "-e", f"SELECT 'x' INTO OUTFILE '{outfile}'")
        assert r.returncode != 0 and "secure-file-priv" in r.stderr, r.stderr
        assert not outfile.exists()
        users = sql(db, f"--socket={t.dir / 'db' / 'mysqld.sock'}", "-N", "-e",
                    "SELECT CONCAT(user, '@', host) FROM mysql.user").stdout.split()
        assert sorted(users) == sorted(["mariadb.sys@localhost", "root@localhost", f"{DB_USER}@%"]), users    # no anonymous account
        # every listening socket is on one of the tier hosts' addresses; no UDP at all
        tcp = db.run(["ss", "-ltnH"]).stdout.split("\n")
        local = sorted({line.split()[3].rsplit(":", 1)[0] for line in tcp if line.strip()})
        assert set(local) <= set(ADDR.values()), local
        assert db.run(["ss", "-lunH"]).stdout.strip() == ""
        # gunicorn's workers' heartbeat files are in the scratch directory
        held = []
        for _tier, proc in t.procs:
            for pid in [proc.pid, *_children(proc.pid)]:
                for fd in Path(f"/proc/{pid}/fd").iterdir():
                    try:
                        held.append(os.readlink(fd))
                    except OSError:
                        continue
        beats = [h for h in held if "wgunicorn" in h]
        assert beats and all(h.startswith(str(t.dir)) for h in beats), beats
    finally:
        t.stop()
        time.sleep(0.2)


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out
