"""What a snapshot of one counter file costs the collector: `ShmFile.snapshot()` now (pread: two
copies of the header and the slots in use, compared) against the reader of an earlier commit (the
file mapped with mmap, each slot unpacked in place), in the same run, on the same files.

Files as the library writes them (in /dev/shm when it exists: tmpfs, as in a run), with 1, 16, 256
and 4096 open TCP sockets on fds 0..n-1 and no writer (the cost of the reading itself; a writer only
adds retries of the slots it touched). Per point the two readers take turns for `--rounds` rounds of
`--reps` snapshots each (fewer for the large files: reps * 16 / sockets, at least 20); the fastest round of each is shown (the machine is shared), in µs per
snapshot, with the ratio now/before.

    .venv/bin/python bench/bench_shm.py [--before 9b3e4d5] [--sizes 1,16,256,4096] [--rounds 7] [--reps 200]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from harness.interceptor import shm  # noqa: E402


def before_module(rev: str, where: Path):
    """harness/interceptor/shm.py as of `rev`, loaded as a module of its own."""
    src = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:harness/interceptor/shm.py"],
                         capture_output=True, text=True, check=True).stdout
    path = where / "shm_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("shm_before", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["shm_before"] = mod        # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def craft(path: Path, n: int) -> None:
    """A file with n open TCP sockets with peers on fds 0..n-1, counters set, seqlocks even."""
    slots = max(n, 64)
    buf = bytearray(shm.HEADER_SIZE + slots * shm.SLOT_SIZE)
    struct.pack_into("<8sIIIIii", buf, 0, shm.MAGIC, shm.VERSION, shm.HEADER_SIZE, shm.SLOT_SIZE, slots, 4242, 1)
    struct.pack_into("<I", buf, 64, n)
    argv = b"bench\0--flag\0"
    struct.pack_into("<I", buf, 512, len(argv))
    buf[shm.CMDLINE_OFF:shm.CMDLINE_OFF + len(argv)] = argv
    for fd in range(n):
        off = shm.HEADER_SIZE + fd * shm.SLOT_SIZE
        struct.pack_into("<QQQiIIHHHH", buf, off, 2, 1, 1000 + fd, fd, shm.OPEN, shm.SF_GRAPH | shm.SF_PEER,
                         socket.AF_INET, socket.SOCK_STREAM, 40000 + fd, 80)
        buf[off + 48:off + 52] = socket.inet_aton("10.0.0.1")
        buf[off + 64:off + 68] = socket.inet_aton("10.0.0.2")
        for d in shm.DIR_OFF:
            struct.pack_into("<QQQQQ", buf, off + d, 4, 100 + fd, 1000 * fd, 0, 5000 * fd)
    path.write_bytes(bytes(buf))


def round_us(mod, path: Path, reps: int) -> float:
    f = mod.ShmFile(path)
    try:
        f.snapshot()
        gc.collect()                       # each round starts with the same garbage: none
        t = time.perf_counter()
        for _ in range(reps):
            f.snapshot()
        return (time.perf_counter() - t) / reps * 1e6
    finally:
        f.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", default="9b3e4d5", help="commit of the earlier reader (default: the mmap one)")
    p.add_argument("--sizes", default="1,16,256,4096")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=200)
    a = p.parse_args()
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    tmp = Path(tempfile.mkdtemp(prefix="nestlab-bench-shm-", dir=base))
    try:
        try:
            old = before_module(a.before, tmp)
        except subprocess.CalledProcessError as e:
            print(f"bench_shm: cannot read the reader of {a.before}: {e.stderr.strip()}", file=sys.stderr)
            sys.exit(2)
        print(f"ShmFile.snapshot(), µs per snapshot (fastest of {a.rounds} rounds; "
              f"before = {a.before} (mmap), files in {tmp.parent}")
        print(f"{'sockets':>8} {'before':>10} {'now':>10} {'now/before':>11}")
        for n in (int(x) for x in a.sizes.split(",")):
            path = tmp / f"{n}.nest"
            craft(path, n)
            assert len(shm.read_process(path).sockets) == n == len(old.read_process(path).sockets)
            reps = max(20, a.reps * 16 // max(n, 16))
            b, now = [], []
            for _ in range(a.rounds):
                b.append(round_us(old, path, reps))
                now.append(round_us(shm, path, reps))
            print(f"{n:>8} {min(b):>10.1f} {min(now):>10.1f} {min(now) / min(b):>11.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
