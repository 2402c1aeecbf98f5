"""Notification channels, rules, and the delivery log (core/notify/), on both stores.

Each operation is written once, as a generator of statements run by core/store/_ops.py's driver for
SQLite or for PostgreSQL, so the two stores cannot drift apart.

A delivery is a row written before anything is sent: the relay's sink commits it (and the cursor
moves only after), then a dispatcher claims due rows under a short lease, sends them, and records
each attempt. A crash between the two repeats an attempt; it never loses a delivery.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from core.errors import Conflict, NotFound
from core.store._ops import Emit, Op, Stmt, run_postgres, run_sqlite
from core.store.hooks import HookStore

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Awaitable

    from core.store._pg_writer import Conn, PgTx
    from core.store._sqlite_writer import Tx


# -- rows

CHANNEL_COLUMNS = "id, name, kind, config, secrets, enabled, disabled_reason, failures, created_at, updated_at"
DELIVERY_COLUMNS = ("id, channel_id, rule_id, kind, message_id, payload, status, attempts, max_attempts, next_at, "
                    "created_at, finished_at, last_status, last_error")  # fmt: skip
ATTEMPT_COLUMNS = "id, delivery_id, channel_id, attempt, at, ok, status, latency_ms, response, error"
RULE_COLUMNS = "id, name, spec, enabled, state, created_at, updated_at"


def _channel(r: Sequence[Any]) -> dict[str, Any]:
    return {"id": int(r[0]), "name": r[1], "kind": r[2], "config": orjson.loads(r[3]), "secrets": orjson.loads(r[4]),
            "enabled": bool(r[5]), "disabled_reason": r[6], "failures": int(r[7]), "created_at": float(r[8]),
            "updated_at": float(r[9])}  # fmt: skip


def _delivery(r: Sequence[Any]) -> dict[str, Any]:
    return {"id": int(r[0]), "channel_id": int(r[1]), "rule_id": r[2], "kind": r[3], "message_id": r[4],
            "payload": orjson.loads(r[5]), "status": r[6], "attempts": int(r[7]), "max_attempts": int(r[8]),
            "next_at": float(r[9]), "created_at": float(r[10]), "finished_at": r[11], "last_status": r[12],
            "last_error": r[13]}  # fmt: skip


def _attempt(r: Sequence[Any]) -> dict[str, Any]:
    return {"id": int(r[0]), "delivery_id": int(r[1]), "channel_id": int(r[2]), "attempt": int(r[3]),
            "at": float(r[4]), "ok": bool(r[5]), "status": r[6], "latency_ms": float(r[7]), "response": r[8],
            "error": r[9]}  # fmt: skip


def _rule(r: Sequence[Any]) -> dict[str, Any]:
    return {"id": int(r[0]), "name": r[1], "spec": orjson.loads(r[2]), "enabled": bool(r[3]),
            "state": orjson.loads(r[4]), "created_at": float(r[5]), "updated_at": float(r[6])}  # fmt: skip


def _json(v: Any) -> str:
    return orjson.dumps(v).decode()


def _public_channel(c: dict[str, Any]) -> dict[str, Any]:
    """A channel as events carry it (anyone on the feed sees them): no settings (a URL may hold a
    token), no secrets; admins read the rest from the API."""
    return {k: c[k] for k in ("id", "name", "kind", "enabled", "disabled_reason")}


def _public_rule(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r[k] for k in ("id", "name", "enabled")}


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What one send of a delivery gave, as the dispatcher records it."""

    delivery_id: int
    channel_id: int
    ok: bool
    status: int | None
    latency_ms: float
    response: str | None
    error: str | None
    retry_at: float | None  # when to try again (None: no more tries: delivered, or out of attempts)
    counts: bool = True  # counts toward the channel's consecutive failures (not while its breaker is open)
    disable_after: int = 0  # consecutive failures that disable the channel (0: never)


# -- operations (generators: one body, two drivers)


def _get_channel(channel_id: int) -> Op:
    row = yield Stmt(f"SELECT {CHANNEL_COLUMNS} FROM notify_channels WHERE id = ?", (channel_id,), "one")
    if row is None:
        raise NotFound(f"no notification channel {channel_id}", field="channel_id")
    return _channel(row)


def _create_channel(now: float, name: str, kind: str, config: dict[str, Any], secrets: dict[str, Any]) -> Op:
    row = yield Stmt(
        f"INSERT INTO notify_channels (name, kind, config, secrets, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?) "
        f"ON CONFLICT (name) DO NOTHING RETURNING {CHANNEL_COLUMNS}",
        (name, kind, _json(config), _json(secrets), now, now),
        "one",
    )
    if row is None:
        raise Conflict(f"a notification channel named {name!r} exists already: choose another name", field="name")
    channel = _channel(row)
    yield Emit("notify.channel.created", {"channel": _public_channel(channel)})
    return channel


def _update_channel(now: float, channel_id: int, config: dict[str, Any] | None, secrets: dict[str, Any] | None,
                    enabled: bool | None) -> Op:  # fmt: skip
    old = yield from _get_channel(channel_id)
    new_config = old["config"] if config is None else {**old["config"], **config}
    new_secrets = old["secrets"] if secrets is None else {k: v for k, v in {**old["secrets"], **secrets}.items() if v}
    on = old["enabled"] if enabled is None else enabled
    row = yield Stmt(
        "UPDATE notify_channels SET config = ?, secrets = ?, enabled = ?, updated_at = ?, "
        "failures = CASE WHEN ? THEN 0 ELSE failures END, disabled_reason = CASE WHEN ? THEN NULL ELSE disabled_reason END "
        f"WHERE id = ? RETURNING {CHANNEL_COLUMNS}",
        (_json(new_config), _json(new_secrets), on, now, on and not old["enabled"], on, channel_id),
        "one",
    )  # fmt: skip
    channel = _channel(row)
    yield Emit("notify.channel.updated", {"channel": _public_channel(channel)})
    return channel


def _delete_channel(channel_id: int) -> Op:
    old = yield from _get_channel(channel_id)
    yield Stmt("DELETE FROM notify_attempts WHERE channel_id = ?", (channel_id,))
    yield Stmt("DELETE FROM notify_deliveries WHERE channel_id = ?", (channel_id,))
    yield Stmt("DELETE FROM notify_channels WHERE id = ?", (channel_id,))
    yield Emit("notify.channel.deleted", {"channel": _public_channel(old)})


def _list_channels() -> Op:
    rows = yield Stmt(f"SELECT {CHANNEL_COLUMNS} FROM notify_channels ORDER BY id", (), "all")
    return [_channel(r) for r in rows]


def _add_deliveries(now: float, items: Sequence[dict[str, Any]], claim_until: float,
                    events: Sequence[Emit]) -> Op:  # fmt: skip
    """Insert deliveries (a repeated message_id is skipped: the relay repeats rounds), claimed for
    the caller until `claim_until` (0: for any dispatcher; an item with `claim: False` is never
    claimed), and the events that go with them. A
    `notify.alert` event whose deliveries (items with its `alert_id`) were all stored before is
    left out too: a repeated round shows no alert twice."""
    out = []
    fresh: set[str] = set()
    for it in items:
        row = yield Stmt(
            "INSERT INTO notify_deliveries (channel_id, rule_id, kind, message_id, payload, status, max_attempts, "
            "next_at, claimed_until, created_at) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?) "
            f"ON CONFLICT (message_id) DO NOTHING RETURNING {DELIVERY_COLUMNS}",
            (it["channel_id"], it.get("rule_id"), it["kind"], it["message_id"], _json(it["payload"]),
             it["max_attempts"], now, claim_until if it.get("claim", True) else 0.0, now),
            "one",
        )  # fmt: skip
        if row is not None:
            out.append(_delivery(row))
            fresh.add(str(it.get("alert_id")))
    sent = {str(it.get("alert_id")) for it in items if it.get("alert_id")}
    for e in events:
        alert_id = e.data.get("id") if e.type == "notify.alert" else None
        if alert_id is None or alert_id not in sent or alert_id in fresh:
            yield e
    return out


_CLAIM = (
    "UPDATE notify_deliveries SET claimed_until = ? WHERE id IN (SELECT d.id FROM notify_deliveries d "
    "JOIN notify_channels c ON c.id = d.channel_id WHERE d.status = 'pending' AND d.next_at <= ? "
    "AND d.claimed_until < ? AND c.enabled AND d.channel_id NOT IN (SELECT value FROM json_each(?)) "
    f"ORDER BY d.next_at LIMIT ?) RETURNING {DELIVERY_COLUMNS}"
)
_PG_CLAIM = (
    "UPDATE notify_deliveries SET claimed_until = ? WHERE id IN (SELECT d.id FROM notify_deliveries d "
    "JOIN notify_channels c ON c.id = d.channel_id WHERE d.status = 'pending' AND d.next_at <= ? "
    "AND d.claimed_until < ? AND c.enabled AND NOT (d.channel_id = ANY(?::bigint[])) "
    f"ORDER BY d.next_at LIMIT ? FOR UPDATE OF d SKIP LOCKED) RETURNING {DELIVERY_COLUMNS}"
)


# When a claim would first find something, a read (a claim is a write even when it takes nothing): the
# soonest next_at of the unclaimed (in next_at order, so a backlog is not read). A delivery claimed by a
# node that died comes back after its claim (CLAIM_TTL); the dispatcher's idle timeout finds it then.
_DUE = (
    "SELECT d.next_at FROM notify_deliveries d JOIN notify_channels c ON c.id = d.channel_id WHERE d.status = 'pending' "
    "AND d.claimed_until < ? AND c.enabled AND d.channel_id NOT IN (SELECT value FROM json_each(?)) "
    "ORDER BY d.next_at LIMIT 1"
)
_PG_DUE = (
    "SELECT d.next_at FROM notify_deliveries d JOIN notify_channels c ON c.id = d.channel_id WHERE d.status = 'pending' "
    "AND d.claimed_until < ? AND c.enabled AND NOT (d.channel_id = ANY(?::bigint[])) ORDER BY d.next_at LIMIT 1"
)


def _due(now: float, skip: Sequence[int], pg: bool) -> Op:
    skip_arg: Any = list(skip) if pg else _json(list(skip))
    row = yield Stmt(_DUE, (now, skip_arg), "one", pg_sql=_PG_DUE)
    return None if row is None else float(row[0])


def _claim(now: float, until: float, limit: int, skip: Sequence[int], pg: bool) -> Op:
    skip_arg: Any = list(skip) if pg else _json(list(skip))
    rows = yield Stmt(_CLAIM, (until, now, now, skip_arg, limit), "all", pg_sql=_PG_CLAIM)
    return sorted((_delivery(r) for r in rows), key=lambda d: d["next_at"])


def _record(now: float, results: Sequence[AttemptResult]) -> Op:
    """One attempt per result; the delivery's state; the channel's consecutive failures, and the
    channel disabled (with an event) once they reach its limit. Returns the channels disabled."""
    disabled = []
    for r in results:
        row = yield Stmt(
            "UPDATE notify_deliveries SET attempts = attempts + 1, claimed_until = 0, last_status = ?, last_error = ?, "
            "status = ?, next_at = ?, finished_at = ? WHERE id = ? AND status = 'pending' RETURNING attempts",
            (r.status, r.error, "pending" if r.retry_at is not None else "delivered" if r.ok else "failed",
             r.retry_at if r.retry_at is not None else now, None if r.retry_at is not None else now, r.delivery_id),
            "one",
        )  # fmt: skip
        if row is None:
            continue  # deleted with its channel meanwhile
        yield Stmt(
            "INSERT INTO notify_attempts (delivery_id, channel_id, attempt, at, ok, status, latency_ms, response, error) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (r.delivery_id, r.channel_id, int(row[0]), now, r.ok, r.status, r.latency_ms, r.response, r.error),
        )  # fmt: skip
        if r.ok:
            yield Stmt("UPDATE notify_channels SET failures = 0 WHERE id = ? AND failures > 0", (r.channel_id,))
        elif r.counts:
            c = yield Stmt(
                "UPDATE notify_channels SET failures = failures + 1 WHERE id = ? RETURNING failures, enabled",
                (r.channel_id,),
                "one",
            )
            if c is not None and c[1] and r.disable_after and int(c[0]) >= r.disable_after:
                reason = f"{int(c[0])} failed attempts in a row; the last: {r.error or f'HTTP {r.status}'}"
                ch = yield Stmt(
                    f"UPDATE notify_channels SET enabled = ?, disabled_reason = ?, updated_at = ? WHERE id = ? "
                    f"RETURNING {CHANNEL_COLUMNS}",
                    (False, reason, now, r.channel_id),
                    "one",
                )
                channel = _public_channel(_channel(ch))
                disabled.append(channel)
                yield Emit("notify.channel.disabled", {"channel": channel, "reason": reason})
    return disabled


def _release(delivery_ids: Sequence[int]) -> Op:
    for d in delivery_ids:
        yield Stmt("UPDATE notify_deliveries SET claimed_until = 0 WHERE id = ? AND status = 'pending'", (d,))


def _hurry(now: float, channel_id: int) -> Op:
    """Every waiting delivery of a channel due now (its receiver answers again)."""
    yield Stmt(
        "UPDATE notify_deliveries SET next_at = ? WHERE channel_id = ? AND status = 'pending' AND next_at > ?",
        (now, channel_id, now),
    )


def _get_delivery(delivery_id: int) -> Op:
    row = yield Stmt(f"SELECT {DELIVERY_COLUMNS} FROM notify_deliveries WHERE id = ?", (delivery_id,), "one")
    if row is None:
        raise NotFound(f"no notification {delivery_id}", field="notification_id")
    d = _delivery(row)
    rows = yield Stmt(f"SELECT {ATTEMPT_COLUMNS} FROM notify_attempts WHERE delivery_id = ? ORDER BY id",
                      (delivery_id,), "all")  # fmt: skip
    d["log"] = [_attempt(r) for r in rows]
    return d


def _replay(now: float, delivery_id: int, extra_attempts: int) -> Op:
    """Send a delivery again (the same webhook-id, so a receiver that keeps ids sees a repeat)."""
    d = yield from _get_delivery(delivery_id)
    if d["status"] == "pending":
        raise Conflict(f"notification {delivery_id} is still being delivered (attempt {d['attempts']})",
                       field="notification_id")  # fmt: skip
    row = yield Stmt(
        "UPDATE notify_deliveries SET status = 'pending', next_at = ?, claimed_until = 0, finished_at = NULL, "
        f"max_attempts = attempts + ? WHERE id = ? RETURNING {DELIVERY_COLUMNS}",
        (now, extra_attempts, delivery_id),
        "one",
    )
    yield Emit("notify.replayed", {"notification_id": delivery_id, "channel_id": d["channel_id"]})
    return _delivery(row)


def _list_deliveries(channel_id: int | None, before_id: int | None, limit: int) -> Op:
    where, args = [], []
    if channel_id is not None:
        where.append("channel_id = ?")
        args.append(channel_id)
    if before_id is not None:
        where.append("id < ?")
        args.append(before_id)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    rows = yield Stmt(f"SELECT {DELIVERY_COLUMNS} FROM notify_deliveries{clause} ORDER BY id DESC LIMIT ?",
                      (*args, limit), "all")  # fmt: skip
    return [_delivery(r) for r in rows]


def _list_attempts(channel_id: int, before_id: int | None, limit: int) -> Op:
    rows = yield Stmt(
        f"SELECT {ATTEMPT_COLUMNS} FROM notify_attempts WHERE channel_id = ? AND id < ? ORDER BY id DESC LIMIT ?",
        (channel_id, before_id if before_id is not None else 2**62, limit),
        "all",
    )
    return [_attempt(r) for r in rows]


# -- rules


def _get_rule(rule_id: int) -> Op:
    row = yield Stmt(f"SELECT {RULE_COLUMNS} FROM notify_rules WHERE id = ?", (rule_id,), "one")
    if row is None:
        raise NotFound(f"no notification rule {rule_id}", field="rule_id")
    return _rule(row)


def _create_rule(now: float, name: str, spec: dict[str, Any], enabled: bool) -> Op:
    row = yield Stmt(
        "INSERT INTO notify_rules (name, spec, enabled, created_at, updated_at) VALUES (?, ?, ?, ?, ?) "
        f"ON CONFLICT (name) DO NOTHING RETURNING {RULE_COLUMNS}",
        (name, _json(spec), enabled, now, now),
        "one",
    )
    if row is None:
        raise Conflict(f"a notification rule named {name!r} exists already: choose another name", field="name")
    rule = _rule(row)
    yield Emit("notify.rule.created", {"rule": _public_rule(rule)})
    return rule


def _update_rule(now: float, rule_id: int, spec: dict[str, Any] | None, enabled: bool | None) -> Op:
    old = yield from _get_rule(rule_id)
    row = yield Stmt(
        f"UPDATE notify_rules SET spec = ?, enabled = ?, updated_at = ? WHERE id = ? RETURNING {RULE_COLUMNS}",
        (_json(old["spec"] if spec is None else spec), old["enabled"] if enabled is None else enabled, now, rule_id),
        "one",
    )
    rule = _rule(row)
    yield Emit("notify.rule.updated", {"rule": _public_rule(rule)})
    return rule


def _delete_rule(rule_id: int) -> Op:
    old = yield from _get_rule(rule_id)
    yield Stmt("DELETE FROM notify_rules WHERE id = ?", (rule_id,))
    yield Emit("notify.rule.deleted", {"rule": _public_rule(old)})


def _list_rules() -> Op:
    rows = yield Stmt(f"SELECT {RULE_COLUMNS} FROM notify_rules ORDER BY id", (), "all")
    return [_rule(r) for r in rows]


def _save_rule_states(states: dict[int, dict[str, Any]]) -> Op:
    for rule_id, state in states.items():
        yield Stmt("UPDATE notify_rules SET state = ? WHERE id = ?", (_json(state), rule_id))


class _Notifications(HookStore):
    """The operations as store methods; the subclasses say how one runs on their engine."""

    _pg = False

    async def create_channel(
        self, name: str, kind: str, config: dict[str, Any], secrets: dict[str, Any]
    ) -> dict[str, Any]:
        """A new channel; Conflict if the name is taken."""
        return await self._nwrite(lambda now: _create_channel(now, name, kind, config, secrets))  # type: ignore[no-any-return]

    async def update_channel(self, channel_id: int, *, config: dict[str, Any] | None = None,
                             secrets: dict[str, Any] | None = None, enabled: bool | None = None) -> dict[str, Any]:  # fmt: skip
        """Change a channel's settings (merged), secrets (merged; an empty value removes one) or
        whether it is on (turning it on clears its failure count)."""
        return await self._nwrite(lambda now: _update_channel(now, channel_id, config, secrets, enabled))  # type: ignore[no-any-return]

    async def delete_channel(self, channel_id: int) -> None:
        """Remove a channel with its delivery log."""
        await self._nwrite(lambda now: _delete_channel(channel_id))

    async def get_channel(self, channel_id: int) -> dict[str, Any]:
        """One channel, secrets included (the API leaves them out)."""
        return await self._nread(lambda: _get_channel(channel_id))  # type: ignore[no-any-return]

    async def list_channels(self) -> list[dict[str, Any]]:
        """Every channel, secrets included, by id."""
        return await self._nread(_list_channels)  # type: ignore[no-any-return]

    async def add_deliveries(
        self, items: Sequence[dict[str, Any]], events: Sequence[Emit] = ()
    ) -> list[dict[str, Any]]:
        """Write deliveries (skipping message ids written before) and the events that go with them."""
        return await self._nwrite(lambda now: _add_deliveries(now, items, 0.0, events))  # type: ignore[no-any-return]

    async def claim_deliveries(
        self, now: float, ttl: float, limit: int, skip: Sequence[int] = ()
    ) -> list[dict[str, Any]]:
        """Due deliveries of enabled channels not in `skip`, claimed for `ttl` seconds, oldest due first."""
        return await self._nwrite(lambda _now: _claim(now, now + ttl, limit, skip, self._pg))  # type: ignore[no-any-return]

    async def next_delivery_at(self, now: float, skip: Sequence[int] = ()) -> float | None:
        """When `claim_deliveries` would first take something of what is unclaimed at `now` (None:
        nothing waits); a read, so an idle node's looks write nothing."""
        return await self._nread(lambda: _due(now, skip, self._pg))  # type: ignore[no-any-return]

    async def record_attempts(self, results: Sequence[AttemptResult]) -> list[dict[str, Any]]:
        """Record sends; returns the channels this disabled."""
        return await self._nwrite(lambda now: _record(now, results))  # type: ignore[no-any-return]

    async def release_deliveries(self, delivery_ids: Sequence[int]) -> None:
        """Give claimed, unsent deliveries back (a clean stop)."""
        await self._nwrite(lambda now: _release(delivery_ids))

    async def hurry_channel(self, channel_id: int) -> None:
        """Make every waiting delivery of a channel due now."""
        await self._nwrite(lambda now: _hurry(now, channel_id))

    async def get_delivery(self, delivery_id: int) -> dict[str, Any]:
        """One delivery with its attempts ("log")."""
        return await self._nread(lambda: _get_delivery(delivery_id))  # type: ignore[no-any-return]

    async def replay_delivery(self, delivery_id: int, extra_attempts: int) -> dict[str, Any]:
        """Send a finished delivery again; Conflict while it is still pending."""
        return await self._nwrite(lambda now: _replay(now, delivery_id, extra_attempts))  # type: ignore[no-any-return]

    async def list_deliveries(self, channel_id: int | None, before_id: int | None, limit: int) -> list[dict[str, Any]]:
        """Deliveries, newest first."""
        return await self._nread(lambda: _list_deliveries(channel_id, before_id, limit))  # type: ignore[no-any-return]

    async def list_delivery_attempts(self, channel_id: int, before_id: int | None, limit: int) -> list[dict[str, Any]]:
        """A channel's delivery log (attempts), newest first."""
        return await self._nread(lambda: _list_attempts(channel_id, before_id, limit))  # type: ignore[no-any-return]

    async def create_rule(self, name: str, spec: dict[str, Any], enabled: bool = True) -> dict[str, Any]:
        """A new rule; Conflict if the name is taken."""
        return await self._nwrite(lambda now: _create_rule(now, name, spec, enabled))  # type: ignore[no-any-return]

    async def update_rule(self, rule_id: int, *, spec: dict[str, Any] | None = None,
                          enabled: bool | None = None) -> dict[str, Any]:  # fmt: skip
        """Replace a rule's spec and/or turn it on or off."""
        return await self._nwrite(lambda now: _update_rule(now, rule_id, spec, enabled))  # type: ignore[no-any-return]

    async def delete_rule(self, rule_id: int) -> None:
        """Remove a rule."""
        await self._nwrite(lambda now: _delete_rule(rule_id))

    async def get_rule(self, rule_id: int) -> dict[str, Any]:
        """One rule with its evaluation state."""
        return await self._nread(lambda: _get_rule(rule_id))  # type: ignore[no-any-return]

    async def list_rules(self) -> list[dict[str, Any]]:
        """Every rule, by id."""
        return await self._nread(_list_rules)  # type: ignore[no-any-return]

    async def save_rule_states(self, states: dict[int, dict[str, Any]], items: Sequence[dict[str, Any]] = (),
                               events: Sequence[Emit] = (), claim_ttl: float = 0.0) -> list[dict[str, Any]]:  # fmt: skip
        """Rules' evaluation states, with the deliveries and events they raised, in one transaction;
        the new deliveries claimed for the caller for `claim_ttl` seconds (0: left for any dispatcher)."""

        def op(now: float) -> Op:
            yield from _save_rule_states(states)
            return (yield from _add_deliveries(now, items, now + claim_ttl if claim_ttl else 0.0, events))

        return await self._nwrite(op)  # type: ignore[no-any-return]


class SQLiteNotifications(_Notifications):
    """Notifications on the SQLite store (mixed into SQLiteStore)."""

    _write: Callable[[Callable[[Tx], Any]], asyncio.Future[Any]]
    _read: Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]

    def _nwrite(self, make: Callable[[float], Op]) -> Awaitable[Any]:
        return self._write(lambda tx: run_sqlite(tx, make(tx.now)))

    def _nread(self, make: Callable[[], Op]) -> Awaitable[Any]:
        return self._read(lambda c: run_sqlite(c, make()))


class PostgresNotifications(_Notifications):
    """Notifications on the PostgreSQL store (mixed into PostgresStore)."""

    _write: Callable[[Callable[[PgTx], Awaitable[Any]]], asyncio.Future[Any]]
    _read: Callable[[Callable[[Conn], Awaitable[Any]]], Awaitable[Any]]
    _pg = True

    def _nwrite(self, make: Callable[[float], Op]) -> Awaitable[Any]:
        return self._write(lambda tx: run_postgres(tx, make(tx.now)))

    def _nread(self, make: Callable[[], Op]) -> Awaitable[Any]:
        return self._read(lambda c: run_postgres(c, make()))
