"""The OpenAPI document of a node, as it really behaves.

FastAPI writes the paths and the request and response models; this adds what it cannot know:
the error responses of each route (from its shape and its rule in core/api/access.py), the
sign-in schemes (none on a node without sign-in), links from the routes that create jobs and
schedules to the routes that take their ids (so a stateful fuzzer reaches real objects), and
the two WebSockets, described with the JSON schemas of their messages.

A new route gets all of this by itself: 401/403/429 unless its access rule is public, 422 when
it takes parameters or a body, 413 with a body, 404 with path parameters. Other errors (409) it
declares with `responses=errors(409)`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from core.api import access
from core.api.fields import ErrorBody
from core.api.responses import Event
from core.api.ws_messages import WS_SCHEMAS
from core.auth.sessions import COOKIE

REF = "#/components/schemas/"
ERROR_TEXT = {
    401: "no credentials, or credentials that failed a check (named in the message)",
    403: "the caller's role or teams do not allow this (the message says which)",
    404: "no such job, queue, schedule or agent (or, for the browser sign-in, no OIDC on this server)",
    409: "not allowed in the current state (named in the message)",
    413: "body over the size limit (1 MiB; 16 MiB for /v1/jobs/batch)",
    422: "an invalid field (named in `field`); nothing was changed",
    429: "too many requests from this caller: wait `Retry-After` seconds",
}
# Routes that create an object, and the path parameter its id fills elsewhere.
LINKS = {"job_id": ("/v1/jobs", "post", "201", "id"), "schedule_id": ("/v1/schedules", "post", "201", "id"),
         "name": ("/v1/jobs", "post", "201", "queue"),
         "channel_id": ("/v1/notifications/channels", "post", "201", "id"),
         "rule_id": ("/v1/notifications/rules", "post", "201", "id"),
         "notification_id": ("/v1/notifications", "post", "202", "id"),
         "hook_id": ("/v1/notifications/hooks", "post", "201", "id")}  # fmt: skip

WEBSOCKETS = """
## WebSockets

Both take the same sign-in as the REST routes (an `Authorization: Bearer` header or the session cookie).
Every message is one JSON object in a text (or binary) frame, but for the feed's `lines` frames below.

### `GET /v1/events` (WebSocket): the live feed

Query parameters: `since` (resume after this sequence number; absent: from now), `queues`, `job_ids`,
`types` (comma-separated lists; `job.*` style prefixes are not expanded: list the types), and
`frames` (`one`, the default: one event per message; `lines`: a message carries up to 1,000 events,
one JSON object per line, in order; a follower of busy queues receives a 10,000-job batch as 10
messages instead of 10,000, which is most of the feed's lag).
The server sends every stored event after `since` that passes the filter (schema `Event`), then
`{"type": "stream.caught_up", "seq": null, "last_seq": N}`, then live events as they commit. It may
send `stream.gap` (events after `since` were pruned, from `oldest` on they are complete) and
`stream.error` (`error`, `status`, `message`); a refused subscription (bad query parameter, no
sign-in, no `jobs.read`) gets `stream.error` and is closed with code 1008 and the reason.
The client may send `FeedFilterMessage` at any time to change its filter; a message that is not
one gets a `stream.error` (the feed goes on with the filter it had). Schemas: `Event`, `StreamControl`,
`FeedFilterMessage`.

### `GET /v1/agents` (WebSocket): the agent protocol

An agent sends `Register` first; the core answers `Welcome` (or `AgentError` and closes). Then the
agent sends `Heartbeat`, `Output`, `Result`, `HandBack` and `Draining`; the core sends `Assign`,
`Cancel`, `ResultAck` (once a `Result`'s batch is committed, or refused with reasons) and `Drain`.
The agent holds each result until it is acknowledged and sends it again on its next connection,
to any node. A malformed message gets `AgentError` and the socket is closed (code 1007).
Agent tokens (role `agent`) may serve only their teams' queues.
"""


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route's own error statuses (e.g. errors(409)), each with the error body."""
    return {s: {"model": ErrorBody, "description": ERROR_TEXT.get(s, "error")} for s in statuses}


def _error(status: int) -> dict[str, Any]:
    return {"description": ERROR_TEXT[status], "content": {"application/json": {"schema": {"$ref": REF + "ErrorBody"}}}}


def document(app: FastAPI) -> dict[str, Any]:
    """The node's OpenAPI document (built once, then cached by FastAPI's `app.openapi_schema`)."""
    if app.openapi_schema:
        return app.openapi_schema
    signed_in = app.state.auth.mode != "none"
    doc = get_openapi(title=app.title, version=app.version, description=(app.description or "") + WEBSOCKETS,
                      routes=app.routes)  # fmt: skip
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas["ErrorBody"] = ErrorBody.model_json_schema()
    _add_ws_schemas(schemas)
    if signed_in:
        doc["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer", "description": "an access token (static or OIDC)"},
            "session": {"type": "apiKey", "in": "cookie", "name": COOKIE, "description": "the web UI's session"},
        }
    for ctx in iter_route_contexts(app.routes):
        route = ctx.original_route
        if not isinstance(route, APIRoute) or ctx.path_format is None:
            continue
        for method in ctx.methods or ():
            op = doc["paths"].get(ctx.path_format, {}).get(method.lower())
            if op is not None:
                _complete(op, route, ctx.path_format, method, signed_in)
    _add_links(doc)
    app.openapi_schema = doc
    return doc


def _complete(op: dict[str, Any], route: APIRoute, path: str, method: str, signed_in: bool) -> None:
    responses: dict[str, Any] = op.setdefault("responses", {})
    responses.pop("422", None)  # FastAPI's own validation body: ours is ErrorBody
    rule = access.RULES.get((method, path))
    public = rule is not None and rule.action == access.PUBLIC
    wanted = set()
    if route.dependant.path_params or route.dependant.query_params or route.body_field is not None:
        wanted.add(422)
    if route.body_field is not None:
        wanted.add(413)
    if route.dependant.path_params:
        wanted.add(404)
    if signed_in and not public:
        wanted |= {401, 403, 429}
    if rule is None:
        wanted.add(403)  # refused until it has a rule
    for status in sorted(wanted):
        responses.setdefault(str(status), _error(status))
    if "429" in responses:
        responses["429"]["headers"] = {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}}
    if "401" in responses:
        responses["401"]["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}}}
    op["security"] = [] if public or not signed_in else [{"bearer": []}, {"session": []}]


def _add_links(doc: dict[str, Any]) -> None:
    paths = doc["paths"]
    for path, ops in paths.items():
        for method, op in ops.items():
            for param in op.get("parameters", []):
                if param.get("in") != "path" or param["name"] not in LINKS:
                    continue
                src_path, src_method, status, field = LINKS[param["name"]]
                if param["name"] == "name" and not path.startswith("/v1/queues"):
                    continue  # an agent's name is not a job's queue
                source = paths.get(src_path, {}).get(src_method, {}).get("responses", {}).get(status)
                if source is None or (src_path, src_method) == (path, method):
                    continue
                links = source.setdefault("links", {})
                links[op["operationId"]] = {
                    "operationId": op["operationId"],
                    "parameters": {param["name"]: f"$response.body#/{field}"},
                }


def _add_ws_schemas(schemas: dict[str, Any]) -> None:
    models: list[type[BaseModel]] = [*WS_SCHEMAS.values(), Event]
    _, defs = models_json_schema([(m, "validation") for m in models], ref_template=REF + "{model}")
    for name, schema in defs.get("$defs", {}).items():
        schemas.setdefault(name, schema)
