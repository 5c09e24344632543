"""Probes at their limits: 1,000 silent connections at once, and a flood at the probes' ports.

The real collector runs at 50 ms with the prober on (its default settings: bursts of 2, at most 10
probes a second from the host and 2 a second to one remote address) in a namespace holding 1,000
connections to 100 server addresses that are all busy and silent at once (each filled its small
send buffer; the server never reads), so every connection wants a probe every second:

- budget: the probes in the busiest one-second window (by their send times) against the host's 10,
  and the probes sent against what the budget allows over the run;
- cadence: the collector's CPU, snapshot lateness (p50, p99, max) and lost snapshots, against the
  same collector over the same connections with the prober off (the baseline, in the same run);
- flood: the server's namespace then drops SYNs (an iptables rule in it), so every probe waits its
  whole timeout (`remote silent`), and a process there watches for the probes' SYNs and floods each
  probe's port for that second with ACKs that claim to come from the probed address and port,
  which the probe's kernel filter must let through (`spoofed`), or from another port, which it
  drops in the kernel (`other port`). The collector must keep its cadence.

The machine is shared: each variant is measured `--rounds` times, the round the machine's other
work held up least (the least time waiting for a CPU) is shown. Load stays between the bench's own namespaces and ends with them (and the flood with its
run, bounded in time).

    .venv/bin/python bench/bench_probes.py [--connections 1000] [--remotes 100] [--seconds 10] [--rounds 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

from bench_collector import measure
from connections import CLIENT_ADDRESS, PORT, Connections

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.collector.probe import ProbeSettings  # noqa: E402

# In the server's namespace: read every IP packet on its interface, and for each
# probe SYN (SYN without ACK to the server's port) send ACKs with a wrong acknowledgement to the
# probe's port, from the probed address, from the server's port (argv[1] = 1) or the next one (0),
# until `timeout` after the SYN. Precomputed packets: the flood runs at the speed of sendto.
FLOODER = r"""
import socket, struct, sys, time, select
spoof, seconds, timeout, client, port = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], int(sys.argv[5])

def checksum(data):
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF

def ack(src, dst, sport, dport):
    head = struct.pack("!HHIIBBHHH", sport, dport, 1, 12345, 5 << 4, 0x10, 1024, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(head))
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 12345, 5 << 4, 0x10, 1024, checksum(pseudo + head), 0)

# A packet socket sees the SYNs before netfilter drops them (a raw IP socket would not).
sniff = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
sniff.setblocking(False)
senders, targets, sent, syns = {}, {}, 0, 0
end = time.monotonic() + seconds
print("up", flush=True)
while time.monotonic() < end:
    while True:
        try:
            pkt = sniff.recv(65535)
        except BlockingIOError:
            break
        if len(pkt) < 40 or pkt[9] != 6:
            continue
        src, ihl = socket.inet_ntoa(pkt[12:16]), (pkt[0] & 0x0F) * 4
        sport, dport, _, _, _, flags = struct.unpack_from("!HHIIBB", pkt, ihl)
        if src == client and dport == port and flags & 0x12 == 0x02:
            dst = socket.inet_ntoa(pkt[16:20])
            if dst not in senders:
                senders[dst] = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
                senders[dst].bind((dst, 0))
            targets[(dst, sport)] = (ack(dst, client, port if spoof else port + 1, sport), time.monotonic() + timeout)
            syns += 1
    if not targets:
        select.select([sniff], [], [], 0.05)
        continue
    now = time.monotonic()
    for (dst, sport), (packet, until) in list(targets.items()):
        if now > until:
            del targets[(dst, sport)]
            continue
        s = senders[dst]
        for _ in range(64):
            try:
                s.sendto(packet, (client, 0))
                sent += 1
            except OSError:
                break
print(syns, sent, flush=True)
"""


def busiest_second(times: list[float]) -> int:
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - 1.0:
            j += 1
        best = max(best, i - j + 1)
    return best


def run(net: Connections, seconds: float, probe: str | None, flood: str | None, warmup: float = 3.0,
        nice: int = 0) -> dict:
    flooder = None
    if flood is not None:
        flooder = net.popen("server", [sys.executable, "-c", FLOODER, "1" if flood == "spoofed" else "0",
                                       str(warmup + seconds + 2), str(ProbeSettings().timeout), CLIENT_ADDRESS,
                                       str(PORT)], stdout=subprocess.PIPE, text=True)
        flooder.stdout.readline()
    m = measure(net, seconds, 0.05, probe, warmup, nice)
    if flooder is not None:   # it ends on its own, 2 s after the collector, and says what it sent
        out = flooder.communicate(timeout=30)[0].split()
        m["flood"] = (int(out[0]), int(out[1])) if len(out) == 2 else (0, 0)
    in_window = [s for s, _ in m["probes"] if m["t0"] <= s <= m["t1"]]
    m["busiest"] = busiest_second(in_window)
    m["in_window"] = len(in_window)
    outcomes: dict[str, int] = {}
    for _, o in m["probes"]:
        outcomes[o] = outcomes.get(o, 0) + 1
    m["outcomes"] = outcomes
    return m


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--remotes", type=int, default=100)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--nice", type=int, default=0, help="the collector's niceness (bench_collector.py --nice)")
    a = p.parse_args()
    settings = ProbeSettings()
    probe = json.dumps(dataclasses.asdict(settings))
    print(f"probes at their limits: {a.connections} silent busy connections to {a.remotes} addresses, collector at "
          f"50 ms (niceness {a.nice}), {a.seconds:g} s per round, best of {a.rounds} (least time waiting for a CPU); budget {settings.host_rate:g}/s for the host, "
          f"{settings.remote_rate:g}/s a remote, bursts of {settings.count}")
    print(f"{'variant':>24} {'CPU %':>7} {'CPU/snap':>9} {'late p50':>9} {'p99':>7} {'max':>7} {'lost':>5} "
          f"{'probes':>7} {'busiest 1 s':>11} {'flood pkts/s':>12}  outcomes")
    with Connections(a.connections, silent=True, remotes=a.remotes) as net:
        time.sleep(1.0)
        base = None
        for name, prb, flood in (("prober off (baseline)", None, None), ("prober on", probe, None),
                                 ("on, remote silent", probe, None), ("silent, flood other port", probe, "other port"),
                                 ("silent, flood spoofed", probe, "spoofed")):
            if name == "on, remote silent":   # from now on the server drops SYNs: every probe waits its timeout
                subprocess.run(["ip", "netns", "exec", net.ns_server, "iptables", "-w", "-A", "INPUT", "-p", "tcp",
                                "--dport", str(PORT), "--syn", "-j", "DROP"], check=True)
            best = min((run(net, a.seconds, prb, flood, nice=a.nice) for _ in range(a.rounds)), key=lambda r: r["runnable"])
            base = base or best
            pps = f"{best['flood'][1] / (a.seconds + 5):12.0f}" if "flood" in best else f"{'':12}"   # its whole life
            print(f"{name:>24} {best['cpu']:6.2f}% {best['cpu_ms']:6.2f} ms {best['p50_ms']:6.2f} ms "
                  f"{best['p99_ms']:6.2f} {best['max_ms']:7.2f} {best['lost']:5d} {best['in_window']:7d} "
                  f"{best['busiest']:11d} {pps}  {best['outcomes'] or '-'}", flush=True)
    allowed = settings.host_rate * a.seconds
    print(f"budget: at most {settings.host_rate:g} probes in any one second; over {a.seconds:g} s at most "
          f"{allowed + settings.host_rate:.0f} (the rate, and one second's worth at the start)")


if __name__ == "__main__":
    main()
