"""Host namespaces get a private TCP socket hash (harness.backends.mininet.private_tcp_hash), which
makes the collector's sock_diag dumps cheap; the machine's setting is put back on every exit path,
by `nestlab cleanup` too when the runner died inside."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.backends.mininet import CHILD_EHASH_ENTRIES, private_tcp_hash
from harness.ledger import Ledger
from tests.support.env import REPO

SYSCTL = Path("/proc/sys/net/ipv4/tcp_child_ehash_entries")
pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0 or not SYSCTL.exists(), reason="root, Linux >= 6.1")]


def _ns_hash(ns: str) -> int:
    """The TCP hash size a namespace sees: negative when it shares the machine's (kernel docs)."""
    out = subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-n", "net.ipv4.tcp_ehash_entries"],
                         capture_output=True, text=True, check=True).stdout
    return int(out)


def test_namespaces_made_inside_get_a_private_hash_and_the_setting_comes_back(tmp_path, monkeypatch, no_leftovers):
    monkeypatch.setenv("NESTLAB_LEDGER_DIR", str(tmp_path / "ledgers"))
    ledger = Ledger("t-hash", tmp_path)
    try:
        with pytest.raises(RuntimeError):
            with private_tcp_hash(ledger):
                assert SYSCTL.read_text().strip() == str(CHILD_EHASH_ENTRIES)
                assert json.loads(ledger.path.read_text())["sysctls"] == {"net.ipv4.tcp_child_ehash_entries": "0"}
                subprocess.run(["ip", "netns", "add", "nestlab-t-private"], check=True)
                raise RuntimeError("a build that fails half-way")
        subprocess.run(["ip", "netns", "add", "nestlab-t-shared"], check=True)
        assert _ns_hash("nestlab-t-private") == CHILD_EHASH_ENTRIES
        assert _ns_hash("nestlab-t-shared") < 0
        assert SYSCTL.read_text().strip() == "0"
        assert json.loads(ledger.path.read_text())["sysctls"] == {}
    finally:
        for ns in ("nestlab-t-private", "nestlab-t-shared"):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        ledger.close()


def test_a_setting_its_owner_chose_is_left_alone(no_leftovers):
    try:
        SYSCTL.write_text("1024")
        with private_tcp_hash(None):
            assert SYSCTL.read_text().strip() == "1024"
    finally:
        SYSCTL.write_text("0")


def test_cleanup_puts_back_what_a_dead_runner_changed(tmp_path, no_leftovers):
    ledgers = tmp_path / "ledgers"
    ledgers.mkdir(mode=0o700)
    path = ledgers / "dead.json"
    path.write_text(json.dumps({"run_id": "dead", "run_dir": str(tmp_path / "no-run"), "runner_pid": -1,
                                "runner_start": None, "processes": [], "links": [], "paths": [],
                                "sysctls": {"net.ipv4.tcp_child_ehash_entries": "0",
                                            "kernel.hostname": "not-ours"}}))   # not on the list: never written
    path.chmod(0o600)
    try:
        SYSCTL.write_text(str(CHILD_EHASH_ENTRIES))   # as a runner SIGKILLed inside private_tcp_hash leaves it
        hostname = Path("/proc/sys/kernel/hostname").read_text()
        r = subprocess.run([sys.executable, "-m", "nestlab.cli", "cleanup"], capture_output=True, text=True, cwd=REPO,
                           env={**os.environ, "NESTLAB_LEDGER_DIR": str(ledgers), "PYTHONPATH": str(REPO)})
        assert r.returncode == 0, r.stderr
        assert SYSCTL.read_text().strip() == "0" and not path.exists()
        assert Path("/proc/sys/kernel/hostname").read_text() == hostname
    finally:
        SYSCTL.write_text("0")
