"""Who may call which route: one table, enforced for every HTTP route by one dependency.

A route without a rule is refused (403), so a new route cannot ship open by accident; the
role x route matrix test reads the same routes. Mutating calls are audited: allowed ones in
the same transaction as their change (core/store/audit.py), refused and failed ones on their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.requests import HTTPConnection

from core.api.fields import path_id
from core.api.proxy import caller_ip, is_local_caller
from core.api.ratelimit import RateLimiter
from core.auth.authenticate import Authenticator
from core.auth.roles import AGENT, Principal
from core.auth.sessions import COOKIE
from core.engine import Engine
from core.errors import Forbidden, JobDeckError, RateLimited, Unauthorized
from core.schedule import schedule_to_dict
from core.store import audit

PUBLIC = "public"  # no sign-in needed
SIGNED_IN = "signed_in"  # any principal, whatever its role
# Health probes are never rate limited: a refused readiness probe would take the node out of service.
PROBES = frozenset({"/healthz", "/livez", "/readyz"})


@dataclass(frozen=True)
class Rule:
    """The action a route needs, and the path parameter naming its target ("job_id", "name", ...)."""

    action: str
    target: str | None = None


RULES: dict[tuple[str, str], Rule] = {
    ("GET", "/healthz"): Rule(PUBLIC),
    ("GET", "/livez"): Rule(PUBLIC),  # the platform's probes carry no token (core/api/health.py)
    ("GET", "/readyz"): Rule(PUBLIC),
    ("GET", "/auth/config"): Rule(PUBLIC),
    ("GET", "/auth/login"): Rule(PUBLIC),
    ("GET", "/auth/callback"): Rule(PUBLIC),
    ("POST", "/auth/ticket"): Rule(PUBLIC),
    ("POST", "/auth/logout"): Rule(PUBLIC),
    ("GET", "/auth/me"): Rule(SIGNED_IN),
    # jobs (create/batch/bulk check the queues in their bodies themselves: see `require`)
    ("POST", "/v1/jobs"): Rule("jobs.write"),
    ("POST", "/v1/jobs/batch"): Rule("jobs.write"),
    ("POST", "/v1/jobs/bulk"): Rule("jobs.write"),
    ("GET", "/v1/jobs"): Rule("jobs.read"),
    ("GET", "/v1/jobs/{job_id}"): Rule("jobs.read", "job_id"),
    ("GET", "/v1/jobs/{job_id}/output"): Rule("jobs.read", "job_id"),
    ("GET", "/v1/jobs/{job_id}/attempts"): Rule("jobs.read", "job_id"),
    ("GET", "/v1/jobs/{job_id}/events"): Rule("jobs.read", "job_id"),
    ("POST", "/v1/jobs/{job_id}/cancel"): Rule("jobs.write", "job_id"),
    ("POST", "/v1/jobs/{job_id}/pause"): Rule("jobs.write", "job_id"),
    ("POST", "/v1/jobs/{job_id}/resume"): Rule("jobs.write", "job_id"),
    ("POST", "/v1/jobs/{job_id}/retry"): Rule("jobs.write", "job_id"),
    ("POST", "/v1/jobs/{job_id}/run-now"): Rule("jobs.write", "job_id"),
    ("POST", "/v1/jobs/{job_id}/priority"): Rule("jobs.write", "job_id"),
    # workflows (a team sees and changes one whose jobs are all in its queues; create checks the body)
    ("POST", "/v1/workflows"): Rule("jobs.write"),
    ("GET", "/v1/workflows"): Rule("jobs.read"),
    ("GET", "/v1/workflows/{workflow_id}"): Rule("jobs.read", "workflow_id"),
    ("POST", "/v1/workflows/{workflow_id}/cancel"): Rule("jobs.write", "workflow_id"),
    ("POST", "/v1/workflows/{workflow_id}/pause"): Rule("jobs.write", "workflow_id"),
    ("POST", "/v1/workflows/{workflow_id}/resume"): Rule("jobs.write", "workflow_id"),
    # queues
    ("GET", "/v1/queues"): Rule("jobs.read"),
    ("POST", "/v1/queues/{name}/pause"): Rule("queues.pause", "name"),
    ("POST", "/v1/queues/{name}/resume"): Rule("queues.pause", "name"),
    ("PUT", "/v1/queues/{name}/concurrency"): Rule("queues.configure", "name"),
    ("PATCH", "/v1/queues/{name}"): Rule("queues.configure", "name"),
    ("GET", "/v1/breakers"): Rule("jobs.read"),
    ("POST", "/v1/queues/{name}/breakers/{host}/reset"): Rule("breakers.reset", "name"),
    ("GET", "/v1/queues/{name}/keys"): Rule("jobs.read", "name"),
    # schedules
    ("POST", "/v1/schedules"): Rule("schedules.write"),
    ("POST", "/v1/schedules/preview"): Rule("jobs.read"),
    ("GET", "/v1/schedules"): Rule("jobs.read"),
    ("GET", "/v1/schedules/{schedule_id}"): Rule("jobs.read", "schedule_id"),
    ("PATCH", "/v1/schedules/{schedule_id}"): Rule("schedules.write", "schedule_id"),
    ("DELETE", "/v1/schedules/{schedule_id}"): Rule("schedules.write", "schedule_id"),
    ("POST", "/v1/schedules/{schedule_id}/pause"): Rule("schedules.write", "schedule_id"),
    ("POST", "/v1/schedules/{schedule_id}/resume"): Rule("schedules.write", "schedule_id"),
    ("POST", "/v1/schedules/{schedule_id}/run"): Rule("schedules.write", "schedule_id"),
    ("GET", "/v1/schedules/{schedule_id}/preview"): Rule("jobs.read", "schedule_id"),
    ("POST", "/v1/schedules/{schedule_id}/backfill"): Rule("schedules.write", "schedule_id"),
    # the node
    ("GET", "/v1/agents"): Rule("jobs.read"),
    ("POST", "/v1/agents/{name}/drain"): Rule("agents.drain", "name"),
    ("GET", "/v1/stats"): Rule("jobs.read"),
    ("GET", "/v1/stats/history"): Rule("jobs.read"),
    ("GET", "/v1/events"): Rule("jobs.read"),
    ("GET", "/v1/audit"): Rule("audit.read"),
    # Prometheus (core/api/observe.py): a team's viewer gets the series of its queues only
    ("GET", "/metrics"): Rule("jobs.read"),
    ("GET", "/metrics/cluster"): Rule("jobs.read"),
    ("GET", "/v1/stats/slo"): Rule("jobs.read"),
    # the archive of finished jobs (core/api/archive.py): every queue's jobs, so admins only
    ("GET", "/v1/archive"): Rule("archive.read"),
    ("GET", "/v1/archive/jobs/{job_id}"): Rule("archive.read"),
    ("POST", "/v1/archive/restore"): Rule("archive.restore"),
    # notifications: admin only (channels hold URLs and credentials; secrets are never shown)
    ("GET", "/v1/notifications/channels"): Rule("notifications.manage"),
    ("POST", "/v1/notifications/channels"): Rule("notifications.manage"),
    ("GET", "/v1/notifications/channels/{channel_id}"): Rule("notifications.manage", "channel_id"),
    ("PATCH", "/v1/notifications/channels/{channel_id}"): Rule("notifications.manage", "channel_id"),
    ("DELETE", "/v1/notifications/channels/{channel_id}"): Rule("notifications.manage", "channel_id"),
    ("GET", "/v1/notifications/channels/{channel_id}/log"): Rule("notifications.manage", "channel_id"),
    ("POST", "/v1/notifications"): Rule("notifications.manage"),
    ("GET", "/v1/notifications"): Rule("notifications.manage"),
    ("GET", "/v1/notifications/{notification_id}"): Rule("notifications.manage", "notification_id"),
    ("POST", "/v1/notifications/{notification_id}/replay"): Rule("notifications.manage", "notification_id"),
    ("GET", "/v1/notifications/rules"): Rule("notifications.manage"),
    ("POST", "/v1/notifications/rules"): Rule("notifications.manage"),
    ("GET", "/v1/notifications/rules/{rule_id}"): Rule("notifications.manage", "rule_id"),
    ("PATCH", "/v1/notifications/rules/{rule_id}"): Rule("notifications.manage", "rule_id"),
    ("DELETE", "/v1/notifications/rules/{rule_id}"): Rule("notifications.manage", "rule_id"),
    ("GET", "/v1/notifications/hooks"): Rule("notifications.manage"),
    ("POST", "/v1/notifications/hooks"): Rule("notifications.manage"),
    ("GET", "/v1/notifications/hooks/{hook_id}"): Rule("notifications.manage", "hook_id"),
    ("PATCH", "/v1/notifications/hooks/{hook_id}"): Rule("notifications.manage", "hook_id"),
    ("DELETE", "/v1/notifications/hooks/{hook_id}"): Rule("notifications.manage", "hook_id"),
    # an incoming hook proves itself with its own secret (signature or bearer token): core/api/hooks.py
    ("POST", "/v1/hooks/{name}"): Rule(PUBLIC),
}
TARGET_KIND = {"job_id": "job", "schedule_id": "schedule", "workflow_id": "workflow", "name": None,
               "channel_id": "channel", "rule_id": "alert_rule", "notification_id": "notification",
               "hook_id": "hook"}  # fmt: skip


def actor_of(p: Principal, conn: HTTPConnection) -> audit.Actor:
    """The audit log's view of a caller."""
    return audit.Actor(p.subject, p.name, p.role, p.via, caller_ip(conn.scope), conn.headers.get("user-agent"))


async def _record(engine: Engine, p: Principal, conn: HTTPConnection, action: str, target: str | None,
                  outcome: str, message: str) -> None:  # fmt: skip
    entry = audit.AuditScope(actor_of(p, conn), action, target).row(engine.clock(), outcome, message)
    await engine.store.record_audit(entry)


async def authenticate(conn: HTTPConnection) -> Principal:
    """The caller of an HTTP request or WebSocket (Unauthorized if its credentials fail a check)."""
    auth: Authenticator = conn.app.state.auth
    return await auth.principal(conn.headers.get("authorization"), conn.cookies.get(COOKIE))


async def authorize(request: HTTPConnection) -> None:
    """The dependency of every route: sign-in, rate limit, the route's rule, the audit context."""
    if request.scope["type"] != "http":
        return  # WebSockets authenticate in their handlers, where they can answer with a message
    route = request.scope.get("route")
    path = getattr(route, "path_format", None) or request.url.path  # the path without {job_id:id} convertors
    method = request.scope["method"]
    rule = RULES.get((method, path))
    if rule is not None and rule.action == PUBLIC:
        if path not in PROBES:
            await rate_limit(request, None)
        return
    engine: Engine = request.app.state.engine
    try:
        p = await authenticate(request)
    except Unauthorized:
        await rate_limit(request, None)  # failed sign-ins count against the caller's IP
        raise
    request.state.principal = p
    await rate_limit(request, p)
    mutating = method not in ("GET", "HEAD")
    audited = p.via != "none"  # with no sign-in there is nobody to name: nothing is audited
    if mutating and not request.headers.get("authorization") and request.cookies.get(COOKIE):
        _check_origin(request)  # a browser's cookie: refuse requests another site's page makes
    action_name = getattr(route, "name", path)
    target = None
    queue = None
    before: dict[str, Any] = {}
    if rule is not None and rule.target is not None:
        raw = str(request.path_params.get(rule.target))
        kind = TARGET_KIND[rule.target] or ("agent" if "agents" in path else "queue")
        target = f"{kind}:{raw}"
        if kind in ("job", "schedule", "workflow"):
            ident = _target_id(raw, rule.target)  # as the route would parse it: a bad id is a 422 for everyone
        if kind == "job" and not p.sees_everything:
            queue = (await engine.store.get_job(ident)).queue
        elif kind == "workflow" and not p.sees_everything:  # every queue of its jobs must be the caller's
            wf_queues = (await engine.store.get_workflow(ident))[0].queues
            queue = next((q for q in wf_queues if not p.may(rule.action, q)), wf_queues[0] if wf_queues else None)
        elif kind == "schedule" and ((mutating and audited) or not p.sees_everything):
            s = await engine.store.get_schedule(ident)
            queue = str(s.job.get("queue") or "default")
            before[target] = schedule_to_dict(s)
        elif kind == "queue":
            queue = str(raw)
    if mutating and audited:
        audit.set_acting(actor_of(p, request), action_name, target).before.update(before)
    if rule is None:
        await _refuse(request, p, f"{method} {path} has no access rule: refused until one is written")
    elif rule.action == SIGNED_IN:
        return
    elif not p.may(rule.action, queue):
        await _refuse(request, p, p.refusal(rule.action, queue))


def _target_id(raw: str, param: str) -> int:
    try:
        return path_id(raw)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("path", param)} for e in exc.errors()]) from None


async def rate_limit(conn: HTTPConnection, p: Principal | None) -> None:
    """RateLimited unless the caller's bucket has a token: a signed-in caller's own, else its IP's.
    Processes on the node's machine that call without sign-in (`jobdeck up`'s CLI) are not limited."""
    if p is not None and p.via != "none":
        key, who = f"principal:{p.subject}", p.name
    elif is_local_caller(conn.scope):
        return
    else:
        key = who = f"ip:{caller_ip(conn.scope)}"
    limiter: RateLimiter = conn.app.state.rate_limits
    wait = await limiter.take(key)
    if wait:
        raise RateLimited(
            f"too many requests from {who.removeprefix('ip:')}: at most {limiter.rate:g} a second "
            f"(bursts of {limiter.burst:g}); try again in {wait:.1f} s",
            retry_after=math.ceil(wait),
        )


def _check_origin(request: HTTPConnection) -> None:
    origin = request.headers.get("origin")
    if origin is None:
        return  # not a browser's cross-site request (browsers send Origin on every POST); SameSite covers the rest
    settings = request.app.state.engine.settings
    own = f"{request.url.scheme}://{request.url.netloc}"
    allowed = {own, *(o.rstrip("/") for o in settings.web_origins)}
    if settings.public_url:
        allowed.add(settings.public_url.rstrip("/"))
    if origin.rstrip("/") not in allowed:
        raise Forbidden(f"a page on {origin} may not act with this browser's JobDeck session (not a web origin)")


async def _refuse(conn: HTTPConnection, p: Principal, message: str) -> None:
    acting = audit.current()
    if acting is not None:  # only mutating calls are audited; a refused read is just refused
        await _record(conn.app.state.engine, p, conn, acting.action, acting.target, "refused", message)
    raise Forbidden(message)


def principal_of(request: Request) -> Principal:
    """The caller `authorize` found."""
    p: Principal = request.state.principal
    return p


async def require(request: Request, action: str, queues: Any) -> None:
    """For routes whose queues are in the body: refuse (and audit) unless every one is the caller's."""
    p = principal_of(request)
    for q in dict.fromkeys(queues):
        if not p.may(action, q):
            await _refuse(request, p, p.refusal(action, q))


async def record_failure(conn: HTTPConnection, err: JobDeckError) -> None:
    """A mutating call that failed (409, 404, 422 ...) is in the audit log too, with the reason."""
    acting = audit.current()
    p = getattr(conn.state, "principal", None)
    if acting is None or p is None or err.status in (401, 403, 429):
        return
    await _record(conn.app.state.engine, p, conn, acting.action, acting.target, "failed", err.message)


def may_take(p: Principal, queues: list[str]) -> str | None:
    """Why an agent principal may not serve `queues` (None if it may)."""
    if p.role == "admin":
        return None
    if p.role != AGENT:
        return f"{p.name} has the role {p.role}; agents need an agent token (or admin)"
    for q in queues:
        if q == "*" and not p.sees_everything:
            return f"agent token {p.name} may serve only {', '.join(p.queues)}: list them with --queues, not '*'"
        if q != "*" and not p.sees(q):
            return f"agent token {p.name} may not serve queue {q!r} (it may serve {', '.join(p.queues)})"
    return None
