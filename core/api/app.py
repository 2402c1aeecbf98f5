"""The ASGI app: error mapping, body limits, and the routers of every resource."""

from __future__ import annotations

import re
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.api.direct_submit import DirectSubmit
from core.api.fields import ID_MAX, PATTERN_WORDS, IdConvertor
from core.api.proxy import ProxyHeaders, TrustedProxies
from core.api.ratelimit import RateLimiter
from core.engine import Engine
from core.errors import InvalidInput, JobDeckError, PayloadTooLarge, RateLimited, Unauthorized

API_VERSION = "0.1.0"
BATCH_PATHS = frozenset({"/v1/jobs/batch", "/v1/workflows"})  # up to 10,000 jobs in one body


class JSON(JSONResponse):
    """JSON responses through orjson (a JSONResponse, so the OpenAPI document shows the route's model)."""

    def render(self, content: Any) -> bytes:
        if isinstance(content, bytes):  # already JSON (stored event bodies)
            return content
        return orjson.dumps(content)


def error_response(err: JobDeckError) -> JSON:
    """The one error shape: `{"error", "message", "field"}` with the error's status."""
    return JSON(err.to_dict(), status_code=err.status)


def _field_path(loc: tuple[Any, ...]) -> str:
    parts = list(loc[1:] if loc and loc[0] in ("body", "query", "path") else loc)
    # Discriminated unions put the tag in the location ("task", "shell", "command"): drop it.
    out = ""
    for i, p in enumerate(parts):
        if i > 0 and parts[i - 1] == "task" and p in ("shell", "http", "python"):
            continue
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


_EXPECTED = {"int_type": "a whole number", "int_from_float": "a whole number", "float_type": "a number",
             "bool_type": "true or false", "string_type": "a string", "list_type": "a list", "dict_type": "an object",
             "model_type": "an object"}  # fmt: skip


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number with a fraction" if isinstance(value, float) and not value.is_integer() else "a number"
    if value is None:
        return "null"
    kinds: dict[type, str] = {str: "a string", list: "a list", dict: "an object"}
    return kinds.get(type(value), type(value).__name__)


def _without_tags(loc: tuple[Any, ...], body: Any) -> tuple[Any, ...]:
    """pydantic puts the tag of a union chosen by `kind` in the path ("body", "webhook", "url"): the
    field a user wrote is "url", so the tag is left out."""
    if not loc or loc[0] != "body":
        return loc
    out: list[Any] = [loc[0]]
    node = body
    for part in loc[1:]:
        if isinstance(node, dict) and node.get("kind") == part and part not in node:
            continue
        out.append(part)
        if isinstance(node, dict):
            node = node.get(part)
        else:
            node = node[part] if isinstance(node, list) and isinstance(part, int) and part < len(node) else None
    return tuple(out)


def validation_error(exc: RequestValidationError) -> JobDeckError:
    """Turn pydantic's first complaint into one clear message naming the field (and batch index)."""
    errors = exc.errors()
    first: dict[str, Any] = dict(errors[0]) if errors else {"loc": (), "msg": "invalid request"}
    loc = tuple(first.get("loc", ()))
    if first.get("type") == "json_invalid":
        return InvalidInput(f"the request body is not valid JSON: {first.get('ctx', {}).get('error', '')}".rstrip(": "))
    if first.get("type") in ("union_tag_invalid", "union_tag_not_found"):  # a body of several kinds (`kind`)
        loc = (*loc, str(first.get("ctx", {}).get("discriminator", "")).strip("'"))
    loc = _without_tags(loc, getattr(exc, "body", None))
    field = _field_path(loc)
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    if first.get("type") == "missing":
        msg = "this field is required"
    elif first.get("type") == "string_pattern_mismatch":
        pattern = str(first.get("ctx", {}).get("pattern", ""))
        msg = PATTERN_WORDS.get(pattern, msg)
    elif first.get("type") in _EXPECTED and "input" in first:
        # strict types: say what was sent instead ("5" for a number is refused, not converted)
        msg = f"must be {_EXPECTED[str(first['type'])]}, not {_json_kind(first['input'])}"
    if "input" in first and first.get("type") not in ("missing", "model_type", "dict_type", "model_attributes_type"):
        try:
            shown = orjson.dumps(first["input"], default=str).decode()
        except (TypeError, orjson.JSONEncodeError):  # past 64-bit integers or orjson's depth: not shown
            shown = ""
        if shown and len(shown) <= 80:
            msg += f" (got {shown})"
    prefix = ""
    if len(loc) > 2 and loc[:2] == ("body", "jobs") and isinstance(loc[2], int):
        prefix = f"job at index {loc[2]} is invalid, nothing was stored: "
    more = f" ({len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    extra: dict[str, Any] = {"index": loc[2]} if prefix else {}
    return InvalidInput(f"{prefix}{field or 'body'}: {msg}{more}", field=field or None, **extra)


class BodyLimit:
    """Refuse bodies over the limit with 413 (the batch route has a larger one); read every body as JSON."""

    def __init__(self, app: ASGIApp, limit: int, batch_limit: int) -> None:
        self.app = app
        self.limit = limit
        self.batch_limit = batch_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.batch_limit if scope["path"] in BATCH_PATHS else self.limit
        headers = dict(scope.get("headers", []))
        # Every body of this API is JSON: read it as JSON whatever the client labelled it
        # (curl -d says application/x-www-form-urlencoded).
        headers[b"content-type"] = b"application/json"
        scope = dict(scope, headers=list(headers.items()))
        length = headers.get(b"content-length")
        if length is not None:
            if length.isdigit() and int(length) > limit:
                await self._too_large(scope, receive, send, limit)
            else:  # the server holds the client to its declared length
                await self.app(scope, receive, send)
            return
        # No declared length (chunked): read up to the limit before the app sees anything.
        chunks, size, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":
                return  # the client went away
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._too_large(scope, receive, send, limit)
                return
            chunks.append(chunk)
            more = msg.get("more_body", False)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        err = PayloadTooLarge(
            f"the request body is over the limit of {limit} bytes ({limit // 1024} KiB)"
            + ("; split the batch" if limit == self.batch_limit else "; use /v1/jobs/batch for many jobs")
        )
        await error_response(err)(scope, receive, send)


def http_error(app: FastAPI, request: Request, exc: HTTPException) -> JSON:
    """Starlette's own 404 and 405 in the one error shape: a path whose id is not a number says so
    (422 naming the parameter), and a 405 lists every method of the path in `Allow`."""
    method, path = request.method, request.url.path
    routes = list(iter_route_contexts(app.routes))
    if exc.status_code == 404:
        for ctx in routes:
            bad = _bad_ids(ctx, path)
            if bad is not None and method in (ctx.methods or ()):
                name, value = bad
                err = InvalidInput(f"{name}: {value[:40]!r} is not an id: give a whole number from 1 to {ID_MAX}",
                                   field=name)  # fmt: skip
                return error_response(err)
        body = {"error": "not_found", "message": f"no route {method} {path} (the API is described at /docs)",
                "field": None}  # fmt: skip
        return JSON(body, status_code=404)
    headers = {k: v for k, v in (exc.headers or {}).items() if k.lower() != "allow"}
    message = str(exc.detail)
    if exc.status_code == 405:
        regexes = ((getattr(c, "path_regex", None), getattr(c, "methods", None)) for c in routes)
        allowed = sorted({m for regex, ms in regexes if regex is not None and ms and regex.match(path) for m in ms})
        headers["allow"] = ", ".join(allowed)
        message = f"{path} does not take {method}; it takes {headers['allow']}"
    code = {405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return JSON({"error": code, "message": message, "field": None}, status_code=exc.status_code, headers=headers)


def _bad_ids(ctx: Any, path: str) -> tuple[str, str] | None:
    """(parameter, value) when `path` is the route's but for an {x:id} parameter that is not digits."""
    fmt = getattr(ctx, "path_format", None)
    convertors = getattr(ctx, "param_convertors", None) or {}
    ids = [k for k, c in convertors.items() if isinstance(c, IdConvertor)]
    if not fmt or not ids:
        return None
    pattern = re.escape(fmt)
    for k in convertors:
        pattern = pattern.replace(re.escape("{" + k + "}"), f"(?P<{k}>[^/]+)")
    match = re.fullmatch(pattern, path)
    if match is None:
        return None
    return next(((k, match[k]) for k in ids if not (match[k].isascii() and match[k].isdigit())), None)


def unauthorized_response(err: JobDeckError) -> JSON:
    """401 with the RFC 6750 challenge; the description is the check that failed (no secrets in it)."""
    resp = error_response(err)
    description = err.message.replace('"', "'").replace("\\", "/")
    challenge = 'Bearer realm="jobdeck"'
    if not err.message.startswith("no credentials"):
        challenge += f', error="invalid_token", error_description="{description}"'
    resp.headers["www-authenticate"] = challenge
    return resp


def create_app(engine: Engine, agent_link: Any = None) -> FastAPI:
    """The API of one node over `engine`."""
    from fastapi import Depends

    from core.api import (
        access,
        agents_ws,
        archive,
        auth_routes,
        docs,
        events,
        health,
        hooks,
        jobs,
        notifications,
        observe,
        openapi,
        queues,
        schedules,
        system,
        workflows,
    )
    from core.auth.authenticate import Authenticator
    from core.notify import Notifier

    settings = engine.settings
    app = FastAPI(
        dependencies=[Depends(access.authorize)],
        title="JobDeck API",
        version=API_VERSION,
        description="Submit, watch and steer jobs. Errors are JSON: {error, message, field}.",
        default_response_class=JSON,
        docs_url=None,  # served from the node's own copy of Swagger UI (core/api/docs.py)
        redoc_url=None,
    )
    app.state.engine = engine
    app.state.auth = Authenticator(settings)

    async def facts() -> dict[str, Any]:  # what the queue conditions of alert rules look at
        return {"queues": await engine.store.list_queues(), "agents": engine.hub.describe()}

    app.state.notifier = Notifier(engine.store, engine.clock, facts)
    app.state.rate_limits = RateLimiter(
        settings.rate_limit_per_second, settings.rate_limit_burst, settings.redis_url, settings.cluster_key
    )

    @app.exception_handler(JobDeckError)
    async def _jobdeck_error(request: Request, exc: JobDeckError) -> Response:
        await access.record_failure(request, exc)
        if isinstance(exc, Unauthorized):
            return unauthorized_response(exc)
        resp = error_response(exc)
        if isinstance(exc, RateLimited):
            resp.headers["retry-after"] = str(exc.extra.get("retry_after", 1))
        return resp

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        err = validation_error(exc)
        await access.record_failure(request, err)
        return error_response(err)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        return http_error(app, request, exc)

    @app.exception_handler(Exception)
    async def _bug(_: Request, exc: Exception) -> Response:
        # A bug, never the caller's fault: still the one error shape (the traceback goes to the log).
        body = {"error": "internal", "message": f"internal error ({type(exc).__name__}); see the server's log",
                "field": None}  # fmt: skip
        return JSON(body, status_code=500)

    routers = (jobs, workflows, queues, schedules, system, health, events, agents_ws, auth_routes, observe, archive)
    for module in (*routers, notifications, hooks):
        app.include_router(module.router)
    docs.mount_docs(app)
    app.openapi = lambda: openapi.document(app)  # type: ignore[method-assign]
    # Innermost: POST /v1/jobs straight to its endpoint, every other request to FastAPI's router.
    app.add_middleware(DirectSubmit, api=app)
    # Inside BodyLimit (which copies the scope): the router writes the matched route into this scope.
    app.add_middleware(observe.RequestContext, metrics=engine.metrics)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes, batch_limit=16 * settings.max_body_bytes)
    if settings.trusted_proxies:  # outermost: every layer below sees the caller the proxy named
        app.add_middleware(ProxyHeaders, proxies=TrustedProxies(settings.trusted_proxies))
    return app
