"""The iptables fault kinds' input (harness.faults.iptables): a rule takes only addresses and ports,
and tcp_drop checks the connection the monitored host reports before a rule is made. A refusal is one
line naming the node and the value."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from rundir.errors import UserError
from tests.support.env import one_line

RULE_VALUES = [
    ("source with iptables words", {"src": "10.0.1.1/0 -j ACCEPT"}, "10.0.1.1/0 -j ACCEPT"),
    ("source with a newline", {"src": "10.0.1.1\n-A FORWARD -j ACCEPT"}, "10.0.1.1\n-A FORWARD -j ACCEPT"),
    ("destination network", {"dst": "0.0.0.0/0"}, "0.0.0.0/0"),
    ("source as a number", {"src": 167772417}, 167772417),
    ("port 0", {"sport": 0}, 0),
    ("port 65536", {"dport": 65536}, 65536),
    ("negative port", {"sport": -1}, -1),
    ("port as text", {"dport": "80 -j ACCEPT"}, "80 -j ACCEPT"),
    ("port as a boolean", {"sport": True}, True),
    ("port as a float", {"sport": 80.5}, 80.5),
]


CONN = {"inode": 7, "src": "10.0.1.1", "sport": 40000, "dst": "10.0.2.2", "dport": 80}


@pytest.mark.parametrize("what,change,value", RULE_VALUES, ids=[r[0] for r in RULE_VALUES])
def test_iptables_rules_take_only_addresses_and_ports(what, change, value):
    from harness.faults.iptables import ip_drop_rule, tcp_drop_rule

    # Well-formed rules are what they always were.
    assert tcp_drop_rule("x1", "t", CONN).specs == [
        '-p tcp -s 10.0.1.1/32 --sport 40000 -d 10.0.2.2/32 --dport 80 -m comment --comment "t" -j DROP',
        '-p tcp -s 10.0.2.2/32 --sport 80 -d 10.0.1.1/32 --dport 40000 -m comment --comment "t" -j DROP']
    assert ip_drop_rule("x1", "t", "10.0.1.1").specs == ['-s 10.0.1.1/32 -m comment --comment "t" -j DROP',
                                                         '-d 10.0.1.1/32 -m comment --comment "t" -j DROP']
    with pytest.raises(UserError) as e:
        tcp_drop_rule("x1", "nestlab:r:f1", {**CONN, **change})
    msg = one_line(str(e.value))
    assert "x1" in msg and repr(value) in msg, msg
    if "src" in change or "dst" in change:
        address = change.get("src", change.get("dst"))
        with pytest.raises(UserError) as e:
            ip_drop_rule("x1", "nestlab:r:f1", address)
        assert "x1" in one_line(str(e.value)) and repr(address) in str(e.value)


@pytest.mark.parametrize("conn", [
    {**CONN, "src": "10.0.1.1/0 -j ACCEPT"},
    {**CONN, "sport": 70000},
    {**CONN, "module_key": "forged"},      # would clash with the target's own fields
    ["10.0.1.1", 40000],
], ids=["bad source", "bad port", "extra key", "not a mapping"])
def test_a_connection_the_monitored_host_reports_is_checked_before_a_tcp_drop_uses_it(conn):
    """tcp_drop picks one of the connections the node agent reports on the workload's host: a
    malformed one is refused with one line naming that host, before any rule is made."""
    from harness.faults.tcp_drop import TcpDrop

    proc = SimpleNamespace(pid=4242)
    w = SimpleNamespace(host="site1n1", server="site2n1")
    backend = SimpleNamespace(address=lambda n: "10.0.2.2", tcp_connections=lambda host, pid: [conn])
    env = SimpleNamespace(shared={}, spec=SimpleNamespace(workloads=[w]), backend=backend, rng=random.Random(1),
                          workloads=SimpleNamespace(live=lambda i: [(SimpleNamespace(index=0), proc)]))
    target = SimpleNamespace(workload=0, instance=None)
    fault = SimpleNamespace(target=target, at="x1")
    with pytest.raises(UserError) as e:
        TcpDrop(env)._target(fault)
    msg = one_line(str(e.value))
    assert msg.startswith("site1n1: "), msg
