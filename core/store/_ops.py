"""Store operations written once for both engines: a generator of statements (`Stmt`, `Emit`) that
receives each one's result, and a driver per engine that runs it (SQLite's writer thread or a
PostgreSQL transaction). The SQL is the same text (`?` placeholders, numbered for PostgreSQL);
where the engines differ a statement carries its PostgreSQL form beside it.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from core.store._pg_writer import Conn, PgTx
    from core.store._sqlite_writer import Tx


@dataclass(frozen=True, slots=True)
class Stmt:
    """One statement of an operation: its SQL, arguments, what to fetch ("one", "all", "none"),
    and its PostgreSQL text where that differs."""

    sql: str
    args: Sequence[Any] = ()
    fetch: Literal["one", "all", "none"] = "none"
    pg_sql: str | None = None


@dataclass(frozen=True, slots=True)
class Emit:
    """An event to write in the operation's transaction (outbox)."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None  # the queue it is about: the feed shows it only to those who see the queue


Op = Generator["Stmt | Emit", Any, Any]


@cache
def _numbered(sql: str) -> str:
    """`?` placeholders as PostgreSQL's $1, $2, ..."""
    n = 0

    def number(_: re.Match[str]) -> str:
        nonlocal n
        n += 1
        return f"${n}"

    return re.sub(r"\?", number, sql)


def run_sqlite(tx: Tx | sqlite3.Connection, op: Op) -> Any:
    """Drive `op` on SQLite: in a write transaction (`Tx`) or on a read connection."""
    conn = tx if isinstance(tx, sqlite3.Connection) else tx.conn
    result: Any = None
    try:
        while True:
            step = op.send(result)
            if isinstance(step, Emit):
                assert not isinstance(tx, sqlite3.Connection), "a read cannot emit events"
                tx.emit(step.type, None, step.queue, step.data)
                result = None
                continue
            cur = conn.execute(step.sql, tuple(step.args))
            result = cur.fetchone() if step.fetch == "one" else cur.fetchall() if step.fetch == "all" else None
    except StopIteration as stop:
        return stop.value


async def run_postgres(tx: PgTx | Conn, op: Op) -> Any:
    """Drive `op` on PostgreSQL: in the writer's transaction (`PgTx`) or on a pooled connection."""
    from core.store._pg_writer import PgTx

    conn = tx.conn if isinstance(tx, PgTx) else tx
    result: Any = None
    try:
        while True:
            step = op.send(result)
            if isinstance(step, Emit):
                assert isinstance(tx, PgTx), "a read cannot emit events"
                tx.emit(step.type, None, step.queue, step.data)
                result = None
                continue
            sql = _numbered(step.pg_sql or step.sql)
            if step.fetch == "one":
                row = await conn.fetchrow(sql, *step.args)
                result = None if row is None else tuple(row)
            elif step.fetch == "all":
                result = [tuple(r) for r in await conn.fetch(sql, *step.args)]
            else:
                await conn.execute(sql, *step.args)
                result = None
    except StopIteration as stop:
        return stop.value
