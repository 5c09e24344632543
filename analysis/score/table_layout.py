"""The accuracy table's layout, named once (thesis Table 3.3): its sections (directions), its rows
(module types), its counts and rates, and which rows a module counts in.

  <app kind>       applications of the workloads of that kind (Table 3.3: iperf, wget)
  socket           every socket; s:<app kind>: the sockets of that kind's workloads
  TCP, ip+eth      TCP connections; the interface module
  all modules      every module (applications of other programs included)

A study kind (analysis.studies) shows the rows of its own Layout: the workload kinds with rows of
their own are its `apps`. The counts are made once for TABLE_3_3's rows (the seeds' table, a
superset of every study's), so that one evaluation serves every view.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class Layout:
    """The rows of an accuracy table: an application and a socket row for each workload kind in `apps`."""

    apps: tuple[str, ...] = ()

    @property
    def rows(self) -> tuple[str, ...]:
        return (*self.apps, "socket", *(f"s:{a}" for a in self.apps), "TCP", "ip+eth", "all modules")

    def module_rows(self, kind: str, wl_kind: str | None) -> tuple[str, ...]:
        """The rows a module of this kind (of a workload of kind wl_kind) counts in."""
        if kind == "app":
            return ((wl_kind,) if wl_kind in self.apps else ()) + ("all modules",)
        if kind == "socket":
            return ("socket",) + ((f"s:{wl_kind}",) if wl_kind in self.apps else ()) + ("all modules",)
        if kind == "tcp":
            return ("TCP", "all modules")
        if kind in ("ipeth", "ip", "eth"):
            return ("ip+eth", "all modules")
        return ("all modules",)


# The seeds' table (thesis Table 3.3: its workloads were iperf and wget), which the counts are made for.
TABLE_3_3 = Layout(apps=("iperf", "wget"))
ROWS = TABLE_3_3.rows
module_rows = TABLE_3_3.module_rows
