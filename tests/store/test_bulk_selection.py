"""A bulk action by filter takes every job the filter matches, however many, on both stores:
POST /v1/jobs/bulk reads the ids a page at a time (core/api/jobs.py _matching_ids) and reports
their number as `matched` (it once stopped at 100,000). The API test past 100,000 runs on SQLite
(tests/api/test_bulk.py); this walks the same paging on PostgreSQL too, with small pages."""

from __future__ import annotations

import time

from core.model import build_job
from core.store.base import JobFilter
from tests.store.conftest import POLICY, StoreKit
from tests.store.test_conformance import NOOP

PAGE = 1000


async def test_paging_the_ids_of_a_filter_takes_every_match_once(kit: StoreKit) -> None:
    now = time.time()
    wanted: list[int] = []
    for queue, n in (("sel", 2503), ("other", 7), ("sel", 497)):  # the other queue's jobs in between
        made = await kit.store.submit_jobs([build_job({"task": NOOP, "queue": queue}, now, POLICY) for _ in range(n)])
        if queue == "sel":
            wanted += [int(job.id) for job, _ in made]
    ids: list[int] = []
    cursor = None
    while True:
        page = await kit.store.list_job_ids(JobFilter(queue="sel"), cursor, PAGE)
        ids += page
        if len(page) < PAGE:
            break
        cursor = page[-1]
    assert len(ids) == len(set(ids)), "an id came twice"
    assert sorted(ids) == sorted(wanted), f"expected the {len(wanted)} jobs of queue sel, got {len(ids)}"
    assert ids == sorted(ids, reverse=True), "expected newest first, each page after the last"
