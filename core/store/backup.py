"""Backup and restore of the embedded store: a consistent copy of a live SQLite file, and putting
one back in place of the store while no node uses it.

The copy is SQLite's online backup API in one step: it reads one snapshot (WAL mode lets the node's
writer go on meanwhile), so the copy holds every transaction committed before it began and none
after. PostgreSQL has its own tools (pg_dump, base backups with WAL archiving): docs/observability.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.errors import InvalidInput, Unavailable
from core.store import schema


def _facts(conn: sqlite3.Connection) -> dict[str, Any]:
    version = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]
    by_state = dict(conn.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall())
    return {"schema_version": int(version), "jobs": sum(by_state.values()), "by_state": by_state}


def _check(path: Path) -> dict[str, Any]:
    """What a backup file holds, or InvalidInput saying why it is not a JobDeck store."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            ok = conn.execute("PRAGMA quick_check").fetchone()[0]
            if ok != "ok":
                raise InvalidInput(f"{path} is damaged: {ok}", field="path")
            facts = _facts(conn)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise InvalidInput(f"{path} is not a JobDeck SQLite store: {exc}", field="path") from None
    known = schema.load("sqlite")[-1].version
    if facts["schema_version"] > known:
        raise InvalidInput(f"{path} has schema version {facts['schema_version']}, newer than this JobDeck's "
                           f"{known}: restore it with the version that wrote it", field="path")  # fmt: skip
    return facts


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def backup(store: Path, dest: Path) -> dict[str, Any]:
    """Copy the store at `store` (a node may be running on it) to the new file `dest`; returns
    what the copy holds: schema version, job count, jobs by state, bytes."""
    if not store.is_file():
        raise InvalidInput(f"there is no store at {store} (--data-dir, or JOBDECK_DATABASE_URL=sqlite:///...)",
                           field="data_dir")  # fmt: skip
    if dest.exists():
        raise InvalidInput(f"{dest} exists already: give a new file name (a backup never overwrites)", field="path")
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    partial.unlink(missing_ok=True)
    src = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=30.0)
    try:
        out = sqlite3.connect(partial)
        try:
            src.backup(out)  # pages=-1: the whole file from one snapshot
            out.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        finally:
            out.close()
    finally:
        src.close()
    with open(partial, "rb") as f:
        os.fsync(f.fileno())
    facts = _check(partial)
    partial.rename(dest)
    _fsync_dir(dest.parent)
    return {**facts, "bytes": dest.stat().st_size, "path": str(dest)}


@contextlib.contextmanager
def _no_node(store: Path) -> Iterator[None]:
    """Hold the store's lock (the one a node holds while it runs), or say a node is running."""
    store.parent.mkdir(parents=True, exist_ok=True)
    with open(str(store) + ".lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Unavailable(f"a JobDeck node is running on {store}: stop it, then restore") from None
        yield


def restore(source: Path, store: Path) -> dict[str, Any]:
    """Put the backup `source` in place of the store at `store` (no node may be running on it).
    The store it replaces is kept beside it as `<name>.replaced-<time>`."""
    if not source.is_file():
        raise InvalidInput(f"there is no backup at {source}", field="path")
    facts = _check(source)
    with _no_node(store):
        incoming = store.with_name(store.name + ".restoring")
        with open(source, "rb") as src, open(incoming, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        kept = None
        if store.exists():
            # fold the old store's WAL into it first, so the kept copy is whole on its own
            old = sqlite3.connect(store)
            try:
                old.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                old.close()
            kept = store.with_name(f"{store.name}.replaced-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
            store.rename(kept)
        for suffix in ("-wal", "-shm"):
            Path(str(store) + suffix).unlink(missing_ok=True)
        incoming.rename(store)
        _fsync_dir(store.parent)
    return {**facts, "path": str(store), "replaced": str(kept) if kept else None}
