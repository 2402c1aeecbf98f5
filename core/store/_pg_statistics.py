"""Planner statistics kept fresh after bulk loads: PostgreSQL plans from what ANALYZE last saw, and
autovacuum can be minutes behind (or off). A table loaded after the last ANALYZE made the planner
believe no job was queued; the claims price sorting out (INDEX_ORDER_ONLY in _pg_sql.py) so they are
safe whatever the statistics say, but list plans pick indexes by their estimates. So each node looks
every few seconds at how many rows changed since the last ANALYZE, and analyses the job tables when a
large share did; one node at a time (an advisory lock), and only when autovacuum has not done it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncpg

log = logging.getLogger("jobdeck.store")

CHECK_EVERY = 10.0  # seconds between looks at pg_stat_user_tables (a catalog read: microseconds)
STALE_SHARE = 0.2  # rows changed since the last ANALYZE, as a share of the rows it saw (autovacuum: 0.1)
STALE_MIN = 10_000  # ... plus this many, so a small table is not analysed for every few jobs
TABLES = ("jobs", "job_tags")
_LOCK = 7243  # advisory lock key: one node analyses at a time
_CHANGED = (
    "SELECT c.relname, greatest(c.reltuples, 0), s.n_mod_since_analyze FROM pg_class c "
    "JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.oid = ANY($1::regclass[])"
)


def stale_tables(rows: list[tuple[str, float, int]]) -> list[str]:
    """The tables whose statistics are stale: (name, rows ANALYZE saw, rows changed since)."""
    return [name for name, seen, changed in rows if changed > STALE_SHARE * seen + STALE_MIN]


async def refresh_statistics(pool: asyncpg.Pool) -> list[str]:
    """Analyse the job tables whose statistics are stale; returns the tables analysed ([] when all
    were fresh, or another node holds the lock)."""
    async with pool.acquire() as conn:
        rows = [(str(r[0]), float(r[1]), int(r[2])) for r in await conn.fetch(_CHANGED, list(TABLES))]
        stale = stale_tables(rows)
        if not stale or not await conn.fetchval("SELECT pg_try_advisory_lock($1)", _LOCK):
            return []
        try:
            started = time.monotonic()
            await conn.execute(f"ANALYZE {', '.join(stale)}")
            log.info("statistics of %s were stale: analysed in %.2f s", ", ".join(stale), time.monotonic() - started)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK)
    return stale
