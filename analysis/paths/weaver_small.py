"""The joint choice's independent sets made smaller and solved exactly where small (weaver_joint.py's
_mwis), before HiGHS sees what is left:

- `reduce`: an incoming call whose best tuple holds no outgoing call another incoming call's tuples
  hold takes it (it could in any best choice), and its other tuples go; repeated, as that frees
  others (media 25 overlaid three times: a fifth fewer tuples for HiGHS; in all hardly any CPU time
  saved: 0.98 against 1.03 s of the 18 sets' independent sets, within the noise. Kept also because
  the optimum taken among equal-valued ones follows from it: without it hotel 125 takes another one
  for 4 parents);
- `split`: the parts (incoming calls linked by tuples sharing an outgoing call) of at most
  `MAX_OWNERS` incoming calls, `MAX_COMBOS` combinations and 62 distinct outgoing calls (a tuple's
  calls as the bits of an int64) are solved by trying every combination at once in numpy, for less
  than HiGHS's set-up of one program (media 25: most parts are two or three incoming calls with a few
  tuples each; 1,726 of the 2,069 tuples the program held). The least total value with no call in
  two tuples, one tuple per incoming call; ties go to the first combination in tuple order; a part
  with no feasible combination among its kept tuples goes to HiGHS.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

MAX_OWNERS = 5                  # incoming calls per part enumerated at most
MAX_COMBOS = 4096               # combinations per part enumerated at most
MAX_BITS = 62                   # distinct outgoing calls per part (bits of an int64)
BATCH = 256                     # parts enumerated at once (memory: BATCH x MAX_COMBOS values)
MAX_PASSES = 20                 # reduction passes at most


def reduce(t_of: np.ndarray, call: np.ndarray, owner: np.ndarray, value: np.ndarray) -> np.ndarray:
    """The tuples still worth a choice (a mask): an incoming call whose best tuple (the least value;
    ties: the first) holds no outgoing call another incoming call's remaining tuples hold takes it,
    and its other tuples go (in any best choice it can take that one instead). Repeated, as each
    removal frees others, `MAX_PASSES` times at most. Exact: the best total stays the same."""
    _, orow = np.unique(owner, return_inverse=True)
    no = int(orow.max(initial=-1)) + 1
    alive = np.ones(len(owner), dtype=bool)
    done = np.zeros(no, dtype=bool)
    by_value = np.lexsort((np.arange(len(owner)), value, orow))    # per incoming call, best first
    # the rows sorted once by (call, incoming call); each pass filters them, keeping that order
    srt = np.lexsort((orow[t_of], call))
    c_all, o_all, t_all = call[srt], orow[t_of[srt]], t_of[srt]
    for _ in range(MAX_PASSES):
        r = alive[t_all]
        c, o, t = c_all[r], o_all[r], t_all[r]
        if not len(c):
            break
        new_call = np.r_[True, c[1:] != c[:-1]]
        distinct = new_call | np.r_[True, o[1:] != o[:-1]]
        starts = np.flatnonzero(new_call)
        owners = np.add.reduceat(distinct.astype(np.int64), starts)  # incoming calls holding each call
        shared = np.repeat(owners > 1, np.diff(np.r_[starts, len(c)]))
        # each open incoming call's best remaining tuple, and whether it holds a shared call
        cand = by_value[alive[by_value] & ~done[orow[by_value]]]
        if not len(cand):
            break
        best = cand[np.r_[True, orow[cand][1:] != orow[cand][:-1]]]
        clash = np.zeros(len(owner), dtype=bool)
        clash[t[shared]] = True
        free = best[~clash[best]]
        if not len(free):
            break
        newly = np.zeros(no, dtype=bool)
        newly[orow[free]] = True
        keep = np.zeros(len(owner), dtype=bool)
        keep[free] = True
        alive &= ~newly[orow] | keep
        done |= newly
    return alive


def split(t_of: np.ndarray, call: np.ndarray, owner: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tuples taken in the parts solved here, a mask of the tuples left for HiGHS)."""
    ou, orow = np.unique(owner, return_inverse=True)
    cu, crow = np.unique(call, return_inverse=True)
    no = len(ou)
    graph = coo_matrix((np.ones(len(call)), (orow[t_of], no + crow)), shape=(no + len(cu),) * 2)
    _, lab = connected_components(graph, directed=False)
    part = lab[orow]                                 # per tuple
    n_parts = int(lab.max()) + 1
    owners = np.bincount(lab[:no], minlength=n_parts)
    per_owner = np.bincount(orow, minlength=no)
    # combinations: the product of the owners' tuple counts; distinct calls per part
    combos = np.ones(n_parts)
    np.multiply.at(combos, lab[:no], per_owner.astype(np.float64))
    widest = np.zeros(n_parts, dtype=np.int64)       # the enumeration pads each call's tuples to this
    np.maximum.at(widest, lab[:no], per_owner)
    first_row = np.unique(crow, return_index=True)[1]
    n_calls = np.bincount(part[t_of[first_row]], minlength=n_parts)
    easy = (owners <= MAX_OWNERS) & (widest.astype(np.float64) ** owners <= MAX_COMBOS) & (n_calls <= MAX_BITS)
    taken = []
    for k in range(1, MAX_OWNERS + 1):
        parts = np.flatnonzero(easy & (owners == k))
        for a in range(0, len(parts), BATCH):       # memory: BATCH x MAX_COMBOS values at most
            got, ok = _enumerate(k, parts[a:a + BATCH], part, orow, t_of, crow, value, lab)
            taken.append(got)
            easy[parts[a:a + BATCH][~ok]] = False   # no feasible combination among the kept tuples
    taken = np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)
    return np.sort(taken[easy[part[taken]]]), ~easy[part]


def _enumerate(k: int, parts: np.ndarray, part, orow, t_of, crow, value, lab) -> tuple[np.ndarray, np.ndarray]:
    """The best combination of each of these parts (each with k incoming calls), as tuple indices;
    and per part whether it has a feasible one."""
    if not len(parts):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    slot = np.full(int(lab.max()) + 1, -1)
    slot[parts] = np.arange(len(parts))
    tids = np.flatnonzero(slot[part] >= 0)
    p_of = slot[part[tids]]
    # each tuple's incoming call as 0..k-1 within its part, and its rank among that call's tuples
    o = np.lexsort((tids, orow[tids], p_of))
    tids, p_of = tids[o], p_of[o]
    ow = orow[tids]
    new_owner = np.r_[True, (p_of[1:] != p_of[:-1]) | (ow[1:] != ow[:-1])]
    new_part = np.r_[True, p_of[1:] != p_of[:-1]]
    owner_idx = np.cumsum(new_owner) - 1
    who = owner_idx - owner_idx[np.flatnonzero(new_part)][np.cumsum(new_part) - 1]
    rank = np.arange(len(tids)) - np.flatnonzero(new_owner)[owner_idx]
    width = int(rank.max()) + 1
    # each tuple's calls as bits: the calls numbered within the part
    rows = np.isin(t_of, tids)
    r_t, r_c = t_of[rows], crow[rows]
    at = np.empty(len(part), dtype=np.int64)
    at[tids] = np.arange(len(tids))
    rp = p_of[at[r_t]]
    oc = np.lexsort((r_c, rp))
    cnew = np.r_[True, (rp[oc][1:] != rp[oc][:-1]) | (r_c[oc][1:] != r_c[oc][:-1])]
    cidx = np.cumsum(cnew) - 1
    pnew = np.r_[True, rp[oc][1:] != rp[oc][:-1]]
    bit = np.empty(len(oc), dtype=np.int64)
    bit[oc] = cidx - cidx[np.flatnonzero(pnew)][np.cumsum(pnew) - 1]
    mask = np.zeros(len(tids), dtype=np.int64)
    np.bitwise_or.at(mask, at[r_t], np.left_shift(np.int64(1), bit))
    # per part, a (k, width) table of values (inf: no such tuple) and of masks
    val = np.full((len(parts), k, width), np.inf)
    msk = np.zeros((len(parts), k, width), dtype=np.int64)
    val[p_of, who, rank] = value[tids]
    msk[p_of, who, rank] = mask
    tot = val[:, 0, :]
    used = msk[:, 0, :]
    for j in range(1, k):                            # grow the combinations one incoming call at a time
        tot = (tot[:, :, None] + val[:, j, None, :]).reshape(len(parts), -1)
        clash = (used[:, :, None] & msk[:, j, None, :]) != 0
        used = (used[:, :, None] | msk[:, j, None, :]).reshape(len(parts), -1)
        tot = np.where(clash.reshape(len(parts), -1), np.inf, tot)
    best = np.argmin(tot, axis=1)
    ok = np.isfinite(tot[np.arange(len(parts)), best])
    # back to one tuple per incoming call: digits of `best` in base `width`
    digits = np.empty((len(parts), k), dtype=np.int64)
    rest = best
    for j in range(k - 1, -1, -1):
        digits[:, j] = rest % width
        rest = rest // width
    index = np.full((len(parts), k, width), -1)
    index[p_of, who, rank] = tids
    return index[np.arange(len(parts))[:, None], np.arange(k)[None, :], digits].ravel(), ok
