"""Provisioning testbed nodes over SSH: what the run relies on, checked, installed and set.

On a testbed the network already exists (Emulab/CloudLab made the links, addresses and routes), so
nothing is built: each node is checked (Linux, sudo, the programs its role needs, installed with
apt-get where missing), the network is verified (the named data interfaces exist and have
addresses, the routers forward, each client reaches its server through its data interface) and its
real addresses recorded, this package and the interceptor are installed on the monitored host in a
scratch directory of the run, the congestion control is set on the experiment's routes, and every
node's clock is measured against the monitored host's. Every change is written to the run's ledger
first. docs/ssh-backend.md, section 3, describes the procedure.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.backends.base import ClockOffset, Clocks
from harness.backends.ssh import reported
from harness.backends.ssh.node import CLOCK_ROUNDS, SshNode
from harness.backends.ssh.transport import SshError
from harness.fabric import is_fabric
from harness.ledger import Ledger
from harness.mesh import members as mesh_members
from harness.routing import multipath_routers
from harness.topology import Interface, Topology

MIN_PYTHON = (3, 10)

# $1 = "sudo" or "-", then the programs to look for. Prints uname, the OS, $SSH_CONNECTION, a line
# "missing <program>" for each one not found, and "checked" when the check ran.
PROBE_SCRIPT = ('uname -sr; (. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}"); echo "$SSH_CONNECTION"\n'
                'check=\'for p; do command -v "$p" >/dev/null 2>&1 || echo "missing $p"; done; echo checked\'\n'
                'if [ "$1" = sudo ]; then shift; sudo -n sh -c "$check" sh "$@"; else shift; sh -c "$check" sh "$@"; fi\n')

# Programs a node needs for its role, and the Debian/Ubuntu packages that provide them.
PACKAGES = {"python3": "python3", "ip": "iproute2", "ss": "iproute2", "truncate": "coreutils", "tar": "tar",
            "sysctl": "procps", "iptables": "iptables", "iptables-restore": "iptables", "lighttpd": "lighttpd",
            "iperf": "iperf", "wget": "wget", "make": "make", "gcc": "gcc libc6-dev"}
BASE_PROGRAMS = ("ip",)
# The service tiers (harness/service/tiers.py): the programs each tier runs, from the same Debian
# packages scripts/setup.sh installs; their services are stopped after an install (ours bind the ports)
SERVICE_PROGRAMS = {"web": {"nginx"}, "app": {"gunicorn"}, "cache": {"memcached"},
                    "db": {"mariadbd", "mariadb-install-db", "mariadb"}, "client": set()}
PACKAGES.update({"nginx": "nginx", "gunicorn": "gunicorn", "memcached": "memcached", "mariadbd": "mariadb-server",
                 "mariadb-install-db": "mariadb-server", "mariadb": "mariadb-server"})
SERVICE_MODULES = {"pymemcache": "python3-pymemcache", "pymysql": "python3-pymysql"}
# The message drainer reads the interceptor's ring with numpy (harness/interceptor/ring.py)
TRACE_MODULES = {"numpy": "python3-numpy"}
MODULE_PACKAGES = {**SERVICE_MODULES, **TRACE_MODULES}
SYSTEM_SERVICES = {"lighttpd": "lighttpd", "nginx": "nginx", "memcached": "memcached", "mariadb-server": "mariadb"}

# $1: the directory just made. Prints its owner's uid and type, then the uid commands run as.
OWNER_SCRIPT = 'stat -c "%u %F" -- "$1" && id -u'


def each(names: Iterable[str], fn: Callable[[str], None]) -> None:
    """fn(name) for every node at once; the first failure (in node order) is raised."""
    names = list(names)
    with ThreadPoolExecutor(max_workers=min(16, len(names)) or 1) as pool:
        futures = {n: pool.submit(fn, n) for n in names}
    for f in futures.values():
        if f.exception() is not None:
            raise f.exception()


def workload_pairs(spec, topology: Topology | None = None) -> list[tuple[str, str]]:
    """(client, server) of every connection the workloads make: a plain workload's host and server, a
    service's client to web, web to each app, each app to the cache and the database, a mesh's every
    member to every member of another pod (the pairs drawn for a repetition are among them)."""
    pairs: dict[tuple[str, str], None] = {}
    for w in spec.workloads:
        kind = getattr(w, "kind", None)
        if kind == "service":
            apps = list(w.apps or [])
            pairs.update(dict.fromkeys([(w.client, w.web), *((w.web, a) for a in apps),
                                        *((a, t) for a in apps for t in (w.cache, w.db))]))
        elif kind == "mesh":
            hosts = mesh_members(w, topology)
            pod = {h: topology.spec.nodes[h].site for h in hosts}
            pairs.update(dict.fromkeys((a, b) for a in hosts for b in hosts if pod[a] != pod[b]))
        else:
            pairs[(w.host, w.server)] = None
    return list(pairs)


def traced_nodes(spec) -> list[str]:
    """The nodes whose processes run under the interceptor: the monitored hosts (with the interceptor)
    and, with `trace: messages`, a service's every tier host (harness/lab/tracing.py's traced_hosts)."""
    out: dict[str, None] = {}
    if getattr(spec, "interceptor", False):
        out.update(dict.fromkeys(monitored(spec)))
    if getattr(spec, "trace", None):
        for w in spec.workloads:
            if w.kind == "service":
                out.update(dict.fromkeys(w.hosts))
    return list(out)


def package_nodes(spec, topology: Topology | None = None) -> dict[str, bool]:
    """The nodes that run this package's modules (collector, drainer, load generator, the app, a
    fabric's probers on every host), each with whether the interceptor is built there."""
    out = {h: False for h in monitored(spec)}
    for w in spec.workloads:
        if w.kind == "service":
            out.update({h: out.get(h, False) for h in (w.client, *(w.apps or []))})
    if topology is not None and is_fabric(topology):   # NetBouncer's prober (harness/lab/fabric.py)
        out.update({h: out.get(h, False) for h in topology.hosts})
    for h in traced_nodes(spec):
        out[h] = True
    return out


def needed_programs(topology: Topology, spec) -> dict[str, set[str]]:
    """The programs each node needs for what the spec has it do."""
    need = {n: {"python3", *BASE_PROGRAMS} for n in topology.spec.nodes}
    for w in spec.workloads:
        if w.kind == "service":
            for tier, host in w.tier_hosts.items():
                need[host] |= SERVICE_PROGRAMS.get("app" if tier.startswith("app") else tier, set()) | {"ss"}
            continue
        if w.kind == "mesh":   # every member runs iperf clients and an iperf server
            for h in mesh_members(w, topology):
                need[h] |= {"iperf", "ss"}
            continue
        need[w.host].add({"wget": "wget", "iperf": "iperf"}[w.kind])
        need[w.server] |= {"lighttpd", "truncate"} if w.kind == "wget" else {"iperf"}
        need[w.server].add("ss")
    for f in spec.faults:
        if f.at:
            need[f.at] |= {"iptables", "iptables-restore"}
    for n, interceptor in package_nodes(spec, topology).items():
        need[n] |= {"tar"} | ({"make", "gcc"} if interceptor else set())
    for a, b in workload_pairs(spec, topology):
        need[a].add("sysctl")
        need[b].add("sysctl")
    for n in multipath_routers(topology):   # ECMP: the multipath hash is set with sysctl (multipath.py)
        need[n].add("sysctl")
    return need


def needed_modules(spec) -> dict[str, set[str]]:
    """The system Python's modules each node needs: the app (pymemcache, pymysql) on the app hosts,
    pymemcache on the cache host (its warm-up); with `trace: messages`, numpy on every traced host
    (its drainer: the monitored hosts and the service's, as harness.lab.tracing.traced_hosts)."""
    need: dict[str, set[str]] = {}
    traced: set[str] = set()
    if getattr(spec, "trace", None) == "messages":
        m = getattr(spec, "monitor", None) if getattr(spec, "interceptor", False) else None
        traced.update((m,) if isinstance(m, str) else tuple(m or ()))
    for w in getattr(spec, "workloads", []):
        if w.kind == "service":
            for a in w.apps or []:
                need.setdefault(a, set()).update(SERVICE_MODULES)
            need.setdefault(w.cache, set()).add("pymemcache")
            if getattr(spec, "trace", None) == "messages":
                traced.update(w.hosts)
    for h in traced:
        need.setdefault(h, set()).update(TRACE_MODULES)
    return need


# ---- checking the nodes --------------------------------------------------------------------------

def check_nodes(nodes: dict[str, SshNode], need: dict[str, set[str]], install: bool,
                node_info: dict[str, dict], modules: dict[str, set[str]] | None = None) -> None:
    """Linux, the programs each node needs (installed with apt-get if `install`), sudo where needed,
    and the system Python's modules the service's tiers import there (`modules`). Records each node's
    kernel, OS and SSH server address in node_info."""
    def check(name: str) -> None:
        node = nodes[name]
        lines, missing = probe(node, need[name])
        uname = lines[0].split()
        if not uname or uname[0] != "Linux":
            raise SshError(f"{node.p.where}: not a Linux node ({lines[0].strip() or 'uname failed'})")
        node_info[name] = {"kernel": uname[1] if len(uname) > 1 else "", "os": lines[1],
                           "ssh_server_address": (lines[2].split() + ["", "", ""])[2]}
        if missing and install:
            apt_install(node, missing)
            missing = probe(node, need[name])[1]
        if missing:
            raise SshError(f"{node.p.where}: missing program(s) {', '.join(missing)} (Debian/Ubuntu "
                           f"packages: {' '.join(sorted({PACKAGES.get(m, m) for m in missing}))})")
        node.use_server = True
        wanted = sorted((modules or {}).get(name, ()))
        absent = missing_modules(node, wanted)
        if absent and install:
            apt_install(node, [MODULE_PACKAGES[m] for m in absent])
            absent = missing_modules(node, wanted)
        if absent:
            raise SshError(f"{node.p.where}: missing Python module(s) {', '.join(absent)} of {SYSTEM_PYTHON} "
                           f"(Debian/Ubuntu packages: {' '.join(MODULE_PACKAGES[m] for m in absent)})")

    each(nodes, check)


SYSTEM_PYTHON = "/usr/bin/python3"   # the tiers' Python (harness/service/tiers.py): Debian's gunicorn runs on it
_MODULE_PROBE = ("import importlib.util, sys; "
                 "print(' '.join(m for m in sys.argv[1:] if not importlib.util.find_spec(m)))")


def missing_modules(node: SshNode, modules: list[str]) -> list[str]:
    """Those of `modules` the node's system Python cannot import (all of them if it cannot run)."""
    if not modules:
        return []
    r = node.run([SYSTEM_PYTHON, "-c", _MODULE_PROBE, *modules], check=False)
    return r.stdout.split() if r.returncode == 0 else list(modules)


def probe(node: SshNode, programs: set[str]) -> tuple[list[str], list[str]]:
    """One login-shell command: kernel, OS, the SSH session's addresses, and which programs are
    not on root's PATH (under sudo -n when not root: iptables and sysctl live in sbin)."""
    r = node.run(["sh", "-c", PROBE_SCRIPT, "sh", "sudo" if node.p.sudo else "-", *sorted(programs)],
                 sudo=False, check=False)
    lines = r.stdout.splitlines()
    if "checked" not in lines:
        if node.p.sudo:
            raise SshError(f"{node.p.where}: `sudo -n` failed ({r.stderr.strip()}); the harness needs "
                           "passwordless sudo on testbed nodes (or log in as root)")
        raise SshError(f"{node.p.where}: cannot run commands: {r.stderr.strip() or r.stdout.strip()}")
    missing = [line.split()[1] for line in lines if line.startswith("missing ")]
    return lines[:3] + ["", "", ""], missing


def apt_install(node: SshNode, programs: list[str]) -> None:
    pkgs = sorted({pkg for m in programs for pkg in PACKAGES.get(m, m).split()})
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    install = [*env, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *pkgs]
    r = node.run(install, check=False, timeout=900)
    if r.returncode != 0:   # stale package lists: update once and try again
        node.run([*env, "apt-get", "update", "-qq"], check=False, timeout=900)
        r = node.run(install, check=False, timeout=900)
    if r.returncode != 0:
        raise SshError(f"{node.p.where}: apt-get install {' '.join(pkgs)} failed: "
                       f"{((r.stderr or r.stdout).strip().splitlines() or [''])[-1]}")
    for pkg, service in SYSTEM_SERVICES.items():   # the package starts a server on our port; ours binds there
        if pkg in pkgs:
            node.run(["systemctl", "disable", "--now", service], check=False)


# ---- verifying the network -----------------------------------------------------------------------

def verify_network(nodes: dict[str, SshNode], topology: Topology, spec, node_info: dict[str, dict],
                   control: dict[str, str | None], interfaces: dict[str, list[Interface]]) -> None:
    """The named data interfaces exist and have addresses; routers forward; each client reaches
    its server through its data interface; the monitor's SSH does not use its data interface.
    Records every node's real interfaces in `interfaces` and the one its SSH session arrives on in
    `control`."""
    topo = topology
    real: dict[str, list[tuple[str, str, int, int]]] = {}   # node -> [(ifname, address, prefixlen, link)]

    def inspect(name: str) -> None:
        node = nodes[name]
        by_if = interface_addresses(node)
        names = topology.spec.nodes[name].ssh.interfaces
        mine = []
        for j, intf in enumerate(topo.interfaces[name]):
            link = topo.spec.links[intf.link]
            what = f"link {intf.link} ({link.a}-{link.b})"
            if names is not None:
                ifname = names[j]
                if ifname not in by_if:
                    raise SshError(f"{node.p.where}: interface {ifname} for {what} does not exist "
                                   f"(IPv4 interfaces: {', '.join(sorted(by_if)) or 'none'})")
                if not by_if[ifname]:
                    raise SshError(f"{node.p.where}: interface {ifname} for {what} has no IPv4 address")
            else:
                found = [i for i, a in by_if.items() if any(x == intf.address for x, _ in a)]
                if not found:
                    raise SshError(f"{node.p.where}: no interface has {intf.address}, the address nestlab "
                                   f"derives for {what}; name the interfaces in 'ssh: {{interfaces: [...]}}'")
                ifname = found[0]
            address, prefixlen = by_if[ifname][0]
            mine.append((ifname, address, prefixlen, intf.link))
        real[name] = mine
        server_ip = node_info.get(name, {}).get("ssh_server_address")
        control[name] = next((i for i, a in by_if.items() if any(x == server_ip for x, _ in a)), None)
        if topo.is_router(name):
            fwd = node.run(["cat", "/proc/sys/net/ipv4/ip_forward"], sudo=False).stdout.strip()
            if fwd != "1":
                raise SshError(f"{node.p.where}: {name} is a router in the topology but does not forward "
                               "IPv4 (net.ipv4.ip_forward = 0); use static routing in the testbed profile "
                               "(nestlab export does) or enable forwarding")

    each(nodes, inspect)
    for name, mine in real.items():
        interfaces[name] = []
        for ifname, address, prefixlen, k in mine:
            link = topo.spec.links[k]
            peer = link.b if link.a == name else link.a
            peer_addr = next(a for _, a, _, kk in real[peer] if kk == k)
            interfaces[name].append(Interface(name, ifname, address, prefixlen, peer, peer_addr, k))
    for mon in monitored(spec):
        _check_control(nodes[mon], control.get(mon), interfaces[mon])

    def route_check(pair: tuple[str, str]) -> None:
        host, server = pair
        data_if = interfaces[host][0].name
        dst = interfaces[server][0].address
        out = nodes[host].run(["ip", "-j", "route", "get", dst], sudo=False, check=False).stdout
        dev = route_of(nodes[host], out).get("dev")
        if dev != data_if:
            raise SshError(f"{nodes[host].p.where}: {host} reaches {server} ({dst}) through "
                           f"{'no route' if dev is None else repr(dev)}, not its data interface {data_if}: "
                           "the traffic would bypass the topology's routers")

    pairs = set(workload_pairs(spec, topology))
    pairs |= {(b, a) for a, b in pairs}
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(route_check, sorted(pairs)))


def _check_control(node: SshNode, control: str | None, interfaces: list[Interface]) -> None:
    """A monitored host's SSH session must not arrive on its data interface."""
    if control and control in {i.name for i in interfaces}:
        raise SshError(f"{node.p.where}: the runner's SSH connection arrives on {control}, "
                       "the monitored host's data interface: its own traffic would be measured and an "
                       "ip_drop would cut it off; connect through the control network")


def interface_addresses(node: SshNode) -> dict[str, list[tuple[str, int]]]:
    """The node's interfaces and their IPv4 addresses (address, prefix length), from `ip -j -4 addr`:
    every interface name, address and prefix length checked (reported.py) before it is used."""
    where = node.p.where
    out = node.run(["ip", "-j", "-4", "addr", "show"], sudo=False).stdout
    try:
        addrs = json.loads(out or "[]")
    except ValueError:
        raise reported.refuse(where, "the output of `ip -j -4 addr show`", out.strip()[:200], "not JSON") from None
    if not isinstance(addrs, list) or not all(isinstance(a, dict) for a in addrs):
        raise reported.refuse(where, "the output of `ip -j -4 addr show`", out.strip()[:200],
                              "not a list of interfaces")
    by_if: dict[str, list[tuple[str, int]]] = {}
    for a in addrs:
        ifname = reported.interface_name(where, a.get("ifname"))
        infos = a.get("addr_info", [])
        if not isinstance(infos, list) or not all(isinstance(i, dict) for i in infos):
            raise reported.refuse(where, f"the addresses of {ifname}", infos, "not a list of addresses")
        by_if[ifname] = [(reported.ipv4_address(where, i.get("local"), f"address of {ifname}"),
                          reported.prefix_length(where, i.get("prefixlen"), f"prefix length of {ifname}"))
                         for i in infos if i.get("family") == "inet"]
    return by_if


def route_of(node: SshNode, out: str) -> dict:
    """The route `ip -j route get` printed, its device and gateway checked (reported.py); {} for
    none."""
    where = node.p.where
    try:
        routes = json.loads(out or "[]")
    except ValueError:
        raise reported.refuse(where, "the output of `ip -j route get`", out.strip()[:200], "not JSON") from None
    if not isinstance(routes, list) or not all(isinstance(r, dict) for r in routes):
        raise reported.refuse(where, "the output of `ip -j route get`", out.strip()[:200], "not a list of routes")
    if not routes:
        return {}
    route = dict(routes[0])
    if route.get("dev") is not None:
        route["dev"] = reported.interface_name(where, route["dev"], "route device")
    if route.get("gateway") is not None:
        route["gateway"] = reported.ipv4_address(where, route["gateway"], "route gateway")
    return route


# ---- installing ----------------------------------------------------------------------------------

_BUNDLE: bytes | None = None


def bundle() -> bytes:
    """The lab (harness), the run directory's writers (rundir) and pyroute2 (pure Python; the collector
    needs it) as a .tar.gz for the monitored node: sources only, the interceptor is built there with make."""
    global _BUNDLE
    if _BUNDLE is None:
        import pyroute2

        import harness
        import rundir

        def keep(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
            if "__pycache__" in ti.name or ti.name.endswith((".pyc", ".so", ".o", ".tmp")):
                return None
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            return ti

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for pkg in (harness, rundir, pyroute2):
                root = Path(pkg.__file__).resolve().parent
                tar.add(root, arcname=root.name, filter=keep)
        _BUNDLE = buf.getvalue()
    return _BUNDLE


def make_private_dir(node: SshNode, path: str, sudo: bool = True) -> None:
    """Create directory `path` (mode 700) on the node as the user commands run as (root with sudo,
    else the login user). Whatever is there already is refused, never reused: in a shared directory
    (/tmp, /dev/shm) another local user could have made it, and root would then run or preload code
    from it. Recorded in the ledger first (dropped again if it was not made here)."""
    if node.ledger:
        node.ledger.add_remote_path(node.name, path)
    r = node.run(["mkdir", "-m", "700", "--", path], check=False, sudo=sudo)
    problem = None
    if r.returncode != 0:
        problem = f"cannot create it ({(r.stderr or r.stdout).strip()})"
        if "exists" in problem:
            problem = ("it exists already (not made by this run: another user may have made it); "
                       "nestlab only uses a directory it has just created")
    else:
        out = node.run(["sh", "-c", OWNER_SCRIPT, "sh", path], check=False, sudo=sudo).stdout.split()
        if len(out) < 3 or out[1:-1] != ["directory"] or out[0] != out[-1]:
            problem = f"it is not a directory owned by uid {out[-1] if out else '?'} (stat: {' '.join(out[:-1])})"
    if problem:
        if node.ledger:
            node.ledger.drop_remote_path(node.name, path)
        raise SshError(f"{node.p.where}: scratch directory {path}: {problem}")



def install(nodes: dict[str, SshNode], packages: dict[str, bool], node_info: dict[str, dict]) -> dict[str, str]:
    """Scratch directory on every node (logs, served files); this package and pyroute2 on every node
    in `packages` (the monitored hosts' collectors, the drainers, a service's load generator and app),
    with the interceptor built there (make) where `packages` says so. Returns the directory the package
    is in on each of those nodes; their Python versions go into node_info."""
    def scratch(name: str) -> None:
        node = nodes[name]
        # Made as the login user (files are copied in over SFTP as that user); commands run with
        # sudo write into it as root.
        make_private_dir(node, node.workdir, sudo=False)
        node.run(["mkdir", f"{node.workdir}/logs"], sudo=False)

    each(nodes, scratch)
    out: dict[str, str] = {}

    def unpack(name: str) -> None:
        node = nodes[name]
        pkg = f"{node.workdir}/pkg"
        node.run(["mkdir", pkg], sudo=False)
        with node.conn.sftp.open(f"{node.workdir}/nestlab.tar.gz", "wb") as f:
            f.write(bundle())
        node.run(["tar", "-xzf", f"{node.workdir}/nestlab.tar.gz", "-C", pkg], sudo=False)
        r = node.run([node.p.python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], sudo=False)
        version = r.stdout.strip()
        if tuple(int(x) for x in version.split(".")) < MIN_PYTHON:
            raise SshError(f"{node.p.where}: {node.p.python} is Python {version}; the collector needs "
                           f"{'.'.join(map(str, MIN_PYTHON))} or later (set ssh: {{python: ...}} in the topology)")
        node_info[name]["python"] = version
        if packages[name]:
            r = node.run(["make", "-s", "-C", f"{pkg}/harness/interceptor"], check=False, sudo=False, timeout=300)
            if r.returncode != 0:
                raise SshError(f"{node.p.where}: building the interceptor failed: {r.stderr.strip()[-300:]}")
        out[name] = pkg

    each(list(packages), unpack)
    return out


# ---- congestion control and clocks ---------------------------------------------------------------

def set_congestion_control(nodes: dict[str, SshNode], spec, interfaces: dict[str, list[Interface]],
                           node_info: dict[str, dict], ledger: Ledger | None,
                           topology: Topology | None = None) -> None:
    """The spec's congestion control on the experiment's flows only: a host route to each peer
    (client -> server and back) with `congctl`, as the Mininet backend does, removed at the end.
    The node's default and its other routes stay as they are."""
    cc = spec.congestion_control
    wanted: dict[str, set[str]] = {}
    for a, b in workload_pairs(spec, topology):
        wanted.setdefault(a, set()).add(interfaces[b][0].address)
        wanted.setdefault(b, set()).add(interfaces[a][0].address)

    def set_cc(name: str) -> None:
        node = nodes[name]
        node_info[name]["congestion_control_default"] = node.run(
            ["cat", "/proc/sys/net/ipv4/tcp_congestion_control"]).stdout.strip()
        for peer in sorted(wanted[name]):
            route = route_of(node, node.run(["ip", "-j", "route", "get", peer]).stdout)
            if route.get("dev") is None:   # checked: no empty or made-up device reaches `ip route`
                raise reported.refuse(node.p.where, f"the route to {peer}", route, "it names no device")
            where = [*(["via", route["gateway"]] if route.get("gateway") else []), "dev", route["dev"]]
            if ledger:
                ledger.add_undo(name, ["ip", "route", "del", f"{peer}/32", *where],
                                f"remove the route to {peer} with congctl {cc}")
            r = node.run(["ip", "route", "add", f"{peer}/32", *where, "congctl", cc], check=False)
            if r.returncode != 0:
                if ledger:
                    ledger.drop_undo({"node": name, "argv": ["ip", "route", "del", f"{peer}/32", *where],
                                      "what": f"remove the route to {peer} with congctl {cc}"})
                why = r.stderr.strip()
                if "exists" in why:
                    why = f"a route to {peer}/32 exists already"
                raise SshError(f"{node.p.where}: congestion_control {cc!r} cannot be set on the route to "
                               f"{peer}: {why}")

    with ThreadPoolExecutor(max_workers=8) as pool:
        for f in [pool.submit(set_cc, n) for n in sorted(wanted)]:
            f.result()


# A clock whose best round trip is slower than this cannot be measured well enough to put its node's
# stamps on the reference timeline (the error bound is half the round trip): the run is refused.
MAX_CLOCK_RTT_S = 0.1
# How far a node's offset may move during a run (checked every CLOCK_CHECK_S and at the end) beyond the
# two measurements' error bounds: CLOCK_MONOTONIC of two machines drifts apart by their crystals' and
# NTP's frequency corrections (tens of ppm: a few ms an hour), never by more unless a clock was stepped
# or the node rebooted.
CLOCK_DRIFT_S = 0.005


def monitored(spec) -> tuple[str, ...]:
    """The spec's monitored hosts (`monitor`: one host or a list), the first the reference clock's."""
    m = spec.monitor
    return (m,) if isinstance(m, str) else tuple(m)


def measure_clocks(nodes: dict[str, SshNode], monitor: str) -> Clocks:
    """Every node's and the runner's offset to the monitored host's clock, measured now. A node whose
    clock cannot be read, or only with round trips above MAX_CLOCK_RTT_S, ends the run with one line
    naming it."""
    mon = monitor
    measured: dict[str, tuple[float, float]] = {}

    def measure(name: str) -> None:
        try:
            measured[name] = nodes[name].measure_clock()
        except SshError:
            raise
        except Exception as e:  # noqa: BLE001 - the node's command server is gone, or answered nonsense
            raise SshError(f"{nodes[name].p.where}: its clock offset cannot be measured: {e}") from None
        rtt = measured[name][1]
        if not rtt < MAX_CLOCK_RTT_S:   # also NaN
            raise SshError(f"{nodes[name].p.where}: its clock offset cannot be measured: the best of "
                           f"{CLOCK_ROUNDS} round trips took {rtt * 1000:.0f} ms (at most "
                           f"{MAX_CLOCK_RTT_S * 1000:.0f} ms: the offset would be good to only +-{rtt * 500:.0f} ms)")

    each(nodes, measure)
    d_mon, rtt_mon = measured[mon]
    method = f"best of {CLOCK_ROUNDS} round trips"
    clocks = Clocks(mon, runner=ClockOffset(d_mon, rtt_mon, CLOCK_ROUNDS, method))
    for name in nodes:
        d, rtt = measured[name]
        clocks.nodes[name] = (ClockOffset(0.0, 0.0, CLOCK_ROUNDS, "reference") if name == mon else
                              ClockOffset(d_mon - d, rtt + rtt_mon, CLOCK_ROUNDS, method))
    return clocks


def clock_drift(start: Clocks, now: Clocks, nodes: dict[str, SshNode], limit: float = CLOCK_DRIFT_S) -> None:
    """SshError naming the first node whose offset moved by more than `limit` beyond the two
    measurements' error bounds (half of each round trip) since `start`: it lost clock sync (its clock
    was stepped, or it rebooted), and its stamps can no longer be put on the reference timeline."""
    for name, a in start.nodes.items():
        b = now.nodes.get(name)
        if b is None:
            continue
        moved, bound = abs(b.offset - a.offset), limit + (a.rtt + b.rtt) / 2
        if moved > bound:
            where = nodes[name].p.where if name in nodes else name
            raise SshError(f"{where}: lost clock sync: its offset to {start.reference}'s clock moved by "
                           f"{moved * 1000:.1f} ms since the start of the run (at most {bound * 1000:.1f} ms "
                           "allowed); what was recorded is kept")
