"""The REST contract over real HTTP: statuses, the error shape, validation, filters, paging, schedules."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from core.schedule import ONCE_SLACK_SECONDS
from tests.conftest import RunningNode, until

NOOP = {"kind": "python", "function": "agents.builtin:noop"}
LATER = {"task": NOOP, "delay": 3600}  # stays `scheduled` for the whole test
MiB = 1024 * 1024


@pytest.fixture
async def http(running: RunningNode) -> AsyncIterator[httpx.AsyncClient]:
    """A plain HTTP client on the node, for raw statuses and bodies."""
    async with httpx.AsyncClient(base_url=running.url, timeout=30) as client:
        yield client


def error_body(resp: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """Check `resp` is an error with `status` in the one JSON shape; return its body."""
    assert resp.status_code == status, f"expected HTTP {status}, got {resp.status_code}: {resp.text[:500]}"
    assert resp.headers["content-type"].startswith("application/json"), resp.headers["content-type"]
    body = resp.json()
    assert {"error", "message", "field"} <= set(body), f"expected keys error, message, field; got {body}"
    assert isinstance(body["error"], str) and isinstance(body["message"], str) and body["message"], body
    assert body["field"] is None or isinstance(body["field"], str), body
    if code is not None:
        assert body["error"] == code, f"expected error code {code!r}, got {body}"
    return body


async def job_count(http: httpx.AsyncClient) -> int:
    stats = (await http.get("/v1/stats")).json()
    return sum(stats["by_state"].values())


async def poll(fetch: Any, check: Any, timeout: float = 10.0, what: str = "condition") -> Any:
    """Call `fetch` until `check(result)` holds; fail with the last result after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        got = await fetch()
        if check(got):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last got {got}")
        await asyncio.sleep(0.02)


def schedule_spec(**timing: Any) -> dict[str, Any]:
    return {"name": "nightly-report", "job": {"task": NOOP, "queue": "reports"}, **timing}


# ---------------------------------------------------------------- the error shape


async def test_an_unknown_route_is_a_json_404(http: httpx.AsyncClient) -> None:
    error_body(await http.get("/v1/nothing-here"), 404, "not_found")


async def test_a_wrong_method_is_a_json_405(http: httpx.AsyncClient) -> None:
    error_body(await http.delete("/v1/jobs"), 405)


async def test_a_body_that_is_not_json_is_a_json_422(http: httpx.AsyncClient) -> None:
    body = error_body(await http.post("/v1/jobs", content=b"{not json"), 422, "invalid")
    assert "not valid JSON" in body["message"], body


# ---------------------------------------------------------------- 422: invalid fields


@pytest.mark.parametrize(
    ("expr", "words"),
    [("61 * * * *", "out of range"), ("0 9 * *", "4 fields"), ("0 9 * * * * *", "7 fields")],
)
async def test_a_bad_cron_is_422_quoting_the_expression(http: httpx.AsyncClient, expr: str, words: str) -> None:
    body = error_body(await http.post("/v1/schedules", json=schedule_spec(cron=expr)), 422)
    assert body["field"] == "cron", body
    assert f"'{expr}'" in body["message"] and words in body["message"], f"expected {expr!r} and {words!r} in {body}"


async def test_a_cron_that_never_fires_is_422(http: httpx.AsyncClient) -> None:
    resp = await http.post("/v1/schedules", json=schedule_spec(cron="0 9 31 2 *"))
    body = error_body(resp, 422)
    assert "'0 9 31 2 *'" in body["message"], body


async def test_an_unknown_time_zone_is_422(http: httpx.AsyncClient) -> None:
    resp = await http.post("/v1/schedules", json=schedule_spec(cron="0 9 * * *", timezone="Mars/Olympus"))
    body = error_body(resp, 422)
    assert body["field"] == "timezone" and "'Mars/Olympus'" in body["message"], body


async def test_two_timings_for_one_schedule_are_422(http: httpx.AsyncClient) -> None:
    body = error_body(await http.post("/v1/schedules", json=schedule_spec(cron="0 9 * * *", interval=60)), 422)
    assert "cron" in body["message"] and "interval" in body["message"], body


async def test_a_one_time_schedule_in_the_past_is_422_saying_why(http: httpx.AsyncClient) -> None:
    """It was accepted (201), never fired and said nothing."""
    past = (datetime.now(ZoneInfo("UTC")) - timedelta(minutes=1)).isoformat()
    body = error_body(await http.post("/v1/schedules", json=schedule_spec(at=past)), 422)
    assert body["field"] == "at" and "in the past" in body["message"] and "'delay': 0" in body["message"], body
    assert (await http.get("/v1/schedules")).json()["schedules"] == [], "nothing was stored"
    later = (datetime.now(ZoneInfo("UTC")) + timedelta(hours=1)).isoformat()
    made = await http.post("/v1/schedules", json=schedule_spec(at=later))
    assert made.status_code == 201, made.text
    moved = await http.patch(f"/v1/schedules/{made.json()['id']}", json={"at": past})
    assert error_body(moved, 422)["field"] == "at", moved.text


async def test_a_one_time_schedule_with_delay_0_fires_now(running: RunningNode, http: httpx.AsyncClient) -> None:
    made = (await http.post("/v1/schedules", json=schedule_spec(delay=0))).json()
    jobs = await poll(lambda: http.get("/v1/jobs", params={"schedule_id": made["id"]}), lambda r: r.json()["jobs"],
                      what="the one-time schedule's job")  # fmt: skip
    assert len(jobs.json()["jobs"]) == 1


async def test_resuming_a_one_time_schedule_whose_time_passed_is_409(
    running: RunningNode, http: httpx.AsyncClient
) -> None:
    soon = (datetime.now(ZoneInfo("UTC")) + timedelta(seconds=1)).isoformat()
    made = (await http.post("/v1/schedules", json=schedule_spec(at=soon, paused=True))).json()
    await until(lambda: running.engine.clock() > made_at(made) + ONCE_SLACK_SECONDS + 0.1, what="its time to pass")
    for resp in (await http.post(f"/v1/schedules/{made['id']}/resume"),
                 await http.patch(f"/v1/schedules/{made['id']}", json={"paused": False})):  # fmt: skip
        body = error_body(resp, 409)
        assert "passed while it was paused" in body["message"], body
    assert (await http.get(f"/v1/schedules/{made['id']}")).json()["paused"] is True


def made_at(schedule: dict[str, Any]) -> float:
    return datetime.fromisoformat(schedule["at"]).timestamp()


@pytest.mark.parametrize("priority", [1001, -1001, 5000])
async def test_a_priority_out_of_range_is_422(http: httpx.AsyncClient, priority: int) -> None:
    body = error_body(await http.post("/v1/jobs", json={"task": NOOP, "priority": priority}), 422, "invalid")
    assert body["field"] == "priority" and str(priority) in body["message"], body
    assert await job_count(http) == 0


async def test_a_priority_change_out_of_range_is_422(http: httpx.AsyncClient) -> None:
    job = (await http.post("/v1/jobs", json=LATER)).json()
    body = error_body(await http.post(f"/v1/jobs/{job['id']}/priority", json={"priority": 2000}), 422)
    assert body["field"] == "priority", body


async def test_a_missing_task_is_422(http: httpx.AsyncClient) -> None:
    body = error_body(await http.post("/v1/jobs", json={"name": "no-task"}), 422, "invalid")
    assert body["field"] == "task" and "required" in body["message"], body


async def test_a_task_field_error_names_the_field_inside_the_task(http: httpx.AsyncClient) -> None:
    body = error_body(await http.post("/v1/jobs", json={"task": {"kind": "http", "url": "ftp://x"}}), 422)
    assert body["field"] == "task.url", body


async def test_run_at_and_delay_together_are_422(http: httpx.AsyncClient) -> None:
    resp = await http.post("/v1/jobs", json={"task": NOOP, "run_at": "2030-01-01T00:00:00Z", "delay": 5})
    body = error_body(resp, 422, "invalid")
    assert "run_at" in body["message"] and "delay" in body["message"], body
    assert await job_count(http) == 0


async def test_an_unknown_field_is_422(http: httpx.AsyncClient) -> None:
    body = error_body(await http.post("/v1/jobs", json={"task": NOOP, "colour": "blue"}), 422)
    assert body["field"] == "colour", body


async def test_a_bad_state_filter_is_422(http: httpx.AsyncClient) -> None:
    body = error_body(await http.get("/v1/jobs", params={"state": "queued,bogus"}), 422, "invalid")
    assert body["field"] == "state" and "'bogus'" in body["message"], body


async def test_a_page_size_out_of_range_is_422(http: httpx.AsyncClient) -> None:
    body = error_body(await http.get("/v1/jobs", params={"limit": 0}), 422, "invalid")
    assert body["field"] == "limit", body


async def test_a_bad_time_filter_is_422(http: httpx.AsyncClient) -> None:
    body = error_body(await http.get("/v1/jobs", params={"created_after": "yesterday"}), 422)
    assert body["field"] == "created_after" and "'yesterday'" in body["message"], body


# ---------------------------------------------------------------- 413


async def test_a_body_over_1_mib_is_413(http: httpx.AsyncClient) -> None:
    big = {"task": {"kind": "shell", "command": "x" * 90_000}, "tags": ["t"], "name": "n", "padding": "y" * MiB}
    body = error_body(await http.post("/v1/jobs", json=big), 413, "payload_too_large")
    assert "batch" in body["message"], body
    assert await job_count(http) == 0


async def test_a_streamed_body_over_1_mib_without_a_length_is_413(http: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"task": {"kind": "python", "function": "agents.builtin:noop"}, "name": "'
        for _ in range(20):
            yield b"z" * (64 * 1024)
        yield b'"}'

    resp = await http.post("/v1/jobs", content=chunks())
    error_body(resp, 413, "payload_too_large")
    assert await job_count(http) == 0


# ---------------------------------------------------------------- 404


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/jobs/999999"),
        ("GET", "/v1/jobs/999999/attempts"),
        ("GET", "/v1/jobs/999999/events"),
        ("POST", "/v1/jobs/999999/cancel"),
        ("POST", "/v1/jobs/999999/pause"),
        ("POST", "/v1/jobs/999999/retry"),
        ("GET", "/v1/schedules/999999"),
        ("GET", "/v1/schedules/999999/preview"),
        ("POST", "/v1/schedules/999999/pause"),
        ("POST", "/v1/schedules/999999/run"),
        ("DELETE", "/v1/schedules/999999"),
    ],
)
async def test_unknown_ids_are_404(http: httpx.AsyncClient, method: str, path: str) -> None:
    body = error_body(await http.request(method, path), 404, "not_found")
    assert "999999" in body["message"], body


async def test_a_queue_no_job_named_yet_is_created_by_a_change_of_its_settings(http: httpx.AsyncClient) -> None:
    set_ = await http.put("/v1/queues/not-yet-a/concurrency", json={"concurrency": 2})
    assert set_.status_code == 200 and set_.json()["concurrency"] == 2, set_.text
    paused = await http.post("/v1/queues/not-yet-b/pause")
    assert paused.status_code == 200 and paused.json()["paused"] is True, paused.text
    listed = {q["name"]: q for q in (await http.get("/v1/queues")).json()["queues"]}
    assert (listed["not-yet-a"]["concurrency"], listed["not-yet-a"]["depth"]) == (2, 0), listed
    assert listed["not-yet-b"]["paused"] is True, listed


async def test_a_patch_of_an_unknown_schedule_is_404(http: httpx.AsyncClient) -> None:
    error_body(await http.patch("/v1/schedules/999999", json={"name": "x"}), 404, "not_found")


# ---------------------------------------------------------------- 409: actions in the wrong state


async def _succeeded_job(running: RunningNode) -> dict[str, Any]:
    job = await running.client.submit({"task": NOOP})
    done = await running.client.wait_for(job["id"], timeout=10)
    assert done["state"] == "succeeded", done
    return done


async def _held_queued_job(running: RunningNode, http: httpx.AsyncClient, queue: str = "held") -> dict[str, Any]:
    """A job that stays `queued`: its queue is paused."""
    await http.post("/v1/jobs", json={**LATER, "queue": queue})  # makes the queue exist
    assert (await http.post(f"/v1/queues/{queue}/pause")).status_code == 200
    job = (await http.post("/v1/jobs", json={"task": NOOP, "queue": queue})).json()
    assert job["state"] == "queued", job
    return job


async def test_pausing_a_succeeded_job_is_409_naming_its_state(running: RunningNode, http: httpx.AsyncClient) -> None:
    job = await _succeeded_job(running)
    body = error_body(await http.post(f"/v1/jobs/{job['id']}/pause"), 409, "conflict")
    assert "succeeded" in body["message"] and body.get("state") == "succeeded", body


async def test_resuming_a_queued_job_is_409_naming_its_state(running: RunningNode, http: httpx.AsyncClient) -> None:
    job = await _held_queued_job(running, http)
    body = error_body(await http.post(f"/v1/jobs/{job['id']}/resume"), 409, "conflict")
    assert "queued" in body["message"] and body.get("state") == "queued", body


async def test_setting_the_priority_of_a_finished_job_is_409(running: RunningNode, http: httpx.AsyncClient) -> None:
    job = await _succeeded_job(running)
    body = error_body(await http.post(f"/v1/jobs/{job['id']}/priority", json={"priority": 5}), 409, "conflict")
    assert "succeeded" in body["message"] and body.get("state") == "succeeded", body


async def test_retrying_a_queued_job_is_409(running: RunningNode, http: httpx.AsyncClient) -> None:
    job = await _held_queued_job(running, http)
    body = error_body(await http.post(f"/v1/jobs/{job['id']}/retry"), 409, "conflict")
    assert "queued" in body["message"], body


async def test_pause_resume_and_priority_of_a_waiting_job(running: RunningNode, http: httpx.AsyncClient) -> None:
    job = (await http.post("/v1/jobs", json=LATER)).json()
    paused = (await http.post(f"/v1/jobs/{job['id']}/pause")).json()
    assert (paused["state"], paused["paused_from"]) == ("paused", "scheduled"), paused
    resumed = (await http.post(f"/v1/jobs/{job['id']}/resume")).json()
    assert (resumed["state"], resumed["run_at"]) == ("scheduled", job["run_at"]), resumed
    raised = (await http.post(f"/v1/jobs/{job['id']}/priority", json={"priority": 7})).json()
    assert raised["priority"] == 7, raised
    cancelled = (await http.post(f"/v1/jobs/{job['id']}/cancel")).json()
    assert cancelled["state"] == "cancelled" and cancelled["finished_at"] is not None, cancelled


# ---------------------------------------------------------------- batches and idempotency


async def test_a_batch_with_one_invalid_job_is_rejected_whole_naming_the_index(http: httpx.AsyncClient) -> None:
    jobs: list[dict[str, Any]] = [dict(LATER) for _ in range(5)]
    jobs[3] = {**LATER, "priority": 9999}
    body = error_body(await http.post("/v1/jobs/batch", json={"jobs": jobs}), 422, "invalid")
    assert body.get("index") == 3 and "index 3" in body["message"], body
    assert body["field"] == "jobs[3].priority", body
    assert await job_count(http) == 0, "a rejected batch must store nothing"
    assert (await http.get("/v1/jobs")).json()["jobs"] == []


async def test_a_batch_of_10000_jobs_is_accepted(running: RunningNode, http: httpx.AsyncClient) -> None:
    jobs = [{"task": NOOP, "delay": 3600, "queue": "bulk", "name": f"bulk-{i}"} for i in range(10_000)]
    resp = await http.post("/v1/jobs/batch", json={"jobs": jobs})
    assert resp.status_code == 201, resp.text[:500]
    out = resp.json()
    assert out["created"] == 10_000 and len(set(out["ids"])) == 10_000, {k: v for k, v in out.items() if k != "ids"}
    stats = (await http.get("/v1/stats")).json()
    assert stats["by_queue"]["bulk"] == {"scheduled": 10_000}, stats["by_queue"]


async def test_a_batch_over_10000_jobs_is_422(http: httpx.AsyncClient) -> None:
    resp = await http.post("/v1/jobs/batch", json={"jobs": [LATER] * 10_001})
    body = error_body(resp, 422)
    assert body["field"] == "jobs", body
    assert await job_count(http) == 0


async def test_an_idempotency_key_returns_the_first_job(http: httpx.AsyncClient) -> None:
    first = await http.post("/v1/jobs", json={**LATER, "idempotency_key": "order-17", "name": "first"})
    second = await http.post("/v1/jobs", json={**LATER, "idempotency_key": "order-17", "name": "second"})
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json()["id"] == first.json()["id"] and second.json()["name"] == "first", second.json()
    batch = (await http.post("/v1/jobs/batch", json={"jobs": [{**LATER, "idempotency_key": "order-17"}]})).json()
    assert batch == {"ids": [first.json()["id"]], "created": 0}
    assert await job_count(http) == 1


async def test_a_unique_key_answers_with_the_job_holding_it_and_bad_ones_name_the_field(
    http: httpx.AsyncClient,
) -> None:
    spec = {**LATER, "unique": {"key": "report:team-a"}}
    first = await http.post("/v1/jobs", json={**spec, "name": "first"})
    second = await http.post("/v1/jobs", json={**spec, "name": "second"})
    assert (first.status_code, second.status_code) == (201, 200), second.text
    got = second.json()
    assert (got["id"], got["name"], got["deduplicated"], got["deduplicated_by"]) == (
        first.json()["id"], "first", True, "unique"), got  # fmt: skip
    assert got["unique"] == {"key": "report:team-a", "scope": "active", "until": None, "held": True}, got
    await http.post(f"/v1/jobs/{first.json()['id']}/cancel")
    third = await http.post("/v1/jobs", json={**spec, "name": "third"})
    assert third.status_code == 201 and third.json()["id"] != first.json()["id"], third.text
    assert (await http.get(f"/v1/jobs/{first.json()['id']}")).json()["unique"]["held"] is False

    window = await http.post("/v1/jobs", json={**LATER, "unique": {"key": "w", "scope": "window", "seconds": 3600}})
    assert window.status_code == 201 and window.json()["unique"]["scope"] == "window", window.text
    assert window.json()["unique"]["until"] is not None
    for bad, field in (({"key": "x", "scope": "window"}, "unique"), ({"key": "x", "seconds": 5}, "unique"),
                       ({"key": ""}, "unique.key"), ({"key": "x", "scope": "forever"}, "unique.scope")):  # fmt: skip
        body = error_body(await http.post("/v1/jobs", json={**LATER, "unique": bad}), 422, "invalid")
        assert body["field"] == field, (bad, body)
    assert (
        "seconds"
        in error_body(
            await http.post("/v1/jobs", json={**LATER, "unique": {"key": "x", "scope": "window"}}), 422, "invalid"
        )["message"]
    )


# ---------------------------------------------------------------- listing


async def _ids(http: httpx.AsyncClient, **params: Any) -> set[int]:
    resp = await http.get("/v1/jobs", params={**params, "limit": 1000})
    assert resp.status_code == 200, resp.text
    return {j["id"] for j in resp.json()["jobs"]}


async def test_list_filters(running: RunningNode, http: httpx.AsyncClient) -> None:
    async def submit(**spec: Any) -> int:
        resp = await http.post("/v1/jobs", json={**LATER, **spec})
        assert resp.status_code == 201, resp.text
        return int(resp.json()["id"])

    a = await submit(name="report-daily", queue="reports", tags=["finance", "eu"])
    b = await submit(name="report-weekly", queue="reports", tags=["finance"])
    c = await submit(name="email-welcome", queue="emails", tags=["eu"])
    d = await submit(name="email-reminder", queue="emails")
    await http.post(f"/v1/jobs/{d}/pause")

    assert await _ids(http) == {a, b, c, d}
    assert await _ids(http, state="paused") == {d}
    assert await _ids(http, state="scheduled,paused") == {a, b, c, d}
    assert await _ids(http, queue="reports") == {a, b}
    assert await _ids(http, name_prefix="email-") == {c, d}
    assert await _ids(http, name_prefix="report-w") == {b}
    assert await _ids(http, tag="eu") == {a, c}
    assert await _ids(http, tag="finance", queue="reports", name_prefix="report-d") == {a}
    assert await _ids(http, queue="nowhere") == set()


async def test_list_filters_by_creation_time(http: httpx.AsyncClient) -> None:
    jobs = [(await http.post("/v1/jobs", json=LATER)).json() for _ in range(3)]
    t = [datetime.fromisoformat(j["created_at"]) for j in jobs]
    mid01, mid12 = t[0] + (t[1] - t[0]) / 2, t[1] + (t[2] - t[1]) / 2
    ids = [j["id"] for j in jobs]
    assert await _ids(http, created_after=mid01.isoformat()) == {ids[1], ids[2]}
    assert await _ids(http, created_before=mid01.isoformat()) == {ids[0]}
    assert await _ids(http, created_after=mid01.isoformat(), created_before=mid12.isoformat()) == {ids[1]}
    zulu = (t[0] - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert await _ids(http, created_after=zulu) == set(ids), "a time ending in Z is UTC"


async def test_created_after_a_jobs_own_created_at_includes_it(http: httpx.AsyncClient) -> None:
    batch = [(await http.post("/v1/jobs", json=LATER)).json() for _ in range(20)]
    missed = [j["id"] for j in batch if j["id"] not in await _ids(http, created_after=j["created_at"])]
    assert missed == [], f"created_after=<job's own created_at> left out jobs {missed}"


async def test_cursor_paging_walks_every_job_exactly_once(http: httpx.AsyncClient) -> None:
    created = (await http.post("/v1/jobs/batch", json={"jobs": [LATER] * 250})).json()["ids"]
    seen: list[int] = []
    cursor = None
    for page_no in range(100):
        params: dict[str, Any] = {"limit": 40, **({"cursor": cursor} if cursor is not None else {})}
        page = (await http.get("/v1/jobs", params=params)).json()
        ids = [j["id"] for j in page["jobs"]]
        assert ids == sorted(ids, reverse=True), f"page {page_no} is not newest first: {ids}"
        seen += ids
        if page_no == 1:  # jobs submitted during the walk do not disturb it
            await http.post("/v1/jobs/batch", json={"jobs": [LATER] * 30})
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)), "a job appeared on two pages"
    assert sorted(seen) == sorted(created), f"expected {len(created)} jobs, walked {len(seen)}"


async def test_cursor_paging_with_a_filter(http: httpx.AsyncClient) -> None:
    jobs = [{**LATER, "queue": "a" if i % 3 else "b"} for i in range(90)]
    ids = (await http.post("/v1/jobs/batch", json={"jobs": jobs})).json()["ids"]
    want = {i for i, spec in zip(ids, jobs, strict=True) if spec["queue"] == "b"}
    seen: list[int] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"queue": "b", "limit": 7, **({"cursor": cursor} if cursor else {})}
        page = (await http.get("/v1/jobs", params=params)).json()
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) and set(seen) == want, (len(seen), len(want))


# ---------------------------------------------------------------- attempts, openapi, health, queues, stats


async def test_attempts_have_their_output(running: RunningNode, http: httpx.AsyncClient) -> None:
    spec = {"task": {"kind": "shell", "command": "echo out-line; echo err-line >&2; exit 2"}, "max_attempts": 1}
    job = await running.client.submit(spec)
    done = await running.client.wait_for(job["id"], timeout=10)
    assert done["state"] == "dead", done
    body = (await http.get(f"/v1/jobs/{job['id']}/attempts")).json()
    assert body["job_id"] == job["id"]
    [attempt] = body["attempts"]
    assert (attempt["attempt"], attempt["outcome"], attempt["exit_code"]) == (1, "failed", 2), attempt
    assert "out-line" in attempt["output"] and "err-line" in attempt["output"], attempt
    assert attempt["error"] == "exit code 2: err-line", attempt
    assert attempt["agent"] == "test-agent", attempt


async def test_openapi_lists_the_routes(http: httpx.AsyncClient) -> None:
    resp = await http.get("/openapi.json")
    assert resp.status_code == 200
    doc = resp.json()
    assert doc["openapi"].startswith("3."), doc.get("openapi")
    expected = {
        "/v1/jobs": {"get", "post"},
        "/v1/jobs/batch": {"post"},
        "/v1/jobs/{job_id}": {"get"},
        "/v1/jobs/{job_id}/attempts": {"get"},
        "/v1/jobs/{job_id}/cancel": {"post"},
        "/v1/jobs/{job_id}/pause": {"post"},
        "/v1/jobs/{job_id}/resume": {"post"},
        "/v1/jobs/{job_id}/retry": {"post"},
        "/v1/jobs/{job_id}/priority": {"post"},
        "/v1/queues": {"get"},
        "/v1/queues/{name}/pause": {"post"},
        "/v1/schedules": {"get", "post"},
        "/v1/schedules/{schedule_id}": {"get", "patch", "delete"},
        "/v1/schedules/{schedule_id}/preview": {"get"},
        "/v1/schedules/{schedule_id}/run": {"post"},
        "/v1/stats": {"get"},
        "/healthz": {"get"},
    }
    missing = {p: m - set(doc["paths"].get(p, {})) for p, m in expected.items() if m - set(doc["paths"].get(p, {}))}
    assert missing == {}, f"routes missing from /openapi.json: {missing}"


async def test_healthz(http: httpx.AsyncClient) -> None:
    resp = await http.get("/healthz")
    assert resp.status_code == 200
    body = resp.json()
    assert body["status"] == "ok" and body["agents"] == 1 and isinstance(body["last_seq"], int), body


async def test_queues_show_depth_and_running(running: RunningNode, http: httpx.AsyncClient) -> None:
    for _ in range(3):
        await _held_queued_job(running, http, queue="held")
    long = await running.client.submit({"task": {"kind": "python", "function": "agents.builtin:sleep", "args": [30]},
                                        "queue": "work"})  # fmt: skip

    async def queues() -> dict[str, Any]:
        return {q["name"]: q for q in (await http.get("/v1/queues")).json()["queues"]}

    got = await poll(queues, lambda qs: qs.get("work", {}).get("running") == 1, what="the work queue to run 1 job")
    held = got["held"]
    assert (held["paused"], held["depth"], held["running"], held["scheduled"]) == (True, 3, 0, 3), held
    assert (got["work"]["depth"], got["work"]["paused"]) == (0, False), got["work"]
    await running.client.job_action(long["id"], "cancel")
    assert (await running.client.wait_for(long["id"], timeout=10))["state"] == "cancelled"
    assert (await queues())["work"]["running"] == 0


async def test_a_resumed_queue_runs_its_waiting_jobs(running: RunningNode, http: httpx.AsyncClient) -> None:
    job = await _held_queued_job(running, http, queue="held")
    resumed = (await http.post("/v1/queues/held/resume")).json()
    assert resumed["paused"] is False, resumed
    assert (await running.client.wait_for(job["id"], timeout=10))["state"] == "succeeded"


async def test_stats_count_by_state_and_queue(running: RunningNode, http: httpx.AsyncClient) -> None:
    await _succeeded_job(running)
    await http.post("/v1/jobs/batch", json={"jobs": [{**LATER, "queue": "later"}] * 2})
    stats = (await http.get("/v1/stats")).json()
    assert stats["by_state"] == {"succeeded": 1, "scheduled": 2}, stats
    assert stats["by_queue"] == {"default": {"succeeded": 1}, "later": {"scheduled": 2}}, stats
    assert stats["last_minute"]["succeeded"] == 1, stats
    assert stats["jobs_per_second"] == pytest.approx(1 / 60, abs=0.01), stats


# ---------------------------------------------------------------- schedules


def _check_local_and_utc(entry: dict[str, str], tz: str, hhmm: str) -> None:
    local, utc = datetime.fromisoformat(entry["local"]), datetime.fromisoformat(entry["utc"])
    assert local == utc, f"local {entry['local']} and UTC {entry['utc']} are not the same instant"
    assert local.utcoffset() == local.astimezone(ZoneInfo(tz)).utcoffset(), f"{entry['local']} is not in {tz}"
    assert utc.utcoffset() == timedelta(0), entry
    assert local.strftime("%H:%M") == hhmm, f"expected {hhmm} local, got {entry['local']}"


async def test_schedule_lifecycle(running: RunningNode, http: httpx.AsyncClient) -> None:
    resp = await http.post("/v1/schedules", json=schedule_spec(cron="0 9 * * *", timezone="Asia/Kolkata"))
    assert resp.status_code == 201, resp.text
    s = resp.json()
    sid = s["id"]
    assert (s["kind"], s["cron"], s["timezone"], s["paused"]) == ("cron", "0 9 * * *", "Asia/Kolkata", False), s
    assert datetime.fromisoformat(s["next_fire_at"]).astimezone(ZoneInfo("Asia/Kolkata")).strftime("%H:%M") == "09:00"

    assert (await http.get(f"/v1/schedules/{sid}")).json() == s
    assert [x["id"] for x in (await http.get("/v1/schedules")).json()["schedules"]] == [sid]

    preview = (await http.get(f"/v1/schedules/{sid}/preview", params={"n": 3})).json()
    assert preview["timezone"] == "Asia/Kolkata" and len(preview["fire_times"]) == 3, preview
    for entry in preview["fire_times"]:
        _check_local_and_utc(entry, "Asia/Kolkata", "09:00")
    assert datetime.fromisoformat(preview["fire_times"][0]["utc"]) == datetime.fromisoformat(s["next_fire_at"])

    patched = (await http.patch(f"/v1/schedules/{sid}",
                                json={"cron": "30 7 * * mon-fri", "timezone": "America/New_York"})).json()  # fmt: skip
    assert (patched["cron"], patched["timezone"]) == ("30 7 * * mon-fri", "America/New_York"), patched
    ny_next = datetime.fromisoformat(patched["next_fire_at"]).astimezone(ZoneInfo("America/New_York"))
    assert (ny_next.strftime("%H:%M"), ny_next.weekday() < 5) == ("07:30", True), ny_next
    for entry in (await http.get(f"/v1/schedules/{sid}/preview", params={"n": 6})).json()["fire_times"]:
        _check_local_and_utc(entry, "America/New_York", "07:30")

    paused = (await http.post(f"/v1/schedules/{sid}/pause")).json()
    assert (paused["paused"], paused["next_fire_at"]) == (True, None), paused
    error_body(await http.post(f"/v1/schedules/{sid}/pause"), 409, "conflict")
    resumed = (await http.post(f"/v1/schedules/{sid}/resume")).json()
    assert resumed["paused"] is False and resumed["next_fire_at"] == patched["next_fire_at"], resumed

    run = await http.post(f"/v1/schedules/{sid}/run")
    assert run.status_code == 201, run.text
    job = run.json()
    assert (job["schedule_id"], job["queue"]) == (sid, "reports"), job
    assert (await running.client.wait_for(job["id"], timeout=10))["state"] == "succeeded"
    assert await _ids(http, schedule_id=sid) == {job["id"]}

    deleted = await http.delete(f"/v1/schedules/{sid}")
    assert deleted.status_code == 204, deleted.text
    error_body(await http.get(f"/v1/schedules/{sid}"), 404, "not_found")
    assert (await http.get("/v1/schedules")).json()["schedules"] == []
    assert (await http.get(f"/v1/jobs/{job['id']}")).status_code == 200, "deleting a schedule keeps its jobs"


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"cron": "61 * * * *"}, "cron"), ({"timezone": "Mars/Olympus"}, "timezone"), ({"interval": 0}, "interval")],
)
async def test_an_invalid_schedule_patch_is_422_and_changes_nothing(
    http: httpx.AsyncClient, changes: dict[str, Any], field: str
) -> None:
    s = (await http.post("/v1/schedules", json=schedule_spec(cron="0 9 * * *", timezone="Europe/Paris"))).json()
    body = error_body(await http.patch(f"/v1/schedules/{s['id']}", json=changes), 422)
    assert body["field"] == field, body
    assert (await http.get(f"/v1/schedules/{s['id']}")).json() == s


async def test_an_interval_schedule_makes_jobs(running: RunningNode, http: httpx.AsyncClient) -> None:
    s = (await http.post("/v1/schedules", json=schedule_spec(interval=1))).json()
    assert s["kind"] == "interval" and s["interval"] == 1, s
    jobs = await poll(lambda: _ids(http, schedule_id=s["id"]), lambda ids: len(ids) >= 2, what="two fired jobs")
    await http.post(f"/v1/schedules/{s['id']}/pause")
    for job_id in jobs:
        assert (await running.client.wait_for(job_id, timeout=10))["state"] == "succeeded"


async def test_a_one_time_schedule_fires_once(running: RunningNode, http: httpx.AsyncClient) -> None:
    s = (await http.post("/v1/schedules", json=schedule_spec(delay=0.2))).json()
    assert s["kind"] == "once" and s["at"] is not None, s
    await poll(lambda: _ids(http, schedule_id=s["id"]), lambda ids: len(ids) == 1, what="the one job")
    done = await poll(lambda: http.get(f"/v1/schedules/{s['id']}"), lambda r: r.json()["next_fire_at"] is None)
    assert done.json()["fired"] == 1, done.json()
    assert (await http.get(f"/v1/schedules/{s['id']}/preview")).json()["fire_times"] == []
