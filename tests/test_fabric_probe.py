"""NetBouncer's prober (harness/fabric_probe.py) on this machine's loopback: every probe of a path
that answers (a closed port's RST) is a success, one line each. Root: a raw socket."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support.env import REPO

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="raw sockets need root")


@pytest.mark.parametrize("listing", ["127.0.0.1 61011\n127.0.0.1 61012\n",
                                     # paths to different hosts share a source port (the lab's plan does)
                                     "127.0.0.1 61011\n127.0.0.2 61011\n"])
def test_probes_of_answering_paths_succeed_one_line_each(tmp_path, listing):
    paths = tmp_path / "paths"
    paths.write_text(listing)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "harness.fabric_probe", "--paths", str(paths), "--out", str(out),
                             "--rate", "40"], cwd=REPO, start_new_session=True)
    try:
        time.sleep(2.0)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(5)
    rows = [line.split() for line in out.read_text().splitlines()]
    assert 50 <= len(rows) <= 90
    assert {r[1] for r in rows} == {"0", "1"} and all(r[2] == "1" for r in rows)
    assert all(float(a[0]) < float(b[0]) for a, b in zip(rows, rows[1:], strict=False))
