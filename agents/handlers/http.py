"""The http handler: one request; a 2xx status is success. Whether the host answered well goes back
with the result, for the circuit breaker the core keeps of each queue's target hosts (core/breaker.py):
the core holds back (or fails) a host's jobs while its breaker is open, so no request is sent then."""

from __future__ import annotations

from typing import Any

import httpx

from agents.handlers.base import Outcome, RunContext
from agents.secrets import SecretNotFound

EXCERPT = 2048
DEFAULT_TIMEOUT = 60.0

_client: httpx.AsyncClient | None = None


def _shared_client() -> httpx.AsyncClient:
    global _client
    if _client is None:
        _client = httpx.AsyncClient(follow_redirects=True, timeout=DEFAULT_TIMEOUT)
    return _client


async def run_http(task: dict[str, Any], ctx: RunContext) -> Outcome:
    """Send the request; keep the status and an excerpt of the body."""
    try:
        headers = ctx.resolve_env(task.get("headers"))  # {"secret": name} values come from the agent
    except SecretNotFound as exc:
        return Outcome(False, str(exc), retryable=False)
    kwargs: dict[str, Any] = {"headers": headers}
    body = task.get("body")
    if isinstance(body, (dict, list)):
        kwargs["json"] = body
    elif body is not None:
        kwargs["content"] = str(body)
    try:
        resp = await _shared_client().request(task.get("method", "GET"), task["url"], **kwargs)
    except httpx.HTTPError as exc:
        error = ctx.redact(f"{type(exc).__name__}: {exc or 'request failed'} ({task['url']})")
        return Outcome(False, error, breaker_ok=False)
    text = resp.text
    ctx.write(text.encode())
    result = {"status": resp.status_code, "body": ctx.redact(text[:EXCERPT])}
    healthy = not counts_as_failure(resp.status_code)
    if 200 <= resp.status_code < 300:
        return Outcome(True, result=result, breaker_ok=healthy)
    return Outcome(False, f"HTTP {resp.status_code} {resp.reason_phrase}", result=result, breaker_ok=healthy)


def counts_as_failure(status: int) -> bool:
    """For the host's circuit breaker (kept by the core, per queue and host, shared by every agent): a
    5xx or a 429 says the host is unwell; other statuses are the request's own business."""
    return status >= 500 or status == 429
