"""Per-key usage of a queue, on both stores (what the console's and dashboard's key panel shows): how
many jobs of each concurrency key run, and how many jobs of each fairness key wait, with what the fair
rotation has served each. Bounded work whatever the backlog: the waiting count reads at most
`WAITING_CAP` index entries of the queue (jobs_claim_fair) and says when it stopped there.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from core.store._pg_writer import Conn

WAITING_CAP = 100_000  # queued jobs with a fairness key counted per call, at most
KEYS_SHOWN = 100  # keys listed, the busiest first

_RUNNING = ("SELECT concurrency_key, count(*) AS n FROM jobs {hint} WHERE state = 'running' "
            "AND concurrency_key IS NOT NULL AND queue = {p1} GROUP BY concurrency_key ORDER BY n DESC, concurrency_key "
            f"LIMIT {KEYS_SHOWN + 1}")  # fmt: skip
_WAITING = ("SELECT fairness_key, count(*) AS n FROM (SELECT fairness_key FROM jobs {hint} WHERE state = 'queued' "
            "AND fairness_key IS NOT NULL AND queue = {p1} LIMIT {p2}) AS w GROUP BY fairness_key "
            "ORDER BY n DESC, fairness_key")  # fmt: skip
_SHARES = "SELECT key, served FROM fair_shares WHERE queue = {p1}"


def usage_view(queue: str, running: list[tuple[str, int]], waiting: list[tuple[str, int]],
               shares: dict[str, float], cap: int) -> dict[str, Any]:  # fmt: skip
    """The API's view of a queue's per-key usage."""
    counted = sum(n for _, n in waiting)
    return {
        "queue": queue,
        "running_by_concurrency_key": [{"key": k, "running": int(n)} for k, n in running[:KEYS_SHOWN]],
        "more_running_keys": len(running) > KEYS_SHOWN,
        "waiting_by_fairness_key": [
            {"key": k, "waiting": int(n), "served": round(shares.get(k, 0.0), 3)} for k, n in waiting[:KEYS_SHOWN]
        ],
        "more_waiting_keys": len(waiting) > KEYS_SHOWN,
        "waiting_counted": counted,
        "waiting_capped": counted >= cap,
    }


class SQLiteKeyUsage:
    """Per-key usage on the SQLite store."""

    _read: Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]

    async def key_usage(self, queue: str, cap: int = WAITING_CAP) -> dict[str, Any]:
        """Running jobs per concurrency key and waiting jobs per fairness key of one queue."""

        def q(c: sqlite3.Connection) -> dict[str, Any]:
            running = c.execute(_RUNNING.format(hint="INDEXED BY jobs_running_key", p1="?"), (queue,)).fetchall()
            waiting = c.execute(_WAITING.format(hint="INDEXED BY jobs_claim_fair", p1="?", p2="?"),
                                (queue, cap)).fetchall()  # fmt: skip
            shares = dict(c.execute(_SHARES.format(p1="?"), (queue,)).fetchall())
            return usage_view(queue, running, waiting, shares, cap)

        return await self._read(q)  # type: ignore[no-any-return]


class PostgresKeyUsage:
    """Per-key usage on the PostgreSQL store."""

    _read: Callable[[Callable[[Conn], Awaitable[Any]]], Awaitable[Any]]

    async def key_usage(self, queue: str, cap: int = WAITING_CAP) -> dict[str, Any]:
        """Running jobs per concurrency key and waiting jobs per fairness key of one queue."""

        async def q(c: Conn) -> dict[str, Any]:
            running = [tuple(r) for r in await c.fetch(_RUNNING.format(hint="", p1="$1"), queue)]
            waiting = [tuple(r) for r in await c.fetch(_WAITING.format(hint="", p1="$1", p2="$2"), queue, cap)]
            shares = {r[0]: r[1] for r in await c.fetch(_SHARES.format(p1="$1"), queue)}
            return usage_view(queue, running, waiting, shares, cap)

        return await self._read(q)  # type: ignore[no-any-return]
