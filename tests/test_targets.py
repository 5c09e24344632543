"""Which module a fault targets (shared by the runner and the analysis)."""

from __future__ import annotations

from rundir.targets import choose_target, fault_target_key


def test_fault_target_keys():
    mon, mif = "site1n1", "site1n1-eth0"
    assert fault_target_key("tcp_drop", {"inode": 42}, mon, mif) == "tcp:42"
    assert fault_target_key("app_pause", {"pid": 7}, mon, mif) == "app:7"
    assert fault_target_key("ip_drop", {"host": mon}, mon, mif) == "ipeth:site1n1-eth0"
    assert fault_target_key("ip_drop", {}, mon, mif) == "ipeth:site1n1-eth0"  # runs that did not say whose
    # An ip_drop of another host does not target the monitored interface (it is not observed at all).
    assert fault_target_key("ip_drop", {"host": "site1n2"}, mon, mif) is None
    assert fault_target_key("ip_drop", {"host": mon}, mon, None) is None


def test_choose_target_takes_the_identity_alive_at_the_fault():
    modules = [(1, "app:7", 0.0), (2, "app:70", 1.0), (3, "app:7@123", 5.0), (4, "app:7#2", 9.0), (5, "tcp:7", 0.0)]
    assert choose_target(modules, "app:7", 2.0) == 1      # not app:70, not tcp:7
    assert choose_target(modules, "app:7", 6.0) == 3      # the pid reused by a later process
    assert choose_target(modules, "app:7", 9.5) == 4
    assert choose_target(modules, "app:7", None) == 4
    assert choose_target(modules, "app:9", 1.0) is None
    assert choose_target([(8, "tcp:5", 3.0)], "tcp:5", 1.0) == 8  # born after the start: still the one
