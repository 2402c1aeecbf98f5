"""The PostgreSQL store's SQL: column lists and types, the hot queries, rows to model objects.

Bulk writes pass one array per column and `unnest` them in a single statement: one round
trip for any number of rows, which is what makes group commit pay on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
from asyncpg import Record

from core.model import Job, labels_from_text, labels_text
from core.schedule import ACTIVE_STATES, Schedule, SchedulePolicy

JOB_TYPES: dict[str, str] = {
    "id": "bigint", "name": "text", "queue": "text", "state": "text", "priority": "integer",
    "sort_key": "float8", "run_at": "float8", "created_at": "float8", "updated_at": "float8",
    "attempt": "integer", "max_attempts": "integer", "backoff_base": "float8", "backoff_cap": "float8",
    "timeout": "float8", "task": "json", "tags": "json", "idempotency_key": "text", "schedule_id": "bigint",
    "fire_time": "float8", "agent": "text", "lease_expires_at": "float8", "cancel_requested": "boolean",
    "paused_from": "text", "last_error": "text", "started_at": "float8", "finished_at": "float8",
    "result": "json", "spec_max_attempts": "integer", "labels": "text", "traceparent": "text",
    "concurrency_key": "text", "fairness_key": "text", "workflow_id": "bigint", "ref": "text",
    "on_parent_failure": "text", "deps_left": "integer", "dep_failed": "bigint", "unique_key": "text",
    "unique_until": "float8", "unique_held": "boolean", "ended_by_parent": "bigint",
}  # fmt: skip
JOB_COLUMNS = list(JOB_TYPES)  # the order of Job's fields
ATTEMPT_TYPES: dict[str, str] = {
    "job_id": "bigint", "attempt": "integer", "agent": "text", "claimed_at": "float8", "started_at": "float8",
    "finished_at": "float8", "outcome": "text", "error": "text", "exit_code": "integer", "output": "text",
    "result": "json",
}  # fmt: skip
ATTEMPT_COLUMNS = ("attempt", "agent", "claimed_at", "started_at", "finished_at", "outcome", "error", "exit_code",
                   "output", "result")  # fmt: skip
SCHEDULE_COLUMNS = (
    "id", "name", "kind", "cron", "interval", "at", "timezone", "anchor", "job", "paused", "next_fire_at",
    "last_fire_at", "created_at", "updated_at", "fired", "policy", "failures", "paused_reason", "skipped", "missed",
    "last_skipped_at",
)  # fmt: skip
_JSON_FIELDS = frozenset({"task", "tags", "result"})


def _q(column: str) -> str:
    return '"interval"' if column == "interval" else column


SELECT_JOB = f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs"
SELECT_SCHEDULE = f"SELECT {', '.join(map(_q, SCHEDULE_COLUMNS))} FROM schedules"

# ON CONFLICT DO NOTHING with no target skips a row that collides with any unique key: an
# idempotency key or a (schedule_id, fire_time) that another node committed first. The
# caller learns which rows went in from RETURNING. The job's queue and tags are written by
# the same statement (one round trip).
_NEW_QUEUES = (
    "INSERT INTO queues (name, created_at, updated_at) SELECT DISTINCT x, {now}, {now} FROM unnest({names}) AS x"
)
_NEW_TAGS = (
    "t AS (INSERT INTO job_tags (tag, job_id) SELECT x, j.id FROM j, json_array_elements_text(j.tags) AS x "
    "ON CONFLICT DO NOTHING) SELECT id FROM j"
)
_N = len(JOB_TYPES)
INSERT_JOBS = (  # $1..$N: one array per column, ids included; $N+1: now
    f"WITH q AS ({_NEW_QUEUES.format(now=f'${_N + 1}::float8', names='$3::text[]')} ON CONFLICT DO NOTHING), "
    f"j AS (INSERT INTO jobs ({', '.join(JOB_TYPES)}) "
    f"SELECT * FROM unnest({', '.join(f'${i}::{t}[]' for i, t in enumerate(JOB_TYPES.values(), 1))}) "
    f"ON CONFLICT DO NOTHING RETURNING id, tags), {_NEW_TAGS}"
)
INSERT_ONE_JOB = (  # $1..$N-1: the columns but id (the identity default gives it); $N: now
    f"WITH q AS (INSERT INTO queues (name, created_at, updated_at) VALUES ($2, ${_N}, ${_N}) ON CONFLICT DO NOTHING), "
    f"j AS (INSERT INTO jobs ({', '.join(list(JOB_TYPES)[1:])}) VALUES ({', '.join(f'${i}' for i in range(1, _N))}) "
    f"ON CONFLICT DO NOTHING RETURNING id, tags), {_NEW_TAGS}"
)
INSERT_TAGS = "INSERT INTO job_tags (tag, job_id) SELECT * FROM unnest($1::text[], $2::bigint[]) ON CONFLICT DO NOTHING"
INSERT_QUEUES = _NEW_QUEUES.format(now="$2::float8", names="$1::text[]") + " ON CONFLICT DO NOTHING"
COPY_FROM = 100  # rows from which COPY beats one multi-row INSERT (measured: 10,000 jobs 90 vs 180 ms)
EVENT_COLUMNS = ["seq", "ts", "type", "job_id", "queue", "body"]
# Takes the next n sequence numbers (locking the counter row to commit) and returns the first.
NEXT_SEQS = "UPDATE event_seq SET last = last + $1 WHERE id = 1 RETURNING last - $1 + 1, pg_current_xact_id()::text"
# The same and the insert in one statement: each body is '{"seq":N,' + its tail (see PgTx.write_events).
WRITE_EVENTS = (
    "WITH c AS (UPDATE event_seq SET last = last + $1 WHERE id = 1 "
    "RETURNING last - $1 AS base, pg_current_xact_id()::text AS xid), "
    "i AS (INSERT INTO events (seq, ts, type, job_id, queue, body) "
    "SELECT c.base + e.n, $2, e.type, e.job_id, e.queue, '{\"seq\":' || (c.base + e.n) || ',' || e.tail "
    "FROM c, unnest($3::text[], $4::bigint[], $5::text[], $6::text[]) WITH ORDINALITY AS e(type, job_id, queue, tail, n)) "
    "SELECT base + 1, xid FROM c"
)


def insert_attempts(first: int = 1) -> str:
    """New attempt rows (a claim), parameters from `$first`. A claim re-uses the attempt number of
    a run that was handed back unstarted: that row is replaced."""
    arrays = ", ".join(f"${i}::{t}[]" for i, t in enumerate(("bigint", "integer", "text", "float8", "text"), first))
    return (
        f"INSERT INTO attempts (job_id, attempt, agent, claimed_at, outcome) SELECT * FROM unnest({arrays}) "
        "ON CONFLICT (job_id, attempt) DO UPDATE SET agent = excluded.agent, claimed_at = excluded.claimed_at, "
        "outcome = excluded.outcome, started_at = NULL, finished_at = NULL, error = NULL, exit_code = NULL, "
        "output = NULL, result = NULL"
    )


NEXT_JOB_IDS = "SELECT nextval($1::regclass) FROM generate_series(1, $2)"

# Claims. Walks jobs_claim (or jobs_claim_queue) in (sort_key, id) order, skipping rows that
# another node's claim holds: two claimers never wait for each other nor take the same job.
# $1: the agent's labels as 'k=v' strings; a job needing labels goes only to an agent with all.
# Paused and limited queues (as committed now) are left to the per-queue claims below.
# $4: now. A schedule's run written ahead is queued with its fire time as run_at: claimable from then on
# (only schedule runs are compared: a node whose clock lags another's still takes a job submitted there at once).
_CLAIMABLE = (
    "state = 'queued' AND (fire_time IS NULL OR run_at <= $4) "
    "AND (labels = '' OR string_to_array(labels, ',') <@ $1::text[])"
)
# Held queues are those whose claims must count first (core.flow.QueueLimits.held).
_HELD = "paused OR concurrency IS NOT NULL OR rate_limit IS NOT NULL OR key_concurrency IS NOT NULL OR fair"
_NOT_HELD = f"queue NOT IN (SELECT name FROM queues WHERE {_HELD})"
CLAIM_ANY = (
    f"{SELECT_JOB} WHERE {_CLAIMABLE} AND queue <> ALL($2::text[]) AND {_NOT_HELD} "
    "ORDER BY sort_key, id LIMIT $3 FOR UPDATE SKIP LOCKED"
)
CLAIM_IN = (
    f"{SELECT_JOB} WHERE {_CLAIMABLE} AND queue = ANY($2::text[]) AND {_NOT_HELD} "
    "ORDER BY sort_key, id LIMIT $3 FOR UPDATE SKIP LOCKED"
)
# One queue's walk. `queue = ANY(array of one)` and its ORDER BY queue, sort_key, id ask for an order only
# jobs_claim_queue gives (with `queue = $2` the queue drops out of the order and jobs_claim gives it too:
# with stale statistics the planner took that and read every queued job of every queue for an empty one).
CLAIM_QUEUE = (
    f"{SELECT_JOB} WHERE {_CLAIMABLE} AND queue = ANY($2::text[]) ORDER BY queue, sort_key, id LIMIT $3 "
    "FOR UPDATE SKIP LOCKED"
)
# Statistics go stale: a table loaded after the last ANALYZE (autovacuum has not run yet) made the
# planner believe few jobs were queued, so it read them all through jobs_state and sorted them (150-500
# ms a claim, the drain at a tenth). The claims and the promoter run with sorting priced out, so the
# one index that gives their order (the only sort-free plan) wins whatever the statistics say.
# Pricing sorting out also prices any plan with a sort past jit_above_cost: a fair claim's statements
# were JIT-compiled on every claim (250-300 ms of compiling for a 2 ms statement, the drain at a quarter).
# A claim is a few index probes: JIT is off while sorting is.
INDEX_ORDER_ONLY = "SET LOCAL enable_sort = off; SET LOCAL jit = off"
INDEX_ORDER_ONLY_END = "SET LOCAL enable_sort TO DEFAULT; SET LOCAL jit TO DEFAULT"
INDEX_SCAN_ONLY = "SET LOCAL enable_seqscan = off"  # the event prune's batches (see PostgresStore.prune_events)
INDEX_SCAN_ONLY_END = "SET LOCAL enable_seqscan TO DEFAULT"
# Which of these queues have a job queued (its first in jobs_claim_queue's order, as CLAIM_QUEUE reads it):
# a claim locks and counts only those of its limited queues (an empty one has nothing to take).
_QUEUED_IN = (
    "(SELECT q FROM unnest($1::text[]) AS q WHERE (SELECT id FROM jobs WHERE state = 'queued' "
    "AND queue = ANY(ARRAY[q]) ORDER BY queue, sort_key, id LIMIT 1) IS NOT NULL) s"
)
WAITING_QUEUES = f"SELECT q FROM {_QUEUED_IN}"
LIMITED_QUEUES = (
    "SELECT name FROM queues WHERE concurrency IS NOT NULL OR rate_limit IS NOT NULL OR key_concurrency IS NOT NULL "
    "OR fair"
)
# A per-queue advisory lock, held to the commit of the claim's transaction that counts (its own, or its
# reservation's: core/store/_pg_flow.py), makes count-then-take atomic across nodes, so every limit holds
# cluster-wide. Taken in name order (the subquery's), so two claimers that need the same queues cannot
# deadlock. The counts run after it, in a new snapshot. TRY_WAITING: the queues with a job queued, each
# with its lock taken if it was free at once (true), or not (false: another claim holds it); a try waits
# for nothing, so its order does not matter.
TRY_WAITING = f"SELECT q, pg_try_advisory_xact_lock(7242, hashtext(q)) FROM {_QUEUED_IN}"
LOCK_QUEUES = (
    "SELECT pg_advisory_xact_lock(7242, hashtext(q)) FROM (SELECT q FROM unnest($1::text[]) AS q ORDER BY q) s"
)

# Promotion: due jobs in due order; rows another node is promoting are skipped, not waited for.
PROMOTE_DUE = (
    f"{SELECT_JOB} WHERE state IN ('scheduled', 'failed') AND run_at <= $1 "
    "ORDER BY run_at LIMIT $2 FOR UPDATE SKIP LOCKED"
)
# The earliest job still waiting. After a batch that was not full, a due job still waiting is
# one another node is promoting right now: it does not count (else the promoter would spin).
NEXT_DUE = "SELECT min(run_at) FROM jobs WHERE state IN ('scheduled', 'failed') AND (run_at > $1 OR $2)"

# The reaper, in lease order: jobs_lease gives it (with stale statistics jobs_state read every running job).
EXPIRED_LEASES = (
    "SELECT id FROM jobs WHERE state = 'running' AND lease_expires_at < $1 ORDER BY lease_expires_at LIMIT $2"
)

NEXT_LEASE_EXPIRY = "SELECT min(lease_expires_at) FROM jobs WHERE state = 'running'"
LEASED_TO = "SELECT id, attempt FROM jobs WHERE state = 'running' AND agent = $1"

LOCK_JOBS = f"{SELECT_JOB} WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE"
_ACTIVE = ", ".join(f"'{s}'" for s in ACTIVE_STATES)
#: The runs of a schedule that have not ended, locked in id order (as change_jobs locks jobs).
_RUN_STATE = "CASE WHEN state = 'blocked' AND deps_left > 0 THEN 'running' ELSE state END"  # schedule_runs.py
LOCK_ACTIVE_RUNS = (
    f"SELECT id, {_RUN_STATE}, fire_time FROM jobs WHERE schedule_id = $1 AND state IN ({_ACTIVE}) ORDER BY id "
    "FOR UPDATE"
)
ACTIVE_RUNS = (
    f"SELECT id, {_RUN_STATE}, fire_time FROM jobs WHERE schedule_id = $1 AND state IN ({_ACTIVE}) ORDER BY id"
)
#: A firing pass: the unfinished runs of many schedules, locked in id order; then their rows.
LOCK_ACTIVE_RUNS_OF = (
    f"SELECT schedule_id, id, {_RUN_STATE}, fire_time FROM jobs WHERE schedule_id = ANY($1::bigint[]) "
    f"AND state IN ({_ACTIVE}) ORDER BY id FOR UPDATE"
)
LOCK_FIRING_STATE = (
    "SELECT id, next_fire_at, paused, updated_at FROM schedules WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE"
)
FIRE_TIMES_TAKEN = (
    "SELECT j.schedule_id, j.fire_time FROM unnest($1::bigint[], $2::float8[]) AS w(sid, ft) "
    "JOIN jobs j ON j.schedule_id = w.sid AND j.fire_time = w.ft"
)
#: A schedule's runs written ahead that no claim can have taken yet (schedule_runs.WRITTEN_AHEAD_SQL), locked.
LOCK_WRITTEN_AHEAD = (
    f"{SELECT_JOB} WHERE schedule_id = $1 AND state = 'queued' AND run_at > $2 AND fire_time IS NOT NULL "
    "ORDER BY id FOR UPDATE"
)
FORGET_WRITTEN_AHEAD = (
    "UPDATE schedules SET fired = greatest(0, fired - $2), last_fire_at = (SELECT max(fire_time) FROM jobs "
    "WHERE schedule_id = $1 AND fire_time IS NOT NULL) WHERE id = $1"
)
FIRED_UPDATE = (  # values: core.store.schedule_runs.fire_update
    "UPDATE schedules SET next_fire_at = $1, last_fire_at = greatest(last_fire_at, $2), fired = fired + $3, "
    "skipped = skipped + $4, missed = missed + $5, last_skipped_at = coalesce($6, last_skipped_at) WHERE id = $7"
)
#: A buffered run to release: taken only if no other transaction holds it (no lock waits, no deadlock).
LOCK_JOB_NOWAIT = f"{SELECT_JOB} WHERE id = $1 AND state = 'blocked' FOR UPDATE SKIP LOCKED"
EXTEND_LEASES = (
    "UPDATE jobs AS j SET lease_expires_at = $1 FROM unnest($2::bigint[], $3::integer[]) AS v(id, attempt) "
    "WHERE j.id = v.id AND j.attempt = v.attempt AND j.agent = $4 AND j.state = 'running' "
    "RETURNING j.id, j.attempt"
)


def update_many(
    table: str, keys: Sequence[str], columns: Sequence[str], types: Mapping[str, str], first: int = 1
) -> str:
    """One UPDATE for many rows: `SET col = v.col ... FROM unnest(arrays) AS v WHERE keys match`,
    parameters from `$first`."""
    names = [*keys, *columns]
    arrays = ", ".join(f"${i}::{types[c]}[]" for i, c in enumerate(names, first))
    sets = ", ".join(f"{_q(c)} = v.{_q(c)}" for c in columns)
    match = " AND ".join(f"t.{k} = v.{k}" for k in keys)
    return f"UPDATE {table} AS t SET {sets} FROM unnest({arrays}) AS v({', '.join(map(_q, names))}) WHERE {match}"


def columns_of(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    """Rows to one list per column (the arrays `unnest` zips back together)."""
    return [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


def db_value(name: str, value: Any) -> Any:
    """A Job field as its column takes it."""
    if name == "labels":
        return labels_text(value)
    if name in _JSON_FIELDS:
        return None if value is None and name == "result" else orjson.dumps(value).decode()
    return value


def job_row(j: Job) -> tuple[Any, ...]:
    """A job as an INSERT row, in JOB_COLUMNS order (spelled out: this is on the bulk-submit hot path)."""
    dumps = orjson.dumps
    return (
        j.id, j.name, j.queue, j.state, j.priority, j.sort_key, j.run_at, j.created_at, j.updated_at, j.attempt,
        j.max_attempts, j.backoff_base, j.backoff_cap, j.timeout, dumps(j.task).decode(), dumps(j.tags).decode(),
        j.idempotency_key, j.schedule_id, j.fire_time, j.agent, j.lease_expires_at, j.cancel_requested,
        j.paused_from, j.last_error, j.started_at, j.finished_at,
        None if j.result is None else dumps(j.result).decode(), j.spec_max_attempts, labels_text(j.labels),
        j.traceparent, j.concurrency_key, j.fairness_key,
        j.workflow_id, j.ref, j.on_parent_failure, j.deps_left, j.dep_failed, j.unique_key, j.unique_until,
        j.unique_held, j.ended_by_parent,
    )  # fmt: skip


def loads(v: Any) -> Any:
    """A JSON column's value (asyncpg hands json over as text)."""
    return None if v is None else orjson.loads(v)


def to_job(row: Record) -> Job:
    """A row of SELECT_JOB as a Job."""
    r = list(row)
    r[14] = orjson.loads(r[14])
    r[15] = orjson.loads(r[15])
    r[26] = loads(r[26])
    r[28] = labels_from_text(r[28])
    return Job(*r)


def to_jobs(rows: Iterable[Record]) -> list[Job]:
    """Rows of SELECT_JOB as Jobs."""
    return [to_job(r) for r in rows]


def to_schedule(row: Record) -> Schedule:
    """A row of SELECT_SCHEDULE as a Schedule."""
    r = list(row)
    r[8] = orjson.loads(r[8])
    r[15] = SchedulePolicy.from_dict(orjson.loads(r[15]))
    return Schedule(*r)


def schedule_row(s: Schedule) -> tuple[Any, ...]:
    """Every column of a schedule but its id, in SCHEDULE_COLUMNS order."""

    def value(c: str) -> Any:
        if c in ("job", "policy"):
            return orjson.dumps(s.job if c == "job" else s.policy.to_dict()).decode()
        return getattr(s, c)

    return tuple(value(c) for c in SCHEDULE_COLUMNS[1:])


INSERT_SCHEDULE = (
    f"INSERT INTO schedules ({', '.join(map(_q, SCHEDULE_COLUMNS[1:]))}) "
    f"VALUES ({', '.join(f'${i}' for i in range(1, len(SCHEDULE_COLUMNS)))}) RETURNING id"
)


def update_schedule_sql(columns: Sequence[str]) -> str:
    """UPDATE of these schedule columns ($1.. in order), the id last."""
    sets = ", ".join(f"{_q(c)} = ${i}" for i, c in enumerate(columns, 1))
    return f"UPDATE schedules SET {sets} WHERE id = ${len(columns) + 1}"


#: A schedule's buffered runs (blocked by its overlap policy, not by dependencies), locked in id order.
LOCK_BUFFERED_RUNS = (
    f"{SELECT_JOB} WHERE schedule_id = $1 AND state = 'blocked' AND deps_left = 0 ORDER BY id FOR UPDATE"
)
#: The schedules that have buffered runs (the sweep looks at each).
BUFFERED_SCHEDULES = (
    "SELECT DISTINCT schedule_id FROM jobs WHERE state = 'blocked' AND deps_left = 0 AND schedule_id IS NOT NULL"
)
