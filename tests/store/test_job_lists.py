"""Job lists for screens, on SQLite and PostgreSQL: sorted on the server by each column with keyset
pages that neither skip nor repeat a job, searched by id, name, task text and tags, and counted.
(The same at a million jobs is a benchmark: `./dev bench --only lists`.)"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any

import pytest

from core.errors import InvalidInput
from core.model import RunResult, decide_finish, utcnow
from core.store.base import ClaimRequest, JobFilter
from core.store.listing import JobOrder, next_cursor, parse_order, sort_value
from tests.store.conftest import POLICY, StoreKit
from tests.store.test_conformance import submit


async def all_pages(store: Any, flt: JobFilter, sort: str, order: str, size: int) -> list[Any]:
    """Every job of a sorted list, a page of `size` at a time, following next_cursor."""
    out: list[Any] = []
    ordering = parse_order(sort, order, None)
    while True:
        page = await store.list_jobs(flt, None, size, ordering)
        out += page
        cursor = next_cursor(page, size, ordering)
        if cursor is None:
            return out
        ordering = parse_order(sort, order, str(cursor))


async def test_every_sort_pages_through_every_job_once_in_order(kit: StoreKit) -> None:
    s, now = kit.store, utcnow()
    specs = [{"name": f"job-{i}", "queue": f"q{i % 3}", "priority": (i * 7) % 5 - 2, "delay": 600 if i % 4 == 0 else 0}
             for i in range(23)]  # fmt: skip
    jobs = await submit(s, *specs, now=now)
    claimed = await s.claim_jobs(ClaimRequest("a1", 8), now)

    # Finished at different times, so their durations differ (and two are equal, to test ties).
    def finish(seconds: float, job: Any) -> Any:
        return decide_finish(job, RunResult(job.id, 1, "succeeded", started_at=now, finished_at=now + seconds),
                             now + seconds, POLICY)  # fmt: skip

    await s.change_jobs({j.id: functools.partial(finish, 1 + min(k, 5)) for k, j in enumerate(claimed)})
    every = {j.id: j for j in await s.list_jobs(JobFilter(), None, 1000)}
    assert len(every) == len(jobs)
    for sort in ("id", "created", "priority", "state", "queue", "duration"):
        for order in ("desc", "asc"):
            got = await all_pages(s, JobFilter(), sort, order, 4)
            expected = sorted(every.values(), key=lambda j: (sort_value(j, sort), j.id), reverse=order == "desc")
            assert [j.id for j in got] == [j.id for j in expected], f"sort={sort} order={order}"
    durations = [sort_value(j, "duration") for j in await all_pages(s, JobFilter(), "duration", "desc", 5)]
    assert durations[0] == 6.0 and durations[-1] == -1.0, durations
    page = await all_pages(s, JobFilter(queue="q1", states=["queued"]), "priority", "desc", 2)
    assert page and all(j.queue == "q1" and j.state == "queued" for j in page)


async def test_search_by_id_name_task_text_and_tag(kit: StoreKit) -> None:
    s = kit.store
    a, b, c = await submit(
        s,
        {"name": "invoice-eu", "task": {"kind": "python", "function": "billing:charge", "args": ["cust-4711", 12]}},
        {"name": "Nightly Report", "tags": ["finance", "weekly_run"]},
        {"name": "other", "task": {"kind": "shell", "argv": ["echo", "100%_done"]}},
    )

    async def found(text: str) -> list[int]:
        return sorted(j.id for j in await s.list_jobs(JobFilter(search=text), None, 100))

    assert await found("cust-4711") == [a.id], "a value inside the args"
    assert await found("billing:charge") == [a.id], "the function"
    assert await found("nightly") == [b.id], "the name, case-insensitively"
    assert await found("weekly_run") == [b.id], "a tag (and _ is not a wildcard)"
    assert await found("100%_") == [c.id], "% is literal"
    assert c.id in await found(str(c.id)), "the id"
    assert await found("nothing-like-this") == []
    assert await s.count_jobs(JobFilter(search="cust-4711")) == (1, True)


async def test_counts_follow_the_filters(kit: StoreKit) -> None:
    s = kit.store
    await submit(s, *({"queue": "a" if i < 7 else "b", "tags": ["t"] if i % 2 else []} for i in range(12)))
    assert await s.count_jobs(JobFilter()) == (12, True)
    assert await s.count_jobs(JobFilter(queue="a")) == (7, True)
    assert await s.count_jobs(JobFilter(queue="b", tag="t")) == (3, True)
    assert await s.count_jobs(JobFilter(states=["running"])) == (0, True)
    assert await s.count_jobs(JobFilter(queue_patterns=["b*"])) == (5, True)
    # states and a queue come from the counters, whatever happened to the jobs since
    await s.claim_jobs(ClaimRequest("a1", 4, queues=frozenset({"a"})), utcnow())
    assert await s.count_jobs(JobFilter(states=["running"])) == (4, True)
    assert await s.count_jobs(JobFilter(states=["queued", "running"], queue="a")) == (7, True)
    assert await s.count_jobs(JobFilter(states=["queued"], queue="b")) == (5, True)
    assert await s.count_jobs(JobFilter(queue="nowhere")) == (0, True)


@pytest.mark.parametrize("kit", ["sqlite"], indirect=True)
async def test_a_count_past_its_budget_is_an_estimate(kit: StoreKit) -> None:
    """A count that would read every candidate row (a search) gives way to an estimate when its
    budget is spent: the matching share of the newest jobs, times all jobs, marked not exact."""
    s = kit.store
    await submit(
        s, *({"name": f"cust-{i}", "tags": ["c"]} if i % 3 == 0 else {"name": f"other-{i}"} for i in range(3000))
    )
    assert await s.count_jobs(JobFilter(search="cust-")) == (1000, True)
    estimate, exact = await s.count_jobs(JobFilter(search="cust-"), budget_ms=0)
    assert not exact and 850 <= estimate <= 1150, f"expected about 1,000 (an estimate), got {estimate} ({exact})"
    tagged = await s.count_jobs(JobFilter(tag="c", states=["queued"]), budget_ms=0)
    assert not tagged[1] and 850 <= tagged[0] <= 1150, f"a tag and a state: expected about 1,000, got {tagged}"
    assert await s.count_jobs(JobFilter(states=["queued"]), budget_ms=0) == (3000, True), "counters need no budget"


def test_bad_sort_order_and_cursor_are_422s_naming_the_field() -> None:
    for args, field in ((("size", "desc", None), "sort"), (("id", "up", None), "order"),
                        (("priority", "desc", "high:3"), "cursor"), (("id", "desc", "x"), "cursor")):  # fmt: skip
        with pytest.raises(InvalidInput) as caught:
            parse_order(*args)
        assert caught.value.field == field, (args, caught.value.message)
    assert parse_order("queue", "asc", "emails:eu:42") == JobOrder("queue", False, ("emails:eu", 42))


async def _search_index_filled(s: Any) -> None:
    """Wait (with a deadline) until the store's search index holds every job (both fill it after the commit)."""

    async def behind() -> bool:
        if hasattr(s, "_pool"):  # PostgreSQL: no job's text pending
            async with s._pool.acquire() as c:
                return bool(await c.fetchval("SELECT EXISTS (SELECT 1 FROM job_search_pending)"))
        sql = "SELECT (SELECT max(id) FROM jobs) > (SELECT upto FROM job_search_upto)"
        return bool(await s._read(lambda c: c.execute(sql).fetchone()[0]))

    deadline = asyncio.get_running_loop().time() + 30
    while await behind():
        assert asyncio.get_running_loop().time() < deadline, "the search index was not filled within 30 s"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("kit", ["sqlite"], indirect=True)
async def test_sqlite_search_reads_the_text_index_and_the_jobs_newer_than_it(kit: StoreKit) -> None:
    """A search finds the indexed jobs through the FTS5 trigram index (candidates checked with LIKE) and
    the jobs not indexed yet one by one; pages and counts are the same as without the index, and a job
    deleted or renamed after it was indexed is found by its new text only."""
    s = kit.store
    old = await submit(s, *({"name": f"cust-{i}" if i % 3 == 0 else f"other-{i}",
                             "task": {"kind": "shell", "argv": ["echo", f"Ref-{i}"]}} for i in range(120)))  # fmt: skip
    await _search_index_filled(s)
    assert await s._read(lambda c: c.execute("SELECT count(*) FROM job_search").fetchone()[0]) == 120
    new = await submit(s, {"name": "cust-new"}, {"name": "zzz", "tags": ["cust-tag"]}, {"name": "nothing"})
    expected = sorted([j.id for j in old if j.name.startswith("cust-")] + [new[0].id, new[1].id], reverse=True)

    async def found(text: str, order: str = "desc", size: int = 100) -> list[int]:
        return [j.id for j in await all_pages(s, JobFilter(search=text), "id", order, size)]

    assert await found("CUST-") == expected, "indexed and newer jobs, newest first, case-insensitively"
    assert await found("cust-", size=3) == expected, "pages of 3 neither skip nor repeat"
    assert await found("cust-", "asc", 4) == expected[::-1]
    assert await s.count_jobs(JobFilter(search="cust-")) == (len(expected), True)
    assert await found("ref-27") == [old[27].id], "a value inside the task"
    last = old[-1]  # an id of 3 digits that no job's text holds (names and args go up to 119)
    assert last.id >= 120 and await found(str(last.id)) == [last.id], "the id"
    assert await found("cu") == expected, "under 3 characters: no trigram, LIKE alone"
    assert await s.count_jobs(JobFilter(search="cust-", states=("queued",), queue="default")) == (len(expected), True)

    victim, renamed = old[3], old[6]
    await s._write(lambda tx: tx.conn.execute("DELETE FROM jobs WHERE id = ?", (victim.id,)))
    await s._write(lambda tx: tx.conn.execute("UPDATE jobs SET name = 'renamed' WHERE id = ?", (renamed.id,)))
    assert await found("cust-") == [i for i in expected if i not in (victim.id, renamed.id)]
    assert await found("renamed") == [renamed.id]
    await _search_index_filled(s)
    candidates = await s._read(lambda c: [r[0] for r in c.execute(
        "SELECT rowid FROM job_search WHERE job_search MATCH '\"cus\" \"t-\"' ORDER BY rowid")])  # fmt: skip
    assert victim.id not in candidates and renamed.id not in candidates, "the index forgot the old text"
    assert await found("cust-") == [i for i in expected if i not in (victim.id, renamed.id)]


@pytest.mark.parametrize("kit", ["sqlite"], indirect=True)
async def test_sqlite_a_total_the_sample_puts_past_the_bound_is_not_counted(
    kit: StoreKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page's total the sample estimates at ESTIMATED_FROM (a search: SEARCH_ESTIMATED_FROM) or more is
    that estimate (at a million such a count never finished in 15 ms: the budget was spent for nothing);
    fewer are counted, and so is any total for a caller with a longer budget (a bulk dry run)."""
    import core.store.sqlite as sqlite_store

    s = kit.store
    await submit(
        s, *({"name": f"cust-{i}", "tags": ["c"]} if i % 3 == 0 else {"name": f"other-{i}"} for i in range(3000))
    )
    monkeypatch.setattr(sqlite_store, "ESTIMATED_FROM", 500)
    estimate, exact = await s.count_jobs(JobFilter(name_prefix="cust-"))
    assert not exact and 850 <= estimate <= 1150, f"expected about 1,000 (an estimate), got {estimate} ({exact})"
    assert await s.count_jobs(JobFilter(name_prefix="cust-"), budget_ms=60_000) == (1000, True), (
        "a caller that may wait longer than a page (a bulk dry run) gets the count"
    )
    assert await s.count_jobs(JobFilter(search="cust-"), budget_ms=60_000) == (1000, True), "a search's own bound"
    monkeypatch.setattr(sqlite_store, "SEARCH_ESTIMATED_FROM", 500)
    estimate, exact = await s.count_jobs(JobFilter(search="cust-"))
    assert not exact and 850 <= estimate <= 1150, f"a search: expected about 1,000 (an estimate), got {estimate}"
    assert await s.count_jobs(JobFilter(name_prefix="cust-1"), budget_ms=60_000) == (len(
        [i for i in range(0, 3000, 3) if str(i).startswith("1")]), True), "under the bound: counted"  # fmt: skip


@pytest.mark.parametrize("kit", ["postgres"], indirect=True)
async def test_postgres_a_total_the_planner_puts_past_the_bound_is_not_counted(
    kit: StoreKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on SQLite: a page's total the planner estimates at ESTIMATED_FROM or more is that estimate
    (at a million a name prefix's count spent the 15 ms budget, then asked the planner anyway: 21 ms
    p50 vs 4.6 ms); fewer are counted, and so is any total for a caller with a longer budget."""
    import core.store._pg_reads as pg_reads

    s = kit.store
    await submit(s, *({"name": f"cust-{i}"} if i % 3 == 0 else {"name": f"other-{i}"} for i in range(3000)))
    await s._read(lambda c: c.execute("ANALYZE jobs"))
    monkeypatch.setattr(pg_reads, "ESTIMATED_FROM", 500, raising=False)
    estimate, exact = await s.count_jobs(JobFilter(name_prefix="cust-"))
    assert not exact and estimate >= 500, f"expected the planner's estimate (>= 500), got {estimate} ({exact})"
    assert await s.count_jobs(JobFilter(name_prefix="cust-"), budget_ms=60_000) == (1000, True), (
        "a caller that may wait longer than a page (a bulk dry run) gets the count"
    )
    assert await s.count_jobs(JobFilter(name_prefix="cust-1")) == (
        len([i for i in range(0, 3000, 3) if str(i).startswith("1")]), True), "under the bound: counted"  # fmt: skip


@pytest.mark.parametrize("kit", ["sqlite"], indirect=True)
async def test_sqlite_search_index_catches_up_slice_by_slice(kit: StoreKit) -> None:
    """More new jobs than a slice are indexed in several writes, each found by a search meanwhile."""
    s = kit.store
    jobs = await submit(s, *({"name": f"bulk-{i}"} for i in range(1_200)))
    assert len(await s.list_jobs(JobFilter(search="bulk-"), None, 2_000)) == 1_200, "while indexing"
    await _search_index_filled(s)
    assert await s._read(lambda c: c.execute("SELECT count(*) FROM job_search").fetchone()[0]) == 1_200
    assert [j.id for j in await s.list_jobs(JobFilter(search="bulk-1199"), None, 10)] == [jobs[-1].id]


async def _raw(kit: StoreKit, sqlite: str, postgres: str, *args: Any) -> None:
    """One statement outside the store's API (a row deleted or renamed behind its back)."""
    if kit.kind == "sqlite":
        await kit.store._write(lambda tx: tx.conn.execute(sqlite, args))
    else:
        async with kit.store._pool.acquire() as c:
            await c.execute(postgres, *args)


async def test_search_pages_and_counts_are_what_its_condition_says(kit: StoreKit) -> None:
    """Both stores find a search's jobs through their text index (job_search) and check each with the
    search's condition, so the answers are the same as a scan's: newest first or oldest first, in pages
    that neither skip nor repeat, across the index's id blocks (PostgreSQL reads 16,384 ids a block),
    counted, with the other filters; a job deleted or renamed is found by its new text only."""
    s = kit.store
    old = await submit(s, *({"name": f"cust-{i}" if i % 3 == 0 else f"other-{i}",
                             "task": {"kind": "shell", "argv": ["echo", f"Ref-{i}"]}} for i in range(60)))  # fmt: skip
    if kit.kind == "postgres":  # the next jobs two and five blocks further on
        await _raw(kit, "", "SELECT setval(pg_get_serial_sequence('jobs', 'id'), 40000)")
    mid = await submit(s, *({"name": f"cust-mid-{i}"} for i in range(5)), {"name": "zzz", "tags": ["cust-tag"]})
    if kit.kind == "postgres":
        await _raw(kit, "", "SELECT setval(pg_get_serial_sequence('jobs', 'id'), 90000)")
    new = await submit(s, {"name": "cust-new"}, {"name": "nothing", "task": {"kind": "shell", "argv": ["CUST-x"]}})
    await _search_index_filled(s)  # the jobs not yet indexed: test_pg_search_finds_the_jobs_whose_text_is_pending
    expected = sorted([j.id for j in [*old, *mid, *new] if "cust-" in (j.name + str(j.task) + str(j.tags)).lower()],
                      reverse=True)  # fmt: skip
    assert len(expected) == 20 + 6 + 2

    async def found(text: str, order: str = "desc", size: int = 100, **kw: Any) -> list[int]:
        return [j.id for j in await all_pages(s, JobFilter(search=text, **kw), "id", order, size)]

    assert await found("CUST-") == expected, "newest first, case-insensitively, the name, a tag, the task"
    assert await found("cust-", size=3) == expected, "pages of 3 neither skip nor repeat"
    assert await found("cust-", "asc", 4) == expected[::-1]
    assert await s.count_jobs(JobFilter(search="cust-")) == (len(expected), True)
    assert await found("ref-27") == [old[27].id], "a value inside the task"
    assert await found("cust-mid-", size=2) == sorted((j.id for j in mid[:5]), reverse=True)
    last = new[-1]  # an id that no job's text holds
    assert await found(str(last.id)) == [last.id], "the id"
    assert await found("cu") == expected, "under 3 letters in a row: no trigram, the condition alone"
    assert await found("t-", size=7) == [j.id for j in sorted([*old, *mid, *new], key=lambda j: -j.id)
                                         if "t-" in (j.name + str(j.task) + str(j.tags)).lower()]  # fmt: skip
    assert await found("cust-", queue="default", states=("queued",)) == expected
    assert await s.count_jobs(JobFilter(search="cust-", states=("queued",), queue="default")) == (len(expected), True)
    assert await found("cust-", queue="elsewhere") == []

    victim, renamed = old[3], mid[1]
    await _raw(kit, "DELETE FROM jobs WHERE id = ?", "DELETE FROM jobs WHERE id = $1", victim.id)
    await _raw(kit, "UPDATE jobs SET name = 'renamed' WHERE id = ?", "UPDATE jobs SET name = 'renamed' WHERE id = $1",
               renamed.id)  # fmt: skip
    left = [i for i in expected if i not in (victim.id, renamed.id)]
    assert await found("cust-") == left
    assert await found("renamed") == [renamed.id]
    assert await s.count_jobs(JobFilter(search="cust-")) == (len(left), True)
    if kit.kind == "postgres":  # the index forgot the deleted job and the old name
        await _search_index_filled(s)
        async with s._pool.acquire() as c:
            rows = await c.fetch("SELECT job_id, body FROM job_search WHERE job_id = ANY($1::bigint[])",
                                 [victim.id, renamed.id])  # fmt: skip
        assert [(r[0], r[1].split("\n")[0]) for r in rows] == [(renamed.id, "renamed")], rows


@pytest.mark.parametrize("kit", ["postgres"], indirect=True)
async def test_pg_search_finds_the_jobs_whose_text_is_pending(kit: StoreKit) -> None:
    """PostgreSQL writes a job's search text after its commit (migration 0024): the insert notes the
    new ids in job_search_pending and the store's indexer moves them into job_search. A search finds
    the pending jobs, in pages and counts, the same as once they are indexed and when some are each;
    and a job committed late with a lower id (another node's transaction, or this one's, still open
    while newer jobs were indexed) is indexed too: a cursor over the ids indexed would skip it."""
    from core.store import _pg_search as search_index

    s = kit.store
    s._indexer.cancel()  # the indexer moves nothing until the test does it
    async with s._pool.acquire() as c:
        late = c.transaction()  # a job inserted now, committed after newer ones were indexed
        await late.start()
        late_id = await c.fetchval(
            "INSERT INTO jobs (name, queue, state, priority, sort_key, run_at, created_at, updated_at, max_attempts, "
            "backoff_base, backoff_cap, task, tags, spec_max_attempts) VALUES ('cust-late', 'default', 'queued', 0, 0, "
            "0, 0, 0, 3, 1, 60, '{\"kind\": \"noop\"}', '[]', 3) RETURNING id"
        )
        batch = await submit(s, *({"name": f"cust-{i}" if i % 2 else f"other-{i}"} for i in range(30)))
        one = await submit(s, {"name": "x", "tags": ["cust-tag"]})
        expected = sorted([j.id for j in [*batch, *one] if "cust-" in j.name + str(j.tags)], reverse=True)

        async def found(order: str = "desc", size: int = 100) -> list[int]:
            return [j.id for j in await all_pages(s, JobFilter(search="cust-"), "id", order, size)]

        async with s._pool.acquire() as other:
            assert await other.fetchval("SELECT count(*) FROM job_search") == 0
            assert await other.fetchval("SELECT count(*) FROM job_search_pending") == 2, "a row per INSERT statement"
        for stage in ("pending", "some indexed", "indexed"):
            assert await found() == expected, stage
            assert await found(size=4) == expected, f"{stage}: pages of 4"
            assert await found("asc", 3) == expected[::-1], f"{stage}: oldest first, pages of 3"
            assert await s.count_jobs(JobFilter(search="cust-")) == (len(expected), True), stage
            async with s._pool.acquire() as other:
                await search_index.fill_pending(other)  # the oldest pending row: the batch, then the one
        await late.commit()
        async with s._pool.acquire() as other:
            assert await search_index.fill_pending(other) == 1
            assert await other.fetchval("SELECT count(*) FROM job_search_pending") == 0
            indexed = await other.fetchval("SELECT count(*) FROM job_search")
        assert indexed == len(batch) + len(one) + 1, "every job's text once, the late one's too"
        assert await found() == sorted([*expected, late_id], reverse=True)


@pytest.mark.parametrize("kit", ["sqlite"], indirect=True)
async def test_sqlite_search_index_is_merged_by_its_indexer_not_by_the_writes_that_fill_it(kit: StoreKit) -> None:
    """No write merges the FTS5 index's segments inside its own transaction (automerge 0, migration
    0024: a merge falling on a purge of 10 jobs made its transaction up to 0.5 s): each write of the
    index adds one segment, and the store's indexer merges them, a few pages a write, down to one."""
    from core.store import _sqlite_search as search_index

    s = kit.store
    s._indexer.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await s._indexer
    for i in range(10):  # ten writes of the index
        await submit(s, *({"name": f"cust-{i}-{k}"} for k in range(50)))
        await s._write(lambda tx: search_index.index_slice(tx.conn))

    async def segments() -> int:
        return int(await s._read(lambda c: c.execute("SELECT count(DISTINCT segid) FROM job_search_idx").fetchone()[0]))

    assert await segments() == 10, "a write merged the index's segments"
    assert await s._read(search_index.segments) == 10, "the structure record read without writing agrees"
    config = dict(await s._read(lambda c: c.execute("SELECT k, v FROM job_search_config").fetchall()))
    assert config.get("automerge") == 0, f"FTS5 merges inside the writes that fill the index: {config}"
    s._indexer = asyncio.get_running_loop().create_task(s._keep_search_index())
    deadline = asyncio.get_running_loop().time() + 30
    while await segments() > 1:
        assert asyncio.get_running_loop().time() < deadline, f"the indexer left {await segments()} segments"
        await asyncio.sleep(0.05)
    assert await s._read(search_index.segments) == 1
    assert len(await all_pages(s, JobFilter(search="cust-3-"), "id", "desc", 100)) == 50
