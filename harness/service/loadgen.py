"""The service's load generator: open-loop Poisson arrivals at a given rate, at most `concurrency`
requests in flight, a seeded mix of request types; bounded in count and time, it stops by itself.

Open loop: arrival times are drawn in advance of the answers (exponential gaps with mean 1/rate,
from the seed), so the offered load is the spec's whatever the service does; an arrival that finds
every one of the `concurrency` senders busy is not sent and is counted `refused` (the service, or
the cap, is the bottleneck), never queued to be sent late. Each request carries its id in
X-Request-ID (the true request paths, harness/service/paths.py).

Request types (`mix`): `hit` reads a hot key (kept in memcached), `miss` reads a key never asked
before (memcached misses, MariaDB answers), `write` updates a hot key. Each finished request is one
line of `--out`: id, intended type, type the app reported, HTTP status (0: no answer), start, end
(CLOCK_MONOTONIC), error; a JSON summary goes to stdout at the end.

    python -m harness.service.loadgen --url http://10.0.1.2:80 --rate 50 --concurrency 32
        --count 3000 --duration 60 --seed 7 --mix hit=0.8,miss=0.15,write=0.05 --out FILE
"""

from __future__ import annotations

import argparse
import http.client
import json
import queue
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

HOT_KEYS = 200                 # keys the tiers' setup puts into memcached (harness.service.tiers)
MISS_BASE = 1_000_000          # a miss reads key MISS_BASE + n: asked once, never cached before
TIMEOUT_S = 10.0
TYPES = ("hit", "miss", "write")


@dataclass(frozen=True)
class Arrival:
    n: int
    at: float                  # seconds after the start
    type: str
    key: int

    @property
    def rid(self) -> str:
        return f"q{self.n:07d}"

    @property
    def method(self) -> str:
        return "POST" if self.type == "write" else "GET"


def parse_mix(text: str) -> dict[str, float]:
    """`hit=0.8,miss=0.15,write=0.05` -> shares that sum to 1."""
    mix = {}
    for part in text.split(","):
        name, _, share = part.partition("=")
        if name.strip() not in TYPES:
            raise ValueError(f"unknown request type {name.strip()!r} (types: {', '.join(TYPES)})")
        mix[name.strip()] = float(share)
    total = sum(mix.values())
    if total <= 0 or any(v < 0 for v in mix.values()):
        raise ValueError("the mix's shares must be >= 0 with a positive sum")
    return {k: v / total for k, v in mix.items()}


def arrivals(rate: float, count: int, duration: float, seed: int, mix: dict[str, float]):
    """The seeded schedule: Poisson arrivals at `rate` per second, at most `count`, before `duration`."""
    rng = random.Random(seed)
    names, weights = list(mix), [mix[k] for k in mix]
    t = 0.0
    for n in range(count):
        t += rng.expovariate(rate)
        if t >= duration:
            return
        kind = rng.choices(names, weights)[0]
        key = MISS_BASE + n if kind == "miss" else rng.randrange(HOT_KEYS)
        yield Arrival(n, t, kind, key)


@dataclass
class Tally:
    sent: int = 0
    refused: int = 0
    done: int = 0
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Sender(threading.Thread):
    """One of the `concurrency` senders: a keep-alive connection to the web tier."""

    def __init__(self, host: str, port: int, work: queue.SimpleQueue, idle: threading.Semaphore, out, tally: Tally):
        super().__init__(daemon=True)
        self.host, self.port, self.work, self.idle, self.out, self.tally = host, port, work, idle, out, tally
        self.conn: http.client.HTTPConnection | None = None

    def run(self) -> None:
        while (a := self.work.get()) is not None:
            self.send(a)
            self.idle.release()

    def send(self, a: Arrival) -> None:
        status, got, error = 0, "", ""
        start = time.monotonic()
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT_S)
            self.conn.request(a.method, f"/item/{a.key}", headers={"X-Request-ID": a.rid, "Content-Length": "0"})
            resp = self.conn.getresponse()
            resp.read()
            status, got = resp.status, resp.getheader("X-Request-Type", "")
            if resp.will_close:
                self.conn.close()
                self.conn = None
        except (OSError, http.client.HTTPException) as e:
            error = f"{type(e).__name__}: {e}".replace("\t", " ").replace("\n", " ")
            if self.conn is not None:
                self.conn.close()
            self.conn = None
        end = time.monotonic()
        with self.tally.lock:
            self.tally.done += 1
            self.tally.errors += status != 200
            self.out.write(f"{a.rid}\t{a.type}\t{got}\t{status}\t{start:.6f}\t{end:.6f}\t{error}\n")


def run(url: str, rate: float, concurrency: int, count: int, duration: float, seed: int,
        mix: dict[str, float], out_path: str) -> dict:
    parts = urlsplit(url)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    tally, work, idle = Tally(), queue.SimpleQueue(), threading.Semaphore(concurrency)
    with open(out_path, "a", buffering=1) as out:
        senders = [Sender(parts.hostname, parts.port or 80, work, idle, out, tally) for _ in range(concurrency)]
        for s in senders:
            s.start()
        t0 = time.monotonic()
        for a in arrivals(rate, count, duration, seed, mix):
            if stop.wait(max(0.0, t0 + a.at - time.monotonic())):
                break
            if idle.acquire(blocking=False):
                tally.sent += 1
                work.put(a)
            else:
                tally.refused += 1
        offered_s = time.monotonic() - t0
        for _ in senders:
            work.put(None)
        deadline = time.monotonic() + TIMEOUT_S
        for s in senders:
            s.join(max(0.0, deadline - time.monotonic()))
    return {"offered_rate": rate, "seconds": round(offered_s, 3), "sent": tally.sent, "refused": tally.refused,
            "done": tally.done, "errors": tally.errors,
            "achieved_rate": round(tally.done / offered_s, 2) if offered_s > 0 else 0.0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--rate", type=float, required=True, help="arrivals per second (Poisson)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--count", type=int, required=True, help="at most this many arrivals")
    p.add_argument("--duration", type=float, required=True, help="seconds; no arrival after this")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mix", default="hit=0.8,miss=0.15,write=0.05")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if a.rate <= 0 or a.concurrency < 1 or a.count < 1 or a.duration <= 0:
        p.error("rate, concurrency, count and duration must be positive")
    summary = run(a.url, a.rate, a.concurrency, a.count, a.duration, a.seed, parse_mix(a.mix), a.out)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
