"""The OpenAPI document tells the truth about every route (issue 11): a real response model for each
success, the error shape for each error status, 401/403/429 and the sign-in schemes when sign-in is
on (none when it is off), the WebSockets described with their message schemas, and request schemas
no looser than the server (a request the schema accepts is one the server takes).

schemathesis (test_fuzz.py) checks answers against the document; this checks the document itself,
so a route that lost its model (documented as `{}` or a bare string) fails here by name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import pytest_asyncio
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from core.api import access
from tests.auth.principals import TOKENS, auth_settings
from tests.conftest import node_settings, start_node, stop_node

TEXT_ROUTES = {("get", "/metrics"), ("get", "/metrics/cluster")}  # Prometheus text, documented as text/plain
ERROR = {"$ref": "#/components/schemas/ErrorBody"}
WS_MESSAGES = ("Event", "StreamControl", "FeedFilterMessage", "Register", "Welcome", "Assign", "Heartbeat",
               "Result", "AgentError")  # fmt: skip


# One node of each kind for the whole module (two starts instead of one per test): the tests read the
# document, and the few that post refused bodies or a body twice for its 409 do not depend on what
# the others stored.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["open", "signed"])
async def doc(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[bool, dict[str, Any], str]]:
    """(signed in?, /openapi.json, the node's URL) of a node without and with sign-in."""
    signed = request.param == "signed"
    tmp_path: Path = tmp_path_factory.mktemp(f"openapi-{request.param}")
    settings = auth_settings(tmp_path, rate_limit_per_second=0) if signed else node_settings(tmp_path)
    node, url, task = await start_node(settings, local_agent=False)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            resp = await c.get("/openapi.json")
            assert resp.status_code == 200, resp.text
            yield signed, resp.json(), url
    finally:
        await stop_node(node, task)


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m, p, op) for p, ops in doc["paths"].items() for m, op in ops.items()]


def public(method: str, path: str) -> bool:
    rule = access.RULES.get((method.upper(), path))
    return rule is not None and rule.action == access.PUBLIC


async def test_every_success_answer_has_its_model(doc: tuple[bool, dict[str, Any], str]) -> None:
    _, document, _ = doc
    vague = []
    for method, path, op in operations(document):
        successes = {s: r for s, r in op["responses"].items() if s[0] == "2" or (s == "302" and "Location" in
                     r.get("headers", {}))}  # fmt: skip
        if not successes:
            vague.append(f"{method.upper()} {path}: no success response")
        for status, resp in successes.items():
            if status in ("204", "302"):
                assert "content" not in resp, (method, path, resp)
                continue
            for ctype, body in resp.get("content", {}).items():
                schema = body.get("schema", {})
                if (method, path) in TEXT_ROUTES:
                    assert ctype.startswith("text/plain"), (method, path, ctype)
                elif ctype != "application/json" or "$ref" not in schema:
                    vague.append(f"{method.upper()} {path} {status} {ctype}: {schema}")
    assert len(operations(document)) > 70, "fewer routes than the API has"
    assert not vague, "expected a named response model for every success, got:\n" + "\n".join(vague)


async def test_errors_have_the_error_shape_and_sign_in_routes_say_401_403_429(
    doc: tuple[bool, dict[str, Any], str],
) -> None:
    signed, document, _ = doc
    problems = []
    for method, path, op in operations(document):
        for status, resp in op["responses"].items():
            if (method, path, status) == ("get", "/readyz", "503"):
                assert resp["content"]["application/json"]["schema"]["$ref"].endswith("/NotReady"), resp
            elif status[0] in "45" and resp.get("content", {}).get("application/json", {}).get("schema") != ERROR:
                problems.append(f"{method.upper()} {path} {status}: not ErrorBody")
        said = set(op["responses"])
        if signed and not public(method, path):
            if not {"401", "403", "429"} <= said:
                problems.append(f"{method.upper()} {path}: documents {sorted(said)}, not 401/403/429")
            elif "Retry-After" not in op["responses"]["429"].get("headers", {}):
                problems.append(f"{method.upper()} {path}: 429 without Retry-After")
            if op.get("security") != [{"bearer": []}, {"session": []}]:
                problems.append(f"{method.upper()} {path}: security {op.get('security')}")
        elif not signed and ("429" in said or op.get("security")):
            problems.append(f"{method.upper()} {path}: sign-in errors on a node without sign-in")
    schemes = document["components"].get("securitySchemes")
    if signed:
        assert schemes is not None and schemes["bearer"]["scheme"] == "bearer", schemes
        assert schemes["session"]["in"] == "cookie", schemes
    else:
        assert schemes is None, schemes
    assert not problems, "\n".join(problems)


async def test_the_websockets_are_described_with_their_messages(doc: tuple[bool, dict[str, Any], str]) -> None:
    _, document, _ = doc
    text = document["info"]["description"]
    for words in ("`GET /v1/events` (WebSocket)", "`GET /v1/agents` (WebSocket)", "since", "stream.error", "1008",
                  "1007", "Register", "ResultAck"):  # fmt: skip
        assert words in text, f"expected {words!r} in the document's description"
    schemas = document["components"]["schemas"]
    missing = [m for m in WS_MESSAGES if m not in schemas]
    assert not missing, f"WebSocket message schemas missing: {missing}"
    assert "seq" in schemas["Event"]["properties"] and "type" in schemas["Register"]["properties"]


def validator(document: dict[str, Any], name: str) -> jsonschema.Draft202012Validator:
    """A validator for components/schemas/NAME with the document's $refs resolvable."""
    registry = Registry().with_resource("doc", Resource.from_contents(document, default_specification=DRAFT202012))
    return jsonschema.Draft202012Validator({"$ref": f"doc#/components/schemas/{name}"}, registry=registry)


# Bodies the server refuses for a rule of its own: the schema must refuse them too.
# (schema, body, the field or the fields its error names)
SHELL = {"kind": "shell", "command": "x"}
REFUSED = [
    ("JobCreate", {"task": {"kind": "shell"}}, "task"),  # a shell task without command or argv
    ("JobCreate", {"task": {**SHELL, "argv": ["x"]}}, "task"),  # both
    ("JobCreate", {"task": SHELL, "priority": "5"}, "priority"),  # strict numbers
    ("JobCreate", {"task": SHELL, "priority": True}, "priority"),
    ("JobCreate", {"task": SHELL, "run_at": "2026-01-01T00:00:00Z", "delay": 5}, "'run_at' or 'delay'"),
    ("JobCreate", {"task": {**SHELL, "command": "x\u0000"}}, "task.command"),
    (
        "ScheduleCreate",
        {"name": "s", "cron": "* * * * *", "interval": 60, "job": {"task": SHELL}},
        "'cron', 'interval'",
    ),
    ("BulkAction", {"action": "cancel"}, "'ids' or 'filter'"),  # neither ids nor a filter
    ("BulkAction", {"action": "cancel", "ids": [2**63]}, "ids[0]"),
]


@pytest.mark.parametrize(("schema", "body", "names"), REFUSED)
async def test_a_body_the_server_refuses_is_refused_by_the_schema_too(
    doc: tuple[bool, dict[str, Any], str], schema: str, body: dict[str, Any], names: str
) -> None:
    signed, document, url = doc
    errors = list(validator(document, schema).iter_errors(body))
    assert errors, f"the schema {schema} accepts {body}, which the server refuses"
    path = {"JobCreate": "/v1/jobs", "ScheduleCreate": "/v1/schedules", "BulkAction": "/v1/jobs/bulk"}[schema]
    headers = {"authorization": f"Bearer {TOKENS['admin'][0]}"} if signed else {}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as c:
        resp = await c.post(path, json=body)
    err = resp.json() if resp.status_code == 422 else {}
    # a cross-field rule has no one field: its message names the fields instead
    named = (err.get("field") or "").startswith(names) or names in err.get("message", "")
    assert resp.status_code == 422 and named, f"expected a 422 naming {names}, got {resp.status_code}: {resp.text}"


async def test_a_body_the_schema_takes_is_taken(doc: tuple[bool, dict[str, Any], str]) -> None:
    signed, document, url = doc
    body = {"task": {"kind": "shell", "argv": ["true"]}, "priority": 5.0, "tags": ["ü"], "name": "nächtlich"}
    assert not list(validator(document, "JobCreate").iter_errors(body))
    headers = {"authorization": f"Bearer {TOKENS['admin'][0]}"} if signed else {}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as c:
        resp = await c.post("/v1/jobs", json=body)
    assert resp.status_code == 201, resp.text


# A state the fuzz meets only on a node that has run before (a key held by an earlier case): each
# request answers with a status its route must document.
CONFLICTS = [
    (
        "/v1/workflows",
        {
            "name": "w",
            "jobs": [
                {"ref": "a", "task": SHELL, "unique": {"key": "k"}},
                {"ref": "b", "task": SHELL, "unique": {"key": "k"}},
            ],
        },
    ),
    ("/v1/notifications/channels", {"kind": "webhook", "name": "dup", "url": "http://127.0.0.1:9/x"}),
]


@pytest.mark.parametrize(("path", "body"), CONFLICTS)
async def test_a_conflict_the_server_answers_is_documented(
    doc: tuple[bool, dict[str, Any], str], path: str, body: dict[str, Any]
) -> None:
    signed, document, url = doc
    headers = {"authorization": f"Bearer {TOKENS['admin'][0]}"} if signed else {}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as c:
        statuses = [(await c.post(path, json=body)).status_code for _ in range(2)]
    assert 409 in statuses, f"expected a 409 from POST {path}, got {statuses}"
    documented = set(document["paths"][path]["post"]["responses"])
    assert "409" in documented, f"POST {path} answers 409 but documents only {sorted(documented)}"
