"""The PostgreSQL store's writer: group commit, gap-free event sequence numbers, migrations.

Why sequence numbers need care here. A PostgreSQL sequence hands out numbers when asked,
not when the transaction commits: node A takes seq 9, node B takes seq 10 and commits
first, and a reader polling `seq > 8` sees 10 while 9 is still invisible; it moves its
cursor to 10 and never sees 9. (A rolled-back transaction would also leave a hole for
ever.) So the numbers come from the one row of `event_seq`, updated as the *last* step of
every transaction that writes events. The row lock that UPDATE takes is held until
commit, so it serves as the cluster-wide mutex (as `pg_advisory_xact_lock(<constant>)`
would, without a second lock to take): event-writing transactions pass that point one at
a time, each one seeing the number its predecessor committed. A transaction becomes
visible before it releases its locks, so once seq N is visible every seq below N is too:
the events table fills in commit order with no gaps, and a rollback gives its numbers
back (the counter is transactional). The lock is held only for the tail (one statement
for counter and events, then COMMIT); the rest of each transaction runs in parallel with
other nodes' and with this node's other writer tasks.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import asyncpg
import orjson

from core.errors import JobDeckError, Unavailable
from core.model import iso
from core.store import schema
from core.store._pg_sql import COPY_FROM, EVENT_COLUMNS, NEXT_SEQS, WRITE_EVENTS
from core.store.audit import AuditScope
from core.store.base import Event

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

    Conn: TypeAlias = PoolConnectionProxy[asyncpg.Record]

log = logging.getLogger("jobdeck.store")

MIGRATION_LOCK = 72420001  # session advisory lock: one node migrates at a time
MAX_OPS_PER_COMMIT = 2000
WORKERS = 3  # transactions of one node in flight at once
RETRY_FOR = 30.0  # seconds a batch is retried while the database is away (restart, failover)


def is_connection_error(exc: BaseException) -> bool:
    """True if `exc` means the connection (or the server) went away, not that a statement failed."""
    if isinstance(exc, (asyncpg.InterfaceError, asyncpg.InternalClientError)):
        return True  # a connection left mid-operation by a failure ("another operation is in progress")
    return isinstance(
        exc,
        (
            OSError,
            TimeoutError,
            asyncpg.PostgresConnectionError,
            asyncpg.exceptions.OperatorInterventionError,  # admin shutdown, cannot connect now
            asyncpg.exceptions.InsufficientResourcesError,  # too many connections
        ),
    )


async def migrate(conn: Conn) -> int:
    """Apply the numbered files of migrations/postgres (core.store.schema) not yet applied; return the schema version.

    Runs under a session advisory lock, so nodes starting together apply each file once.
    Refuses a database whose schema is newer than this code knows.
    """
    files = schema.load("postgres")  # first: a broken install writes nothing
    known = files[-1].version
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL, applied_at double precision NOT NULL)"
        )
        current = int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_version"))
        if current > known:
            raise Unavailable(
                f"the database schema is version {current} but this JobDeck knows only up to {known}: "
                "upgrade JobDeck or use another database"
            )
        applied: list[str] = []
        for f in files:
            version = f.version
            if version <= current:
                continue
            async with conn.transaction():
                await conn.execute(f.sql)
                await conn.execute("INSERT INTO schema_version VALUES ($1, $2)", version, time.time())
            log.debug("applied migration %s", f.name)
            applied.append(f.name)
            current = version
        schema.report(applied, int(current))
        return current
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)


class PgTx:
    """What one write operation sees: a connection inside the batch's transaction, the clock,
    and the outbox.

    There is no savepoint per operation (each would cost two round trips). So an operation
    that raises a JobDeckError must do it before it writes; its events are dropped and the
    others commit. Any other exception undoes the whole transaction; the writer then runs
    the rest of the batch again without the failed operation.
    """

    def __init__(self, conn: Conn, now: float) -> None:
        self.conn = conn
        self.now = now
        self._now_iso = iso(now)
        self._outbox: list[tuple[str, int | None, str | None, dict[str, Any]]] = []
        self.audit: AuditScope | None = None  # set while an audited operation runs

    def emit(self, type_: str, job_id: int | None, queue_: str | None, data: dict[str, Any]) -> None:
        """Add an event to this transaction's outbox; it commits (or rolls back) with the change."""
        self._outbox.append((type_, job_id, queue_, data))
        if self.audit is not None:
            self.audit.note_after(type_, job_id, queue_, data)

    def mark(self) -> int:
        return len(self._outbox)

    def rollback_to(self, mark: int) -> None:
        del self._outbox[mark:]

    async def write_events(self) -> tuple[list[Event], str | None]:
        """Number the outbox and insert it: the transaction's last step before COMMIT (see the
        module docstring). Returns the events and the transaction id, to learn the outcome of
        a commit whose answer was lost.

        An event's JSON starts with its seq, which is known only once the counter row is
        locked; the rest (the tail) is serialised before, so the lock is held for one
        statement: counter, bodies and insert together (a COPY after the counter for big ones).
        """
        if not self._outbox:
            return [], None
        n = len(self._outbox)
        ts = self._now_iso
        tails = [
            orjson.dumps({"ts": ts, "type": t, "job_id": j, "queue": q, "data": d})[1:] for t, j, q, d in self._outbox
        ]
        if n < COPY_FROM:
            row = await self.conn.fetchrow(
                WRITE_EVENTS,
                n,
                self.now,
                [o[0] for o in self._outbox],
                [o[1] for o in self._outbox],
                [o[2] for o in self._outbox],
                [t.decode() for t in tails],
            )
        else:
            row = await self.conn.fetchrow(NEXT_SEQS, n)
        assert row is not None
        first, xid = int(row[0]), str(row[1])
        events = [
            Event(seq, self.now, t, j, q, b'{"seq":%d,' % seq + tail)
            for seq, (t, j, q, _), tail in zip(range(first, first + n), self._outbox, tails, strict=True)
        ]
        if n >= COPY_FROM:
            records = [(e.seq, e.ts, e.type, e.job_id, e.queue, e.body.decode()) for e in events]
            await self.conn.copy_records_to_table("events", records=records, columns=EVENT_COLUMNS)
        return events, xid


Op = Callable[[PgTx], Awaitable[Any]]
OnCommit = Callable[[list[Event]], None]
_Item = tuple[Op, "asyncio.Future[Any]"]
_Outcome = tuple["asyncio.Future[Any]", Any, BaseException | None]


class _OpFailed(Exception):
    def __init__(self, index: int, exc: BaseException) -> None:
        self.index, self.exc = index, exc


class _CommitUnknown(Exception):
    def __init__(self, xid: str | None, outcomes: list[_Outcome], events: list[Event], turn: int | None) -> None:
        self.xid, self.outcomes, self.events, self.turn = xid, outcomes, events, turn


class PgWriter:
    """A few tasks per node run write operations, many per transaction (group commit).

    Each task takes what is queued when it is free, so a burst becomes a few big
    transactions and a trickle is not kept waiting behind one slow commit. Transactions of
    different tasks run side by side and meet only at the event counter (see the module
    docstring), which they pass in commit order: that order is kept when their events go
    to `on_commit`, then each caller gets its result. A batch that meets a deadlock, a
    serialization failure or a lost connection is run again (for up to RETRY_FOR seconds),
    so a database restart costs callers a wait, not an error.
    """

    def __init__(
        self, pool: asyncpg.Pool, clock: Callable[[], float], on_commit: OnCommit, workers: int = WORKERS
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._on_commit = on_commit
        self._workers = workers
        self.observe_commit: Callable[[float], None] | None = None  # the node's commit-latency histogram
        self._queue: asyncio.Queue[_Item | None] = asyncio.Queue()
        self._held: list[_Item] | None = None  # see `hold`
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        # Transactions that took sequence numbers, in the order they took them (their commit
        # order), and the deliveries of those that committed, waiting for their turn.
        self._turns: collections.deque[int] = collections.deque()
        self._done: dict[int, Callable[[], None]] = {}
        self._next_turn = itertools.count()

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(), name=f"jobdeck-pg-writer-{i}") for i in range(self._workers)]

    async def stop(self) -> None:
        """Finish queued operations and stop."""
        if not self._tasks or self._closed:
            return
        self._closed = True
        self.release()
        for _ in self._tasks:
            self._queue.put_nowait(None)
        await asyncio.gather(*self._tasks)

    def run(self, op: Op) -> asyncio.Future[Any]:
        """Queue `op` for the next transaction; the future resolves after its commit."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._closed:
            fut.set_exception(Unavailable("the store is closed"))
        elif self._held is not None:
            self._held.append((op, fut))
        else:
            self._queue.put_nowait((op, fut))
        return fut

    def hold(self) -> None:
        """Keep the ops queued from now on until `release`, then queue them at once: the first free
        task takes them all into one transaction (see SQLiteStore.hold_writes). The caller bounds it."""
        if self._held is None:
            self._held = []

    def release(self) -> None:
        """Queue the held ops (nothing if none were held)."""
        held, self._held = self._held, None
        for item in held or ():
            self._queue.put_nowait(item)

    async def _run(self) -> None:
        kept = _Kept()
        try:
            while True:
                item = await self._queue.get()
                if item is None:
                    return
                batch = [item]
                while len(batch) < MAX_OPS_PER_COMMIT and not self._queue.empty():
                    more = self._queue.get_nowait()
                    if more is None:
                        self._queue.put_nowait(None)
                        break
                    batch.append(more)
                try:
                    await self._commit(batch, kept)
                except Exception as exc:  # never leave a caller waiting, never stop the writer
                    log.exception("store batch failed")
                    for _, fut in batch:
                        _fail(fut, Unavailable(f"the store could not commit: {exc}"))
        finally:
            if kept.conn is not None:
                with contextlib.suppress(Exception):
                    await self._pool.release(kept.conn)

    async def _commit(self, batch: list[_Item], kept: _Kept) -> None:
        deadline = time.monotonic() + RETRY_FOR
        delay = 0.05
        while batch:
            try:
                outcomes, events, turn = await self._transaction(batch, kept)
            except _OpFailed as failed:
                # That operation is out; the others run again in a fresh transaction.
                op_exc = failed.exc
                if not isinstance(op_exc, JobDeckError):
                    log.error("store operation failed: %r", op_exc)
                _fail(batch[failed.index][1], op_exc)
                batch = batch[: failed.index] + batch[failed.index + 1 :]
                continue
            except _CommitUnknown as unknown:
                try:
                    status = await self._outcome(unknown.xid, deadline)
                except BaseException:
                    self._in_turn(unknown.turn, [], [])
                    raise
                if status == "committed":
                    self._in_turn(unknown.turn, unknown.outcomes, unknown.events)
                    return
                self._in_turn(unknown.turn, [], [])  # its numbers were given back: let later ones go
                if status is None:
                    for _, fut in batch:
                        _fail(fut, Unavailable("lost the database connection while committing; the outcome is unknown"))
                    return
            except Exception as exc:
                if not (is_connection_error(exc) or isinstance(exc, asyncpg.TransactionRollbackError)):
                    raise
                if time.monotonic() > deadline:
                    for _, fut in batch:
                        _fail(fut, Unavailable(f"the database is unreachable: {exc}"))
                    return
                log.warning("store batch will be retried: %s", exc)
            else:
                self._in_turn(turn, outcomes, events)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _transaction(self, batch: list[_Item], kept: _Kept) -> tuple[list[_Outcome], list[Event], int | None]:
        conn, kept.conn = kept.conn or await self._pool.acquire(), None
        clean = False  # ended by its own COMMIT or ROLLBACK: the task keeps it for the next transaction
        try:
            tx = PgTx(conn, self._clock())
            began = time.perf_counter()
            outcomes: list[_Outcome] = []
            transaction = conn.transaction()
            await transaction.start()
            try:
                for i, (op, fut) in enumerate(batch):
                    mark = tx.mark()
                    try:
                        outcomes.append((fut, await op(tx), None))
                    except JobDeckError as exc:
                        tx.rollback_to(mark)
                        outcomes.append((fut, None, exc))
                    except Exception as exc:
                        if is_connection_error(exc) or isinstance(exc, asyncpg.TransactionRollbackError):
                            raise
                        raise _OpFailed(i, exc) from exc
                events, xid = await tx.write_events()
            except BaseException:
                try:
                    await transaction.rollback()
                    clean = True
                except Exception:  # the connection is gone or unusable: the pool replaces it
                    with contextlib.suppress(Exception):
                        conn.terminate()
                raise
            # From here until it commits, this transaction holds the counter: no other can
            # take numbers, so its place in the queue of turns is its place in commit order.
            turn = self._take_turn() if events else None
            try:
                await transaction.commit()
                if self.observe_commit is not None:
                    self.observe_commit(time.perf_counter() - began)
            except Exception as exc:
                if is_connection_error(exc):
                    raise _CommitUnknown(xid, outcomes, events, turn) from exc
                self._in_turn(turn, [], [])
                raise
            except BaseException:
                self._in_turn(turn, [], [])
                raise
            clean = True
            return outcomes, events, turn
        finally:
            if clean and not conn.is_closed():
                kept.conn = conn
            else:
                # After a commit, a failure to hand the connection back must not look like a failed
                # batch (it would run again): the pool replaces a connection it cannot reset.
                with contextlib.suppress(Exception):
                    await self._pool.release(conn)

    def _take_turn(self) -> int:
        turn = next(self._next_turn)
        self._turns.append(turn)
        return turn

    def _in_turn(self, turn: int | None, outcomes: list[_Outcome], events: list[Event]) -> None:
        """Deliver a transaction's results once every transaction that took numbers before it has."""
        if turn is None:
            self._deliver(outcomes, events)
            return
        self._done[turn] = functools.partial(self._deliver, outcomes, events)
        while self._turns and self._turns[0] in self._done:
            self._done.pop(self._turns.popleft())()

    async def _outcome(self, xid: str | None, deadline: float) -> str | None:
        """'committed' or 'aborted' for the transaction `xid`, once the database answers; None if
        it does not before the deadline. A transaction that wrote no events is only ever retried:
        such operations (lease extensions, pruning) are idempotent."""
        if xid is None:
            return "aborted"
        while time.monotonic() < deadline:
            try:
                async with self._pool.acquire() as conn:
                    status = await conn.fetchval("SELECT pg_xact_status($1::text::xid8)", xid)
                if status in ("committed", "aborted"):
                    return str(status)
            except Exception as exc:
                log.warning("cannot learn the outcome of a commit yet: %s", exc)
            await asyncio.sleep(0.2)
        return None

    def _deliver(self, outcomes: list[_Outcome], events: list[Event]) -> None:
        if events:
            try:
                self._on_commit(events)
            except Exception:
                log.exception("a commit listener failed")
        for fut, result, exc in outcomes:
            if exc is not None:
                _fail(fut, exc)
            elif not fut.done():
                fut.set_result(result)


class _Kept:
    """A writer task's connection between its transactions. Each of them ends in its own COMMIT or
    ROLLBACK and sets nothing beyond it (SET LOCAL, transaction locks), so the connection is not
    handed back to the pool after each one: the pool resets every connection it gets back (a round
    trip, ~0.15 ms p50 here, 0.3-0.45 mean), which a single submit paid on top of its commit."""

    conn: Conn | None = None


def _fail(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
