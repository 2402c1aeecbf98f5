"""The PostgreSQL store's text index for job searches (`q=`): job_search and its trigram index (migration 0023).

A search matched every row of `jobs` with ILIKE, newest first, until it had a page: behind a backlog
of 500,000 jobs that do not match, a page read all of them (0.3-5.5 s at 1.4 M). `job_search` holds
each job's name, task and tags once (written by a trigger when the job is inserted, deleted with it),
indexed by pg_trgm's GIN operator class. A GIN scan cannot give its matches in id order: it builds
a bitmap of all of them, and a text in 45,000 of 1.4 M jobs took 300 ms to read and check whatever
page was asked. So the index's first column is the id's block (job_id >> BLOCK_BITS, btree_gin), and
a page scans one block after another, newest first, each an index scan of its own (~0.4 ms for a
block without a match), until it has the page: it reads about the matches it shows. The search's own
condition (search_sql) is checked on each candidate's job, with the other filters, so the index
changes no answer, only what is read (as SQLite's job_search: core/store/_sqlite_search.py).

The plan is fixed, not left to statistics: the planner's guess for a trigram match on an id block
chose a walk of the primary key filtering every row (16 s in a trial at 1.4 M).

The text is written after the job's commit (migration 0024): the insert's transaction only adds its
jobs' ids to job_search_pending (one row per INSERT statement), and each node's indexer moves pending
rows into job_search, FILL_SLICE ids a transaction (fill_pending). Written in the insert's transaction,
the GIN entries cost a 10,000-row INSERT 357-481 ms against 137-224 ms without, a third of a bulk
submit. A search checks the pending jobs one by one beside the index's candidates: it reads the
pending rows first, then the index, each statement its own snapshot, so a job the indexer moves in
between is seen in the index, and none is missed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import asyncpg

from core.store.listing import search_pattern

if TYPE_CHECKING:
    from core.store._pg_writer import Conn

BLOCK_BITS = 14  # 16,384 ids a block: migration 0023's index expression (job_id >> 14)
# Bitmap scans only: an index scan of job_search_pkey filtering each row is the plan the planner's
# estimates chose; no JIT (the estimate of a scan of every block passes jit_above_cost).
PLAN = "SET LOCAL enable_indexscan = off; SET LOCAL enable_seqscan = off; SET LOCAL jit = off"
_TRIGRAM = re.compile(r"[A-Za-z0-9]{3}")


def indexed(text: str) -> bool:
    """Whether the index can find a search's candidates: pg_trgm takes trigrams from runs of letters
    and digits, and a text without one (under 3 such characters in a row) would read all of it."""
    return _TRIGRAM.search(text) is not None


BODY = "name || E'\\n' || task::text || E'\\n' || tags::text"  # a job's text in job_search (migration 0023)
FILL_SLICE = 5_000  # job ids the indexer moves from pending into job_search per transaction (a pending row at least)
PENDING = "SELECT unnest(ids) FROM job_search_pending"


def candidates(pattern_arg: str) -> str:
    """The ids job_search says may match, and the pending ones (SQL for an IN, one snapshot for both):
    the whole index at once (a count)."""
    return f"SELECT job_id FROM job_search WHERE body ILIKE {pattern_arg} ESCAPE '\\' UNION ALL {PENDING}"


async def fill_pending(c: Conn) -> int:
    """Move the oldest pending rows that no other node is moving, up to FILL_SLICE ids (one row at
    least, whatever its size), into job_search, in one transaction; how many ids they held. A job
    deleted meanwhile is left out (its text goes with it); one indexed already is left as it is."""
    async with c.transaction():
        rows = await c.fetch("SELECT id, ids FROM job_search_pending ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED")
        taken: list[int] = []
        ids: list[int] = []
        for r in rows:
            if taken and len(ids) + len(r[1]) > FILL_SLICE:
                break
            taken.append(r[0])
            ids += r[1]
        if not taken:
            return 0
        await c.execute(f"INSERT INTO job_search (job_id, body) SELECT id, {BODY} FROM jobs WHERE id = ANY($1::bigint[]) "
                        "ORDER BY id ON CONFLICT (job_id) DO NOTHING", ids)  # fmt: skip
        await c.execute("DELETE FROM job_search_pending WHERE id = ANY($1::bigint[])", taken)
        return len(ids)


async def index_all(c: Conn) -> None:
    """Index every pending job at once (a store filled in SQL, outside the store: benches, tests). The
    pending rows are taken first (an indexer's are waited for, then gone), so no job is written by two.
    In id order, as the indexer writes them: the hash of the ids' IN scattered the rows over the table
    (correlation 0.49 with job_id), and a block's index scan then walked the trigrams' entries of every
    row beside its own: 2.4 ms a block without a match instead of 0.15 (a search page 48 ms instead of 4
    at 600,000 jobs; 438 ms p95 at 1.4 M in the scale bench)."""
    await c.execute(f"WITH gone AS (DELETE FROM job_search_pending RETURNING ids) INSERT INTO job_search (job_id, body) "
                    f"SELECT id, {BODY} FROM jobs WHERE id IN (SELECT unnest(ids) FROM gone) ORDER BY id "
                    "ON CONFLICT (job_id) DO NOTHING")  # fmt: skip


async def search_rows(
    c: Conn,
    select: str,
    where: list[str],
    params: list[Any],
    arg: Callable[[Any], str],
    text: str,
    descending: bool,
    after: int | None,
    limit: int,
) -> list[asyncpg.Record]:
    """A page in id order of a search (`where`/`params` hold the whole filter, search_sql included):
    the pending jobs checked one by one, then the candidates of each id block in turn, newest first
    (oldest first when not `descending`), each one's job looked up and checked, until `limit` jobs."""
    cmp, direction, step = ("<", "DESC", -1) if descending else (">", "ASC", 1)
    after_arg = arg(after) if after is not None else ""  # one parameter: both statements read it
    job_cursor = [f"jobs.id {cmp} {after_arg}"] if after is not None else []
    # By the primary key whatever the statistics: the pending ids as one array (an InitPlan), id = ANY(it)
    checks = [f"jobs.id = ANY(ARRAY({PENDING}))", *where, *job_cursor]
    pending = f"{select} WHERE {' AND '.join(checks)} ORDER BY jobs.id {direction} LIMIT {limit:d}"
    fresh = list(await c.fetch(pending, *params))  # first: a job moved from pending meanwhile is in the index
    newest = await c.fetchval("SELECT max(job_id) FROM job_search")
    if newest is None:
        return fresh
    first, last = (newest, 0) if descending else (0, newest)
    if after is not None:
        first = max(0, min(newest, after + step))
    # "+ 0": the cursor must not be an index condition, or the planner may walk job_search_pkey over
    # every id below the cursor (157 ms at 125,000) instead of the trigram index block by block
    cursor = f" AND s.job_id + 0 {cmp} {after_arg}" if after is not None else ""
    blocks = f"generate_series({arg(first >> BLOCK_BITS)}::bigint, {arg(last >> BLOCK_BITS)}::bigint, {step})"
    pattern = arg(search_pattern(text))
    terms = " AND ".join(["jobs.id = s.job_id", *where])
    query = (
        f"SELECT j.* FROM {blocks} AS b(n) CROSS JOIN LATERAL ("
        f"SELECT x.* FROM (SELECT s.job_id FROM job_search s WHERE (s.job_id >> {BLOCK_BITS}) = b.n "
        f"AND s.body ILIKE {pattern} ESCAPE '\\'{cursor} ORDER BY s.job_id {direction} OFFSET 0) AS s "
        f"CROSS JOIN LATERAL ({select} WHERE {terms}) AS x LIMIT {limit:d}) AS j LIMIT {limit:d}"
    )
    async with c.transaction():
        await c.execute(PLAN)
        indexed = list(await c.fetch(query, *params))
    rows = {r[0]: r for r in [*fresh, *indexed]}
    return [rows[i] for i in sorted(rows, reverse=descending)[:limit]]
