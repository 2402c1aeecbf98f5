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


def _wal_restarts(wal: Path) -> int:
    """The WAL header's checkpoint sequence number: one more each time the WAL starts from its beginning."""
    with wal.open("rb") as f:
        return int.from_bytes(f.read(16)[12:16], "big")


async def test_a_wal_under_steady_writes_starts_again_in_the_same_file_never_truncated(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """While the writer commits, the checkpoints keep the WAL bounded by having it start again from its
    beginning, in the file it has: they never truncate it (an ftruncate of a 64-256 MB WAL held every
    write 16-90 ms, and a file grown again costs each commit more). So once the file has reached the
    size limit it never gets smaller than that while writes go on, and it never grows far past it."""
    import itertools
    import threading
    import time

    from core.store import _sqlite_writer

    limit = 1024 * 1024
    monkeypatch.setattr(_sqlite_writer, "WAL_SIZE_LIMIT", limit)
    monkeypatch.setattr(_sqlite_writer, "RESTART_AT", limit // 2, raising=False)
    monkeypatch.setattr(_sqlite_writer, "CHECKPOINT_EVERY", 0.05)
    # a loaded machine may pause the writes a second: this test is about a WAL under writes, not an idle one
    monkeypatch.setattr(_sqlite_writer, "IDLE_BEFORE_TRUNCATE", 3600.0, raising=False)
    path = tmp_path / "w.db"
    wal = path.with_name("w.db-wal")
    writer = Writer(path, lambda: 0.0, lambda events: None)
    await writer.start()
    stop = threading.Event()

    def reader() -> None:  # readers that come and go, as the API's do
        conn = sqlite3.connect(path)
        try:
            while not stop.is_set():
                conn.execute("SELECT count(*) FROM written").fetchone()
                time.sleep(0.002)
        finally:
            conn.close()

    readers = [threading.Thread(target=reader) for _ in range(2)]
    try:
        await writer.run(lambda tx: tx.conn.execute("CREATE TABLE written (n INTEGER PRIMARY KEY, body TEXT)") and None)
        for t in readers:
            t.start()
        blob = "x" * 1000
        sizes: list[int] = []
        restarts0 = _wal_restarts(wal)
        n = 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (len(sizes) < 300 or _wal_restarts(wal) - restarts0 < 3):

            def write(tx: Tx, first: int = n) -> None:  # ~15 pages a commit: inserts, and a prune of old rows
                tx.conn.executemany("INSERT INTO written VALUES (?, ?)", [(first + i, blob) for i in range(40)])
                tx.conn.execute("DELETE FROM written WHERE n < ?", (first - 400,))

            await writer.run(write)
            n += 40
            sizes.append(wal.stat().st_size)
            await asyncio.sleep(0.001)
        restarts = _wal_restarts(wal) - restarts0
    finally:
        stop.set()
        for t in readers:
            if t.is_alive():
                t.join()
        await writer.stop()
    assert restarts >= 3, f"the WAL should have started again several times in {len(sizes)} commits, got {restarts}"
    # a file only ever cut back to the limit: never below its own largest size up to then, nor below the limit
    largest = itertools.accumulate(sizes, max)
    shrunk = [(i, s) for i, (s, top) in enumerate(zip(sizes, largest, strict=True)) if s < min(top, limit)]
    assert not shrunk, f"the WAL was truncated while the writer worked: (commit, size) {shrunk[:5]}"
    assert max(sizes) <= 8 * limit, f"the WAL grew to {max(sizes):,} bytes (limit {limit:,}): {sizes[::10]}"
