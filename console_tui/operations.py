"""What the console asks of the core, through core.client only: who am I, and the operator
actions, single or bulk. Errors are left to the caller as `core.errors` classes."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from console_tui.permissions import Identity
from core.client import JobDeckClient
from core.errors import JobDeckError, NotFound

Json = dict[str, Any]
BULK_FALLBACK_LIMIT = 10_000  # jobs acted on one by one when the server has no bulk route


def _missing_route(exc: JobDeckError) -> bool:
    return exc.status in (404, 405) and exc.code in ("not_found", "method_not_allowed", "bad_request")


async def whoami(client: JobDeckClient) -> Identity:
    """The signed-in identity; a server without /auth/me runs without sign-in (everyone is admin)."""
    try:
        return Identity.from_me(await client.me())
    except NotFound:
        return Identity.no_sign_in()


async def job_action(client: JobDeckClient, job_id: int, action: str, priority: int | None = None) -> Json:
    """One job: cancel, pause, resume, retry, or priority (with `priority`)."""
    if action == "priority":
        assert priority is not None
        return await client.set_priority(job_id, priority)
    return await client.job_action(job_id, action)


async def bulk(
    client: JobDeckClient,
    action: str,
    *,
    ids: Sequence[int] | None = None,
    filter: Json | None = None,
    priority: int | None = None,
) -> Json:
    """`client.bulk`; on a server without POST /v1/jobs/bulk, the same job by job (same answer shape)."""
    try:
        return await client.bulk(action, ids=ids, filter=filter, priority=priority)
    except JobDeckError as exc:
        if not _missing_route(exc):  # the server has the route and refused: say why
            raise
    if ids is None:
        ids = await _matching_ids(client, filter or {})
    errors: list[Json] = []
    sem = asyncio.Semaphore(16)

    async def one(job_id: int) -> None:
        async with sem:
            try:
                await job_action(client, job_id, action, priority)
            except JobDeckError as exc:
                errors.append({"id": job_id, "error": exc.code, "message": exc.message})

    await asyncio.gather(*(one(i) for i in ids))
    return {"matched": len(ids), "changed": len(ids) - len(errors), "errors": sorted(errors, key=lambda e: e["id"])}


async def _matching_ids(client: JobDeckClient, flt: Json) -> list[int]:
    ids: list[int] = []
    cursor = None
    while len(ids) < BULK_FALLBACK_LIMIT:
        page = await client.list_jobs(**flt, cursor=cursor, limit=1000)
        ids += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    return ids


def bulk_summary(verb: str, result: Json) -> tuple[str, str]:
    """A notification for a bulk result: (message, severity)."""
    errors = result.get("errors") or []
    text = f"{verb}: {result.get('changed', 0)} of {result.get('matched', 0)} changed"
    if not errors:
        return text, "information"
    first = "; ".join(f"#{e['id']}: {e['message']}" for e in errors[:3])
    more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
    return f"{text}; {len(errors)} refused — {first}{more}", "warning"
