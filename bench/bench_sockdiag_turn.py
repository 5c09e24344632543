"""What the whose-turn fields (format 8: tcpi_unacked, tcpi_notsent_bytes, the chrono stats) cost the
collector per snapshot: a sock_diag dump of N real loopback connections, every one decoded (the
worst case: a snapshot where all of them changed), with the fields against a baseline measured in
the same run, over the same sockets, with `_turn` replaced by a constant (the decode before format 8).
Prints µs per dump, ns per decoded connection and the ratio. Best of `--rounds` rounds (shared machine).

    .venv/bin/python bench/bench_sockdiag_turn.py [--counts 100,1000] [--rounds 20]
"""

from __future__ import annotations

import argparse
import resource
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.collector import sockdiag  # noqa: E402


def connections(n: int) -> list[socket.socket]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1024)
    out = [srv]
    for _ in range(n):
        c = socket.create_connection(srv.getsockname())
        a, _ = srv.accept()
        c.sendall(b"q")
        a.recv(1)
        out += [c, a]
    return out


def best_pair(rounds: int, dump, real, const) -> tuple[float, float]:
    """Best dump time with the fields and with the baseline, the two alternating round by round (so
    that the machine's other work falls on both alike)."""
    times: tuple[list, list] = ([], [])
    for _ in range(rounds):
        for k, turn in enumerate((real, const)):
            sockdiag._turn = turn
            t = time.perf_counter()
            dump()
            times[k].append(time.perf_counter() - t)
    sockdiag._turn = real
    return min(times[0]), min(times[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="100,1000")
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    real = sockdiag._turn
    print("| connections (both ends dumped) | dump, fields | dump, baseline | added per connection | ratio |")
    print("|---|--:|--:|--:|--:|")
    for n in (int(x) for x in args.counts.split(",")):
        socks = connections(n)
        diag = sockdiag.SockDiag()
        got = len(diag.dump())
        with_fields, base = best_pair(args.rounds, diag.dump, real, lambda buf, info, length: (0, 0, None, None, None))
        print(f"| {got} | {with_fields * 1e6:.0f} µs | {base * 1e6:.0f} µs | "
              f"{(with_fields - base) / got * 1e9:.0f} ns | {with_fields / base:.3f} |")
        diag.close()
        for s in socks:
            s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
