"""Project5's convolution algorithm (blackbox-debugging-slides.txt, slides 18-21): causal links and
their delays from the timing of messages alone (no call/return tags, no message ids).

1. **Signals**: per edge `A>B`, the number of messages per time step of `step` seconds: as B
   receives them (its arrivals, on B's clock; the send time where the receive time is missing) and
   as A sends them (its departures, on A's clock). Only edges with at least `min_messages` messages
   take part (the seeds: convolution needs many instances of a path).
2. **Convolution**: for every node B, every edge into it X>B and every edge out of it B>C, the
   cross-correlation `X(t) = S_out(t) (*) S_in(t)` of the departures of B>C with the arrivals of X>B,
   by FFT (numpy's real FFT, one transform per signal, one product and inverse per pair), over lags
   `-max_delay .. max_delay`.
3. **Peaks**: a lag in `-max_delay .. max_delay` is significant when `X` there stands above the noise floor by
   more than `threshold` times the noise (floor: the median of X over all lags; noise: 1.4826 x the
   median absolute deviation, at least the Poisson spread `sqrt(floor)`: two unrelated signals make a
   flat, noisy X). The highest significant lag and its contiguous significant neighbours form the
   peak; its excess over the floor is the number of causally linked message pairs it stands for
   (`mass`), and the excess-weighted mean lag is the causal delay at B (`step` resolution: a delay
   within one step of another is not separable, slide 20).
4. **Links**: an output edge can correlate with inputs that cause it only indirectly (the client's
   call and web's reply, through the whole path), always at a longer lag than the direct cause. Per
   output edge, its significant inputs are taken in order of delay (shortest first, then peak
   height) while the outputs they explain (`mass`) cover less than `cover` of the edge's messages;
   the rest are dropped.
5. **Paths**: edges without an accepted cause are roots; a path follows accepted links from edge to
   edge (no edge twice on a path). A link that explains at least `together` of its input edge's
   messages happens on every path through it; weaker links out of the same edge are alternatives, one
   at a time (or none), each with the share of messages it explains, so a pattern's expected count is
   the root edge's message count times the shares chosen along it; patterns under `min_count` are
   dropped. This is how this module turns a link graph into patterns; the slides do not say.

Per-node delays: each accepted link's delay, weighted by its mass (node_delays; the histogram holds
the masses by delay); per-pattern node delays sum the links' delays along the pattern. Edge
latencies are the trace's `t_recv - t_send` means (convolution itself cannot separate network delay
from node delay, WAP5 5.3, and does not need to).

Cost: O(e * V log V) with V = duration / step time steps and e the number of (input, output) edge
pairs at a node, plus O(m) to bin the m messages: slide 20's complexity. Memory: one signal per edge.
Rare paths are missed by construction (their peaks do not stand above the noise), as the seeds say.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.paths.assemble import (
    HIST_EDGES_S,
    MAX_PATTERNS,
    edge_latency_frame,
    ensure_messages,
    node_codes,
)
from analysis.paths.model import PathPattern, PathsResult, edge_key

DEFAULTS: dict[str, object] = {
    "step": 0.020,          # s, the time step of the signals (slides: 20 ms)
    "max_delay": 1.0,       # s, the longest causal delay looked for
    "threshold": 6.0,       # peak height over the noise floor, in noise units
    "min_messages": 50,     # messages an edge needs to take part
    "cover": 0.9,           # inputs accepted per output until they explain this share of it
    "together": 0.75,       # a link explaining this share of its input is on every path through it
    "min_count": 1.0,       # smallest expected count of a pattern kept
}


def _signals(t: np.ndarray, edge: np.ndarray, n_edges: int, t0: float, n_bins: int,
             step: float) -> np.ndarray:
    """(n_edges, n_bins) message counts per time step."""
    b = np.clip(((t - t0) / step).astype(np.int64), 0, n_bins - 1)
    flat = np.bincount(edge * n_bins + b, minlength=n_edges * n_bins)
    return flat.reshape(n_edges, n_bins).astype(np.float64)


def correlate(s_in: np.ndarray, s_out: np.ndarray, max_lag: int) -> np.ndarray:
    """X[k] = sum_t s_in[t] * s_out[t + k] for k = -max_lag .. max_lag (by FFT)."""
    n = len(s_in) + max_lag
    size = 1 << int(np.ceil(np.log2(max(n, 2))))
    x = np.fft.irfft(np.conj(np.fft.rfft(s_in, size)) * np.fft.rfft(s_out, size), size)
    return np.concatenate([x[size - max_lag:], x[:max_lag + 1]])


def find_peak(x: np.ndarray, max_lag: int, threshold: float) -> tuple[float, float, float] | None:
    """(delay in steps, mass, height in noise units) of the causal peak of one correlation over lags
    -max_lag .. max_lag, or None. The peak is the highest lag >= 0 and its contiguous significant
    neighbours on both sides; its delay is the excess-weighted mean lag. A pair of messages d apart
    (d < step) lands at lag 0 or +1 (or at 0 or -1 if the output came first), so a mean lag below 0
    means the output edge precedes the input edge: not a cause."""
    floor = float(np.median(x))
    noise = max(1.4826 * float(np.median(np.abs(x - floor))), np.sqrt(max(floor, 1.0)))
    z = (x - floor) / noise
    top = max_lag + int(np.argmax(z[max_lag:]))
    if z[top] <= threshold:
        return None
    lo = top
    while lo > 0 and z[lo - 1] > threshold / 2:
        lo -= 1
    hi = top
    while hi + 1 < len(z) and z[hi + 1] > threshold / 2:
        hi += 1
    excess = np.clip(x[lo:hi + 1] - floor, 0, None)
    mass = float(excess.sum())
    if mass <= 0:
        return None
    delay = float((np.arange(lo - max_lag, hi - max_lag + 1) * excess).sum() / mass)
    if delay < 0:
        return None
    return delay, mass, float(z[top])


def find_links(messages: pd.DataFrame, p: dict) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(links: in_edge, out_edge, node, delay_s, mass, height, share_in, share_out; edges: edge,
    src, dst, count) after steps 1-4."""
    nodes = node_codes(messages)
    step, max_lag = float(p["step"]), max(1, int(round(float(p["max_delay"]) / float(p["step"]))))
    t_send = messages["t_send"].to_numpy(dtype=np.float64)
    t_recv = messages["t_recv"].to_numpy(dtype=np.float64)
    t_recv = np.where(np.isnan(t_recv), t_send, t_recv)
    pair = nodes.src * nodes.n + nodes.dst
    codes, uniq = pd.factorize(pair)
    counts = np.bincount(codes, minlength=len(uniq))
    edges = pd.DataFrame({"edge": np.arange(len(uniq)), "src": np.asarray(uniq) // nodes.n,
                          "dst": np.asarray(uniq) % nodes.n, "count": counts})
    edges["name"] = [edge_key(nodes.names[s], nodes.names[d]) for s, d in zip(edges["src"], edges["dst"], strict=True)]
    warnings = []
    small = edges["count"] < int(p["min_messages"])
    if small.any():
        warnings.append(f"{int(small.sum())} edges with fewer than {p['min_messages']} "
                        f"messages ({int(edges.loc[small, 'count'].sum())} messages) left out")
    cols = ["in_edge", "out_edge", "node", "delay_s", "mass", "height", "share_in", "share_out"]
    if len(messages) == 0:
        return pd.DataFrame(columns=cols), edges, warnings
    t0 = float(min(t_send.min(), t_recv.min()))
    n_bins = int((max(t_send.max(), t_recv.max()) - t0) / step) + 1
    big = edges.loc[~small, "edge"].to_numpy()
    keep = np.isin(codes, big)
    remap = np.full(len(uniq), -1)
    remap[big] = np.arange(len(big))
    arrivals = _signals(t_recv[keep], remap[codes[keep]], len(big), t0, n_bins, step)
    departures = _signals(t_send[keep], remap[codes[keep]], len(big), t0, n_bins, step)
    size = 1 << int(np.ceil(np.log2(n_bins + max_lag)))
    f_in = {e: np.conj(np.fft.rfft(arrivals[i], size)) for i, e in enumerate(big)}
    f_out = {e: np.fft.rfft(departures[i], size) for i, e in enumerate(big)}
    rows = []
    src, dst, cnt = edges["src"].to_numpy(), edges["dst"].to_numpy(), edges["count"].to_numpy()
    for e_out in big:
        for e_in in big:
            if dst[e_in] != src[e_out]:
                continue
            x = np.fft.irfft(f_in[e_in] * f_out[e_out], size)
            x = np.concatenate([x[size - max_lag:], x[:max_lag + 1]])
            peak = find_peak(x, max_lag, float(p["threshold"]))
            if peak is None:
                continue
            lag, mass, height = peak
            rows.append((int(e_in), int(e_out), int(src[e_out]), lag * step, mass, height,
                         mass / cnt[e_in], mass / cnt[e_out]))
    links = pd.DataFrame(rows, columns=cols)
    # step 4: per output edge, the sharpest inputs until they explain `cover` of it
    links = strongest_inputs(links, float(p["cover"]))
    edges["node_name"] = [str(nodes.names[d]) for d in edges["dst"]]
    edges["src_name"] = [str(nodes.names[s]) for s in edges["src"]]
    return links, edges, warnings


def strongest_inputs(links: pd.DataFrame, cover: float) -> pd.DataFrame:
    """Step 4: per output edge (in order of first appearance), its links by delay, then height
    downward (ties as they came), kept until their share_out reaches `cover`. One stable sort and
    a pass over the rows, not a pandas sort per group."""
    group = pd.factorize(links["out_edge"].to_numpy())[0]
    order = np.lexsort((-links["height"].to_numpy(dtype=np.float64), links["delay_s"].to_numpy(dtype=np.float64),
                        group))
    kept = []
    current, covered, full = -1, 0.0, False
    for i, g, share in zip(order.tolist(), group[order].tolist(), links["share_out"].to_numpy()[order].tolist(),
                           strict=True):
        if g != current:
            current, covered, full = g, 0.0, False
        full = full or covered >= cover
        if not full:
            kept.append(i)
            covered += share
    return links.iloc[kept].reset_index(drop=True) if kept else pd.DataFrame([], columns=list(links.columns))


def _patterns(links: pd.DataFrame, edges: pd.DataFrame, p: dict) -> list[PathPattern]:
    """Step 5: patterns from the link graph, with expected counts and per-node delays."""
    out_links: dict[int, list] = {}
    for row in links.itertuples(index=False):
        out_links.setdefault(row.in_edge, []).append(row)
    has_cause = set(links["out_edge"].tolist())
    name = dict(zip(edges["edge"], edges["name"], strict=True))
    count = dict(zip(edges["edge"], edges["count"], strict=True))
    min_count = float(p["min_count"])
    together = float(p["together"])

    def expand(edge: int, on_path: frozenset, depth: int) -> list[tuple[str, float, dict]]:
        """(text, probability, node delays) alternatives for the subtree under `edge`."""
        if depth > 30:
            return [(name[edge], 1.0, {})]
        kids = [r for r in out_links.get(edge, ()) if r.out_edge not in on_path]
        always = [r for r in kids if r.share_in >= together]
        optional = [r for r in kids if r.share_in < together]
        combos: list[tuple[list, float]] = [([], 1.0)]
        for r in always:
            combos = [(chosen + [r], pr) for chosen, pr in combos]
        if optional:
            rest = max(0.0, 1.0 - sum(min(r.share_in, 1.0) for r in optional))
            alts = [(c + [r], pr * min(r.share_in, 1.0)) for c, pr in combos for r in optional]
            combos = alts + ([(c, pr * rest) for c, pr in combos] if rest > 0 else [])
        out = []
        for chosen, pr in combos:
            parts = [(name[edge], pr, {})]
            for r in chosen:
                node = edges.loc[r.out_edge, "src_name"]
                sub = expand(int(r.out_edge), on_path | {int(r.out_edge)}, depth + 1)
                merged = []
                for text, prob, delays in parts:
                    for s_text, s_prob, s_delays in sub:
                        d = dict(delays)
                        for k, v in s_delays.items():
                            d[k] = d.get(k, 0.0) + v
                        d[node] = d.get(node, 0.0) + r.delay_s
                        merged.append((text + "\x00" + s_text, prob * s_prob, d))
                parts = [m for m in merged if m[1] * count[edge] >= min_count]
            for text, prob, delays in parts:
                head, *subs = text.split("\x00")
                out.append((head + (f"({','.join(sorted(subs))})" if subs else ""), prob, delays))
        return out

    table: dict[str, list] = {}
    for root in edges["edge"]:
        if root in has_cause or root not in out_links and count[root] < float(p["min_messages"]):
            continue
        for text, prob, delays in expand(int(root), frozenset({int(root)}), 0):
            c = count[root] * prob
            if c < min_count:
                continue
            slot = table.setdefault(text, [0.0, {}])
            slot[0] += c
            for k, v in delays.items():
                slot[1][k] = slot[1].get(k, 0.0) + v * c
    return [PathPattern(t, c, {k: v / c for k, v in sorted(d.items())})
            for t, (c, d) in sorted(table.items(), key=lambda kv: (-kv[1][0], kv[0]))[:MAX_PATTERNS]]


def infer(messages: pd.DataFrame, **params) -> PathsResult:
    """Path patterns (expected counts), node delays and edge latencies by Project5's convolution
    algorithm (parameters: see DEFAULTS and the module docstring)."""
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"convolution: unknown parameters {sorted(unknown)} (known: {sorted(DEFAULTS)})")
    p = {**DEFAULTS, **params}
    m = ensure_messages(messages)
    links, edges, warnings = find_links(m, p)
    patterns = _patterns(links, edges, p) if len(links) else []
    hist_edges = np.asarray(HIST_EDGES_S)
    names = [f"hist_{_ms(lo)}_{_ms(hi)}ms" for lo, hi in zip(hist_edges[:-1], hist_edges[1:], strict=True)]
    rows = []
    for node, g in links.groupby(links["out_edge"].map(edges.set_index("edge")["src_name"]), sort=True):
        w = g["mass"].to_numpy()
        d = g["delay_s"].to_numpy()
        rows.append([node, float((w * d).sum() / w.sum()), int(round(w.sum())),
                     *np.histogram(d, bins=hist_edges, weights=w)[0]])
    delays = pd.DataFrame(rows, columns=["node", "mean_s", "count", *names])
    nodes = node_codes(m)
    lat = edge_latency_frame(nodes, m)
    lat_of = [(edge_key(r.src, r.dst), float(r.mean_s)) for r in lat.itertuples(index=False)]   # read once
    for pat in patterns:
        pat.edge_latencies = {k: v for k, v in lat_of if k in pat.pattern}
    name = edges["name"].tolist()           # by edge id (the frame's own row labels)
    p["links"] = [(name[r.in_edge], name[r.out_edge], round(r.delay_s, 6), round(r.mass, 1))
                  for r in links.itertuples(index=False)]
    return PathsResult("convolution", patterns, delays, lat, p, warnings)


def _ms(s: float) -> str:
    return "inf" if not np.isfinite(s) else f"{s * 1000:g}"
