"""Maketrace, the slides' trace generator: synthetic message traces from causal path templates, with
the true paths kept, for testing the black-box algorithms on known input.

As the slides describe it: a set of causal path *templates* (all call and return messages, with
latencies), delays drawn from a normal distribution, a *recipe* to combine paths (how often each
starts, parallelism, start and stop times for each path) and a duration; plus the perturbations the
slides measure accuracy against: clock skew, dropped messages, delay variance and noise messages.

A template is a tree of calls (`Hop`): the root node calls `first`; a hop's node waits `wait` (the
caller's delay before this call: the slides' "time parent waits before calling child"), receives the
call, calls its children one after another (or all at once, `parallel`), and returns `delay` after
the last child's return arrived (its own work). Every message crosses the network in
N(net_mean, net_sd). Message causality follows WAP5's model: a call causes the callee's first child
call (or its return), a child's return causes the next child call (or the return); with parallel
children every child call is caused by the incoming call and the return by the last child return
to arrive. So a node's delay in a path is the sum of its children's waits and its own delay.

Everything is vectorised per template slot (one numpy vector per message position of a template
across all its instances): two million messages generate in about a second.

    trace = maketrace(web_service(), duration=500, parallelism=4, seed=1,
                      faults=[Fault("web2", 0.2, 200, 300)])
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.paths.model import COLUMNS, Trace, Truth, has_threads, pattern_of


@dataclass(frozen=True)
class Hop:
    """A call to `node` within a path template (times in seconds, means of normal distributions)."""

    node: str
    delay: float = 0.005                 # the node's own work before it returns
    children: tuple[Hop, ...] = ()
    wait: float = 0.0                    # the caller's delay before making this call
    parallel: bool = False               # children called at once rather than one after another


def call(node: str, delay_ms: float, *children: Hop, wait_ms: float = 0.0,
         parallel: bool = False) -> Hop:
    """A Hop with its times in ms, for writing templates compactly."""
    return Hop(node, delay_ms / 1000, tuple(children), wait_ms / 1000, parallel)


@dataclass(frozen=True)
class Template:
    """One causal path template and its part of the recipe: `weight` (share of path starts),
    `start`/`stop` (s: when paths of this template may start; None: the whole trace)."""

    name: str
    root: str
    first: Hop
    weight: float = 1.0
    start: float = 0.0
    stop: float | None = None


@dataclass(frozen=True)
class Fault:
    """Add `extra` s to every return `node` sends for a call received in [start, stop) (true time):
    the slides' "added 200 msec delay in WS2", the service lab's `delay` fault."""

    node: str
    extra: float
    start: float
    stop: float


@dataclass
class _Slots:
    """A template compiled into message positions, in an order where triggers come first."""

    src: list[str] = field(default_factory=list)
    dst: list[str] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)
    triggers: list[list[int]] = field(default_factory=list)   # slots whose arrival at src triggers
    mean: list[float] = field(default_factory=list)           # the sender's delay after the trigger
    pair: list[int] = field(default_factory=list)             # call/return pair index in the template
    # the hop (0: the root's, pair + 1: the callee's of that pair) the sender serves when sending it,
    # and the one the receiver serves when receiving it: the thread model's unit of work
    src_hop: list[int] = field(default_factory=list)
    dst_hop: list[int] = field(default_factory=list)

    def add(self, src: str, dst: str, kind: str, triggers: list[int], mean: float, pair: int,
            hops: tuple[int, int] = (0, 0)) -> int:
        self.src_hop.append(hops[0])
        self.dst_hop.append(hops[1])
        self.src.append(src)
        self.dst.append(dst)
        self.kind.append(kind)
        self.triggers.append(triggers)
        self.mean.append(mean)
        self.pair.append(pair)
        return len(self.src) - 1


def compile_template(t: Template) -> _Slots:
    slots = _Slots()
    n_pairs = [0]

    def visit(caller: str, caller_hop: int, hop: Hop, triggers: list[int]) -> int:
        pair = n_pairs[0]
        n_pairs[0] += 1
        c = slots.add(caller, hop.node, "call", triggers, hop.wait, pair, (caller_hop, pair + 1))
        if hop.parallel and hop.children:
            last = [visit(hop.node, pair + 1, ch, [c]) for ch in hop.children]
        else:
            last = [c]
            for ch in hop.children:
                last = [visit(hop.node, pair + 1, ch, last)]
        return slots.add(hop.node, caller, "return", last, hop.delay, pair, (pair + 1, caller_hop))

    visit(t.root, 0, t.first, [])
    return slots


def template_pattern(t: Template) -> str:
    """The template's canonical pattern when no parallel children race (the last child returns last)."""
    s = compile_template(t)
    parent = [max(tr) if tr else -1 for tr in s.triggers]
    return pattern_of(s.src, s.dst, parent, 0)


def mean_duration(t: Template, net_mean: float) -> float:
    """Seconds from a path's start to its last message's arrival, all delays at their means."""
    s = compile_template(t)
    recv = np.zeros(len(s.src))
    for j in range(len(s.src)):
        trig = max((recv[k] for k in s.triggers[j]), default=0.0)
        recv[j] = trig + s.mean[j] + net_mean
    return float(recv.max())


def _normal(rng: np.random.Generator, mean: float, sd: float, n: int) -> np.ndarray:
    if sd <= 0 or mean <= 0:
        return np.full(n, max(mean, 0.0))
    return np.maximum(rng.normal(mean, sd, n), 0.0)


def _instances(t: Template, starts: np.ndarray, rng: np.random.Generator, delay_sd: float,
               net_mean: float, net_sd: float, faults: Sequence[Fault]):
    """Columns (slot-major, n_slots x n) of the instances of one template."""
    s = compile_template(t)
    m, n = len(s.src), len(starts)
    t_send = np.empty((m, n))
    t_recv = np.empty((m, n))
    cause = np.full((m, n), -1, dtype=np.int64)         # slot index of the cause, -1: root
    delay = np.empty((m, n))
    for j in range(m):
        trig_slots = s.triggers[j]
        if not trig_slots:
            trig = starts
        elif len(trig_slots) == 1:
            trig = t_recv[trig_slots[0]]
            cause[j] = trig_slots[0]
        else:
            arrivals = t_recv[trig_slots]
            last = arrivals.argmax(axis=0)
            trig = arrivals[last, np.arange(n)]
            cause[j] = np.asarray(trig_slots)[last]
        d = _normal(rng, s.mean[j], delay_sd * s.mean[j], n)
        if s.kind[j] == "return":
            for f in faults:
                if f.node == s.src[j]:
                    # the call this return answers arrived at the node at t_recv of its call slot
                    call_slot = s.pair.index(s.pair[j])
                    got = t_recv[call_slot]
                    d = d + np.where((got >= f.start) & (got < f.stop), f.extra, 0.0)
        delay[j] = d if trig_slots else np.nan
        t_send[j] = trig + d
        t_recv[j] = t_send[j] + _normal(rng, net_mean, net_sd, n)
    return s, t_send, t_recv, cause, delay


def maketrace(templates: Sequence[Template], duration: float = 50.0, *, rate: float | None = None,
              parallelism: float | None = None, seed: int = 0, delay_sd: float = 0.1,
              net_mean: float = 0.0005, net_sd: float = 0.0001, clock_skew: float = 0.0,
              drop_rate: float = 0.0, noise: float = 0.0, faults: Sequence[Fault] = (),
              tags: bool = True, threads: int | Mapping[str, int] | None = None) -> Trace:
    """A synthetic trace of paths started in [0, duration) s.

    rate: path starts per second (Poisson arrivals), or parallelism: the mean number of paths in
    flight at once (the slides' parallelism; rate = parallelism / mean path duration, Little's law);
    default parallelism 1. delay_sd: each delay's standard deviation as a fraction of its mean (the
    slides' delay variance, e.g. 0.3). clock_skew: each node's clock is off by a constant drawn
    uniformly from [-clock_skew, clock_skew] s (times as the node would record them). drop_rate:
    the share of messages missing from the trace. noise: extra unrelated call/return pairs between
    the nodes the templates connect, as a share of the paths' messages (request -1 in the truth).
    tags: False leaves kind "" and msg -1 (what convolution and linking assume).
    threads: the thread model (None, the default: off; the trace has no thread columns and is
    exactly what it was without the model). Each node serves each call it receives (a *hop*: from
    the call's arrival to its return's departure; the root's hop from its first call to its last
    reply) on one thread of a pool, and that thread sends the hop's downstream calls, receives
    their returns and sends its return: the messages get `src_thread` and `dst_thread`. An int is
    every node's pool size, a mapping gives it per node ("*": the other nodes); 0 is an unbounded
    pool (a thread per hop in flight). A hop takes the thread idle longest; when all N are busy it
    shares the one that frees first, interleaving with its hops: that is an event loop when N = 1
    (nginx-like: one thread serves every call at the node). Queueing for a thread is not modelled
    (timing is the same with or without the model: the seeded outputs do not change).

    Truth: request and cause per message; a dropped message's children point to its nearest kept
    ancestor (or -1); `node_delay` and `patterns` (what each request really did) are exact
    whatever was dropped or skewed. All paths that start before `duration` are complete (their
    late messages are kept)."""
    if not templates:
        raise ValueError("maketrace: no templates")
    rng = np.random.default_rng(seed)
    weights = np.array([t.weight for t in templates], dtype=float)
    if (weights < 0).any() or weights.sum() <= 0:
        raise ValueError("maketrace: template weights must be >= 0 and not all 0")
    weights = weights / weights.sum()
    if rate is None:
        mean_dur = float(sum(w * mean_duration(t, net_mean) for w, t in zip(weights, templates, strict=True)))
        rate = (parallelism if parallelism is not None else 1.0) / max(mean_dur, 1e-9)

    nodes: dict[str, int] = {}
    parts = []          # per template: codes and columns, flattened instance-major
    req_base = 0
    for t, w in zip(templates, weights, strict=True):
        lo, hi = max(t.start, 0.0), duration if t.stop is None else min(t.stop, duration)
        n = int(rng.poisson(w * rate * max(hi - lo, 0.0))) if hi > lo else 0
        if n == 0:
            continue
        starts = np.sort(rng.uniform(lo, hi, n))
        s, t_send, t_recv, cause, delay = _instances(t, starts, rng, delay_sd, net_mean, net_sd,
                                                     faults)
        m = len(s.src)
        hops = max(s.pair) + 2             # per instance: the root's hop and one per pair
        src = np.array([nodes.setdefault(x, len(nodes)) for x in s.src])
        dst = np.array([nodes.setdefault(x, len(nodes)) for x in s.dst])
        # instance-major flattening: row = instance * m + slot
        inst = np.arange(n)[:, None]
        cause_t = cause.T
        parts.append(dict(
            t_send=t_send.T.ravel(), t_recv=t_recv.T.ravel(),
            src=np.tile(src, n), dst=np.tile(dst, n),
            kind=np.tile(np.array([1 if k == "call" else 2 for k in s.kind]), n),
            pair=(inst * (max(s.pair) + 1) + np.array(s.pair)[None, :]).ravel(),
            cause=np.where(cause_t >= 0, inst * m + cause_t, -1).ravel(),
            request=np.repeat(np.arange(req_base, req_base + n), m),
            delay=delay.T.ravel(),
            src_hop=(inst * hops + np.array(s.src_hop)[None, :]).ravel(),
            dst_hop=(inst * hops + np.array(s.dst_hop)[None, :]).ravel(), hops=n * hops,
            patterns=_patterns(s, cause_t),
            name=t.name, n=n, m=m))
        req_base += n
    if not parts:
        raise ValueError(f"maketrace: no path starts in {duration} s at {rate:g} starts/s")

    cols = _concat(parts)
    if noise > 0:
        cols = _add_noise(cols, parts, rng, int(round(noise * len(cols["t_send"]) / 2)), duration,
                          net_mean, net_sd)
    names = list(nodes)
    if threads is not None:
        cols["src_thread"], cols["dst_thread"] = _threads(cols, names, threads)
    if clock_skew > 0:
        offset = rng.uniform(-clock_skew, clock_skew, len(names))
        cols["t_send"] = cols["t_send"] + offset[cols["src"]]
        cols["t_recv"] = cols["t_recv"] + offset[cols["dst"]]
    if drop_rate > 0:
        cols = _drop(cols, rng.random(len(cols["t_send"])) >= drop_rate)
    cols = _sorted(cols)
    # call ids carry no trace of the request (pair numbers would: consecutive within a path)
    cols["pair"] = rng.permutation(int(cols["pair"].max()) + 1)[cols["pair"]]

    kinds = ["", "call", "return"]
    msgs = pd.DataFrame({
        "t_send": cols["t_send"].astype("float64"),
        "t_recv": cols["t_recv"].astype("float64"),
        "src": pd.Categorical.from_codes(cols["src"], names),
        "dst": pd.Categorical.from_codes(cols["dst"], names),
        "kind": pd.Categorical.from_codes(cols["kind"] if tags else np.zeros_like(cols["kind"]),
                                          kinds),
        "msg": cols["pair"].astype("int64") if tags else np.full(len(cols["pair"]), -1, "int64"),
    })
    assert list(msgs.columns) == list(COLUMNS)
    if threads is not None:
        msgs["src_thread"] = cols["src_thread"].astype("int64")
        msgs["dst_thread"] = cols["dst_thread"].astype("int64")
    pats = pd.concat([p["patterns"].assign(request=p["patterns"]["request"] + base, type=p["name"])
                      for p, base in zip(parts, np.cumsum([0] + [p["n"] for p in parts])[:-1], strict=True)],
                     ignore_index=True)
    truth = Truth(request=cols["request"], cause=cols["cause"],
                  request_type=dict(zip(pats["request"].tolist(), pats["type"].tolist(), strict=True)),
                  node_delay=cols["delay"], patterns=pats[["request", "pattern", "type"]])
    fault_frame = pd.DataFrame(
        [(f.node, f.start, f.stop, f.extra, "delay") for f in faults],
        columns=["node", "start", "stop", "extra_s", "kind"])
    return Trace(messages=msgs, truth=truth, source=f"maketrace(seed={seed})",
                 faults=fault_frame if len(faults) else None)


def _patterns(s: _Slots, cause_t: np.ndarray) -> pd.DataFrame:
    """Per instance (row of cause_t, slot causes), its canonical pattern: one pattern_of per
    distinct cause vector (they differ only where parallel children race)."""
    if all(len(t) <= 1 for t in s.triggers):      # no race: every instance has the same shape
        text = pattern_of(s.src, s.dst, cause_t[0].tolist(), 0)
        return pd.DataFrame({"request": np.arange(len(cause_t)), "pattern": text})
    uniq, inverse = np.unique(cause_t, axis=0, return_inverse=True)
    texts = np.array([pattern_of(s.src, s.dst, row.tolist(), 0) for row in uniq], dtype=object)
    return pd.DataFrame({"request": np.arange(len(cause_t)), "pattern": texts[inverse.ravel()]})


_FIELDS = ("t_send", "t_recv", "src", "dst", "kind", "pair", "cause", "request", "delay", "src_hop",
           "dst_hop")


def _concat(parts: list[dict]) -> dict[str, np.ndarray]:
    offsets = np.cumsum([0] + [p["n"] * p["m"] for p in parts])[:-1]
    pair_off = np.cumsum([0] + [int(p["pair"].max()) + 1 for p in parts])[:-1]
    hop_off = np.cumsum([0] + [p["hops"] for p in parts])[:-1]
    out = {k: np.concatenate([p[k] for p in parts]) for k in _FIELDS}
    for k in ("src_hop", "dst_hop"):
        out[k] = np.concatenate([p[k] + o for p, o in zip(parts, hop_off, strict=True)])
    out["cause"] = np.concatenate([np.where(p["cause"] >= 0, p["cause"] + o, -1)
                                   for p, o in zip(parts, offsets, strict=True)])
    out["pair"] = np.concatenate([p["pair"] + o for p, o in zip(parts, pair_off, strict=True)])
    return out


def _add_noise(cols: dict, parts: list[dict], rng: np.random.Generator, n_pairs: int,
               duration: float, net_mean: float, net_sd: float) -> dict:
    """n_pairs call/return pairs over the templates' edges (call direction), at uniform times."""
    if n_pairs <= 0:
        return cols
    calls = cols["kind"] == 1
    edges = np.unique(np.stack([cols["src"][calls], cols["dst"][calls]], axis=1), axis=0)
    pick = edges[rng.integers(0, len(edges), n_pairs)]
    t0 = rng.uniform(0, duration, n_pairs)
    t1 = t0 + _normal(rng, net_mean, net_sd, n_pairs)
    t2 = t1 + rng.exponential(0.005, n_pairs)
    t3 = t2 + _normal(rng, net_mean, net_sd, n_pairs)
    base = len(cols["t_send"])
    pair0 = int(cols["pair"].max()) + 1
    hop0 = int(max(cols["src_hop"].max(), cols["dst_hop"].max())) + 1
    noise = {
        "t_send": np.concatenate([t0, t2]), "t_recv": np.concatenate([t1, t3]),
        "src": np.concatenate([pick[:, 0], pick[:, 1]]), "dst": np.concatenate([pick[:, 1], pick[:, 0]]),
        "kind": np.repeat([1, 2], n_pairs),
        "pair": np.tile(np.arange(pair0, pair0 + n_pairs), 2),
        # the noise return is caused by its call; it belongs to no request
        "cause": np.concatenate([np.full(n_pairs, -1), base + np.arange(n_pairs)]),
        "request": np.full(2 * n_pairs, -1),
        "delay": np.concatenate([np.full(n_pairs, np.nan), t2 - t1]),
        # each noise pair: a caller's hop and a callee's hop of its own
        "src_hop": hop0 + np.concatenate([2 * np.arange(n_pairs), 2 * np.arange(n_pairs) + 1]),
        "dst_hop": hop0 + np.concatenate([2 * np.arange(n_pairs) + 1, 2 * np.arange(n_pairs)]),
    }
    return {k: np.concatenate([cols[k], noise[k]]) for k in _FIELDS}


def _threads(cols: dict, names: list[str], threads: int | Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """(src_thread, dst_thread) per row under the thread model (maketrace's `threads`): each hop's
    interval from its first to its last event (true times), hops given threads node by node in
    order of their start."""
    sizes = ({n: int(threads) for n in names} if not isinstance(threads, Mapping)
             else {n: int(threads.get(n, threads.get("*", 0))) for n in names})
    n_hops = int(max(cols["src_hop"].max(), cols["dst_hop"].max())) + 1
    start = np.full(n_hops, np.inf)
    end = np.full(n_hops, -np.inf)
    node = np.full(n_hops, -1, dtype=np.int64)
    for hop, t, who in ((cols["src_hop"], cols["t_send"], cols["src"]),
                        (cols["dst_hop"], cols["t_recv"], cols["dst"])):
        np.minimum.at(start, hop, t)
        np.maximum.at(end, hop, t)
        node[hop] = who
    thread = np.full(n_hops, -1, dtype=np.int64)
    used = np.flatnonzero(node >= 0)
    used = used[np.lexsort((start[used], node[used]))]
    bounds = np.searchsorted(node[used], np.arange(len(names) + 1))
    for v, name in enumerate(names):
        size = sizes[name]
        idle: list[tuple[float, int]] = []        # (free from, thread): the one idle longest first
        made = 0
        hs = used[bounds[v]:bounds[v + 1]]
        for h, t0, t1 in zip(hs.tolist(), start[hs].tolist(), end[hs].tolist(), strict=True):
            if idle and idle[0][0] <= t0:
                _, tid = heapq.heappop(idle)
                heapq.heappush(idle, (t1, tid))
            elif size <= 0 or made < size:
                tid, made = made, made + 1
                heapq.heappush(idle, (t1, tid))
            else:                                  # all busy: interleave on the first to free
                free, tid = heapq.heappop(idle)
                heapq.heappush(idle, (max(free, t1), tid))
            thread[h] = tid
    return thread[cols["src_hop"]], thread[cols["dst_hop"]]


def _drop(cols: dict, keep: np.ndarray) -> dict:
    """Only the kept rows; causes re-pointed to the nearest kept ancestor (rows' causes come earlier
    in generation order within a path, so a few passes of pointer jumping settle it)."""
    cause = cols["cause"].copy()
    for _ in range(64):
        bad = (cause >= 0) & ~keep[np.maximum(cause, 0)]
        if not bad.any():
            break
        cause[bad] = cols["cause"][cause[bad]]
    new_index = np.cumsum(keep) - 1
    out = {k: v[keep] for k, v in cols.items()}
    c = cause[keep]
    out["cause"] = np.where(c >= 0, new_index[np.maximum(c, 0)], -1)
    return out


def _sorted(cols: dict) -> dict:
    order = np.argsort(cols["t_send"], kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    out = {k: v[order] for k, v in cols.items()}
    c = out["cause"]
    out["cause"] = np.where(c >= 0, rank[np.maximum(c, 0)], -1)
    return out


def web_service() -> list[Template]:
    """The slides' web-server simulation, as a multi-tier service: a client, two web servers (the
    slides' WS1, WS2), two application servers, a cache and a database; nine common patterns
    and two rare ones (under 1% of paths each). Times in ms: web 2-5, app 8-10, cache 1, db 15-20."""
    c, db = (lambda: call("cache", 1)), (lambda ms=20: call("db", ms))
    tpl = []
    for w, a in (("web1", "app1"), ("web2", "app2")):
        tpl += [
            Template(f"static-{w}", "client", call(w, 2), 0.10),
            Template(f"page-{w}", "client", call(w, 5, call(a, 10, c())), 0.20),
            Template(f"miss-{w}", "client", call(w, 5, call(a, 10, c(), db(), wait_ms=1)), 0.10),
            Template(f"write-{w}", "client", call(w, 5, call(a, 8, db(15))), 0.045),
        ]
    tpl += [
        Template("search-web1", "client",
                 call("web1", 4, call("app1", 6, c(), db(), parallel=True)), 0.05),
        Template("report-web2", "client",                     # rare: two queries through app1
                 call("web2", 5, call("app1", 12, db(), db(30), wait_ms=2)), 0.006),
        Template("admin-web1", "client",                      # rare: app2 via web1, cache/db/cache
                 call("web1", 3, call("app2", 9, c(), db(), c(), wait_ms=1)), 0.004),
    ]
    return tpl


def socket_events(trace: Trace, chunk: int = 0, seed: int = 0) -> pd.DataFrame:
    """The per-process send and receive events a tracer like LibSockCap would record for a tagged
    trace (reconcile's input): one connection per call (the caller's ephemeral port to the callee's
    port 80), every message `bytes` long (100-1000, random), sent in one call and, when `chunk` > 0,
    received in reads of at most `chunk` bytes (the last read at t_recv). Host times as in the trace.
    For testing and benching reconciliation."""
    m = trace.messages
    if (m["msg"] < 0).any():
        raise ValueError("socket_events: needs a tagged trace (every message with its call id)")
    rng = np.random.default_rng(seed)
    n = len(m)
    call = (m["kind"] == "call").to_numpy()
    caller = np.where(call, m["src"].astype(str), m["dst"].astype(str))
    callee = np.where(call, m["dst"].astype(str), m["src"].astype(str))
    port = 1024 + m["msg"].to_numpy() % 60000
    client_ep = pd.Series(caller).str.cat(port.astype(str), sep=":").to_numpy()
    server_ep = pd.Series(callee).str.cat(["80"] * n, sep=":").to_numpy()
    # the ephemeral ports repeat beyond 60,000 calls: a per-call address keeps connections apart
    client_ep = client_ep + np.where(m["msg"].to_numpy() >= 60000, "." + (m["msg"] // 60000).astype(str), "")
    size = rng.integers(100, 1001, n)
    src_ep = np.where(call, client_ep, server_ep)
    dst_ep = np.where(call, server_ep, client_ep)
    sends = pd.DataFrame({"mono": m["t_send"].to_numpy(), "host": m["src"].astype(str).to_numpy(),
                          "call": "send", "bytes": size, "local": src_ep, "remote": dst_ep})
    parts = [sends]
    reads = np.maximum(1, -(-size // chunk)) if chunk > 0 else np.ones(n, dtype=int)
    idx = np.repeat(np.arange(n), reads)
    k = np.arange(len(idx)) - np.repeat(np.cumsum(reads) - reads, reads)      # read number within the message
    last = k == reads[idx] - 1
    got = np.where(last, size[idx] - (reads[idx] - 1) * max(chunk, 1), chunk if chunk > 0 else size[idx])
    t = m["t_recv"].to_numpy()[idx] - (reads[idx] - 1 - k) * 1e-6
    parts.append(pd.DataFrame({"mono": t, "host": m["dst"].astype(str).to_numpy()[idx], "call": "recv",
                               "bytes": got, "local": dst_ep[idx], "remote": src_ep[idx]}))
    if has_threads(m):      # the thread model's threads, as a tracer records tids
        sends["tid"] = m["src_thread"].to_numpy()
        parts[1]["tid"] = m["dst_thread"].to_numpy()[idx]
    ev = pd.concat(parts, ignore_index=True)
    ev["pid"] = 1
    return ev.sort_values("mono", kind="stable").reset_index(drop=True)


def requests_table(trace: Trace) -> pd.DataFrame:
    """The true request paths as the service lab's `requests` table records them (issue 33 item 4):
    one row per hop, request, type, tier, host, pid, start, end: each call's callee from the call's
    arrival to its return's departure (host times as in the trace). For testing readers.read_run's
    matching of messages to requests."""
    m, t = trace.messages, trace.truth
    if t is None or (m["msg"] < 0).any():
        raise ValueError("requests_table: needs a tagged trace with its truth")
    mask = (m["kind"] == "call").to_numpy() & (t.request >= 0)
    calls = m[mask][["msg", "dst", "t_recv"]].assign(request=t.request[mask])
    rets = m[m["kind"] == "return"][["msg", "t_send"]].rename(columns={"t_send": "end"})
    hops = calls.merge(rets, on="msg", how="inner")
    host = hops["dst"].astype(str)
    return pd.DataFrame({"request": hops["request"], "type": hops["request"].map(t.request_type).fillna(""),
                         "tier": host, "host": host, "pid": 1, "start": hops["t_recv"], "end": hops["end"]})
