"""Where the repository and its venv are, a file writer, and what a run could leave behind."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
VENV_BIN = Path(sys.executable).parent
OUR_PROCESSES = re.compile(r"\b(iperf|lighttpd|wget|mnexec|nginx|gunicorn|memcached|mariadbd)\b|mininet:|harness\.collector|"
                           r"harness\.service|org\.apache\.flink")


def leftovers() -> list[str]:
    """Everything a run could leave behind that is visible from the root namespace."""
    found = []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.strip()
    if ns:
        found.append(f"netns: {ns}")
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [f"link: {m}" for m in re.findall(r"^\d+: ([^:@]+-eth\d+)", links, re.M)]
    for tool in ("iptables", "iptables-legacy"):
        r = subprocess.run([tool, "-S"], capture_output=True, text=True)
        found += [f"{tool}: {line}" for line in r.stdout.splitlines() if "NESTLAB" in line]
    # Scratch directories (served files, interceptor shared memory, SSH node workdirs) and ledgers;
    # nestlab-bench-* is a benchmark's deliberate cache of its synthetic input.
    # `slow`'s cgroups: on cgroup v2 or v1's cpu hierarchy, wherever the machine mounts them
    from harness.faults.cgroup import cpu_mounts

    cgroups = [f"{m}/nestlab-*" for m in sorted({*cpu_mounts(), Path("/sys/fs/cgroup")})]
    for pattern in ("/tmp/nestlab-*", "/dev/shm/nestlab-*", "/run/nestlab/*.json", "/tmp/flink-*", "/tmp/blobStore-*",
                    *cgroups):
        found += [f"path: {p}" for p in glob.glob(pattern) if not Path(p).name.startswith("nestlab-bench-")]
    child_hash = Path("/proc/sys/net/ipv4/tcp_child_ehash_entries")
    if child_hash.exists() and child_hash.read_text().strip() != "0":   # private_tcp_hash puts 0 back
        found.append(f"sysctl: net.ipv4.tcp_child_ehash_entries = {child_hash.read_text().strip()}")
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()[1:]
    me = str(os.getpid())
    found += [f"process: {line.strip()}" for line in ps
              if OUR_PROCESSES.search(line) and not line.strip().startswith(me) and "pytest" not in line]
    return found


def run_id(run: Path) -> str:
    """The runner's id of a single run's directory (harness.runner.Repetition.run_id), which names its
    ledger, rule tags and scratch directories: <experiment>-<run directory>."""
    return f"{run.parent.name}-{run.name}"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def one_line(text: str) -> str:
    """`text`, asserted to be one line (a refusal is one line naming what it refuses)."""
    assert "\n" not in text, text
    return text
