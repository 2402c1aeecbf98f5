"""The SQLite store's hot queries use their indexes on a big file: claims, promotion, the reaper
and every job-list filter read about the rows they return, not every stored job.

Each store call runs with a trace of the statements it sends; each SELECT is then explained
(EXPLAIN QUERY PLAN) and run again under a progress handler that counts SQLite's virtual-machine
steps, a measure of work that does not depend on the machine's load. A query that scans or
sorts the jobs table takes several steps per stored job; the budget is a fraction of that.
`JOBDECK_PRINT_PLANS=1 pytest tests/store/test_sqlite_plans.py -s` prints every plan.
JOBDECK_PLAN_JOBS sets how many jobs the file holds (default 200,000).
"""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from core.store._sqlite_search import index_all
from core.store._sqlite_writer import connect, migrate
from core.store.archive import Cutoffs
from core.store.base import ClaimRequest, JobFilter
from core.store.listing import JobOrder
from core.store.sqlite import SQLiteStore, recount_jobs
from tests.store.conftest import POLICY

JOBS = int(os.environ.get("JOBDECK_PLAN_JOBS", "200000"))
NOW = time.time()

# The mix at a smaller size: 70 % finished, 10 % scheduled (due in the future), 5 % queued in
# five queues, 5 % queued in a paused queue (the oldest: a claim that skipped them would read them all),
# 5 % failed (retrying later), 0.5 % running, the rest dead; 20 names, and the newest 20 % of the jobs
# named otherwise (a name-prefix page that walked the ids would read them all first); 70 % tagged
# 'common', 1 % 'rare'.
FILL = f"""
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {JOBS})
INSERT INTO jobs (id, name, queue, state, priority, sort_key, run_at, created_at, updated_at, attempt, max_attempts,
                  backoff_base, backoff_cap, task, tags, agent, lease_expires_at, spec_max_attempts, finished_at)
SELECT i, CASE WHEN i > {JOBS} * 0.8 THEN 'noop' ELSE 'report-' || (i % 20) || '.daily' END,
       CASE WHEN i % 20 = 1 THEN 'held' ELSE 'q' || (i % 5) END,
       CASE WHEN i % 20 IN (1, 2) THEN 'queued' WHEN i % 10 = 3 THEN 'scheduled' WHEN i % 20 = 4 THEN 'failed'
            WHEN i % 200 = 5 THEN 'running' WHEN i % 200 = 25 THEN 'dead' ELSE 'succeeded' END,
       i % 3, CASE WHEN i % 20 = 1 THEN {NOW} - 86400 + i * 0.001 ELSE {NOW} + i * 0.001 END,
       CASE WHEN i % 20 IN (1, 2) THEN {NOW} - 3600 ELSE {NOW} + 3600 + i % 1000 END, {NOW} - {JOBS} * 0.001 + i * 0.001, {NOW}, 1, 3, 1, 3600, '{{"kind": "noop"}}',
       CASE WHEN i % 10 < 7 THEN '["common"]' WHEN i % 100 = 7 THEN '["rare"]' ELSE '[]' END,
       CASE WHEN i % 200 = 5 THEN 'agent-' || (i % 7) END, CASE WHEN i % 200 = 5 THEN {NOW} + 30 END, 3,
       CASE WHEN i % 20 NOT IN (1, 2, 4) AND i % 10 <> 3 AND i % 200 NOT IN (5, 25) THEN {NOW} - 86400 + i * 0.001 END
FROM n;
INSERT INTO job_tags (tag, job_id) SELECT 'common', id FROM jobs WHERE id % 10 < 7;
INSERT INTO job_tags (tag, job_id) SELECT 'rare', id FROM jobs WHERE id % 100 = 7;
INSERT INTO queues (name, paused, created_at, updated_at) SELECT DISTINCT queue, queue = 'held', 0, 0 FROM jobs;
INSERT INTO sqlite_sequence (name, seq) VALUES ('jobs', {JOBS});
"""

TABLES = re.compile(r"\b(FROM|JOIN) (jobs|job_tags|job_counts|events|job_search)\b")
DELETES = re.compile(r"^\s*DELETE FROM (jobs|job_tags|attempts|events)\b", re.I)
# What each call may cost, in virtual-machine steps: a scan of the jobs table is several per job.
BUDGET = JOBS // 4


def fill(path: Path) -> None:
    conn = connect(path)
    migrate(conn)
    conn.execute("BEGIN")
    for statement in FILL.split(";\n"):
        if statement.strip():
            conn.execute(statement)
    recount_jobs(conn)  # the counters, as the store's inserts keep them
    conn.execute("COMMIT")
    index_all(conn)  # the text index a running store fills after each commit
    conn.close()


def vm_steps(conn: sqlite3.Connection, statement: str) -> int:
    """How many virtual-machine steps `statement` takes (counted 100 at a time)."""
    steps = [0]

    def count() -> int:
        steps[0] += 100
        return 0

    conn.set_progress_handler(count, 100)
    try:
        conn.execute(statement).fetchall()
    finally:
        conn.set_progress_handler(None, 0)
    return steps[0]


CALLS: list[tuple[str, Callable[[SQLiteStore], Awaitable[Any]]]] = [
    ("claim: any queue (a paused backlog ahead)", lambda s: s.claim_jobs(ClaimRequest("a1", 512), NOW)),
    ("claim: one queue", lambda s: s.claim_jobs(ClaimRequest("a2", 100, queues=frozenset({"q3"})), NOW)),
    ("claim: a capped queue", lambda s: s.claim_jobs(ClaimRequest("a3", 100, caps={"q1": 5}), NOW)),
    ("promote: nothing due", lambda s: s.promote_due_jobs(NOW, 1000)),
    ("promote: due jobs", lambda s: s.promote_due_jobs(NOW + 3700, 1000)),
    ("reaper: expired leases", lambda s: s.expired_lease_ids(NOW + 60, 1000)),
    ("list: newest", lambda s: s.list_jobs(JobFilter(), None, 100)),
    ("list: next page", lambda s: s.list_jobs(JobFilter(), JOBS // 2, 100)),
    ("list: by state (many)", lambda s: s.list_jobs(JobFilter(states=("succeeded",)), None, 100)),
    ("list: by state (few)", lambda s: s.list_jobs(JobFilter(states=("dead",)), None, 100)),
    ("list: by queue", lambda s: s.list_jobs(JobFilter(queue="q3"), None, 100)),
    ("list: by name prefix (5 %)", lambda s: s.list_jobs(JobFilter(name_prefix="report-7."), None, 100)),
    ("list: by name prefix (55 %)", lambda s: s.list_jobs(JobFilter(name_prefix="report-1"), None, 100)),
    ("list: by tag (70 %)", lambda s: s.list_jobs(JobFilter(tag="common"), None, 100)),
    ("list: by tag (1 %)", lambda s: s.list_jobs(JobFilter(tag="rare"), None, 100)),
    ("list: by tag and state", lambda s: s.list_jobs(JobFilter(tag="common", states=("queued",)), None, 100)),
    ("list: by priority", lambda s: s.list_jobs(JobFilter(), None, 100, JobOrder("priority"))),
    ("list: by tag, by priority", lambda s: s.list_jobs(JobFilter(tag="common"), None, 100, JobOrder("priority"))),
    ("bulk selection: ids by tag", lambda s: s.list_job_ids(JobFilter(tag="common"), None, 5000)),
    ("bulk selection: ids by state", lambda s: s.list_job_ids(JobFilter(states=("succeeded",)), JOBS // 2, 5000)),
    # what the console's and the dashboard's job pages also ask: every sort, several states, the total
    ("list: by state, by queue", lambda s: s.list_jobs(JobFilter(), None, 100, JobOrder("state", False))),
    ("list: by queue name", lambda s: s.list_jobs(JobFilter(), None, 100, JobOrder("queue", False))),
    ("list: by duration", lambda s: s.list_jobs(JobFilter(), None, 100, JobOrder("duration"))),
    ("list: by created", lambda s: s.list_jobs(JobFilter(), None, 100, JobOrder("created"))),
    ("list: oldest first", lambda s: s.list_jobs(JobFilter(), None, 100, JobOrder("id", False))),
    ("list: two states", lambda s: s.list_jobs(JobFilter(states=("queued", "running")), None, 100)),
    ("list: a queue by priority", lambda s: s.list_jobs(JobFilter(queue="q3"), None, 100, JobOrder("priority"))),
    (
        "list: a search (5 %, behind 20 % newer jobs that do not match)",
        lambda s: s.list_jobs(JobFilter(search="report-7."), None, 100),
    ),
    ("list: a search matching one job", lambda s: s.list_jobs(JobFilter(search="report-7.daily x"), None, 100)),
    ("total: a search (1 %: its index's candidates)", lambda s: s.count_jobs(JobFilter(search="rare"))),
    ("total: every job (counters)", lambda s: s.count_jobs(JobFilter())),
    ("total: states of a queue (counters)", lambda s: s.count_jobs(JobFilter(states=("queued", "dead"), queue="q2"))),
    ("total: a rare tag (its key range)", lambda s: s.count_jobs(JobFilter(tag="rare"))),
    ("retention: the oldest finished jobs", lambda s: s.archivable_jobs(Cutoffs(NOW + 86400), 500)),
    ("retention: purge a batch", lambda s: s.purge_jobs(list(range(10, 5010, 10)), Cutoffs(NOW + 86400))),
    ("stats: counts by queue and state", lambda s: s.stats(NOW)),
    ("queues: counts", lambda s: s.list_queues()),
]


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plans") / "jobdeck.db"
    fill(path)
    return path


@pytest.mark.parametrize("title,call", CALLS, ids=[t for t, _ in CALLS])
async def test_hot_queries_read_about_what_they_return(
    big_file: Path, title: str, call: Callable[[SQLiteStore], Awaitable[Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    statements: list[str] = []
    copy = big_file.with_name(f"run-{os.getpid()}-{time.monotonic_ns()}.db")
    src, dst = sqlite3.connect(big_file), sqlite3.connect(copy)
    src.backup(dst)  # each call starts from the same fill (claims and promotions change it)
    src.close()
    dst.close()
    store = SQLiteStore(copy, POLICY, on_commit=lambda events: None, trace=statements.append)
    await store.open()
    try:
        statements.clear()
        await asyncio.wait_for(call(store), 120)
    finally:
        await store.close()
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT") and TABLES.search(s)]
    deletes = [s for s in statements if s.lstrip().upper().startswith("DELETE") and DELETES.search(s)]
    assert reads or deletes, f"{title}: no SELECT or DELETE on the job tables traced; statements: {statements}"
    conn = connect(copy, readonly=True)
    conn.create_function("jobdeck_labels_ok", 2, lambda required, offered: 1, deterministic=True)
    report = []
    try:
        for statement in reads:
            plan = "\n".join("    " + r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {statement}"))
            steps = vm_steps(conn, statement)
            report.append(f"-- {title}: {steps:,} steps\n{statement}\n{plan}")
            assert steps <= BUDGET, (
                f"{title}: {steps:,} virtual-machine steps for {JOBS:,} stored jobs (budget {BUDGET:,}): "
                f"it reads far more than it returns:\n{statement}\n{plan}"
            )
        for statement in deletes:  # run by the writer: a scan there makes every other write wait
            plan = "\n".join("    " + r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {statement}"))
            report.append(f"-- {title}\n{statement[:300]}\n{plan}")
            assert not re.search(r"^\s*SCAN (jobs|job_tags|attempts|events)\b", plan, re.M), (
                f"{title}: a DELETE that reads its whole table:\n{statement[:300]}\n{plan}"
            )
    finally:
        conn.close()
        copy.unlink()
    if os.environ.get("JOBDECK_PRINT_PLANS"):
        with capsys.disabled():
            print("\n" + "\n".join(report))
