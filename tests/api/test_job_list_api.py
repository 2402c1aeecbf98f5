"""GET /v1/jobs for screens: server-side sort with cursors, search (q), and the total count."""

from __future__ import annotations

import asyncio

import httpx

from tests.conftest import RunningNode


async def test_sorted_searched_counted_pages(running: RunningNode) -> None:
    c = running.client
    await c.submit_batch([{"name": f"n{i}", "priority": i % 4, "delay": 600, "tags": ["blue"] if i % 3 else [],
                           "task": {"kind": "shell", "argv": ["echo", f"order-{i}"]}} for i in range(10)])  # fmt: skip
    first = await c.list_jobs(sort="priority", order="desc", limit=4, count="true")
    assert (first["total"], first["total_exact"], first["sort"], first["order"]) == (10, True, "priority", "desc")
    assert [j["priority"] for j in first["jobs"]] == [3, 3, 2, 2], first["jobs"]
    rest = await c.list_jobs(sort="priority", order="desc", limit=100, cursor=first["next_cursor"])
    seen = [j["id"] for j in first["jobs"] + rest["jobs"]]
    assert len(seen) == len(set(seen)) == 10 and rest["next_cursor"] is None
    assert "total" not in rest, "counting is asked for, not paid for on every page"
    found = await c.list_jobs(q="order-7", count="true")
    assert [j["name"] for j in found["jobs"]] == ["n7"] and found["total"] == 1
    blue = await c.list_jobs(q="blue", count="true")
    assert blue["total"] == 6, blue


async def test_a_bad_sort_or_cursor_is_a_422_naming_the_field(running: RunningNode) -> None:
    async with httpx.AsyncClient(base_url=running.url) as http:
        for params, field in (({"sort": "size"}, "sort"), ({"sort": "priority", "cursor": "high:3"}, "cursor")):
            r = await http.get("/v1/jobs", params=params)
            assert r.status_code == 422 and r.json()["field"] == field, r.text


async def test_the_history_comes_from_the_store_with_every_bucket(running: RunningNode) -> None:
    c = running.client
    ok = [await c.submit({"task": {"kind": "shell", "argv": ["true"]}}) for _ in range(2)]
    bad = await c.submit({"task": {"kind": "shell", "argv": ["false"]}, "max_attempts": 1})
    for job in [*ok, bad]:
        await c.wait_for(job["id"], timeout=10)
    h = await c.stats_history("15m")
    assert h["bucket_seconds"] == 30 and len(h["buckets"]) == 30, (h["bucket_seconds"], len(h["buckets"]))
    assert sum(h["outcomes"]["succeeded"]) == 2 and sum(h["outcomes"]["dead"]) == 1, h["outcomes"]
    assert [p for p in h["success_percent"] if p is not None], "a bucket with finished jobs has a ratio"
    day = await c.stats_history("24h")
    assert len(day["buckets"]) == 96 and sum(day["outcomes"]["succeeded"]) == 2
    async with httpx.AsyncClient(base_url=running.url) as http:
        r = await http.get("/v1/stats/history", params={"range": "2d"})
        assert r.status_code == 422 and r.json()["field"] == "range", r.text


async def test_the_pickup_history_splits_held_jobs_from_jobs_waiting_for_a_slot(running: RunningNode) -> None:
    """A job in a paused queue waits by policy ("held"); an ordinary job is picked up at once ("slot").
    Both come from the store (GET /v1/stats/history), per minute, with their latency."""
    c = running.client
    parked = await c.submit({"queue": "held", "delay": 1.0, "task": {"kind": "shell", "argv": ["true"]}})
    await c.queue_action("held", "pause")  # before it is due (the submit made the queue)
    quick = await c.submit({"task": {"kind": "shell", "argv": ["true"]}})
    await c.wait_for(quick["id"], timeout=10)
    await asyncio.sleep(1.6)  # due after 1 s (the pause lands before, even on a busy machine), then held 0.6 s
    await c.queue_action("held", "resume")
    await c.wait_for(parked["id"], timeout=10)
    h = (await c.stats_history("15m"))["pickup"]
    assert h["bucket_seconds"] == 60 and len(h["buckets"]) == 15, (h["bucket_seconds"], len(h["buckets"]))
    assert (sum(h["held"]["jobs"]), sum(h["slot"]["jobs"])) == (1, 1), h
    [i] = [i for i, n in enumerate(h["held"]["jobs"]) if n]
    assert h["held"]["mean_ms"][i] >= 600, f"the held job waited through the pause: {h['held']}"
    [k] = [k for k, n in enumerate(h["slot"]["jobs"]) if n]
    assert h["slot"]["mean_ms"][k] < h["held"]["mean_ms"][i], h
