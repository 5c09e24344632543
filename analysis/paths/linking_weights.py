"""Link probabilities for WAP5's message linking (wap5-paper.txt 5.1, step 2), from the possible
links (child message B>C, parent message X>B, gap = the child's send time minus the parent's
arrival, both on B's clock).

- `wap5_weights`: the paper's model. One exponential per output pair B>C, weight
  `exp(-gap / d[B>C])`; spontaneity weighs like a link of delay `y * d`, i.e. `exp(-y)`; normalised
  per child. Monotone in the gap, so a message's likeliest cause is always the latest arrival.
- `edge_weights` (`model="edges"`): the paper's own suggestion ("it is possible to iterate over steps
  (1) and (2) to improve the estimate of lambda") carried one step further: a mixture per output
  pair B>C whose components are B's *input* edges X>B, each with its own share `pi[X>B>C]` and mean
  delay `d[X>B>C]` (density `pi/d * exp(-gap/d)`), plus spontaneity (share `pi_s[B>C]`, density
  `exp(-y) / d[B>C]`: WAP5's spontaneity weight at B>C's own scale). Shares and means are
  re-estimated from the link probabilities (expectation-maximisation) for `rounds` rounds, starting
  from the paper's `d[B>C]`. Within one input edge the ranking stays by recency; across input edges
  it follows how B really behaves, e.g. an RPC server's reply is caused by its last nested reply,
  not by the call it serves, whenever it makes nested calls, so the call's link fades away.

Both return (probability per link, probability of spontaneity per message).
"""

from __future__ import annotations

import math

import numpy as np

BLOCK = 1 << 20   # links per step of a gather: temporaries small enough to be reused, not faulted in


def _normalise(child: np.ndarray, w: np.ndarray, w_spont: np.ndarray, n: int):
    """(w / total, w_spont / total) per child; w is divided in place (the callers' own array)."""
    total = np.bincount(child, weights=w, minlength=n) + w_spont
    for a in range(0, len(w), BLOCK):
        w[a:a + BLOCK] /= total[child[a:a + BLOCK]]
    return w, w_spont / total


def wap5_weights(child: np.ndarray, gap: np.ndarray, d: np.ndarray, y: float, n: int, reuse: bool = False):
    """d: per message, its output pair's mean causal delay (s). In place on one array of the links'
    size, a block at a time (the same values as exp(-max(gap, 0) / d)); reuse: that array is `gap`
    itself (the caller's to give up)."""
    w = gap if reuse else np.empty_like(gap)
    for a in range(0, len(w), BLOCK):
        part = w[a:a + BLOCK]
        np.maximum(gap[a:a + BLOCK], 0, out=part)
        part /= d[child[a:a + BLOCK]]
        np.negative(part, out=part)
        np.exp(part, out=part)
    return _normalise(child, w, np.full(n, math.exp(-y)), n)


def edge_weights(child: np.ndarray, parent: np.ndarray, gap: np.ndarray, src: np.ndarray,
                 dst: np.ndarray, n_nodes: int, d: np.ndarray, y: float, rounds: int, d_min: float = 1e-9):
    """The input-edge mixture (module docstring). src, dst: node codes per message; d: per message,
    the paper's d of its output pair (the starting point and the spontaneity scale); d_min: the
    floor of every mean (linking's `d_min`)."""
    n = len(src)
    gap = np.clip(gap, 0, None)
    out = src * n_nodes + dst                              # a message's output pair B>C
    out_key, out_id = np.unique(out, return_inverse=True)
    n_out = np.bincount(out_id, minlength=len(out_key)).astype(np.float64)
    # a link's component: (input node X, output pair B>C); B is the child's sender
    comp = src[parent].astype(np.int64) * len(out_key) + out_id[child]
    comp_key, comp_id = np.unique(comp, return_inverse=True)
    comp_out = comp_key % len(out_key)
    d_out = np.maximum(d, 1e-9)
    d_comp = np.bincount(comp_id, weights=d_out[child], minlength=len(comp_key))
    d_comp /= np.maximum(np.bincount(comp_id, minlength=len(comp_key)), 1)
    pi_comp = np.ones(len(comp_key))
    pi_spont = np.ones(len(out_key))
    spont_scale = math.exp(-y) / d_out
    for r in range(max(rounds, 0) + 1):
        dc = np.maximum(d_comp, d_min)
        w = pi_comp[comp_id] / dc[comp_id] * np.exp(-gap / dc[comp_id])
        p, p_spont = _normalise(child, w, pi_spont[out_id] * spont_scale, n)
        if r == rounds:
            return p, p_spont
        mass = np.bincount(comp_id, weights=p, minlength=len(comp_key))
        d_comp = np.where(mass > 0, np.bincount(comp_id, weights=p * gap, minlength=len(comp_key))
                          / np.maximum(mass, 1e-300), d_comp)
        pi_comp = mass / n_out[comp_out]
        pi_spont = np.bincount(out_id, weights=p_spont, minlength=len(out_key)) / n_out
    raise AssertionError("unreachable")
