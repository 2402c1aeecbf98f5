"""The /v1/events feed: ordered, filtered, and resumable with `since` without gaps or repeats."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import websockets

from tests.conftest import RunningNode, take

NOOP = {"kind": "python", "function": "agents.builtin:noop"}


async def test_a_job_life_arrives_in_order(running: RunningNode) -> None:
    c = running.client
    ws_url = running.url.replace("http", "ws") + "/v1/events"
    async with asyncio.timeout(10), websockets.connect(ws_url) as ws:
        hello = orjson.loads(await ws.recv())
        assert hello["type"] == "stream.caught_up", "a feed without since starts from now, caught up"
        job = await c.submit({"task": NOOP, "queue": "feed"})
        events: list[dict[str, Any]] = []
        while len(events) < 3:
            events.append(orjson.loads(await ws.recv()))
    assert [e["type"] for e in events] == ["job.created", "job.running", "job.succeeded"], events
    assert all(e["job_id"] == job["id"] for e in events)
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3


async def test_resume_with_since_gets_exactly_what_was_missed(running: RunningNode) -> None:
    c = running.client
    start = (await c.health())["last_seq"]
    first = await c.submit_batch([{"task": NOOP, "queue": "resume"} for _ in range(20)])
    await c.wait_for(first["ids"][-1])
    seen = [e async for e in take(c.events(since=start, queues=["resume"]), 25)]
    last = seen[-1]["seq"]
    # While "disconnected", more happens.
    more = await c.submit_batch([{"task": NOOP, "queue": "resume"} for _ in range(20)])
    for i in more["ids"]:
        await c.wait_for(i)
    resumed = [e async for e in take(c.events(since=last, queues=["resume"], until_caught_up=True), 10_000)]
    stored = orjson.loads(
        (await httpx.AsyncClient().get(f"{running.url}/v1/events", params={"since": start, "queues": "resume"})).content
    )["events"]
    expected = [e["seq"] for e in stored if e["seq"] > last]
    assert [e["seq"] for e in resumed] == expected, "a resumed feed must have no gap and no repeat"
    assert len(seen) + len(resumed) == len(stored) == 40 * 3


async def test_filters_by_type_and_job(running: RunningNode) -> None:
    c = running.client
    start = (await c.health())["last_seq"]
    a = await c.submit({"task": NOOP})
    b = await c.submit({"task": {"kind": "python", "function": "agents.builtin:fail"}, "max_attempts": 1})
    await c.wait_for(a["id"])
    await c.wait_for(b["id"])
    only_dead = [e async for e in take(c.events(since=start, types=["job.dead"], until_caught_up=True), 100)]
    assert [(e["type"], e["job_id"]) for e in only_dead] == [("job.dead", b["id"])]
    only_a = [e async for e in take(c.events(since=start, job_ids=[a["id"]], until_caught_up=True), 100)]
    assert {e["job_id"] for e in only_a} == {a["id"]} and len(only_a) == 3
    wildcard = [
        e async for e in take(c.events(since=start, types=["job.*"], job_ids=[b["id"]], until_caught_up=True), 100)
    ]
    assert [e["type"] for e in wildcard] == ["job.created", "job.running", "job.dead"]


async def test_bad_filter_is_refused_with_a_message(running: RunningNode) -> None:
    url = running.url.replace("http", "ws") + "/v1/events?job_ids=abc"
    async with websockets.connect(url) as ws:
        msg = orjson.loads(await asyncio.wait_for(ws.recv(), 5))
    assert msg["type"] == "stream.error" and "job_ids" in msg["message"]


async def test_lines_frames_carry_a_batch_in_a_few_messages_in_order(running: RunningNode) -> None:
    """`frames=lines`: up to 1,000 events a message, one per line; 2,500 jobs arrive as 3 messages,
    every event once and in seq order (one event a message made a 10,000-job batch 10,000 sends)."""
    c = running.client
    url = running.url.replace("http", "ws") + "/v1/events?queues=lines&types=job.created&frames=lines"
    async with asyncio.timeout(30), websockets.connect(url) as ws:
        assert orjson.loads(await ws.recv())["type"] == "stream.caught_up"
        made = await c.submit_batch([{"task": NOOP, "queue": "lines", "delay": 3600}] * 2500)
        frames: list[list[dict[str, Any]]] = []
        while sum(map(len, frames)) < 2500:
            frames.append([orjson.loads(line) for line in str(await ws.recv()).split("\n")])
    assert [len(f) for f in frames] == [1000, 1000, 500], [len(f) for f in frames]
    events = [e for f in frames for e in f]
    assert [e["job_id"] for e in events] == made["ids"], "each job's event once, in the batch's order"
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    # core.client asks for lines and yields the same events one by one
    again = [e async for e in take(c.events(since=events[0]["seq"] - 1, queues=["lines"], until_caught_up=True), 3000)]
    assert [e["seq"] for e in again] == [e["seq"] for e in events]
