"""Jobs per (queue, state) on PostgreSQL: delta rows the triggers of migration 0010 insert in each
writing transaction, summed by readers and folded here into one row per (queue, state)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncpg

    from core.store._pg_writer import Conn

FOLD_EVERY = 2.0  # seconds; a busy node adds a few rows per commit, so a read sums at most a few thousand
_LOCK = 7244  # advisory lock key: one node folds at a time (two would be correct, only wasteful)
COUNTS = "SELECT queue, state, sum(n) FROM job_counts GROUP BY queue, state HAVING sum(n) <> 0"
RUNNING = "SELECT queue, sum(n) FROM job_counts WHERE state = 'running' GROUP BY queue HAVING sum(n) <> 0"
# The rows this snapshot sees become their sums; rows committed meanwhile stay for the next fold
# (a DELETE in READ COMMITTED skips a row another fold deleted first, so nothing counts twice).
_FOLD = (
    "WITH gone AS (DELETE FROM job_counts RETURNING queue, state, n) "
    "INSERT INTO job_counts (queue, state, n) SELECT queue, state, sum(n) FROM gone GROUP BY queue, state "
    "HAVING sum(n) <> 0"
)


async def job_counts(c: Conn) -> dict[str, dict[str, int]]:
    """queue -> state -> how many jobs."""
    counts: dict[str, dict[str, int]] = {}
    for queue, state, n in await c.fetch(COUNTS):
        counts.setdefault(queue, {})[state] = int(n)
    return counts


async def fold_job_counts(pool: asyncpg.Pool) -> None:
    """Fold the delta rows into one per (queue, state), unless another node is doing it."""
    async with pool.acquire() as conn, conn.transaction():
        if await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", _LOCK):
            await conn.execute(_FOLD)
