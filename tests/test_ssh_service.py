"""The service study on testbed nodes, without root, sshd or the tiers' programs: the tiers' commands
and files on their nodes (harness/service/tiers.py), the hop logs brought back and put on the
reference clock (harness/service/paths.py), the delay switch written on the app's node, the node
provisioning's packages for each tier (harness/backends/ssh/provision.py), and the tier faults' specs."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from harness.service.paths import PathSources, request_rows
from harness.service.tiers import ServiceTiers, TierHosts
from harness.spec import load_spec
from harness.topology import load_topology
from harness.yamlload import SpecError
from tests.support.env import REPO, write

ADDR = {"client": "10.0.1.1", "web": "10.0.3.1", "app1": "10.0.5.1", "app2": "10.0.6.1", "cache": "10.0.7.1",
        "db": "10.0.8.1"}
HOSTS = TierHosts(web="web", apps=("app1", "app2"), cache="cache", db="db")


class FakeNode:
    """A testbed node: every command recorded, files kept in `files` (what `cat >` wrote, `get` serves)."""

    def __init__(self, name: str):
        self.name, self.workdir = name, f"/tmp/nestlab-r1-{name}"
        self.commands: list[list[str]] = []
        self.files: dict[str, str] = {}
        self.started: list[tuple[list[str], Path, dict]] = []

    def log_path(self, log: Path) -> str:
        return f"{self.workdir}/logs/{log.name}"

    def run(self, argv, check=True, timeout=30.0, input=None):
        argv = [str(a) for a in argv]
        self.commands.append(argv)
        out, rc = "", 0
        if argv[:2] == ["sh", "-c"]:
            self.files[argv[-1]] = input
        elif argv[0] == "ss":
            out = "LISTEN 0 128 *:*"
        elif argv[0] == "cat":
            rc, out = (0, self.files[argv[-1]]) if argv[-1] in self.files else (1, "")
        elif argv[0] == "rm":
            self.files.pop(argv[-1], None)
        elif argv[0] == "ls":
            out = "\n".join(n.rsplit("/", 1)[1] for n in self.files if n.startswith(argv[-1] + "/"))
        elif argv[0].endswith("python3") and "time.time()" in argv[-1]:
            out = "1700000000.0\n"
        return subprocess.CompletedProcess(argv, rc, out, "")

    def start(self, argv, log, env=None):
        self.started.append((argv, log, env or {}))
        return NS(node=self.name, pid=1000 + len(self.started), argv=argv, log=log, poll=lambda: None)

    def get(self, remote: str, local: Path) -> None:
        if remote not in self.files:
            raise FileNotFoundError(remote)
        local.write_text(self.files[remote])


def _tiers(tmp_path):
    nodes = {n: FakeNode(n) for n in ADDR}
    t = ServiceTiers(HOSTS, nodes, ADDR, tmp_path / "www" / "service-0", tmp_path / "logs", lambda *a: None,
                     {"app1": {"LD_PRELOAD": "/tmp/nestlab-r1-app1/pkg/harness/interceptor/lib.so"}},
                     pythonpath=lambda h: f"/tmp/nestlab-r1-{h}/pkg", client="client")
    return t, nodes


def test_every_tier_is_started_on_its_node_with_its_files_there(tmp_path):
    t, nodes = _tiers(tmp_path)
    t.start()
    assert not (tmp_path / "www").exists()                      # nothing of the tiers' on the runner
    for name, node in nodes.items():
        base = f"{node.workdir}/service-0"
        assert ["mkdir", "-p", "--", f"{base}/hops", f"{base}/control"] in node.commands, name
    db = nodes["db"]
    (argv, log, _), = db.started
    assert argv[0] == "mariadbd" and all(a.split("=", 1)[1].startswith("/tmp/nestlab-r1-db/service-0/db")
                                         for a in argv if a.startswith(("--datadir", "--socket", "--pid-file",
                                                                        "--secure-file-priv", "--tmpdir")))
    assert log.name == "service-db-db.log"
    assert any(c[0] == "mariadb-install-db" and "--datadir=/tmp/nestlab-r1-db/service-0/db/data" in c for c in db.commands)
    (argv, _, env), = nodes["app1"].started
    assert argv[argv.index("--pythonpath") + 1] == "/tmp/nestlab-r1-app1/pkg"
    assert argv[argv.index("--chdir") + 1] == "/tmp/nestlab-r1-app1/service-0"
    assert argv[argv.index("--worker-tmp-dir") + 1].startswith("/tmp/nestlab-r1-app1/service-0/")
    assert env["NESTLAB_SVC_HOPS"] == "/tmp/nestlab-r1-app1/service-0/hops" and env["LD_PRELOAD"].endswith("lib.so")
    assert env["NESTLAB_SVC_CONTROL"] == "/tmp/nestlab-r1-app1/service-0/control"
    assert env["NESTLAB_SVC_DB"] == "10.0.8.1:3306" and env["NESTLAB_SVC_CACHE"] == "10.0.7.1:11211"
    web = nodes["web"]
    (argv, _, _), = web.started
    conf = web.files["/tmp/nestlab-r1-web/service-0/nginx/nginx.conf"]
    assert argv[:3] == ["nginx", "-c", "/tmp/nestlab-r1-web/service-0/nginx/nginx.conf"]
    assert argv[argv.index("-e") + 1] == "/tmp/nestlab-r1-web/logs/service-web-web.error.log"
    assert "access_log /tmp/nestlab-r1-web/service-0/nginx-access.tsv hops;" in conf
    assert "error_log /tmp/nestlab-r1-web/logs/service-web-web.error.log warn;" in conf
    assert "server 10.0.5.1:8000 max_fails=0;" in conf and "listen 10.0.3.1:80;" in conf
    assert t.loadgen_out() == "/tmp/nestlab-r1-client/service-0/loadgen.tsv"


def test_the_delay_switch_is_written_read_back_and_cleared_on_the_apps_node(tmp_path):
    t, nodes = _tiers(tmp_path)
    path = t.set_delay("app2", 0.2)
    assert path == "/tmp/nestlab-r1-app2/service-0/control/delay-app2"
    assert nodes["app2"].files[path] == "0.200000\n"
    write_cmd = next(c for c in nodes["app2"].commands if c[:2] == ["sh", "-c"])
    assert "mv -f" in write_cmd[2]                               # atomic: the app never reads half a value
    t.clear_delay("app2")
    assert path not in nodes["app2"].files and t.read("app2", path) is None
    nodes["app2"].files["/proc/1001/task/1001/children"] = "1002 1003\n"
    assert t.children("app2", [1001]) == [1002, 1003]


def test_the_tiers_logs_come_back_and_hostile_names_stay_on_the_node(tmp_path):
    t, nodes = _tiers(tmp_path)
    nodes["web"].files["/tmp/nestlab-r1-web/service-0/nginx-access.tsv"] = "q1\t5\t1700000100.5\t0.1\t200\t-\n"
    nodes["app1"].files["/tmp/nestlab-r1-app1/service-0/hops/hops-app1-77.tsv"] = "x\n"
    nodes["app1"].files["/tmp/nestlab-r1-app1/service-0/hops/..evil"] = "no\n"
    nodes["client"].files["/tmp/nestlab-r1-client/service-0/loadgen.tsv"] = "q1\thit\thit\t200\t1.0\t2.0\t\n"
    t.collect()
    assert (t.access_log).read_text().startswith("q1\t5")
    assert sorted(p.name for p in t.hops_dir.iterdir()) == ["hops-app1-77.tsv"]
    assert (t.dir / "loadgen.tsv").exists()
    assert t.wall_minus_mono() == 1700000000.0


def test_request_rows_are_put_on_the_reference_clock_with_each_stamping_nodes_offset(tmp_path):
    hops = tmp_path / "hops"
    hops.mkdir()
    (hops / "hops-app1-7.tsv").write_text("q1\thit\tapp\tapp1\t7\t101.000\t101.010\tok\n"
                                          "q1\thit\tcache\t-\t-\t101.002\t101.004\tok\n")
    (tmp_path / "loadgen.tsv").write_text("q1\thit\thit\t200\t50.0\t50.1\t\n")
    (tmp_path / "access.tsv").write_text("q1\t5\t1000.05\t0.04\t200\t10.0.5.1:8000\n")
    src = PathSources("client", 9, tmp_path / "loadgen.tsv", "web", tmp_path / "access.tsv", hops,
                      {"cache": ("cache", 3)}, 900.0, {"client": 10.0, "web": -40.0, "app1": -41.0})
    rows = {r[2]: r for r in request_rows(src)}
    assert rows["client"][5:7] == pytest.approx((60.0, 60.1))
    assert rows["web"][5:7] == pytest.approx((60.01, 60.05))          # 1000.05 - 900 - 40
    assert rows["app"][5:7] == pytest.approx((60.0, 60.01))
    assert rows["cache"][3:7] == pytest.approx(("cache", 3, 60.002, 60.004))   # timed at the app: app1's clock
    # without offsets (Mininet), as before
    src.offsets = None
    assert {r[2]: r for r in request_rows(src)}["app"][5] == pytest.approx(101.0)


# ---- provisioning ---------------------------------------------------------------------------------

SERVICE_SSH = REPO / "topologies" / "service-ssh.yaml"
SPEC = f"""\
name: svc
topology: {REPO / "topologies" / "service.yaml"}
duration: 20s
monitor: [web, app1, app2, cache, db]
trace: messages
workloads:
  - {{kind: service, rate: 40/s, concurrency: 16}}
faults:
  - {{kind: delay, host: app2, by: 200ms, schedule: {{at: [8s], duration: 6s}}}}
"""


def test_each_node_is_checked_for_its_tiers_packages_and_runs_the_package_where_needed(tmp_path):
    from harness.backends.ssh import provision

    exp = load_spec(write(tmp_path, "s.yaml", SPEC), topology=SERVICE_SSH)
    spec, topo = exp.spec, exp.topology
    need = provision.needed_programs(topo, spec)
    assert {"nginx", "ss"} <= need["web"] and {"gunicorn", "make", "gcc", "tar"} <= need["app1"]
    assert {"memcached"} <= need["cache"] and {"mariadbd", "mariadb-install-db", "mariadb"} <= need["db"]
    assert "nginx" not in need["x1"] and {"tar", "make", "gcc"} <= need["client"]   # traced: the interceptor
    # every traced host's drainer reads its ring with numpy (the first SSH e2e: "No module named 'numpy'")
    assert provision.needed_modules(spec) == {"app1": {"pymemcache", "pymysql", "numpy"},
                                              "app2": {"pymemcache", "pymysql", "numpy"},
                                              "cache": {"pymemcache", "numpy"}, "web": {"numpy"}, "db": {"numpy"},
                                              "client": {"numpy"}}
    assert provision.needed_modules(spec.model_copy(update={"trace": None}))["cache"] == {"pymemcache"}
    assert provision.package_nodes(spec) == {h: True for h in ("web", "app1", "app2", "cache", "db", "client")}
    pairs = provision.workload_pairs(spec)
    assert ("client", "web") in pairs and ("web", "app2") in pairs and ("app1", "db") in pairs
    # the Debian packages scripts/setup.sh installs
    setup = (REPO / "scripts" / "setup.sh").read_text()
    for program in set().union(*provision.SERVICE_PROGRAMS.values()):
        assert provision.PACKAGES[program] in setup, program
    for package in provision.MODULE_PACKAGES.values():
        assert package in setup


class ProbeNode:
    def __init__(self, name, have=(), modules=()):
        self.name, self.have, self.modules = name, set(have), set(modules)
        self.p = NS(where=f"{name} (root@{name}.example:22)", sudo=False)
        self.use_server = False

    def run(self, argv, sudo=True, check=True, timeout=30.0, input=None):
        if argv[:2] == ["sh", "-c"]:   # provision.PROBE_SCRIPT
            missing = [f"missing {p}" for p in argv[5:] if p not in self.have]
            return subprocess.CompletedProcess(argv, 0, "\n".join(["Linux 6.1", "Debian", "1 2 3 22", *missing,
                                                                    "checked"]), "")
        if "importlib.util" in " ".join(argv):
            return subprocess.CompletedProcess(argv, 0, " ".join(m for m in argv[3:] if m not in self.modules), "")
        return subprocess.CompletedProcess(argv, 1, "", "E: no network")


def test_a_node_without_the_packages_is_one_line_naming_it(tmp_path):
    from harness.backends.ssh import provision
    from harness.backends.ssh.transport import SshError

    base = {"python3", "ip", "ss", "sysctl", "tar", "make", "gcc"}
    nodes = {"app1": ProbeNode("app1", base | {"gunicorn"}, {"pymysql"}), "web": ProbeNode("web", base)}
    need = {"app1": base | {"gunicorn"}, "web": base | {"nginx"}}
    with pytest.raises(SshError) as e:
        provision.check_nodes({"web": nodes["web"]}, {"web": need["web"]}, False, {})
    assert str(e.value) == ("web (root@web.example:22): missing program(s) nginx (Debian/Ubuntu packages: nginx)")
    with pytest.raises(SshError) as e:   # the install fails: apt-get's last line
        provision.check_nodes({"app1": nodes["app1"]}, {"app1": need["app1"]}, True, {},
                              {"app1": {"pymemcache", "pymysql"}})
    assert str(e.value).startswith("app1 (root@app1.example:22): apt-get install python3-pymemcache failed")
    with pytest.raises(SshError) as e:
        provision.check_nodes({"app1": nodes["app1"]}, {"app1": need["app1"]}, False, {},
                              {"app1": {"pymemcache", "pymysql"}})
    assert str(e.value) == ("app1 (root@app1.example:22): missing Python module(s) pymemcache of /usr/bin/python3 "
                            "(Debian/Ubuntu packages: python3-pymemcache)")


# ---- the spec on an SSH topology --------------------------------------------------------------------

def test_the_service_spec_runs_unchanged_on_the_ssh_topology(tmp_path):
    exp = load_spec(write(tmp_path, "s.yaml", SPEC), topology=SERVICE_SSH)
    assert exp.topology.backend == "ssh" and exp.spec.monitored == ("web", "app1", "app2", "cache", "db")
    assert exp.spec.trace == "messages"
    plain = load_topology(REPO / "topologies" / "service.yaml")
    assert exp.topology.spec.links == plain.spec.links and list(exp.topology.spec.nodes) == list(plain.spec.nodes)


@pytest.mark.parametrize("fault", [
    "{kind: tier_pause, host: cache, schedule: {at: [8s], duration: 2s}}",
    "{kind: slow, host: db, cpu: 10%, schedule: {at: [8s], duration: 2s}}",
    "{kind: slow, target: {host: app1}, cpu: 10%, schedule: {at: [8s], duration: 2s}}",
    "{kind: delay, host: db, by: 200ms, schedule: {at: [8s], duration: 2s}}",
    "{kind: delay, host: web, by: 20ms, schedule: {at: [8s], duration: 2s}}",
    "{kind: app_pause, target: {host: app1}, schedule: {at: [8s], duration: 2s}}",
])
def test_the_tier_faults_run_on_testbeds_as_on_mininet(tmp_path, fault):
    """Once refused on an SSH topology (they acted through this machine's /proc, cgroups and shared
    memory); now done on the tier's node (harness.faults.onnode): the same spec loads on both."""
    text = SPEC.split("faults:")[0] + f"faults:\n  - {fault}\n"
    mininet = load_spec(write(tmp_path, "ok.yaml", text))
    ssh = load_spec(write(tmp_path, "s.yaml", text), topology=SERVICE_SSH)
    assert ssh.topology.backend == "ssh" and ssh.spec.faults == mininet.spec.faults


def test_a_tier_fault_still_needs_the_interceptor_on_its_host_on_a_testbed(tmp_path):
    text = SPEC.split("faults:")[0].replace("trace: messages\n", "").replace(
        "monitor: [web, app1, app2, cache, db]", "monitor: web") + \
        "faults:\n  - {kind: delay, host: db, by: 200ms, schedule: {at: [8s], duration: 2s}}\n"
    with pytest.raises(SpecError) as e:
        load_spec(write(tmp_path, "s.yaml", text), topology=SERVICE_SSH)
    assert "faults[0].host: delay at the db tier on 'db' acts through the interceptor" in str(e.value)
    assert "\n" not in str(e.value)


def test_export_of_the_ssh_topology_has_the_shape_of_the_service_topology(tmp_path):
    from harness.export import export as export_topology

    for fmt in ("emulab", "cloudlab"):
        ssh, plain = (export_topology(load_topology(p), fmt) for p in (SERVICE_SSH, REPO / "topologies" / "service.yaml"))
        strip = lambda text: [ln for ln in text.splitlines() if "service" not in ln]   # noqa: E731 - names, comments
        assert strip(ssh) == strip(plain), fmt
        assert ssh.count("10.0.8.") == 2                                 # the db's link, both ends


def test_probes_with_several_hosts_are_each_nodes_collectors_on_a_testbed_and_refused_on_mininet(tmp_path):
    from harness.lab.collectors import Collectors

    text = SPEC + "probe: {after: 500ms}\n"
    with pytest.raises(SpecError, match=r":\d+: probe: the collector's probes run with one monitored host"):
        load_spec(write(tmp_path, "m.yaml", text))
    exp = load_spec(write(tmp_path, "s.yaml", text), topology=SERVICE_SSH)
    assert exp.spec.probe is not None and exp.spec.probe.after == 0.5
    assert load_spec(write(tmp_path, "d.yaml", SPEC), topology=SERVICE_SSH).spec.probe is None   # off by default
    backend = NS(separate_collectors=lambda: True, python=lambda h: ["python3"], ignored_interfaces=lambda h: [])
    argv = Collectors(exp.spec, backend, None, None, {}, None).argv("app1", "/n/run.db")
    assert "--probe" in argv and "--label-host" in argv and "--host" not in argv
