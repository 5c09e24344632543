"""Hand-made runs with probes (run format 5's `probes` table) for the probe=on tests.

`single_flow_run` is the thesis's hard case (3.3.2, 3.5.2.3) twice over: one wget download over one
interface, silent from seq 20 to 29 (its connection dropped: a tcp_drop) and from seq 40 to 57 (the
host's traffic dropped from 3.95 s to 4.95 s: an ip_drop, and the connection waiting for its
retransmission after it). The counters of the two silences look alike; the probes do not: a burst at
seq 22 answered, a burst at seq 42 unanswered, and, after it timed out, one at seq 53 answered (the
path is back, the connection still silent: the silence's first burst decides; docs/diagnosis.md's
worked example).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from rundir.db import PROBE_COLUMNS
from tests.support.runs import WGET, RunBuilder

REMOTE = "10.0.2.1:80"


def add_probes(path: Path, rows: list[tuple]) -> None:
    """Insert probes rows (PROBE_COLUMNS' values) into the run.db at `path` (a run directory)."""
    db = sqlite3.connect(Path(path) / "run.db")
    db.executemany(f"INSERT INTO probes ({', '.join(PROBE_COLUMNS)}) VALUES ({', '.join('?' * len(PROBE_COLUMNS))})",
                   rows)
    db.commit()
    db.close()


def burst(first_id: int, burst_no: int, module: int, remote: str, seq: int, sent: float, outcomes: list[tuple],
          kind: str = "syn") -> list[tuple]:
    """The rows of one burst: `outcomes` = [(outcome, seconds after sent it was done)], one per probe."""
    return [(first_id + i, burst_no, module, remote, 40000 + first_id + i, kind, seq, sent, sent + after, outcome,
             after * 1000 if outcome in ("answered", "refused") else None)
            for i, (outcome, after) in enumerate(outcomes)]


def single_flow_run(path: Path, n: int = 60, probes: bool = True) -> tuple[Path, dict[str, int]]:
    t = RunBuilder.t
    b = RunBuilder(path, n, workloads=[WGET])
    ip = b.module("ipeth", "ipeth:h1-eth0", {"ifname": "h1-eth0"})
    app = b.module("app", "app:100", {"pid": 100}, name="wget 100")
    sock = b.module("socket", "sock:100:3:100", {"pid": 100, "fd": 3, "inode": 100})
    tcp = b.module("tcp", "tcp:100", {"inode": 100, "src": "10.0.1.1", "sport": 41000, "dst": "10.0.2.1",
                                      "dport": 80}, name="tcp 10.0.1.1:41000>10.0.2.1:80")
    for p, c in ((app, sock), (sock, tcp), (tcp, ip)):
        b.edge(p, c)
    b.process(100, 0, "wget http://10.0.2.1/f")
    tm = np.full(n, 20.0)
    tm[20:30] = 0
    tm[40:58] = 0
    for m in (app, sock):
        b.counters(m, "in", tm / 4, wait=60.0)
    b.counters(tcp, "in", tm, queued=0)
    b.counters(ip, "in", tm)
    b.counters(ip, "out", tm / 2)
    b.fault("tcp_drop", tcp, start=1.95, end=2.95, target={"inode": 100})
    b.fault("ip_drop", ip, start=3.95, end=4.95, target={"host": "h1"})
    b.write()
    if probes:
        add_probes(path, burst(1, 1, tcp, REMOTE, 22, t(22) + 0.05, [("answered", 0.002), ("answered", 0.003)])
                   + burst(3, 2, tcp, REMOTE, 42, t(42) + 0.05, [("timeout", 1.0), ("timeout", 1.0)])
                   + burst(5, 3, tcp, REMOTE, 53, t(53) + 0.05, [("answered", 0.002), ("answered", 0.002)]))
    return path, {"ipeth": ip, "app": app, "socket": sock, "tcp": tcp}


SYNTHETIC_REMOTES = ("10.0.5.1:80", "10.0.6.1:5001", "[fd00::7]:80")
OUTCOMES = (("answered", 0.002), ("refused", 0.001), ("timeout", 1.0), ("unreachable", 0.0005), ("error", 0.0))


def synthetic_probe_rows(mono: np.ndarray, remotes=SYNTHETIC_REMOTES, seed: int = 0, every: float = 0.7) -> list[tuple]:
    """Probes rows over a run's time span: to each remote a burst of two probes about every `every`
    seconds, mostly both answered or both timed out, sometimes mixed (one lost), refused, unreachable or
    an error; the remotes spelt as the collector spells them, sometimes otherwise (an IPv4-mapped one)."""
    rng = np.random.default_rng(seed)
    rows, pid, burst_no = [], 1, 1
    for remote in remotes:
        t = float(mono[0]) + rng.random() * every
        while t < float(mono[-1]):
            pattern = rng.choice(5, p=[0.45, 0.35, 0.1, 0.05, 0.05])
            pair = {0: [0, 0], 1: [2, 2], 2: [2, 0], 3: [1, 1], 4: [3 + int(rng.integers(0, 2))] * 2}[int(pattern)]
            spelt = f"[::ffff:{remote.split(':')[0]}]:{remote.split(':')[1]}" if rng.random() < 0.1 and \
                not remote.startswith("[") else remote
            seq = int(np.searchsorted(mono, t, side="right")) - 1
            for o in pair:
                outcome, after = OUTCOMES[o]
                rows.append((pid, burst_no, 1, spelt, 40000 + pid % 20000, "syn", seq, round(t, 6),
                             round(t + after, 6), outcome, after * 1000 if o < 2 else None))
                pid += 1
            burst_no += 1
            t += every * (0.5 + rng.random())
    return rows


def give_remotes(path: Path, remotes=SYNTHETIC_REMOTES) -> dict[int, str]:
    """Set every TCP module's attrs dst and dport in run.db (the synthetic run has none): one of
    `remotes` by its id. Returns module -> remote."""
    db = sqlite3.connect(Path(path) / "run.db")
    out = {}
    for (mid,) in db.execute("SELECT id FROM modules WHERE kind = 'tcp'").fetchall():
        remote = remotes[mid % len(remotes)]
        addr, _, port = remote.rpartition(":")
        db.execute("UPDATE modules SET attrs = ? WHERE id = ?",
                   (f'{{"dst": "{addr.strip("[]")}", "dport": {port}}}', mid))
        out[mid] = remote
    db.commit()
    db.close()
    return out


def synthetic_probe_run(path: Path, seconds: float = 60, seed: int = 3) -> Path:
    """tests/support/synthetic.synthetic_run with remotes and probes."""
    from tests.support.synthetic import synthetic_run

    synthetic_run(path, seconds=seconds, churn_s=8, conns=4, seed=seed)
    give_remotes(path)
    db = sqlite3.connect(path / "run.db")
    mono = np.array([m for (m,) in db.execute("SELECT mono FROM snapshots ORDER BY seq")])
    db.close()
    add_probes(path, synthetic_probe_rows(mono, seed=seed))
    return path


def scoped_run(path: Path) -> tuple[Path, dict[str, int]]:
    """Issue 35's two cases on one download over one interface (80 snapshots of 0.1 s, t(s) = 1000 + s/10).

    A: the connection is silent from seq 10 (its server stopped: its own stall), a burst at 1001.35 is
    answered; an ip_drop runs from 1001.45 to 1002.45; the next burst (1002.40) times out; after the
    drop the connection waits for its retransmission to seq 39 while the burst at 1003.50 is answered.
    B: an ip_drop from 1004.95 to 1005.55 silences it from seq 50; a burst sent before it heals
    (1005.25) times out; the next (1006.345) is answered, and the connection stays silent to the end,
    longer than a backed-off retransmission timer explains (a new stall of its own after seq 77)."""
    t = RunBuilder.t
    n = 80
    b = RunBuilder(path, n, workloads=[WGET])
    ip = b.module("ipeth", "ipeth:h1-eth0", {"ifname": "h1-eth0"})
    app = b.module("app", "app:100", {"pid": 100}, name="wget 100")
    sock = b.module("socket", "sock:100:3:100", {"pid": 100, "fd": 3, "inode": 100})
    tcp = b.module("tcp", "tcp:100", {"inode": 100, "src": "10.0.1.1", "sport": 41000, "dst": "10.0.2.1",
                                      "dport": 80}, name="tcp 10.0.1.1:41000>10.0.2.1:80")
    for p, c in ((app, sock), (sock, tcp), (tcp, ip)):
        b.edge(p, c)
    b.process(100, 0, "wget http://10.0.2.1/f")
    tm = np.full(n, 20.0)
    tm[10:40] = 0
    tm[50:] = 0
    for m in (app, sock):
        b.counters(m, "in", tm / 4, wait=60.0)
    b.counters(tcp, "in", tm, queued=0)
    b.counters(ip, "in", tm)
    b.counters(ip, "out", tm / 2)
    b.fault("ip_drop", ip, start=1.45, end=2.45, target={"host": "h1"})
    b.fault("ip_drop", ip, start=4.95, end=5.55, target={"host": "h1"})
    b.write()
    answered, lost = [("answered", 0.002), ("answered", 0.002)], [("timeout", 0.995), ("timeout", 0.995)]
    add_probes(path, burst(1, 1, tcp, REMOTE, 13, t(13) + 0.05, answered)
               + burst(3, 2, tcp, REMOTE, 23, t(24), lost)
               + burst(5, 3, tcp, REMOTE, 34, t(35), answered)
               + burst(7, 4, tcp, REMOTE, 52, t(52) + 0.05, lost)
               + burst(9, 5, tcp, REMOTE, 63, t(63) + 0.045, answered)
               + burst(11, 6, tcp, REMOTE, 73, t(73) + 0.05, answered))
    return path, {"ipeth": ip, "app": app, "socket": sock, "tcp": tcp}
