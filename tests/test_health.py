"""A run's network health (analysis.health) on hand-made runs: quiet time, the silence rate, RTTs,
queue drops and retransmissions, and the warning above the threshold."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from analysis.health import SILENCE_WARN, network_health
from analysis.load import load_run_data
from rundir.runs import open_run
from tests.support.runs import T0, RunBuilder


def _run(tmp_path, upload_tm, download_tm, fault=None, queue_rows=(), rtts=(), recovery=None):
    """An upload connection (send queue full all along) and a download connection, 100 snapshots."""
    b = RunBuilder(tmp_path / "r", 100)
    ip = b.module("ipeth", "ipeth:h1-eth0")
    up = b.module("tcp", "tcp:1", {"inode": 1})
    down = b.module("tcp", "tcp:2", {"inode": 2})
    for m in (up, down):
        b.edge(m, ip)
    b.counters(up, "out", upload_tm, queued=50_000)
    b.counters(up, "in", 0, queued=0)
    b.counters(down, "in", download_tm, queued=0)
    b.counters(down, "out", 0, queued=0)
    b.counters(ip, "in", 10)
    b.counters(ip, "out", 10)
    if fault:
        b.fault("tcp_drop", up, *fault)
    path = b.write()
    db = sqlite3.connect(path / "run.db")
    db.executemany("INSERT INTO queue_stats VALUES (?,?,?,?,?,?,?,?,?,?)",
                   [(T0 + t, "x1", "x1-eth3", sent, sent * 1500, drops, 0, 0, backlog, backlog * 1500)
                    for t, sent, drops, backlog in queue_rows])
    db.executemany("INSERT INTO tcp_info (seq, module, rtt_us, rttvar_us) VALUES (?,?,?,?)", [(seq, up, rtt, rtt // 2) for seq, rtt in rtts])
    db.commit()
    db.close()
    if recovery is not None:
        m = json.loads((path / "manifest.json").read_text())
        m["spec"]["isolation"] = {"overlap": False, "recovery": recovery}
        (path / "manifest.json").write_text(json.dumps(m))
    return load_run_data(open_run(path)), up, down


def test_silences_of_busy_connections_outside_faults(tmp_path):
    up = np.full(100, 5.0)
    up[10] = 0                  # a silence with data queued: counted
    up[55:60] = 0               # during the fault and its recovery: not counted
    down = np.full(100, 5.0)
    down[30] = 0                # a silence in the middle of the download: counted
    down[90:] = 0               # the download is over: not busy
    data, _, _ = _run(tmp_path, up, down, fault=(5.0, 6.0))
    h = network_health(data)
    # quiet: every snapshot but those whose interval touches [5.0, 6.0 + (1.0 + 1.0)]: seqs 51..80
    assert h.quiet_snapshots == 100 - 30
    assert (h.silent_out, h.silent_in) == (1, 1)
    # busy outbound: every quiet snapshot but the first (its queue at the start is unknown)
    assert h.busy_out == 100 - 30 - 1
    # busy inbound: moved before and after (seqs 1..88) in quiet time
    assert h.busy_in == 88 - 30
    assert h.silence_rate == pytest.approx(2 / (h.busy_out + h.busy_in))
    assert h.silence_rate < SILENCE_WARN
    assert h.warnings == []


def test_a_set_recovery_margin_and_the_warning(tmp_path):
    up = np.full(100, 5.0)
    up[::10] = 0                # a silence every second: 10%
    data, _, _ = _run(tmp_path, up, 5.0, fault=(5.0, 6.0), recovery=0.0)
    h = network_health(data)
    assert h.quiet_snapshots == 100 - 10          # seqs 51..60 touch [5.0, 6.0]
    assert h.silence_rate > SILENCE_WARN
    assert any("silence rate" in w and "measure the network" in w for w in h.warnings)


def test_rtt_queue_and_retransmissions(tmp_path):
    rtts = [(s, 5000 + 100 * s) for s in range(0, 100, 2)] + [(55, 900_000)]  # the last: during the fault
    queue = [(t, 1000 * t, 10 * t + (50 if t > 5 else 0), 40) for t in range(11)]   # 50 drops during the fault
    data, _, _ = _run(tmp_path, 5.0, 5.0, fault=(5.0, 6.0), queue_rows=queue, rtts=rtts)
    h = network_health(data)
    quiet_rtts = [r / 1000 for s, r in rtts if not 51 <= s <= 80]
    assert h.rtt_ms_median == pytest.approx(np.median(quiet_rtts))
    assert h.rtt_ms_p99 < 900
    assert h.queue_drops == 150 and h.queue_sent_packets == 10_000
    # samples at 1 s steps; those overlapping [5, 8] (6, 7, 8) hold the fault's drops
    assert h.queue_drops_quiet == 150 - 50 - 10 * 3
    assert (h.backlog_packets_median, h.backlog_packets_max) == (40, 40)
    assert h.retransmissions_quiet == 0


def test_an_older_run_has_no_rtts_and_says_so(tmp_path):
    data, _, _ = _run(tmp_path, 5.0, 5.0)
    data.tcp_info, data.queue_stats = None, None   # as read from a format 2 run
    h = network_health(data)
    assert h.rtt_ms_median is None and h.queue_drops is None
    assert any("format 2" in w for w in h.warnings)


def _with_receiver_rtts(tmp_path, up_rtts, down_rows, format4=False, upload=5.0):
    """The two-connection run with tcp_info rows for the download too: (seq, rtt_us, rcv_rtt_us)."""
    data, up, down = _run(tmp_path, upload, 5.0, rtts=up_rtts)
    db = sqlite3.connect(data.path / "run.db")
    db.executemany("INSERT INTO tcp_info (seq, module, rtt_us, rttvar_us, rcv_rtt_us) VALUES (?,?,?,?,?)",
                   [(seq, down, rtt, rtt // 2, rcv) for seq, rtt, rcv in down_rows])
    if format4:
        db.execute("ALTER TABLE tcp_info DROP COLUMN rcv_rtt_us")
    db.commit()
    db.close()
    return load_run_data(open_run(data.path))


def test_a_receivers_rtt_is_its_receive_side_estimate(tmp_path):
    """The download's tcpi_rtt times only its GET (0.1 ms); its RTT is tcpi_rcv_rtt. 0: not measured."""
    up = [(s, 20_000) for s in range(0, 100, 10)]                     # 10 samples of 20 ms
    down = [(0, 100, 0)] + [(s, 100, 30_000) for s in range(5, 100, 10)]   # unmeasured, then 10 of 30 ms
    h = network_health(_with_receiver_rtts(tmp_path, up, down))
    assert h.rtt_samples == 20 and (h.rtt_senders, h.rtt_receivers) == (1, 1)
    assert h.rtt_ms_median == pytest.approx(25.0) and h.rtt_ms_p99 == pytest.approx(30.0)
    assert not any("RTT" in w for w in h.warnings)


def test_a_format_4_run_says_its_receivers_have_no_rtt(tmp_path):
    up = [(s, 20_000) for s in range(0, 100, 10)]
    down = [(s, 100, 30_000) for s in range(5, 100, 10)]
    h = network_health(_with_receiver_rtts(tmp_path, up, down, format4=True))
    assert h.rtt_ms_median == pytest.approx(20.0) and (h.rtt_senders, h.rtt_receivers) == (1, 0)
    assert any("no loaded-direction RTT for 1 receiving" in w and "format 5" in w for w in h.warnings)
    # a download-only run of format 4: nothing to show, and it says so plainly
    h = network_health(_with_receiver_rtts(tmp_path / "only", [], down, format4=True, upload=0.0))
    assert h.rtt_ms_median is None and h.rtt_samples == 0
    assert any(w.startswith("this run has no loaded-direction RTT") for w in h.warnings)
