"""The Store protocol: everything the engine and the API ask of a database."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import orjson

from core.errors import Conflict, JobDeckError, NotFound
from core.flow import SETTINGS
from core.model import FINAL_STATES, Change, Job, iso, job_summary
from core.schedule import FirePlan, Schedule
from core.store.audit import AuditFilter, AuditScope
from core.store.listing import JobOrder
from core.workflow import Deps, Workflow

if TYPE_CHECKING:
    from core.store.schedule_runs import BackfillResult, FireResult, Firing, MakeJob

#: A decision about one job, applied inside the store's transaction (see core.model.decide_*).
Decide = Callable[[Job], Change]


class Outbox(Protocol):
    """A write transaction's event outbox (both stores' Tx have one), and its audit notes."""

    audit: AuditScope | None

    def emit(self, type_: str, job_id: int | None, queue_: str | None, data: dict[str, Any]) -> None: ...


TxT = TypeVar("TxT", bound=Outbox)


class JobChanges(Generic[TxT]):
    """The changes decided for jobs (see core.model.decide_*): applied to the Job objects at once,
    each with its event in the transaction's outbox, and buffered, grouped by the columns they set,
    for the store's `flush` to write in few statements. Rows put the key columns first when
    `key_first`, last otherwise (as the store's SQL wants them)."""

    key_first = True

    def __init__(self, tx: TxT) -> None:
        self.tx = tx
        self.updates: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        self.attempt_inserts: list[tuple[Any, ...]] = []
        self.attempt_updates: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}

    def db_value(self, name: str, value: Any) -> Any:
        """A job or attempt field as the store keeps it."""
        raise NotImplementedError

    def _row(self, key: tuple[Any, ...], values: tuple[Any, ...]) -> tuple[Any, ...]:
        return (*key, *values) if self.key_first else (*values, *key)

    def apply(self, job: Job, change: Change) -> Job:
        if self.tx.audit is not None:
            self.tx.audit.note_before(f"job:{job.id}", job_summary(job))
        for k, v in change.fields.items():
            setattr(job, k, v)
        if job.unique_held and job.unique_until is None and job.state in FINAL_STATES:
            job.unique_held = False  # an active key lets go as its job ends (the store's trigger writes it)
        if change.fields:
            values = tuple(self.db_value(k, v) for k, v in change.fields.items())
            self.updates.setdefault(tuple(change.fields), []).append(self._row((job.id,), values))
        a = change.attempt
        if a is not None:
            if "claimed_at" in a:
                self.attempt_inserts.append((job.id, a["attempt"], a["agent"], a["claimed_at"], a["outcome"]))
            else:
                keys = tuple(k for k in a if k != "attempt")
                values = tuple(self.db_value(k, a[k]) if k == "result" else a[k] for k in keys)
                self.attempt_updates.setdefault(keys, []).append(self._row((job.id, a["attempt"]), values))
        self.tx.emit(change.event, job.id, job.queue, {"job": job_summary(job), **change.data})
        return job

    def clear(self) -> None:
        self.updates.clear()
        self.attempt_inserts.clear()
        self.attempt_updates.clear()


def apply_decisions(
    jobs: dict[int, Job], decisions: dict[int, Decide], apply: Callable[[Job, Change], Job]
) -> dict[int, Job | JobDeckError]:
    """Run each job's decision on it (as the store loaded it, in its transaction) and `apply` the
    change; a missing job or a refused decision is that job's error, not the whole batch's."""
    out: dict[int, Job | JobDeckError] = {}
    for job_id, decide in decisions.items():
        job = jobs.get(job_id)
        if job is None:
            out[job_id] = NotFound(f"no job with id {job_id}", field="id")
            continue
        try:
            change = decide(job)
        except JobDeckError as exc:
            out[job_id] = exc
            continue
        out[job_id] = apply(job, change)
    return out


def split_by_idempotency(
    jobs: Sequence[Job], known: dict[str, Job], held: dict[str, Job] | None = None
) -> tuple[list[tuple[Job, bool]], list[Job]]:
    """(what the submit returns, in order: (job, created); the jobs to insert). A job whose
    idempotency key is `known` (stored already), or whose unique key is `held` by a stored job,
    or either used earlier in the same batch, returns that job instead."""
    out: list[tuple[Job, bool]] = []
    new: list[Job] = []
    held = {} if held is None else held
    for j in jobs:
        key = j.idempotency_key
        if key is not None and key in known:
            out.append((known[key], False))
            continue
        if j.unique_held and j.unique_key in held:
            out.append((held[j.unique_key], False))
            continue
        if key is not None:
            known[key] = j
        if j.unique_held and j.unique_key is not None:
            held[j.unique_key] = j
        new.append(j)
        out.append((j, True))
    return out, new


def unique_keys(jobs: Sequence[Job]) -> list[str]:
    """The unique keys new jobs want to hold, each once."""
    return sorted({j.unique_key for j in jobs if j.unique_held and j.unique_key is not None})


def refuse_held_keys(jobs: Sequence[Job], held: dict[str, Job]) -> None:
    """Raise Conflict, naming the job, if a unique key is held already or twice in `jobs` (a
    workflow is all or nothing: it cannot answer with somebody else's job for one of its own)."""
    mine: dict[str, Job] = {}
    for i, j in enumerate(jobs):
        if not j.unique_held or j.unique_key is None:
            continue
        holder = held.get(j.unique_key)
        if holder is not None:
            raise Conflict(
                f"job {j.ref or j.name!r}: unique key {j.unique_key!r} is held by job {holder.id} ({holder.state}); "
                "drop the key, or submit when that job ended",
                field=f"jobs[{i}].unique", job_id=holder.id, state=holder.state,
            )  # fmt: skip
        if j.unique_key in mine:
            raise Conflict(
                f"jobs {mine[j.unique_key].ref!r} and {j.ref!r} have the same unique key {j.unique_key!r}: "
                "only one job holds a key at a time",
                field=f"jobs[{i}].unique",
            )
        mine[j.unique_key] = j


class UniqueRace(Exception):
    """A unique or idempotency key was taken by another node between our read and our insert, and
    its holder let go before we could read it: the submit runs again (see the stores' submit_jobs)."""


#: The queues columns a store reads for a queue's settings, in this order (core.flow.SETTINGS).
QUEUE_SETTING_COLUMNS = tuple(SETTINGS)


def queue_settings_view(name: str, row: Sequence[Any]) -> dict[str, Any]:
    """A queue's name and settings from a row of QUEUE_SETTING_COLUMNS."""
    view = {"name": name, **dict(zip(QUEUE_SETTING_COLUMNS, row, strict=True))}
    view["paused"] = bool(view["paused"])
    view["fair"] = bool(view["fair"])
    if isinstance(view["fairness_weights"], str):
        view["fairness_weights"] = orjson.loads(view["fairness_weights"])
    return view


def queue_db_value(name: str, value: Any) -> Any:
    """A queue setting as the queues table keeps it (the weights as JSON text)."""
    if name == "fairness_weights":
        return None if value is None else orjson.dumps(value).decode()
    return value


def queue_view(name: str, row: Sequence[Any], by_state: dict[str, int]) -> dict[str, Any]:
    """A queue as the API shows it: its settings (a row of QUEUE_SETTING_COLUMNS) and how many of its
    jobs wait and run."""
    return {
        **queue_settings_view(name, row),
        "depth": by_state.get("queued", 0),
        "running": by_state.get("running", 0),
        "scheduled": by_state.get("scheduled", 0) + by_state.get("failed", 0),
        "counts": by_state,
    }


def queue_event(changes: dict[str, Any]) -> str:
    """The event type of a change of queue settings."""
    if "paused" in changes:
        return "queue.paused" if changes["paused"] else "queue.resumed"
    return "queue.updated"


FINISHED_EVENTS = ("job.succeeded", "job.failed", "job.dead", "job.cancelled")


def states_total(by_queue: dict[str, dict[str, int]]) -> dict[str, int]:
    """Job counts by state over the given queues."""
    by_state: dict[str, int] = {}
    for states in by_queue.values():
        for state, n in states.items():
            by_state[state] = by_state.get(state, 0) + n
    return by_state


HISTORY_RANGES = {"15m": (900.0, 30.0), "1h": (3600.0, 60.0), "24h": (86400.0, 900.0)}  # span, bucket (s)


def history_view(rows: list[tuple[str, int, int]], now: float, range_: str) -> dict[str, Any]:
    """Finished jobs per bucket by outcome over `range_` (HISTORY_RANGES), every bucket present (zeros
    included, so a quiet hour is a flat line, not a gap), with the success ratio per bucket."""
    span, bucket = HISTORY_RANGES[range_]
    last = int(now // bucket)
    first = int((now - span) // bucket) + 1
    counts = {t.removeprefix("job."): [0] * (last - first + 1) for t in FINISHED_EVENTS}
    for type_, b, n in rows:
        if first <= b <= last:
            counts[type_.removeprefix("job.")][b - first] += n
    # attempts that ended one way or the other (a cancel is nobody's failure)
    done = [counts["succeeded"][i] + counts["failed"][i] + counts["dead"][i] for i in range(last - first + 1)]
    ratio = [round(100 * counts["succeeded"][i] / d, 1) if d else None for i, d in enumerate(done)]
    return {"range": range_, "bucket_seconds": bucket, "buckets": [iso(b * bucket) for b in range(first, last + 1)],
            "outcomes": counts, "success_percent": ratio}  # fmt: skip


def stats_view(by_queue: dict[str, dict[str, int]], last_minute: dict[str, int]) -> dict[str, Any]:
    """The stats the API shows, from job counts per queue and state and the count of each
    FINISHED_EVENTS type over the last minute."""
    by_state = states_total(by_queue)
    finished = {t.removeprefix("job."): last_minute.get(t, 0) for t in FINISHED_EVENTS}
    done = finished["succeeded"] + finished["dead"] + finished["cancelled"]
    return {
        "by_state": by_state,
        "by_queue": by_queue,
        "last_minute": finished,
        "jobs_per_second": round(done / 60.0, 2),
    }


@dataclass(slots=True)
class JobFilter:
    """Filters of a job listing; every field is optional."""

    states: Sequence[str] = ()
    queue: str | None = None
    name_prefix: str | None = None
    tag: str | None = None
    created_after: float | None = None
    created_before: float | None = None
    schedule_id: int | None = None
    queue_patterns: Sequence[str] = ()  # shell-style ("payments-*"): only jobs of matching queues (what a team sees)
    search: str | None = None  # id, or text in the name, task or tags (core/store/listing.py search_sql)


# A list's total: an exact count that takes longer than this gives way to an estimate (total_exact
# false), so a page with its total answers within the lists' 50 ms whatever the store holds.
COUNT_BUDGET_MS = 15
# Matches an estimate puts at this many or more are not counted for a page's total: such a count does
# not finish in the budget (630,000 of a tag, 770,000 of a name prefix), which was spent for nothing.
ESTIMATED_FROM = 250_000
SEARCH_ESTIMATED_FROM = 2_000  # the same for a search: each candidate is read and checked (10,000 took > 15 ms)
COUNT_SAMPLE = 1_000  # SQLite's estimate: the matching share of this many jobs spread over the ids, times all jobs


def counted_by_counters(flt: JobFilter) -> bool:
    """Whether job_counts (jobs per queue and state, kept by triggers) answers the filter's count
    exactly: states and a queue only."""
    return not (flt.name_prefix or flt.tag is not None or flt.created_after is not None
                or flt.created_before is not None or flt.schedule_id is not None or flt.queue_patterns
                or flt.search)  # fmt: skip


def like_pattern(glob: str) -> str:
    """A shell-style queue pattern (`*`, `?`) as a SQL LIKE pattern (with `\\` as the escape)."""
    escaped = glob.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%").replace("?", "_")


# Pruning old events: rows per transaction, and the pause between two, so the writer serves
# submits and claims between batches (docs/scale.md: maintenance never stalls the hot path).
PRUNE_BATCH = 5_000
PRUNE_PAUSE = 0.02  # seconds
CHATTY_TYPES = frozenset({"job.output", "agent.status", "agent.drain"})


@dataclass(slots=True)
class EventFilter:
    """What a feed subscriber wants; empty means everything."""

    queues: frozenset[str] = frozenset()
    job_ids: frozenset[int] = frozenset()
    types: frozenset[str] = frozenset()

    def matches(self, type_: str, job_id: int | None, queue: str | None) -> bool:
        """True if an event with these keys passes the filter. Live events that can be plentiful
        (output, agent announcements) go only to subscribers who name their type."""
        if type_ in CHATTY_TYPES and type_ not in self.types:
            return False
        if self.types and not any(type_ == t or (t.endswith("*") and type_.startswith(t[:-1])) for t in self.types):
            return False
        if self.queues and queue not in self.queues:
            return False
        return not (self.job_ids and job_id not in self.job_ids)


@dataclass(slots=True)
class Event:
    """One committed event (or, with seq None, an ephemeral one such as live output that is
    streamed but not stored). `body` is its JSON as subscribers receive it."""

    seq: int | None
    ts: float
    type: str
    job_id: int | None
    queue: str | None
    body: bytes


def ephemeral_event(type_: str, job_id: int | None, data: dict[str, Any], queue: str | None = None) -> Event:
    """An event for live subscribers only: no sequence number, not kept, not replayed."""
    now = time.time()
    body = orjson.dumps({"seq": None, "ts": iso(now), "type": type_, "job_id": job_id, "queue": queue, "data": data})
    return Event(None, now, type_, job_id, queue, body)


@dataclass(slots=True)
class ClaimRequest:
    """What an agent with free slots may take."""

    agent: str
    limit: int
    queues: frozenset[str] | None = None  # None: any queue
    paused: frozenset[str] = frozenset()  # queues not to take from
    caps: dict[str, int] = field(default_factory=dict)  # queue -> how many more may run
    labels: dict[str, str] = field(default_factory=dict)  # the agent's labels
    # Queues whose concurrency limit leaves less room than the agent has: they hold jobs back by policy
    # (core/store/pickup.py; the store adds those its rate limits cut short).
    held: frozenset[str] = frozenset()
    # Set by the store: when a queue's rate limit, which held jobs back, has its next start.
    wake_at: float | None = None

    def note_wake(self, at: float | None) -> None:
        """Remember the earliest time a limit will let another job start."""
        if at is not None and (self.wake_at is None or at < self.wake_at):
            self.wake_at = at


class Store(Protocol):
    """A durable home for jobs, attempts, events, queues and schedules. See store/sqlite.py."""

    async def open(self) -> None: ...
    async def close(self) -> None: ...

    # jobs
    async def submit_jobs(
        self, jobs: Sequence[Job], deps: Sequence[Deps | None] | None = None, check: Callable[[Job], None] | None = None
    ) -> list[tuple[Job, bool]]: ...
    async def get_job(self, job_id: int) -> Job: ...
    async def list_jobs(
        self, flt: JobFilter, before_id: int | None, limit: int, order: JobOrder | None = None
    ) -> list[Job]: ...
    async def list_job_ids(self, flt: JobFilter, before_id: int | None, limit: int) -> list[int]: ...
    async def count_jobs(self, flt: JobFilter, budget_ms: int = ...) -> tuple[int, bool]: ...
    async def list_attempts(self, job_id: int) -> list[dict[str, Any]]: ...
    async def change_jobs(self, decisions: dict[int, Decide]) -> dict[int, Job | JobDeckError]: ...
    async def claim_jobs(self, req: ClaimRequest, now: float) -> list[Job]: ...
    def hold_writes(self) -> bool: ...
    def release_writes(self) -> None: ...
    async def extend_leases(
        self, agent: str, job_attempts: Sequence[tuple[int, int]], until: float
    ) -> list[tuple[int, int]]: ...
    async def promote_due_jobs(self, now: float, limit: int) -> tuple[int, float | None]: ...
    async def expired_lease_ids(self, now: float, limit: int) -> list[int]: ...
    async def next_lease_expiry(self) -> float | None: ...
    async def leased_attempts(self, agent: str) -> list[tuple[int, int]]: ...
    async def running_counts(self) -> dict[str, int]: ...

    # dependencies and workflows (core/workflow.py, core/store/deps.py)
    async def submit_workflow(self, name: str, jobs: Sequence[Job], deps: Sequence[Deps | None]) -> Workflow: ...
    async def get_workflow(self, workflow_id: int) -> tuple[Workflow, dict[str, int]]: ...
    async def list_workflows(
        self, state: str | None, before_id: int | None, limit: int
    ) -> list[tuple[Workflow, dict[str, int]]]: ...
    async def workflow_graph(self, workflow_id: int) -> list[dict[str, Any]]: ...
    async def job_edges(self, job_id: int) -> tuple[list[int], list[int]]: ...
    async def parent_results(self, child_ids: Sequence[int]) -> dict[int, dict[str, Any]]: ...
    async def change_workflow(self, workflow_id: int, action: str, decide: Decide) -> Workflow: ...

    # queues
    async def list_queues(self) -> list[dict[str, Any]]: ...
    async def update_queue(self, name: str, changes: dict[str, Any], now: float) -> dict[str, Any]: ...

    # schedules
    async def create_schedule(self, s: Schedule) -> Schedule: ...
    async def get_schedule(self, schedule_id: int) -> Schedule: ...
    async def list_schedules(self) -> list[Schedule]: ...
    async def update_schedule(self, s: Schedule, event: str, columns: Collection[str] | None = None) -> Schedule: ...
    async def delete_schedule(self, schedule_id: int) -> None: ...
    async def due_schedules(self, now: float, limit: int = 1000, after: float | None = None) -> list[Schedule]: ...
    async def next_schedule_at(self, after: float | None = None) -> float | None: ...
    async def fire_schedule(self, s: Schedule, plan: FirePlan | None, make_job: MakeJob) -> FireResult | None: ...
    async def fire_schedules(self, firings: Sequence[Firing]) -> list[FireResult | None]: ...
    async def sweep_buffered_runs(self) -> int: ...
    async def runs_at(self, schedule_id: int, fire_times: Sequence[float]) -> dict[float, tuple[int, str]]: ...
    async def backfill_schedule(
        self, s: Schedule, fire_times: list[float], make_job: MakeJob, overlap: str, dry_run: bool = False
    ) -> BackfillResult: ...

    # events
    async def events_since(self, seq: int, limit: int, flt: EventFilter | None = None) -> list[Event]: ...
    async def last_seq(self) -> int: ...
    async def prune_events(self, before: float) -> int: ...
    async def record_event(self, type_: str, data: dict[str, Any]) -> None: ...

    # stats
    async def stats(self, now: float) -> dict[str, Any]: ...
    async def finished_history(self, since: float, bucket: float) -> list[tuple[str, int, int]]: ...
    async def pickup_history(self, since: float, bucket: float) -> list[tuple[int, int, int, int, float]]: ...
    async def prune_pickup(self, before: float) -> int: ...
    async def release_expired_unique_keys(self, now: float, batch: int = PRUNE_BATCH) -> int: ...

    # audit log (core/store/audit.py)
    async def record_audit(self, row: tuple[Any, ...]) -> None: ...
    async def list_audit(self, flt: AuditFilter, before_id: int | None, limit: int) -> list[dict[str, Any]]: ...
    async def prune_audit(self, before: float) -> int: ...
    async def audit_after(self, after_id: int, limit: int) -> list[dict[str, Any]]: ...
