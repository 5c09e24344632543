"""Bringing a run's data back from the nodes: the collector's run.db (merged into the local one)
and every node's logs. Used at the end of a run, and by `nestlab cleanup` for a killed one."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from harness.backends.ssh import reported
from harness.backends.ssh.node import SshNode
from harness.backends.ssh.transport import SshError
from rundir.nodemerge import NodeRecording, merge_nodes, merge_trace
from rundir.recorder import merge_collector_db


def fetch_collector_db(node: SshNode, remote_db: str, run_dir: Path, db: sqlite3.Connection,
                       checkpoint=None) -> int:
    """Copy the collector's database from the node and merge its tables into the local run.db
    (whose processes, faults and events the runner wrote). Returns the snapshots merged."""
    if checkpoint is not None:
        try:
            checkpoint()
        except Exception:  # noqa: BLE001 - the -wal file is copied along instead
            pass
    tmp = run_dir / "collector.db"
    for suffix in ("", "-wal"):
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)
        if suffix == "" or node.exists(remote_db + suffix):
            node.get(remote_db + suffix, Path(f"{tmp}{suffix}"))
    try:
        return merge_collector_db(db, tmp)
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)


def fetch_logs(node: SshNode, remote_dir: str, local_dir: Path, keep: set[str] | None = None) -> int:
    """Copy the regular files in the node's `remote_dir` into `local_dir`; returns how many. A name
    the node lists becomes a local path only if it is a plain file name (no '..', no separator, not
    absolute); entries that are not regular files are not copied (a FIFO would hang the copy); a name
    in `keep` is not replaced (default: what `local_dir` holds already: what was recorded stays).
    Names copied are added to `keep`, so that one set shared by the nodes keeps one node from
    replacing another's logs. What was refused is one line (SshError) naming the node and each name,
    raised after every other file was copied."""
    local_dir.mkdir(parents=True, exist_ok=True)
    if keep is None:
        keep = set(os.listdir(local_dir))
    try:
        entries = node.conn.sftp.listdir_attr(remote_dir)
    except OSError:
        return 0
    refused, copied = [], 0
    for entry in entries:
        name = entry.filename
        why = reported.file_name(name)
        if why is None and not (entry.st_mode is not None and stat.S_ISREG(entry.st_mode)):
            why = "not a regular file"
        if why is None and name in keep:
            why = f"{local_dir.name}/ has a file of that name already (kept)"
        if why is not None:
            refused.append(f"{name!r} ({why})")
            continue
        keep.add(name)
        node.get(f"{remote_dir}/{name}", local_dir / name)
        copied += 1
    if refused:
        raise SshError(f"{node.p.where}: refused {len(refused)} of the files listed in {remote_dir}: "
                       f"{', '.join(refused)}; the other {copied} were brought back")
    return copied


def fetch_db(node: SshNode, remote_db: str, local: Path, checkpoint=None) -> Path:
    """Copy a database of the node's (with its -wal, after asking the node to checkpoint it) to `local`."""
    if checkpoint is not None:
        try:
            checkpoint()
        except Exception:  # noqa: BLE001 - the -wal file is copied along instead
            pass
    for suffix in ("", "-wal"):
        Path(f"{local}{suffix}").unlink(missing_ok=True)
        if suffix == "" or node.exists(remote_db + suffix):
            node.get(remote_db + suffix, Path(f"{local}{suffix}"))
    return local


def _remove(local: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{local}{suffix}").unlink(missing_ok=True)


def bring_back_recordings(nodes: dict[str, SshNode], collector_dbs: dict[str, str], trace_dbs: dict[str, str],
                          reference: str, clocks, run_dir: Path, db: sqlite3.Connection | None,
                          checkpoint=None) -> list[str]:
    """Every collector's run.db merged into the run's `db` on the reference node's timeline and every
    drainer's trace with its node's offset (rundir/nodemerge.py; one collector alone: its tables as
    they are). `clocks`: the offsets measured at the start (Clocks, or {node: offset}). Returns what
    could not be brought back, one text per node; what could is merged all the same."""
    errors: list[str] = []
    if db is None:
        return errors

    def offset(name: str) -> float:
        if clocks is None:
            return 0.0
        if isinstance(clocks, dict):
            return float(clocks.get(name, 0.0))
        return clocks.nodes[name].offset if name in clocks.nodes else 0.0

    fetched: dict[str, Path] = {}
    for name, remote in collector_dbs.items():
        try:
            fetched[name] = fetch_db(nodes[name], remote, run_dir / f"collector-{name}.db",
                                     (lambda n=name, r=remote: checkpoint(n, r)) if checkpoint else None)
        except Exception as e:  # noqa: BLE001 - the other nodes' recordings still come back
            errors.append(f"run.db from {name}: {e}")
    try:
        if reference in fetched and len(collector_dbs) == 1:
            merge_collector_db(db, fetched[reference])
        elif reference in fetched:
            others = [NodeRecording(n, p, offset(n)) for n, p in fetched.items() if n != reference]
            merge_nodes(db, NodeRecording(reference, fetched[reference]), others)
        elif fetched:   # the reference's is lost: the first other node's snapshots are the grid
            grid, *rest = fetched
            errors.append(f"run.db from {reference} (the reference clock's) is missing: the other nodes' "
                          f"recordings are merged on {grid}'s snapshots, converted to {reference}'s clock")
            merge_nodes(db, NodeRecording(grid, fetched[grid], offset(grid)),
                        [NodeRecording(n, fetched[n], offset(n)) for n in rest])
    except Exception as e:  # noqa: BLE001
        errors.append(f"merging the collectors' run.db: {e}")
    finally:
        for p in fetched.values():
            _remove(p)
    for name, remote in trace_dbs.items():
        local = run_dir / f"trace-{name}.db"
        try:
            if not nodes[name].exists(remote):
                continue   # the drainer never started there
            fetch_db(nodes[name], remote, local, (lambda n=name, r=remote: checkpoint(n, r)) if checkpoint else None)
            merge_trace(db, NodeRecording(name, local, offset(name)))
        except Exception as e:  # noqa: BLE001
            errors.append(f"message trace from {name}: {e}")
        finally:
            _remove(local)
    return errors
