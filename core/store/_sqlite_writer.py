"""The SQLite store's one writer thread: group commit, the outbox, and migrations."""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from core.errors import JobDeckError, Unavailable
from core.model import iso, labels_from_text, labels_satisfied
from core.store import schema
from core.store.audit import AuditScope
from core.store.base import Event

log = logging.getLogger("jobdeck.store")

Trace = Callable[[str], None]
MAX_OPS_PER_COMMIT = 2000
CHECKPOINT_EVERY = 0.5  # seconds
WAL_SIZE_LIMIT = 64 * 1024 * 1024  # bytes
RESTART_AT = WAL_SIZE_LIMIT // 2  # bytes of WAL past which a checkpoint has the next write start it again
READER_WAIT = 0.05  # seconds a restarting or truncating checkpoint waits for readers before it gives up
RESTART_REST = 1024  # frames a PASSIVE checkpoint left (readers held them) up to which a RESTART copies them
IDLE_BEFORE_TRUNCATE = 1.0  # seconds without a commit after which a checkpoint may empty the WAL file
NEXT_JOB_ID = (
    "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0), "
    "coalesce((SELECT max(id) FROM jobs), 0)) + 1"
)


# Rows a multi-row statement takes at most (insert_values, update_from_values): its statement text
# (cached by the sqlite3 module per text) is one per row count up to this.
ROWS_PER_STATEMENT = 256


def _values_lists(rows: Sequence[Sequence[Any]]) -> Iterator[tuple[str, list[Any]]]:
    """The rows as VALUES lists of at most ROWS_PER_STATEMENT rows: ("(?, ?), (?, ?)", their values)."""
    for i in range(0, len(rows), ROWS_PER_STATEMENT):
        part = rows[i : i + ROWS_PER_STATEMENT]
        one = "(" + ", ".join("?" * len(part[0])) + ")"
        yield ", ".join([one] * len(part)), [v for r in part for v in r]


def insert_values(conn: sqlite3.Connection, head: str, rows: Sequence[Sequence[Any]]) -> None:
    """`head` ("INSERT INTO t (a, b)") with one VALUES list of many rows: one statement where
    executemany runs one a row. Each statement is a release and a take of the GIL by the writer
    thread, which then waits for the event loop to let go of it (up to the switch interval): an
    executemany of 64 events was 64 of those waits."""
    for values, params in _values_lists(rows):
        conn.execute(f"{head} VALUES {values}", params)


def update_from_values(
    conn: sqlite3.Connection, table: str, columns: Sequence[str], keys: Sequence[str], rows: Sequence[Sequence[Any]]
) -> None:
    """UPDATE `table` SET each of `columns` to its own value per row, in one statement over a VALUES
    list (see insert_values): each row is (*values, *key values), the key (`keys`) unique per row."""
    n = len(columns)
    sets = ", ".join(f"{c} = v.column{i + 1}" for i, c in enumerate(columns))
    match = " AND ".join(f"{table}.{k} = v.column{n + i + 1}" for i, k in enumerate(keys))
    for values, params in _values_lists(rows):
        conn.execute(f"UPDATE {table} SET {sets} FROM (VALUES {values}) AS v WHERE {match}", params)


def connect(path: Path, *, readonly: bool = False, trace: Trace | None = None) -> sqlite3.Connection:
    """A connection in WAL mode with the pragmas JobDeck relies on; `trace` sees every statement
    it runs, with its parameters filled in (tests/store/test_plans.py reads their plans)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    if trace is not None:
        conn.set_trace_callback(trace)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")  # a commit survives power loss; group commit pays for it
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("PRAGMA cache_size=-65536")
    conn.execute("PRAGMA temp_store=MEMORY")
    # A WAL grown by a burst (a big batch, a bulk action) is cut back to this once a checkpoint
    # has copied it all: without it the file keeps its largest size for good.
    conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
    if readonly:
        conn.execute("PRAGMA query_only=1")
    return conn


def migrate(conn: sqlite3.Connection) -> int:
    """Apply the numbered files of migrations/sqlite (core.store.schema) not yet applied; return the schema version.

    Refuses to run against a database whose schema is newer than this code knows.
    """
    files = schema.load("sqlite")  # first: a broken install writes nothing
    known = files[-1].version
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, applied_at REAL NOT NULL)")
    current = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]
    if current > known:
        raise Unavailable(
            f"the database schema is version {current} but this JobDeck knows only up to {known}: "
            "upgrade JobDeck or use another data directory"
        )
    applied: list[str] = []
    for f in files:
        version = f.version
        if version <= current:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in f.sql.split(";\n"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?, ?)", (version, time.time()))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        log.debug("applied migration %s", f.name)
        applied.append(f.name)
        current = version
    schema.report(applied, int(current))
    return int(current)


class Tx:
    """What one write operation sees: the connection, the clock, ids, and the outbox."""

    def __init__(self, conn: sqlite3.Connection, next_seq: int, next_job_id: int, now: float,
                 queued: Callable[[], bool] = lambda: False) -> None:  # fmt: skip
        self.conn = conn
        self._queued = queued
        self.ops_after = 0  # operations of this transaction still to run after the current one
        self.next_seq = next_seq
        self.next_job_id = next_job_id
        self.now = now
        self._now_iso = iso(now)  # every event of one transaction shares its time
        self.events: list[Event] = []
        self.audit: AuditScope | None = None  # set while an audited operation runs

    def others_wait(self) -> bool:
        """Whether another write waits for this operation: later in this transaction or queued for the
        next one (a long operation that can stop part-way, a purge, gives way)."""
        return self.ops_after > 0 or self._queued()

    def new_job_id(self) -> int:
        """A fresh job id (the writer is the only one handing them out)."""
        self.next_job_id += 1
        return self.next_job_id - 1

    def emit(self, type_: str, job_id: int | None, queue_: str | None, data: dict[str, Any]) -> None:
        """Add an event to this transaction's outbox; it commits (or rolls back) with the change."""
        seq = self.next_seq
        self.next_seq += 1
        body = orjson.dumps(
            {"seq": seq, "ts": self._now_iso, "type": type_, "job_id": job_id, "queue": queue_, "data": data}
        )
        self.events.append(Event(seq, self.now, type_, job_id, queue_, body))
        if self.audit is not None:
            self.audit.note_after(type_, job_id, queue_, data)

    def mark(self) -> tuple[int, int, int]:
        return (len(self.events), self.next_seq, self.next_job_id)

    def rollback_to(self, mark: tuple[int, int, int]) -> None:
        del self.events[mark[0] :]
        self.next_seq, self.next_job_id = mark[1], mark[2]


Op = Callable[[Tx], Any]
OnCommit = Callable[[list[Event]], None]


class Writer:
    """Runs write operations on one thread, many per transaction (group commit).

    Each operation runs inside a savepoint, so one that fails is undone alone and its
    caller gets the error; the others commit together. After the commit, results are
    handed back on the event loop and the committed events go to `on_commit` in order.
    """

    def __init__(self, path: Path, clock: Callable[[], float], on_commit: OnCommit, trace: Trace | None = None) -> None:
        self._path = path
        self._trace = trace
        self._clock = clock
        self._on_commit = on_commit
        # Each item is a list of ops: one, or those queued while writes were held (see `hold`).
        self._queue: queue.SimpleQueue[list[tuple[Op, asyncio.Future[Any]]] | None] = queue.SimpleQueue()
        self._held: list[tuple[Op, asyncio.Future[Any]]] | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.schema_version = 0
        self.observe_commit: Callable[[float], None] | None = None  # the node's commit-latency histogram
        self.next_job_id = 0  # the id the next new job gets, as of the last commit (the search indexer reads it)
        self.commits = 0  # transactions committed (the search indexer merges only after writes)
        self.checkpoints = {"RESTART": 0, "TRUNCATE": 0}  # checkpoints that held writes, that went through

    async def start(self) -> None:
        """Open the database, apply migrations and start the writer thread."""
        self._loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = self._loop.create_future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="jobdeck-sqlite-writer", daemon=True)
        self._thread.start()
        await ready

    async def stop(self) -> None:
        """Finish queued operations and close."""
        if self._thread is None or self._closed:
            return
        self._closed = True
        self.release()
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)

    def run(self, op: Op) -> asyncio.Future[Any]:
        """Queue `op` for the next transaction; the future resolves after its commit."""
        assert self._loop is not None
        fut: asyncio.Future[Any] = self._loop.create_future()
        if self._closed:
            fut.set_exception(Unavailable("the store is closed"))
            return fut
        if self._held is not None:
            self._held.append((op, fut))
        else:
            self._queue.put([(op, fut)])
        return fut

    def hold(self) -> None:
        """Keep the ops queued from now on until `release`, then hand them over at once: they go in
        one transaction (the engine pairs the results that free slots with the claim that fills
        them: one commit, not two). The caller bounds the hold (a timer)."""
        if self._held is None:
            self._held = []

    def release(self) -> None:
        """Hand the held ops to the writer (nothing if none were held)."""
        held, self._held = self._held, None
        if held:
            self._queue.put(held)

    # -- the thread

    def _run(self, ready: asyncio.Future[None]) -> None:
        assert self._loop is not None
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            conn = connect(self._path, trace=self._trace)
            conn.create_function("jobdeck_labels_ok", 2, _labels_ok, deterministic=True)
            # Checkpoints run on their own thread (see _checkpoint), not inside our commits.
            conn.execute("PRAGMA wal_autocheckpoint=0")
            self.schema_version = migrate(conn)
            next_seq = (conn.execute("SELECT seq FROM sqlite_sequence WHERE name='events'").fetchone() or (0,))[0] + 1
            # The highest job id ever used (sqlite_sequence keeps it when the newest jobs are deleted),
            # not max(id): an id the API showed once is never handed out again.
            next_job_id = conn.execute(NEXT_JOB_ID).fetchone()[0]
            self.next_job_id = next_job_id
        except BaseException as exc:
            self._loop.call_soon_threadsafe(_set_exception, ready, exc)
            return
        self._loop.call_soon_threadsafe(_set_result, ready, None)
        stop_checkpoints = threading.Event()
        checkpointer = threading.Thread(
            target=self._checkpoint, args=(stop_checkpoints,), name="jobdeck-sqlite-checkpoint", daemon=True
        )
        checkpointer.start()
        while True:
            item = self._queue.get()
            if item is None:
                break
            batch = item
            while len(batch) < MAX_OPS_PER_COMMIT:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)
                    break
                batch += more
            next_seq, next_job_id = self._commit(conn, batch, next_seq, next_job_id)
            self.next_job_id = next_job_id
            self.commits += 1
        stop_checkpoints.set()
        checkpointer.join()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()

    def _checkpoint(self, stop: threading.Event) -> None:
        """Copy the WAL back into the database file every half second, beside the writer.

        A PASSIVE checkpoint never blocks the writer or readers; it does what it can. Once the WAL
        holds more than RESTART_AT, a RESTART checkpoint copies the rest (at most RESTART_REST frames;
        more, or readers that stay longer than READER_WAIT, and it tries again a tenth of a round
        later) while new writes wait, so the next write starts the WAL again from its beginning, in
        the same file: under steady reads the WAL may never restart on
        its own (it grew to gigabytes). The file is never truncated while the writer works: an
        ftruncate of a 64-256 MB WAL took 16-90 ms with every write waiting behind it (TRUNCATE
        checkpoints were 130-270 ms of the maintenance stall), and a file grown again costs every
        commit more than one written over. A file a burst grew past WAL_SIZE_LIMIT is cut back to it
        by journal_size_limit in the first commit after the restart, or emptied (TRUNCATE) once the
        writer has committed nothing for IDLE_BEFORE_TRUNCATE.
        """
        conn = connect(self._path)
        frame = conn.execute("PRAGMA page_size").fetchone()[0] + 24  # a WAL frame: a page and its header
        wal = self._path.with_name(self._path.name + "-wal")
        commits, committed_at = self.commits, time.monotonic()
        restarted = 0  # the WAL's frames when a RESTART last went through
        wait = CHECKPOINT_EVERY
        try:
            while not stop.wait(wait):
                wait = CHECKPOINT_EVERY
                try:
                    busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if self.commits != commits:
                        commits, committed_at = self.commits, time.monotonic()
                    idle = time.monotonic() - committed_at >= IDLE_BEFORE_TRUNCATE
                    if idle and not busy and frames == copied and frames > 0 and _size(wal) > WAL_SIZE_LIMIT:
                        self._checkpoint_waiting(conn, "TRUNCATE")
                    elif frames * frame > RESTART_AT and frames != restarted:
                        if frames - copied <= RESTART_REST and self._checkpoint_waiting(conn, "RESTART"):
                            restarted = frames
                        else:  # readers held it: try again soon, before the WAL grows much further
                            restarted, wait = 0, CHECKPOINT_EVERY / 10
                except sqlite3.Error:
                    log.exception("checkpoint failed; will try again")
        finally:
            conn.close()

    def _checkpoint_waiting(self, conn: sqlite3.Connection, mode: str) -> bool:
        """A checkpoint that holds new writes while it runs and gives up after READER_WAIT; whether it
        went through (counted in `checkpoints`)."""
        conn.execute(f"PRAGMA busy_timeout={int(READER_WAIT * 1000)}")
        try:
            busy = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()[0]
        finally:
            conn.execute("PRAGMA busy_timeout=30000")
        if not busy:
            self.checkpoints[mode] += 1
        return not busy

    def _commit(
        self, conn: sqlite3.Connection, batch: list[tuple[Op, asyncio.Future[Any]]], next_seq: int, next_job_id: int
    ) -> tuple[int, int]:
        assert self._loop is not None
        tx = Tx(conn, next_seq, next_job_id, self._clock(), lambda: not self._queue.empty())
        outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        began = time.perf_counter()
        try:
            conn.execute("BEGIN IMMEDIATE")
            alone = len(batch) == 1  # the whole transaction is its savepoint (a single submit's commit)
            for k, (op, fut) in enumerate(batch):
                tx.ops_after = len(batch) - 1 - k
                mark = tx.mark()
                if not alone:
                    conn.execute("SAVEPOINT op")
                try:
                    result = op(tx)
                    if not alone:
                        conn.execute("RELEASE op")
                    outcomes.append((fut, result, None))
                except Exception as exc:
                    if alone:
                        conn.execute("ROLLBACK")
                        conn.execute("BEGIN IMMEDIATE")  # an empty transaction: the COMMIT below has one
                    else:
                        conn.execute("ROLLBACK TO op")
                        conn.execute("RELEASE op")
                    tx.rollback_to(mark)
                    if not isinstance(exc, JobDeckError):
                        log.exception("store operation failed")
                    outcomes.append((fut, None, exc))
            if tx.events:
                insert_values(conn, "INSERT INTO events (seq, ts, type, job_id, queue, body)",
                              [(e.seq, e.ts, e.type, e.job_id, e.queue, e.body) for e in tx.events])  # fmt: skip
            conn.execute("COMMIT")
            if self.observe_commit is not None:
                self.observe_commit(time.perf_counter() - began)
        except sqlite3.Error as exc:
            log.exception("commit failed")
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            failure = Unavailable(f"the store could not commit: {exc}")
            failed: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = [(f, None, failure) for _, f in batch]
            self._loop.call_soon_threadsafe(_deliver, failed, [], self._on_commit)
            return next_seq, next_job_id
        self._loop.call_soon_threadsafe(_deliver, outcomes, tx.events, self._on_commit)
        return tx.next_seq, tx.next_job_id


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _labels_ok(required: str, offered: str) -> bool:
    return labels_satisfied(labels_from_text(required), labels_from_text(offered))


def _set_result(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def _deliver(
    outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]], events: list[Event], on_commit: OnCommit
) -> None:
    if events:
        on_commit(events)
    for fut, result, exc in outcomes:
        if exc is not None:
            _set_exception(fut, exc)
        else:
            _set_result(fut, result)
