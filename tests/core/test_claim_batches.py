"""Claims stay full whatever the jobs do: jobs that each await one real network round trip (a
Redis PING on the shared test Redis) end a few at a time, and their freed slots must still be
claimed together, not one claim transaction per handful (it fell to ~3.5 jobs a claim)."""

from __future__ import annotations

from typing import Any

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


async def test_claim_and_result_batches_stay_full_with_io_jobs(running: RunningNode) -> None:
    c = running.client
    probe = await c.submit({**ping_job("io"), "delay": 86_400})  # makes the queue, to pause it
    await c.queue_action("io", "pause")
    await c.job_action(probe["id"], "cancel")
    await c.submit_batch([ping_job("io")] * JOBS)
    before = running.engine.dispatch_counts()
    await c.queue_action("io", "resume")

    async def drained() -> dict[str, int] | None:
        n = await counts(running, "io")
        assert not n.get("failed") and not n.get("dead"), f"PING jobs failed: {n} (is Redis up at {REDIS_URL}?)"
        return n if n.get("succeeded", 0) >= JOBS else None

    await until(drained, 180, f"{JOBS} PING jobs to succeed")
    after = running.engine.dispatch_counts()
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
    stats = await c.stats()
    assert stats["dispatch"]["claims"] == after["claims"], f"GET /v1/stats dispatch {stats['dispatch']} vs {after}"
