"""POST /v1/jobs has a path of its own in front of FastAPI (core/api/direct_submit.py): the same
requests must get the same answers, audit entries and metrics from it as from FastAPI's route.

Two nodes with the same tokens, one with the direct path switched off, take the same requests
(each on a store of its own: SQLite files, or two PostgreSQL schemas).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from core.api.direct_submit import DirectSubmit
from core.node import Node
from tests.auth.principals import TOKENS, auth_settings
from tests.conftest import start_node, stop_node
from tests.services import execute, with_database

VOLATILE = {"id", "run_at", "created_at", "updated_at", "trace_id", "traceparent"}
SHELL = {"kind": "shell", "command": "true"}


def direct_layer(node: Node) -> DirectSubmit:
    app: Any = node.app.middleware_stack
    while app is not None and not isinstance(app, DirectSubmit):
        app = getattr(app, "app", None)
    assert app is not None, "no DirectSubmit in the app's middleware stack"
    return app


@pytest.fixture(params=["sqlite", "postgres"])
async def pair(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[tuple[Node, str], tuple[Node, str]]]:
    """(direct, fastapi): two nodes alike but for the direct path."""
    stores: list[dict[str, Any]] = [{}, {}]
    schemas: list[str] = []
    if request.param == "postgres":
        database = request.getfixturevalue("pg_database")
        for i in range(2):
            schemas.append(f"s_{uuid.uuid4().hex[:12]}")
            await execute(database, f"CREATE SCHEMA {schemas[-1]}")
            stores[i] = {"database_url": with_database(database, database.rsplit("/", 1)[-1], search_path=schemas[-1])}
    a, url_a, task_a = await start_node(auth_settings(tmp_path / "a", rate_limit_per_second=0, **stores[0]),
                                        local_agent=False)  # fmt: skip
    try:  # b failing to start (its migration, say) must still stop a: a running node hangs the loop's close
        b, url_b, task_b = await start_node(auth_settings(tmp_path / "b", rate_limit_per_second=0, **stores[1]),
                                            local_agent=False)  # fmt: skip
    except BaseException:
        await stop_node(a, task_a)
        raise
    try:
        async with httpx.AsyncClient() as http:
            await http.get(f"{url_b}/healthz")  # builds b's middleware stack
        off = direct_layer(b)
        off._checked, off._ready = True, None
        yield (a, url_a), (b, url_b)
    finally:
        await stop_node(a, task_a)
        await stop_node(b, task_b)
        for schema in schemas:
            await execute(database, f"DROP SCHEMA {schema} CASCADE")


def _digitless(text: str | None) -> str:
    return "".join("#" if c.isdigit() else c for c in text or "")


def _shown(resp: httpx.Response) -> tuple[int, Any, dict[str, str]]:
    try:
        body = resp.json()
    except ValueError:
        body = resp.text
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in VOLATILE}
        if isinstance(body.get("message"), str):  # "job 7 is in queue ..." names ids of this node's jobs
            body["message"] = _digitless(body["message"])
    headers = {k: v for k, v in resp.headers.items() if k not in ("date", "x-request-id", "content-length")}
    return resp.status_code, body, headers


CASES: list[tuple[str | None, Any]] = [
    ("admin", {"task": SHELL, "queue": "q1"}),
    ("admin", {"task": SHELL, "queue": "q1", "idempotency_key": "k1"}),
    ("admin", {"task": SHELL, "queue": "q1", "idempotency_key": "k1"}),  # the same key: 200, deduplicated
    ("operator", {"task": SHELL, "queue": "payments", "priority": 5, "tags": ["a", "b"]}),
    ("outsider", {"task": SHELL, "queue": "payments"}),  # another team's queue: 403, audited
    ("viewer", {"task": SHELL, "queue": "payments"}),  # a role without jobs.write: 403
    (None, {"task": SHELL, "queue": "q1"}),  # no token: 401 with its challenge
    ("admin", {"task": SHELL, "queue": "q1", "depends_on": [999999]}),  # no such parent
    ("outsider", {"task": SHELL, "queue": "ml", "depends_on": [1]}),  # a parent it may not see: 403
    ("admin", {"queue": "q1"}),  # no task: 422 (FastAPI's own path)
    ("admin", {"task": SHELL, "queue": "q1", "priority": "5"}),  # strict types: 422
    ("admin", [1, 2]),  # not an object
    ("admin", b"{not json"),
    ("admin", b""),
    ("operator", {"task": SHELL, "queue": "payments", "run_at": "2999-01-01T00:00:00Z"}),
]


async def test_the_direct_path_answers_as_fastapi_does(pair: Any) -> None:
    (direct, url_a), (_, url_b) = pair
    async with httpx.AsyncClient(timeout=30) as http:
        for who, body in CASES:
            headers = {"authorization": f"Bearer {TOKENS[who][0]}"} if who else {}
            raw = body if isinstance(body, bytes) else orjson.dumps(body)
            got = [await http.post(f"{url}/v1/jobs", content=raw, headers=headers) for url in (url_a, url_b)]
            assert _shown(got[0]) == _shown(got[1]), f"{who} {raw[:80]!r}: direct {got[0].text} vs {got[1].text}"
            assert got[0].headers.get("x-request-id"), "the direct path's answer has no X-Request-ID"
        admin = {"authorization": f"Bearer {TOKENS['admin'][0]}"}
        audits = []
        for url in (url_a, url_b):
            entries = (await http.get(f"{url}/v1/audit", params={"limit": 100}, headers=admin)).json()["entries"]
            audits.append(sorted((e["actor"], e["action"], e["outcome"], _digitless(e["message"])) for e in entries))
        assert audits[0] == audits[1], f"audit logs differ: direct {audits[0]} vs {audits[1]}"
        assert any(e[2] == "refused" for e in audits[0]), audits[0]
    assert direct_layer(direct)._ready is not None, "the direct path is off: POST /v1/jobs went through FastAPI"
    series = direct.metrics.text().decode()
    assert 'route="/v1/jobs"' in series and 'status="201"' in series, series[:2000]


async def test_the_callers_request_id_comes_back_from_the_direct_path(pair: Any) -> None:
    (_, url), _ = pair
    headers = {"authorization": f"Bearer {TOKENS['admin'][0]}", "x-request-id": "my-request-1"}
    async with httpx.AsyncClient(timeout=30) as http:
        resp = await http.post(f"{url}/v1/jobs", json={"task": SHELL, "queue": "q1"}, headers=headers)
        assert resp.status_code == 201, resp.text
        assert resp.headers["x-request-id"] == "my-request-1"
        resp = await http.post(f"{url}/v1/jobs?x=1", json={"task": SHELL, "queue": "q1"}, headers=headers)
        assert resp.status_code == 201, f"a query string goes to FastAPI, which ignores it: {resp.text}"
