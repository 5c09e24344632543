"""ip+eth modules from interface statistics (rtnetlink link stats64, via pyroute2).

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

    def __init__(self):
        self.ipr = IPRoute()
        self.addresses: dict[str, str] = {}   # local address -> 'ipeth:<ifname>'
        self.refresh_addresses()

    def refresh_addresses(self) -> None:
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in self.ipr.get_links()}
        self.addresses = {a.get_attr("IFA_ADDRESS"): f"ipeth:{names.get(a['index'])}"
                          for a in self.ipr.get_addr() if names.get(a["index"]) != "lo"}

    def ifkey_of(self, address: str) -> str | None:
        return self.addresses.get(address)

    def poll(self) -> list[Observation]:
        obs = []
        for link in self.ipr.get_links():
            name = link.get_attr("IFLA_IFNAME")
            if name == "lo":
                continue
            st = link.get_attr("IFLA_STATS64")
            obs.append(Observation(
                key=f"ipeth:{name}", kind="ipeth", name=f"ip+eth {name}",
                counters={"in": {"total_msgs": st["rx_packets"], "bytes": st["rx_bytes"],
                                 "errors": st["rx_errors"] + st["rx_dropped"]},
                          "out": {"total_msgs": st["tx_packets"], "bytes": st["tx_bytes"],
                                  "errors": st["tx_errors"] + st["tx_dropped"]}},
                attrs={"ifname": name, "index": link["index"],
                       "addresses": sorted(a for a, k in self.addresses.items() if k == f"ipeth:{name}")}))
        return obs

    def close(self) -> None:
        self.ipr.close()
