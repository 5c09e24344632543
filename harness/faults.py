"""Fault injection (the nemesis): iptables DROP rules on a router, in a chain the harness owns.

Every rule lives in the chain NESTLAB, hooked first into FORWARD, and carries a comment
'nestlab:<run-id>:f<fault-id>'. Only that chain is ever flushed. Both directions are dropped.
Rules go in and out with `iptables-restore --noflush` (atomically, both directions at once); the
recorded window starts when a listing shows the rules in place and ends when a listing shows them
gone, on the monitored host's monotonic clock.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from harness.backends.base import Node

CHAIN = "NESTLAB"


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


def ip_drop_rule(node: str, tag: str, address: str) -> Rule:
    c = f'-m comment --comment "{tag}" -j DROP'
    return Rule(node, tag, [f"-s {address}/32 {c}", f"-d {address}/32 {c}"])


def tcp_drop_rule(node: str, tag: str, conn: dict) -> Rule:
    c = f'-m comment --comment "{tag}" -j DROP'
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


def target_json(**fields) -> str:
    return json.dumps(fields, sort_keys=True)
