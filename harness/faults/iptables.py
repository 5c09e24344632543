"""What ip_drop, tcp_drop, loss and path_blackhole (each a module of its own) share: iptables DROP
rules on a router, in a chain the harness owns.

ip_drop drops all IP traffic of a host (default: the monitored one); tcp_drop one live connection
of a workload, chosen with the run's seed; loss a share of either (`-m statistic`, per packet: the
link model turns segmentation offloads off); path_blackhole every packet crossing one link of the
router's bundle of parallel links (ECMP), whose targets are the monitored host's connections that
the routers' own route lookups send over it. Every rule lives in the chain NESTLAB, hooked first into
FORWARD, and carries a comment 'nestlab:<run-id>:f<fault-id>'. Only that chain is ever flushed. Both
directions are dropped.
Rules go in and out with `iptables-restore --noflush` (atomically, both directions at once); the
recorded window starts when a listing shows the rules in place and ends when a listing shows them
gone, on the monitored host's monotonic clock.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.faults.base import FaultEnv, NoTarget, Part, target_json
from harness.faults.spec import monitor_host, monitored_hosts
from harness.faults.tier_hosts import tier_pids
from rundir.db import monotonic
from rundir.errors import UserError

if TYPE_CHECKING:
    from harness.backends.base import Node
    from harness.faults.spec import FaultSpec, FaultTarget
    from harness.window import Window

CHAIN = "NESTLAB"
TARGET_WAIT_S = 2.0        # how long a tcp_drop waits for its workload to have a connection


def chain_teardown_steps() -> tuple[list[str], list[list[str]]]:
    """How the chain is removed from a router: (unhook, run again while it succeeds: the chain may be
    hooked into FORWARD more than once; then the other steps, each run once, failures ignored)."""
    return (["iptables", "-w", "-D", "FORWARD", "-j", CHAIN],
            [["iptables", "-w", "-F", CHAIN], ["iptables", "-w", "-X", CHAIN]])


def chain_teardown_argv() -> list[str]:
    """The same steps as one command (sh -c, every word quoted), for the undo entry a testbed run's
    ledger keeps, so that `nestlab cleanup` removes the chain as Firewall.teardown does."""
    unhook, rest = chain_teardown_steps()
    script = (f"while {shlex.join(unhook)} 2>/dev/null; do :; done; "
              + "".join(f"{shlex.join(step)} 2>/dev/null; " for step in rest) + "true")
    return ["sh", "-c", script]


@dataclass
class Rule:
    """One fault's pair of DROP rules (both directions) and where they live."""

    node: str
    tag: str
    specs: list[str]          # iptables rule specs without the -A/-D CHAIN prefix

    def describe(self) -> str:
        return " ; ".join(f"iptables -A {CHAIN} {s}" for s in self.specs)


class UnsafeValue(UserError):
    """A value that would go into iptables input is not what it must be (an IPv4 address, a port):
    one line naming the node and the value."""


def check_address(node: str, value, what: str = "address") -> str:
    """An IPv4 address (iptables here is IPv4 only), as ipaddress writes it; anything else (a network,
    a name, words that iptables-restore would read as options or as another rule) is refused."""
    if isinstance(value, str):
        try:
            return str(ipaddress.IPv4Address(value))
        except ValueError:
            pass
    raise UnsafeValue(f"{node}: refusing {what} {value!r} for an iptables rule: not an IPv4 address")


def check_port(node: str, value, what: str = "port") -> int:
    """A TCP port: an int from 1 to 65535 (not a bool, a float or text)."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535:
        return value
    raise UnsafeValue(f"{node}: refusing {what} {value!r} for an iptables rule: not a port (1-65535)")


def check_connection(node: str, conn) -> dict:
    """A connection as the node agent reports it ({'inode', 'src', 'sport', 'dst', 'dport'}), each
    field checked; returns a new dict of exactly those fields."""
    if not isinstance(conn, dict) or not {"src", "sport", "dst", "dport"} <= set(conn) \
            or not set(conn) <= {"inode", "src", "sport", "dst", "dport"}:
        raise UnsafeValue(f"{node}: refusing the reported connection {conn!r}: not "
                          "{inode, src, sport, dst, dport}")
    inode = conn.get("inode")
    if inode is not None and (not isinstance(inode, int) or isinstance(inode, bool)):
        raise UnsafeValue(f"{node}: refusing socket inode {inode!r} of a reported connection: not an int")
    return {"inode": inode, "src": check_address(node, conn["src"], "source address"),
            "sport": check_port(node, conn["sport"], "source port"),
            "dst": check_address(node, conn["dst"], "destination address"),
            "dport": check_port(node, conn["dport"], "destination port")}


def _drop(tag: str, probability: float | None) -> str:
    """The rule's tail: a random share of the packets (loss) or all of them, tagged."""
    share = "" if probability is None else f"-m statistic --mode random --probability {probability:.6f} "
    return f'{share}-m comment --comment "{tag}" -j DROP'


def ip_drop_rule(node: str, tag: str, address: str, probability: float | None = None) -> Rule:
    address = check_address(node, address)
    c = _drop(tag, probability)
    return Rule(node, tag, [f"-s {address}/32 {c}", f"-d {address}/32 {c}"])


def path_rule(node: str, tag: str, interface: str) -> Rule:
    """Every packet forwarded out of or in from one interface of the router (a link of its bundle)."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", interface):
        raise UnsafeValue(f"{node}: refusing interface {interface!r} for an iptables rule")
    c = _drop(tag, None)
    return Rule(node, tag, [f"-o {interface} {c}", f"-i {interface} {c}"])


def tcp_drop_rule(node: str, tag: str, conn: dict, probability: float | None = None) -> Rule:
    conn = check_connection(node, conn)
    c = _drop(tag, probability)
    fwd = f"-p tcp -s {conn['src']}/32 --sport {conn['sport']} -d {conn['dst']}/32 --dport {conn['dport']}"
    rev = f"-p tcp -s {conn['dst']}/32 --sport {conn['dport']} -d {conn['src']}/32 --dport {conn['sport']}"
    return Rule(node, tag, [f"{fwd} {c}", f"{rev} {c}"])


class Firewall:
    """The harness's chain on one router."""

    def __init__(self, node: Node):
        self.node = node
        self.ready = False

    def setup(self) -> None:
        n = self.node
        if n.run(["iptables", "-w", "-S", CHAIN], check=False).returncode == 0:
            n.run(["iptables", "-w", "-F", CHAIN])   # a leftover of ours: empty it, never others'
        else:
            n.run(["iptables", "-w", "-N", CHAIN])
        if n.run(["iptables", "-w", "-C", "FORWARD", "-j", CHAIN], check=False).returncode != 0:
            n.run(["iptables", "-w", "-I", "FORWARD", "1", "-j", CHAIN])
        self.ready = True

    def teardown(self) -> None:
        n = self.node
        unhook, rest = chain_teardown_steps()
        while n.run(unhook, check=False).returncode == 0:
            pass
        for step in rest:
            n.run(step, check=False)
        self.ready = False

    def _restore(self, op: str, rule: Rule) -> None:
        body = "*filter\n" + "".join(f"{op} {CHAIN} {s}\n" for s in rule.specs) + "COMMIT\n"
        self.node.run(["iptables-restore", "-w", "--noflush"], input=body)

    def _count(self, tag: str) -> int:
        listing = self.node.run(["iptables", "-w", "-S", CHAIN]).stdout
        return sum(1 for line in listing.splitlines() if f'"{tag}"' in line or f" {tag} " in line + " ")

    def insert(self, rule: Rule) -> float:
        """Put the rules in; return the monotonic time they were verified in place."""
        self._restore("-A", rule)
        if self._count(rule.tag) != len(rule.specs):
            raise RuntimeError(f"{self.node.name}: rule {rule.tag} not found in place after insertion")
        return self.node.monotonic()

    def delete(self, rule: Rule) -> float:
        """Take the rules out; return the monotonic time they were verified gone."""
        self._restore("-D", rule)
        if self._count(rule.tag) != 0:
            raise RuntimeError(f"{self.node.name}: rule {rule.tag} still present after deletion")
        return self.node.monotonic()


class Chains:
    """The chain on every router the run's drops use, shared by ip_drop and tcp_drop. On testbed
    nodes each chain also has an undo entry in the run's ledger, for `nestlab cleanup`."""

    WHAT = "remove the NESTLAB chain"

    def __init__(self, env: FaultEnv):
        self.env = env
        self.firewalls: dict[str, Firewall] = {}
        self.undo: dict[str, dict] = {}

    @classmethod
    def of(cls, env: FaultEnv) -> Chains:
        return env.shared.setdefault(CHAIN, cls(env))

    def setup(self, routers) -> None:
        for router in sorted(set(routers) - set(self.firewalls)):
            fw = Firewall(self.env.backend.node(router))
            self.firewalls[router] = fw
            if self.env.backend.remote:   # a killed run's chain is removed by `nestlab cleanup`
                argv = chain_teardown_argv()
                self.undo[router] = {"node": router, "argv": argv, "what": self.WHAT}
                self.env.ledger.add_undo(router, argv, self.WHAT)
            fw.setup()

    def teardown(self) -> None:
        """Every chain that may exist goes, including one whose setup was interrupted half way (made
        but not hooked, or hooked but not recorded as ready); its undo entry goes only once it is
        gone. A second call (the other kind's) finds nothing to do."""
        failed = None
        for router, fw in list(self.firewalls.items()):
            try:
                fw.teardown()
            except Exception as e:  # noqa: BLE001 - the other routers' chains still matter
                failed = failed or e
                continue
            del self.firewalls[router]
            if router in self.undo:
                self.env.ledger.drop_undo(self.undo.pop(router))
        if failed is not None:
            raise failed


class _Drop:
    """A fault made of one Rule (both directions) on the router `at`."""

    def __init__(self, env: FaultEnv):
        self.env = env
        self.chains = Chains.of(env)

    def setup(self, faults: Sequence[FaultSpec]) -> None:
        self.chains.setup(f.at for f in faults)

    def teardown(self) -> None:
        self.chains.teardown()

    def describe(self, action: Rule) -> str:
        return action.describe()

    def _target(self, fault: FaultSpec) -> tuple[str, Callable[[str], Rule]]:
        """The row's target JSON and how the rule is made from its tag."""
        raise NotImplementedError

    def inject(self, window: Window, first_id: int) -> list[Part]:
        f = self.env.spec.faults[window.spec_index]
        target, make_rule = self._target(f)
        rule = make_rule(f"nestlab:{self.env.run_id}:f{first_id}")   # the rule carries the run and the fault id
        start = self.env.clocks.from_node(f.at, self.chains.firewalls[f.at].insert(rule))  # router's clock -> monitor's
        return [Part(target, self.describe(rule), start, rule)]

    def heal(self, part: Part) -> float:
        rule = part.action
        return self.env.clocks.from_node(rule.node, self.chains.firewalls[rule.node].delete(rule))


def _share(fault: FaultSpec) -> tuple[float | None, str]:
    """(drop probability, description prefix) of a fault: loss drops `rate` percent, the others all."""
    rate = getattr(fault, "rate", None)
    if rate is None:
        return None, ""
    return rate / 100.0, f"{rate:g}% of "


def connection_key(conn: dict) -> str | None:
    """The collector key of a reported connection's TCP module (None: no inode reported)."""
    return f"tcp:{conn['inode']}" if conn.get("inode") is not None else None


def host_target(env: FaultEnv, fault: FaultSpec) -> tuple[str, Callable[[str], Rule]]:
    """All IP traffic of the fault's host (or the `rate` share of it): the row's target JSON and the rule."""
    host = fault.host or monitor_host(env.spec)
    addr = check_address(host, env.backend.address(host))
    # Only a monitored host's interface is observed: an unmonitored host's ip_drop targets no module.
    key = f"ipeth:{env.backend.interfaces(host)[0].name}" if host in monitored_hosts(env.spec) else None
    probability, share = _share(fault)
    target = target_json(description=f"{share}all IP traffic of {host} ({addr})", host=host, address=addr,
                         module_key=key)
    return target, lambda tag: ip_drop_rule(fault.at, tag, addr, probability)


def connection_target(env: FaultEnv, fault: FaultSpec) -> tuple[str, Callable[[str], Rule]]:
    """One live connection of the target workload, or of the service tier on the target host (or the
    `rate` share of its packets)."""
    host = getattr(fault.target, "host", None)
    if host is not None:
        (conn, pid), workload = pick_tier_connection(env, host), None
        if conn is None:
            raise NoTarget(f"the tier on {host} had no established connection to another host")
        # Observed when the host is monitored (docs/faults.md, "Faults at tier hosts").
        key = connection_key(conn) if host in monitored_hosts(env.spec) else None
        extra = {"host": host}
    else:
        conn, pid = pick_connection(env, fault.target)
        if conn is None:
            raise NoTarget(f"workload {fault.target.workload} had no established connection")
        workload, key, extra = fault.target.workload, connection_key(conn), {}
    probability, share = _share(fault)
    target = target_json(description=f"{share}tcp {conn['src']}:{conn['sport']}>{conn['dst']}:{conn['dport']}",
                         workload=workload, pid=pid, module_key=key, **extra, **conn)
    return target, lambda tag: tcp_drop_rule(fault.at, tag, conn, probability)


def pick_connection(env: FaultEnv, target: FaultTarget) -> tuple[dict | None, int | None]:
    """A live connection of the target workload (instance), chosen with the run's seed."""
    deadline = monotonic() + TARGET_WAIT_S
    while True:
        live = env.workloads.live(target.workload)
        if target.instance is not None:
            live = [(i, p) for i, p in live if i.index == target.instance]
        w = env.spec.workloads[target.workload]
        server = env.backend.address(w.server)
        # What the workload's host reports is checked before anything is chosen from it.
        reported = [(check_connection(w.host, c), p.pid) for _, p in live
                    for c in env.backend.tcp_connections(w.host, p.pid)]
        choices = [(c, pid) for c, pid in reported if c["dst"] == server]
        if choices:
            return env.rng.choice(choices)
        if monotonic() >= deadline:
            return None, None
        time.sleep(0.05)


def pick_tier_connection(env: FaultEnv, host: str, wait_s: float = 2.0) -> tuple[dict | None, int | None]:
    """One established connection of the tier's processes on `host` to another host (the loopback
    left out), chosen with the run's seed among them in inode order: (connection, pid), or (None,
    None) when none came within `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        _, _, pids = tier_pids(env, host)
        seen: dict[int, tuple[dict, int]] = {}
        for pid in pids:
            for c in env.backend.tcp_connections(host, pid):
                c = check_connection(host, c)
                if not c["dst"].startswith("127.") and c["src"] != c["dst"]:
                    seen.setdefault(c["inode"], (c, pid))
        if seen:
            return env.rng.choice([seen[k] for k in sorted(seen)])
        if time.monotonic() >= deadline:
            return None, None
        time.sleep(0.05)
