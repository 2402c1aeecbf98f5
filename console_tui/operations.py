"""What the console asks of the core, through core.client only: who am I, and the operator
actions (many jobs at once go through `client.bulk`, one call). Errors are left to the caller
as `core.errors` classes."""

from __future__ import annotations

from typing import Any

from console_tui.permissions import Identity
from core.client import JobDeckClient

Json = dict[str, Any]


async def whoami(client: JobDeckClient) -> Identity:
    """The signed-in identity, as the server's `/auth/me` says (without sign-in: the local admin)."""
    return Identity.from_me(await client.me())


async def job_action(client: JobDeckClient, job_id: int, action: str, priority: int | None = None) -> Json:
    """One job: cancel, pause, resume, retry, or priority (with `priority`)."""
    if action == "priority":
        assert priority is not None
        return await client.set_priority(job_id, priority)
    return await client.job_action(job_id, action)


def bulk_summary(verb: str, result: Json) -> tuple[str, str]:
    """A notification for a bulk result: (message, severity)."""
    errors = result.get("errors") or []
    text = f"{verb}: {result.get('changed', 0)} of {result.get('matched', 0)} changed"
    if not errors:
        return text, "information"
    first = "; ".join(f"#{e['id']}: {e['message']}" for e in errors[:3])
    more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
    return f"{text}; {len(errors)} refused — {first}{more}", "warning"
