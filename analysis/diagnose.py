"""Diagnose runs and JSON snapshots with any number of rule variants.

API for the analysis that builds on the diagnosis (labelling, scoring):

    diagnose_run(run_dir, variants=("flowdiagnoser", "nest-cf")) -> pandas.DataFrame
        One row per variant, direction, module and snapshot, columns:
          variant   str       canonical variant name, e.g. 'flowdiagnoser:theta=2', 'nest-cf:anw=off'
          dir       str       'in' | 'out'
          module    int       run.db modules.id
          kind      str       app | socket | tcp | ipeth | ...
          seq       int       run.db snapshots.seq
          label     str|None  HEALTHY | DONTCARE | BLOCKED | STALLED (label variants; None for cf)
          cf        float     certainty factor (cf variants; NaN for label variants)
          positive  bool      the variant's positive diagnosis (STALLED / cf above its threshold)
          invalid   bool      no valid counter delta for this module/direction/snapshot (thesis 3.4:
                              a decreasing counter; also the run's first snapshot and missing rows):
                              score without these rows

    diagnose_stretches(run_or_stretches, variants) -> list[StretchDiagnosis]
        The same results as arrays, per stretch of constant graph: for each variant name and
        direction a (result, positive) pair of modules x snapshots arrays (result: int8 index into
        LABELS, or float certainty factor), aligned with stretch.modules and stretch.seqs.

    diagnose_json(obj, variants) -> dict
        The `nestlab diagnose --json` output for a parsed JSON document (docs/diagnosis.md).

`variants` are names such as 'flowdiagnoser:theta=3' or Variant objects (analysis.variants).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.model.batch import Batch
from analysis.model.stretches import DIRS, KINDS, RunStretches, Stretch, load_stretches, stretch_from_json
from analysis.plugins import problem as plugin_problem
from analysis.variants import DEFAULT_VARIANTS, LABELS, SYSTEMS, Variant, variant_specs
from rundir.errors import UserError

CF_DECIMALS = 4  # certainty factors in JSON output


def as_variants(variants) -> list[Variant]:
    """Variants given any way analysis.variants.variant_specs takes them (None: DEFAULT_VARIANTS)."""
    empty = variants is None or (isinstance(variants, list | tuple) and not variants)
    return [v for _, v in variant_specs(DEFAULT_VARIANTS if empty else variants)]


@dataclass
class StretchDiagnosis:
    stretch: Stretch
    # variant name -> direction -> (result, positive), each modules x snapshots
    results: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]


def _over_time(variant: Variant, diags: list[StretchDiagnosis]) -> None:
    """Apply a variant's rule over consecutive snapshots (e.g. confirm=2) across all stretches."""
    make = variant.system.over_time
    rule = make(**variant.params) if make is not None else None
    if rule is None or not diags:
        return
    for d in DIRS:
        mods, seqs, pos, kinds, shapes = [], [], [], [], []
        for sd in diags:
            st = sd.stretch
            p = sd.results[variant.name][d][1]
            mods.append(np.repeat(np.asarray(_ids(st), dtype=np.int64), st.t))
            seqs.append(np.tile(st.seqs, st.n))
            pos.append(p.ravel())
            kinds.append(np.repeat(np.array([KINDS.index(k) if k in KINDS else -1 for k in st.kinds],
                                            dtype=np.int8), st.t))
            shapes.append(p.shape)
        new = rule(np.concatenate(mods), np.concatenate(seqs), np.concatenate(pos), np.concatenate(kinds))
        at = 0
        for sd, shape in zip(diags, shapes, strict=True):
            size = shape[0] * shape[1]
            res = sd.results[variant.name][d][0]
            sd.results[variant.name][d] = (res, new[at:at + size].reshape(shape))
            at += size


def _ids(st: Stretch) -> list[int]:
    """Integer identity of modules across stretches (run.db ids; positions for JSON ids)."""
    if all(isinstance(m, int | np.integer) for m in st.modules):
        return [int(m) for m in st.modules]
    return list(range(st.n))


def diagnose_stretches(source: RunStretches | Iterable[Stretch], variants=None, where: str | None = None,
                       engine_metrics=None) -> list[StretchDiagnosis]:
    """`where` names the source in errors (default: the run's directory; none for stretches);
    `engine_metrics` (analysis.model.engine_metrics.EngineMetrics) go with stretches that are not a
    RunStretches (the live engine's windows), which carries its own."""
    vs = as_variants(variants)
    stretches = source.stretches if isinstance(source, RunStretches) else list(source)
    if where is None and isinstance(source, RunStretches):
        where = str(source.path)
    engine = source.engine_metrics if isinstance(source, RunStretches) else engine_metrics
    diags = [StretchDiagnosis(st, {}) for st in stretches]
    # A run of several monitored hosts: each host's stretches are diagnosed alone, so that no variant
    # relates modules of different hosts (analysis.model.hosts). One host: one group, as always.
    groups: dict[str | None, list[int]] = {}
    for k, st in enumerate(stretches):
        groups.setdefault(st.host, []).append(k)
    for members in groups.values():
        # every cell of the group's stretches at once, shared by the variants, with what they read of the run
        batch = Batch([stretches[k] for k in members], source=where, engine_metrics=engine)
        for v in vs:
            flat = _run_variant(v, batch)
            per_dir = {d: (batch.split(flat[d][0]), batch.split(flat[d][1])) for d in DIRS}
            for j, k in enumerate(members):
                diags[k].results[v.name] = {d: (per_dir[d][0][j], per_dir[d][1][j]) for d in DIRS}
    for v in vs:
        _over_time(v, diags)
    return diags


def _run_variant(v: Variant, batch: Batch) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """v.diagnose(batch), its result checked against the contract (docs/plugins.md). A plug-in that
    fails or breaks the contract is named (never the run: the run is fine, the rule is not)."""
    builtin = SYSTEMS.is_registered(v.system) and SYSTEMS.is_builtin(v.system.name)
    try:
        out = v.diagnose(batch)
        problem = _contract_problem(v, out, batch.n_cells)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - a built-in's failure is the run's (rundir.runs.guarded)
        if builtin:
            raise
        raise UserError(f"variant {v.name} ({_origin(v)}) failed on {batch.source or 'the snapshots'}: "
                        f"{plugin_problem(e)}") from None
    if problem:
        raise UserError(f"variant {v.name} ({_origin(v)}): {problem} (docs/plugins.md)")
    return out


def _origin(v: Variant) -> str:
    return SYSTEMS.origin(v.system.name) if SYSTEMS.is_registered(v.system) else "not registered"


def _contract_problem(v: Variant, out, n: int) -> str | None:
    """What is wrong with a system's result: per direction ('in', 'out') a (result, positive) pair of
    flat arrays over the batch's n cells; result int codes into LABELS (label systems) or floats
    (cf systems); positive bool."""
    if not isinstance(out, dict) or set(out) != set(DIRS):
        return f"diagnose returned {type(out).__name__} {sorted(out) if isinstance(out, dict) else ''}, " \
               f"expected a dict with keys 'in' and 'out'"
    for d in DIRS:
        pair = out[d]
        if not isinstance(pair, tuple) or len(pair) != 2:
            return f"{d}: expected a (result, positive) pair"
        res, pos = (np.asarray(a) for a in pair)
        if res.shape != (n,) or pos.shape != (n,):
            return f"{d}: arrays of shapes {res.shape} and {pos.shape}, expected ({n},) each (one per cell)"
        if pos.dtype != bool:
            return f"{d}: positive has dtype {pos.dtype}, expected bool"
        if v.kind == "label" and (res.dtype.kind not in "iu" or (n and (res.min() < 0 or res.max() >= len(LABELS)))):
            return f"{d}: a label system's result must be integer codes 0..{len(LABELS) - 1} (LABELS)"
        if v.kind == "cf" and res.dtype.kind != "f":
            return f"{d}: a cf system's result must be floats (certainty factors)"
    return None


def empty_diagnosis() -> pd.DataFrame:
    """diagnose_run's frame with no rows (a run with snapshots but no counters: nothing to diagnose)."""
    return pd.DataFrame({"variant": pd.Categorical([]), "dir": pd.Categorical([], categories=["in", "out"]),
                         "module": pd.Series([], dtype=np.int64), "kind": pd.Categorical([]),
                         "seq": pd.Series([], dtype=np.int64), "label": pd.Categorical([]),
                         "cf": pd.Series([], dtype=float), "positive": pd.Series([], dtype=bool),
                         "invalid": pd.Series([], dtype=bool)})


def diagnose_run(run_dir: str | Path | RunStretches, variants=None) -> pd.DataFrame:
    """Every snapshot of a run with every variant, as one long frame (module docstring)."""
    run = run_dir if isinstance(run_dir, RunStretches) else load_stretches(run_dir)
    vs = as_variants(variants)
    diags = diagnose_stretches(run, vs)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("module", "kind", "seq", "code", "cf", "positive", "invalid")}
    blocks: list[tuple[int, int, int]] = []   # (variant, direction, rows) of each block of rows
    names = [v.name for v in vs]
    kinds = sorted(set(run.module_kind.values()))
    ids = np.fromiter(sorted(run.module_kind), dtype=np.int64, count=len(run.module_kind))
    codes = np.array([kinds.index(run.module_kind[m]) for m in ids.tolist()], dtype=np.int16)
    for sd in diags:
        st = sd.stretch
        mods = np.asarray(st.modules, dtype=np.int64)
        mod = np.repeat(mods, st.t)
        kind = np.repeat(codes[np.searchsorted(ids, mods)], st.t)   # by module, not id
        seq = np.tile(st.seqs, st.n)
        for vi, v in enumerate(vs):
            for di, d in enumerate(DIRS):
                res, pos = sd.results[v.name][d]
                size = res.size
                blocks.append((vi, di, size))
                cols["module"].append(mod)
                cols["kind"].append(kind)
                cols["seq"].append(seq)
                if v.kind == "label":
                    cols["code"].append(res.ravel().astype(np.int8))
                    cols["cf"].append(np.full(size, np.nan))
                else:
                    cols["code"].append(np.full(size, -1, dtype=np.int8))
                    cols["cf"].append(res.ravel())
                cols["positive"].append(pos.ravel())
                cols["invalid"].append(st.counters[d].invalid.ravel())
    if not diags:
        return pd.DataFrame({k: [] for k in
                             ("variant", "dir", "module", "kind", "seq", "label", "cf", "positive", "invalid")})
    flat = {k: np.concatenate(v) for k, v in cols.items()}
    vi, di, size = (np.array(x) for x in zip(*blocks, strict=True))
    return pd.DataFrame({
        "variant": pd.Categorical.from_codes(np.repeat(vi.astype(np.int16), size), names),
        "dir": pd.Categorical.from_codes(np.repeat(di.astype(np.int8), size), list(DIRS)),
        "module": flat["module"],
        "kind": pd.Categorical.from_codes(flat["kind"], kinds),
        "seq": flat["seq"],
        "label": pd.Categorical.from_codes(flat["code"], list(LABELS)),
        "cf": flat["cf"],
        "positive": flat["positive"],
        "invalid": flat["invalid"],
    }, copy=False)   # the arrays are this function's own: no second copy of a long frame


def diagnose_json(obj, variants=None, where: str = "input") -> dict:
    """`nestlab diagnose --json` output for a parsed document (raises UserError on bad input)."""
    st = stretch_from_json(obj, where)
    vs = as_variants(variants)
    (sd,) = diagnose_stretches([st], vs, where=where)
    out = []
    for v in vs:
        snaps = []
        for s in range(st.t):
            snap = {}
            for d in DIRS:
                res, pos = sd.results[v.name][d]
                per = {}
                for i, m in enumerate(st.modules):
                    r = LABELS[res[i, s]] if v.kind == "label" else round(float(res[i, s]), CF_DECIMALS) + 0.0
                    per[m] = {"result": r, "positive": bool(pos[i, s])}
                snap[d] = per
            snaps.append(snap)
        out.append({"variant": v.name, "params": {p.name: v.params[p.name] for p in v.system.params},
                    "snapshots": snaps})
    return {"variants": out}
