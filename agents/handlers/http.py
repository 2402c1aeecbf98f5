"""The http handler: one request; a 2xx status is success."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx

from agents.breaker import BREAKERS, counts_as_failure
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
    host = urlsplit(str(task["url"])).netloc
    why = BREAKERS.allow(host)
    if why is not None:  # the host failed too often lately: fail fast (the job's backoff applies)
        return Outcome(False, why)
    try:
        resp = await _shared_client().request(task.get("method", "GET"), task["url"], **kwargs)
    except httpx.HTTPError as exc:
        BREAKERS.record(host, False)
        return Outcome(False, ctx.redact(f"{type(exc).__name__}: {exc or 'request failed'} ({task['url']})"))
    BREAKERS.record(host, not counts_as_failure(resp.status_code))
    text = resp.text
    ctx.write(text.encode())
    result = {"status": resp.status_code, "body": ctx.redact(text[:EXCERPT])}
    if 200 <= resp.status_code < 300:
        return Outcome(True, result=result)
    return Outcome(False, f"HTTP {resp.status_code} {resp.reason_phrase}", result=result)
