"""The job counters (/v1/stats, /v1/queues, the dispatcher's running counts) agree with the jobs
themselves after every kind of write, on both stores, and on PostgreSQL with two nodes writing at
once and the counters folded meanwhile."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from core.model import RunResult, decide_cancel, decide_finish, utcnow
from core.store.archive import Cutoffs
from core.store.base import JobFilter
from tests.store.conftest import POLICY, StoreKit
from tests.store.test_conformance import claim, submit, two_nodes


async def counted(store: Any) -> dict[str, dict[str, int]]:
    """queue -> state -> n, from the jobs one by one (what the counters must say)."""
    jobs = await store.list_jobs(JobFilter(), None, 1000)
    assert len(jobs) < 1000
    out: dict[str, dict[str, int]] = {}
    for (queue, state), n in Counter((j.queue, j.state) for j in jobs).items():
        out.setdefault(queue, {})[state] = n
    return out


async def assert_counts_agree(store: Any, when: str) -> None:
    expected = await counted(store)
    stats = await store.stats(utcnow())
    assert stats["by_queue"] == expected, f"{when}: /v1/stats says {stats['by_queue']}, the jobs say {expected}"
    queues = {q["name"]: q["counts"] for q in await store.list_queues() if q["counts"]}
    assert queues == expected, f"{when}: /v1/queues says {queues}, the jobs say {expected}"
    running = {q: s["running"] for q, s in expected.items() if s.get("running")}
    assert await store.running_counts() == running, f"{when}: running counts"


async def test_counts_follow_submits_claims_finishes_cancels_promotions_and_purges(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    await submit(s, *[{"queue": f"q{i % 3}", "delay": 300 if i % 4 == 0 else 0} for i in range(40)], now=now)
    await assert_counts_agree(s, "after submits")
    taken = await s.claim_jobs(claim(limit=12), now)
    assert len(taken) == 12
    await assert_counts_agree(s, "after a claim")

    def finish(job: Any) -> Any:
        return decide_finish(
            job, RunResult(job.id, 1, "succeeded", started_at=now, finished_at=now + 1), now + 1, POLICY
        )

    await s.change_jobs(dict.fromkeys([j.id for j in taken[:8]], finish))
    waiting = await s.list_jobs(JobFilter(states=("queued",)), None, 5)
    await s.change_jobs(dict.fromkeys([j.id for j in waiting], lambda j: decide_cancel(j, now, POLICY)))
    await assert_counts_agree(s, "after finishes and cancels")
    promoted, _ = await s.promote_due_jobs(now + 400, 1000)
    assert promoted == 10
    await assert_counts_agree(s, "after a promotion")
    finished = await s.list_jobs(JobFilter(states=("succeeded", "cancelled")), None, 100)
    assert await s.purge_jobs([j.id for j in finished], Cutoffs(default=now + 10_000)) == len(finished) == 13
    await assert_counts_agree(s, "after a purge")


@two_nodes
async def test_two_nodes_writing_at_once_with_folds_between_keep_exact_counts(kit: StoreKit) -> None:
    from core.store._pg_counts import fold_job_counts

    a, b, now = kit.store, await kit.another(), utcnow()
    await asyncio.gather(*[submit(n, *[{"queue": f"q{i % 4}"} for i in range(60)], now=now) for n in (a, b)])

    async def claims(node: Any, name: str) -> None:
        for _ in range(6):
            await node.claim_jobs(claim(name, limit=7), now)
            await fold_job_counts(node._pool)

    await asyncio.gather(claims(a, "n1"), claims(b, "n2"))
    await assert_counts_agree(a, "after two nodes claimed")
    await fold_job_counts(a._pool)
    async with a._pool.acquire() as conn:
        rows = await conn.fetchval("SELECT count(*) FROM job_counts")
    assert rows == 8, f"one row per (queue, state) after a fold, got {rows}"
    await assert_counts_agree(b, "after the fold")
