"""The positions and leases of the outbox relays (core/relay/), on both stores; the rows named in
LEASE_ONLY are leases alone (the retention rounds hold one, so one node archives at a time).

Each relay (one per sink: "kafka", later "notify") has one row in `relay_cursors`: the last event
sequence number its sink acknowledged, and a lease naming the one node that may move it. The
holder renews the lease every few seconds; once it lapses (the node died) any node may take it,
which bumps `epoch`, so a holder that was presumed dead finds out at its next write and stops.
The position only ever grows (max), so two writes landing out of order cannot move it back.

Times are the nodes' clocks (tx.now), as for job leases: keep them in step (NTP).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.model import iso

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Awaitable, Callable

    from core.store._pg_writer import Conn, PgTx
    from core.store._sqlite_writer import Tx


@dataclass(frozen=True, slots=True)
class RelayLease:
    """A relay's lease as its holder got it: who, which epoch (the fencing token), until when, and
    the position it starts from."""

    name: str
    holder: str
    epoch: int
    acked_seq: int
    until: float


@dataclass(frozen=True, slots=True)
class RelayPosition:
    """One relay as any node sees it in the store (for /v1/stats)."""

    name: str
    acked_seq: int
    holder: str | None
    lease_until: float
    epoch: int
    acked_at: float | None
    next_ts: float | None  # the time of the oldest event not yet acknowledged (None: caught up)

    def view(self, last_seq: int, now: float) -> dict[str, Any]:
        """The relay's lag as the API shows it."""
        held = self.holder is not None and self.lease_until >= now
        return {
            "holder": self.holder if held else None,
            "acked_seq": self.acked_seq,
            "behind_events": max(0, last_seq - self.acked_seq),
            "behind_seconds": round(max(0.0, now - self.next_ts), 3) if self.next_ts is not None else 0.0,
            "lease_expires_in": round(self.lease_until - now, 3) if held else None,
            "acked_at": iso(self.acked_at),
        }


_COLUMNS = "name, acked_seq, holder, lease_until, epoch, acked_at"
#: Rows that are a lease only, with no position in the events (the retention rounds, core/retention.py):
#: not relays, so not in relay_positions.
LEASE_ONLY = ("retention",)
_RELAYS_ONLY = "name NOT IN (" + ", ".join(f"'{n}'" for n in LEASE_ONLY) + ")"


def _position(row: Any, next_ts: float | None) -> RelayPosition:
    return RelayPosition(str(row[0]), int(row[1]), row[2], float(row[3]), int(row[4]), row[5], next_ts)


class SQLiteRelayCursors:
    """Relay cursors on the SQLite store (mixed into SQLiteStore)."""

    _write: Callable[[Callable[[Tx], Any]], asyncio.Future[Any]]
    _read: Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]

    async def claim_relay(self, name: str, holder: str, ttl: float) -> RelayLease | None:
        """Take or renew the lease of relay `name` for `holder`; None while another node holds it."""

        def op(tx: Tx) -> RelayLease | None:
            c = tx.conn
            c.execute("INSERT OR IGNORE INTO relay_cursors (name, created_at) VALUES (?, ?)", (name, tx.now))
            row = c.execute(
                "UPDATE relay_cursors SET epoch = CASE WHEN holder = ? THEN epoch ELSE epoch + 1 END, holder = ?, "
                "lease_until = ? WHERE name = ? AND (holder = ? OR holder IS NULL OR lease_until < ?) "
                "RETURNING epoch, acked_seq",
                (holder, holder, tx.now + ttl, name, holder, tx.now),
            ).fetchone()
            return None if row is None else RelayLease(name, holder, int(row[0]), int(row[1]), tx.now + ttl)

        return await self._write(op)  # type: ignore[no-any-return]

    async def advance_relay(self, lease: RelayLease, acked_seq: int, ttl: float) -> RelayLease | None:
        """Record that the sink acknowledged every event through `acked_seq`, and renew the lease;
        None if the lease is no longer this holder's (nothing is written then)."""

        def op(tx: Tx) -> RelayLease | None:
            row = tx.conn.execute(
                "UPDATE relay_cursors SET acked_seq = max(acked_seq, ?), acked_at = ?, lease_until = ? "
                "WHERE name = ? AND holder = ? AND epoch = ? RETURNING acked_seq",
                (acked_seq, tx.now, tx.now + ttl, lease.name, lease.holder, lease.epoch),
            ).fetchone()
            if row is None:
                return None
            return RelayLease(lease.name, lease.holder, lease.epoch, int(row[0]), tx.now + ttl)

        return await self._write(op)  # type: ignore[no-any-return]

    async def release_relay(self, lease: RelayLease) -> None:
        """Give the lease up (a clean stop), so another node takes over at once."""

        def op(tx: Tx) -> None:
            tx.conn.execute(
                "UPDATE relay_cursors SET holder = NULL, lease_until = 0 WHERE name = ? AND holder = ? AND epoch = ?",
                (lease.name, lease.holder, lease.epoch),
            )

        await self._write(op)

    async def relay_positions(self) -> list[RelayPosition]:
        """Every relay's position and lease, by name."""

        def q(c: sqlite3.Connection) -> list[RelayPosition]:
            out = []
            for row in c.execute(f"SELECT {_COLUMNS} FROM relay_cursors WHERE {_RELAYS_ONLY} ORDER BY name").fetchall():
                nxt = c.execute("SELECT ts FROM events WHERE seq > ? ORDER BY seq LIMIT 1", (row[1],)).fetchone()
                out.append(_position(row, None if nxt is None else nxt[0]))
            return out

        return await self._read(q)  # type: ignore[no-any-return]


class PostgresRelayCursors:
    """Relay cursors on the PostgreSQL store (mixed into PostgresStore): the same statements, and
    the row's lock makes two nodes claiming at once take turns."""

    _write: Callable[[Callable[[PgTx], Awaitable[Any]]], asyncio.Future[Any]]
    _read: Callable[[Callable[[Conn], Awaitable[Any]]], Awaitable[Any]]

    async def claim_relay(self, name: str, holder: str, ttl: float) -> RelayLease | None:
        """Take or renew the lease of relay `name` for `holder`; None while another node holds it."""

        async def op(tx: PgTx) -> RelayLease | None:
            c = tx.conn
            await c.execute(
                "INSERT INTO relay_cursors (name, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING", name, tx.now
            )
            row = await c.fetchrow(
                "UPDATE relay_cursors SET epoch = CASE WHEN holder = $1 THEN epoch ELSE epoch + 1 END, holder = $1, "
                "lease_until = $2 WHERE name = $3 AND (holder = $1 OR holder IS NULL OR lease_until < $4) "
                "RETURNING epoch, acked_seq",
                holder,
                tx.now + ttl,
                name,
                tx.now,
            )
            return None if row is None else RelayLease(name, holder, int(row[0]), int(row[1]), tx.now + ttl)

        return await self._write(op)  # type: ignore[no-any-return]

    async def advance_relay(self, lease: RelayLease, acked_seq: int, ttl: float) -> RelayLease | None:
        """Record that the sink acknowledged every event through `acked_seq`, and renew the lease;
        None if the lease is no longer this holder's (nothing is written then)."""

        async def op(tx: PgTx) -> RelayLease | None:
            value = await tx.conn.fetchval(
                "UPDATE relay_cursors SET acked_seq = greatest(acked_seq, $1), acked_at = $2, lease_until = $3 "
                "WHERE name = $4 AND holder = $5 AND epoch = $6 RETURNING acked_seq",
                acked_seq,
                tx.now,
                tx.now + ttl,
                lease.name,
                lease.holder,
                lease.epoch,
            )
            if value is None:
                return None
            return RelayLease(lease.name, lease.holder, lease.epoch, int(value), tx.now + ttl)

        return await self._write(op)  # type: ignore[no-any-return]

    async def release_relay(self, lease: RelayLease) -> None:
        """Give the lease up (a clean stop), so another node takes over at once."""

        async def op(tx: PgTx) -> None:
            await tx.conn.execute(
                "UPDATE relay_cursors SET holder = NULL, lease_until = 0 WHERE name = $1 AND holder = $2 AND epoch = $3",
                lease.name,
                lease.holder,
                lease.epoch,
            )

        await self._write(op)

    async def relay_positions(self) -> list[RelayPosition]:
        """Every relay's position and lease, by name."""

        async def q(c: Conn) -> list[RelayPosition]:
            rows = await c.fetch(
                f"SELECT {_COLUMNS}, (SELECT ts FROM events WHERE seq > r.acked_seq ORDER BY seq LIMIT 1) "
                f"FROM relay_cursors r WHERE {_RELAYS_ONLY} ORDER BY name"
            )
            return [_position(tuple(r), r[6]) for r in rows]

        return await self._read(q)  # type: ignore[no-any-return]
