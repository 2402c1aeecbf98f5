"""The job counters (/v1/stats, /v1/queues, the dispatcher's running counts) agree with the jobs
themselves after every kind of write, on both stores, and on PostgreSQL with two nodes writing at
once and the counters folded meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
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


async def test_big_batches_and_workflows_are_counted_once_per_queue_and_state(kit: StoreKit) -> None:
    # SQLite: the insert counts its jobs itself, one upsert per (queue, state) (migration 0023: no insert trigger)
    from core.workflow import Deps
    from tests.store.test_conformance import new_job

    s, now = kit.store, utcnow()
    await submit(s, *[{"queue": f"q{i % 3}", "delay": 300 if i % 4 == 0 else 0} for i in range(150)], now=now)
    await assert_counts_agree(s, "after a big batch")
    jobs = [new_job(now, queue=f"w{i % 2}") for i in range(120)]
    wf = await s.submit_workflow("fan", jobs, [None, *[Deps(index=[0]) for _ in jobs[1:]]])
    await assert_counts_agree(s, "after a big workflow (its children blocked)")
    # its edges went in whole too (PostgreSQL: by COPY from COPY_FROM edges)
    parents = sorted(p for node in await s.workflow_graph(wf.id) for p in node["parents"])
    assert parents == [jobs[0].id] * (len(jobs) - 1), f"every child waits on the root: {parents[:5]}..."
    await submit(s, {"queue": "q0"}, now=now)
    await assert_counts_agree(s, "after a single submit")


async def test_an_undone_insert_leaves_the_counts_as_they_were(tmp_path: Any) -> None:
    from core.store import sqlite as sqlite_store
    from tests.store.test_conformance import new_job

    store = sqlite_store.SQLiteStore(tmp_path / "jobdeck.db", POLICY, on_commit=lambda events: None)
    await store.open()
    try:
        now = utcnow()
        await submit(store, {"queue": "q"}, now=now)

        def op(tx: Any) -> None:
            sqlite_store._insert_jobs(tx, [new_job(now, queue="q") for _ in range(150)])
            raise RuntimeError("fails after its insert")

        for _ in range(2):  # alone in its transaction (rolled back), then beside another op (its savepoint)
            store.hold_writes()
            failed = store._write(op)
            other = submit(store, {"queue": "q"}, now=now) if _ else None
            store.release_writes()
            with contextlib.suppress(RuntimeError):
                await failed
            if other is not None:
                await other
        await assert_counts_agree(store, "after two undone big inserts")
        assert (await store.stats(now))["by_queue"] == {"q": {"queued": 2}}
        await submit(store, {"queue": "q"}, now=now)
        assert (await store.stats(now))["by_queue"] == {"q": {"queued": 3}}
    finally:
        await store.close()


async def test_no_trigger_runs_on_an_insert_into_jobs(tmp_path: Any) -> None:
    """Any AFTER INSERT trigger on jobs, whatever its WHEN, made every inserted row ~25 % dearer (a
    10,000-job workflow: 203 -> 156 ms of CPU in its INSERT without the two it had): the insert
    counts and indexes itself (core/store/sqlite.py insert_job_rows). Nor does jobs_queue_state
    exist (its one reader reads job_counts)."""
    from core.store import sqlite as sqlite_store

    store = sqlite_store.SQLiteStore(tmp_path / "jobdeck.db", POLICY, on_commit=lambda events: None)
    await store.open()
    try:
        rows = await store._read(lambda c: c.execute(
            "SELECT type, name FROM sqlite_master WHERE tbl_name = 'jobs' AND (type = 'trigger' AND sql LIKE "
            "'%AFTER INSERT ON jobs%' OR name = 'jobs_queue_state')").fetchall())  # fmt: skip
        assert rows == [], f"expected no insert trigger on jobs and no jobs_queue_state, found {rows}"
    finally:
        await store.close()
