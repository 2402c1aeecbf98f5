"""POST /v1/jobs without FastAPI's routing and dependency solving: the single submit's own path.

A profile of sequential single submits put FastAPI's stack (routing, dependency solving, the
request handler's generic body and response handling) at over half of the event loop's time,
the endpoint itself at a seventh. This layer sits where the router would be (inside the request
context and body limit, outside nothing else) and serves exactly `POST /v1/jobs` with a JSON
body that passes the route's own validation, by calling the same pieces FastAPI would call, in
the same order: the app's `authorize` dependency, the route's endpoint, the app's exception
handlers. Anything else, or a body the route's model refuses, goes to the FastAPI app untouched
(its body replayed), so every error answer is FastAPI's own: nothing has happened by then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PATH = "/v1/jobs"
_BODY = "jobdeck.direct_body"  # the validated body, from the check to the endpoint (a scope key)


class DirectSubmit:
    """ASGI middleware: `POST /v1/jobs` straight to its endpoint; every other request to `app`."""

    def __init__(self, app: ASGIApp, api: FastAPI) -> None:
        self.app = app
        self._api = api
        self._ready: tuple[APIRoute, Callable[..., Any], Callable[..., Any], ExceptionMiddleware] | None = None
        self._checked = False

    def _prepare(self) -> tuple[APIRoute, Callable[..., Any], Callable[..., Any], ExceptionMiddleware] | None:
        """The route, the app's one dependency, the endpoint and the app's exception handling, if the
        route is still the one this path was written for (else None: every request takes FastAPI)."""
        from core.api import access, jobs
        from core.api.deps import get_engine

        api = self._api
        route = next((c.route for c in iter_route_contexts(api.routes)
                      if c.path_format == PATH and "POST" in (c.methods or ())), None)  # fmt: skip
        deps = [d.dependency for d in api.router.dependencies]
        if (not isinstance(route, APIRoute) or route.endpoint is not jobs.create_job or route.dependencies
                or deps != [access.authorize] or route.body_field is None
                or [d.call for d in route.dependant.dependencies] != [get_engine]):  # fmt: skip
            return None
        # The handlers FastAPI's own ExceptionMiddleware gets (a 500 is ServerErrorMiddleware's, outside us).
        handlers = {k: v for k, v in api.exception_handlers.items() if k not in (500, Exception)}
        return route, access.authorize, get_engine, ExceptionMiddleware(self._endpoint, handlers=handlers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST" or scope["query_string"]:
            await self.app(scope, receive, send)
            return
        if not self._checked:
            self._ready, self._checked = self._prepare(), True
        if self._ready is None:
            await self.app(scope, receive, send)
            return
        route, handled = self._ready[0], self._ready[3]
        messages: list[Message] = []
        body = b""
        while True:
            msg = await receive()
            messages.append(msg)
            if msg["type"] != "http.request":
                break  # the client went away: FastAPI's path handles that
            body += msg.get("body", b"")
            if not msg.get("more_body", False):
                break
        replay = _replaying(messages, receive)
        value = _valid_body(route, body) if messages[-1]["type"] == "http.request" else None
        if value is None:
            await self.app(scope, replay, send)
            return
        scope["route"] = route  # what the router would write: the metrics' template, authorize's rule
        scope["endpoint"] = route.endpoint
        scope["path_params"] = {}
        scope[_BODY] = value
        await handled(scope, replay, send)

    async def _endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self._ready is not None
        _, authorize, get_engine, _ = self._ready
        request = Request(scope, receive, send)
        body = scope.pop(_BODY)
        await authorize(request)  # as FastAPI: the app's dependency first, then the route's
        engine = await get_engine(request)
        response = await self._ready[0].endpoint(body, engine, request)
        await response(scope, receive, send)


def _valid_body(route: APIRoute, body: bytes) -> Any:
    """The body as the route's model, or None when FastAPI's path must answer (bad JSON, a refusal)."""
    if not body:
        return None
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    assert route.body_field is not None
    value, errors = route.body_field.validate(parsed, {}, loc=("body",))
    return None if errors else value


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    """A receive that gives `messages` again, then reads on."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
