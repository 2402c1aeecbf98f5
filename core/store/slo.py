"""The counts behind the SLO panel (core/obs/slo.py), on both stores: one pass over the jobs that
finished in a window, through the index on finished jobs' finish times (migration 0009)."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from core.obs.slo import PICKUP_SLA

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from core.store._pg_writer import Conn

_UNDER = ", ".join(
    f"sum(CASE WHEN started_at - run_at <= {s} THEN 1 ELSE 0 END) AS under_{int(s * 1000)}" for _, s in PICKUP_SLA
)
_SELECT = (
    f"SELECT count(started_at) AS started, {_UNDER}, "
    "sum(CASE WHEN state = 'succeeded' THEN 1 ELSE 0 END) AS succeeded, "
    "sum(CASE WHEN state = 'dead' THEN 1 ELSE 0 END) AS dead "
    "FROM jobs WHERE state IN ('succeeded', 'dead', 'cancelled') AND finished_at >= {since}"
)
_NAMES = ["started", *(f"under_{int(s * 1000)}" for _, s in PICKUP_SLA), "succeeded", "dead"]


def _counts(row: Any) -> dict[str, int]:
    return {name: int(v or 0) for name, v in zip(_NAMES, row, strict=True)}


class SQLiteSLO:
    """SLO counts on the SQLite store."""

    _read: Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]

    async def slo_counts(self, since: float) -> dict[str, int]:
        """Jobs that finished since `since`: started, under each pick-up threshold, succeeded, dead."""
        sql = _SELECT.format(since="?")
        return await self._read(lambda c: _counts(c.execute(sql, (since,)).fetchone()))  # type: ignore[no-any-return]


class PostgresSLO:
    """SLO counts on the PostgreSQL store."""

    _read: Callable[[Callable[[Conn], Awaitable[Any]]], Awaitable[Any]]

    async def slo_counts(self, since: float) -> dict[str, int]:
        """Jobs that finished since `since`: started, under each pick-up threshold, succeeded, dead."""
        sql = _SELECT.format(since="$1::float8")

        async def q(c: Conn) -> dict[str, int]:
            return _counts(await c.fetchrow(sql, since))

        return await self._read(q)  # type: ignore[no-any-return]
