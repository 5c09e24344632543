"""The fabric's part of a network run (issue 44, docs/fabric.md): NetBouncer's probers on every host
and, at the end, every path the diagnosers need, in `fabric.json` of the run directory.

Before t0 each host is given one probe path to every host of another pod (its 5-tuple: a source port
of its own, harness.fabric_probe), traced hop by hop on the routers; pairs get another source port
until every link of the fabric is covered by a probe path (NetBouncer's path selection, here by the
routers' hashes rather than IP-in-IP). One prober per host sends them round robin. After the run,
every TCP connection the collector saw is traced both ways, so 007 knows which links each
retransmitting connection crossed; the probes' outcomes are gathered beside them.

    fabric.json: {"links": [{"index", "name", "kind"}],
                  "connections": {"SRC:SPORT>DST:DPORT": [link, ...]},     # both directions, as keys
                  "probe_paths": [{"host", "src", "dst", "sport", "dport", "forward", "reverse"}],
                  "probes": [[sent, path, ok], ...], "probe_rate": per host per second}
"""

from __future__ import annotations

from pathlib import Path

from harness.fabric import Flow, is_fabric, link_kind, link_name, pods, trace
from harness.fabric_probe import FIRST_SPORT, PROBE_PORT
from rundir.fabric import tcp_attrs, write_fabric

PROBE_RATE = 40.0        # probes per second from each host (its 12 paths round robin: ~33 each a 10 s window)
MAX_SPORTS = 4           # source ports tried per pair before a link is left uncovered
# Every host's TCP without tail loss probes. A mesh sender writes a frame and goes quiet; at the
# fabric's sub-millisecond RTTs TLP probes the frame's tail after 10 ms, before the receiver's delayed
# ACK (up to 40 ms) comes back: a retransmission of data the receiver has. On the first real runs
# a third of the healthy connections retransmitted so in every 10 s window (the hosts' DSACKs
# received matched), outvoting a 5% lossy link in 007's tally; with TLP off, none did, and a lost
# segment is still retransmitted (fast retransmit, RTO). Set for the run only (backend.set_sysctls):
# in each host's own namespace on Mininet, with the previous value put back at teardown (and by
# `nestlab cleanup`) on testbed nodes.
HOST_SYSCTLS = {"net.ipv4.tcp_early_retrans": "0"}


def conn_key(f: Flow) -> str:
    return f"{f.src}:{f.sport}>{f.dst}:{f.dport}"


class FabricLab:
    def __init__(self, topo, backend, logs: Path, on_process, clocks=None):
        self.topo, self.backend, self.logs, self.on_process = topo, backend, logs, on_process
        self.clocks = clocks   # testbed nodes: the probers' times go onto the reference clock
        self.nodes = {n: backend.node(n) for n in topo.spec.nodes}
        self.interfaces = {n: backend.interfaces(n) for n in topo.spec.nodes}
        self.paths: list[dict] = []
        self.procs: list = []
        self.uncovered: list[str] = []

    @staticmethod
    def wanted(topo) -> bool:
        return is_fabric(topo)

    def plan(self) -> None:
        """Probe paths: every host to every host of another pod, more source ports where a link is
        still uncovered."""
        topo = self.topo
        pod = pods(topo)
        pairs = [(h, d) for h in topo.hosts for d in topo.hosts if pod[h] != pod[d]]
        fabric = {k for k, lk in enumerate(topo.spec.links)}
        covered: set[int] = set()
        chosen: list[dict] = []
        for j in range(MAX_SPORTS):
            flows = [Flow(self.backend.address(h), FIRST_SPORT + j, self.backend.address(d), PROBE_PORT)
                     for h, d in pairs]
            traced = trace(topo, self.nodes, flows + [f.reverse() for f in flows], self.interfaces)
            for (h, _d), f in zip(pairs, flows, strict=True):
                fwd, rev = traced[f], traced[f.reverse()]
                if j == 0 or not set(fwd + rev) <= covered:
                    chosen.append({"host": h, "src": f.src, "dst": f.dst, "sport": f.sport, "dport": f.dport,
                                   "forward": fwd, "reverse": rev})
                    covered |= set(fwd + rev)
            if fabric <= covered:
                break
        self.paths = chosen
        self.uncovered = [link_name(topo, k) for k in sorted(fabric - covered)]

    def start(self) -> None:
        for host in self.topo.hosts:
            self.backend.set_sysctls(host, HOST_SYSCTLS)
        for host in self.topo.hosts:
            mine = [p for p in self.paths if p["host"] == host]
            if not mine:
                continue
            node = self.nodes[host]
            listing = self.logs / f"fabric-probe-{host}.paths"
            listing.write_text("".join(f"{p['dst']} {p['sport']}\n" for p in mine))
            where = str(listing)
            if node.workdir is not None:   # a testbed node: the listing goes there, the output comes back
                where = f"{node.workdir}/{listing.name}"
                node.put(listing, where)
            out = node.log_path(self.logs / f"fabric-probe-{host}.out")
            argv = [*self.backend.python(host), "-m", "harness.fabric_probe", "--paths", where,
                    "--out", out, "--rate", f"{PROBE_RATE:g}"]
            proc = node.start(argv, self.logs / f"fabric-probe-{host}.log")
            self.procs.append(proc)
            self.on_process(proc, None, "prober", host)

    def stop(self) -> None:
        for proc in self.procs:
            self.nodes[proc.node].stop(proc)
            self.on_process(proc, None, "ended", None)
        self.procs = []

    def record(self, db, run_dir: Path) -> dict:
        """Trace every connection the collector recorded, gather the probes; write fabric.json."""
        flows = []
        for a in tcp_attrs(db):
            if all(a.get(k) is not None for k in ("src", "sport", "dst", "dport")):
                f = Flow(a["src"], int(a["sport"]), a["dst"], int(a["dport"]))
                flows += [f, f.reverse()]
        flows = list(dict.fromkeys(flows))
        traced = trace(self.topo, self.nodes, flows, self.interfaces)
        probes = []
        for host in self.topo.hosts:
            index = [k for k, p in enumerate(self.paths) if p["host"] == host]
            out = self.logs / f"fabric-probe-{host}.out"
            if not out.exists():
                continue
            for line in out.read_text().splitlines():
                parts = line.split()   # a prober killed mid-write leaves a cut last line: skipped
                if len(parts) == 3 and parts[1].isdigit() and int(parts[1]) < len(index) and parts[2] in ("0", "1"):
                    try:
                        sent = self._reference_time(host, float(parts[0]))
                    except ValueError:
                        continue
                    probes.append([sent, index[int(parts[1])], int(parts[2])])
        probes.sort()
        topo = self.topo
        doc = {"links": [{"index": k, "name": link_name(topo, k), "kind": link_kind(topo, k)}
                         for k in range(len(topo.spec.links))],
               "connections": {conn_key(f): p for f, p in traced.items()},
               "probe_paths": self.paths, "probes": probes, "probe_rate": PROBE_RATE,
               "uncovered": self.uncovered}
        write_fabric(run_dir, doc)
        return {"connections": len(flows) // 2, "probe_paths": len(self.paths), "probes": len(probes),
                "uncovered": self.uncovered, "host_sysctls": HOST_SYSCTLS}

    def _reference_time(self, host: str, t: float) -> float:
        """A prober's CLOCK_MONOTONIC stamp on the run's reference clock (the same clock on Mininet)."""
        if self.clocks is None or host not in self.clocks.nodes:
            return t
        return self.clocks.from_node(host, t)
