"""The PostgreSQL store's reads for screens and feeds: job lists, attempts, queues, events, stats.

Each takes a pooled connection; none writes, so any node answers them from its own pool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.errors import NotFound
from core.model import Job
from core.store import _pg_sql as sql
from core.store.base import FINISHED_EVENTS, Event, EventFilter, JobFilter, like_pattern, queue_view, stats_view

if TYPE_CHECKING:
    from core.store._pg_writer import Conn

EVENT_PAGE = 1000


async def list_jobs(c: Conn, flt: JobFilter, before_id: int | None, limit: int) -> list[Job]:
    """Newest first; `before_id` is the cursor (the last id of the previous page)."""
    where: list[str] = []
    params: list[Any] = []

    def arg(value: Any) -> str:
        params.append(value)
        return f"${len(params)}"

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
    if before_id is not None:
        where.append(f"id < {arg(before_id)}")
    filters = f" WHERE {' AND '.join(where)}" if where else ""
    query = f"{sql.SELECT_JOB}{filters} ORDER BY id DESC LIMIT {arg(limit)}"
    return sql.to_jobs(await c.fetch(query, *params))


async def list_attempts(c: Conn, job_id: int) -> list[dict[str, Any]]:
    """The attempts of a job, oldest first, with their output."""
    cols = sql.ATTEMPT_COLUMNS
    if await c.fetchval("SELECT 1 FROM jobs WHERE id = $1", job_id) is None:
        raise NotFound(f"no job with id {job_id}", field="id")
    rows = await c.fetch(f"SELECT {', '.join(cols)} FROM attempts WHERE job_id = $1 ORDER BY attempt", job_id)
    return [dict(zip(cols, (*r[:-1], sql.loads(r[-1])), strict=True)) for r in rows]


async def _counts(c: Conn) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for queue, state, n in await c.fetch("SELECT queue, state, count(*) FROM jobs GROUP BY queue, state"):
        counts.setdefault(queue, {})[state] = int(n)
    return counts


async def list_queues(c: Conn) -> list[dict[str, Any]]:
    """Every queue with its settings and how many jobs wait and run in it."""
    counts = await _counts(c)
    out = []
    for name, paused, concurrency in await c.fetch("SELECT name, paused, concurrency FROM queues ORDER BY name"):
        out.append(queue_view(name, paused, concurrency, counts.get(name, {})))
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


async def stats(c: Conn, now: float) -> dict[str, Any]:
    """Job counts by state and by queue, and finished jobs per second over the last minute."""
    rows = await c.fetch(
        "SELECT type, count(*) FROM events WHERE type = ANY($1::text[]) AND ts >= $2 GROUP BY type",
        list(FINISHED_EVENTS),
        now - 60,
    )
    return stats_view(await _counts(c), {r[0]: int(r[1]) for r in rows})
