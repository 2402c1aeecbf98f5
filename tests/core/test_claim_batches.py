"""Claims stay full whatever the jobs do: jobs that each await one real network round trip (a
Redis PING on the shared test Redis) end a few at a time, and their freed slots must still be
claimed together, not one claim transaction per handful (it fell to ~3.5 jobs a claim)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import RunningNode, until
from tests.services import REDIS_URL

pytestmark = pytest.mark.timeout(240)
JOBS = 1500


def ping_job(queue: str) -> dict[str, Any]:
    return {"task": {"kind": "python", "function": "bench.io_job:redis_ping", "args": [REDIS_URL]}, "queue": queue}


async def counts(running: RunningNode, queue: str) -> dict[str, int]:
    for q in await running.client.queues():
        if q["name"] == queue:
            return dict(q.get("counts") or {})
    return {}


async def store_commits(running: RunningNode) -> int:
    """Store transactions the node committed so far (its /metrics)."""
    async with httpx.AsyncClient(base_url=running.url) as http:
        text = (await http.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith("jobdeck_store_commit_seconds_count"):
            return int(float(line.split()[-1]))
    raise AssertionError("GET /metrics has no jobdeck_store_commit_seconds_count")


async def test_claim_and_result_batches_stay_full_with_io_jobs(running: RunningNode) -> None:
    c = running.client
    probe = await c.submit({**ping_job("io"), "delay": 86_400})  # makes the queue, to pause it
    await c.queue_action("io", "pause")
    await c.job_action(probe["id"], "cancel")
    await c.submit_batch([ping_job("io")] * JOBS)
    before = running.engine.dispatch_counts()
    commits_before = await store_commits(running)
    await c.queue_action("io", "resume")

    async def drained() -> dict[str, int] | None:
        n = await counts(running, "io")
        assert not n.get("failed") and not n.get("dead"), f"PING jobs failed: {n} (is Redis up at {REDIS_URL}?)"
        return n if n.get("succeeded", 0) >= JOBS else None

    await until(drained, 180, f"{JOBS} PING jobs to succeed")
    after = running.engine.dispatch_counts()
    commits = await store_commits(running) - commits_before
    claims = after["claims"] - before["claims"]
    claimed = after["jobs_claimed"] - before["jobs_claimed"]
    batches = after["result_batches"] - before["result_batches"]
    results = after["results"] - before["results"]
    assert claimed == JOBS, f"{claimed} jobs claimed, expected {JOBS}"
    assert claimed / claims >= 12, (
        f"mean claim batch {claimed / claims:.1f} ({claimed} jobs in {claims} claims), want >= 12 of 32 slots"
    )
    assert results / batches >= 8, (
        f"mean result batch {results / batches:.1f} ({results} in {batches} transactions), want >= 8"
    )
    # The results that free slots and the claim that fills them share a commit (SQLite: one writer).
    assert commits <= 0.85 * (claims + batches), (
        f"{commits} commits for {claims} claims and {batches} result batches: results and claims "
        "should share commits (want at most 0.85 of the sum; one commit each gives about 0.9)"
    )
    stats = await c.stats()
    assert stats["dispatch"]["claims"] == after["claims"], f"GET /v1/stats dispatch {stats['dispatch']} vs {after}"
