"""Incoming hooks (POST /v1/hooks/{name}): their definitions, on both stores.

Written like core/store/notifications.py: each operation once, as a generator of statements, run by
that module's SQLite or PostgreSQL driver. A hook's secret (a signing secret, or a bearer token's
SHA-256) is in `secrets`, never shown. Replays are refused without a table of their own: the job a
hook submits carries the idempotency key `hook:{name}:{webhook-id}`, so a second call with a seen id
finds the first job.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson

from core.errors import Conflict, NotFound
from core.store._ops import Emit, Op, Stmt

HOOK_COLUMNS = "id, name, auth, secrets, template, tolerance, enabled, created_at, updated_at"


def _hook(r: Sequence[Any]) -> dict[str, Any]:
    return {"id": int(r[0]), "name": r[1], "auth": r[2], "secrets": orjson.loads(r[3]), "job": orjson.loads(r[4]),
            "tolerance": float(r[5]), "enabled": bool(r[6]), "created_at": float(r[7]),
            "updated_at": float(r[8])}  # fmt: skip


def public_hook(h: dict[str, Any]) -> dict[str, Any]:
    """A hook as events carry it (anyone on the feed sees them): no secret, no template."""
    return {k: h[k] for k in ("id", "name", "auth", "enabled")}


def _get(where: str, value: Any, label: str) -> Op:
    row = yield Stmt(f"SELECT {HOOK_COLUMNS} FROM notify_hooks WHERE {where} = ?", (value,), "one")
    if row is None:
        raise NotFound(f"no hook {label}", field="hook_id" if where == "id" else "name")
    return _hook(row)


def _create(now: float, name: str, auth: str, secrets: dict[str, Any], job: dict[str, Any], tolerance: float,
            enabled: bool) -> Op:  # fmt: skip
    row = yield Stmt(
        "INSERT INTO notify_hooks (name, auth, secrets, template, tolerance, enabled, created_at, updated_at) "
        f"VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING RETURNING {HOOK_COLUMNS}",
        (name, auth, orjson.dumps(secrets).decode(), orjson.dumps(job).decode(), tolerance, enabled, now, now),
        "one",
    )
    if row is None:
        raise Conflict(f"a hook named {name!r} exists already: choose another name", field="name")
    hook = _hook(row)
    yield Emit("notify.hook.created", {"hook": public_hook(hook)})
    return hook


def _update(now: float, hook_id: int, changes: dict[str, Any]) -> Op:
    old = yield from _get("id", hook_id, str(hook_id))
    new = {**old, **changes}
    row = yield Stmt(
        "UPDATE notify_hooks SET auth = ?, secrets = ?, template = ?, tolerance = ?, enabled = ?, updated_at = ? "
        f"WHERE id = ? RETURNING {HOOK_COLUMNS}",
        (new["auth"], orjson.dumps(new["secrets"]).decode(), orjson.dumps(new["job"]).decode(), new["tolerance"],
         new["enabled"], now, hook_id),
        "one",
    )  # fmt: skip
    hook = _hook(row)
    yield Emit("notify.hook.updated", {"hook": public_hook(hook)})
    return hook


def _delete(hook_id: int) -> Op:
    old = yield from _get("id", hook_id, str(hook_id))
    yield Stmt("DELETE FROM notify_hooks WHERE id = ?", (hook_id,))
    yield Emit("notify.hook.deleted", {"hook": public_hook(old)})


def _list() -> Op:
    rows = yield Stmt(f"SELECT {HOOK_COLUMNS} FROM notify_hooks ORDER BY id", (), "all")
    return [_hook(r) for r in rows]


class HookStore:
    """Hook definitions as store methods (mixed into the stores through their notifications)."""

    def _nwrite(self, make: Callable[[float], Op]) -> Awaitable[Any]:
        raise NotImplementedError

    def _nread(self, make: Callable[[], Op]) -> Awaitable[Any]:
        raise NotImplementedError

    async def create_hook(self, name: str, auth: str, secrets: dict[str, Any], job: dict[str, Any],
                          tolerance: float, enabled: bool = True) -> dict[str, Any]:  # fmt: skip
        """A new hook; Conflict if the name is taken."""
        return await self._nwrite(lambda now: _create(now, name, auth, secrets, job, tolerance, enabled))  # type: ignore[no-any-return]

    async def update_hook(self, hook_id: int, changes: dict[str, Any]) -> dict[str, Any]:
        """Replace some of a hook's fields (auth, secrets, job, tolerance, enabled)."""
        return await self._nwrite(lambda now: _update(now, hook_id, changes))  # type: ignore[no-any-return]

    async def delete_hook(self, hook_id: int) -> None:
        """Remove a hook (the jobs it submitted stay)."""
        await self._nwrite(lambda now: _delete(hook_id))

    async def get_hook(self, hook_id: int) -> dict[str, Any]:
        """One hook, secrets included."""
        return await self._nread(lambda: _get("id", hook_id, str(hook_id)))  # type: ignore[no-any-return]

    async def hook_named(self, name: str) -> dict[str, Any]:
        """The hook called `name` (NotFound naming `name`)."""
        return await self._nread(lambda: _get("name", name, repr(name)))  # type: ignore[no-any-return]

    async def list_hooks(self) -> list[dict[str, Any]]:
        """Every hook, by id."""
        return await self._nread(_list)  # type: ignore[no-any-return]
