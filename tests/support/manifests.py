"""Manifests as the runner writes them, for the schema tests (tests/test_manifest.py).

`runner_manifests(...)` builds, from a real spec and topology (harness.spec.load_spec), the dict
the run loop (harness/runner.py) and the network lab (harness/lab/network.py) hold at each of its
writes: at the start (`Repetition.execute` with `NetworkLab.manifest_start`), after the build
(`NetworkLab.setup`: addresses, versions, clock offsets, monitor, link model; ssh: nodes), at t0
(`Repetition._main_loop`), at the end (`NetworkLab._bring_back` on ssh, `Repetition._finish`) and
with the health the report adds
(nestlab.observers.report). The values the build measures are made up, in the shapes the backends
give them (harness/backends/). DATA holds manifests of real runs: format 3 as recorded, and the
same run as the format 2 runner wrote it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path

from harness.backends.base import ClockOffset, Clocks
from harness.faults import kinds_used
from harness.spec import load_spec
from rundir import __version__
from rundir.db import FORMAT_VERSION
from rundir.manifest import RunHealth
from tests.support.env import REPO

DATA = Path(__file__).resolve().parent / "data"
FORMAT3 = DATA / "manifest-format3-net_fault.json"   # results/net_fault/...-r1 of a real run
FORMAT2 = DATA / "manifest-format2-net_fault.json"   # the same without link_model, health, isolation, recovery

OFFLOADS = {"tso": "off", "gso": "off", "gro": "off", "lro": "off"}


def _mininet_link_model(topo) -> list[dict]:
    """harness.backends.mininet.MininetBackend._check_shaping's record."""
    model = [{"link": k, "a": link.a, "b": link.b, "bw": link.bw, "queue": link.queue_packets, "ends": {}}
             for k, link in enumerate(topo.spec.links)]
    for k, link in enumerate(topo.spec.links):
        if link.bw:
            for end in (link.a, link.b):
                intf = next(i for i in topo.interfaces[end] if i.link == k)
                model[k]["ends"][end] = {"interface": intf.name, "rate": float(link.bw), "qdisc": "pfifo",
                                         "limit": link.queue_packets}
    for name, intfs in topo.interfaces.items():
        for intf in intfs:
            end = model[intf.link]["ends"].setdefault(name, {"interface": intf.name})
            end["offloads"] = dict(OFFLOADS)
    return model


def _ssh_link_model(topo) -> list[dict]:
    """harness.backends.ssh.backend.SshBackend.link_model."""
    return [{"link": k, "a": lk.a, "b": lk.b, "bw": lk.bw, "queue": lk.queue_packets,
             "shaped_by": "the testbed (docs/ssh-backend.md)"} for k, lk in enumerate(topo.spec.links)]


def runner_manifests(spec: str | Path = REPO / "experiments" / "net_fault.yaml",
                     topology: str | Path | None = None, repetition: int = 0) -> Iterator[tuple[str, dict]]:
    """(stage, manifest dict) at each write of the runner; see the module docstring."""
    exp = load_spec(spec, topology)
    spec_, topo = exp.spec, exp.topology
    ssh = topo.backend == "ssh"
    monitor_if = topo.interfaces[spec_.monitor][0]
    run_id = f"20260101-120000-r{repetition}"
    # Repetition.execute, NetworkLab.manifest_start
    m = {
        "format_version": FORMAT_VERSION, "run_id": run_id, "experiment": spec_.name,
        "spec_file": str(exp.path), "spec": spec_.model_dump(mode="json"),
        "topology": {"name": topo.name, "file": str(topo.source), "spec": topo.spec.model_dump(mode="json"),
                     "addresses": {n: [i.__dict__ for i in intfs] for n, intfs in topo.interfaces.items()}},
        "backend": topo.backend, "repetition": repetition, "seed": exp.seed_for(repetition),
        "monitor": {"host": spec_.monitor, "address": monitor_if.address, "interface": monitor_if.name},
        "congestion_control": spec_.congestion_control, "snapshot_interval": spec_.snapshot_interval,
        "planned_faults": [w.__dict__ for w in exp.plan(repetition)], "clock": "CLOCK_MONOTONIC of the monitored host",
        "fault_kinds": kinds_used(spec_.faults),
        "start_wall": 1767268800.25, "start_mono": 3586.957461307, "status": "running",
    }
    yield "start", copy.deepcopy(m)
    # NetworkLab.setup
    clocks = Clocks(spec_.monitor, {n: ClockOffset(0.0012 if ssh else 0.0, 0.0004 if ssh else 0.0, 5 if ssh else 0,
                                                    "command server" if ssh else "shared clock")
                                    for n in topo.spec.nodes})
    m["topology"]["addresses"] = {n: [i.__dict__ for i in topo.interfaces[n]] for n in topo.spec.nodes}
    monitor = {"host": spec_.monitor, "address": monitor_if.address, "interface": monitor_if.name}
    local = {"kernel": "6.1.0-18-amd64", "python": "3.11.2"}
    tools = {"iperf": "iperf version 2.1.8 (12 August 2022) pthreads", "wget": "GNU Wget 1.21.3 built on linux-gnu.",
             "lighttpd": "lighttpd/1.4.69 (ssl) - a light and fast webserver", "iptables": "iptables v1.8.9 (nf_tables)"}
    extra: dict = {}
    if ssh:
        extra = {"nodes": {n: {"host": f"{n}.exp.proj.emulab.net", "port": 22, "user": "nestlab",
                               "control_interface": "eth0", "interfaces": [i.name for i in topo.interfaces[n]],
                               "kernel": "6.1.0-18-amd64", "python": "3.11.2", "sudo": True}
                           for n in topo.spec.nodes},
                 "start_mono": m["start_mono"] + 0.0012}
        monitor["control_interface"] = "eth0"
        versions = {"nestlab": __version__, **local, **tools, "runner": {"kernel": "6.8.0", "python": "3.12.3"}}
        link_model = _ssh_link_model(topo)
    else:
        versions = {"nestlab": __version__, **local, "mininet": "2.3.0", **tools}
        link_model = _mininet_link_model(topo)
    m.update(status="running", versions=versions, clock_offsets=clocks.as_dict(), monitor=monitor,
             link_model=link_model, **extra)
    yield "setup", copy.deepcopy(m)
    # Repetition._main_loop
    m.update(status="running", t0=3587.66233503)
    yield "t0", copy.deepcopy(m)
    # NetworkLab._bring_back (ssh), Repetition._finish
    if ssh:
        m["clock_offsets_end"] = clocks.as_dict()
    m.update(status="complete", reason=None, end_wall=1767268883.75, end_mono=3670.574972663,
             counts={"snapshots": 769, "modules": 27, "faults": 7},
             warnings=["w0: wget exited with status 4 (network failure); restarted"])
    yield "end", copy.deepcopy(m)
    # nestlab.observers.report: the report's health
    health = RunHealth(quiet_snapshots=245, snapshots=769, quiet_s=24.4, rtt_ms_median=4.26, rtt_ms_p99=5.5,
                       rtt_samples=493, queue_drops=None if ssh else 17431, busy=1458, silent=6, busy_in=972,
                       silent_in=6, busy_out=486, warnings=["a warning"], silence_rate=6 / 1458,
                       silence_threshold=0.02)
    m["health"] = json.loads(json.dumps(health.as_dict()))
    yield "health", copy.deepcopy(m)
