"""The accuracy table's layout, named once (thesis Table 3.3): its sections (directions), its rows
(module types), its counts and rates, and which rows a module counts in.

  iperf, wget      applications of iperf / wget workloads
  socket           every socket; s:iperf, s:wget: the sockets of iperf / wget workloads
  TCP, ip+eth      TCP connections; the interface module
  all modules      every module (applications of other programs included)
"""

from __future__ import annotations

ROWS = ("iperf", "wget", "socket", "s:iperf", "s:wget", "TCP", "ip+eth", "all modules")
SECTIONS = ("Inbound", "Outbound", "Total")
SECTION_DIR = {"Inbound": ("in",), "Outbound": ("out",), "Total": ("in", "out")}
COUNTS = ("Total", "AP", "AN", "TP", "TN", "FP", "FN")
RATES = ("TPR", "FPR", "PPV", "TNR", "FNR", "NPV")
# rate -> (numerator, denominator terms)
RATE_DEF = {
    "TPR": ("TP", ("TP", "FN")),
    "FPR": ("FP", ("FP", "TN")),
    "PPV": ("TP", ("TP", "FP")),
    "TNR": ("TN", ("TN", "FP")),
    "FNR": ("FN", ("TP", "FN")),
    "NPV": ("TN", ("TN", "FN")),
}


def module_rows(kind: str, wl_kind: str | None) -> tuple[str, ...]:
    """The rows of the accuracy table (thesis Table 3.3) a module counts in."""
    if kind == "app":
        return ((wl_kind,) if wl_kind in ("iperf", "wget") else ()) + ("all modules",)
    if kind == "socket":
        return ("socket",) + ((f"s:{wl_kind}",) if wl_kind in ("iperf", "wget") else ()) + ("all modules",)
    if kind == "tcp":
        return ("TCP", "all modules")
    if kind in ("ipeth", "ip", "eth"):
        return ("ip+eth", "all modules")
    return ("all modules",)
