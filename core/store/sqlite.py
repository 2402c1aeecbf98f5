"""The embedded store: one SQLite file in WAL mode, one writer thread, readers on a small pool."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import logging
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path
from typing import Any, TypeVar

import orjson

from core.errors import JobDeckError, NotFound, Unavailable
from core.flow import UNLIMITED, Bucket, Candidate, KeyedClaim, QueueLimits, Rotation, merge_keys
from core.model import (
    Job,
    Policy,
    decide_cancel,
    decide_claim,
    decide_promote,
    decide_start_buffered,
    job_summary,
    labels_from_text,
    labels_text,
    utcnow,
)
from core.schedule import FirePlan, Run, Schedule, SchedulePolicy, run_to_release, schedule_to_dict
from core.store import _sqlite_deps as deps_sql
from core.store import _sqlite_search as search_index
from core.store import audit
from core.store import pickup as pickup_sql
from core.store._sqlite_flow import pick_rows, record, turns
from core.store._sqlite_writer import OnCommit, Trace, Tx, Writer, connect, insert_values, update_from_values
from core.store.archive import SQLiteArchive
from core.store.audit import AuditFilter
from core.store.base import (
    COUNT_BUDGET_MS,
    COUNT_SAMPLE,
    ESTIMATED_FROM,
    FINISHED_EVENTS,
    PRUNE_BATCH,
    PRUNE_PAUSE,
    QUEUE_SETTING_COLUMNS,
    SEARCH_ESTIMATED_FROM,
    ClaimRequest,
    Decide,
    Event,
    EventFilter,
    JobChanges,
    JobFilter,
    apply_decisions,
    counted_by_counters,
    queue_db_value,
    queue_event,
    queue_settings_view,
    queue_view,
    refuse_held_keys,
    split_by_idempotency,
    stats_view,
    unique_keys,
)
from core.store.breakers import SQLiteBreakers
from core.store.deps import refuse_known_keys, run_sync, settle
from core.store.key_usage import SQLiteKeyUsage
from core.store.listing import JobOrder, order_sql, search_sql, searched_id
from core.store.notifications import SQLiteNotifications
from core.store.relay_cursors import SQLiteRelayCursors
from core.store.schedule_runs import (
    ACTIVE_SQL,
    RUN_STATE_SQL,
    WRITTEN_AHEAD_SQL,
    BackfillResult,
    FireResult,
    Firing,
    MakeJob,
    after_runs_ended,
    backfill_bound,
    decide_firing,
    deleted_reason,
    emit_backfill_event,
    emit_fire_events,
    ended_runs,
    fire_update,
    jobs_to_make,
    may_write_ahead,
    needs_active_runs,
    still_due,
    with_reason,
    withdrawn_reason,
)
from core.store.slo import SQLiteSLO
from core.workflow import (
    RUN_END_REF,
    WORKFLOW_ACTIONS,
    Deps,
    Workflow,
    check_workflow_action,
    decide_workflow_job,
    edges_of,
    is_buffered_run,
    plan_dependencies,
    run_started,
    workflow_run,
    workflow_summary,
)

T = TypeVar("T")

JOB_COLUMNS = (
    "id", "name", "queue", "state", "priority", "sort_key", "run_at", "created_at", "updated_at", "attempt",
    "max_attempts", "backoff_base", "backoff_cap", "timeout", "task", "tags", "idempotency_key", "schedule_id",
    "fire_time", "agent", "lease_expires_at", "cancel_requested", "paused_from", "last_error", "started_at",
    "finished_at", "result", "spec_max_attempts", "labels", "traceparent", "concurrency_key", "fairness_key",
    "workflow_id", "ref", "on_parent_failure", "deps_left", "dep_failed", "unique_key", "unique_until", "unique_held",
    "ended_by_parent",
)  # fmt: skip
_SELECT_JOB = f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs"
_INSERT_JOB = f"INSERT INTO jobs ({', '.join(JOB_COLUMNS)}) VALUES ({', '.join('?' * len(JOB_COLUMNS))})"
_JSON_FIELDS = frozenset({"task", "tags", "result"})
SCHEDULE_COLUMNS = (
    "id", "name", "kind", "cron", "interval", "at", "timezone", "anchor", "job", "paused", "next_fire_at",
    "last_fire_at", "created_at", "updated_at", "fired", "policy", "failures", "paused_reason", "skipped", "missed",
    "last_skipped_at",
)  # fmt: skip
_SELECT_SCHEDULE = f"SELECT {', '.join(SCHEDULE_COLUMNS)} FROM schedules"
_CHUNK = 500
_ACTIVE_RUNS = (f"SELECT id, {RUN_STATE_SQL}, fire_time FROM jobs WHERE schedule_id = ? AND state IN ({ACTIVE_SQL}) "
                "ORDER BY id")  # fmt: skip
# A schedule's buffered runs (blocked by its overlap policy, not by dependencies), and the schedules
# that have any (the safety-net sweep looks at each).
_BUFFERED_RUNS = "SELECT id FROM jobs WHERE schedule_id = ? AND state = 'blocked' AND deps_left = 0 ORDER BY id"
_BUFFERED_SCHEDULES = (
    "SELECT DISTINCT schedule_id FROM jobs WHERE state = 'blocked' AND deps_left = 0 AND schedule_id IS NOT NULL"
)
# A firing pass reads these for many schedules at once ({} is the list of ids).
_FIRING_STATE = "SELECT id, next_fire_at, paused, updated_at FROM schedules WHERE id IN ({})"
_ACTIVE_RUNS_OF = (
    f"SELECT schedule_id, id, {RUN_STATE_SQL}, fire_time FROM jobs "
    f"WHERE schedule_id IN ({{}}) AND state IN ({ACTIVE_SQL}) ORDER BY id"
)
_FIRED_UPDATE = (  # values: core.store.schedule_runs.fire_update
    "UPDATE schedules SET next_fire_at = ?1, last_fire_at = max(coalesce(last_fire_at, ?2), ?2), "
    "fired = fired + ?3, skipped = skipped + ?4, missed = missed + ?5, "
    "last_skipped_at = coalesce(?6, last_skipped_at) WHERE id = ?7"
)


# The hot queries name their partial index: without statistics SQLite's planner prefers jobs_state
# (state, id) for `state = ...` and then sorts or reads every row in that state (all 150,000 scheduled
# jobs once a second for the promoter; every queued job in a temp b-tree for a claim). INDEXED BY
# fails loudly if the index could not serve the query (tests/store/test_plans.py reads the plans).
CLAIM_QUEUE = (
    f"{_SELECT_JOB} INDEXED BY jobs_claim_queue WHERE state = 'queued' AND queue = ? AND (fire_time IS NULL OR run_at <= ?) "
    "AND (labels = '' OR jobdeck_labels_ok(labels, ?)) ORDER BY sort_key, id LIMIT ?"
)
# Every queue, with its rate bucket (a claim walks each takeable one; core/flow.py spends the bucket).
CLAIM_QUEUES = (
    "SELECT name, rate_limit, rate_burst, rate_tokens, rate_at, key_concurrency, fairness_weights, fair, fair_vtime, "
    "held_at FROM queues"
)
PROMOTE_DUE = (
    "SELECT id FROM jobs INDEXED BY jobs_due WHERE state IN ('scheduled', 'failed') AND run_at <= ? "
    "ORDER BY run_at LIMIT ?"
)
NEXT_DUE = "SELECT min(run_at) FROM jobs INDEXED BY jobs_due WHERE state IN ('scheduled', 'failed')"
EXPIRED_LEASES = "SELECT id FROM jobs INDEXED BY jobs_lease WHERE state = 'running' AND lease_expires_at < ? LIMIT ?"
NEXT_LEASE_EXPIRY = "SELECT min(lease_expires_at) FROM jobs INDEXED BY jobs_lease WHERE state = 'running'"
LEASED_TO = "SELECT id, attempt FROM jobs INDEXED BY jobs_lease WHERE state = 'running' AND agent = ?"

# Jobs per (queue, state), from the counters the triggers of migration 0010 keep (not a count of every job).
JOB_COUNTS = "SELECT queue, state, n FROM job_counts WHERE n <> 0"

INSERT_AUDIT = f"INSERT INTO audit_log ({', '.join(audit.COLUMNS)}) VALUES ({', '.join('?' * len(audit.COLUMNS))})"


def _loads(v: Any) -> Any:
    return None if v is None else orjson.loads(v)


log = logging.getLogger("jobdeck.store")
SEARCH_INDEX_POLL = 1.0  # seconds between looks for jobs the search index does not hold yet
WALK_FROM = 2000  # matches from which a sorted page walks the sort's index instead of sorting them


def _adder(params: list[Any]) -> Callable[[Any], str]:
    """A function that adds a query parameter and returns its placeholder."""

    def add(value: Any) -> str:
        params.append(value)
        return "?"

    return add


def _counter_terms(flt: JobFilter) -> tuple[list[str], list[Any]]:
    """job_counts' WHERE terms for a filter of states and a queue."""
    terms: list[str] = []
    params: list[Any] = []
    if flt.states:
        terms.append(f"state IN ({', '.join('?' * len(flt.states))})")
        params += list(flt.states)
    if flt.queue is not None:
        terms.append("queue = ?")
        params.append(flt.queue)
    return terms, params


def _estimate_count(c: sqlite3.Connection, flt: JobFilter) -> int:
    """The matching share of COUNT_SAMPLE jobs at random ids (old and new alike: the newest alone
    may be a backlog of one kind; every id of a store that holds no more), times every job (the
    counters' sum). A tag is a probe of job_tags per sampled job, never a list of every job with it."""
    # min() and max() alone each read one end of the rowid b-tree (wrapped in coalesce, they scan)
    low = c.execute("SELECT min(id) FROM jobs").fetchone()[0] or 0
    high = c.execute("SELECT max(id) FROM jobs").fetchone()[0] or 0
    span = int(high) - int(low) + 1
    if span <= COUNT_SAMPLE:
        ids = f"WITH RECURSIVE s(i) AS (SELECT {int(low)} UNION ALL SELECT i + 1 FROM s WHERE i < {int(high)})"
    else:
        pick = f"{int(low)} + abs(random() % {span})"
        ids = (f"WITH RECURSIVE s(n, i) AS (SELECT 1, {pick} UNION ALL SELECT n + 1, {pick} FROM s "
               f"WHERE n < {COUNT_SAMPLE})")  # fmt: skip
    where, params = _job_where(flt, by_order=True)
    # CROSS JOIN: the sampled ids drive (SQLite would otherwise scan jobs and look each up in s)
    sample = f"{ids} SELECT count(*), coalesce(sum({' AND '.join(where)}), 0) FROM s CROSS JOIN jobs ON jobs.id = s.i"
    seen, matched = c.execute(sample, params).fetchone()
    total = c.execute("SELECT coalesce(sum(n), 0) FROM job_counts").fetchone()[0]
    return round(total * matched / seen) if seen else 0


def _job_where(flt: JobFilter, *, by_order: bool = False, tag: bool = True) -> tuple[list[str], list[Any]]:
    """The WHERE terms and parameters of a job filter (a listing and its count share them).

    `by_order`: write the indexed terms as `+column`, which SQLite cannot look up in an index, so it
    walks the sort's index and filters as it goes: far quicker than sorting 50,000 matches for a
    page of 100 when many rows match (SQLite's planner does not weigh the LIMIT); the tag is then a
    probe of job_tags per row, not a list of every job with the tag built first. `tag=False`: leave
    the tag out (the query reads job_tags itself, see _tag_driven)."""
    where: list[str] = []
    params: list[Any] = []
    plus = "+" if by_order else ""
    if flt.states:
        where.append(f"{plus}state IN ({', '.join('?' * len(flt.states))})")
        params += list(flt.states)
    if flt.queue is not None:
        where.append(f"{plus}queue = ?")
        params.append(flt.queue)
    if flt.name_prefix:
        where.append(f"{plus}name >= ? AND {plus}name < ?")
        params += [flt.name_prefix, flt.name_prefix + "\U0010ffff"]
    if flt.tag is not None and tag:
        if by_order:
            where.append("EXISTS (SELECT 1 FROM job_tags WHERE tag = ? AND job_id = jobs.id)")
        else:
            where.append("id IN (SELECT job_id FROM job_tags WHERE tag = ?)")
        params.append(flt.tag)
    if flt.created_after is not None:
        where.append("created_at >= ?")
        params.append(flt.created_after)
    if flt.created_before is not None:
        where.append("created_at < ?")
        params.append(flt.created_before)
    if flt.schedule_id is not None:
        where.append("schedule_id = ?")
        params.append(flt.schedule_id)
    if flt.queue_patterns:
        where.append("(" + " OR ".join("queue GLOB ?" for _ in flt.queue_patterns) + ")")
        params += list(flt.queue_patterns)
    if flt.search:
        where.append(search_sql(flt.search, _adder(params), like="LIKE", task="task", tags="tags"))
    return where, params


# A tag's jobs in id order straight from job_tags' key (tag, job_id): a page of a tag that 700,000 jobs
# carry reads about a page of job_tags, whatever else the filter asks (CROSS JOIN keeps job_tags outside).
_TAG_JOIN = "job_tags CROSS JOIN jobs ON jobs.id = job_tags.job_id"


def _tag_driven(select: str, flt: JobFilter, order: JobOrder, limit: int) -> tuple[str, list[Any]]:
    """A list in id order with a tag filter, walking job_tags' key for that tag."""
    assert flt.tag is not None and order.by_id
    where, params = _job_where(flt, by_order=True, tag=False)
    where.insert(0, "job_tags.tag = ?")
    params.insert(0, flt.tag)
    if order.after is not None:
        where.append(f"job_tags.job_id {'<' if order.descending else '>'} ?")
        params.append(order.after[1])
    source = select.replace(" FROM jobs", f" FROM {_TAG_JOIN}")
    sql = f"{source} WHERE {' AND '.join(where)} ORDER BY job_tags.job_id {'DESC' if order.descending else 'ASC'}"
    return sql + " LIMIT ?", [*params, limit]


def _index_gives_order(flt: JobFilter, order: JobOrder) -> bool:
    """True when one index both finds the matches and gives them in id order: (state, id), (queue, id)."""
    indexed = [
        len(flt.states) == 1,
        flt.queue is not None,
        bool(flt.name_prefix),
        flt.tag is not None,
        len(flt.states) > 1,
    ]
    return order.by_id and sum(indexed) == 1 and (indexed[0] or indexed[1])


def _job(row: Sequence[Any]) -> Job:
    r = list(row)
    r[14] = orjson.loads(r[14])
    r[15] = orjson.loads(r[15])
    r[21] = bool(r[21])
    r[26] = _loads(r[26])
    r[28] = labels_from_text(r[28])
    r[39] = bool(r[39])  # unique_held
    return Job(*r)


def _db_value(name: str, value: Any) -> Any:
    if name == "labels":
        return labels_text(value)
    if name in _JSON_FIELDS:
        return None if value is None and name == "result" else orjson.dumps(value).decode()
    if isinstance(value, bool):
        return int(value)
    return value


def _unique_holders(tx: Tx, keys: Sequence[str]) -> dict[str, Job]:
    """The jobs holding these unique keys, after letting go of the keys whose window passed."""
    held: dict[str, Job] = {}
    for chunk in _chunks(keys):
        marks = ", ".join("?" * len(chunk))
        tx.conn.execute(f"UPDATE jobs SET unique_held = 0 WHERE unique_key IN ({marks}) AND unique_held = 1 "
                        "AND unique_until <= ?", (*chunk, tx.now))  # fmt: skip
        q = f"{_SELECT_JOB} WHERE unique_key IN ({marks}) AND unique_held = 1"
        held.update({j.unique_key: j for j in map(_job, tx.conn.execute(q, tuple(chunk))) if j.unique_key})
    return held


def _job_row(j: Job) -> tuple[Any, ...]:
    """A job as an INSERT row, in JOB_COLUMNS order (spelled out: this is on the bulk-submit hot path)."""
    dumps = orjson.dumps
    return (
        j.id, j.name, j.queue, j.state, j.priority, j.sort_key, j.run_at, j.created_at, j.updated_at, j.attempt,
        j.max_attempts, j.backoff_base, j.backoff_cap, j.timeout, dumps(j.task).decode(), dumps(j.tags).decode(),
        j.idempotency_key, j.schedule_id, j.fire_time, j.agent, j.lease_expires_at, int(j.cancel_requested),
        j.paused_from, j.last_error, j.started_at, j.finished_at,
        None if j.result is None else dumps(j.result).decode(), j.spec_max_attempts, labels_text(j.labels),
        j.traceparent, j.concurrency_key, j.fairness_key,
        j.workflow_id, j.ref, j.on_parent_failure, j.deps_left, j.dep_failed, j.unique_key, j.unique_until,
        int(j.unique_held), j.ended_by_parent,
    )  # fmt: skip


def _schedule(row: Sequence[Any]) -> Schedule:
    r = list(row)
    r[8] = orjson.loads(r[8])
    r[9] = bool(r[9])
    r[15] = SchedulePolicy.from_dict(orjson.loads(r[15]))
    return Schedule(*r)


def _sqlite_value(v: Any) -> Any:
    return int(v) if isinstance(v, bool) else v


def _runs_at(c: sqlite3.Connection, schedule_id: int, fire_times: Sequence[float]) -> dict[float, tuple[int, str]]:
    out: dict[float, tuple[int, str]] = {}
    for chunk in _chunks(fire_times):
        q = f"SELECT fire_time, id, state FROM jobs WHERE schedule_id = ? AND fire_time IN ({', '.join('?' * len(chunk))})"
        out.update({r[0]: (r[1], r[2]) for r in c.execute(q, (schedule_id, *chunk))})
    return out


def _in_chunks(c: sqlite3.Connection, sql: str, ids: Sequence[int]) -> list[Any]:
    """The rows of `sql` (with `{}` for a list of ids) for every id, a chunk of ids per statement."""
    out: list[Any] = []
    for chunk in _chunks(ids):
        out.extend(c.execute(sql.format(", ".join("?" * len(chunk))), tuple(chunk)))
    return out


def _fire_times_taken(c: sqlite3.Connection, pairs: Sequence[tuple[int, float]]) -> set[tuple[int, float]]:
    """Which (schedule_id, fire_time) pairs have a job already (a backfill or another pass made it)."""
    out: set[tuple[int, float]] = set()
    for chunk in _chunks(pairs):
        values = ", ".join("(?, ?)" for _ in chunk)
        q = (f"WITH want(sid, ft) AS (VALUES {values}) SELECT want.sid, want.ft FROM want "
             "JOIN jobs ON jobs.schedule_id = want.sid AND jobs.fire_time = want.ft")  # fmt: skip
        out.update((int(r[0]), float(r[1])) for r in c.execute(q, [v for p in chunk for v in p]))
    return out


def _chunks(items: Sequence[T], size: int = _CHUNK) -> Iterable[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class _Applier(JobChanges[Tx]):
    """Job changes written in few statements: one per set of columns and values that many jobs share (a
    claim gives every job the same lease: one UPDATE of its 500 jobs, not an executemany of 500, each
    row of which is a statement of its own with the count trigger's statement journal), else an
    executemany per set of columns."""

    key_first = False

    def db_value(self, name: str, value: Any) -> Any:
        return _db_value(name, value)

    def flush(self) -> None:
        c = self.tx.conn
        for keys, rows in self.updates.items():
            sets = ", ".join(k + " = ?" for k in keys)
            if len(rows) == 1 or len({r[-1] for r in rows}) < len(rows):
                c.executemany(f"UPDATE jobs SET {sets} WHERE id = ?", rows)  # a job twice: its last change wins
                continue
            alike: dict[tuple[Any, ...], list[int]] = {}  # the same values -> the jobs that get them
            for row in rows:
                alike.setdefault(row[:-1], []).append(row[-1])
            if len(alike) == len(rows):  # each job its own values (results): one statement, not one a job
                update_from_values(c, "jobs", keys, ("id",), rows)
                continue
            for same, ids in alike.items():
                c.execute(f"UPDATE jobs SET {sets} WHERE id IN (SELECT value FROM json_each(?))",
                          (*same, orjson.dumps(ids).decode()))  # fmt: skip
        if self.attempt_inserts:
            insert_values(c, "INSERT OR REPLACE INTO attempts (job_id, attempt, agent, claimed_at, outcome)",
                          self.attempt_inserts)  # fmt: skip
        for keys, rows in self.attempt_updates.items():
            if len({r[-2:] for r in rows}) < len(rows):
                sets = ", ".join(k + " = ?" for k in keys)
                c.executemany(f"UPDATE attempts SET {sets} WHERE job_id = ? AND attempt = ?", rows)
            else:
                update_from_values(c, "attempts", keys, ("job_id", "attempt"), rows)
        self.clear()


def _load_jobs(conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, Job]:
    out: dict[int, Job] = {}
    for chunk in _chunks(ids):
        q = f"{_SELECT_JOB} WHERE id IN ({', '.join('?' * len(chunk))})"
        for row in conn.execute(q, tuple(chunk)):
            out[row[0]] = _job(row)
    return out


_COUNT_JOBS = ("INSERT INTO job_counts (queue, state, n) VALUES (?, ?, ?) "
               "ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n")  # fmt: skip


def insert_job_rows(conn: sqlite3.Connection, jobs: Sequence[Job]) -> None:
    """The one INSERT of jobs (with their ids): it counts them in job_counts and indexes for search
    those below job_search_upto (a restore), the work of the insert triggers that migration 0023 dropped."""
    conn.executemany(_INSERT_JOB, [_job_row(j) for j in jobs])
    conn.executemany(_COUNT_JOBS, [(*k, n) for k, n in Counter((j.queue, j.state) for j in jobs).items()])
    search_index.index_restored(conn, [j.id for j in jobs])


def recount_jobs(conn: sqlite3.Connection) -> None:
    """job_counts from the jobs themselves, for a store filled in SQL outside the store (benches, tests)."""
    conn.execute("DELETE FROM job_counts")
    conn.execute(
        "INSERT INTO job_counts (queue, state, n) SELECT queue, state, count(*) FROM jobs GROUP BY queue, state"
    )


def _insert_jobs(tx: Tx, jobs: Sequence[Job]) -> None:
    for job in jobs:
        job.id = tx.new_job_id()
    insert_job_rows(tx.conn, jobs)
    tags = [(t, j.id) for j in jobs for t in j.tags]
    if tags:
        tx.conn.executemany("INSERT OR IGNORE INTO job_tags (tag, job_id) VALUES (?, ?)", tags)
    queues = {j.queue for j in jobs}
    tx.conn.executemany(
        "INSERT OR IGNORE INTO queues (name, created_at, updated_at) VALUES (?, ?, ?)",
        [(q, tx.now, tx.now) for q in queues],
    )
    for j in jobs:
        tx.emit("job.created", j.id, j.queue, {"job": job_summary(j)})
    fair = sorted({j.queue for j in jobs if j.fairness_key is not None})
    if fair:  # a job with a fairness key makes its queue rotate between keys (once: then it is fair)
        cols = ", ".join(QUEUE_SETTING_COLUMNS)
        for q in fair:
            if tx.conn.execute("UPDATE queues SET fair = 1 WHERE name = ? AND fair = 0", (q,)).rowcount:
                row = tx.conn.execute(f"SELECT {cols} FROM queues WHERE name = ?", (q,)).fetchone()
                tx.emit("queue.updated", None, q, {"queue": queue_settings_view(q, row)})


MERGE_NAMES = 200  # distinct names in a prefix up to which a page merges one walk of jobs_name per name
_NEXT_NAMES = (  # the distinct names in [lo, hi), one index seek each (a skip scan SQLite does not do itself)
    "WITH RECURSIVE d(name) AS (SELECT (SELECT min(name) FROM jobs WHERE name >= ? AND name < ?) "
    "UNION ALL SELECT (SELECT min(name) FROM jobs WHERE name > d.name AND name < ?) FROM d WHERE d.name IS NOT NULL) "
    "SELECT name FROM d WHERE name IS NOT NULL LIMIT ?"
)


def _by_name_prefix(
    c: sqlite3.Connection, select: str, flt: JobFilter, order: JobOrder, limit: int
) -> list[Any] | None:
    """A name-prefix page in id order as a lazy merge of one (name, id) walk per name of the prefix:
    about `limit` rows read wherever the matches lie (the newest 50,000 jobs may all have other names).
    None when the prefix has more than MERGE_NAMES names (then the ids walk: such names are many and
    spread out, like job-1 ... job-5000)."""
    assert flt.name_prefix
    hi = flt.name_prefix + "\U0010ffff"
    names = [r[0] for r in c.execute(_NEXT_NAMES, (flt.name_prefix, hi, hi, MERGE_NAMES + 1))]
    if len(names) > MERGE_NAMES:
        return None
    where, params = _job_where(dataclasses.replace(flt, name_prefix=None), by_order=True)
    where.insert(0, "name = ?")
    if order.after is not None:
        where.append(f"id {'<' if order.descending else '>'} ?")
        params.append(order.after[1])
    sql = f"{select} INDEXED BY jobs_name WHERE {' AND '.join(where)} ORDER BY id {'DESC' if order.descending else 'ASC'} LIMIT ?"
    walks = [c.execute(sql, (name, *params, limit)) for name in names]
    sign = -1 if order.descending else 1
    rows = list(islice(heapq.merge(*walks, key=lambda r: sign * r[0]), limit))
    for walk in walks:
        walk.close()
    return rows


def _list_rows(c: sqlite3.Connection, select: str, flt: JobFilter, order: JobOrder, limit: int) -> list[Any]:
    """The rows of a job list page: `select` (columns FROM jobs) with the filter, order and cursor."""
    if flt.search and order.by_id and (query := search_index.match_query(flt.search)) is not None:
        where, params = _job_where(flt, by_order=True)
        after_id = None if order.after is None else int(order.after[1])
        return search_index.search_rows(
            c, select, where, params, query, order.descending, after_id, limit, lambda r: r[0], searched_id(flt.search)
        )
    if flt.tag is not None and order.by_id:
        sql, params = _tag_driven(select, flt, order, limit)
        return c.execute(sql, params).fetchall()
    if flt.name_prefix and order.by_id and (rows := _by_name_prefix(c, select, flt, order, limit)) is not None:
        return rows
    walk = False
    filtered = bool(flt.states or flt.queue is not None or flt.name_prefix or flt.tag is not None)
    if filtered and not _index_gives_order(flt, order):  # many matches: walk the order's index
        where, params = _job_where(flt, tag=False)
        source = "jobs"
        if flt.tag is not None:  # from the tag's rows, never a list of all of them built first
            source, where, params = _TAG_JOIN, ["job_tags.tag = ?", *where], [flt.tag, *params]
        count = f"SELECT count(*) FROM (SELECT 1 FROM {source} WHERE {' AND '.join(where)} LIMIT {WALK_FROM})"
        walk = c.execute(count, params).fetchone()[0] >= WALK_FROM
    where, params = _job_where(flt, by_order=walk)
    after, by = order_sql(order, _adder(params))
    if after is not None:
        where.append(after)
    sql = select + (f" WHERE {' AND '.join(where)}" if where else "") + f" ORDER BY {by} LIMIT ?"
    return c.execute(sql, [*params, limit]).fetchall()


class SQLiteStore(SQLiteRelayCursors, SQLiteArchive, SQLiteNotifications, SQLiteSLO, SQLiteBreakers, SQLiteKeyUsage):
    """The Store protocol on one SQLite file (see core/store/base.py)."""

    single_node = True  # the file is locked by one node: no other node can hold its leases
    record_pickup = True  # keep the pick-up latency history in the claims (settings.pickup_history)

    def __init__(
        self,
        path: Path,
        policy: Policy,
        on_commit: OnCommit,
        clock: Callable[[], float] = utcnow,
        trace: Trace | None = None,
    ):
        self.path = path
        self.policy = policy
        self.clock = clock
        self._trace = trace  # sees every statement the store runs (for the query-plan tests)
        self._writer = Writer(path, clock, on_commit, trace)
        self._readers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="jobdeck-sqlite-read")
        self._local = threading.local()
        self._lock_file: Any = None
        self._indexer: asyncio.Task[None] | None = None

    # -- plumbing

    def observe_commits(self, observe: Callable[[float], None]) -> None:
        """Report each transaction's duration in seconds (the node's store-commit histogram)."""
        self._writer.observe_commit = observe

    async def open(self) -> None:
        """Create or migrate the database and start the writer."""
        self._take_lock()
        await self._writer.start()
        self._indexer = asyncio.get_running_loop().create_task(self._keep_search_index(), name="jobdeck-search-index")

    async def close(self) -> None:
        """Commit what is queued and close."""
        if self._indexer is not None:
            self._indexer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._indexer
        await self._writer.stop()
        self._readers.shutdown(wait=True)
        if self._lock_file is not None:
            self._lock_file.close()

    def _take_lock(self) -> None:
        # Two server processes on one SQLite file would both think they own every lease.
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(str(self.path) + ".lock", "w")  # noqa: SIM115 - held open for the store's life
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise Unavailable(
                f"another JobDeck node is using {self.path}; stop it or use another data directory"
            ) from None
        self._lock_file = f

    async def _keep_search_index(self) -> None:
        """Index new jobs for searches, a slice a write while any is left, and merge the index's segments
        a few pages a write while any are to merge (core/store/_sqlite_search.py). It looks at the
        writer's next job id and commit count, so an idle store costs no query at all."""
        upto = -1
        merged = -1  # the writer's commit count when a merge last found nothing to do
        while True:
            try:
                if upto < 0:  # at the start: the jobs a fill or an older version left unindexed count too
                    upto, newest = await self._read(lambda c: c.execute(search_index.STATE).fetchone())
                    newest = max(newest or 0, self._writer.next_job_id - 1)
                else:
                    newest = self._writer.next_job_id - 1
                began = time.perf_counter()
                if newest > upto:
                    done, upto = await self._writer.run(lambda tx: search_index.index_slice(tx.conn))
                    if done < search_index.SLICE:
                        upto = max(upto, newest)  # ids up to it that are gone (deleted newest jobs) never come back
                    work = True
                elif self._writer.commits != merged:  # written since (a slice, a purge, a restore): merge
                    # a read first: a store whose index has one segment (nothing to merge) writes nothing
                    count = await self._read(search_index.segments)
                    work = count is None or count > 1
                    if work:
                        work = await self._writer.run(lambda tx: search_index.merge_step(tx.conn))
                    if not work:
                        merged = self._writer.commits
                else:
                    work = False
                if work:  # as long again before the next write: catching up takes at most half the writer
                    await asyncio.sleep(min(time.perf_counter() - began, SEARCH_INDEX_POLL))
                    continue
            except Unavailable:
                return
            except Exception:
                log.exception("indexing jobs for searches failed; will try again")
                upto = -1
            await asyncio.sleep(SEARCH_INDEX_POLL)

    @property
    def schema_version(self) -> int:
        return self._writer.schema_version

    def hold_writes(self) -> bool:
        """Queue writes without starting them until `release_writes` (see Writer.hold); True."""
        self._writer.hold()
        return True

    def release_writes(self) -> None:
        """Start the writes held since `hold_writes`, all in one transaction."""
        self._writer.release()

    def _write(self, op: Callable[[Tx], T]) -> asyncio.Future[T]:
        scope = audit.begin()
        if scope is None:
            return self._writer.run(op)

        def audited(tx: Tx) -> T:  # the audit row commits with the change, or neither does
            tx.audit = scope
            try:
                result = op(tx)
            finally:
                tx.audit = None
            if scope.changed:  # a write that changed nothing (every decision refused) is not an "ok" entry
                tx.conn.execute(INSERT_AUDIT, scope.row(tx.now))
            return result

        return self._writer.run(audited)

    # -- the audit log

    async def record_audit(self, row: tuple[Any, ...]) -> None:
        """Append an entry that rides on no change (a refused or failed call)."""
        with audit.not_acting():
            await self._write(lambda tx: tx.conn.execute(INSERT_AUDIT, row) and None)

    async def list_audit(self, flt: AuditFilter, before_id: int | None, limit: int) -> list[dict[str, Any]]:
        """Audit entries, newest first."""
        conds = flt.conditions(before_id)
        where = " AND ".join(f"{col} {op_} ?" for col, op_, _ in conds)
        sql = (f"SELECT id, {', '.join(audit.COLUMNS)} FROM audit_log{' WHERE ' + where if where else ''} "
               f"ORDER BY id DESC LIMIT {int(limit)}")  # fmt: skip
        args = tuple(v for _, _, v in conds)
        return await self._read(lambda c: [audit.entry_dict(tuple(r[1:]), r[0]) for r in c.execute(sql, args)])

    async def audit_after(self, after_id: int, limit: int) -> list[dict[str, Any]]:
        """Committed entries after `after_id`, oldest first (one writer: ids commit in order)."""
        sql = f"SELECT id, {', '.join(audit.COLUMNS)} FROM audit_log WHERE id > ? ORDER BY id LIMIT ?"
        return await self._read(
            lambda c: [audit.entry_dict(tuple(r[1:]), r[0]) for r in c.execute(sql, (after_id, int(limit)))]
        )

    async def prune_audit(self, before: float) -> int:
        """Drop entries older than the retention (the only deletion the log allows)."""
        return await self._write(lambda tx: tx.conn.execute("DELETE FROM audit_log WHERE at < ?", (before,)).rowcount)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._readers, self._with_reader, fn)

    def _with_reader(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self.path, readonly=True, trace=self._trace)
        return fn(conn)

    # -- jobs

    async def submit_jobs(
        self, jobs: Sequence[Job], deps: Sequence[Deps | None] | None = None, check: Callable[[Job], None] | None = None
    ) -> list[tuple[Job, bool]]:
        """Insert jobs; one whose idempotency key exists already returns the existing job instead.
        `deps[i]`: the parents of jobs[i] (core/workflow.py); `check(parent)` may refuse one."""

        def op(tx: Tx) -> list[tuple[Job, bool]]:
            keys = [j.idempotency_key for j in jobs if j.idempotency_key]
            known: dict[str, Job] = {}
            for chunk in _chunks(keys):
                q = f"{_SELECT_JOB} WHERE idempotency_key IN ({', '.join('?' * len(chunk))})"
                known.update({row[16]: _job(row) for row in tx.conn.execute(q, tuple(chunk))})
            out, new = split_by_idempotency(jobs, known, _unique_holders(tx, unique_keys(jobs)))
            self._insert_with_deps(tx, new, None if deps is None else [deps[i] for i, (_, c) in enumerate(out) if c],
                                   check)  # fmt: skip
            return out

        return await self._write(op)

    def _insert_with_deps(self, tx: Tx, new: Sequence[Job], deps: Sequence[Deps | None] | None,
                          check: Callable[[Job], None] | None) -> None:  # fmt: skip
        if deps is None or not any(deps):
            _insert_jobs(tx, new)
            return
        parents = _load_jobs(tx.conn, sorted({i for d in deps if d is not None for i in d.ids}))
        plan_dependencies(new, deps, parents, check)
        _insert_jobs(tx, new)
        deps_sql.insert_edges(tx, edges_of(new, deps))

    async def submit_workflow(self, name: str, jobs: Sequence[Job], deps: Sequence[Deps | None]) -> Workflow:
        """A workflow and its jobs (with their dependencies), all in one transaction; a unique key
        that another job holds is a Conflict naming the job."""

        keys = [j.idempotency_key for j in jobs if j.idempotency_key]

        def op(tx: Tx) -> Workflow:
            if keys:  # one writer: nothing can insert a key between this look-up and the insert
                q = f"SELECT id, idempotency_key FROM jobs WHERE idempotency_key IN ({', '.join('?' * len(keys))})"
                refuse_known_keys(tx.conn.execute(q, keys).fetchone())
            refuse_held_keys(jobs, _unique_holders(tx, unique_keys(jobs)))
            wf = deps_sql.insert_workflow(tx, name, len(jobs), sorted({j.queue for j in jobs}))
            for j in jobs:
                j.workflow_id = wf.id
            self._insert_with_deps(tx, jobs, deps, None)
            return wf

        return await self._write(op)

    async def get_workflow(self, workflow_id: int) -> tuple[Workflow, dict[str, int]]:
        """A workflow and its jobs counted by state, or NotFound."""

        def q(c: sqlite3.Connection) -> tuple[Workflow, dict[str, int]]:
            row = c.execute(f"{deps_sql.SELECT_WORKFLOW} WHERE id = ?", (workflow_id,)).fetchone()
            if row is None:
                raise NotFound(f"no workflow with id {workflow_id}", field="workflow_id")
            return deps_sql.to_workflow(row), deps_sql.counts_of(c, workflow_id)

        return await self._read(q)

    async def list_workflows(
        self, state: str | None, before_id: int | None, limit: int
    ) -> list[tuple[Workflow, dict[str, int]]]:
        """Workflows newest first, with their jobs counted by state."""
        where: list[str] = []
        params: list[Any] = []
        if state is not None:
            where.append("state = ?")
            params.append(state)
        if before_id is not None:
            where.append("id < ?")
            params.append(before_id)
        sql = (
            deps_sql.SELECT_WORKFLOW + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY id DESC LIMIT ?"
        )

        def q(c: sqlite3.Connection) -> list[tuple[Workflow, dict[str, int]]]:
            wfs = [deps_sql.to_workflow(r) for r in c.execute(sql, (*params, limit))]
            return [(wf, deps_sql.counts_of(c, wf.id)) for wf in wfs]

        return await self._read(q)

    async def workflow_graph(self, workflow_id: int) -> list[dict[str, Any]]:
        """The workflow's jobs as nodes with their parents."""
        return await self._read(lambda c: deps_sql.graph(c, workflow_id))

    async def job_edges(self, job_id: int) -> tuple[list[int], list[int]]:
        """(parent ids, child ids) of a job."""
        return await self._read(lambda c: deps_sql.job_edges(c, job_id))

    async def parent_results(self, child_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """For each job, its parents' results by ref (or id): what a task with parent_results receives."""
        return await self._read(lambda c: deps_sql.parent_results(c, child_ids))

    async def change_workflow(self, workflow_id: int, action: str, decide: Decide) -> Workflow:
        """cancel, pause or resume a workflow: its flag and `decide` on each of its jobs the action
        takes (core.workflow.WORKFLOW_ACTIONS), in one transaction; Conflict if it does not apply."""

        def op(tx: Tx) -> Workflow:
            c = tx.conn
            row = c.execute(f"{deps_sql.SELECT_WORKFLOW} WHERE id = ?", (workflow_id,)).fetchone()
            if row is None:
                raise NotFound(f"no workflow with id {workflow_id}", field="workflow_id")
            wf = deps_sql.to_workflow(row)
            check_workflow_action(wf, action)
            self._change_workflow(tx, wf, action, decide)
            return wf

        return await self._write(op)

    def _change_workflow(self, tx: Tx, wf: Workflow, action: str, decide: Decide) -> None:
        states, flag, value = WORKFLOW_ACTIONS[action]
        c = tx.conn
        setattr(wf, flag, value)
        c.execute(f"UPDATE workflows SET {flag} = ?, updated_at = ? WHERE id = ?", (int(value), tx.now, wf.id))
        tx.emit(f"workflow.{'cancel_requested' if action == 'cancel' else action + 'd'}", None, None,
                {"workflow": workflow_summary(wf)})  # fmt: skip
        q = f"SELECT id FROM jobs WHERE workflow_id = ? AND state IN ({', '.join('?' * len(states))})"
        ids = [r[0] for r in c.execute(q, (wf.id, *sorted(states)))]
        self._change(tx, dict.fromkeys(ids, decide_workflow_job(action, decide, tx.now)))

    async def get_job(self, job_id: int) -> Job:
        """One job, or NotFound."""

        def q(c: sqlite3.Connection) -> Job:
            row = c.execute(f"{_SELECT_JOB} WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise NotFound(f"no job with id {job_id}", field="id")
            return _job(row)

        return await self._read(q)

    async def list_jobs(
        self, flt: JobFilter, before_id: int | None, limit: int, order: JobOrder | None = None
    ) -> list[Job]:
        """Newest first unless `order` says otherwise; `before_id` is the id order's cursor (the
        last id of the previous page), `order.after` any order's."""
        order = order or JobOrder(after=None if before_id is None else (before_id, before_id))
        return await self._read(lambda c: [_job(r) for r in _list_rows(c, _SELECT_JOB, flt, order, limit)])

    async def list_job_ids(self, flt: JobFilter, before_id: int | None, limit: int) -> list[int]:
        """The ids of list_jobs' page (newest first), without reading the jobs: a bulk action's selection."""
        order = JobOrder(after=None if before_id is None else (before_id, before_id))
        if flt.tag is not None and flt == JobFilter(tag=flt.tag):  # the tag's key alone, no job read
            sql = "SELECT job_id FROM job_tags WHERE tag = ? AND job_id < ? ORDER BY job_id DESC LIMIT ?"
            args = (flt.tag, 2**63 - 1 if before_id is None else before_id, limit)
            return await self._read(lambda c: [r[0] for r in c.execute(sql, args)])
        return await self._read(lambda c: [r[0] for r in _list_rows(c, "SELECT id FROM jobs", flt, order, limit)])

    async def count_jobs(self, flt: JobFilter, budget_ms: int = COUNT_BUDGET_MS) -> tuple[int, bool]:
        """How many jobs match: from the counters for states and a queue (exact, a few rows), else
        a count of the index range (True) if it takes under `budget_ms`, else an estimate (False):
        the matching share of COUNT_SAMPLE jobs at random times all jobs (a search, or a tag with
        a state, reads every candidate row: 0.1-0.3 s at a million). The estimate comes first, and
        one of ESTIMATED_FROM or more is the answer without a count."""
        if counted_by_counters(flt):
            terms, params = _counter_terms(flt)
            sql = "SELECT coalesce(sum(n), 0) FROM job_counts" + (f" WHERE {' AND '.join(terms)}" if terms else "")
            return await self._read(lambda c: (int(c.execute(sql, params).fetchone()[0]), True))
        if flt.tag is not None and flt == JobFilter(tag=flt.tag):
            sql, params = "SELECT count(*) FROM job_tags WHERE tag = ?", [flt.tag]
        elif flt.search and searched_id(flt.search) is None and (query := search_index.match_query(flt.search)):
            where, params = _job_where(flt, by_order=True)  # the text index's candidates, each checked
            sql, params = search_index.search_count_sql(where, params, query)
        else:
            where, params = _job_where(flt)
            sql = "SELECT count(*) FROM jobs" + (f" WHERE {' AND '.join(where)}" if where else "")

        def q(c: sqlite3.Connection) -> tuple[int, bool]:
            # The sample first: a total it puts past ESTIMATED_FROM takes longer to count than the budget
            # anyway (630,000 of a tag, 770,000 of a name prefix: 15 ms spent for nothing before each estimate).
            bound = SEARCH_ESTIMATED_FROM if flt.search else ESTIMATED_FROM  # a search checks each candidate
            # Only for a page's total (the default budget): a caller that can wait (a bulk dry run, 1 s) counts.
            if 0 < budget_ms <= COUNT_BUDGET_MS and (estimate := _estimate_count(c, flt)) >= bound:
                return estimate, False
            deadline = time.perf_counter() + budget_ms / 1000  # the budget is the count's alone
            c.set_progress_handler(lambda: int(time.perf_counter() > deadline), 1000)
            try:
                return int(c.execute(sql, params).fetchone()[0]), True
            except sqlite3.OperationalError as exc:
                if "interrupted" not in str(exc):
                    raise
            finally:
                c.set_progress_handler(None, 1000)
            return _estimate_count(c, flt), False

        return await self._read(q)

    async def list_attempts(self, job_id: int) -> list[dict[str, Any]]:
        """The attempts of a job, oldest first, with their output."""
        cols = ("attempt", "agent", "claimed_at", "started_at", "finished_at", "outcome", "error", "exit_code",
                "output", "result")  # fmt: skip

        def q(c: sqlite3.Connection) -> list[dict[str, Any]]:
            if c.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone() is None:
                raise NotFound(f"no job with id {job_id}", field="id")
            rows = c.execute(f"SELECT {', '.join(cols)} FROM attempts WHERE job_id = ? ORDER BY attempt", (job_id,))
            return [dict(zip(cols, (*r[:-1], _loads(r[-1])), strict=True)) for r in rows]

        return await self._read(q)

    async def change_jobs(self, decisions: dict[int, Decide]) -> dict[int, Job | JobDeckError]:
        """Apply one decision per job id in one transaction; per-job errors are returned, not raised."""

        return await self._write(lambda tx: self._change(tx, decisions))

    def _change(self, tx: Tx, decisions: dict[int, Decide]) -> dict[int, Job | JobDeckError]:
        applier = _Applier(tx)
        jobs = _load_jobs(tx.conn, list(decisions))
        before = {i: j.state for i, j in jobs.items()}
        out = apply_decisions(jobs, decisions, applier.apply)
        applier.flush()
        settled = self._settle(tx, applier, [(j, before[i]) for i, j in out.items() if isinstance(j, Job)])
        changed = {j.id: j for j in [*out.values(), *settled] if isinstance(j, Job)}
        self._runs_ended(tx, ended_runs(changed.values()))
        return out

    def _settle(self, tx: Tx, applier: _Applier, moved: list[tuple[Job, str]]) -> list[Job]:
        """Dependencies: what the changed jobs' new states do to their children (core/store/deps.py)."""
        io = deps_sql.SQLiteDeps(tx, applier, _load_jobs, applier.flush)
        return run_sync(settle(io, [(j, b) for j, b in moved if j.state != b], tx.now, self.policy))

    def _runs_ended(self, tx: Tx, ended: dict[int, list[Job]]) -> None:
        """Runs of these schedules ended: count failures (pause on failure), then start each one's
        oldest buffered run if nothing else of it goes."""
        c = tx.conn
        for sid, jobs in ended.items():
            row = c.execute(f"{_SELECT_SCHEDULE} WHERE id = ?", (sid,)).fetchone()
            if row is None:
                continue
            s = _schedule(row)
            cols = after_runs_ended(tx, s, jobs, tx.now)
            if cols:
                sets = ", ".join(k + " = ?" for k in cols)
                c.execute(f"UPDATE schedules SET {sets} WHERE id = ?", (*map(_sqlite_value, cols.values()), sid))
            if cols.get("paused"):
                self._withdraw_ahead(tx, sid, "paused after failed runs")
            job_id = run_to_release([Run(*r) for r in c.execute(_ACTIVE_RUNS, (sid,))])
            if job_id is not None:
                self._start_buffered(tx, s, job_id)

    def _start_buffered(self, tx: Tx, s: Schedule, job_id: int) -> None:
        """Start a buffered run: queue its job, or make a workflow run's workflow around its end job."""
        jobs = _load_jobs(tx.conn, [job_id])
        decide: dict[int, Decide] = {job_id: self._release}
        if job_id in jobs and "workflow" in s.job and is_buffered_run(jobs[job_id]):
            end = jobs[job_id]
            name, made, deps = workflow_run(s.job, end, tx.now, self.policy)
            wf = deps_sql.insert_workflow(tx, name, len(made), sorted({j.queue for j in made}))
            for j in made[:-1]:
                j.workflow_id = wf.id
            self._insert_with_deps(tx, made[:-1], deps[:-1], None)
            deps_sql.insert_edges(tx, [(j.id, end.id) for j in made[:-1]])
            decide = {job_id: lambda j: run_started(j, wf.id, len(made) - 1, tx.now)}
        applier = _Applier(tx)
        apply_decisions(jobs, decide, applier.apply)
        applier.flush()

    def _release(self, job: Job) -> Any:
        return decide_start_buffered(job, self.clock(), self.policy)

    async def claim_jobs(self, req: ClaimRequest, now: float) -> list[Job]:
        """Take up to `req.limit` queued jobs in claim order for one agent, leasing them.

        Each takeable queue is walked in its own claim index (jobs_claim_queue: queue, sort_key, id)
        and the walks are merged lazily, so a claim reads about `limit` rows whatever the backlog:
        neither 500,000 queued jobs nor 100,000 waiting in a paused queue ahead of them make it sort
        or skip anything. A capped queue's walk stops at its room; a rate-limited queue's at the
        tokens in its bucket, which the claim then spends (exact: one writer)."""

        def op(tx: Tx) -> list[Job]:
            c = tx.conn
            labels = labels_text(req.labels)
            walks: list[Any] = []
            buckets: dict[str, tuple[QueueLimits, Bucket]] = {}
            keyed: list[KeyedClaim] = []
            held_at: dict[str, float | None] = {}
            held = set(req.held)  # queues whose limits cut this claim short (pickup.py)
            for queue, rate, burst, tokens, at, kc, weights, fair, vtime, h_at in c.execute(CLAIM_QUEUES).fetchall():
                held_at[queue] = h_at
                if queue in req.paused or (req.queues is not None and queue not in req.queues):
                    continue
                room = min(req.caps.get(queue, req.limit), req.limit)
                if rate is not None:
                    buckets[queue] = (QueueLimits(rate_limit=rate, rate_burst=burst), Bucket(tokens, at))
                    rate_room = buckets[queue][1].room(buckets[queue][0], now)
                    if rate_room < room:
                        held.add(queue)
                    room = min(room, rate_room)
                if room <= 0:
                    continue
                if kc is None and not fair:
                    walks.append(c.execute(CLAIM_QUEUE, (queue, now, labels, room)))
                    continue
                limits = QueueLimits(key_concurrency=kc, fairness_weights=_loads(weights), fair=bool(fair))
                aging = self.policy.aging_seconds_per_priority
                keyed.append(pick_rows(c, _SELECT_JOB, queue, limits, vtime, labels, room, now, aging))
            if keyed:  # picks keep their rotation's order in the merge (core.flow.merge_keys)
                plain = [((r[5], r[0]), r) for w in walks for r in w]
                plain.sort(key=lambda kr: kr[0])
                picks = [list(zip(merge_keys(k.picked), k.rows, strict=True)) for k in keyed]
                merged = heapq.merge(plain, *picks, key=lambda kr: kr[0])
                rows = [r for _, r in islice(merged, req.limit)]
            else:
                rows = list(islice(heapq.merge(*walks, key=lambda r: (r[5], r[0])), req.limit))
            for walk in walks:
                walk.close()
            applier = _Applier(tx)
            claimed = [applier.apply(j, decide_claim(j, req.agent, now, self.policy)) for j in map(_job, rows)]
            applier.flush()
            if self.record_pickup:
                pickup_sql.sqlite_record(c, claimed, held_at, held, now)
            if keyed:
                ids = {j.id for j in claimed}
                for k in keyed:
                    record(c, k, ids, now)
            if buckets:
                started = Counter(j.queue for j in claimed)
                for queue, (limits, bucket) in buckets.items():
                    after = bucket.take(limits, now, started[queue])
                    c.execute("UPDATE queues SET rate_tokens = ?, rate_at = ? WHERE name = ?",
                              (after.tokens, after.at, queue))  # fmt: skip
                    req.note_wake(after.next_token_at(limits, now))
            return claimed

        return await self._write(op)

    async def extend_leases(
        self, agent: str, job_attempts: Sequence[tuple[int, int]], until: float
    ) -> list[tuple[int, int]]:
        """Push the lease of each (job, attempt) the agent still runs to `until`; return the pairs
        that are not the agent's to run any more (stale fencing token, finished, cancelled)."""

        def op(tx: Tx) -> list[tuple[int, int]]:
            sql = (
                "UPDATE jobs SET lease_expires_at = ? WHERE id = ? AND attempt = ? AND agent = ? AND state = 'running'"
            )
            return [(j, a) for j, a in job_attempts if tx.conn.execute(sql, (until, j, a, agent)).rowcount == 0]

        return await self._write(op)

    async def promote_due_jobs(self, now: float, limit: int) -> tuple[int, float | None]:
        """Queue up to `limit` scheduled or failed jobs whose run_at has come; return how many,
        and the earliest run_at still waiting (one transaction: the promoter's timer needs both)."""

        def op(tx: Tx) -> tuple[int, float | None]:
            c = tx.conn
            ids = [r[0] for r in c.execute(PROMOTE_DUE, (now, limit))]
            applier = _Applier(tx)
            for job in _load_jobs(c, ids).values():
                applier.apply(job, decide_promote(job, now, self.policy))
            applier.flush()
            nxt = c.execute(NEXT_DUE).fetchone()[0]
            return len(ids), nxt

        return await self._write(op)

    async def expired_lease_ids(self, now: float, limit: int) -> list[int]:
        """Running jobs whose lease ran out."""
        return await self._read(lambda c: [r[0] for r in c.execute(EXPIRED_LEASES, (now, limit))])

    async def next_lease_expiry(self) -> float | None:
        """When the soonest lease of a running job runs out (None: nothing runs)."""
        return await self._read(lambda c: c.execute(NEXT_LEASE_EXPIRY).fetchone()[0])

    async def leased_attempts(self, agent: str) -> list[tuple[int, int]]:
        """(job id, attempt) of every running job leased to the agent named `agent`."""
        return await self._read(lambda c: [(r[0], r[1]) for r in c.execute(LEASED_TO, (agent,))])

    async def running_counts(self) -> dict[str, int]:
        """Running jobs per queue."""
        sql = "SELECT queue, n FROM job_counts WHERE state = 'running' AND n <> 0"
        return await self._read(lambda c: dict(c.execute(sql).fetchall()))

    # -- queues

    async def list_queues(self) -> list[dict[str, Any]]:
        """Every queue with its settings and how many jobs wait and run in it."""

        def q(c: sqlite3.Connection) -> list[dict[str, Any]]:
            counts: dict[str, dict[str, int]] = {}
            for queue, state, n in c.execute(JOB_COUNTS):
                counts.setdefault(queue, {})[state] = n
            sql = f"SELECT name, {', '.join(QUEUE_SETTING_COLUMNS)} FROM queues ORDER BY name"
            return [queue_view(r[0], r[1:], counts.get(r[0], {})) for r in c.execute(sql)]

        return await self._read(q)

    async def update_queue(self, name: str, changes: dict[str, Any], now: float) -> dict[str, Any]:
        """Change settings of a queue: pause, concurrency, rate limit (core.flow.SETTINGS). A queue no job
        named yet is created with the defaults first (limits are set before the first job comes). A new
        rate limit starts with a full bucket."""
        cols = ", ".join(QUEUE_SETTING_COLUMNS)
        select = f"SELECT {cols} FROM queues WHERE name = ?"

        def op(tx: Tx) -> dict[str, Any]:
            row = tx.conn.execute(select, (name,)).fetchone()
            if row is None:
                tx.conn.execute("INSERT INTO queues (name, created_at, updated_at) VALUES (?, ?, ?)", (name, now, now))
                row = tx.conn.execute(select, (name,)).fetchone()
            before = queue_settings_view(name, row)
            if tx.audit is not None:
                tx.audit.note_before(f"queue:{name}", {k: v for k, v in before.items() if k != "name"})
            view = {**before, **changes}
            sets = ", ".join(f"{k} = ?" for k in QUEUE_SETTING_COLUMNS)
            refill = ", rate_tokens = NULL, rate_at = NULL" if {"rate_limit", "rate_burst"} & set(changes) else ""
            tx.conn.execute(
                f"UPDATE queues SET {sets}{refill}, updated_at = ? WHERE name = ?",
                (*(_db_value(k, queue_db_value(k, view[k])) for k in QUEUE_SETTING_COLUMNS), now, name),
            )
            if before["paused"] and not view["paused"]:  # its jobs waited by policy until now (pickup.py)
                tx.conn.execute(pickup_sql.SQLITE_MARK, (now, name))
            tx.emit(queue_event(changes), None, name, {"queue": view})
            return view

        return await self._write(op)

    async def queue_settings(self) -> dict[str, QueueLimits]:
        """name -> settings, for every queue."""
        sql = f"SELECT name, {', '.join(QUEUE_SETTING_COLUMNS)} FROM queues"
        return await self._read(
            lambda c: {r[0]: QueueLimits.of(queue_settings_view(r[0], r[1:])) for r in c.execute(sql)}
        )

    async def queue_flow(self, name: str, key: str | None = None) -> tuple[QueueLimits, int, Bucket]:
        """A queue's settings, how many of its jobs run, and its rate bucket (for `waiting_for`)."""
        cols = ", ".join(QUEUE_SETTING_COLUMNS)

        def q(c: sqlite3.Connection) -> tuple[QueueLimits, int, Bucket]:
            row = c.execute(f"SELECT {cols}, rate_tokens, rate_at FROM queues WHERE name = ?", (name,)).fetchone()
            if row is None:
                return UNLIMITED, 0, Bucket(None, None)
            n = len(QUEUE_SETTING_COLUMNS)
            running = c.execute("SELECT n FROM job_counts WHERE queue = ? AND state = 'running'", (name,)).fetchone()
            return (QueueLimits.of(queue_settings_view(name, row[:n])), int(running[0]) if running else 0,
                    Bucket(row[n], row[n + 1]))  # fmt: skip

        return await self._read(q)

    async def key_running(self, name: str, keys: Sequence[str]) -> dict[str, int]:
        """How many jobs of each concurrency key run in a queue (for `waiting_for`)."""
        sql = ("SELECT concurrency_key, count(*) FROM jobs INDEXED BY jobs_running_key WHERE state = 'running' "
               f"AND concurrency_key IS NOT NULL AND queue = ? AND concurrency_key IN ({', '.join('?' * len(keys))}) "
               "GROUP BY concurrency_key")  # fmt: skip
        return await self._read(lambda c: dict(c.execute(sql, (name, *keys)).fetchall()))

    async def fair_turns(self, name: str, now: float) -> tuple[Rotation, list[Candidate], bool]:
        """A fair queue's rotation and each waiting fairness key's next job (for `waiting_for`)."""
        return await self._read(lambda c: turns(c, name, now))

    # -- schedules

    def _schedule_row(self, s: Schedule) -> tuple[Any, ...]:
        def value(c: str) -> Any:
            if c == "job":
                return orjson.dumps(s.job).decode()
            if c == "policy":
                return orjson.dumps(s.policy.to_dict()).decode()
            return _db_value(c, getattr(s, c))

        return tuple(value(c) for c in SCHEDULE_COLUMNS[1:])

    async def create_schedule(self, s: Schedule) -> Schedule:
        """Store a new schedule; its id is assigned here."""

        def op(tx: Tx) -> Schedule:
            cols = SCHEDULE_COLUMNS[1:]
            cur = tx.conn.execute(
                f"INSERT INTO schedules ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                self._schedule_row(s),
            )
            s.id = int(cur.lastrowid or 0)
            tx.emit("schedule.created", None, s.job.get("queue"), {"schedule": schedule_to_dict(s)})
            return s

        return await self._write(op)

    async def get_schedule(self, schedule_id: int) -> Schedule:
        """One schedule, or NotFound."""

        def q(c: sqlite3.Connection) -> Schedule:
            row = c.execute(f"{_SELECT_SCHEDULE} WHERE id = ?", (schedule_id,)).fetchone()
            if row is None:
                raise NotFound(f"no schedule with id {schedule_id}", field="id")
            return _schedule(row)

        return await self._read(q)

    async def list_schedules(self) -> list[Schedule]:
        """Every schedule, by id."""
        return await self._read(lambda c: [_schedule(r) for r in c.execute(f"{_SELECT_SCHEDULE} ORDER BY id")])

    async def update_schedule(self, s: Schedule, event: str, columns: Collection[str] | None = None) -> Schedule:
        """Write these `columns` of `s` (every one when None) and an event of type `event`; the
        answer and the event carry the schedule as stored (counters another transaction moved meanwhile
        included)."""
        names = [c for c in SCHEDULE_COLUMNS[1:] if columns is None or c in columns]

        def op(tx: Tx) -> Schedule:
            c = tx.conn
            values = dict(zip(SCHEDULE_COLUMNS[1:], self._schedule_row(s), strict=True))
            if names and c.execute(f"UPDATE schedules SET {', '.join(n + ' = ?' for n in names)} WHERE id = ?",
                                   (*(values[n] for n in names), s.id)).rowcount == 0:  # fmt: skip
                raise NotFound(f"no schedule with id {s.id}", field="id")
            # paused or edited (cron, zone, task, policy): its runs written ahead are not its runs any more
            self._withdraw_ahead(tx, s.id, "paused" if event == "schedule.paused" else "edited")
            row = c.execute(f"{_SELECT_SCHEDULE} WHERE id = ?", (s.id,)).fetchone()
            if row is None:
                raise NotFound(f"no schedule with id {s.id}", field="id")
            stored = _schedule(row)
            tx.emit(event, None, stored.job.get("queue"), {"schedule": schedule_to_dict(stored)})
            return stored

        return await self._write(op)

    async def delete_schedule(self, schedule_id: int) -> None:
        """Remove a schedule; the jobs it made stay, but its buffered runs (waiting for the run before
        them) are cancelled with the reason."""

        def op(tx: Tx) -> None:
            if tx.conn.execute("DELETE FROM schedules WHERE id = ?", (schedule_id,)).rowcount == 0:
                raise NotFound(f"no schedule with id {schedule_id}", field="id")
            self._withdraw_ahead(tx, schedule_id, "deleted")
            held = self._cancel_buffered(tx, schedule_id)
            tx.emit("schedule.deleted", None, None, {"schedule_id": schedule_id, "cancelled": held})

        await self._write(op)

    def _withdraw_ahead(self, tx: Tx, schedule_id: int, why: str) -> list[float]:
        """Cancel the runs the schedule wrote ahead that no claim can have taken (their run_at is still
        to come), each with the reason; their fire times are free again (fire_time cleared: the loop
        decides them anew when due) and the schedule's counters forget them. Returns those fire times."""
        c = tx.conn
        rows = c.execute(WRITTEN_AHEAD_SQL, (schedule_id, tx.now)).fetchall()
        if not rows:
            return []
        ids = [r[0] for r in rows]
        applier = _Applier(tx)
        apply_decisions(_load_jobs(c, ids), dict.fromkeys(ids, lambda j: with_reason(
            self._cancel(j), withdrawn_reason(schedule_id, why, j.fire_time))), applier.apply)  # fmt: skip
        applier.flush()
        _in_chunks(c, "UPDATE jobs SET fire_time = NULL WHERE id IN ({})", ids)
        c.execute("UPDATE schedules SET fired = max(0, fired - ?1), last_fire_at = (SELECT max(fire_time) FROM jobs "
                  "WHERE schedule_id = ?2 AND fire_time IS NOT NULL) WHERE id = ?2", (len(ids), schedule_id))  # fmt: skip
        return [float(r[1]) for r in rows]

    def _cancel_buffered(self, tx: Tx, schedule_id: int) -> list[int]:
        held = [r[0] for r in tx.conn.execute(_BUFFERED_RUNS, (schedule_id,))]
        if held:
            reason = deleted_reason(schedule_id)
            applier = _Applier(tx)
            apply_decisions(_load_jobs(tx.conn, held), dict.fromkeys(held, lambda j: with_reason(self._cancel(j), reason)),
                            applier.apply)  # fmt: skip
            applier.flush()
        return held

    async def sweep_buffered_runs(self) -> int:
        """The safety net for buffered runs: cancel those whose schedule is gone, and start a
        schedule's oldest one when nothing else of it goes (a release that did not happen).
        Returns how many runs it moved."""

        def op(tx: Tx) -> int:
            c = tx.conn
            moved = 0
            for (sid,) in c.execute(_BUFFERED_SCHEDULES).fetchall():
                row = c.execute(f"{_SELECT_SCHEDULE} WHERE id = ?", (sid,)).fetchone()
                if row is None:
                    moved += len(self._cancel_buffered(tx, sid))
                    continue
                job_id = run_to_release([Run(*r) for r in c.execute(_ACTIVE_RUNS, (sid,))])
                if job_id is not None:
                    self._start_buffered(tx, _schedule(row), job_id)
                    moved += 1
            return moved

        return await self._write(op)

    async def due_schedules(self, now: float, limit: int = 1000, after: float | None = None) -> list[Schedule]:
        """Unpaused schedules whose next fire time has come (by `now`; and is past `after`), soonest first."""
        sql = (f"{_SELECT_SCHEDULE} WHERE paused = 0 AND next_fire_at <= ? AND next_fire_at > ? "
               "ORDER BY next_fire_at, id LIMIT ?")  # fmt: skip
        low = float("-inf") if after is None else after
        return await self._read(lambda c: [_schedule(r) for r in c.execute(sql, (now, low, limit))])

    async def next_schedule_at(self, after: float | None = None) -> float | None:
        """The earliest next fire time of an unpaused schedule (past `after`)."""
        sql = "SELECT min(next_fire_at) FROM schedules WHERE paused = 0 AND next_fire_at > ?"
        low = float("-inf") if after is None else after
        return await self._read(lambda c: c.execute(sql, (low,)).fetchone()[0])

    async def fire_schedule(self, s: Schedule, plan: FirePlan | None, make_job: MakeJob) -> FireResult | None:
        """Fire the due times of `plan` under the schedule's overlap policy, each fire time at most once
        (`plan=None`: one manual run, outside the policies). None if the schedule changed since the
        plan was made (another pass fired it, it was paused or edited)."""
        if plan is not None:
            return (await self.fire_schedules([Firing(s, plan, make_job)]))[0]

        def op(tx: Tx) -> FireResult:
            c = tx.conn
            if c.execute("SELECT 1 FROM schedules WHERE id = ?", (s.id,)).fetchone() is None:
                raise NotFound(f"no schedule with id {s.id}", field="id")
            # its run written ahead was decided before this one: it is decided again when due
            if s.policy.overlap != "allow" and (withdrawn := self._withdraw_ahead(tx, s.id, "run by hand")):
                c.execute("UPDATE schedules SET next_fire_at = ? WHERE id = ? AND NOT paused", (min(withdrawn), s.id))
            job = make_job(None)
            job.schedule_id, job.fire_time = s.id, None
            self._insert_runs(tx, s, [job])
            c.execute("UPDATE schedules SET fired = fired + 1 WHERE id = ?", (s.id,))
            tx.emit("schedule.fired", job.id, job.queue, {"schedule_id": s.id, "fire_time": None})
            return FireResult([job])

        return await self._write(op)

    async def fire_schedules(self, firings: Sequence[Firing]) -> list[FireResult | None]:
        """Fire many due schedules in one transaction (see fire_schedule): a few statements for the
        lot, not a transaction per fire time. A None in the answer: that schedule changed since its
        plan was made, and nothing of it was written."""

        def op(tx: Tx) -> list[FireResult | None]:
            c = tx.conn
            state = {r[0]: r[1:] for r in _in_chunks(c, _FIRING_STATE, [f.schedule.id for f in firings])}
            live = [(i, f) for i, f in enumerate(firings) if still_due(f, state.get(f.schedule.id))]
            active: dict[int, list[Run]] = {}
            for sid, *run in _in_chunks(c, _ACTIVE_RUNS_OF, [f.schedule.id for _, f in live if needs_active_runs(f)]):
                active.setdefault(sid, []).append(Run(*run))
            live = [(i, f) for i, f in live if may_write_ahead(f, active.get(f.schedule.id, []))]
            known = _fire_times_taken(c, [(f.schedule.id, t) for _, f in live for t in f.plan.fire_times])
            fired = [(i, f, decide_firing(f, active.get(f.schedule.id, []),
                                          {t for t in f.plan.fire_times if (f.schedule.id, t) in known}))
                     for i, f in live]  # fmt: skip
            _insert_jobs(tx, [j for _, f, res in fired if "workflow" not in f.schedule.job for j in res.jobs])
            for _, f, res in fired:
                if "workflow" in f.schedule.job:
                    self._insert_runs(tx, f.schedule, res.jobs)
            cancel = [job_id for _, _, res in fired for job_id in res.decision.cancel]
            if cancel:
                self._cancel_runs(tx, cancel)
            c.executemany(_FIRED_UPDATE, [fire_update(f, res) for _, f, res in fired])
            out: list[FireResult | None] = [None] * len(firings)
            for i, f, res in fired:
                emit_fire_events(tx, f.schedule, f.plan, res.decision, res.jobs)
                out[i] = res
            return out

        return await self._write(op)

    def _cancel(self, job: Job) -> Any:
        return decide_cancel(job, self.clock(), self.policy)

    def _cancel_runs(self, tx: Tx, ids: list[int]) -> None:
        """cancel_previous: cancel these runs; a started workflow run is cancelled whole, and its end
        job ends once every job of it really stopped (then the buffered next run starts)."""
        jobs = _load_jobs(tx.conn, ids)
        flows = sorted({j.workflow_id for j in jobs.values() if j.workflow_id is not None and j.ref == RUN_END_REF})
        plain = {i: j for i, j in jobs.items() if j.workflow_id is None or j.ref != RUN_END_REF}
        applier = _Applier(tx)
        apply_decisions(plain, dict.fromkeys(plain, self._cancel), applier.apply)
        applier.flush()
        for wf_id in flows:
            row = tx.conn.execute(f"{deps_sql.SELECT_WORKFLOW} WHERE id = ?", (wf_id,)).fetchone()
            wf = deps_sql.to_workflow(row)
            if wf.state == "running" and not wf.cancel_requested:
                self._change_workflow(tx, wf, "cancel", self._cancel)

    def _insert_runs(self, tx: Tx, s: Schedule, runs: Sequence[Job]) -> None:
        """Insert a firing's runs; a workflow schedule's run is its end job with the workflow around it
        (a buffered run's end job alone: its workflow is made when it may start, `_start_buffered`)."""
        if "workflow" not in s.job:
            _insert_jobs(tx, runs)
            return
        for end in runs:
            if end.state == "blocked":
                _insert_jobs(tx, [end])
                continue
            name, jobs, deps = workflow_run(s.job, end, tx.now, self.policy)
            wf = deps_sql.insert_workflow(tx, name, len(jobs), sorted({j.queue for j in jobs}))
            for j in jobs:
                j.workflow_id = wf.id
            self._insert_with_deps(tx, jobs, deps, None)

    async def runs_at(self, schedule_id: int, fire_times: Sequence[float]) -> dict[float, tuple[int, str]]:
        """The schedule's job (id, state) at each of these fire times that has one."""
        return await self._read(lambda c: _runs_at(c, schedule_id, fire_times))

    async def backfill_schedule(self, s: Schedule, fire_times: list[float], make_job: MakeJob, overlap: str,
                                dry_run: bool = False) -> BackfillResult:  # fmt: skip
        """Make the job of each of these (past) fire times that has none yet, under `overlap`
        (buffer_all: one after another, oldest first; allow: side by side), in one transaction."""

        def op(tx: Tx) -> BackfillResult:
            c = tx.conn
            if c.execute("SELECT 1 FROM schedules WHERE id = ?", (s.id,)).fetchone() is None:
                raise NotFound(f"no schedule with id {s.id}", field="id")
            known = set(_runs_at(c, s.id, fire_times))
            out = BackfillResult(len(fire_times), len(known))
            if dry_run:
                return out
            active = [Run(*r) for r in c.execute(_ACTIVE_RUNS, (s.id,))]
            _, out.made = jobs_to_make(
                s, fire_times, active, known, make_job, overlap, backfill_bound(fire_times, active)
            )
            self._insert_runs(tx, s, out.made)
            c.execute("UPDATE schedules SET fired = fired + ? WHERE id = ?", (len(out.made), s.id))
            emit_backfill_event(tx, s, fire_times, len(known), out.made, overlap)
            return out

        return await self._write(op)

    # -- events

    async def events_since(self, seq: int, limit: int, flt: EventFilter | None = None) -> list[Event]:
        """Committed events after `seq`, in order, that pass `flt`."""

        def q(c: sqlite3.Connection) -> list[Event]:
            out: list[Event] = []
            after = seq
            where, params = "", list[Any]()  # narrow in SQL where an index helps; types are matched below
            if flt is not None and flt.job_ids:
                where = f" AND job_id IN ({', '.join('?' * len(flt.job_ids))})"
                params = list(sorted(flt.job_ids))
            elif flt is not None and flt.queues:
                where = f" AND queue IN ({', '.join('?' * len(flt.queues))})"
                params = list(sorted(flt.queues))
            while len(out) < limit:
                rows = c.execute(
                    f"SELECT seq, ts, type, job_id, queue, body FROM events WHERE seq > ?{where} ORDER BY seq LIMIT ?",
                    (after, *params, max(limit, 1000)),
                ).fetchall()
                for r in rows:
                    if flt is None or flt.matches(r[2], r[3], r[4]):
                        out.append(Event(r[0], r[1], r[2], r[3], r[4], r[5]))
                        if len(out) >= limit:
                            break
                if len(rows) < max(limit, 1000):
                    break
                after = rows[-1][0]
            return out

        return await self._read(q)

    async def last_seq(self) -> int:
        """The newest committed sequence number (0 if none)."""
        sql = "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)"
        return await self._read(lambda c: int(c.execute(sql).fetchone()[0]))

    async def oldest_seq(self) -> int:
        """The oldest sequence number still kept (0 if none)."""
        return await self._read(lambda c: int(c.execute("SELECT coalesce(min(seq), 0) FROM events").fetchone()[0]))

    async def prune_events(self, before: float) -> int:
        """Delete events older than `before`, PRUNE_BATCH at a time with a pause between (the one
        writer serves submits and claims in between; one 2.6 M-event DELETE held it for 7 s and
        grew the WAL by gigabytes). Sequence numbers are never reused."""

        def bounds(c: sqlite3.Connection) -> tuple[int, int]:
            # Read outside the writer: walking seq order to the first kept event reads every old one.
            row = c.execute("SELECT seq FROM events WHERE ts >= ? ORDER BY seq LIMIT 1", (before,)).fetchone()
            cut = row[0] if row is not None else c.execute("SELECT coalesce(max(seq), 0) + 1 FROM events").fetchone()[0]
            return int(c.execute("SELECT coalesce(min(seq), 0) FROM events").fetchone()[0]), int(cut)

        low, cut = await self._read(bounds)
        pruned = 0
        while low < cut:
            high = min(low + PRUNE_BATCH, cut)

            def delete(tx: Tx, h: int = high) -> int:
                return int(tx.conn.execute("DELETE FROM events WHERE seq < ?", (h,)).rowcount)

            pruned += await self._write(delete)
            low = high
            if low < cut:
                await asyncio.sleep(PRUNE_PAUSE)
        return pruned

    async def record_event(self, type_: str, data: dict[str, Any]) -> None:
        """Write an event that is not about one job (agents coming and going)."""
        await self._write(lambda tx: tx.emit(type_, None, None, data))

    # -- stats

    async def finished_history(self, since: float, bucket: float) -> list[tuple[str, int, int]]:
        """(event type, bucket number, count) of finished-job events since `since`, `bucket` seconds
        each: one index range of events_type_ts per type."""
        sql = "SELECT CAST(ts / ? AS INTEGER) AS b, count(*) FROM events WHERE type = ? AND ts >= ? GROUP BY b"

        def q(c: sqlite3.Connection) -> list[tuple[str, int, int]]:
            return [(t, int(b), int(n)) for t in FINISHED_EVENTS for b, n in c.execute(sql, (bucket, t, since))]

        return await self._read(q)

    async def pickup_history(self, since: float, bucket: float) -> list[tuple[int, int, int, int, float]]:
        """(held, interval, latency bucket, count, summed seconds) of the jobs claimed since `since`."""
        return await self._read(lambda c: pickup_sql.sqlite_history(c, since, bucket))

    async def release_expired_unique_keys(self, now: float, batch: int = PRUNE_BATCH) -> int:
        """Let go of window unique keys whose window passed (a submit of the key would anyway), `batch`
        rows per write with a pause between, as the prunes: the held-key index keeps only live keys."""
        sql = ("UPDATE jobs SET unique_held = 0 WHERE id IN (SELECT id FROM jobs WHERE unique_held = 1 "
               "AND unique_until <= ? LIMIT ?)")  # fmt: skip
        released = 0
        while True:
            n = await self._write(lambda tx: int(tx.conn.execute(sql, (now, batch)).rowcount))
            released += n
            if n < batch:
                return released
            await asyncio.sleep(PRUNE_PAUSE)

    async def prune_pickup(self, before: float) -> int:
        """Drop the pick-up history of the minutes before `before`."""
        sql = "DELETE FROM pickup_minutes WHERE minute < ?"
        return await self._write(lambda tx: int(tx.conn.execute(sql, (int(before // 60),)).rowcount))

    async def stats(self, now: float) -> dict[str, Any]:
        """Job counts by state and by queue, and finished jobs per second over the last minute."""

        def q(c: sqlite3.Connection) -> dict[str, Any]:
            by_queue: dict[str, dict[str, int]] = {}
            for queue, state, n in c.execute(JOB_COUNTS):
                by_queue.setdefault(queue, {})[state] = n
            sql = "SELECT count(*) FROM events WHERE type = ? AND ts >= ?"  # one index range per type
            last_minute = {t: c.execute(sql, (t, now - 60)).fetchone()[0] for t in FINISHED_EVENTS}
            return stats_view(by_queue, last_minute)

        return await self._read(q)
