"""Bulk job actions through the core's /v1/jobs/bulk; against a core without that route, the
same result from one call per job (the filter is read page by page)."""

from __future__ import annotations

from typing import Any

from core.client import JobDeckClient
from core.errors import JobDeckError

PAGE = 1000


async def bulk(client: JobDeckClient, action: str, *, ids: list[int] | None = None,
               filter: dict[str, Any] | None = None, priority: int | None = None) -> dict[str, Any]:  # fmt: skip
    """`{"matched", "changed", "errors": [{"id", "error", "message"}]}` like the core's bulk call."""
    try:
        return await client.bulk(action, ids=ids, filter=filter, priority=priority)
    except JobDeckError as exc:
        if exc.status not in (404, 405):
            raise
    if ids is None:
        ids, cursor = [], None
        while True:
            page = await client.list_jobs(**(filter or {}), cursor=cursor, limit=PAGE)
            ids.extend(int(j["id"]) for j in page["jobs"])
            cursor = page.get("next_cursor")
            if not cursor:
                break
    changed, errors = 0, []
    for job_id in ids:
        try:
            if action == "priority":
                await client.set_priority(job_id, int(priority or 0))
            else:
                await client.job_action(job_id, action)
            changed += 1
        except JobDeckError as exc:
            errors.append({"id": job_id, "error": exc.code, "message": exc.message})
    return {"matched": len(ids), "changed": changed, "errors": errors}
