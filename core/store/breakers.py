"""Circuit breakers of http tasks (core/breaker.py) in the store, on both engines: one row per (queue,
host), read and written in one transaction (PostgreSQL: the rows locked first, in key order, so two
nodes recording outcomes of one host take turns and neither loses the other's counts). An opening
or a closing writes a `breaker.opened` / `breaker.closed` event in the same transaction, which every
node follows to keep its view of the open breakers current.

None of this runs in the claim transaction: outcomes are written after a result batch commits, and
a trial request is taken (one per breaker, exactly, whatever the nodes) by a conditional update.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from core.breaker import BREAKER_COLUMNS, Breaker, BreakerSettings

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Awaitable, Callable

    from core.store._pg_writer import Conn, PgTx
    from core.store._sqlite_writer import Tx

#: One outcome of a request an http task sent: (queue, host, job id, ok).
Outcome = tuple[str, str, int, bool]
#: What recording outcomes changed: (event type, the breaker after, its retry_at before).
Turn = tuple[str, Breaker, float | None]

_COLS = ", ".join(BREAKER_COLUMNS)
_SET = ", ".join(f"{c} = excluded.{c}" for c in BREAKER_COLUMNS[2:])


def _breaker(row: Sequence[Any]) -> Breaker:
    return Breaker(*row)


def _values(b: Breaker) -> tuple[Any, ...]:
    return tuple(getattr(b, c) for c in BREAKER_COLUMNS)


def _apply(found: dict[tuple[str, str], Breaker], outcomes: Sequence[Outcome], settings: dict[str, BreakerSettings],
           now: float) -> tuple[list[Breaker], list[Turn]]:  # fmt: skip
    """Run the outcomes through their breakers (new ones start closed); the rows to write, and the turns."""
    touched: dict[tuple[str, str], Breaker] = {}
    turns: list[Turn] = []
    for queue, key, job_id, ok in outcomes:
        b = found.get((queue, key)) or Breaker(queue, key, win_start=now)
        found[(queue, key)] = touched[(queue, key)] = b
        before = b.retry_at
        event = b.observe(job_id, ok, now, settings.get(queue, BreakerSettings()))
        if event is not None:
            turns.append((event, Breaker(*_values(b)), before))
    return list(touched.values()), turns


def _reset(b: Breaker, now: float) -> Turn:
    """An operator's reset: the breaker closed with an empty window (its turn, as a trial's success makes one)."""
    before = b.retry_at
    b.close(now)
    return "breaker.closed", b, before


def _emit(tx: Any, turns: list[Turn], settings: dict[str, BreakerSettings], now: float) -> None:
    for event, b, _ in turns:
        tx.emit(event, None, b.queue, {"breaker": b.view(now, settings.get(b.queue, BreakerSettings()))})


class SQLiteBreakers:
    """Breakers on the SQLite store (mixed into SQLiteStore; the one writer makes each call exact)."""

    _write: Callable[[Callable[[Tx], Any]], asyncio.Future[Any]]
    _read: Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]

    async def record_breaker_outcomes(self, outcomes: Sequence[Outcome],
                                      settings: dict[str, BreakerSettings]) -> list[Turn]:  # fmt: skip
        """Count request outcomes in their breakers; the openings and closings they caused."""

        def op(tx: Tx) -> list[Turn]:
            c, now = tx.conn, tx.now
            keys = sorted({(q, k) for q, k, _, _ in outcomes})
            found = {}
            for q, k in keys:
                row = c.execute(f"SELECT {_COLS} FROM breakers WHERE queue = ? AND key = ?", (q, k)).fetchone()
                if row is not None:
                    found[(q, k)] = _breaker(row)
            rows, turns = _apply(found, outcomes, settings, now)
            c.executemany(
                f"INSERT INTO breakers ({_COLS}, updated_at) VALUES ({', '.join('?' * (len(BREAKER_COLUMNS) + 1))}) "
                f"ON CONFLICT (queue, key) DO UPDATE SET {_SET}, updated_at = excluded.updated_at",
                [(*_values(b), now) for b in rows],
            )
            _emit(tx, turns, settings, now)
            return turns

        return await self._write(op)  # type: ignore[no-any-return]

    async def take_breaker_trials(self, wanted: dict[tuple[str, str], int],
                                  settings: dict[str, BreakerSettings]) -> dict[tuple[str, str], Breaker]:  # fmt: skip
        """For each open breaker whose trial time has come, let the job offered for it be the one
        trial (if no other job, on any node, took it first); every asked breaker as it is after."""

        def op(tx: Tx) -> dict[tuple[str, str], Breaker]:
            c, now = tx.conn, tx.now
            out = {}
            for (q, k), job_id in sorted(wanted.items()):
                reset = settings.get(q, BreakerSettings()).reset
                c.execute(
                    "UPDATE breakers SET probe_job = ?, retry_at = ?, updated_at = ? WHERE queue = ? AND key = ? "
                    "AND opened_at IS NOT NULL AND retry_at <= ?",
                    (job_id, now + reset, now, q, k, now),
                )
                row = c.execute(f"SELECT {_COLS} FROM breakers WHERE queue = ? AND key = ?", (q, k)).fetchone()
                if row is not None:
                    out[(q, k)] = _breaker(row)
            return out

        return await self._write(op)  # type: ignore[no-any-return]

    async def reset_breaker(self, queue: str, key: str, settings: BreakerSettings) -> Turn | None:
        """Close one breaker now, whatever its state (an operator's reset); None if there is no such breaker.
        Its `breaker.closed` event (data: reset true) commits with it."""

        def op(tx: Tx) -> Turn | None:
            c, now = tx.conn, tx.now
            row = c.execute(f"SELECT {_COLS} FROM breakers WHERE queue = ? AND key = ?", (queue, key)).fetchone()
            if row is None:
                return None
            turn = _reset(_breaker(row), now)
            c.execute(
                f"INSERT INTO breakers ({_COLS}, updated_at) VALUES ({', '.join('?' * (len(BREAKER_COLUMNS) + 1))}) "
                f"ON CONFLICT (queue, key) DO UPDATE SET {_SET}, updated_at = excluded.updated_at",
                (*_values(turn[1]), now),
            )
            tx.emit(turn[0], None, queue, {"breaker": turn[1].view(now, settings), "reset": True})
            return turn

        return await self._write(op)  # type: ignore[no-any-return]

    async def list_breakers(self, open_only: bool = False) -> list[Breaker]:
        """Every breaker (or only those open or half open), by queue and host."""
        where = " WHERE opened_at IS NOT NULL" if open_only else ""
        sql = f"SELECT {_COLS} FROM breakers{where} ORDER BY queue, key"
        return await self._read(lambda c: [_breaker(r) for r in c.execute(sql)])  # type: ignore[no-any-return]

    async def breaker_waiters(self, queue: str, held_until: float) -> list[tuple[int, dict[str, Any]]]:
        """(id, task) of the jobs of `queue` an open breaker holds until `held_until` (to release them)."""
        sql = ("SELECT id, task FROM jobs INDEXED BY jobs_due WHERE state IN ('scheduled', 'failed') "
               "AND run_at = ? AND state = 'scheduled' AND queue = ?")  # fmt: skip
        return await self._read(  # type: ignore[no-any-return]
            lambda c: [(int(i), orjson.loads(t)) for i, t in c.execute(sql, (held_until, queue))]
        )


class PostgresBreakers:
    """Breakers on the PostgreSQL store (mixed into PostgresStore)."""

    _write: Callable[[Callable[[PgTx], Awaitable[Any]]], asyncio.Future[Any]]
    _read: Callable[[Callable[[Conn], Awaitable[Any]]], Awaitable[Any]]

    async def record_breaker_outcomes(self, outcomes: Sequence[Outcome],
                                      settings: dict[str, BreakerSettings]) -> list[Turn]:  # fmt: skip
        """Count request outcomes in their breakers; the openings and closings they caused."""

        async def op(tx: PgTx) -> list[Turn]:
            c, now = tx.conn, tx.now
            keys = sorted({(q, k) for q, k, _, _ in outcomes})
            qs, ks = [q for q, _ in keys], [k for _, k in keys]
            await c.execute(  # new rows first, so every row can be locked (two nodes: one waits, then reads)
                "INSERT INTO breakers (queue, key, win_start, updated_at) SELECT q, k, $3, $3 "
                "FROM unnest($1::text[], $2::text[]) AS v(q, k) ORDER BY q, k ON CONFLICT DO NOTHING",
                qs, ks, now,
            )  # fmt: skip
            rows = await c.fetch(
                f"SELECT {_COLS} FROM breakers WHERE (queue, key) IN (SELECT * FROM unnest($1::text[], $2::text[])) "
                "ORDER BY queue, key FOR UPDATE",
                qs, ks,
            )  # fmt: skip
            found = {(r[0], r[1]): _breaker(tuple(r)) for r in rows}
            written, turns = _apply(found, outcomes, settings, now)
            cols = BREAKER_COLUMNS[2:]
            types = {"opened_at": "float8", "retry_at": "float8", "probe_job": "bigint", "win_start": "float8"}
            arrays = ", ".join(f"${i + 3}::{types.get(col, 'int')}[]" for i, col in enumerate(cols))
            await c.execute(
                f"UPDATE breakers AS b SET {', '.join(f'{col} = v.{col}' for col in cols)}, updated_at = ${len(cols) + 3} "
                f"FROM unnest($1::text[], $2::text[], {arrays}) AS v(queue, key, {', '.join(cols)}) "
                "WHERE b.queue = v.queue AND b.key = v.key",
                [b.queue for b in written], [b.key for b in written],
                *([getattr(b, col) for b in written] for col in cols), now,
            )  # fmt: skip
            _emit(tx, turns, settings, now)
            return turns

        return await self._write(op)  # type: ignore[no-any-return]

    async def take_breaker_trials(self, wanted: dict[tuple[str, str], int],
                                  settings: dict[str, BreakerSettings]) -> dict[tuple[str, str], Breaker]:  # fmt: skip
        """For each open breaker whose trial time has come, let the job offered for it be the one
        trial (if no other job, on any node, took it first); every asked breaker as it is after."""

        async def op(tx: PgTx) -> dict[tuple[str, str], Breaker]:
            c, now = tx.conn, tx.now
            out = {}
            for (q, k), job_id in sorted(wanted.items()):
                reset = settings.get(q, BreakerSettings()).reset
                row = await c.fetchrow(
                    f"UPDATE breakers SET probe_job = $1, retry_at = $2, updated_at = $3 WHERE queue = $4 AND key = $5 "
                    f"AND opened_at IS NOT NULL AND retry_at <= $3 RETURNING {_COLS}",
                    job_id, now + reset, now, q, k,
                )  # fmt: skip
                if row is None:
                    row = await c.fetchrow(f"SELECT {_COLS} FROM breakers WHERE queue = $1 AND key = $2", q, k)
                if row is not None:
                    out[(q, k)] = _breaker(tuple(row))
            return out

        return await self._write(op)  # type: ignore[no-any-return]

    async def reset_breaker(self, queue: str, key: str, settings: BreakerSettings) -> Turn | None:
        """Close one breaker now, whatever its state (an operator's reset); None if there is no such breaker.
        Its `breaker.closed` event (data: reset true) commits with it."""

        async def op(tx: PgTx) -> Turn | None:
            c, now = tx.conn, tx.now
            row = await c.fetchrow(f"SELECT {_COLS} FROM breakers WHERE queue = $1 AND key = $2 FOR UPDATE", queue, key)
            if row is None:
                return None
            turn = _reset(_breaker(tuple(row)), now)
            await c.execute(
                "UPDATE breakers SET opened_at = NULL, retry_at = NULL, probe_job = NULL, win_start = $3, ok = 0, "
                "failed = 0, prev_ok = 0, prev_failed = 0, updated_at = $3 WHERE queue = $1 AND key = $2",
                queue, key, now,
            )  # fmt: skip
            tx.emit(turn[0], None, queue, {"breaker": turn[1].view(now, settings), "reset": True})
            return turn

        return await self._write(op)  # type: ignore[no-any-return]

    async def list_breakers(self, open_only: bool = False) -> list[Breaker]:
        """Every breaker (or only those open or half open), by queue and host."""
        where = " WHERE opened_at IS NOT NULL" if open_only else ""

        async def q(c: Conn) -> list[Breaker]:
            return [
                _breaker(tuple(r)) for r in await c.fetch(f"SELECT {_COLS} FROM breakers{where} ORDER BY queue, key")
            ]

        return await self._read(q)  # type: ignore[no-any-return]

    async def breaker_waiters(self, queue: str, held_until: float) -> list[tuple[int, dict[str, Any]]]:
        """(id, task) of the jobs of `queue` an open breaker holds until `held_until` (to release them)."""

        async def q(c: Conn) -> list[tuple[int, dict[str, Any]]]:
            rows = await c.fetch(
                "SELECT id, task FROM jobs WHERE state IN ('scheduled', 'failed') AND run_at = $1 "
                "AND state = 'scheduled' AND queue = $2",
                held_until, queue,
            )  # fmt: skip
            return [(int(r[0]), r[1] if isinstance(r[1], dict) else orjson.loads(r[1])) for r in rows]

        return await self._read(q)  # type: ignore[no-any-return]
