"""The workloads' servers and clients (harness.workloads) without a network."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from rundir.errors import UserError
from tests.support.env import one_line


class FakeServerNode:
    def __init__(self, workdir: Path):
        self.name = "site2n1"
        self.workdir = str(workdir)
        self.ran: list[list[str]] = []
        self.inputs: list[str | None] = []

    def run(self, argv, check=True, timeout=30.0, input=None, sudo=True):
        self.ran.append([str(a) for a in argv])
        self.inputs.append(input)
        return subprocess.CompletedProcess(argv, 0, "", "")

    def log_path(self, log: Path) -> str:
        return f"{self.workdir}/logs/{log.name}"

    def start(self, argv, log, env=None):
        raise AssertionError("no server may start with a refused address")


@pytest.mark.parametrize("address", ['10.0.2.2"\nserver.modules += ("mod_cgi")', "10.0.2.2/24", "", "localhost"])
def test_the_web_server_configuration_takes_only_an_address(tmp_path, address):
    from harness.workloads import Workloads

    w = SimpleNamespace(kind="wget", host="site1n1", server="site2n1", file_size=1e6, instances=1)
    spec = SimpleNamespace(workloads=[w], duration=10)
    node = FakeServerNode(tmp_path)
    wl = Workloads(spec, {"site2n1": node}, {"site2n1": address, "site1n1": "10.0.1.1"}, tmp_path / "logs")
    try:
        with pytest.raises(UserError) as e:
            wl.start_servers()
    finally:
        wl.remove_files()
    msg = one_line(str(e.value))
    assert msg.startswith("site2n1: ") and repr(address) in msg, msg
    assert node.ran == [], "something was done on the node with a refused address"
