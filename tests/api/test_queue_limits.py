"""Queue limits through the API on a real node with its local agent: PATCH /v1/queues/{name}, the
rate a rate limit lets through (the dispatcher wakes for the next token, not its 1 s poll), and the
waiting_for that names the limit."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.api.test_bad_input import refused
from tests.conftest import ROOT, RunningNode, until
from tests.store.test_two_node_breakers import FlakyHost

NOOP = {"kind": "python", "function": "agents.builtin:noop"}


@pytest.fixture
async def http(running: RunningNode) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=running.url, timeout=30) as client:
        yield client


async def test_bad_queue_settings_are_a_422_naming_the_field_and_change_nothing(
    running: RunningNode, http: httpx.AsyncClient
) -> None:
    before = [q for q in await running.client.queues() if q["name"] == "mail"]  # none: a refused change creates none
    refused(await http.patch("/v1/queues/mail", json={"rate_limit": 0}), "rate_limit", "greater than 0")
    refused(await http.patch("/v1/queues/mail", json={"rate_limit": "5"}), "rate_limit", "not a string")
    refused(await http.patch("/v1/queues/mail", json={"rate_limit": 5, "rate_burst": 0}), "rate_burst")
    refused(await http.patch("/v1/queues/mail", json={"concurrency": -1}), "concurrency")
    refused(await http.patch("/v1/queues/mail", json={}), None, "at least one setting")
    refused(await http.patch("/v1/queues/mail", json={"rate": 5}), "rate")
    refused(await http.patch("/v1/queues/no%20spaces", json={"rate_limit": 5}), "name", "letters, digits")
    assert [q for q in await running.client.queues() if q["name"] == "mail"] == before, "a refused change changed it"
    ok = await running.client.update_queue("mail", rate_limit=2.5, rate_burst=4)
    assert ok == {"name": "mail", "paused": False, "concurrency": None, "rate_limit": 2.5, "rate_burst": 4,
                  "key_concurrency": None, "fairness_weights": None, "fair": False, "breaker_mode": None,
                  "breaker_failure_ratio": None, "breaker_window": None, "breaker_reset": None,
                  "breaker_min_requests": None}  # fmt: skip
    [q] = [q for q in await running.client.queues() if q["name"] == "mail"]
    assert (q["rate_limit"], q["rate_burst"]) == (2.5, 4)
    left = await running.client.update_queue("mail", concurrency=3)
    assert (left["rate_limit"], left["concurrency"]) == (2.5, 3), "a field left out keeps its value"


async def test_a_rate_limited_queue_starts_jobs_at_its_rate(running: RunningNode) -> None:
    c = running.client
    await c.update_queue("paced", rate_limit=20.0, rate_burst=1)  # before any job named the queue
    jobs = [(await c.submit({"task": NOOP, "queue": "paced"}))["id"] for _ in range(40)]
    for j in jobs:
        await c.wait_for(j, timeout=60)
    claimed = sorted([(await c.attempts(j))[0]["claimed_at"] for j in jobs])
    spread = claimed[-1] - claimed[0]
    # 40 starts, one token at a time at 20/s: the first at once, 39 more 50 ms apart at the soonest.
    assert spread >= 39 / 20 - 0.05, f"40 jobs started within {spread:.2f} s: faster than 20/s"
    # Woken for each token, not by the 1 s safety poll (which would take ~39 s); generous for a loaded box.
    assert spread < 12, f"40 jobs took {spread:.2f} s to start at 20/s: the dispatcher is not woken by the bucket"


async def test_waiting_for_names_the_rate_limit_and_clears_when_it_is_lifted(running: RunningNode) -> None:
    c = running.client
    await c.update_queue("slow", rate_limit=0.01, rate_burst=1)
    first = await c.submit({"task": NOOP, "queue": "slow"})
    await c.wait_for(first["id"], timeout=30)
    held = await c.submit({"task": NOOP, "queue": "slow"})
    job = await c.get_job(held["id"])  # the first start took the only token for 100 s
    assert job["state"] == "queued", job
    assert job["waiting_for"] == "queue 'slow' is at its rate limit of 0.01/s (one every 100 s, burst 1)", job
    listed = [j for j in (await c.list_jobs(queue="slow", state="queued"))["jobs"] if j["id"] == held["id"]]
    assert listed and listed[0]["waiting_for"] == job["waiting_for"], listed
    await c.update_queue("slow", rate_limit=None)
    done = await c.wait_for(held["id"], timeout=30)
    assert done["state"] == "succeeded", done


async def test_keys_are_validated_and_a_per_key_limit_says_which_key_waits(
    running: RunningNode, http: httpx.AsyncClient
) -> None:
    c = running.client
    refused(await http.post("/v1/jobs", json={"task": NOOP, "concurrency_key": ""}), "concurrency_key")
    refused(await http.post("/v1/jobs", json={"task": NOOP, "fairness_key": "x" * 201}), "fairness_key")
    refused(await http.post("/v1/jobs", json={"task": NOOP, "fairness_key": 7}), "fairness_key")
    refused(await http.patch("/v1/queues/default", json={"key_concurrency": "2"}), "key_concurrency")
    refused(await http.patch("/v1/queues/default", json={"fairness_weights": {"a": 0}}), "fairness_weights.a")
    refused(await http.patch("/v1/queues/default", json={"fair": "yes"}), "fair")
    ok = await c.update_queue("cust", key_concurrency=1, fairness_weights={"gold": 2.5})
    assert (ok["key_concurrency"], ok["fairness_weights"], ok["fair"]) == (1, {"gold": 2.5}, False), ok
    sleeper = {"kind": "python", "function": "agents.builtin:sleep", "args": [30]}
    first = await c.submit({"task": sleeper, "queue": "cust", "concurrency_key": "acme", "timeout": 60})
    await c.wait_for(first["id"], states=("running",), timeout=30)
    second = await c.submit({"task": NOOP, "queue": "cust", "concurrency_key": "acme"})
    other = await c.submit({"task": NOOP, "queue": "cust", "concurrency_key": "globex"})
    assert (await c.wait_for(other["id"], timeout=30))["state"] == "succeeded", "another key is not held"
    held = await c.get_job(second["id"])
    assert held["state"] == "queued" and held["concurrency_key"] == "acme", held
    assert held["waiting_for"] == "concurrency key 'acme' of queue 'cust' is at its limit: 1 of 1 running", held
    await c.job_action(first["id"], "cancel")
    assert (await c.wait_for(second["id"], timeout=30))["state"] == "succeeded", "it starts once acme's job ends"


async def test_a_fairness_key_makes_its_queue_fair_and_shows_on_the_job(running: RunningNode) -> None:
    c = running.client
    job = await c.submit({"task": NOOP, "queue": "tenants", "fairness_key": "t-1"})
    assert job["fairness_key"] == "t-1"
    [q] = [q for q in await c.queues() if q["name"] == "tenants"]
    assert q["fair"] is True, q
    assert (await c.wait_for(job["id"], timeout=30))["state"] == "succeeded"


async def test_bad_breaker_settings_are_a_422_naming_the_field(running: RunningNode, http: httpx.AsyncClient) -> None:
    refused(await http.patch("/v1/queues/hooks", json={"breaker_failure_ratio": 0}), "breaker_failure_ratio")
    refused(await http.patch("/v1/queues/hooks", json={"breaker_failure_ratio": 1.5}), "breaker_failure_ratio")
    refused(await http.patch("/v1/queues/hooks", json={"breaker_mode": "sometimes"}), "breaker_mode")
    refused(await http.patch("/v1/queues/hooks", json={"breaker_window": 0}), "breaker_window")
    refused(await http.patch("/v1/queues/hooks", json={"breaker_min_requests": 0}), "breaker_min_requests")
    ok = await running.client.update_queue("hooks", breaker_mode="fail", breaker_reset=5.0)
    assert (ok["breaker_mode"], ok["breaker_reset"], ok["breaker_window"]) == ("fail", 5.0, None), ok
    assert (await running.client.update_queue("hooks", breaker_mode=None))["breaker_mode"] is None


async def test_in_fail_mode_an_open_breaker_fails_the_hosts_jobs_at_once_without_a_request(
    running: RunningNode,
) -> None:
    host = FlakyHost()
    try:
        c, task = running.client, {"kind": "http", "url": f"http://{host.address}/x"}
        await c.update_queue("fast", breaker_mode="fail", breaker_min_requests=2, breaker_reset=60.0)
        for _ in range(2):
            j = await c.submit({"task": task, "queue": "fast", "max_attempts": 1})
            assert (await c.wait_for(j["id"], timeout=20))["last_error"] == "HTTP 500 Internal Server Error"
        [b] = await until(lambda: _open(c, host.address), 10, "the breaker to open")
        assert (b["mode"], b["times_opened"]) == ("fail", 1), b
        j = await c.submit({"task": task, "queue": "fast", "max_attempts": 1})
        done = await c.wait_for(j["id"], timeout=20)
        assert done["state"] == "dead", done
        assert done["last_error"].startswith(f"circuit open for host {host.address} (queue 'fast')"), done
        assert "a trial request goes in" in done["last_error"], done
        assert len(host.hits) == 2, "the third job failed without a request"
    finally:
        host.server.shutdown()


async def _open(c: object, address: str) -> list[dict[str, object]]:
    return [b for b in await c.breakers() if b["host"] == address and b["state"] == "open"]  # type: ignore[attr-defined]


async def test_a_reset_closes_an_open_breaker_and_its_held_jobs_run_at_once(running: RunningNode) -> None:
    host = FlakyHost()
    try:
        c, task = running.client, {"kind": "http", "url": f"http://{host.address}/x"}
        await c.update_queue("calls", breaker_min_requests=2, breaker_reset=3600.0)  # no trial for an hour
        for _ in range(2):
            j = await c.submit({"task": task, "queue": "calls", "max_attempts": 1})
            assert (await c.wait_for(j["id"], timeout=20))["state"] == "dead"
        await until(lambda: _open(c, host.address), 10, "the breaker to open")
        held = [(await c.submit({"task": task, "queue": "calls"}))["id"] for _ in range(3)]

        async def all_held() -> bool:
            jobs = [await c.get_job(i) for i in held]
            return all(j["state"] == "scheduled" and "circuit open" in (j["waiting_for"] or "") for j in jobs)

        await until(all_held, 10, "the jobs to be held by the open breaker")
        host.failing = False
        b = await c.reset_breaker("calls", host.address)
        assert (b["state"], b["retry_at"], b["reason"]) == ("closed", None, None), b
        for i in held:
            assert (await c.wait_for(i, timeout=10))["state"] == "succeeded", "held until the trial in an hour"
        assert [ok for _, ok in host.hits] == [True, True, False, False, False], host.hits
    finally:
        host.server.shutdown()


async def _cli(url: str, *args: str) -> str:
    """The `jobdeck` command's output (a subprocess: the node runs in this test's event loop)."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "core.cli", "--server", url, *args, cwd=ROOT,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_a_job_behind_busy_slots_says_so_and_in_a_fair_queue_where_its_key_is(running: RunningNode) -> None:
    c = running.client
    served = [(await c.submit({"task": NOOP, "queue": "tenants", "fairness_key": "a"}))["id"] for _ in range(5)]
    for j in served:
        assert (await c.wait_for(j, timeout=30))["state"] == "succeeded"
    sleeper = {"task": {"kind": "python", "function": "agents.builtin:sleep", "args": [60]}, "queue": "fill",
               "timeout": 90}  # fmt: skip
    fill = (await c.submit_batch([sleeper] * 32))["ids"]  # the local agent's 32 slots
    for j in fill:
        await c.wait_for(j, states=("running",), timeout=30)
    busy = "no free slot: agent test-agent runs 32 of its 32 slots"
    plain = await c.submit({"task": NOOP, "queue": "plain"})
    assert plain["waiting_for"] == busy, plain
    assert (await c.get_job(plain["id"]))["waiting_for"] == busy
    a = [(await c.submit({"task": NOOP, "queue": "tenants", "fairness_key": "a"}))["id"] for _ in range(3)]
    b = (await c.submit({"task": NOOP, "queue": "tenants", "fairness_key": "b"}))["id"]
    # a was served 5 starts, b none: b goes first although it came last
    assert (await c.get_job(b))["waiting_for"] == (f"{busy}; fairness key 'b' is next of the 2 fairness keys with "
                                                   "jobs waiting in queue 'tenants'")  # fmt: skip
    a_waits = (f"{busy}; fairness key 'a' waits its turn: of the 2 fairness keys with jobs waiting in queue "
               "'tenants', 1 goes before it")  # fmt: skip
    listed = {j["id"]: j["waiting_for"] for j in (await c.list_jobs(queue="tenants", state="queued"))["jobs"]}
    assert [listed[i] for i in a] == [a_waits] * 3, listed
    shown = await _cli(running.url, "jobs", "show", str(a[0]))
    assert f"waiting: {a_waits}" in shown, shown
    await c.job_action(fill[0], "cancel")
    for j in (plain["id"], *a, b):
        assert (await c.wait_for(j, timeout=30))["state"] == "succeeded", "a freed slot takes them one by one"
    for j in fill[1:]:
        await c.job_action(j, "cancel")
