"""`nestlab export`: Emulab NS files, CloudLab profiles and SSH topologies for a couple of topologies.

Each export is compared with a hand-written expected file (tests/expected/), and checked to be well
formed by running it: the NS file with tclsh against a stand-in for Emulab's tb_compat.tcl, the
profile with Python against a stand-in for geni-lib. Both stand-ins record what the file asks the
testbed for (nodes, links, bandwidths, addresses, queues, forced shaping, routing), which must be the
topology's shape.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.export import cloudlab_profile, emulab_ns, ssh_topology
from harness.topology import load_topology
from nestlab.cli import nestlab_main
from rundir.errors import UserError
from tests.support.env import REPO, write

EXPECTED = REPO / "tests" / "expected"
TOPOLOGIES = REPO / "topologies"

# A stand-in for Emulab's NS parser: `new Simulator` (OTcl, loaded before the file runs) and the
# commands of tb_compat.tcl an exported file may use, recorded and printed (one tab-separated line per
# node, per link and per queue set) when the file says `$ns run`. As in Emulab's ns2ir (sim.tcl.in,
# lanlink.tcl), `$ns link A B` is the A->B direction of the duplex link, and its `queue` one of the
# link's two queue objects, with ns-2's defaults (limit_ 50, queue-in-bytes_ 0). Between two nodes
# joined by several links it is the last one made (sim.tcl's link_map keeps "the last one created").
NS_PRELUDE = r"""
set ::nn 0
set ::nl 0
set ::nsl 0
proc new {cls} { if {$cls ne "Simulator"} { error "unknown class $cls" }; return ::ns_obj }
proc ::ns_obj {cmd args} {
    switch -- $cmd {
        node { return "_node[incr ::nn]" }
        duplex-link {
            if {[llength $args] != 5 || [lindex $args 4] ne "DropTail"} { error "bad duplex-link $args" }
            set l "_link[incr ::nl]"
            set ::_link($l) [lrange $args 0 3]
            return $l
        }
        link {
            if {[llength $args] != 2} { error "bad link $args" }
            lassign $args src dst
            for {set i $::nl} {$i >= 1} {incr i -1} {
                lassign $::_link(_link$i) a b
                if {$a eq $src && $b eq $dst} { return [simplex _link$i to] }
                if {$a eq $dst && $b eq $src} { return [simplex _link$i from] }
            }
            error "no link between $src and $dst"
        }
        rtproto { set ::_rtproto [lindex $args 0] }
        run { dump }
        default { error "unknown ns command $cmd" }
    }
}
proc simplex {l dir} {
    set q "::_q_${l}_$dir"
    if {![info exists ::_qset($q)]} {
        set ::_qset($q) [dict create limit_ 50 queue-in-bytes_ 0]
        proc $q {cmd args} [string map [list @Q@ $q] {
            if {$cmd ne "set" || [llength $args] != 2} { error "bad queue command $cmd $args" }
            lassign $args var value
            if {$var ni {limit_ queue-in-bytes_}} { error "unknown queue variable $var" }
            dict set ::_qset(@Q@) $var $value
        }]
    }
    set sl "::_sl[incr ::nsl]"
    proc $sl {cmd} [string map [list @Q@ $q] { if {$cmd ne "queue"} { error "bad link command $cmd" }; return @Q@ }]
    return $sl
}
"""
TB_COMPAT = r"""
proc tb-set-node-os {n os} { set ::_os($n) $os }
proc tb-set-hardware {n hw} { set ::_hw($n) $hw }
proc tb-set-ip-link {n l ip} { lappend ::_ips($l) [list $n $ip] }
proc tb-set-link-loss {l p} { set ::_loss($l) $p }
proc dump {} {
    foreach v [info globals] {
        if {![array exists ::$v] && [info exists ::$v] && [string match _node* [set ::$v]]} { set ::_name([set ::$v]) $v }
    }
    for {set i 1} {$i <= $::nn} {incr i} {
        set n "_node$i"
        puts [join [list node $::_name($n) $::_os($n) [expr {[info exists ::_hw($n)] ? $::_hw($n) : ""}]] "\t"]
    }
    for {set i 1} {$i <= $::nl} {incr i} {
        set l "_link$i"
        lassign $::_link($l) a b bw delay
        set ends {}
        foreach e $::_ips($l) { lappend ends $::_name([lindex $e 0]) [lindex $e 1] }
        puts [join [list link $::_name($a) $::_name($b) $bw $delay [expr {[info exists ::_loss($l)] ? $::_loss($l) : 0}] [join $ends " "]] "\t"]
        foreach {dir src dst} [list to $a $b from $b $a] {
            set q "::_q_${l}_$dir"
            if {[info exists ::_qset($q)]} {
                puts [join [list queue $::_name($src) $::_name($dst) [dict get $::_qset($q) limit_] [dict get $::_qset($q) queue-in-bytes_]] "\t"]
            }
        }
    }
    puts [join [list rtproto $::_rtproto] "\t"]
}
"""

# A stand-in for geni-lib (geni.portal, geni.rspec.pg/emulab/igext): records the request and prints
# it as JSON on printRequestRSpec.
GENI = {
    "geni/__init__.py": "",
    "geni/rspec/__init__.py": "",
    "geni/rspec/emulab.py": "",
    "geni/rspec/igext.py": "",
    "geni/rspec/pg.py": '''
class IPv4Address:
    def __init__(self, address, netmask):
        self.address, self.netmask = address, netmask
''',
    "geni/portal.py": '''
import json


class ParameterType:
    IMAGE, NODETYPE, BOOLEAN = "image", "nodetype", "boolean"


class Params:
    pass


class Node:
    def __init__(self, kind, name):
        self.kind, self.name, self.interfaces = kind, name, []
        self.disk_image = self.hardware_type = None

    def addInterface(self, name, address=None):
        iface = {"client_id": f"{self.name}:{name}", "node": self.name,
                 "address": address.address, "netmask": address.netmask}
        assert iface["client_id"] not in [i["client_id"] for i in self.interfaces], "duplicate interface"
        self.interfaces.append(iface)
        return iface


class Link:
    def __init__(self, name):
        self.name, self.interfaces = name, []
        self.bandwidth, self.latency, self.plr = -1, 0, 0.0
        self.force_shaping = False

    def addInterface(self, iface):
        self.interfaces.append(iface)

    def setForceShaping(self):   # geni.rspec.emulab's Link extension (emuext.py)
        assert not self.force_shaping, "setForceShaping is once-only"
        self.force_shaping = True


class Request:
    def __init__(self):
        self.nodes, self.links, self.routing = [], [], None

    def RawPC(self, name):
        self.nodes.append(Node("raw", name))
        return self.nodes[-1]

    def XenVM(self, name):
        self.nodes.append(Node("xen", name))
        return self.nodes[-1]

    def Link(self, name):
        self.links.append(Link(name))
        return self.links[-1]

    def setRoutingStyle(self, style):
        self.routing = style


class Context:
    def __init__(self):
        self.params = Params()

    def defineParameter(self, name, description, kind, default):
        setattr(self.params, name, default)

    def bindParameters(self):
        return self.params

    def makeRequestRSpec(self):
        return Request()

    def printRequestRSpec(self, request):
        print(json.dumps({
            "nodes": [{"name": n.name, "kind": n.kind, "image": n.disk_image, "hw": n.hardware_type}
                      for n in request.nodes],
            "links": [{"name": lk.name, "bandwidth": lk.bandwidth, "latency": lk.latency, "plr": lk.plr,
                       "force_shaping": lk.force_shaping, "ends": [(i["node"], i["client_id"], i["address"], i["netmask"]) for i in lk.interfaces]}
                      for lk in request.links],
            "routing": request.routing}))
''',
}


def _shape(topo):
    """What the testbed must build: nodes, and per link its ends with their derived addresses and bandwidth."""
    links = []
    for k, lk in enumerate(topo.spec.links):
        ends = [(n, next(i.address for i in topo.interfaces[n] if i.link == k)) for n in (lk.a, lk.b)]
        links.append((ends, lk.bw or 1e9))
    return list(topo.spec.nodes), links


def _queues(topo):
    """The queue rows the NS file must ask for: both directions of every bandwidth-limited link, in packets."""
    return [["queue", src, dst, str(lk.queue_packets), "0"] for lk in topo.spec.links if lk.bw
            for src, dst in ((lk.a, lk.b), (lk.b, lk.a))]


def run_ns(text: str, tmp_path: Path) -> list[list[str]]:
    (tmp_path / "tb_compat.tcl").write_text(TB_COMPAT)
    (tmp_path / "prelude.tcl").write_text(NS_PRELUDE)
    (tmp_path / "exp.ns").write_text(text)
    (tmp_path / "run.tcl").write_text("source prelude.tcl\nsource exp.ns\n")
    r = subprocess.run(["tclsh", "run.tcl"], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return [line.split("\t") for line in r.stdout.splitlines()]


def run_profile(text: str, tmp_path: Path) -> dict:
    for path, body in GENI.items():
        (tmp_path / "stub" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "stub" / path).write_text(body)
    (tmp_path / "profile.py").write_text(text)
    r = subprocess.run([sys.executable, "profile.py"], cwd=tmp_path, capture_output=True, text=True, timeout=30,
                       env={"PYTHONPATH": str(tmp_path / "stub"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


CASES = [("dumbbell", {}), ("chain", {"hardware": "d430"}), ("ecmp", {}), ("fattree", {})]


@pytest.mark.parametrize("name,opts", CASES)
def test_emulab_ns_is_the_expected_file(name, opts):
    topo = load_topology(TOPOLOGIES / f"{name}.yaml")
    assert emulab_ns(topo, **opts) == (EXPECTED / f"{name}.ns").read_text()


@pytest.mark.parametrize("name,vm", [("dumbbell", False), ("chain", True), ("ecmp", False), ("fattree", False)])
def test_cloudlab_profile_is_the_expected_file(name, vm):
    topo = load_topology(TOPOLOGIES / f"{name}.yaml")
    assert cloudlab_profile(topo, vm=vm) == (EXPECTED / f"{name}.profile.py").read_text()


def test_ssh_topology_is_the_expected_file_and_loads_as_an_ssh_topology(tmp_path):
    topo = load_topology(TOPOLOGIES / "dumbbell.yaml")
    text = ssh_topology(topo, "nest.nestlab.emulab.net", "alice", "~/.ssh/id_ed25519")
    assert text == (EXPECTED / "dumbbell-ssh.yaml").read_text()
    placed = load_topology(write(tmp_path, "dumbbell-ssh.yaml", text))
    assert placed.backend == "ssh" and placed.spec.links == topo.spec.links
    assert placed.spec.nodes["x1"].ssh.host == "x1.nest.nestlab.emulab.net"
    assert placed.interfaces == topo.interfaces   # the same derived addresses the exports assign


@pytest.mark.skipif(shutil.which("tclsh") is None, reason="needs tclsh")
@pytest.mark.parametrize("name", ["dumbbell", "chain", "ecmp", "fattree"])
def test_emulab_ns_runs_and_asks_for_the_topologys_shape(name, tmp_path):
    topo = load_topology(TOPOLOGIES / f"{name}.yaml")
    rows = run_ns((EXPECTED / f"{name}.ns").read_text(), tmp_path)
    nodes, links = _shape(topo)
    assert [r[1] for r in rows if r[0] == "node"] == nodes
    assert all(r[2] == "UBUNTU22-64-STD" for r in rows if r[0] == "node")
    got = [r for r in rows if r[0] == "link"]
    assert len(got) == len(links)
    for row, (ends, bw) in zip(got, links, strict=True):
        _, a, b, rate, delay, loss, ips = row
        assert [a, b] == [n for n, _ in ends] and delay == "0ms" and loss == "0"
        assert rate == f"{bw / 1e6:g}Mb"
        assert ips.split() == [x for end in ends for x in end]
    # both directions of every bandwidth-limited link queue 50 packets (the default), no other link's
    assert [r for r in rows if r[0] == "queue"] == _queues(topo) != []
    assert all(r[3] == "50" for r in rows if r[0] == "queue")
    assert rows[-1] == ["rtproto", "Static"]


@pytest.mark.parametrize("name", ["dumbbell", "chain", "ecmp", "fattree"])
def test_cloudlab_profile_runs_and_asks_for_the_topologys_shape(name, tmp_path):
    topo = load_topology(TOPOLOGIES / f"{name}.yaml")
    req = run_profile((EXPECTED / f"{name}.profile.py").read_text(), tmp_path)
    nodes, links = _shape(topo)
    assert [n["name"] for n in req["nodes"]] == nodes
    assert {n["kind"] for n in req["nodes"]} == {"xen" if name == "chain" else "raw"}
    assert all(n["image"].endswith("UBUNTU22-64-STD") for n in req["nodes"])
    assert len(req["links"]) == len(links)
    for lk, (ends, bw) in zip(req["links"], links, strict=True):
        assert [(n, addr) for n, _, addr, _ in lk["ends"]] == ends
        assert all(mask == "255.255.255.0" for *_, mask in lk["ends"])
        assert lk["bandwidth"] == bw / 1e3 and lk["latency"] == 0 and lk["plr"] == 0
    # bandwidth-limited links are force-shaped: a delay node (queue of 50 packets) shapes them
    assert [lk["force_shaping"] for lk in req["links"]] == [bool(lk.bw) for lk in topo.spec.links]
    # interface i of a node is its i-th link, in the order of the topology's links
    for n in nodes:
        ifaces = [cid for lk in req["links"] for node, cid, _, _ in lk["ends"] if node == n]
        assert ifaces == [f"{n}:eth{i}" for i in range(len(topo.interfaces[n]))]
    assert req["routing"] == "static"


DELAY_LOSS = """\
name: lossy
nodes:
  h1: {}
  r: {router: true}
  h2: {}
links:
  - {a: h1, b: r, bw: 10Mbit, delay: 20ms, loss: 1.5}
  - {a: r, b: h2, bw: 512kbit}
"""


def test_delay_loss_and_slow_links_are_exported(tmp_path):
    topo = load_topology(write(tmp_path, "lossy.yaml", DELAY_LOSS))
    ns = emulab_ns(topo)
    assert "set link0 [$ns duplex-link $h1 $r 10Mb 20ms DropTail]" in ns
    assert "tb-set-link-loss $link0 0.015" in ns
    assert "set link1 [$ns duplex-link $r $h2 512kb 0ms DropTail]" in ns
    if shutil.which("tclsh"):
        rows = run_ns(ns, tmp_path)
        assert [r[3:6] for r in rows if r[0] == "link"] == [["10Mb", "20ms", "0.015"], ["512kb", "0ms", "0"]]
    (tmp_path / "p").mkdir()
    req = run_profile(cloudlab_profile(topo), tmp_path / "p")
    assert [(lk["bandwidth"], lk["latency"], lk["plr"]) for lk in req["links"]] == [(10000, 20, 0.015), (512, 0, 0.0)]


def test_cli_writes_the_file_and_refuses_names_a_testbed_cannot_take(tmp_path, capsys):
    out = tmp_path / "dumbbell.ns"
    assert nestlab_main(["export", "--format", "emulab", str(TOPOLOGIES / "dumbbell.yaml"), "-o", str(out)]) == 0
    assert out.read_text() == (EXPECTED / "dumbbell.ns").read_text()
    bad = write(tmp_path, "bad.yaml", DELAY_LOSS.replace("h1", "h_1"))
    capsys.readouterr()
    assert nestlab_main(["export", "--format", "cloudlab", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "node 'h_1' cannot be a testbed node name" in err[0]
    assert nestlab_main(["export", "--format", "ssh", str(bad).replace("bad", "none")]) == 2
    assert nestlab_main(["export", "--format", "ssh", str(TOPOLOGIES / "chain.yaml")]) == 2
    assert "--domain" in capsys.readouterr().err


def _hostile(tmp_path: Path, evil: bool) -> Path:
    """DELAY_LOSS with a name and descriptions that try to break out of comments and docstrings into
    code (a newline, a triple quote, a Tcl line continuation); `evil=False`: plain ones, for reference."""
    if not evil:
        return write(tmp_path, "plain.yaml", DELAY_LOSS.replace("  h1: {}", "  h1: {description: plain}"))
    tcl = f"exec touch {tmp_path}/pwned-tcl"
    py = f"import os; os.system('touch {tmp_path}/pwned-py')"
    spec = yaml.safe_load(DELAY_LOSS)
    spec["name"] = f'x"""\n{py}\n"""'
    spec["description"] = f'up\n{tcl}\n"""\n{py}\nx = """ \\'
    spec["nodes"]["h1"] = {"description": f"h\n{tcl}\n{py} \\"}
    spec["nodes"]["r"]["description"] = "ends in a backslash \\\\"
    return write(tmp_path, "evil.yaml", yaml.safe_dump(spec, sort_keys=False))


def _calls(tree: ast.AST) -> list[str]:
    return sorted(ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call))


def test_hostile_descriptions_stay_inert_text(tmp_path):
    """Topology text reaches the NS file only as comments, the profile only inside its docstring: the
    exports do the same as for plain text, and nothing injected runs."""
    evil, plain = (load_topology(_hostile(tmp_path, e)) for e in (True, False))
    assert "\n" in evil.spec.description and '"""' in evil.name   # what the topology file really says

    ns = emulab_ns(evil, hardware="d430")
    code_lines = [line for line in ns.splitlines() if not line.startswith("#")]
    assert all("pwned" not in line.split(";#")[0] for line in code_lines)
    assert not any(line.lstrip().startswith(("exec", "import", "x = ")) for line in ns.splitlines())
    assert not any(line.rstrip().endswith("\\") for line in ns.splitlines())   # no Tcl continuation
    assert "pwned" in ns   # kept, as text
    profile = cloudlab_profile(evil)
    tree = ast.parse(profile)
    assert "import os; os.system" in ast.get_docstring(tree)
    assert _calls(tree) == _calls(ast.parse(cloudlab_profile(plain)))
    assert [ast.unparse(n) for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)] == [
        ast.unparse(n) for n in ast.parse(cloudlab_profile(plain)).body if isinstance(n, ast.Import | ast.ImportFrom)]

    (tmp_path / "p").mkdir()
    (tmp_path / "q").mkdir()
    assert run_profile(profile, tmp_path / "p") == run_profile(cloudlab_profile(plain), tmp_path / "q")
    if shutil.which("tclsh"):
        (tmp_path / "t").mkdir()
        (tmp_path / "u").mkdir()
        assert run_ns(ns, tmp_path / "t") == run_ns(emulab_ns(plain, hardware="d430"), tmp_path / "u")
    assert not list(tmp_path.glob("pwned-*"))

    text = ssh_topology(evil, "exp.proj.emulab.net")
    placed = load_topology(write(tmp_path, "placed.yaml", text))
    assert placed.spec.description == evil.spec.description and placed.spec.links == evil.spec.links


@pytest.mark.parametrize("opt", ["os_image", "hardware"])
def test_os_and_hardware_are_checked_before_they_reach_tcl_or_python(tmp_path, opt, capsys):
    topo = load_topology(TOPOLOGIES / "chain.yaml")
    for bad in ['X"; exec touch pwned; "', "a b", "x\ny", "$x", "[x]", "{x}", "x'"]:
        for fn in (emulab_ns, cloudlab_profile):
            kwargs = {"image" if fn is cloudlab_profile and opt == "os_image" else opt: bad}
            with pytest.raises(UserError, match="only letters, digits and"):
                fn(topo, **kwargs)
    flag = "--os" if opt == "os_image" else "--hardware"
    assert nestlab_main(["export", "--format", "emulab", str(TOPOLOGIES / "chain.yaml"), flag, "a;b"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]
    ok = "urn:publicid:IDN+emulab.net+image+emulab-ops//UBUNTU22-64-STD"
    assert f'"{ok}"' in emulab_ns(topo, **{opt: ok}) and f'"{ok}"' in cloudlab_profile(
        topo, **{"image" if opt == "os_image" else opt: ok})


def test_ssh_export_writes_a_relative_key_as_an_absolute_path(tmp_path, monkeypatch):
    """ssh_params takes a relative key from the topology file's directory: the exported file must
    name the key the user meant, relative to where they ran the command."""
    from harness.backends.ssh import ssh_params

    (tmp_path / "keys").mkdir()
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "elsewhere" / "topo.yaml"
    out.parent.mkdir()
    assert nestlab_main(["export", "--format", "ssh", str(TOPOLOGIES / "chain.yaml"), "--domain", "e.p.emulab.net",
                         "--key", "keys/id", "-o", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["ssh"]["key"] == str(tmp_path / "keys" / "id")
    assert {p.key for p in ssh_params(load_topology(out)).values()} == {str(tmp_path / "keys" / "id")}
    home = ssh_topology(load_topology(TOPOLOGIES / "chain.yaml"), "e.p.emulab.net", key="~/.ssh/id")
    assert yaml.safe_load(home)["ssh"]["key"] == "~/.ssh/id"   # already means the same from anywhere


QUEUES = """\
name: queues
nodes:
  h1: {}
  r: {router: true}
  r2: {router: true}
  h2: {}
  h3: {}
links:
  - {a: h1, b: r, bw: 10Mbit, queue: 100}
  - {a: r, b: h2, bw: 20Mbit}
  - {a: r, b: r2, bw: 30Mbit, delay: 5ms, queue: 20}
  - {a: r2, b: h3}
"""


def test_queues_reach_the_ns_file_the_profile_and_the_ssh_topology(tmp_path):
    topo = load_topology(write(tmp_path, "queues.yaml", QUEUES))
    warnings = []
    ns = emulab_ns(topo, warn=warnings.append)
    assert "set q0ab [[$ns link $h1 $r] queue]\n$q0ab set queue-in-bytes_ 0\n$q0ab set limit_ 100\n" in ns
    assert "set q0ba [[$ns link $r $h1] queue]\n$q0ba set queue-in-bytes_ 0\n$q0ba set limit_ 100\n" in ns
    assert "$q1ab set limit_ 50" in ns and "$q2ba set limit_ 20" in ns and "q3" not in ns
    assert warnings == []   # no 100Mb/1000Mb link: Emulab shapes each with a delay node
    if shutil.which("tclsh"):
        rows = run_ns(ns, tmp_path)
        assert [r for r in rows if r[0] == "queue"] == [
            ["queue", "h1", "r", "100", "0"], ["queue", "r", "h1", "100", "0"],
            ["queue", "r", "h2", "50", "0"], ["queue", "h2", "r", "50", "0"],
            ["queue", "r", "r2", "20", "0"], ["queue", "r2", "r", "20", "0"]] == _queues(topo)

    (tmp_path / "p").mkdir()
    profile = cloudlab_profile(topo, warn=warnings.append)
    req = run_profile(profile, tmp_path / "p")
    assert [lk["force_shaping"] for lk in req["links"]] == [True, True, True, False]
    assert "kbps=10000, queue=100)" in profile and "kbps=20000, queue=50)" in profile
    assert "# link1: nestlab expects 50 packets queued at each end; geni-lib cannot set a queue size" in profile
    assert "# link0: nestlab expects 100 packets" in profile and "not what the topology asks for" in profile
    assert len(warnings) == 2 and warnings[0].startswith("link0 (h1-r): queue 100 cannot be expressed")
    assert warnings[1].startswith("link2 (r-r2): queue 20 cannot be expressed")

    text = ssh_topology(topo, "e.p.emulab.net")
    links = yaml.safe_load(text)["links"]
    assert [lk.get("queue") for lk in links] == [100, None, 20, None]   # only where the topology sets it
    placed = load_topology(write(tmp_path, "placed.yaml", text))
    assert placed.spec.links == topo.spec.links
    assert [lk.queue_packets for lk in placed.spec.links] == [100, 50, 20, None]


def test_a_queue_emulab_cannot_build_is_refused_naming_the_link(tmp_path, capsys):
    big = write(tmp_path, "big.yaml", QUEUES.replace("queue: 20", "queue: 101"))
    with pytest.raises(UserError, match=r"link2 \(r-r2\): queue 101 cannot be built on Emulab"):
        emulab_ns(load_topology(big))
    capsys.readouterr()
    assert nestlab_main(["export", "--format", "emulab", str(big), "-o", str(tmp_path / "big.ns")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "link2 (r-r2): queue 101" in err[0] and "at most 100 packets" in err[0]
    assert not (tmp_path / "big.ns").exists()
    # the other formats still export it; the profile warns that it cannot build the queue
    assert nestlab_main(["export", "--format", "cloudlab", str(big), "-o", str(tmp_path / "big.py")]) == 0
    err = capsys.readouterr().err
    assert "warning: link0 (h1-r): queue 100 cannot be expressed in a CloudLab profile" in err
    assert "warning: link2 (r-r2): queue 101 cannot be expressed in a CloudLab profile" in err


def test_cli_warns_about_queues_the_testbed_may_not_build(tmp_path, capsys):
    """CloudLab: a queue other than the delay node's 50 packets. Emulab: the dumbbell's 100Mb
    bottleneck without delay or loss, which Emulab may build with no delay node (so no queue)."""
    assert nestlab_main(["export", "--format", "cloudlab", str(TOPOLOGIES / "dumbbell.yaml")]) == 0
    assert "warning" not in capsys.readouterr().err   # 50 packets: what the delay node queues
    odd = write(tmp_path, "odd.yaml", (TOPOLOGIES / "dumbbell.yaml").read_text().replace(
        "{a: x1, b: x2, bw: 100Mbit}", "{a: x1, b: x2, bw: 100Mbit, queue: 200}"))
    assert nestlab_main(["export", "--format", "cloudlab", str(odd), "-o", str(tmp_path / "odd.py")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("warning: link3 (x1-x2): queue 200 cannot be expressed in a CloudLab profile (geni-lib has "
                      "no queue size; the delay node queues 50 packets)")
    assert err[1] == f"wrote {tmp_path / 'odd.py'}"

    assert nestlab_main(["export", "--format", "emulab", str(TOPOLOGIES / "dumbbell.yaml")]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == ["warning: link3 (x1-x2): Emulab may build a 100Mb link without delay or loss with "
                                "no delay node, and then its queue of 50 packets does not apply (the CloudLab "
                                "profile forces shaping)"]
    assert out == (EXPECTED / "dumbbell.ns").read_text()
    assert "no delay node where the nodes' ports\n# run at 100Mb" in out
    assert nestlab_main(["export", "--format", "emulab", str(TOPOLOGIES / "chain.yaml")]) == 0
    assert capsys.readouterr().err == ""   # 50Mb: always a delay node


def test_parallel_links_are_exported_as_separate_links_each_shaped_like_the_bundle(tmp_path):
    """ecmp.yaml's x1-x2 bundle (paths: 2): two links between the same two nodes with the addresses
    derived for links 3 and 4, each 100 Mbit/s with 50 packets queued each way; every file says that
    nestlab installs the multipath routes itself; the SSH topology keeps them a bundle."""
    topo = load_topology(TOPOLOGIES / "ecmp.yaml")
    bundle = [(["x1", "x2"], ["x1", "10.0.4.1", "x2", "10.0.4.2"]), (["x1", "x2"], ["x1", "10.0.5.1", "x2", "10.0.5.2"])]
    ns = emulab_ns(topo, warn=lambda m: None)
    if shutil.which("tclsh"):
        rows = run_ns(ns, tmp_path)
        links = [(r[1:3], r[6].split()) for r in rows if r[0] == "link" and r[1:3] == ["x1", "x2"]]
        assert links == bundle
        assert [r[3:5] for r in rows if r[0] == "link" and r[1:3] == ["x1", "x2"]] == [["100Mb", "0ms"]] * 2
        assert [r for r in rows if r[0] == "queue"] == [["queue", a, b, "50", "0"] for a, b in
                                                        [("x1", "x2"), ("x2", "x1")] * 2]
    (tmp_path / "p").mkdir()
    profile = cloudlab_profile(topo, warn=lambda m: None)
    req = run_profile(profile, tmp_path / "p")
    x = [lk for lk in req["links"] if [e[0] for e in lk["ends"]] == ["x1", "x2"]]
    assert [[e[2] for e in lk["ends"]] for lk in x] == [["10.0.4.1", "10.0.4.2"], ["10.0.5.1", "10.0.5.2"]]
    assert [(lk["bandwidth"], lk["force_shaping"]) for lk in x] == [(100000, True)] * 2
    assert [[e[1] for e in lk["ends"]] for lk in x] == [["x1:eth3", "x2:eth0"], ["x1:eth4", "x2:eth1"]]
    text = ssh_topology(topo, "ecmp.nestlab.emulab.net", "alice")
    assert text == (EXPECTED / "ecmp-ssh.yaml").read_text()
    assert [lk for lk in yaml.safe_load(text)["links"] if lk["a"] == "x1" and lk["b"] == "x2"] == [
        {"a": "x1", "b": "x2", "bw": "100Mbit", "path": 0}, {"a": "x1", "b": "x2", "bw": "100Mbit", "path": 1}]
    placed = load_topology(write(tmp_path, "ecmp-ssh.yaml", text))
    assert placed.spec.links == topo.spec.links and placed.interfaces == topo.interfaces
    assert [i.address for i in placed.bundle("x1")] == ["10.0.4.1", "10.0.5.1"] and placed.routes("x1") == topo.routes("x1")
    for out in (ns, profile, text):
        assert "nestlab replaces those routes on x1 and x2" in " ".join(out.replace("#", " ").split())
    assert "the multipath routes on the routers at run time" in ns and "the multipath routes" in profile
    plain = load_topology(TOPOLOGIES / "dumbbell.yaml")   # no bundle: nothing about one
    assert "ECMP" not in emulab_ns(plain, warn=lambda m: None) + cloudlab_profile(plain) + ssh_topology(plain, "d.e")
