"""The hot PostgreSQL queries use their indexes on a big table (no scan of all jobs).

`pytest tests/store/test_pg_plans.py -s` prints each plan: docs/postgres.md shows them.
JOBDECK_PLAN_JOBS sets how many jobs the table holds (default 200,000).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import pytest

from core.store import _pg_sql as sql
from tests.store.conftest import StoreKit

pytestmark = pytest.mark.parametrize("kit", ["postgres"], indirect=True)
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
    ("claim: next queued jobs, any queue", sql.CLAIM_ANY, ([], [], 512), "jobs_claim"),
    ("claim: next queued jobs of one (limited) queue", sql.CLAIM_QUEUE, ([], "q3", 10), "jobs_claim_queue"),
    ("promote: due scheduled and failed jobs", sql.PROMOTE_DUE, (NOW, 1000), "jobs_due"),
    ("promote: the next due time", sql.NEXT_DUE, (NOW, False), "jobs_due"),
    (
        "reaper: expired leases",
        "SELECT id FROM jobs WHERE state = 'running' AND lease_expires_at < $1 LIMIT $2",
        (NOW + 60, 1000),
        "jobs_lease",
    ),
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
        "events: resume after a seq",
        "SELECT seq, ts, type, job_id, queue, body FROM events WHERE seq > $1 ORDER BY seq LIMIT $2",
        (JOBS - 500, 1000),
        "events_pkey",
    ),
]


async def test_hot_queries_use_their_indexes(kit: StoreKit, capsys: pytest.CaptureFixture[str]) -> None:
    pool = kit.store._pool
    async with pool.acquire() as conn:
        await conn.execute(FILL)
        report = [f"-- {JOBS:,} jobs; PostgreSQL {conn.get_server_version().major}"]
        for title, query, args, index in QUERIES:
            tr = conn.transaction()
            await tr.start()  # claims lock rows: roll back after
            try:
                rows = await conn.fetch(f"EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) {query}", *args)
            finally:
                await tr.rollback()
            plan = "\n".join(r[0] for r in rows)
            report.append(f"\n-- {title}\n{plan}")
            indexes = (index,) if isinstance(index, str) else index
            assert any(re.search(rf"\b{i}\b", plan) for i in indexes), (
                f"{title}: expected a plan using {index}, got:\n{plan}"
            )
            assert "Seq Scan on jobs" not in plan and "Seq Scan on events" not in plan, f"{title}: a full scan:\n{plan}"
    with capsys.disabled():
        if os.environ.get("JOBDECK_PRINT_PLANS"):
            print("\n".join(report))
