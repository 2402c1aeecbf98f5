"""The SQLite writer's group commit: a failing operation is undone alone, whether it shares its
transaction with others (a savepoint each) or has it to itself (no savepoint: the transaction is)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from core.errors import Conflict
from core.store._sqlite_writer import Tx, Writer


def _insert(name: str, fail: bool = False) -> Any:
    def op(tx: Tx) -> str:
        tx.conn.execute("INSERT INTO written (name) VALUES (?)", (name,))
        tx.emit("test.event", None, None, {"name": name})
        if fail:
            raise Conflict(f"{name} refused after writing")
        return name

    return op


def _rows(path: Path) -> tuple[list[str], list[str]]:
    conn = sqlite3.connect(path)
    try:
        actors = [r[0] for r in conn.execute("SELECT name FROM written ORDER BY rowid")]
        events = [r[0] for r in conn.execute("SELECT body FROM events WHERE type = 'test.event' ORDER BY seq")]
        return actors, events
    finally:
        conn.close()


async def test_a_failing_operation_is_undone_alone_in_a_batch_and_alone(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    committed: list[str] = []
    writer = Writer(path, lambda: 0.0, lambda events: committed.extend(e.type for e in events))
    await writer.start()
    try:
        await writer.run(lambda tx: tx.conn.execute("CREATE TABLE written (name TEXT NOT NULL)") and None)
        # Alone in its transaction: nothing of it stays, and the next transaction goes on.
        try:
            await writer.run(_insert("lonely", fail=True))
            raise AssertionError("the failing operation did not raise")
        except Conflict:
            pass
        assert await writer.run(_insert("after")) == "after"
        # In one batch with others (queued before the writer takes them): only it is undone.
        futures = [writer.run(_insert(n, fail=n == "bad")) for n in ("a", "bad", "b")]
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert results[0] == "a" and results[2] == "b" and isinstance(results[1], Conflict), results
    finally:
        await writer.stop()
    actors, events = _rows(path)
    assert actors == ["after", "a", "b"], f"audit rows left: {actors}"
    assert len(events) == 3 and all(b'"bad"' not in e and b'"lonely"' not in e for e in events), events
    assert committed.count("test.event") == 3, committed


async def test_a_wal_grown_by_a_burst_is_cut_back_once_checkpointed(tmp_path: Path, monkeypatch: Any) -> None:
    """A burst (a big batch, a prune) grows the WAL; once the checkpoints have copied it all, the
    file is emptied, with no further write needed (a WAL of gigabytes stayed after maintenance)."""
    import time

    from core.store import _sqlite_writer

    monkeypatch.setattr(_sqlite_writer, "WAL_SIZE_LIMIT", 1024 * 1024)
    path = tmp_path / "w.db"
    wal = path.with_name("w.db-wal")
    writer = Writer(path, lambda: 0.0, lambda events: None)
    await writer.start()
    try:
        await writer.run(lambda tx: tx.conn.execute("CREATE TABLE written (name TEXT NOT NULL)") and None)
        reader = sqlite3.connect(path)  # a reader that comes and goes, as the API's do
        blob = "x" * 1000

        def burst(tx: Tx) -> None:
            tx.conn.executemany("INSERT INTO written (name) VALUES (?)", [(blob,)] * 8000)

        await writer.run(burst)
        grown = wal.stat().st_size
        assert grown > 4 * 1024 * 1024, f"the burst should grow the WAL past 4 MB, got {grown:,} bytes"
        deadline = time.monotonic() + 10
        while wal.stat().st_size > 1024 * 1024 and time.monotonic() < deadline:
            assert reader.execute("SELECT count(*) FROM written").fetchone()[0] == 8000
            await asyncio.sleep(0.05)
        reader.close()
        assert wal.stat().st_size <= 1024 * 1024, f"the WAL stayed at {wal.stat().st_size:,} bytes (was {grown:,})"
    finally:
        await writer.stop()
