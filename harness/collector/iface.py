"""ip+eth modules from interface statistics.

Counters come from /proc/net/dev of the collector's namespace (the same 64-bit link stats that
rtnetlink reports, ≈ 0.1 ms to read against ≈ 0.5 ms for a pyroute2 link dump every snapshot);
pyroute2 maps local addresses to interfaces (the tcp -> ipeth edge), refreshed every few seconds.

Per interface (key 'ipeth:<ifname>', loopback excluded):
  in:  total_msgs = rx_packets, bytes = rx_bytes, errors = rx_errors + rx_dropped
  out: total_msgs = tx_packets, bytes = tx_bytes, errors = tx_errors + tx_dropped
The seeds combine IP and Ethernet into one module because a host has one address per interface.
"""

from __future__ import annotations

from pyroute2 import IPRoute

from harness.collector.source import Observation


class InterfaceSource:
    name = "ipeth"

    def __init__(self, ignore: set[str] = frozenset(), proc_net: str = "/proc/net"):
        self.ipr = IPRoute()
        # Whose counters: /proc/net/dev is this process's namespace; /proc/PID/net/dev another host's
        # (harness.collector.hosts makes this source inside that host's namespace).
        self.dev = f"{proc_net}/dev"
        self.ignore = set(ignore) | {"lo"}     # interfaces that are not part of the experiment
        self.addresses: dict[str, str] = {}   # local address -> 'ipeth:<ifname>'
        self.ignored_addresses: set[str] = set()
        self.refresh_addresses()

    def refresh_addresses(self) -> None:
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in self.ipr.get_links()}
        addrs = [(a.get_attr("IFA_ADDRESS"), names.get(a["index"])) for a in self.ipr.get_addr()]
        self.addresses = {addr: f"ipeth:{name}" for addr, name in addrs if name not in self.ignore}
        self.ignored_addresses = {addr for addr, name in addrs if name in self.ignore and name != "lo"}

    def ifkey_of(self, address: str) -> str | None:
        return self.addresses.get(address)

    def ignored(self, address: str) -> bool:
        """A connection bound to an ignored interface's address (e.g. the runner's SSH session)."""
        return address in self.ignored_addresses

    def poll(self) -> list[Observation]:
        obs = []
        with open(self.dev) as f:
            lines = f.readlines()[2:]
        for line in lines:
            name, _, rest = line.partition(":")
            name = name.strip()
            if name in self.ignore:
                continue
            v = rest.split()
            # rx: bytes packets errs drop fifo frame compressed multicast | tx: bytes packets errs drop ...
            key = f"ipeth:{name}"
            obs.append(Observation(
                key, "ipeth", f"ip+eth {name}",
                {"in": {"total_msgs": int(v[1]), "bytes": int(v[0]), "errors": int(v[2]) + int(v[3])},
                 "out": {"total_msgs": int(v[9]), "bytes": int(v[8]), "errors": int(v[10]) + int(v[11])}},
                {"ifname": name, "addresses": sorted(a for a, k in self.addresses.items() if k == key)}))
        return obs

    def close(self) -> None:
        self.ipr.close()
