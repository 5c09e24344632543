"""`nestlab export`: a topology as an Emulab NS file, a CloudLab geni-lib profile, or an SSH topology.

    nestlab export --format emulab   TOPOLOGY [-o FILE] [--os IMAGE] [--hardware TYPE]
    nestlab export --format cloudlab TOPOLOGY [-o FILE] [--os IMAGE] [--hardware TYPE] [--vm]
    nestlab export --format ssh      TOPOLOGY --domain EXP.PROJ.emulab.net [--user U] [--key FILE]

The testbed then builds the same shape as Mininet does here: the topology's node names, one link per
topology link with its bandwidth (and delay and loss, which testbeds shape with delay nodes), the
addresses nestlab derives (link k: 10.0.<k+1>.0/24, a = .1, b = .2) and static routing, so routers
forward. The SSH backend finds each link's interface on a node by that address, so the SSH topology
(`--format ssh` writes one, with the nodes' testbed host names) need not name interfaces.
docs/ssh-backend.md walks through it.

Queues: a bandwidth-limited link queues `queue` packets (default 50) at each end, as the Mininet
backend's pfifo does. The NS file sets both directions' queue objects (`limit_`, in packets); Emulab's
delay nodes take at most 100 (FreeBSD delaysetup ignores larger slot counts), so a larger queue is
refused. Emulab puts no delay node on a 100Mb or 1000Mb link without delay or loss (its FAQ "What are
the limits for link shaping?"), and no NS command documented for users forces one, so there the
queue is not applied: the export says so. geni-lib cannot ask for a queue size: the profile
force-shapes every bandwidth-limited link (a delay node, whose DropTail queue holds 50 packets), and a
different queue is reported as one the profile cannot build.

Parallel links (`paths: N`, ECMP): a bundle is exported as its N links, each shaped like the original,
with the addresses derived for links k..k+N-1 (the expanded topology lists them with `path` 0..N-1;
the SSH topology keeps `path`). Emulab's NS parser and geni-lib both accept several links between the
same two nodes (ns2ir's duplex-link makes a link object each time; its `$ns link A B` names the last
one made, so each link's queue lines follow it; geni-lib's links are separate objects whose interfaces
need only distinct names). Testbeds compute single-path static routes (Emulab's staticroutes keeps one
link per node pair), so the files say that nestlab installs the multipath routes itself at run time
(harness/backends/ssh/multipath.py).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rundir.errors import UserError

if TYPE_CHECKING:   # imported where used: `nestlab` imports this module for its options alone
    from harness.topology import Topology

FORMATS = ("emulab", "cloudlab", "ssh")
EMULAB_OS = "UBUNTU22-64-STD"
CLOUDLAB_IMAGE = "urn:publicid:IDN+emulab.net+image+emulab-ops//UBUNTU22-64-STD"
UNSHAPED_BW = 1e9          # a link the topology does not limit: a plain gigabit link on the testbed
NODE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,31}$")   # what Emulab and CloudLab accept as node names
IMAGE_OR_TYPE = re.compile(r"^[A-Za-z0-9_.:+/-]+$")     # --os and --hardware: disk image names/URNs, node types
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
# Emulab's delay nodes (dummynet) queue at most 100 packets ("slots"; or 1 MB in bytes): tbsetup's
# FreeBSD delaysetup calls a larger slot count bogus and leaves the pipe's default.
EMULAB_MAX_QUEUE = 100
# Rates at which Emulab allocates no delay node when the link has no delay and no loss either.
EMULAB_NATIVE_RATES = (100e6, 1e9)
# The queue of a delay node nobody configured: dummynet's default, 50 slots (ipfw(8)).
DELAY_NODE_QUEUE = 50

Warn = Callable[[str], None]


def _stderr_warning(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _one_line(text: str) -> str:
    """Free text (a description, a name) for a comment or docstring: control characters, newlines
    among them, become spaces, so it cannot end the comment and start code."""
    return CONTROL.sub(" ", text).strip()


def _tcl_comment(text: str) -> str:
    """A line of a Tcl comment: one line, and no backslash at its end (Tcl would continue the
    comment onto the next line, swallowing a command)."""
    return re.sub(r"[\s\\]+$", "", _one_line(text))


def _docstring(text: str) -> str:
    """Free text inside a triple-quoted Python string: one line, backslashes and quotes escaped."""
    return _one_line(text).replace("\\", "\\\\").replace('"', '\\"')


def _check_option(what: str, value: str | None) -> None:
    if value and not IMAGE_OR_TYPE.match(value):
        raise UserError(f"{what} {value!r}: only letters, digits and _ . : + / - are allowed")


def _check_names(topo: Topology) -> None:
    for name in topo.spec.nodes:
        if not NODE_NAME.match(name):
            raise UserError(f"{topo.source}: node {name!r} cannot be a testbed node name (letters, digits and "
                            "'-', starting with a letter, at most 32 characters)")


def _rate(bps: float, units=(("Mb", 1e6), ("kb", 1e3))) -> str:
    for unit, scale in units:
        if bps >= scale:
            return f"{bps / scale:g}{unit}"
    return f"{bps:g}b"


def _header(topo: Topology, fmt: str, comment: str, kind: str, quote) -> list[str]:
    """The file's opening comment; `quote` makes the topology's own text (name, description, file
    name) safe where it goes."""
    src = quote(topo.source.name if topo.source else topo.name)
    what = f'{kind} for the nestlab topology "{quote(topo.name)}"'
    desc = quote(topo.spec.description)
    lines = [f"{what}" + (f": {desc}" if desc else "") + ".",
             f"Generated by `nestlab export --format {fmt}` from {src}.", "",
             "Node names are the topology's, so the SSH topology maps them one to one. Each link gets the",
             "addresses nestlab derives (link k: 10.0.<k+1>.0/24, a = .1, b = .2): the SSH backend finds",
             "each link's interface on a node by its address. Routers forward with static routes."]
    return [f"{comment}{line}".rstrip() for line in lines + _bundle_note(topo)]


def _bundles(topo: Topology) -> list[tuple[str, str, list[int]]]:
    """(a, b, link indices by path) of every bundle of parallel links."""
    out: dict[tuple[str, str], list[int]] = {}
    for k, lk in enumerate(topo.spec.links):
        if lk.path is not None:
            out.setdefault((lk.a, lk.b), []).append(k)
    return [(a, b, ks) for (a, b), ks in out.items()]


def _bundle_note(topo: Topology) -> list[str]:
    """What the header says about bundles of parallel links (ECMP): nothing for a topology without."""
    lines = []
    for a, b, ks in _bundles(topo):
        last = f"{'and' if len(ks) == 2 else 'to'} {len(ks) - 1}"
        paths = f"links {', '.join(map(str, ks[:-1]))} and {ks[-1]} here, paths 0 {last}"
        lines += ["", f"{a}-{b} is a bundle of {len(ks)} parallel links (ECMP): {paths}, each",
                  "shaped like the topology's link. The testbed's static routing computes one route per",
                  f"destination, over one of them; at run time nestlab replaces those routes on {a} and {b}",
                  "with multipath routes hashed on the 5-tuple, and restores them at the end",
                  "(docs/ssh-backend.md, ECMP)."]
    from harness.fabric import is_fabric  # here: `nestlab` imports this module for its options alone

    if is_fabric(topo):
        lines += ["", "A fabric: routers have equal-cost paths through different routers (ECMP). The testbed's",
                  "static routing keeps one of them per destination; at run time nestlab replaces those routes",
                  "with multipath routes hashed on the 5-tuple, gives each router a hash seed of its own (Linux",
                  "6.11 or later: choose a disk image with such a kernel) and restores both at the end",
                  "(docs/ssh-backend.md, ECMP; docs/fabric.md)."]
    return lines


def _path_comment(topo: Topology, k: int) -> str | None:
    """A comment line naming link k's place in its bundle (None: not part of one)."""
    link = topo.spec.links[k]
    if link.path is None:
        return None
    n = sum(1 for lk in topo.spec.links if lk.path is not None and {lk.a, lk.b} == {link.a, link.b})
    return f"link{k}: path {link.path} of the {n} parallel links {link.a}-{link.b} (ECMP)"


def _ends(topo: Topology, k: int):
    """(node, its index among the node's links, address) for both ends of link k."""
    link = topo.spec.links[k]
    out = []
    for node in (link.a, link.b):
        j, intf = next((j, i) for j, i in enumerate(topo.interfaces[node]) if i.link == k)
        out.append((node, j, intf.address))
    return out


def _link_name(topo: Topology, k: int) -> str:
    link = topo.spec.links[k]
    return f"link{k} ({link.a}-{link.b})"


def emulab_ns(topo: Topology, os_image: str = EMULAB_OS, hardware: str | None = None,
              warn: Warn = _stderr_warning) -> str:
    _check_names(topo)
    _check_option("--os", os_image)
    _check_option("--hardware", hardware)
    unshaped: list[tuple[str, str, int]] = []
    for k, link in enumerate(topo.spec.links):
        if (link.queue_packets or 0) > EMULAB_MAX_QUEUE:
            raise UserError(f"{topo.source}: {_link_name(topo, k)}: queue {link.queue_packets} cannot be built on "
                            f"Emulab: its delay nodes queue at most {EMULAB_MAX_QUEUE} packets")

    def var(name: str) -> str:
        return f"${name}" if name.isalnum() else f"${{{name}}}"

    # Tcl words: node names match NODE_NAME, --os and --hardware IMAGE_OR_TYPE (nothing Tcl would
    # substitute in "..."); free text goes only into comments.
    out = _header(topo, "emulab", "# ", "Emulab NS file", _tcl_comment)
    out = [_tcl_comment(line) or "#" for line in out]
    out += ["", "set ns [new Simulator]", "source tb_compat.tcl", "", f'set os "{os_image}"']
    if hardware:
        out.append(f'set hw "{hardware}"')
    out += ["", "# Nodes"]
    for name, node in topo.spec.nodes.items():
        desc = _tcl_comment(node.description)
        out.append(f"set {name} [$ns node]" + (f"    ;# {desc}" if desc else ""))
        out.append(f"tb-set-node-os {var(name)} $os")
        if hardware:
            out.append(f"tb-set-hardware {var(name)} $hw")
    out += ["", f"# Links (bandwidth as in the topology; {_rate(UNSHAPED_BW)} where it sets none)"]
    for k, link in enumerate(topo.spec.links):
        bw = _rate(link.bw or UNSHAPED_BW)
        delay = f"{(link.delay or 0) * 1000:g}ms"
        if _path_comment(topo, k):
            out += [f"# {_path_comment(topo, k)}; `$ns link` below names the last link made",
                    f"# between {link.a} and {link.b}, this one, so its queue lines follow it directly"]
        out.append(f"set link{k} [$ns duplex-link {var(link.a)} {var(link.b)} {bw} {delay} DropTail]")
        for node, _, addr in _ends(topo, k):
            out.append(f"tb-set-ip-link {var(node)} $link{k} {addr}")
        if link.loss:
            out.append(f"tb-set-link-loss $link{k} {link.loss / 100:g}")
        if link.queue_packets:
            out += _emulab_queues(topo, k, var, unshaped)
    _warn_unshaped(unshaped, warn)
    out.append("")
    if topo.multipath:
        out += ["# Static routing: one route per destination, over one link of each bundle; nestlab installs",
                "# the multipath routes on the routers at run time"]
    out += ["$ns rtproto Static", "$ns run", ""]
    return "\n".join(out)


def _warn_unshaped(unshaped: list[tuple[str, str, int]], warn: Warn) -> None:
    """One warning for the links Emulab may build without a delay node (a fat-tree has 32)."""
    if not unshaped:
        return
    names = [name for name, _, _ in unshaped]
    if len(names) > 3:
        names = [*names[:2], f"{len(names) - 2} more"]
    shown = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    rates, queues = sorted({r for _, r, _ in unshaped}), sorted({q for _, _, q in unshaped})
    one = len(unshaped) == 1
    warn(f"{shown}: Emulab may build a {' or '.join(rates)} link without delay or loss with no delay node, and "
         f"then {'its queue' if one else 'their queues'} of {' or '.join(map(str, queues))} packets "
         f"{'does' if one else 'do'} not apply (the CloudLab profile forces shaping)")


def _emulab_queues(topo: Topology, k: int, var, unshaped: list[tuple[str, str, int]]) -> list[str]:
    """Both directions' queue objects of bandwidth-limited link k, in packets; a link Emulab may build
    without a delay node is added to `unshaped`."""
    link = topo.spec.links[k]
    q = link.queue_packets
    out = [f"# link{k}: {q} packets queued in each direction (the topology's queue, as on Mininet)"]
    for name, src, dst in ((f"q{k}ab", link.a, link.b), (f"q{k}ba", link.b, link.a)):
        out += [f"set {name} [[$ns link {var(src)} {var(dst)}] queue]",
                f"${name} set queue-in-bytes_ 0",
                f"${name} set limit_ {q}"]
    if link.bw in EMULAB_NATIVE_RATES and not link.delay and not link.loss:
        rate = _rate(link.bw)
        out += [f"# Emulab builds a {rate} link without delay or loss with no delay node where the nodes' ports",
                f"# run at {rate} (Emulab FAQ kb97, \"What are the limits for link shaping?\"): the queue above",
                "# then does not apply. No NS command documented for users forces a delay node."]
        unshaped.append((_link_name(topo, k), rate, q))
    return out


def cloudlab_profile(topo: Topology, image: str = CLOUDLAB_IMAGE, hardware: str | None = None,
                     vm: bool = False, warn: Warn = _stderr_warning) -> str:
    _check_names(topo)
    _check_option("--os", image)
    _check_option("--hardware", hardware)
    doc = _header(topo, "cloudlab", "", "CloudLab profile", _docstring)
    out = ['"""' + doc[0], *doc[1:],
           "", "Interfaces are named eth<i>, i being the link's place among the node's links (the order of",
           "`interfaces` in an SSH topology); the names Linux gives them are the testbed's.", '"""', "",
           "import geni.portal as portal",
           "import geni.rspec.emulab  # noqa: F401 - registers request.setRoutingStyle, Link.setForceShaping",
           "import geni.rspec.igext  # noqa: F401 - registers request.XenVM",
           "import geni.rspec.pg as pg", "",
           "pc = portal.Context()",
           f'pc.defineParameter("image", "Disk image", portal.ParameterType.IMAGE, {json.dumps(image)})',
           f'pc.defineParameter("hwtype", "Hardware type (empty: any)", portal.ParameterType.NODETYPE, '
           f'{json.dumps(hardware or "")})',
           f'pc.defineParameter("vm", "Xen VMs instead of raw PCs", portal.ParameterType.BOOLEAN, {bool(vm)})',
           "params = pc.bindParameters()", "request = pc.makeRequestRSpec()", "nodes = {}", "", "",
           "def node(name):",
           "    n = request.XenVM(name) if params.vm else request.RawPC(name)",
           "    n.disk_image = params.image",
           "    if params.hwtype:",
           "        n.hardware_type = params.hwtype",
           "    nodes[name] = n", "", "",
           "def link(name, ends, kbps=None, latency_ms=None, loss=None, queue=None):",
           '    """ends: (node, interface, address) for both ends; bandwidth in kbit/s, loss a fraction.',
           "",
           "    queue: the packets nestlab expects queued at each end of a bandwidth-limited link. geni-lib",
           "    cannot ask for a queue size; the link is force-shaped, so that a delay node shapes it even at",
           f'    a native rate, and its DropTail queue holds {DELAY_NODE_QUEUE} packets."""',
           "    lk = request.Link(name)",
           "    for n, ifname, address in ends:",
           '        lk.addInterface(nodes[n].addInterface(ifname, pg.IPv4Address(address, "255.255.255.0")))',
           "    if kbps:", "        lk.bandwidth = kbps",
           "    if latency_ms:", "        lk.latency = latency_ms",
           "    if loss:", "        lk.plr = loss",
           "    if queue:", "        lk.setForceShaping()", "", ""]
    out += [f"node({json.dumps(name)})" for name in topo.spec.nodes]
    out.append("")
    for k, lk in enumerate(topo.spec.links):
        ends = ", ".join(f"({json.dumps(n)}, {json.dumps(f'eth{j}')}, {json.dumps(addr)})"
                         for n, j, addr in _ends(topo, k))
        extra = [f"kbps={int(round((lk.bw or UNSHAPED_BW) / 1e3))}"]
        if lk.delay:
            extra.append(f"latency_ms={lk.delay * 1000:g}")
        if lk.loss:
            extra.append(f"loss={lk.loss / 100:g}")
        q = lk.queue_packets
        if _path_comment(topo, k):
            out.append(f"# {_path_comment(topo, k)}: a link of its own, with interfaces of its own")
        if q:
            extra.append(f"queue={q}")
            out.append(f"# link{k}: nestlab expects {q} packets queued at each end; geni-lib cannot set a queue size "
                       f"(the delay node queues {DELAY_NODE_QUEUE}" + (")." if q == DELAY_NODE_QUEUE else
                                                                     ", not what the topology asks for)."))
            if q != DELAY_NODE_QUEUE:
                warn(f"{_link_name(topo, k)}: queue {q} cannot be expressed in a CloudLab profile (geni-lib has no "
                     f"queue size; the delay node queues {DELAY_NODE_QUEUE} packets)")
        out.append(f'link("link{k}", [{ends}], {", ".join(extra)})')
    out.append("")
    if topo.multipath:
        out += ["# Static routing: one route per destination, over one link of each bundle; nestlab installs",
                "# the multipath routes on the routers at run time"]
    out += ['request.setRoutingStyle("static")', "pc.printRequestRSpec(request)", ""]
    return "\n".join(out)


def ssh_topology(topo: Topology, domain: str, user: str | None = None, key: str | None = None) -> str:
    """The topology placed on testbed nodes named <node>.<domain> (Emulab: EXP.PROJ.emulab.net)."""
    _check_names(topo)
    if not re.fullmatch(r"[A-Za-z0-9.-]+", domain or ""):
        raise UserError("--format ssh needs --domain, e.g. myexp.myproj.emulab.net (nodes are <node>.<domain>)")
    spec = topo.spec.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    spec.pop("ssh", None)
    spec["name"] = f"{topo.name}-ssh"
    if key and not key.startswith("~"):
        # The SSH backend takes a relative key from the topology file's directory; the key was named
        # relative to where this command ran.
        key = os.path.abspath(key)
    defaults = {k: v for k, v in (("user", user), ("key", key)) if v}
    nodes = {}
    for name, node in spec["nodes"].items():
        node.pop("ssh", None)
        nodes[name] = {**node, "ssh": {"host": f"{name}.{domain}"}}
    links = []
    for lk in topo.spec.links:   # units as a topology file writes them
        links.append({"a": lk.a, "b": lk.b, **({"bw": f"{lk.bw / 1e6:g}Mbit"} if lk.bw else {}),
                      **({"delay": f"{lk.delay * 1000:g}ms"} if lk.delay else {}),
                      **({"loss": lk.loss} if lk.loss else {}),
                      **({"queue": lk.queue} if lk.queue is not None else {}),
                      **({"path": lk.path} if lk.path is not None else {})})
    body = {"name": spec["name"], "description": spec.get("description", ""),
            **({"ssh": defaults} if defaults else {}), "nodes": nodes, "links": links}
    head = (f"# {_one_line(topo.name)} placed on testbed nodes (generated by `nestlab export --format ssh`).\n"
            "# Data interfaces are found by the addresses nestlab derives (the exported NS file and profile\n"
            "# assign them); list them per node as `interfaces: [...]` if the testbed assigned others.\n"
            "# Host keys are checked against ~/.ssh/known_hosts (or ssh: {known_hosts: FILE}).\n"
            + "".join(f"# {line}\n" for line in _bundle_note(topo)[1:])
            + ("# Each of those links keeps its `path`: that is how nestlab knows them as the bundle.\n"
               if topo.multipath else ""))
    import yaml

    return head + yaml.safe_dump(body, sort_keys=False, default_flow_style=None, width=110)


def export(topology: Topology, fmt: str, os_image: str | None = None, hardware: str | None = None,
           vm: bool = False, domain: str | None = None, user: str | None = None, key: str | None = None) -> str:
    if fmt == "emulab":
        return emulab_ns(topology, os_image or EMULAB_OS, hardware)
    if fmt == "cloudlab":
        return cloudlab_profile(topology, os_image or CLOUDLAB_IMAGE, hardware, vm)
    return ssh_topology(topology, domain or "", user, key)


def resolve(name: str) -> Path:
    p = Path(name)
    if p.is_file():
        return p
    candidate = Path("topologies") / f"{name}.yaml"
    if candidate.is_file():
        return candidate
    raise UserError(f"no topology {name!r} (neither a file nor {candidate})")
