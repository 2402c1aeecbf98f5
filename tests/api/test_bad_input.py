"""Hypothesis against a real `jobdeck server` process: each class of bad input that once gave a 500
gets a 4xx JSON error {error, message, field} that names the field, and changes nothing.

Classes: integers past signed 64 bits (path ids, query ids and cursors, `since`, ids in bulk
bodies); free-form JSON nested deeper than the limit; times outside the years 1-9999 in UTC;
numbers sent as strings or booleans; NaN / Infinity / 1e400; NUL characters; path ids read by the
access check before validation (non-admin tokens); bodies that are empty, not JSON or labelled as
something else; duplicate keys; enormous `limit`s and negative cursors; odd Authorization headers.
The WebSocket classes (a too-large `since`, garbage frames) are in test_ws_input.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.api.fields import ID_MAX, JSON_DEPTH_MAX
from core.auth.tokens import token_hash
from tests.auth.principals import TEAM_QUEUES, TOKENS
from tests.conftest import ServerProcess, spawn_jobdeck

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SHELL = {"kind": "shell", "command": "true"}
too_big = st.integers(min_value=ID_MAX + 1, max_value=10**40) | st.integers(max_value=0, min_value=-(10**40))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One `jobdeck server` (static tokens, no agent, no rate limit) for the whole module."""
    tmp = tmp_path_factory.mktemp("bad-input")
    config = tmp / "jobdeck.toml"
    lines = ['auth = "token"', "rate_limit_per_second = 0", "[team_queues]"]
    lines += [f"{team} = {queues!r}".replace("'", '"') for team, queues in TEAM_QUEUES.items()]
    for name, (token, role, teams) in TOKENS.items():
        lines += ["[[tokens]]", f'name = "{name}"', f'sha256 = "{token_hash(token)}"', f'role = "{role}"',
                  f"teams = {teams!r}".replace("'", '"')]  # fmt: skip
    config.write_text("\n".join(lines) + "\n")
    sp = spawn_jobdeck(tmp / "data", "server", env={"JOBDECK_CONFIG": str(config)})
    try:
        yield sp
    finally:
        sp.stop()


@pytest.fixture(scope="module")
def admin(node: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=node.url, headers={"authorization": f"Bearer {TOKENS['admin'][0]}"}, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def operator(node: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=node.url, headers={"authorization": f"Bearer {TOKENS['operator'][0]}"}, timeout=30) as c:
        yield c


def refused(resp: httpx.Response, field: str | None, *words: str, status: int = 422) -> dict[str, Any]:
    """The one error shape, with the status, the field and the words expected."""
    assert resp.status_code == status, f"expected {status} naming {field!r}, got {resp.status_code}: {resp.text[:500]}"
    body = resp.json()
    assert set(body) >= {"error", "message", "field"}, body
    assert body["field"] == field, f"expected field {field!r}, got {body}"
    for w in words:
        assert w in body["message"], f"expected {w!r} in the message, got {body['message']!r}"
    return dict(body)


def post_raw(client: httpx.Client, path: str, raw: bytes, content_type: str = "application/json") -> httpx.Response:
    return client.post(path, content=raw, headers={"content-type": content_type})


# ---------------------------------------------------------------- integers past 64 bits


@FUZZ
@given(n=too_big)
def test_ids_outside_signed_64_bits_are_refused_everywhere(admin: httpx.Client, n: int) -> None:
    for path in (f"/v1/jobs/{n}", f"/v1/jobs/{n}/attempts", f"/v1/schedules/{n}", f"/v1/schedules/{n}/preview"):
        refused(admin.get(path), path.split("/")[2][:-1] + "_id")
    refused(admin.post(f"/v1/jobs/{n}/cancel"), "job_id")
    for query in ("cursor", "schedule_id"):
        if not (query == "cursor" and n == 0):  # cursor 0 is allowed (nothing older)
            refused(admin.get("/v1/jobs", params={query: n}), query)
    if n < 0 or n > ID_MAX:
        refused(admin.get("/v1/events", params={"since": n}), "since")
        refused(admin.get("/v1/audit", params={"cursor": n}), "cursor")
    # Past 64 bits orjson reads a number as a float: ids are whole numbers either way.
    raw = b'{"action": "cancel", "ids": [1, %d]}' % n
    resp = post_raw(admin, "/v1/jobs/bulk", raw)
    assert resp.status_code == 422 and resp.json()["field"] == "ids[1]", resp.text


def test_job_ids_in_the_events_query_are_checked(admin: httpx.Client) -> None:
    refused(admin.get("/v1/events", params={"job_ids": f"1,{ID_MAX + 1}"}), "job_ids", "not a whole number")
    # thousands of digits: int() would raise; the check counts them first
    resp = admin.get("/v1/events", params={"job_ids": "1" * 4500})
    refused(resp, "job_ids", "not a whole number")


# ---------------------------------------------------------------- deep JSON in free-form fields


@FUZZ
@given(
    depth=st.integers(min_value=JSON_DEPTH_MAX + 1, max_value=1000), where=st.sampled_from(["args", "kwargs", "body"])
)
def test_free_form_json_deeper_than_the_limit_is_refused(admin: httpx.Client, depth: int, where: str) -> None:
    # 65..1000 levels: below the parser's 1024, above the store encoder's ~254 (the band that crashed)
    nested: Any = []
    for _ in range(depth - 1):
        nested = [nested]
    if where == "body":
        task: dict[str, Any] = {"kind": "http", "url": "http://127.0.0.1:9/x", "method": "POST", "body": nested}
        field = "task.body"
    else:
        value = [nested] if where == "args" else {"k": nested}
        task, field = {"kind": "python", "function": "agents.builtin:noop", where: value}, f"task.{where}"
    before = admin.get("/v1/jobs", params={"limit": 1}).json()["jobs"]
    refused(admin.post("/v1/jobs", json={"task": task}), field, f"at most {JSON_DEPTH_MAX} are allowed")
    assert admin.get("/v1/jobs", params={"limit": 1}).json()["jobs"] == before, "a refused job was stored"


def test_free_form_json_at_the_limit_is_kept_as_sent(admin: httpx.Client) -> None:
    nested: Any = "leaf"
    for _ in range(JSON_DEPTH_MAX - 1):
        nested = [nested]
    task = {"kind": "python", "function": "agents.builtin:noop", "args": [nested]}
    resp = admin.post("/v1/jobs", json={"task": task})
    assert resp.status_code == 201, resp.text
    assert admin.get(f"/v1/jobs/{resp.json()['id']}").json()["task"]["args"] == [nested]


def test_a_body_deeper_than_the_parser_allows_is_not_json(admin: httpx.Client) -> None:
    raw = b'{"task": {"kind": "python", "function": "a:b", "args": ' + b"[" * 1100 + b"]" * 1100 + b"}}"
    refused(post_raw(admin, "/v1/jobs", raw), None, "not valid JSON")


# ---------------------------------------------------------------- times outside years 1-9999 in UTC


def _with_offset(naive: datetime, minutes: int) -> str:
    return naive.replace(tzinfo=timezone(timedelta(minutes=minutes))).isoformat()


edge_times = st.sampled_from(["0001-01-01T00:00:00+05:00", "0001-01-01T04:59:59+05:00", "9999-12-31T23:00:00-05:00",
                              "9999-12-31T20:00:00-14:00", "0001-01-01T00:00:00+23:59"])  # fmt: skip


@FUZZ
@given(when=edge_times | st.builds(_with_offset, st.datetimes(), st.integers(-1439, 1439)))
def test_times_outside_the_years_the_store_keeps_are_refused(admin: httpx.Client, when: str) -> None:
    try:
        datetime.fromisoformat(when).astimezone(UTC)
        in_range = True
    except OverflowError:
        in_range = False
    resp = admin.post("/v1/jobs", json={"task": SHELL, "run_at": when, "queue": "times"})
    if in_range:
        assert resp.status_code == 201, resp.text
        assert admin.get(f"/v1/jobs/{resp.json()['id']}").status_code == 200  # and it reads back
        return
    refused(resp, "run_at", "years 1 to 9999")
    refused(admin.get("/v1/jobs", params={"created_after": when}), "created_after", "years 1 to 9999")
    refused(admin.get("/v1/audit", params={"since": when}), "since", "years 1 to 9999")
    sched = {"name": "t", "at": when, "job": {"task": SHELL}}
    refused(admin.post("/v1/schedules", json=sched), "at", "years 1 to 9999")


# ---------------------------------------------------------------- silent coercion

not_a_number = st.sampled_from(["5", "1.5", "", "true", True, False, [5], {"n": 5}])


@FUZZ
@given(value=not_a_number, field=st.sampled_from(["priority", "max_attempts", "timeout", "delay", "backoff.base"]))
def test_numbers_are_numbers(admin: httpx.Client, value: Any, field: str) -> None:
    body: dict[str, Any] = {"task": SHELL}
    if field == "backoff.base":
        body["backoff"] = {"base": value}
    else:
        body[field] = value
    body_ = refused(admin.post("/v1/jobs", json=body), field, "must be")
    assert "number" in body_["message"], body_


def test_coercion_messages_say_what_was_sent(admin: httpx.Client) -> None:
    refused(
        admin.post("/v1/jobs", json={"task": SHELL, "priority": "5"}),
        "priority",
        "must be a whole number, not a string",
    )
    refused(admin.post("/v1/jobs", json={"task": SHELL, "priority": True}), "priority", "not a boolean")
    refused(admin.post("/v1/jobs", json={"task": SHELL, "priority": 5.5}), "priority", "not a number with a fraction")
    refused(admin.put("/v1/queues/default/concurrency", json={"concurrency": "3"}), "concurrency", "not a string")
    refused(admin.post("/v1/schedules/preview", json={"cron": "* * * * *", "n": "5"}), "n", "not a string")
    refused(admin.post("/v1/jobs", json={"task": SHELL, "run_at": 1700000000}), "run_at", "as a string")
    # 5.0 is an integer in JSON Schema: accepted as 5
    resp = admin.post("/v1/jobs", json={"task": SHELL, "priority": 5.0})
    assert resp.status_code == 201 and resp.json()["priority"] == 5, resp.text


@pytest.mark.parametrize("raw", [b'{"task": {"kind": "shell", "command": "x"}, "priority": NaN}',
                                 b'{"task": {"kind": "shell", "command": "x"}, "timeout": Infinity}',
                                 b'{"task": {"kind": "shell", "command": "x"}, "timeout": 1e400}',
                                 b'{"task": {"kind": "shell", "command": "x"}, "delay": -Infinity}'])  # fmt: skip
def test_nan_and_infinity_are_not_json(admin: httpx.Client, raw: bytes) -> None:
    refused(post_raw(admin, "/v1/jobs", raw), None, "not valid JSON")


# ---------------------------------------------------------------- NUL and other text


@FUZZ
@given(
    text=st.text(min_size=0, max_size=20).map(lambda t: t + "\x00"),
    where=st.sampled_from(["name", "tags", "idempotency_key", "command", "queue"]),
)
def test_nul_characters_are_refused(admin: httpx.Client, text: str, where: str) -> None:
    body: dict[str, Any] = {"task": dict(SHELL)}
    field = where
    if where == "tags":
        body["tags"], field = [text], "tags[0]"
    elif where == "command":
        body["task"]["command"], field = text, "task.command"
    else:
        body[where] = text
    resp = admin.post("/v1/jobs", json=body)
    assert resp.status_code == 422 and resp.json()["field"] == field, resp.text
    for param in ("name_prefix", "tag", "queue"):
        refused(admin.get("/v1/jobs", params={param: text}), param, "NUL")


def test_unicode_names_and_queue_names(admin: httpx.Client) -> None:
    resp = admin.post("/v1/jobs", json={"task": SHELL, "name": "nächtlich 📦 \u202e", "tags": ["ü"]})
    assert resp.status_code == 201 and resp.json()["name"] == "nächtlich 📦 \u202e", resp.text
    refused(admin.post("/v1/jobs", json={"task": SHELL, "queue": "wärme"}), "queue", "letters, digits")
    refused(admin.post("/v1/queues/w%C3%A4rme/pause"), "name", "letters, digits")
    resp = admin.post("/v1/jobs", json={"task": SHELL, "labels": {"région": "eu"}})
    assert resp.status_code == 422 and "labels" in resp.json()["field"], resp.text


# ---------------------------------------------------------------- the access check reads path ids


@pytest.mark.parametrize("raw", ["abc", "1.5", "-3", "%20", "9" * 30, "0x10", "١٢"])
def test_bad_path_ids_are_the_same_422_for_admins_and_teams(
    admin: httpx.Client, operator: httpx.Client, raw: str
) -> None:
    for client in (admin, operator):
        for method, path in (("GET", f"/v1/jobs/{raw}"), ("POST", f"/v1/jobs/{raw}/cancel"),
                             ("PATCH", f"/v1/schedules/{raw}"), ("GET", f"/v1/schedules/{raw}")):  # fmt: skip
            resp = client.request(method, path, json={} if method == "PATCH" else None)
            assert resp.status_code == 422, (client.headers["authorization"][:12], method, path, resp.text)
            assert resp.json()["field"] in ("job_id", "schedule_id"), resp.text


def test_other_methods_on_a_fixed_path_are_405_with_allow(admin: httpx.Client) -> None:
    resp = admin.get("/v1/jobs/batch")
    assert resp.status_code == 405 and resp.headers["allow"] == "POST", (resp.headers, resp.text)
    resp = admin.request("OPTIONS", "/v1/jobs")
    assert resp.status_code == 405 and resp.headers["allow"] == "GET, POST", resp.headers


# ---------------------------------------------------------------- bodies, content types, limits


@pytest.mark.parametrize(("raw", "ctype"), [(b"", "application/json"), (b"task=x", "application/x-www-form-urlencoded"),
                                           (b"<job/>", "text/xml"), (b"\xff\xfe", "application/json"),
                                           (b"[]", "application/json"), (b"null", "application/json"),
                                           (b'"job"', "application/json")])  # fmt: skip
def test_bodies_that_are_no_job(admin: httpx.Client, raw: bytes, ctype: str) -> None:
    resp = post_raw(admin, "/v1/jobs", raw, ctype)
    assert resp.status_code == 422, resp.text
    assert set(resp.json()) >= {"error", "message", "field"}


def test_duplicate_keys_take_the_last_value_as_every_json_parser_here_does(admin: httpx.Client) -> None:
    raw = b'{"task": {"kind": "shell", "command": "true"}, "queue": "dup-a", "queue": "dup-b"}'
    resp = post_raw(admin, "/v1/jobs", raw)
    assert resp.status_code == 201 and resp.json()["queue"] == "dup-b", resp.text


@pytest.mark.parametrize(("path", "param", "value"), [("/v1/jobs", "limit", 10**6), ("/v1/jobs", "limit", 0),
                                                     ("/v1/jobs", "cursor", -1), ("/v1/events", "limit", 10**30),
                                                     ("/v1/audit", "limit", -5), ("/v1/jobs", "limit", "many")])  # fmt: skip
def test_limits_and_cursors_out_of_range(admin: httpx.Client, path: str, param: str, value: Any) -> None:
    refused(admin.get(path, params={param: value}), param)


def test_huge_query_strings_are_refused_not_crashed(admin: httpx.Client) -> None:
    refused(admin.get("/v1/jobs", params={"name_prefix": "x" * 5000}), "name_prefix", "at most 500")
    # past the HTTP server's own limit on a request line (httpx will not even send it): a 4xx, not a crash
    import socket

    host, port = admin.base_url.host, admin.base_url.port
    with socket.create_connection((host, port or 80), timeout=10) as sock:
        sock.sendall(b"GET /v1/jobs?name_prefix=" + b"x" * 70_000 + b" HTTP/1.1\r\nhost: x\r\n\r\n")
        status = sock.recv(100).split(b" ")[1]
    assert status.startswith(b"4"), status


@pytest.mark.parametrize("header", ["Bearer", "Bearer  x", "Basic YWRtaW46YWRtaW4=", "Bearer " + "x" * 8000,
                                    "Bearer jd_\u00e9t\u00e9", "bearer " + TOKENS["admin"][0] + " extra"])  # fmt: skip
def test_odd_authorization_headers_are_401(node: ServerProcess, header: str) -> None:
    resp = httpx.get(node.url + "/v1/jobs", headers={"authorization": header.encode("utf-8")}, timeout=10)
    assert resp.status_code == 401, (header[:30], resp.status_code, resp.text)
    assert set(resp.json()) >= {"error", "message", "field"}
    assert resp.headers["www-authenticate"].startswith("Bearer"), resp.headers


def test_a_refused_batch_stores_nothing(admin: httpx.Client) -> None:
    jobs = [{"task": SHELL, "queue": "batch-none"}] * 3 + [{"task": SHELL, "priority": "1"}]
    refused(admin.post("/v1/jobs/batch", json={"jobs": jobs}), "jobs[3].priority", "job at index 3")
    assert admin.get("/v1/jobs", params={"queue": "batch-none"}).json()["jobs"] == []


def test_an_error_shows_a_huge_number_without_failing(admin: httpx.Client) -> None:
    raw = b'{"task": {"kind": "shell", "command": "x"}, "priority": %d}' % (2**64 - 1)
    body = refused(post_raw(admin, "/v1/jobs", raw), "priority", "less than or equal to 1000")
    assert orjson.loads(orjson.dumps(body)) == body


@pytest.mark.parametrize("url", ["http://[", "http://a[b/", "http://user[@host/", "http://host:70000/", "http:///path"])
def test_an_http_task_url_the_agent_could_not_send_to_is_refused_at_submit(admin: httpx.Client, url: str) -> None:
    # "http://[" was stored and failed only on the agent (and broke the fuzzer's reading of the 201)
    resp = admin.post("/v1/jobs", json={"task": {"kind": "http", "url": url}})
    assert resp.status_code == 422 and resp.json()["field"] == "task.url", resp.text
    ok = admin.post("/v1/jobs", json={"task": {"kind": "http", "url": "http://127.0.0.1:9/a[1]?b=[2]"}})
    assert ok.status_code == 201, ok.text
