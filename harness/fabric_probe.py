"""NetBouncer's probes from one host (issue 44): half-open TCP probes along chosen paths, one path a
fixed 5-tuple, round robin at a steady rate; each probe's outcome is one line of the output.

A probe is a SYN from the path's own source port to a closed port (DISCARD, 9) of a host in another
pod, sent on a raw socket (harness.collector.synprobe): the destination's kernel answers with a RST,
which comes back along the reverse 5-tuple's path. A probe succeeds when its RST arrives within
`timeout`; it fails when the SYN or the RST was lost. No socket of the host takes part (a bound,
unconnected socket holds each port; the collector sees none of them), and no application sees it.
The routers hash the probe as they hash TCP (policy 3 reads the ports), so a probe path is the
path a connection with that 5-tuple takes; the lab traces each path before the run.

    python -m harness.fabric_probe --paths FILE --out FILE [--rate 40] [--timeout 0.3]

FILE holds lines `DST SPORT`; the output lines `SENT_MONOTONIC PATH_INDEX OK(1/0)`. Standard
library only (it runs in a host's namespace); SIGTERM ends it after a last write.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import struct
import time

from harness.collector.synprobe import _BPF, RST, SO_ATTACH_FILTER, source_address, syn_segment

PROBE_PORT = 9          # DISCARD: closed on every host, so the answer is a RST
FIRST_SPORT = 61000     # probe source ports: above Linux's ephemeral range (32768-60999)


def _rst_filter(port: int) -> bytes:
    """Classic BPF: accept IPv4 TCP segments from source port `port` only."""
    prog = [(0xB1, 0, 0, 0), (0x48, 0, 0, 0), (0x15, 0, 1, port), (0x06, 0, 0, 0xFFFF), (0x06, 0, 0, 0)]
    return b"".join(_BPF.pack(*ins) for ins in prog)


def _attach(sock: socket.socket, code: bytes) -> None:
    import ctypes

    buf = ctypes.create_string_buffer(code)
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("HL", len(code) // 8, ctypes.addressof(buf)))  # copied in


def run(paths: list[tuple[str, int]], out_path: str, rate: float, timeout: float) -> None:
    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    holds = []
    for src_port in dict.fromkeys((source_address(socket.AF_INET, dst, PROBE_PORT), sport) for dst, sport in paths):
        h = socket.socket(socket.AF_INET, socket.SOCK_STREAM)   # hold every probe port, so no connection takes one
        h.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        h.bind(src_port)
        holds.append(h)
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    _attach(raw, _rst_filter(PROBE_PORT))
    raw.setblocking(False)
    src = {dst: source_address(socket.AF_INET, dst, PROBE_PORT) for dst, _ in paths}
    # A path is its destination and source port: the paths to different hosts share source ports.
    by_peer = {(socket.inet_aton(dst), sport): k for k, (dst, sport) in enumerate(paths)}
    pending: dict[int, tuple[int, float]] = {}    # path -> (seq, sent)
    lines: list[str] = []
    gap, nxt, k = 1.0 / rate, time.monotonic(), 0
    with open(out_path, "a") as out:
        last_write = time.monotonic()
        while not stop:
            now = time.monotonic()
            if now >= nxt:
                dst, sport = paths[k % len(paths)]
                path = k % len(paths)
                if path in pending:   # its previous probe is still out: count it lost now
                    lines.append(f"{pending.pop(path)[1]:.4f} {path} 0\n")
                seq = int.from_bytes(os.urandom(4), "big")
                try:
                    raw.sendto(syn_segment(socket.AF_INET, src[dst], dst, sport, PROBE_PORT, seq), (dst, 0))
                    pending[path] = (seq, now)
                except OSError:
                    lines.append(f"{now:.4f} {path} 0\n")
                k += 1
                nxt += gap
                if nxt < now - 1.0:   # fell far behind (a busy machine): do not burst to catch up
                    nxt = now + gap
            ready, _, _ = select.select([raw], [], [], max(0.0, min(nxt - time.monotonic(), 0.05)))
            if ready:
                for _ in range(256):
                    try:
                        packet = raw.recv(65535)
                    except BlockingIOError:
                        break
                    tcp = packet[(packet[0] & 0x0F) * 4:]
                    if len(packet) < 20 or len(tcp) < 14:
                        continue
                    _sp, dport, _s, ack, _o, flags = struct.unpack("!HHIIBB", tcp[:14])
                    path = by_peer.get((packet[12:16], dport))
                    if path is not None and path in pending and flags & RST and \
                            ack == (pending[path][0] + 1) & 0xFFFFFFFF:
                        lines.append(f"{pending.pop(path)[1]:.4f} {path} 1\n")
            now = time.monotonic()
            for path, (_seq, sent) in list(pending.items()):
                if now - sent > timeout:
                    del pending[path]
                    lines.append(f"{sent:.4f} {path} 0\n")
            if lines and now - last_write > 1.0:
                out.writelines(lines)
                out.flush()
                lines, last_write = [], now
        out.writelines(lines)   # probes still out at the end are not counted
    raw.close()
    for h in holds:
        h.close()


def read_paths(path: str) -> list[tuple[str, int]]:
    out = []
    with open(path) as f:
        for line in f:
            dst, sport = line.split()
            out.append((str(socket.inet_ntoa(socket.inet_aton(dst))), int(sport)))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--paths", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--rate", type=float, default=40.0, help="probes per second from this host")
    p.add_argument("--timeout", type=float, default=0.3)
    a = p.parse_args(argv)
    paths = read_paths(a.paths)
    if paths:
        run(paths, a.out, a.rate, a.timeout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
