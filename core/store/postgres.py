"""The PostgreSQL store (asyncpg): the Store protocol for several core nodes sharing one database.

Writes go through a node's few writer tasks (group commit, gap-free event numbers: see
_pg_writer.py); reads use the pool (_pg_reads.py). Claims and promotion take rows with
FOR UPDATE SKIP LOCKED, so nodes never block each other on the hot path; a schedule's
fire time is a unique key, so it makes one job however many nodes fire it. The query
plans and the design are in docs/postgres.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import asyncpg

from core.config import masked_url
from core.errors import JobDeckError, NotFound, Unavailable
from core.flow import UNLIMITED, Bucket, Candidate, QueueLimits, Rotation, merge_keys
from core.idle import IdlePoll
from core.model import Job, Policy, decide_cancel, decide_claim, decide_promote, decide_start_buffered, utcnow
from core.schedule import FirePlan, Run, Schedule, run_to_release, schedule_to_dict
from core.store import _pg_deps as deps_sql
from core.store import _pg_flow as flow_sql
from core.store import _pg_reads as reads
from core.store import _pg_search as search_index
from core.store import _pg_sql as sql
from core.store import audit
from core.store import pickup as pickup_sql
from core.store._pg_counts import FOLD_EVERY, RUNNING, fold_job_counts
from core.store._pg_statistics import CHECK_EVERY, refresh_statistics
from core.store._pg_writer import WORKERS as WRITER_TASKS
from core.store._pg_writer import OnCommit, PgTx, PgWriter, is_connection_error, migrate
from core.store._pg_writes import JobChanges, insert_jobs
from core.store.archive import PostgresArchive
from core.store.audit import AuditFilter
from core.store.base import (
    COUNT_BUDGET_MS,
    PRUNE_BATCH,
    PRUNE_PAUSE,
    QUEUE_SETTING_COLUMNS,
    ClaimRequest,
    Decide,
    Event,
    EventFilter,
    JobFilter,
    UniqueRace,
    apply_decisions,
    queue_db_value,
    queue_event,
    queue_settings_view,
    refuse_held_keys,
    split_by_idempotency,
    unique_keys,
)
from core.store.breakers import PostgresBreakers
from core.store.deps import refuse_known_keys, settle
from core.store.key_usage import PostgresKeyUsage
from core.store.listing import JobOrder
from core.store.notifications import PostgresNotifications
from core.store.relay_cursors import PostgresRelayCursors
from core.store.schedule_runs import (
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
from core.store.slo import PostgresSLO
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

if TYPE_CHECKING:
    from core.store._pg_writer import Conn

T = TypeVar("T")
log = logging.getLogger("jobdeck.store")

POOL_SIZE = 8
CONNECT_TIMEOUT = 10.0
READ_RETRY_FOR = 5.0  # seconds a read waits for the database to come back
LIMITS_FRESH_FOR = 1.0  # seconds a claim trusts the list of limited queues it read
# Seconds a node's claims of limited queues reserve first after one found a queue's lock taken (another
# node claims it too): a claim that counts in its own transaction holds the lock to its commit, and two
# nodes doing so take turns (see claim_jobs).
CONTENDED_FOR = 5.0
# A claim's reservation commits without waiting for the disk (its claim's own commit, later in the log,
# does), and with sorting priced out as in the claim (see _pg_sql.INDEX_ORDER_ONLY); one round trip.
BEGIN_RESERVE = "BEGIN; SET LOCAL synchronous_commit = off; SET LOCAL enable_sort = off; SET LOCAL jit = off"


# Every transaction that inserts an audit row holds this advisory lock (shared) from just before
# the insert to its commit; `audit_after` takes it exclusively, so it reads only once no insert is
# in flight: an identity id can commit after a larger one, and a reader by id would skip it.
AUDIT_LOCK = 0x6A6F62_6175  # "job" "au"
AUDIT_SHARED = f"SELECT pg_advisory_xact_lock_shared({AUDIT_LOCK})"
AUDIT_READ_WAIT = "200ms"  # at most this long for in-flight inserts; then the read returns nothing this round
INSERT_AUDIT = (
    f"INSERT INTO audit_log ({', '.join(audit.COLUMNS)}) "
    f"VALUES ({', '.join(f'${i + 1}' for i in range(len(audit.COLUMNS)))})"
)


class _ClaimScope(NamedTuple):
    """A claim's limited queues (those it may take, counted), the queues its unlimited part leaves alone
    (paused, capped and limited ones), and how many it would take of each limited one."""

    capped: list[str]
    skip: list[str]
    asked: dict[str, int]


def _offered(req: ClaimRequest) -> list[str]:
    """The agent's labels as 'k=v' strings (a job needing labels goes only to an agent with all)."""
    return [f"{k}={v}" for k, v in sorted(req.labels.items())]


async def _runs_at(c: Any, schedule_id: int, fire_times: Sequence[float]) -> dict[float, tuple[int, str]]:
    if not fire_times:
        return {}
    q = "SELECT fire_time, id, state FROM jobs WHERE schedule_id = $1 AND fire_time = ANY($2::float8[])"
    return {float(r[0]): (int(r[1]), r[2]) for r in await c.fetch(q, schedule_id, list(fire_times))}


class PostgresStore(
    PostgresRelayCursors, PostgresArchive, PostgresNotifications, PostgresSLO, PostgresBreakers, PostgresKeyUsage
):
    """The Store protocol on PostgreSQL (see core/store/base.py and core/store/sqlite.py)."""

    single_node = False  # other nodes may share the database and hold leases of their own
    record_pickup = True  # keep the pick-up latency history in the claims (settings.pickup_history)

    def __init__(self, url: str, policy: Policy, on_commit: OnCommit, clock: Callable[[], float] = utcnow) -> None:
        self.url = url
        self.policy = policy
        self.clock = clock
        self._on_commit = on_commit
        self._pool: asyncpg.Pool | None = None
        self._writer: PgWriter | None = None
        self._observe_commit: Callable[[float], None] | None = None
        self._maintenance: asyncio.Task[None] | None = None
        self._indexer: asyncio.Task[None] | None = None
        self._inserted = asyncio.Event()  # this node committed new jobs: their text is pending
        self._job_id_seq = "jobs_id_seq"
        self._limited: frozenset[str] = frozenset()  # queues with a concurrency limit, as last read
        self._limited_at = float("-inf")
        self._reserving = 0  # claims reserving now (release_writes waits for them to queue their claims)
        self._release_asked = False
        self._contended_until = float("-inf")  # see CONTENDED_FOR
        self._reserve_conn: Conn | None = None  # see _reserving_read
        self._closing = False
        self._node = uuid.uuid4().hex[:12]  # this store's own rows of the pick-up history
        self.schema_version = 0

    # -- plumbing

    async def open(self) -> None:
        """Connect, apply migrations (one node at a time) and start the writer."""
        where = masked_url(self.url)
        try:
            # + the connections the writer's tasks keep between their transactions (PgWriter)
            self._pool = await asyncpg.create_pool(
                self.url,
                min_size=1,
                max_size=POOL_SIZE + WRITER_TASKS,
                timeout=CONNECT_TIMEOUT,
                command_timeout=60,
            )
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError, ValueError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise Unavailable(f"cannot connect to the database at {where}: {reason}") from None
        try:
            async with self._pool.acquire() as conn:
                self.schema_version = await migrate(conn)
                self._job_id_seq = str(await conn.fetchval("SELECT pg_get_serial_sequence('jobs', 'id')"))
        except BaseException:
            await self._pool.close()
            raise
        self._writer = PgWriter(self._pool, self.clock, self._committed)
        self._writer.observe_commit = self._observe_commit
        self._writer.start()
        self._maintenance = asyncio.create_task(self._maintain(), name="jobdeck-pg-maintenance")
        self._indexer = asyncio.create_task(self._keep_search_index(), name="jobdeck-pg-search-index")

    def _committed(self, events: list[Event]) -> None:
        self._on_commit(events)
        if not self._inserted.is_set() and any(e.type == "job.created" for e in events):
            self._inserted.set()

    async def _keep_search_index(self) -> None:
        """Move the text of jobs committed since into the search index (core/store/_pg_search.py
        fill_pending), a slice a transaction while any is pending: at once when this node committed
        new jobs, and every few seconds anyway (what another node, a restore or a restart left)."""
        assert self._pool is not None
        idle = IdlePoll()
        found = True
        while True:
            try:
                async with self._pool.acquire() as conn:
                    n = await search_index.fill_pending(conn)
                    while n >= search_index.FILL_SLICE:
                        n = await search_index.fill_pending(conn)
                found = found or n > 0
            except Exception as exc:  # the database restarting, say: try again next time
                log.warning("indexing jobs for searches failed (will try again): %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._inserted.wait(), idle.after(found))
            found = self._inserted.is_set()
            self._inserted.clear()

    async def _maintain(self) -> None:
        """Fold the job counts every FOLD_EVERY seconds, look at the planner statistics every CHECK_EVERY."""
        assert self._pool is not None
        checked = time.monotonic()
        while True:
            await asyncio.sleep(FOLD_EVERY)
            try:
                await fold_job_counts(self._pool)
                if time.monotonic() - checked >= CHECK_EVERY:
                    checked = time.monotonic()
                    await refresh_statistics(self._pool)
            except Exception as exc:  # the database restarting, say: try again next time
                log.warning("store maintenance failed (will try again): %s", exc)

    def hold_writes(self) -> bool:
        """Queue writes without starting them until `release_writes` (see PgWriter.hold); True once open."""
        if self._writer is None:
            return False
        self._writer.hold()
        return True

    def release_writes(self) -> None:
        """Start the writes held since `hold_writes`, in one transaction (once a claim reserving now has
        queued its own: see claim_jobs)."""
        self._release_asked = bool(self._reserving)
        if self._writer is not None and not self._release_asked:
            self._writer.release()

    def observe_commits(self, observe: Callable[[float], None]) -> None:
        """Report each transaction's duration in seconds (the node's store-commit histogram)."""
        self._observe_commit = observe
        if self._writer is not None:
            self._writer.observe_commit = observe

    async def close(self) -> None:
        """Commit what is queued and close the pool."""
        for task in (self._maintenance, self._indexer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._maintenance = self._indexer = None
        if self._writer is not None:
            await self._writer.stop()
        self._closing = True
        if self._pool is not None:
            conn, self._reserve_conn = self._reserve_conn, None
            if conn is not None:
                with contextlib.suppress(Exception):
                    await self._pool.release(conn)
            await self._pool.close()

    async def refresh_statistics(self) -> list[str]:
        """Analyse the job tables if their planner statistics are stale (see _pg_statistics.py)."""
        if self._pool is None:
            raise Unavailable("the store is not open")
        return await refresh_statistics(self._pool)

    def _write(self, op: Callable[[PgTx], Awaitable[T]]) -> asyncio.Future[T]:
        if self._writer is None:
            raise Unavailable("the store is not open")
        scope = audit.begin()
        if scope is None:
            return self._writer.run(op)

        async def audited(tx: PgTx) -> T:  # the audit row commits with the change, or neither does
            tx.audit = scope
            try:
                result = await op(tx)
            finally:
                tx.audit = None
            if scope.changed:  # a write that changed nothing (every decision refused) is not an "ok" entry
                await tx.conn.execute(AUDIT_SHARED)
                await tx.conn.execute(INSERT_AUDIT, *scope.row(tx.now))
            return result

        return self._writer.run(audited)

    # -- the audit log

    async def record_audit(self, row: tuple[Any, ...]) -> None:
        """Append an entry that rides on no change (a refused or failed call)."""

        async def op(tx: PgTx) -> None:
            await tx.conn.execute(AUDIT_SHARED)
            await tx.conn.execute(INSERT_AUDIT, *row)

        with audit.not_acting():
            await self._write(op)

    async def list_audit(self, flt: AuditFilter, before_id: int | None, limit: int) -> list[dict[str, Any]]:
        """Audit entries, newest first."""
        where, args = [], []
        for col, op_, value in flt.conditions(before_id):
            args.append(value)
            where.append(f"{col} {op_} ${len(args)}")
        sql = (f"SELECT id, {', '.join(audit.COLUMNS)} FROM audit_log"
               f"{' WHERE ' + ' AND '.join(where) if where else ''} ORDER BY id DESC LIMIT {int(limit)}")  # fmt: skip
        return [audit.entry_dict(tuple(r)[1:], r[0]) for r in await self._fetch(sql, *args)]

    async def audit_after(self, after_id: int, limit: int) -> list[dict[str, Any]]:
        """Committed entries after `after_id`, oldest first, none skipped: read under AUDIT_LOCK
        taken exclusively, so every id handed out so far has committed or rolled back (a busy
        moment past AUDIT_READ_WAIT gives [] and the relay reads again in its next round)."""
        sql = f"SELECT id, {', '.join(audit.COLUMNS)} FROM audit_log WHERE id > $1 ORDER BY id LIMIT $2"

        async def q(c: Conn) -> list[dict[str, Any]]:
            try:
                async with c.transaction():
                    await c.execute(f"SET LOCAL lock_timeout = '{AUDIT_READ_WAIT}'")
                    await c.execute(f"SELECT pg_advisory_xact_lock({AUDIT_LOCK})")
                    rows = await c.fetch(sql, after_id, int(limit))
            except asyncpg.LockNotAvailableError:
                return []
            return [audit.entry_dict(tuple(r)[1:], r[0]) for r in rows]

        return await self._read(q)

    async def release_expired_unique_keys(self, now: float, batch: int = PRUNE_BATCH) -> int:
        """Let go of window unique keys whose window passed (a submit of the key would anyway), `batch`
        rows per transaction with a pause between, as the prunes; a row another transaction holds is
        left for the next round (SKIP LOCKED): the held-key index keeps only live keys."""
        query = ("UPDATE jobs SET unique_held = false WHERE id IN (SELECT id FROM jobs WHERE unique_held "
                 "AND unique_until <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)")  # fmt: skip

        async def op(tx: PgTx) -> int:
            return int((await tx.conn.execute(query, now, batch)).split()[-1])

        released = 0
        while True:
            n = await self._write(op)
            released += n
            if n < batch:
                return released
            await asyncio.sleep(PRUNE_PAUSE)

    async def prune_audit(self, before: float) -> int:
        """Drop entries older than the retention (the only deletion the log allows)."""

        async def op(tx: PgTx) -> int:
            return int((await tx.conn.execute("DELETE FROM audit_log WHERE at < $1", before)).split()[-1])

        return await self._write(op)

    async def _read(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run a read on a pooled connection. While the database is away (a restart) it is tried
        again for a few seconds, then the caller gets Unavailable."""
        if self._pool is None:
            raise Unavailable("the store is not open")
        deadline = time.monotonic() + READ_RETRY_FOR
        delay = 0.05
        while True:
            try:
                async with self._pool.acquire() as conn:
                    return await fn(conn)
            except Exception as exc:
                if not is_connection_error(exc):
                    raise
                if time.monotonic() > deadline:
                    raise Unavailable(f"the database is unreachable: {exc}") from None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def _fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        return await self._read(lambda c: c.fetch(query, *args))

    async def _fetchval(self, query: str, *args: Any) -> Any:
        return await self._read(lambda c: c.fetchval(query, *args))

    # -- jobs

    async def submit_jobs(
        self, jobs: Sequence[Job], deps: Sequence[Deps | None] | None = None, check: Callable[[Job], None] | None = None
    ) -> list[tuple[Job, bool]]:
        """Insert jobs; one whose idempotency key exists already returns the existing job instead.
        `deps[i]`: the parents of jobs[i] (core/workflow.py); `check(parent)` may refuse one."""

        async def by_keys(tx: PgTx, keys: list[str]) -> dict[str, Job]:
            if not keys:
                return {}
            rows = await tx.conn.fetch(f"{sql.SELECT_JOB} WHERE idempotency_key = ANY($1::text[])", keys)
            return {j.idempotency_key: j for j in sql.to_jobs(rows) if j.idempotency_key is not None}

        async def op(tx: PgTx) -> list[tuple[Job, bool]]:
            known = await by_keys(tx, [j.idempotency_key for j in jobs if j.idempotency_key])
            out, new = split_by_idempotency(jobs, known, await _unique_holders(tx, unique_keys(jobs)))
            new_deps = None if deps is None else [deps[i] for i, (_, c) in enumerate(out) if c]
            made = {id(j) for j in await self._insert_with_deps(tx, new, new_deps, check)}
            lost = [j for j in new if id(j) not in made]
            if lost:  # another node committed the same key since we looked: answer with its job
                theirs = await by_keys(tx, [j.idempotency_key for j in lost if j.idempotency_key])
                held = await _unique_holders(tx, unique_keys(lost))
                winner = {id(j): theirs.get(j.idempotency_key or "") or held.get(j.unique_key or "") for j in lost}
                if not all(winner.values()):
                    raise UniqueRace  # ... which let go of its key already: undone, submitted again
                out = [(w, False) if (w := winner.get(id(j))) is not None else (j, c) for j, c in out]
            return out

        return await _again_after_a_race(lambda: self._write(op), jobs)

    async def submit_workflow(self, name: str, jobs: Sequence[Job], deps: Sequence[Deps | None]) -> Workflow:
        """A workflow and its jobs (with their dependencies), all in one transaction; a unique key
        that another job holds is a Conflict naming the job."""

        keys = sorted(j.idempotency_key for j in jobs if j.idempotency_key)

        async def op(tx: PgTx) -> Workflow:
            if keys:  # the lock (to commit) makes a second submit with these keys wait, then see the first's jobs
                await tx.conn.execute(deps_sql.LOCK_KEYS, keys)
                known = await tx.conn.fetchrow(deps_sql.KNOWN_KEY, keys)
                refuse_known_keys(None if known is None else tuple(known))
            refuse_held_keys(jobs, await _unique_holders(tx, unique_keys(jobs)))
            wf = await deps_sql.insert_workflow(tx, name, len(jobs), sorted({j.queue for j in jobs}))
            for j in jobs:
                j.workflow_id = wf.id
            if len(await self._insert_with_deps(tx, jobs, deps, None)) < len(jobs):
                raise UniqueRace  # a key was taken since we looked: undone, and the next look names it
            return wf

        return await _again_after_a_race(lambda: self._write(op), jobs)

    async def _insert_runs(self, tx: PgTx, s: Schedule, runs: Sequence[Job]) -> list[Job]:
        """Insert a firing's runs (those a unique key refuses are left out); a workflow schedule's run
        is its end job with the workflow around it, all of it or none."""
        if "workflow" not in s.job:
            return await insert_jobs(tx, runs, self._job_id_seq)
        for end in runs:
            if end.state == "blocked":  # buffered: its workflow is made when it may start (_start_buffered)
                if not await insert_jobs(tx, [end], self._job_id_seq):
                    raise RuntimeError(f"schedule {s.id}: a run of {end.fire_time} exists already")
                continue
            name, jobs, deps = workflow_run(s.job, end, tx.now, self.policy)
            wf = await deps_sql.insert_workflow(tx, name, len(jobs), sorted({j.queue for j in jobs}))
            for j in jobs:
                j.workflow_id = wf.id
            if len(await self._insert_with_deps(tx, jobs, deps, None)) < len(jobs):
                raise RuntimeError(f"schedule {s.id}: a run of {end.fire_time} exists already (the schedule's lock "
                                   "should have kept a second firing out): nothing of this firing is written")  # fmt: skip
        return list(runs)

    async def _insert_with_deps(self, tx: PgTx, new: Sequence[Job], deps: Sequence[Deps | None] | None,
                                check: Callable[[Job], None] | None) -> list[Job]:  # fmt: skip
        """Insert jobs and their edges. Every refusal is raised before the first write (no savepoint
        per operation: see PgTx); the parents are locked FOR SHARE, so none ends unseen meanwhile."""
        if deps is None or not any(deps):
            return await insert_jobs(tx, new, self._job_id_seq)
        ids = sorted({i for d in deps if d is not None for i in d.ids})
        parents = {j.id: j for j in sql.to_jobs(await tx.conn.fetch(deps_sql.LOCK_PARENTS, ids))} if ids else {}
        plan_dependencies(new, deps, parents, check)
        made = await insert_jobs(tx, new, self._job_id_seq)
        kept = {j.id for j in made}
        edges = [(p, c) for p, c in edges_of(new, deps) if c in kept]
        if edges:
            await deps_sql.insert_edges(tx, edges)
        return made

    async def get_workflow(self, workflow_id: int) -> tuple[Workflow, dict[str, int]]:
        """A workflow and its jobs counted by state, or NotFound."""

        async def q(c: Conn) -> tuple[Workflow, dict[str, int]]:
            row = await c.fetchrow(f"{deps_sql.SELECT_WORKFLOW} WHERE id = $1", workflow_id)
            if row is None:
                raise NotFound(f"no workflow with id {workflow_id}", field="workflow_id")
            return deps_sql.to_workflow(tuple(row)), await deps_sql.counts_of(c, workflow_id)

        return await self._read(q)

    async def list_workflows(
        self, state: str | None, before_id: int | None, limit: int
    ) -> list[tuple[Workflow, dict[str, int]]]:
        """Workflows newest first, with their jobs counted by state."""
        return await self._read(lambda c: deps_sql.list_workflows(c, state, before_id, limit))

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

        async def op(tx: PgTx) -> Workflow:
            c = tx.conn
            row = await c.fetchrow(f"{deps_sql.SELECT_WORKFLOW} WHERE id = $1 FOR UPDATE", workflow_id)
            if row is None:
                raise NotFound(f"no workflow with id {workflow_id}", field="workflow_id")
            wf = deps_sql.to_workflow(tuple(row))
            check_workflow_action(wf, action)
            await self._change_workflow(tx, wf, action, decide)
            return wf

        return await self._write(op)

    async def _change_workflow(self, tx: PgTx, wf: Workflow, action: str, decide: Decide) -> None:
        states, flag, value = WORKFLOW_ACTIONS[action]
        c = tx.conn
        setattr(wf, flag, value)
        await c.execute(f"UPDATE workflows SET {flag} = $1, updated_at = $2 WHERE id = $3", value, tx.now, wf.id)
        tx.emit(f"workflow.{'cancel_requested' if action == 'cancel' else action + 'd'}", None, None,
                {"workflow": workflow_summary(wf)})  # fmt: skip
        rows = await c.fetch("SELECT id FROM jobs WHERE workflow_id = $1 AND state = ANY($2::text[])", wf.id,
                             sorted(states))  # fmt: skip
        await self._change(tx, dict.fromkeys([r[0] for r in rows], decide_workflow_job(action, decide, tx.now)))

    async def get_job(self, job_id: int) -> Job:
        """One job, or NotFound."""
        rows = await self._fetch(f"{sql.SELECT_JOB} WHERE id = $1", job_id)
        if not rows:
            raise NotFound(f"no job with id {job_id}", field="id")
        return sql.to_job(rows[0])

    async def list_jobs(
        self, flt: JobFilter, before_id: int | None, limit: int, order: JobOrder | None = None
    ) -> list[Job]:
        """Newest first unless `order` says otherwise; `before_id` is the id order's cursor."""
        return await self._read(lambda c: reads.list_jobs(c, flt, before_id, limit, order))

    async def list_job_ids(self, flt: JobFilter, before_id: int | None, limit: int) -> list[int]:
        """The ids of list_jobs' page (newest first), without reading the jobs."""
        return await self._read(lambda c: reads.list_job_ids(c, flt, before_id, limit))

    async def count_jobs(self, flt: JobFilter, budget_ms: int = COUNT_BUDGET_MS) -> tuple[int, bool]:
        """How many jobs match: exact if counting is quick, else the planner's estimate (False)."""
        return await self._read(lambda c: reads.count_jobs(c, flt, budget_ms))

    async def list_attempts(self, job_id: int) -> list[dict[str, Any]]:
        """The attempts of a job, oldest first, with their output."""
        return await self._read(lambda c: reads.list_attempts(c, job_id))

    async def change_jobs(self, decisions: dict[int, Decide]) -> dict[int, Job | JobDeckError]:
        """Apply one decision per job id in one transaction; per-job errors are returned, not raised.

        The rows are locked (in id order, so two nodes cannot deadlock on them) before the
        decisions read them: each decision sees the job as committed, and no other node
        changes it until this transaction ends."""

        return await self._write(lambda tx: self._change(tx, decisions))

    async def _change(self, tx: PgTx, decisions: dict[int, Decide]) -> dict[int, Job | JobDeckError]:
        jobs = {j.id: j for j in sql.to_jobs(await tx.conn.fetch(sql.LOCK_JOBS, list(decisions)))}
        before = {i: j.state for i, j in jobs.items()}
        applier = JobChanges(tx)
        out = apply_decisions(jobs, decisions, applier.apply)
        await applier.flush()
        moved = [(j, before[i]) for i, j in out.items() if isinstance(j, Job) and j.state != before[i]]
        settled: list[Job] = []
        if moved:  # dependencies: what the new states do to the jobs' children (core/store/deps.py)
            settled = await settle(deps_sql.PgDeps(tx, applier), moved, tx.now, self.policy)
        changed = {j.id: j for j in [*out.values(), *settled] if isinstance(j, Job)}
        await self._runs_ended(tx, ended_runs(changed.values()))
        return out

    async def _runs_ended(self, tx: PgTx, ended: dict[int, list[Job]]) -> None:
        """Runs of these schedules ended: count failures (pause on failure), then start each one's
        oldest buffered run if nothing else of it goes. The schedule's row is locked (in id order)
        first, so a firing on another node waits for this."""
        c = tx.conn
        for sid, jobs in ended.items():
            row = await c.fetchrow(f"{sql.SELECT_SCHEDULE} WHERE id = $1 FOR UPDATE", sid)
            if row is None:
                continue
            s = sql.to_schedule(row)
            cols = after_runs_ended(tx, s, jobs, tx.now)
            if cols:
                sets = ", ".join(f"{k} = ${i}" for i, k in enumerate(cols, 2))
                await c.execute(f"UPDATE schedules SET {sets} WHERE id = $1", sid, *cols.values())
            if cols.get("paused"):
                await self._withdraw_ahead(tx, sid, "paused after failed runs")
            job_id = run_to_release([Run(*r) for r in await c.fetch(sql.ACTIVE_RUNS, sid)])
            if job_id is None:
                continue
            rows = await c.fetch(sql.LOCK_JOB_NOWAIT, job_id)  # held elsewhere: that change releases it
            await self._start_buffered(tx, s, {j.id: j for j in sql.to_jobs(rows)}, job_id)

    async def _start_buffered(self, tx: PgTx, s: Schedule, locked: dict[int, Job], job_id: int) -> None:
        """Start a buffered run (locked): queue its job, or make a workflow run's workflow around its end job."""
        decide: dict[int, Decide] = {job_id: self._release}
        end = locked.get(job_id)
        if end is not None and "workflow" in s.job and is_buffered_run(end):
            name, made, deps = workflow_run(s.job, end, tx.now, self.policy)
            wf = await deps_sql.insert_workflow(tx, name, len(made), sorted({j.queue for j in made}))
            for j in made[:-1]:
                j.workflow_id = wf.id
            await self._insert_with_deps(tx, made[:-1], deps[:-1], None)  # a scheduled workflow takes no unique key
            await deps_sql.insert_edges(tx, [(j.id, end.id) for j in made[:-1]])
            decide = {job_id: lambda j: run_started(j, wf.id, len(made) - 1, tx.now)}
        applier = JobChanges(tx)
        apply_decisions(locked, decide, applier.apply)
        await applier.flush()

    def _release(self, job: Job) -> Any:
        return decide_start_buffered(job, self.clock(), self.policy)

    def _cancel(self, job: Job) -> Any:
        return decide_cancel(job, self.clock(), self.policy)

    async def _cancel_runs(self, tx: PgTx, ids: list[int]) -> None:
        """cancel_previous: cancel these runs; a started workflow run is cancelled whole, and its end
        job ends once every job of it really stopped (then the buffered next run starts)."""
        locked = {j.id: j for j in sql.to_jobs(await tx.conn.fetch(sql.LOCK_JOBS, ids))}
        flows = sorted({j.workflow_id for j in locked.values() if j.workflow_id is not None and j.ref == RUN_END_REF})
        plain = {i: j for i, j in locked.items() if j.workflow_id is None or j.ref != RUN_END_REF}
        applier = JobChanges(tx)
        apply_decisions(plain, dict.fromkeys(plain, self._cancel), applier.apply)
        await applier.flush()
        for wf_id in flows:
            row = await tx.conn.fetchrow(f"{deps_sql.SELECT_WORKFLOW} WHERE id = $1 FOR UPDATE", wf_id)
            wf = deps_sql.to_workflow(tuple(row or ()))
            if wf.state == "running" and not wf.cancel_requested:
                await self._change_workflow(tx, wf, "cancel", self._cancel)

    async def runs_at(self, schedule_id: int, fire_times: Sequence[float]) -> dict[float, tuple[int, str]]:
        """The schedule's job (id, state) at each of these fire times that has one."""
        return await self._read(lambda c: _runs_at(c, schedule_id, fire_times))

    async def backfill_schedule(self, s: Schedule, fire_times: list[float], make_job: MakeJob, overlap: str,
                                dry_run: bool = False) -> BackfillResult:  # fmt: skip
        """Make the job of each of these (past) fire times that has none yet, under `overlap`
        (buffer_all: one after another, oldest first; allow: side by side), in one transaction
        that holds the schedule's unfinished runs and its row (as a firing does)."""

        async def op(tx: PgTx) -> BackfillResult:
            c = tx.conn
            active = [Run(*r) for r in await c.fetch(sql.LOCK_ACTIVE_RUNS, s.id)]
            if await c.fetchval("SELECT 1 FROM schedules WHERE id = $1 FOR UPDATE", s.id) is None:
                raise NotFound(f"no schedule with id {s.id}", field="id")
            known = set(await _runs_at(c, s.id, fire_times))
            out = BackfillResult(len(fire_times), len(known))
            if dry_run:
                return out
            _, jobs = jobs_to_make(s, fire_times, active, known, make_job, overlap, backfill_bound(fire_times, active))
            out.made = await self._insert_runs(tx, s, jobs)
            await c.execute("UPDATE schedules SET fired = fired + $1 WHERE id = $2", len(out.made), s.id)
            emit_backfill_event(tx, s, fire_times, len(known), out.made, overlap)
            return out

        return await self._write(op)

    async def claim_jobs(self, req: ClaimRequest, now: float) -> list[Job]:
        """Take up to `req.limit` queued jobs in claim order for one agent, leasing them.

        The queues table counts as well as the request: a queue paused through another node
        is left alone at once, and every limit holds across nodes (core/store/_pg_flow.py). A
        claim of limited queues counts them in its own transaction, under their locks, if each
        lock is free at once. If one is not (another node claims that queue now), the claim
        reserves first, in a short transaction of its own under the locks (`reserve_claim`),
        then takes what it reserved beside the other nodes' claims (`claim_reserved`); so do
        this node's claims for CONTENDED_FOR seconds after it found a lock taken. Limited
        queues this node does not know of yet (its list is at most a second old) are left
        alone too, never over-claimed."""
        # Writes the engine holds for this claim (Engine.pair_with_claim: the results that freed the
        # slots) stay held while it reads and reserves, so they still share the claim's commit.
        self._reserving += 1
        try:
            scope = await self._claim_scope(req)
            contended = bool(scope.capped) and time.monotonic() < self._contended_until
            plan = await self._reserve(req, scope, now) if contended else None
            claiming = self._queue_claim(req, now, scope, plan)
        finally:
            self._reserving -= 1
            if not self._reserving and self._release_asked:
                self.release_writes()
        if (claimed := await self._claimed(claiming, req, plan)) is not None:
            return claimed
        # A limited queue's lock was taken (the claim wrote nothing): reserve, waiting for it, then claim.
        self._contended_until = time.monotonic() + CONTENDED_FOR
        return await self.claim_reserved(req, await self._reserve(req, scope, now), now)

    async def _claim_scope(self, req: ClaimRequest) -> _ClaimScope:
        if time.monotonic() - self._limited_at > LIMITS_FRESH_FOR:
            self._limited = frozenset(r[0] for r in await self._fetch(sql.LIMITED_QUEUES))
            self._limited_at = time.monotonic()
        capped = sorted(q for q in set(req.caps) | self._limited if q not in req.paused
                        and (req.queues is None or q in req.queues))  # fmt: skip
        skip = sorted(set(req.paused) | set(req.caps) | set(capped))  # the unlimited part of the claim leaves these
        return _ClaimScope(capped, skip, {q: min(req.limit, req.caps.get(q, req.limit)) for q in capped})

    async def reserve_claim(self, req: ClaimRequest, now: float) -> flow_sql.ClaimPlan:
        """The first part of a claim through a reservation: what it may take of each limited queue,
        reserved and committed (core/store/_pg_flow.py `reserve`)."""
        return await self._reserve(req, await self._claim_scope(req), now)

    async def _reserve(self, req: ClaimRequest, scope: _ClaimScope, now: float) -> flow_sql.ClaimPlan:
        if not scope.capped:
            return flow_sql.ClaimPlan(scope.skip)
        offered, aging = _offered(req), self.policy.aging_seconds_per_priority

        async def op(c: Conn) -> flow_sql.ClaimPlan:
            # Only the limited queues with a job queued are locked and counted (one left out is in `skip`:
            # taken nothing of). Most claims of a node with limits anywhere find nothing queued in them,
            # and need no transaction.
            if not (waiting := [r[0] for r in await c.fetch(sql.WAITING_QUEUES, scope.capped)]):
                return flow_sql.ClaimPlan(scope.skip)
            for attempt in itertools.count(1):
                await c.execute(BEGIN_RESERVE)
                try:
                    plan = await flow_sql.reserve(c, waiting, scope.asked, offered, now, aging, scope.skip)
                    await c.execute("COMMIT")
                    return plan
                except BaseException as exc:
                    with contextlib.suppress(Exception):
                        await c.execute("ROLLBACK")
                    if not isinstance(exc, asyncpg.TransactionRollbackError) or attempt >= 3:
                        raise  # a deadlock with a claim (it waited on a row) is tried again
            raise AssertionError("unreachable")

        plan = await self._reserving_read(op)
        if plan.contended:
            self._contended_until = time.monotonic() + CONTENDED_FOR
        return plan

    async def _reserving_read(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run `fn`, which ends every transaction it begins, on the connection this node keeps for its
        reservations: one handed back to the pool after each claim is reset (a round trip, ~10 ms at
        load 4-8). A claim that finds it in use by another takes a pooled one."""
        if self._pool is None:
            raise Unavailable("the store is not open")
        conn, self._reserve_conn = self._reserve_conn, None
        try:
            conn = conn or await self._pool.acquire()
            result = await fn(conn)
        except BaseException as exc:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await self._pool.release(conn)
            if isinstance(exc, Exception) and is_connection_error(exc):
                return await self._read(fn)  # the database went away: tried again while it comes back
            raise
        if self._reserve_conn is None and not self._closing and not conn.is_closed():
            self._reserve_conn = conn
        else:
            await self._pool.release(conn)
        return result

    async def claim_reserved(self, req: ClaimRequest, plan: flow_sql.ClaimPlan, now: float) -> list[Job]:
        """The second part of a claim through a reservation, in the writer's transaction: the next jobs
        of the unlimited queues and what `plan` reserved of the limited ones (a reservation taken back,
        because it outlived RESERVED_FOR, is taken nothing of: its room went to other claims), each
        reservation then marked used in the same commit as its jobs start running."""
        claimed = await self._claimed(self._queue_claim(req, now, _ClaimScope([], plan.skip, {}), plan), req, plan)
        assert claimed is not None  # a claim with its plan takes no lock
        return claimed

    def _queue_claim(
        self, req: ClaimRequest, now: float, scope: _ClaimScope, plan: flow_sql.ClaimPlan | None
    ) -> asyncio.Future[tuple[list[Job], flow_sql.ClaimPlan] | None]:
        """The claim's writer op: with `plan` (reserved), what it reserved; without, it counts the limited
        queues itself under their locks if each is free at once, else gives None having written nothing."""
        offered, aging = _offered(req), self.policy.aging_seconds_per_priority

        async def op(tx: PgTx) -> tuple[list[Job], flow_sql.ClaimPlan] | None:
            c = tx.conn
            open_ = set(plan.reservations.values()) if plan is not None else set()
            if open_:  # locked: no other claim's fold takes one back while this one commits
                open_ = {r[0] for r in await c.fetch(flow_sql.LOCK_RESERVATIONS, sorted(open_))}
            rows: list[asyncpg.Record] = []
            keyed: list[tuple[tuple[float, int], asyncpg.Record]] = []
            await c.execute(sql.INDEX_ORDER_ONLY)
            try:
                p = plan or flow_sql.ClaimPlan(scope.skip)
                if plan is None and scope.capped:
                    got = await flow_sql.count_here(c, scope.capped, scope.asked, offered, now, aging, scope.skip)
                    if got is None:
                        return None
                    p = got
                if req.queues is None:
                    rows = await c.fetch(sql.CLAIM_ANY, offered, p.skip, req.limit, now)
                elif allowed := sorted(req.queues - set(p.skip)):
                    rows = await c.fetch(sql.CLAIM_IN, offered, allowed, req.limit, now)
                for q, room in p.rooms.items():
                    rid = p.reservations.get(q)
                    if room <= 0 or (rid is not None and rid not in open_):
                        continue
                    if (k := p.keyed.get(q)) is not None:  # picks keep their rotation's order (merge_keys)
                        if k.rows:  # read whole and locked by the pick, in this transaction
                            got_ = {r["id"]: r for r in k.rows}
                        else:
                            got_ = {r["id"]: r for r in await c.fetch(flow_sql.CLAIM_PICKED, [x.id for x in k.picked])}
                        keyed += [(mk, got_[x.id]) for mk, x in zip(merge_keys(k.picked), k.picked, strict=True)
                                  if x.id in got_]  # fmt: skip
                    else:
                        rows += await c.fetch(sql.CLAIM_QUEUE, offered, [q], room, now)
            finally:
                await c.execute(sql.INDEX_ORDER_ONLY_END)
            if keyed:
                ordered = [((r[5], r[0]), r) for r in rows] + keyed
                ordered.sort(key=lambda kr: kr[0])
                rows = [r for _, r in ordered]
            jobs = sql.to_jobs(rows)
            if p.rooms:
                if not keyed:
                    jobs.sort(key=lambda j: (j.sort_key, j.id))
                del jobs[req.limit :]  # the rows cut here stay locked until commit; others skip them meanwhile
            applier = JobChanges(tx)
            claimed = [applier.apply(j, decide_claim(j, req.agent, now, self.policy)) for j in jobs]
            await applier.flush()
            if self.record_pickup:
                await pickup_sql.pg_record(c, self._node, claimed, set(req.held) | p.held, now)
            if plan is None and p.rooms:  # counted here: the buckets and the rotation charged with what started
                await flow_sql.settle(c, p, claimed, now)
            if open_:  # the reservations stop counting as their jobs start running: in this commit
                started = Counter(j.queue for j in claimed)
                used = {rid: started[q] for q, rid in p.reservations.items() if rid in open_}
                await c.execute(flow_sql.USED, list(used), list(used.values()))
            return claimed, p

        return self._write(op)

    async def _claimed(
        self,
        claiming: asyncio.Future[tuple[list[Job], flow_sql.ClaimPlan] | None],
        req: ClaimRequest,
        plan: flow_sql.ClaimPlan | None,
    ) -> list[Job] | None:
        try:
            got = await claiming
        except BaseException:
            if plan is not None and plan.reservations:  # given back now, not after RESERVED_FOR (one that
                with contextlib.suppress(Exception):  # committed is used already)
                    await self._read(lambda c: c.execute(flow_sql.RELEASE, list(plan.reservations.values())))
            raise
        if got is None:
            return None
        claimed, p = got
        for wake in p.wakes:
            req.note_wake(wake)
        return claimed

    async def extend_leases(
        self, agent: str, job_attempts: Sequence[tuple[int, int]], until: float
    ) -> list[tuple[int, int]]:
        """Push the lease of each (job, attempt) the agent still runs to `until`; return the pairs
        that are not the agent's to run any more (stale fencing token, finished, cancelled)."""
        pairs = list(job_attempts)

        async def op(tx: PgTx) -> list[tuple[int, int]]:
            if not pairs:
                return []
            rows = await tx.conn.fetch(sql.EXTEND_LEASES, until, [j for j, _ in pairs], [a for _, a in pairs], agent)
            kept = {(r[0], r[1]) for r in rows}
            return [p for p in pairs if p not in kept]

        return await self._write(op)

    async def promote_due_jobs(self, now: float, limit: int) -> tuple[int, float | None]:
        """Queue up to `limit` scheduled or failed jobs whose run_at has come; return how many,
        and the earliest run_at still to come (one transaction: the promoter's timer needs both)."""

        async def op(tx: PgTx) -> tuple[int, float | None]:
            await tx.conn.execute(sql.INDEX_ORDER_ONLY)
            try:
                jobs = sql.to_jobs(await tx.conn.fetch(sql.PROMOTE_DUE, now, limit))
            finally:
                await tx.conn.execute(sql.INDEX_ORDER_ONLY_END)
            applier = JobChanges(tx)
            for job in jobs:
                applier.apply(job, decide_promote(job, now, self.policy))
            await applier.flush()
            return len(jobs), await tx.conn.fetchval(sql.NEXT_DUE, now, len(jobs) >= limit)

        return await self._write(op)

    async def expired_lease_ids(self, now: float, limit: int) -> list[int]:
        """Running jobs whose lease ran out."""

        async def q(c: Conn) -> list[int]:
            async with c.transaction():
                await c.execute(sql.INDEX_ORDER_ONLY)
                return [r[0] for r in await c.fetch(sql.EXPIRED_LEASES, now, limit)]

        return await self._read(q)

    async def next_lease_expiry(self) -> float | None:
        """When the soonest lease of a running job runs out (None: nothing runs)."""
        return await self._fetchval(sql.NEXT_LEASE_EXPIRY)  # type: ignore[no-any-return]

    async def leased_attempts(self, agent: str) -> list[tuple[int, int]]:
        """(job id, attempt) of every running job leased to the agent named `agent`."""
        rows = await self._fetch(sql.LEASED_TO, agent)
        return [(int(r[0]), int(r[1])) for r in rows]

    async def running_counts(self) -> dict[str, int]:
        """Running jobs per queue."""
        rows = await self._fetch(RUNNING)
        return {r[0]: int(r[1]) for r in rows}

    # -- queues

    async def list_queues(self) -> list[dict[str, Any]]:
        """Every queue with its settings and how many jobs wait and run in it."""
        return await self._read(reads.list_queues)

    async def update_queue(self, name: str, changes: dict[str, Any], now: float) -> dict[str, Any]:
        """Change settings of a queue: pause, concurrency, rate limit (core.flow.SETTINGS). A queue no job
        named yet is created with the defaults first (limits are set before the first job comes). A new
        rate limit starts with a full bucket."""
        cols = ", ".join(QUEUE_SETTING_COLUMNS)
        select = f"SELECT {cols} FROM queues WHERE name = $1 FOR UPDATE"

        async def op(tx: PgTx) -> dict[str, Any]:
            c = tx.conn
            row = await c.fetchrow(select, name)
            if row is None:  # a job's insert may create it meanwhile: then it is that row, locked
                row = await c.fetchrow("INSERT INTO queues (name, created_at, updated_at) VALUES ($1, $2, $2) ON "
                                       f"CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING {cols}", name, now)  # fmt: skip
                assert row is not None  # RETURNING gives the row, inserted or not
            before = queue_settings_view(name, tuple(row))
            if tx.audit is not None:
                tx.audit.note_before(f"queue:{name}", {k: v for k, v in before.items() if k != "name"})
            view = {**before, **changes}
            n = len(QUEUE_SETTING_COLUMNS)
            sets = ", ".join(f"{k} = ${i}" for i, k in enumerate(QUEUE_SETTING_COLUMNS, 1))
            refill = ", rate_tokens = NULL, rate_at = NULL" if {"rate_limit", "rate_burst"} & set(changes) else ""
            await c.execute(
                f"UPDATE queues SET {sets}{refill}, updated_at = ${n + 1} WHERE name = ${n + 2}",
                *(queue_db_value(k, view[k]) for k in QUEUE_SETTING_COLUMNS),
                now,
                name,
            )
            if before["paused"] and not view["paused"]:  # its jobs waited by policy until now (pickup.py)
                await c.execute("UPDATE queues SET held_at = $1 WHERE name = $2", now, name)
            tx.emit(queue_event(changes), None, name, {"queue": view})
            self._limited_at = float("-inf")  # the next claim reads the limits again
            return view

        return await self._write(op)

    async def queue_settings(self) -> dict[str, QueueLimits]:
        """name -> settings, for every queue."""
        rows = await self._fetch(f"SELECT name, {', '.join(QUEUE_SETTING_COLUMNS)} FROM queues")
        return {r[0]: QueueLimits.of(queue_settings_view(r[0], tuple(r[1:]))) for r in rows}

    async def queue_flow(self, name: str, key: str | None = None) -> tuple[QueueLimits, int, Bucket]:
        """A queue's settings, how many of its jobs run, and its rate bucket (for `waiting_for`)."""
        n = len(QUEUE_SETTING_COLUMNS)
        query = (
            f"SELECT {', '.join(QUEUE_SETTING_COLUMNS)}, rate_tokens, rate_at, "
            "(SELECT count(*) FROM jobs WHERE state = 'running' AND queue = $1) FROM queues WHERE name = $1"
        )
        row = await self._read(lambda c: c.fetchrow(query, name))
        if row is None:
            return UNLIMITED, 0, Bucket(None, None)
        return QueueLimits.of(queue_settings_view(name, tuple(row[:n]))), int(row[n + 2]), Bucket(row[n], row[n + 1])

    async def key_running(self, name: str, keys: Sequence[str]) -> dict[str, int]:
        """How many jobs of each concurrency key run in a queue (for `waiting_for`)."""
        rows = await self._fetch(
            "SELECT concurrency_key, count(*) FROM jobs WHERE state = 'running' AND queue = $1 "
            "AND concurrency_key = ANY($2::text[]) GROUP BY concurrency_key", name, list(keys),
        )  # fmt: skip
        return {r[0]: int(r[1]) for r in rows}

    async def fair_turns(self, name: str, now: float) -> tuple[Rotation, list[Candidate], bool]:
        """A fair queue's rotation and each waiting fairness key's next job (for `waiting_for`)."""
        return await self._read(lambda c: flow_sql.turns(c, name, now))

    # -- schedules

    async def create_schedule(self, s: Schedule) -> Schedule:
        """Store a new schedule; its id is assigned here."""

        async def op(tx: PgTx) -> Schedule:
            s.id = int(await tx.conn.fetchval(sql.INSERT_SCHEDULE, *sql.schedule_row(s)))
            tx.emit("schedule.created", None, s.job.get("queue"), {"schedule": schedule_to_dict(s)})
            return s

        return await self._write(op)

    async def get_schedule(self, schedule_id: int) -> Schedule:
        """One schedule, or NotFound."""
        rows = await self._fetch(f"{sql.SELECT_SCHEDULE} WHERE id = $1", schedule_id)
        if not rows:
            raise NotFound(f"no schedule with id {schedule_id}", field="id")
        return sql.to_schedule(rows[0])

    async def list_schedules(self) -> list[Schedule]:
        """Every schedule, by id."""
        return [sql.to_schedule(r) for r in await self._fetch(f"{sql.SELECT_SCHEDULE} ORDER BY id")]

    async def update_schedule(self, s: Schedule, event: str, columns: Collection[str] | None = None) -> Schedule:
        """Write these `columns` of `s` (every one when None) and an event of type `event`; the
        answer and the event carry the schedule as stored (counters another transaction moved meanwhile
        included)."""
        names = [c for c in sql.SCHEDULE_COLUMNS[1:] if columns is None or c in columns]

        async def op(tx: PgTx) -> Schedule:
            values = dict(zip(sql.SCHEDULE_COLUMNS[1:], sql.schedule_row(s), strict=True))
            await tx.conn.fetch(sql.LOCK_ACTIVE_RUNS, s.id)  # as a firing locks: its runs, then its row
            if names and await tx.conn.execute(sql.update_schedule_sql(names), *(values[c] for c in names),
                                               s.id) == "UPDATE 0":  # fmt: skip
                raise NotFound(f"no schedule with id {s.id}", field="id")
            # paused or edited (cron, zone, task, policy): its runs written ahead are not its runs any more
            await self._withdraw_ahead(tx, s.id, "paused" if event == "schedule.paused" else "edited")
            row = await tx.conn.fetchrow(f"{sql.SELECT_SCHEDULE} WHERE id = $1", s.id)
            if row is None:
                raise NotFound(f"no schedule with id {s.id}", field="id")
            stored = sql.to_schedule(row)
            tx.emit(event, None, stored.job.get("queue"), {"schedule": schedule_to_dict(stored)})
            return stored

        return await self._write(op)

    async def delete_schedule(self, schedule_id: int) -> None:
        """Remove a schedule; the jobs it made stay, but its buffered runs (waiting for the run before
        them) are cancelled with the reason. Locks as a firing does: its runs, then its row."""

        async def op(tx: PgTx) -> None:
            c = tx.conn
            await c.fetch(sql.LOCK_ACTIVE_RUNS, schedule_id)
            if await c.fetchval("SELECT 1 FROM schedules WHERE id = $1 FOR UPDATE", schedule_id) is None:
                raise NotFound(f"no schedule with id {schedule_id}", field="id")
            await self._withdraw_ahead(tx, schedule_id, "deleted")
            held = await self._cancel_buffered(tx, schedule_id)  # read after the row lock: a firing's are in
            await c.execute("DELETE FROM schedules WHERE id = $1", schedule_id)
            tx.emit("schedule.deleted", None, None, {"schedule_id": schedule_id, "cancelled": held})

        await self._write(op)

    async def _withdraw_ahead(self, tx: PgTx, schedule_id: int, why: str) -> list[float]:
        """Cancel the runs the schedule wrote ahead that no claim can have taken (their run_at is still
        to come), each with the reason; their fire times are free again (fire_time cleared: the loop
        decides them anew when due) and the schedule's counters forget them. Returns those fire times."""
        c = tx.conn
        locked = {j.id: j for j in sql.to_jobs(await c.fetch(sql.LOCK_WRITTEN_AHEAD, schedule_id, tx.now))}
        if not locked:
            return []
        times = [float(j.fire_time) for j in locked.values() if j.fire_time is not None]
        applier = JobChanges(tx)
        apply_decisions(locked, dict.fromkeys(locked, lambda j: with_reason(
            self._cancel(j), withdrawn_reason(schedule_id, why, j.fire_time))), applier.apply)  # fmt: skip
        await applier.flush()
        await c.execute("UPDATE jobs SET fire_time = NULL WHERE id = ANY($1::bigint[])", sorted(locked))
        await c.execute(sql.FORGET_WRITTEN_AHEAD, schedule_id, len(locked))
        return times

    async def _cancel_buffered(self, tx: PgTx, schedule_id: int) -> list[int]:
        locked = {j.id: j for j in sql.to_jobs(await tx.conn.fetch(sql.LOCK_BUFFERED_RUNS, schedule_id))}
        if locked:
            reason = deleted_reason(schedule_id)
            applier = JobChanges(tx)
            apply_decisions(
                locked, dict.fromkeys(locked, lambda j: with_reason(self._cancel(j), reason)), applier.apply
            )
            await applier.flush()
        return sorted(locked)

    async def sweep_buffered_runs(self) -> int:
        """The safety net for buffered runs: cancel those whose schedule is gone, and start a
        schedule's oldest one when nothing else of it goes (its release was skipped: another
        transaction held the run then). Returns how many runs it moved."""
        moved = 0
        for (sid,) in await self._fetch(sql.BUFFERED_SCHEDULES):

            async def op(tx: PgTx, sid: int = sid) -> int:
                c = tx.conn
                active = [Run(*r) for r in await c.fetch(sql.LOCK_ACTIVE_RUNS, sid)]
                row = await c.fetchrow(f"{sql.SELECT_SCHEDULE} WHERE id = $1 FOR UPDATE", sid)
                if row is None:
                    return len(await self._cancel_buffered(tx, sid))
                job_id = run_to_release(active)
                if job_id is None:
                    return 0
                locked = {j.id: j for j in sql.to_jobs(await c.fetch(sql.LOCK_JOBS, [job_id]))}
                await self._start_buffered(tx, sql.to_schedule(row), locked, job_id)
                return 1

            moved += await self._write(op)
        return moved

    async def due_schedules(self, now: float, limit: int = 1000, after: float | None = None) -> list[Schedule]:
        """Unpaused schedules whose next fire time has come (by `now`; and is past `after`), soonest first."""
        query = (f"{sql.SELECT_SCHEDULE} WHERE NOT paused AND next_fire_at <= $1 AND next_fire_at > $3 "
                 "ORDER BY next_fire_at, id LIMIT $2")  # fmt: skip
        low = float("-inf") if after is None else after
        return [sql.to_schedule(r) for r in await self._fetch(query, now, limit, low)]

    async def next_schedule_at(self, after: float | None = None) -> float | None:
        """The earliest next fire time of an unpaused schedule (past `after`)."""
        low = float("-inf") if after is None else after
        value = await self._fetchval("SELECT min(next_fire_at) FROM schedules WHERE NOT paused AND next_fire_at > $1",
                                     low)  # fmt: skip
        return None if value is None else float(value)

    async def fire_schedule(self, s: Schedule, plan: FirePlan | None, make_job: MakeJob) -> FireResult | None:
        """Fire the due times of `plan` under the schedule's overlap policy, each fire time at most once
        (`plan=None`: one manual run, outside the policies). None if the schedule changed since the
        plan was made (another node fired it, it was paused or edited)."""
        if plan is not None:
            return (await self.fire_schedules([Firing(s, plan, make_job)]))[0]

        async def op(tx: PgTx) -> FireResult:
            c = tx.conn
            if s.policy.overlap != "allow":
                await c.fetch(sql.LOCK_ACTIVE_RUNS, s.id)  # as a firing locks: its runs, then its row
            if await c.fetchval("SELECT 1 FROM schedules WHERE id = $1 FOR UPDATE", s.id) is None:
                raise NotFound(f"no schedule with id {s.id}", field="id")
            # its run written ahead was decided before this one: it is decided again when due
            if s.policy.overlap != "allow" and (withdrawn := await self._withdraw_ahead(tx, s.id, "run by hand")):
                await c.execute("UPDATE schedules SET next_fire_at = $1 WHERE id = $2 AND NOT paused",
                                min(withdrawn), s.id)  # fmt: skip
            job = make_job(None)
            job.schedule_id, job.fire_time = s.id, None
            await self._insert_runs(tx, s, [job])
            await c.execute("UPDATE schedules SET fired = fired + 1 WHERE id = $1", s.id)
            tx.emit("schedule.fired", job.id, job.queue, {"schedule_id": s.id, "fire_time": None})
            return FireResult([job])

        return await self._write(op)

    async def fire_schedules(self, firings: Sequence[Firing]) -> list[FireResult | None]:
        """Fire many due schedules in one transaction, a few statements for the lot. A None in the
        answer: that schedule changed since its plan was made (another node fired it first).

        Locks: the unfinished runs of the schedules whose policy reads them (in job id order, as
        change_jobs takes jobs), then the schedules' rows (in id order), so nodes firing a schedule
        take turns and a run ending on another node is either seen as ended or still going, never
        half-way. The unique key on (schedule_id, fire_time) is the backstop."""

        async def op(tx: PgTx) -> list[FireResult | None]:
            c = tx.conn
            watched = sorted({f.schedule.id for f in firings if needs_active_runs(f)})
            active: dict[int, list[Run]] = {}
            for r in await c.fetch(sql.LOCK_ACTIVE_RUNS_OF, watched) if watched else []:
                active.setdefault(r[0], []).append(Run(r[1], r[2], r[3]))
            rows = await c.fetch(sql.LOCK_FIRING_STATE, sorted({f.schedule.id for f in firings}))
            state = {r[0]: (r[1], r[2], r[3]) for r in rows}
            live = [(i, f) for i, f in enumerate(firings) if still_due(f, state.get(f.schedule.id))
                    and may_write_ahead(f, active.get(f.schedule.id, []))]  # fmt: skip
            pairs = [(f.schedule.id, t) for _, f in live for t in f.plan.fire_times]
            taken = await c.fetch(sql.FIRE_TIMES_TAKEN, [p[0] for p in pairs], [p[1] for p in pairs]) if pairs else []
            known = {(int(r[0]), float(r[1])) for r in taken}
            fired = [(i, f, decide_firing(f, active.get(f.schedule.id, []),
                                          {t for t in f.plan.fire_times if (f.schedule.id, t) in known}))
                     for i, f in live]  # fmt: skip
            plain = [j for _, f, res in fired if "workflow" not in f.schedule.job for j in res.jobs]
            made = {j.id for j in await insert_jobs(tx, plain, self._job_id_seq)}
            for _, f, res in fired:
                if "workflow" in f.schedule.job:
                    made.update(j.id for j in await self._insert_runs(tx, f.schedule, res.jobs))
            cancel: list[int] = []
            for _, _, res in fired:
                res.jobs = [j for j in res.jobs if j.id in made]  # a unique key refused the others
                cancel.extend(res.decision.cancel)
            if cancel:
                await self._cancel_runs(tx, sorted(set(cancel)))
            if fired:
                await c.executemany(sql.FIRED_UPDATE, [fire_update(f, res) for _, f, res in fired])
            out: list[FireResult | None] = [None] * len(firings)
            for i, f, res in fired:
                emit_fire_events(tx, f.schedule, f.plan, res.decision, res.jobs)
                out[i] = res
            return out

        return await self._write(op)

    # -- events

    async def events_since(self, seq: int, limit: int, flt: EventFilter | None = None) -> list[Event]:
        """Committed events after `seq`, in order, that pass `flt`."""
        return await self._read(lambda c: reads.events_since(c, seq, limit, flt))

    async def last_seq(self) -> int:
        """The newest committed sequence number (0 if none)."""
        return int(await self._fetchval("SELECT last FROM event_seq WHERE id = 1"))

    async def oldest_seq(self) -> int:
        """The oldest sequence number still kept (0 if none)."""
        return int(await self._fetchval("SELECT coalesce(min(seq), 0) FROM events"))

    async def prune_events(self, before: float) -> int:
        """Delete events older than `before`, PRUNE_BATCH at a time in transactions of their own
        with a pause between (one big DELETE held row locks and the WAL for seconds). Sequence
        numbers are never reused."""

        async def bounds(c: Conn) -> tuple[int, int]:
            cut = await c.fetchval("SELECT seq FROM events WHERE ts >= $1 ORDER BY seq LIMIT 1", before)
            if cut is None:
                cut = await c.fetchval("SELECT coalesce(max(seq), 0) + 1 FROM events")
            return int(await c.fetchval("SELECT coalesce(min(seq), 0) FROM events")), int(cut)

        low, cut = await self._read(bounds)
        pruned = 0
        while low < cut:
            high = min(low + PRUNE_BATCH, cut)

            async def op(tx: PgTx, lo: int = low, hi: int = high) -> int:
                # A range on both sides, and no seq scan whatever the statistics say: after a bulk load
                # (or the deletes before) the planner chose to scan all 2.7 M events for each batch.
                await tx.conn.execute(sql.INDEX_SCAN_ONLY)
                status = await tx.conn.execute("DELETE FROM events WHERE seq >= $1 AND seq < $2", lo, hi)
                await tx.conn.execute(sql.INDEX_SCAN_ONLY_END)
                return int(status.split()[-1])

            pruned += await self._write(op)
            low = high
            if low < cut:
                await asyncio.sleep(PRUNE_PAUSE)
        return pruned

    async def record_event(self, type_: str, data: dict[str, Any]) -> None:
        """Write an event that is not about one job (agents coming and going)."""

        async def op(tx: PgTx) -> None:
            tx.emit(type_, None, None, data)

        await self._write(op)

    # -- stats

    # -- stats

    async def pickup_history(self, since: float, bucket: float) -> list[tuple[int, int, int, int, float]]:
        """(held, interval, latency bucket, count, summed seconds) of the jobs claimed since `since`."""
        return await self._read(lambda c: pickup_sql.pg_history(c, since, bucket))

    async def prune_pickup(self, before: float) -> int:
        """Drop the pick-up history of the minutes before `before`."""

        async def op(tx: PgTx) -> int:
            status = await tx.conn.execute("DELETE FROM pickup_minutes WHERE minute < $1", int(before // 60))
            return int(status.split()[-1])

        return await self._write(op)

    async def finished_history(self, since: float, bucket: float) -> list[tuple[str, int, int]]:
        """(event type, bucket number, count) of finished-job events since `since`."""
        return await self._read(lambda c: reads.finished_history(c, since, bucket))

    async def stats(self, now: float) -> dict[str, Any]:
        """Job counts by state and by queue, and finished jobs per second over the last minute."""
        return await self._read(lambda c: reads.stats(c, now))


async def _unique_holders(tx: PgTx, keys: list[str]) -> dict[str, Job]:
    """The jobs holding these unique keys, after letting go of the keys whose window passed."""
    if not keys:
        return {}
    await tx.conn.execute("UPDATE jobs SET unique_held = false WHERE unique_key = ANY($1::text[]) AND unique_held "
                          "AND unique_until <= $2", keys, tx.now)  # fmt: skip
    rows = await tx.conn.fetch(f"{sql.SELECT_JOB} WHERE unique_key = ANY($1::text[]) AND unique_held", keys)
    return {j.unique_key: j for j in sql.to_jobs(rows) if j.unique_key is not None}


async def _again_after_a_race(write: Callable[[], Awaitable[T]], jobs: Sequence[Job]) -> T:
    """Run a submit's write again when it lost a key to another node whose job let go of it at once
    (UniqueRace); the next read sees how things are."""
    for _ in range(3):
        try:
            return await write()
        except UniqueRace:
            for j in jobs:
                j.id, j.workflow_id = 0, None
    raise Unavailable("the submit lost its unique key to other nodes three times in a row: try again")
