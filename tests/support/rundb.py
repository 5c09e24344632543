"""run.db files written table by table, raw cumulative counters as given, for the stretch reader
(analysis.model.stretches.load_stretches) and the diagnosis tests."""

from __future__ import annotations

from rundir.db import create_db

MONO0, STEP = 10.0, 0.1


def mono(seq):
    return MONO0 + seq * STEP


def write_run(path, counters, modules, edges, n_snapshots=8):
    """counters: {(module, dir): [(total_msgs, wait_ms, queued, errors) or None per seq]}."""
    path.mkdir()
    conn = create_db(path / "run.db")
    conn.executemany("INSERT INTO snapshots VALUES (?,?,?)", [(s, mono(s), 1e9 + s) for s in range(n_snapshots)])
    conn.executemany("INSERT INTO modules (id, kind, name, key, born, died) VALUES (?,?,?,?,?,?)",
                     [(m, k, f"{k}{m}", f"{k}:{m}", mono(b), None if e is None else mono(e))
                      for m, (k, b, e) in modules.items()])
    conn.executemany("INSERT INTO edges VALUES (?,?,?,?)",
                     [(p, c, mono(b), None if e is None else mono(e)) for p, c, b, e in edges])
    rows = [(s, m, d, *v) for (m, d), vs in counters.items() for s, v in enumerate(vs) if v is not None]
    conn.executemany("INSERT INTO counters (seq, module, dir, total_msgs, wait_ms, queued, errors) "
                     "VALUES (?,?,?,?,?,?,?)", rows)
    conn.commit()
    conn.close()
    return path
