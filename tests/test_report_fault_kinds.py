"""The report and the accuracy of runs with every fault kind (rundir.faultkinds.LEGACY), each with a
target module and without one (issue 35, item 5): a fault that targets nothing the collector watches
(a path_blackhole no monitored connection crosses, an ip_drop of another host) is valid. It is
reported plainly, labels nothing, and is no warning; a fault whose target names a module the run never
recorded still is."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.load import read_run as load_run
from analysis.pipeline import evaluate
from analysis.render.html import build_report
from rundir.faultkinds import LEGACY
from tests.support.runs import IPERF_UP, WGET, RunBuilder

KINDS = sorted(LEGACY)


def kinds_run(path, kind: str):
    """One download over one interface; three faults of `kind`: one on the connection (its module
    named), one that knowingly targets nothing (`module_key: null`, as path_blackhole records it),
    one whose target names a module the run does not have."""
    n = 60
    b = RunBuilder(path, n, workloads=[WGET, IPERF_UP])
    ip = b.module("ipeth", "ipeth:h1-eth0", {"ifname": "h1-eth0"})
    app = b.module("app", "app:100", {"pid": 100}, name="wget 100")
    sock = b.module("socket", "sock:100:3:100", {"pid": 100, "fd": 3, "inode": 100})
    tcp = b.module("tcp", "tcp:100", {"inode": 100, "dport": 80})
    for p, c in ((app, sock), (sock, tcp), (tcp, ip)):
        b.edge(p, c)
    b.process(100, 0, "wget http://x/f")
    tm = np.full(n, 20.0)
    tm[11:19] = 0
    for m in (app, sock):
        b.counters(m, "in", tm / 4, wait=60.0)
    b.counters(tcp, "in", tm, queued=0)
    b.counters(ip, "in", tm)
    b.counters(ip, "out", tm / 2)
    b.fault(kind, tcp, start=1.05, end=1.85, target={"module_key": "tcp:100", "inode": 100})
    b.fault(kind, None, start=3.05, end=3.85,
            target={"module_key": None, "description": f"{kind}: no connection of h1 crosses it"})
    b.fault(kind, None, start=4.55, end=5.05, target={"module_key": "tcp:999", "inode": 999})
    return b.write(), tcp


@pytest.mark.parametrize("kind", KINDS)
def test_every_fault_kind_with_and_without_a_target_is_reported(tmp_path, kind):
    run, tcp = kinds_run(tmp_path / "hand" / f"{kind}-r0", kind)
    data = load_run(run)
    warned = " ".join(data.warnings)
    assert "fault 2 " not in warned, warned                 # knowingly no target: no warning
    assert f"fault 3 ({kind})" in warned                      # a target that was never recorded: warned
    assert list(data.faults["target_module"].isna()) == [False, True, True]
    html = build_report(evaluate([run], ["flowdiagnoser:theta=2"], keep=True), tmp_path / "r.html",
                        draw=False).read_text()
    faults = html.split('<section id="faults">')[1]
    assert "no connection of h1 crosses it" in faults         # the fault that targets nothing, said plainly
    assert "targets no monitored module" in faults
    assert "target not recorded" in faults                    # the missing one, told apart
    assert faults.count('class="fault ') == 3
