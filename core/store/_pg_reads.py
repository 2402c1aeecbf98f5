"""The PostgreSQL store's reads for screens and feeds: job lists, attempts, queues, events, stats.

Each takes a pooled connection; none writes, so any node answers them from its own pool.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import asyncpg

from core.errors import NotFound
from core.model import Job
from core.store import _pg_search as search_index
from core.store import _pg_sql as sql
from core.store._pg_counts import job_counts
from core.store.base import (
    COUNT_BUDGET_MS,
    ESTIMATED_FROM,
    FINISHED_EVENTS,
    QUEUE_SETTING_COLUMNS,
    SEARCH_ESTIMATED_FROM,
    Event,
    EventFilter,
    JobFilter,
    counted_by_counters,
    like_pattern,
    queue_view,
    stats_view,
)
from core.store.listing import JobOrder, order_sql, search_pattern, search_sql, searched_id

if TYPE_CHECKING:
    from core.store._pg_writer import Conn

EVENT_PAGE = 1000


def _job_where(flt: JobFilter, arg: Callable[[Any], str]) -> list[str]:
    """The WHERE terms of a job filter (a listing and its count share them)."""
    where: list[str] = []
    if len(flt.states) == 1:  # `state = $n` lets jobs_state (state, id) give the order too
        where.append(f"state = {arg(flt.states[0])}")
    elif flt.states:
        where.append(f"state = ANY({arg(list(flt.states))}::text[])")
    if flt.queue is not None:
        where.append(f"queue = {arg(flt.queue)}")
    if flt.name_prefix:
        # A range on the "C"-collated name: the jobs_name index serves it, as in SQLite.
        where.append(f"name >= {arg(flt.name_prefix)} AND name < {arg(flt.name_prefix + chr(0x10FFFF))}")
    if flt.tag is not None:
        where.append(f"id IN (SELECT job_id FROM job_tags WHERE tag = {arg(flt.tag)})")
    if flt.created_after is not None:
        where.append(f"created_at >= {arg(flt.created_after)}")
    if flt.created_before is not None:
        where.append(f"created_at < {arg(flt.created_before)}")
    if flt.schedule_id is not None:
        where.append(f"schedule_id = {arg(flt.schedule_id)}")
    if flt.queue_patterns:  # LIKE's default escape is the backslash, as like_pattern writes it
        where.append(f"queue LIKE ANY({arg([like_pattern(p) for p in flt.queue_patterns])}::text[])")
    if flt.search:
        where.append(search_sql(flt.search, arg, like="ILIKE", task="task::text", tags="tags::text"))
    return where


def _numbered(params: list[Any]) -> Callable[[Any], str]:
    def arg(value: Any) -> str:
        params.append(value)
        return f"${len(params)}"

    return arg


async def list_jobs(c: Conn, flt: JobFilter, before_id: int | None, limit: int, order: JobOrder | None) -> list[Job]:
    """Newest first unless `order` says otherwise; `before_id` is the id order's cursor."""
    order = order or JobOrder(after=None if before_id is None else (before_id, before_id))
    return sql.to_jobs(await _list_rows(c, sql.SELECT_JOB, flt, order, limit))


async def list_job_ids(c: Conn, flt: JobFilter, before_id: int | None, limit: int) -> list[int]:
    """The ids of list_jobs' page (newest first), without reading the jobs: a bulk action's selection."""
    order = JobOrder(after=None if before_id is None else (before_id, before_id))
    if flt.tag is not None and flt == JobFilter(tag=flt.tag):  # the tag's key alone (an index-only scan)
        sql_ = "SELECT job_id FROM job_tags WHERE tag = $1 AND job_id < $2 ORDER BY job_id DESC LIMIT $3"
        return [r[0] for r in await c.fetch(sql_, flt.tag, ID_MAX if before_id is None else before_id, limit)]
    return [r[0] for r in await _list_rows(c, "SELECT id FROM jobs", flt, order, limit)]


ID_MAX = 2**63 - 1
MERGE_NAMES = 200  # distinct names in a prefix up to which a page reads each name's (name, id) range
_NAMES = (  # the distinct names in [$1, $2), one index seek each (a skip scan PostgreSQL 15 does not do)
    "WITH RECURSIVE d(name) AS (SELECT (SELECT min(name) FROM jobs WHERE name >= $1 AND name < $2) "
    "UNION ALL SELECT (SELECT min(name) FROM jobs WHERE name > d.name AND name < $2) FROM d WHERE d.name IS NOT NULL) "
    "SELECT name FROM d WHERE name IS NOT NULL LIMIT $3"
)


def _range_of(column: str, v: str, order: JobOrder, arg: Callable[[Any], str]) -> tuple[str, str]:
    """(condition, ORDER BY) reading the jobs whose `column` is `v` (SQL) in id order from the (column, id)
    index as one range. Written as row comparisons, with no `column = value`: the planner then cannot
    drop the column from the order, so only that index gives it. With `column = value` it may walk the
    ids backwards instead, filtering, and the newest 500,000 jobs being of another state or queue made
    that read all of them (the planner assumes matches are spread evenly)."""
    lo, hi = (
        (-1, ID_MAX)
        if order.after is None
        else ((-1, order.after[1]) if order.descending else (order.after[1], ID_MAX))
    )
    direction = "DESC" if order.descending else "ASC"
    cond = f"({column}, id) > ({v}, {arg(lo)}) AND ({column}, id) < ({v}, {arg(hi)})"
    return cond, f"{column} {direction}, id {direction}"


async def _list_rows(c: Conn, select: str, flt: JobFilter, order: JobOrder, limit: int) -> list[asyncpg.Record]:
    only = {k for k in ("states", "queue", "name_prefix", "tag", "created_after", "created_before", "schedule_id",
                        "queue_patterns", "search") if getattr(flt, k) not in (None, (), "")}  # fmt: skip
    if order.by_id and flt.search and search_index.indexed(flt.search):
        return await _searched(c, select, flt, order, limit)
    if order.by_id and (only == {"queue"} or (only == {"states"} and len(flt.states) == 1)):
        params: list[Any] = []
        column, value = ("queue", flt.queue) if flt.queue is not None else ("state", flt.states[0])
        arg = _numbered(params)
        cond, by = _range_of(column, arg(value), order, arg)
        return list(await c.fetch(f"{select} WHERE {cond} ORDER BY {by} LIMIT {limit:d}", *params))
    if order.by_id and flt.tag is not None:  # the tag's job_tags range, newest first, each job looked up
        params = []
        arg = _numbered(params)
        rest = _job_where(replace(flt, tag=None), arg)
        cond, by = _range_of("t.tag", arg(flt.tag), order, arg)
        cond, by = cond.replace(", id)", ", t.job_id)"), by.replace("id ", "t.job_id ")
        source = select.replace(" FROM jobs", " FROM job_tags AS t JOIN jobs ON jobs.id = t.job_id")
        query = f"{source} WHERE {' AND '.join([cond, *rest])} ORDER BY {by} LIMIT {limit:d}"
        return list(await c.fetch(query, *params))
    if order.by_id and flt.name_prefix and flt.tag is None:
        hi = flt.name_prefix + chr(0x10FFFF)
        names = [r[0] for r in await c.fetch(_NAMES, flt.name_prefix, hi, MERGE_NAMES + 1)]
        if len(names) <= MERGE_NAMES:
            return await _by_values(c, select, replace(flt, name_prefix=None), order, limit, "name", names)
    if order.by_id and only == {"states"}:  # several states (the console's queued,running): each one's range
        return await _by_values(
            c, select, replace(flt, states=()), order, limit, "state", list(dict.fromkeys(flt.states))
        )
    params = []
    arg = _numbered(params)
    where = _job_where(flt, arg)
    after, by = order_sql(order, arg)
    if after is not None:
        where.append(after)
    filters = f" WHERE {' AND '.join(where)}" if where else ""
    query = f"{select}{filters} ORDER BY {by} LIMIT {arg(limit)}"
    return list(await c.fetch(query, *params))


async def _searched(c: Conn, select: str, flt: JobFilter, order: JobOrder, limit: int) -> list[asyncpg.Record]:
    """A page in id order of a search: job_search's candidates, block by block (core/store/_pg_search.py),
    and the job whose id the text is, if any (its text need not hold its id)."""
    text = flt.search or ""
    params: list[Any] = []
    arg = _numbered(params)
    where = _job_where(flt, arg)
    after = None if order.after is None else int(order.after[1])
    rows = await search_index.search_rows(c, select, where, params, arg, text, order.descending, after, limit)
    if (job_id := searched_id(text)) is not None and job_id not in {r[0] for r in rows}:
        params = []
        arg = _numbered(params)
        where = [f"id = {arg(job_id)}", *_job_where(flt, arg)]
        if after is not None:
            where.append(f"id {'<' if order.descending else '>'} {arg(after)}")
        rows += await c.fetch(f"{select} WHERE {' AND '.join(where)}", *params)
        rows.sort(key=lambda r: r[0], reverse=order.descending)
    return rows[:limit]


async def _by_values(
    c: Conn, select: str, flt: JobFilter, order: JobOrder, limit: int, column: str, values: list[str]
) -> list[asyncpg.Record]:
    """A page in id order of jobs whose `column` is one of `values` (the names of a prefix, several
    states): up to `limit` rows of each value's (column, id) range, then the page. One range walk
    alone would read the ids backwards and filter, through every newest job of another value."""
    params: list[Any] = [values]
    arg = _numbered(params)
    rest = _job_where(flt, arg)
    cond, by = _range_of(column, "n.v", order, arg)
    inner = " AND ".join([cond, *rest])
    direction = "DESC" if order.descending else "ASC"
    columns = ", ".join(f"j.{col}" for col in select.removeprefix("SELECT ").removesuffix(" FROM jobs").split(", "))
    query = (f"SELECT {columns} FROM unnest($1::text[]) AS n(v) CROSS JOIN LATERAL "
             f"({select} WHERE {inner} ORDER BY {by} LIMIT {limit:d}) AS j ORDER BY j.id {direction} LIMIT {limit:d}")  # fmt: skip
    return list(await c.fetch(query, *params))


async def count_jobs(c: Conn, flt: JobFilter, budget_ms: int = COUNT_BUDGET_MS) -> tuple[int, bool]:
    """How many jobs match: from the counters for states and a queue (exact: a few rows), else
    exactly (True) when counting takes under `budget_ms`, else the planner's estimate (False): an
    exact count(*) of millions of rows in PostgreSQL reads them all. For a page's total the estimate
    comes first, and one of ESTIMATED_FROM or more is the answer without a count (as on SQLite)."""
    params: list[Any] = []
    if counted_by_counters(flt):
        terms = []
        if flt.states:
            params.append(list(flt.states))
            terms.append("state = ANY($1::text[])")
        if flt.queue is not None:
            params.append(flt.queue)
            terms.append(f"queue = ${len(params)}")
        clause = f" WHERE {' AND '.join(terms)}" if terms else ""
        return int(await c.fetchval(f"SELECT coalesce(sum(n), 0) FROM job_counts{clause}", *params)), True
    arg = _numbered(params)
    where = _job_where(flt, arg)
    if flt.search and searched_id(flt.search) is None and search_index.indexed(flt.search):
        where.append(f"id IN ({search_index.candidates(arg(search_pattern(flt.search)))})")  # the index's candidates
    matching = "FROM jobs" + (f" WHERE {' AND '.join(where)}" if where else "")
    if flt.tag is not None and flt == JobFilter(tag=flt.tag):  # the tag's key range alone (an index-only scan)
        params, matching = [flt.tag], "FROM job_tags WHERE tag = $1"
    estimate = None
    if 0 < budget_ms <= COUNT_BUDGET_MS:  # a caller that can wait longer (a bulk dry run, 1 s) counts
        estimate = await _planned_rows(c, matching, params)
        if estimate >= (SEARCH_ESTIMATED_FROM if flt.search else ESTIMATED_FROM):
            return estimate, False
    try:
        async with c.transaction():
            await c.execute(f"SET LOCAL statement_timeout = {int(budget_ms)}")
            return int(await c.fetchval(f"SELECT count(*) {matching}", *params)), True
    except asyncpg.QueryCanceledError:
        return (estimate if estimate is not None else await _planned_rows(c, matching, params)), False


async def _planned_rows(c: Conn, matching: str, params: list[Any]) -> int:
    plan = await c.fetchval(f"EXPLAIN (FORMAT JSON) SELECT 1 {matching}", *params)
    return int(json.loads(plan)[0]["Plan"]["Plan Rows"])


async def list_attempts(c: Conn, job_id: int) -> list[dict[str, Any]]:
    """The attempts of a job, oldest first, with their output."""
    cols = sql.ATTEMPT_COLUMNS
    if await c.fetchval("SELECT 1 FROM jobs WHERE id = $1", job_id) is None:
        raise NotFound(f"no job with id {job_id}", field="id")
    rows = await c.fetch(f"SELECT {', '.join(cols)} FROM attempts WHERE job_id = $1 ORDER BY attempt", job_id)
    return [dict(zip(cols, (*r[:-1], sql.loads(r[-1])), strict=True)) for r in rows]


_counts = job_counts  # from the counters the triggers keep (migration 0010), not a count of every job


async def list_queues(c: Conn) -> list[dict[str, Any]]:
    """Every queue with its settings and how many jobs wait and run in it."""
    counts = await _counts(c)
    out = []
    for r in await c.fetch(f"SELECT name, {', '.join(QUEUE_SETTING_COLUMNS)} FROM queues ORDER BY name"):
        out.append(queue_view(r[0], tuple(r[1:]), counts.get(r[0], {})))
    return out


async def events_since(c: Conn, seq: int, limit: int, flt: EventFilter | None) -> list[Event]:
    """Committed events after `seq`, in order, that pass `flt`."""
    where, narrow = "", list[Any]()  # narrow in SQL where an index helps; types are matched below
    if flt is not None and flt.job_ids:
        where, narrow = " AND job_id = ANY($3::bigint[])", [sorted(flt.job_ids)]
    elif flt is not None and flt.queues:
        where, narrow = " AND queue = ANY($3::text[])", [sorted(flt.queues)]
    query = f"SELECT seq, ts, type, job_id, queue, body FROM events WHERE seq > $1{where} ORDER BY seq LIMIT $2"
    page = max(limit, EVENT_PAGE)
    out: list[Event] = []
    after = seq
    while len(out) < limit:
        rows = await c.fetch(query, after, page, *narrow)
        for r in rows:
            if flt is None or flt.matches(r[2], r[3], r[4]):
                out.append(Event(r[0], r[1], r[2], r[3], r[4], r[5].encode()))
                if len(out) >= limit:
                    break
        if len(rows) < page:
            break
        after = rows[-1][0]
    return out


async def finished_history(c: Conn, since: float, bucket: float) -> list[tuple[str, int, int]]:
    """(event type, bucket number, count) of finished-job events since `since`, `bucket` seconds each."""
    rows = await c.fetch(
        "SELECT type, floor(ts / $3)::bigint AS b, count(*) FROM events WHERE type = ANY($1::text[]) AND ts >= $2 "
        "GROUP BY type, b",
        list(FINISHED_EVENTS),
        since,
        bucket,
    )
    return [(str(r[0]), int(r[1]), int(r[2])) for r in rows]


async def stats(c: Conn, now: float) -> dict[str, Any]:
    """Job counts by state and by queue, and finished jobs per second over the last minute."""
    rows = await c.fetch(
        "SELECT type, count(*) FROM events WHERE type = ANY($1::text[]) AND ts >= $2 GROUP BY type",
        list(FINISHED_EVENTS),
        now - 60,
    )
    return stats_view(await _counts(c), {r[0]: int(r[1]) for r in rows})
