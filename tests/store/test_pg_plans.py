"""The hot PostgreSQL queries use their indexes on a big table (no scan of all jobs), with fresh
statistics and with statistics deliberately stale (the table loaded after the last ANALYZE).

`pytest tests/store/test_pg_plans.py -s` prints each plan: docs/postgres.md shows them.
JOBDECK_PLAN_JOBS sets how many jobs the table holds (default 200,000).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import time
from typing import Any

import pytest

from core.store import _pg_flow as flow_sql
from core.store import _pg_reads as reads
from core.store import _pg_search as search_index
from core.store import _pg_sql as sql
from core.store._pg_statistics import stale_tables
from core.store.base import JobFilter
from core.store.listing import JobOrder
from tests.store.conftest import StoreKit

JOBS = int(os.environ.get("JOBDECK_PLAN_JOBS", "200000"))

# A store that has run for a while and has a backlog: 10 % of the jobs queued, 0.5 % running,
# 1 % scheduled or failed, the rest finished; 20 queues; 10 % tagged.
FILL = f"""
INSERT INTO jobs (name, queue, state, priority, sort_key, run_at, created_at, updated_at, attempt, max_attempts,
                  backoff_base, backoff_cap, task, tags, agent, lease_expires_at, spec_max_attempts)
SELECT 'job-' || i, 'q' || (i % 20),
       CASE WHEN i % 10 = 0 THEN 'queued' WHEN i % 200 = 1 THEN 'running' WHEN i % 200 = 2 THEN 'scheduled'
            WHEN i % 200 = 3 THEN 'failed' ELSE 'succeeded' END,
       i % 5, {time.time()} + i * 0.001 - (i % 5) * 60, {time.time()} + (i % 1000) - 500, {time.time()} + i * 0.001,
       {time.time()} + i * 0.001, 1, 3, 1, 3600, '{{"kind": "noop"}}', '[]',
       CASE WHEN i % 200 = 1 THEN 'agent-' || (i % 7) END, CASE WHEN i % 200 = 1 THEN {time.time()} + 30 END, 3
FROM generate_series(1, {JOBS}) AS i;
INSERT INTO job_tags (tag, job_id) SELECT 'nightly', id FROM jobs WHERE id % 10 = 0;
INSERT INTO queues (name, created_at, updated_at) SELECT DISTINCT queue, 0, 0 FROM jobs;
INSERT INTO events (seq, ts, type, job_id, queue, body)
SELECT i, {time.time()}, 'job.created', i, 'q' || (i % 20), '{{}}' FROM generate_series(1, {JOBS}) AS i;
UPDATE event_seq SET last = {JOBS};
ANALYZE;
"""

NOW = time.time()
# (what, query, arguments, the index (or one of the indexes) its plan must use)
QUERIES: list[tuple[str, str, tuple[Any, ...], str | tuple[str, ...]]] = [
    ("claim: next queued jobs, any queue", sql.CLAIM_ANY, ([], [], 512, NOW), "jobs_claim"),
    ("claim: next queued jobs of one (limited) queue", sql.CLAIM_QUEUE, ([], ["q3"], 10, NOW), "jobs_claim_queue"),
    ("claim: which limited queues have a job queued", sql.WAITING_QUEUES, (["q3", "q4"],), "jobs_claim_queue"),
    ("claim: the same, their locks taken if free", sql.TRY_WAITING, (["q3", "q4"],), "jobs_claim_queue"),
    (
        "claim: a fair queue's keys (skip scan) and shares",
        flow_sql.SQL["fairness_key", False][0],
        ("q3", 10_000, True),
        "jobs_claim_fair",
    ),
    # each key's next jobs from its own range; those without a key from the queue's first jobs, never jobs_claim
    (
        "claim: a fair queue's candidates",
        flow_sql.SQL["fairness_key", False][1],
        ("q3", [], ["a", "b"], 4, ["q3"], NOW, []),
        "jobs_claim_queue",
    ),
    (
        "claim: a fair queue's candidates, whole and locked",
        flow_sql.SQL["fairness_key", True][1],
        ("q3", [], ["a", "b"], 4, ["q3"], NOW, []),
        "jobs_claim_queue",
    ),
    (
        "claim: a per-key queue's next jobs, whole and locked",
        flow_sql.WALK[True],
        ([], ["q3"], 10, NOW, []),
        "jobs_claim_queue",
    ),
    # waiting_for's read of a fair queue: each key's next job by its own range, never a walk of the backlog
    ("waiting_for: a fair queue's turns", flow_sql.TURNS, ("q3", 1001, NOW, ["q3"]), "jobs_claim_fair"),
    ("promote: due scheduled and failed jobs", sql.PROMOTE_DUE, (NOW, 1000), "jobs_due"),
    ("promote: the next due time", sql.NEXT_DUE, (NOW, False), "jobs_due"),
    ("reaper: expired leases", sql.EXPIRED_LEASES, (NOW + 60, 1000), "jobs_lease"),
    ("list: newest jobs", f"{sql.SELECT_JOB} ORDER BY id DESC LIMIT $1", (50,), "jobs_pkey"),
    (
        "list: next page (cursor)",
        f"{sql.SELECT_JOB} WHERE id < $1 ORDER BY id DESC LIMIT $2",
        (JOBS // 2, 50),
        "jobs_pkey",
    ),
    (
        "list: by state",
        f"{sql.SELECT_JOB} WHERE state = $1 ORDER BY id DESC LIMIT $2",
        ("failed", 50),
        "jobs_state",
    ),
    (
        "list: by queue",
        f"{sql.SELECT_JOB} WHERE queue = $1 ORDER BY id DESC LIMIT $2",
        ("q7", 50),
        ("jobs_queue", "jobs_pkey"),
    ),
    (
        "list: by name prefix",
        f"{sql.SELECT_JOB} WHERE name >= $1 AND name < $2 ORDER BY id DESC LIMIT $3",
        ("job-1234", "job-1234\U0010ffff", 50),
        "jobs_name",
    ),
    (
        "list: by tag",
        f"{sql.SELECT_JOB} WHERE id IN (SELECT job_id FROM job_tags WHERE tag = $1) ORDER BY id DESC LIMIT $2",
        ("nightly", 50),
        "job_tags_pkey",
    ),
    (
        "retention: the oldest finished jobs",
        f"{sql.SELECT_JOB} WHERE state IN ('succeeded', 'dead', 'cancelled') AND finished_at < $1 "
        "ORDER BY finished_at LIMIT 500",
        (NOW + 86400,),
        "jobs_finished",
    ),
    (
        "retention: a purged batch's tags",
        "DELETE FROM job_tags t USING unnest($1::text[], $2::bigint[]) AS d(tag, job_id) "
        "WHERE t.tag = d.tag AND t.job_id = d.job_id",
        (["nightly"] * 3, [10, 20, 30]),
        "job_tags_pkey",
    ),
    (
        "prune: a batch of old events",
        "DELETE FROM events WHERE seq >= $1 AND seq < $2",
        (1, 5001),
        "events_pkey",
    ),
    (
        "events: resume after a seq",
        "SELECT seq, ts, type, job_id, queue, body FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
        (JOBS - 500, 1000),
        "events_pkey",
    ),
]


# Statistics deliberately stale: the tables were analysed when they held a little history and no
# backlog, then loaded (autovacuum off, as when it has not come round yet): the planner believes no job
# is queued. Before the claims priced sorting out, this plan read every queued job and sorted them.
STALE_BEFORE = """
ALTER TABLE jobs SET (autovacuum_enabled = false);
ALTER TABLE job_tags SET (autovacuum_enabled = false);
ALTER TABLE events SET (autovacuum_enabled = false);
INSERT INTO jobs (name, queue, state, priority, sort_key, run_at, created_at, updated_at, max_attempts, backoff_base,
                  backoff_cap, task, spec_max_attempts)
SELECT 'old-' || i, 'q' || (i % 20), 'succeeded', 0, i, i, i, i, 3, 1, 3600, '{}', 3 FROM generate_series(1, 2000) AS i;
ANALYZE;
TRUNCATE jobs, job_tags, queues, events;
"""


def uses_store_settings(title: str) -> bool:
    """The claims, the promoter, the reaper and waiting_for's turns run with INDEX_ORDER_ONLY, the prune with
    INDEX_SCAN_ONLY (core/store/_pg_sql.py)."""
    return title.startswith(("claim", "promote", "reaper", "prune", "waiting_for"))


async def refreshed(store: Any) -> list[str]:
    """The store's statistics keeper's round, once the server's activity counters show the load
    (they are flushed about once a second)."""
    deadline = time.monotonic() + 30
    while not (tables := await store.refresh_statistics()) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    return tables


@pytest.mark.parametrize("kit", ["postgres"], indirect=True)
@pytest.mark.parametrize("statistics", ["fresh", "stale"])
async def test_hot_queries_use_their_indexes(
    kit: StoreKit, statistics: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Claims, promotion and the reaper plan well even with stale statistics (they price sorting out);
    lists need statistics, and the store's keeper analyses the tables after the load."""
    pool = kit.store._pool
    report = [f"-- {JOBS:,} jobs, {statistics} statistics"]
    async with pool.acquire() as conn:
        if statistics == "stale":
            await conn.execute(STALE_BEFORE)
            await conn.execute(FILL.replace("ANALYZE;", ""))
            plan = await conn.fetchval("EXPLAIN (FORMAT JSON) SELECT 1 FROM jobs WHERE state = 'queued'")
            believed = json.loads(plan)[0]["Plan"]["Plan Rows"]
            queued = await conn.fetchval("SELECT count(*) FROM jobs WHERE state = 'queued'")
            assert believed * 10 < queued, f"statistics are not stale: the planner expects {believed} of {queued}"
            await check_plans(conn, [q for q in QUERIES if uses_store_settings(q[0])], statistics, report)
            assert sorted(await refreshed(kit.store)) == ["job_tags", "jobs"], (
                "the keeper did not analyse the loaded tables"
            )
            await check_plans(conn, [q for q in QUERIES if not uses_store_settings(q[0])], "refreshed", report)
        else:
            await conn.execute(FILL)
            await check_plans(conn, QUERIES, statistics, report)
    with capsys.disabled():
        if os.environ.get("JOBDECK_PRINT_PLANS"):
            print("\n".join(report))


async def check_plans(conn: Any, queries: list[Any], statistics: str, report: list[str]) -> None:
    for title, query, args, index in queries:
        tr = conn.transaction()
        await tr.start()  # claims lock rows: roll back after
        try:
            if uses_store_settings(title):
                await conn.execute(sql.INDEX_SCAN_ONLY if title.startswith("prune") else sql.INDEX_ORDER_ONLY)
            rows = await conn.fetch(f"EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) {query}", *args)
        finally:
            await tr.rollback()
        plan = "\n".join(r[0] for r in rows)
        report.append(f"\n-- {title} ({statistics} statistics)\n{plan}")
        indexes = (index,) if isinstance(index, str) else index
        assert any(re.search(rf"\b{i}\b", plan) for i in indexes), (
            f"{title} ({statistics} statistics): expected a plan using {index}, got:\n{plan}"
        )
        assert "Seq Scan on jobs" not in plan and "Seq Scan on events" not in plan, f"{title}: a full scan:\n{plan}"
        if uses_store_settings(title):
            assert "Sort" not in plan, f"{title} ({statistics} statistics): sorts what it reads:\n{plan}"
            assert "JIT" not in plan, f"{title} ({statistics} statistics): compiled (250 ms a claim):\n{plan}"
            assert not re.search(r"\bjobs_claim\b", plan) or title.startswith("claim: next queued jobs, any"), plan


def test_statistics_are_stale_when_a_large_share_of_rows_changed_since_analyze() -> None:
    assert stale_tables([("jobs", 1_000_000, 150_000), ("job_tags", 0, 9_000)]) == []
    assert stale_tables([("jobs", 2_000, 200_000), ("job_tags", 700_000, 300_000)]) == ["jobs", "job_tags"]
    assert stale_tables([("jobs", 0, 10_001)]) == ["jobs"]  # never analysed: reltuples -1, counted as 0


# The newest 50,000 jobs are another queue's, another name's, queued and untagged (a backlog just
# submitted): a list of any other state, queue, name or tag must not read through them first.
NEWEST_ELSEWHERE = """
INSERT INTO jobs (name, queue, state, priority, sort_key, run_at, created_at, updated_at, max_attempts, backoff_base,
                  backoff_cap, task, spec_max_attempts)
SELECT 'noop', 'backlog', 'queued', 0, i, i, i, i, 3, 1, 3600, '{}', 3 FROM generate_series(1, 50000) AS i;
ANALYZE;
"""
LISTS = [
    JobFilter(states=("scheduled",)),
    JobFilter(states=("succeeded",)),
    JobFilter(queue="q7"),
    JobFilter(name_prefix="job-1234"),  # 111 names (job-1234, job-12340 ...): past MERGE_NAMES the ids walk
    JobFilter(tag="nightly"),
    JobFilter(tag="nightly", states=("queued",)),
]


class Recording:
    """A connection that remembers the statements it ran (to explain them after)."""

    def __init__(self, conn: Any) -> None:
        self.conn, self.ran = conn, list[tuple[str, tuple[Any, ...]]]()

    async def fetch(self, query: str, *args: Any) -> Any:
        self.ran.append((query, args))
        return await self.conn.fetch(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self.conn.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> Any:
        return await self.conn.execute(query, *args)

    def transaction(self) -> Any:
        return self.conn.transaction()


@pytest.mark.parametrize("kit", ["postgres"], indirect=True)
async def test_list_pages_read_their_range_when_the_newest_jobs_are_others(
    kit: StoreKit, capsys: pytest.CaptureFixture[str]
) -> None:
    report = []
    async with kit.store._pool.acquire() as conn:
        await conn.execute(FILL.replace("ANALYZE;", ""))
        await conn.execute(NEWEST_ELSEWHERE)
        pages = [(flt, None, page) for flt in LISTS for page in (None, JOBS // 2)]
        for flt, order, page in pages + [(flt, order, None) for flt, order in SORTED]:
            rec = Recording(conn)
            jobs = await reads.list_jobs(rec, flt, page, 50, order)
            what = f"{flt} {order or ''} (before {page})"
            assert jobs, f"{what}: an empty page"
            query, args = rec.ran[-1]
            plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN (ANALYZE, COSTS OFF) {query}", *args))
            report.append(f"-- {what}\n{plan}")
            assert "Seq Scan on jobs" not in plan, f"{what}: a full scan:\n{query}\n{plan}"
            removed = [int(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", plan)]
            assert sum(removed) < 5_000, f"{what}: read {sum(removed):,} rows it did not show:\n{query}\n{plan}"
    if os.environ.get("JOBDECK_PRINT_PLANS"):
        with capsys.disabled():
            print("\n".join(report))


# The other pages the console and the dashboard ask: every sort, several states.
SORTED = [
    (JobFilter(), JobOrder("priority")),
    (JobFilter(), JobOrder("state", False)),
    (JobFilter(), JobOrder("queue", False)),
    (JobFilter(), JobOrder("duration")),
    (JobFilter(), JobOrder("created")),
    (JobFilter(), JobOrder("id", False)),
    (JobFilter(states=("failed", "running")), None),
    # Not here: a queue sorted by priority walks jobs_priority and filters, which reads every job of a
    # higher priority first (the fill's q7 has only priority 2: 80,000 rows). No (queue, priority) index.
]


@pytest.mark.parametrize("kit", ["postgres"], indirect=True)
async def test_the_text_index_is_written_in_id_order(kit: StoreKit) -> None:
    """job_search's rows lie in the table in id order when index_all (SQL fills) or the indexer writes
    them: the GIN index holds row addresses, so an id block's scan is cheap only when the block's rows
    are neighbours. Written in the IN's hash order, a block without a match cost 2.4 ms instead of
    0.15 (a search page 48 ms instead of 4 at 600,000 jobs, 438 ms p95 at 1.4 M in the scale bench)."""
    async with kit.store._pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO jobs (name, queue, state, priority, sort_key, run_at, created_at, updated_at, attempt, "
            "max_attempts, backoff_base, backoff_cap, task, tags, spec_max_attempts) "
            "SELECT 'job-' || i, 'q', 'succeeded', 0, i, 0, 0, 0, 1, 3, 1, 3600, '{\"kind\": \"noop\"}', '[]', 3 "
            "FROM generate_series(1, 30000) AS i"
        )
        async with conn.transaction():  # a small work_mem: the IN's hash spills, as it did at 600,000 jobs
            await conn.execute("SET LOCAL work_mem = '64kB'")
            await search_index.index_all(conn)
        rows = await conn.fetch("SELECT job_id FROM job_search ORDER BY ctid")
        ids = [r[0] for r in rows]
        assert len(ids) >= 30_000, f"indexed {len(ids)} of 30,000"
        back = sum(1 for a, b in itertools.pairwise(ids) if b < a)
        assert back == 0, f"{back} of {len(ids):,} rows lie before a lower id: first ids by address {ids[:10]}"


@pytest.mark.parametrize("kit", ["postgres"], indirect=True)
@pytest.mark.parametrize("statistics", ["stale", "fresh"])
async def test_a_search_reads_the_text_index_block_by_block_not_every_newer_job(
    kit: StoreKit, statistics: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A search's page reads job_search's trigram index (migration 0023) one id block at a time, newest
    first, and looks up only its candidates' jobs: the 50,000 newest jobs (a backlog that does not
    match) and the 70,000 below them that do not either are never read. Before the index the page
    walked the ids backwards checking every job (Rows Removed by Filter: 120,000 here, 500,000 in the
    scale benchmark: 562 ms p95 at 1.4 M). With stale statistics too: the plan is fixed (PLAN)."""
    report = []
    async with kit.store._pool.acquire() as conn:
        await conn.execute(FILL.replace("ANALYZE;", "ANALYZE;" if statistics == "fresh" else ""))
        await conn.execute(NEWEST_ELSEWHERE.replace("ANALYZE;", "ANALYZE;" if statistics == "fresh" else ""))
        await search_index.index_all(conn)  # what the store's indexer does after each commit
        # "job-12": 1,111 jobs (job-12, job-120 ... job-129999), most of them ids 120,000-129,999
        for flt, page in ((JobFilter(search="job-12"), None), (JobFilter(search="job-12"), 125_000),
                          (JobFilter(search="job-12", states=("queued",)), None)):  # fmt: skip
            rec = Recording(conn)
            jobs = await reads.list_jobs(rec, flt, page, 50, None)
            expected = await conn.fetch(f"SELECT id FROM jobs WHERE name LIKE '%job-12%' "
                                        f"{'AND state = $2' if flt.states else 'AND $2::text IS NULL'} "
                                        "AND id < $1 ORDER BY id DESC LIMIT 50", page or 2**62,
                                        flt.states[0] if flt.states else None)  # fmt: skip
            assert [j.id for j in jobs] == [r[0] for r in expected], f"{flt} before {page}"
            (pending, pending_args), (query, args) = rec.ran[:2]  # the pending jobs checked, then the index
            plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN (ANALYZE, COSTS OFF) {pending}", *pending_args))
            report.append(f"-- {flt} (before {page}, {statistics} statistics), the pending jobs\n{plan}")
            by_id = re.search(r"Index Cond: .*\bid = ANY\b", plan)  # jobs_pkey, or jobs_state with a state
            assert by_id and "Seq Scan on jobs" not in plan, f"{flt}: pending jobs not by id:\n{plan}"
            async with conn.transaction():
                await conn.execute(search_index.PLAN)
                plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN (ANALYZE, COSTS OFF) {query}", *args))
            report.append(f"-- {flt} (before {page}, {statistics} statistics)\n{plan}")
            assert re.search(r"\bjob_search_text\b", plan), f"{flt}: the text index unused:\n{query}\n{plan}"
            assert "Seq Scan" not in plan and "JIT" not in plan, f"{flt}: a full scan:\n{plan}"
            # a block's scan reads its candidates (at most a block's ids: the cursor's block may hold more
            # after the cursor); the old plan's one walk removed 120,000 rows
            removed = [int(n) for n in re.findall(r"Rows Removed by (?:Filter|Index Recheck): (\d+)", plan)]
            block = 1 << search_index.BLOCK_BITS
            assert max(removed, default=0) < block, f"{flt}: read {removed} rows it did not show:\n{plan}"
            blocks = re.search(r"Bitmap Index Scan on job_search_text .*loops=(\d+)", plan)
            assert blocks and int(blocks[1]) <= 16, f"{flt}: scanned more id blocks than its page needs:\n{plan}"
    if os.environ.get("JOBDECK_PRINT_PLANS"):
        with capsys.disabled():
            print("\n".join(report))
