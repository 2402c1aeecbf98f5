"""Jobs, their states, the one table of legal transitions, and the pure decisions that move a job.

Stores load a job, ask a decision here what becomes of it, and write the answer with its
event in the same transaction. Nothing in this module does I/O.
"""

from __future__ import annotations

import functools
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from core.errors import Conflict


class JobState(StrEnum):
    """Where a job is in its life."""

    BLOCKED = "blocked"  # waiting on dependencies
    SCHEDULED = "scheduled"  # run_at in the future
    QUEUED = "queued"  # ready, waiting for a slot
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # an attempt failed, a retry is scheduled at run_at
    DEAD = "dead"  # no attempts left: the dead-letter set, replayable
    CANCELLED = "cancelled"
    PAUSED = "paused"
    SKIPPED = "skipped"  # a parent failed and the job's policy is `skip`: final, counts as success downstream


S = JobState

#: The one table of legal transitions. Every state change of a job is checked against it.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    # blocked -> succeeded / dead: a scheduled workflow run's end job ends in place with its workflow's
    # outcome once every job of it ended (core/workflow.py, decide_run_end); it never runs on an agent
    S.BLOCKED: frozenset({S.QUEUED, S.SCHEDULED, S.CANCELLED, S.PAUSED, S.SKIPPED, S.SUCCEEDED, S.DEAD}),
    S.SCHEDULED: frozenset({S.QUEUED, S.CANCELLED, S.PAUSED}),
    # queued -> succeeded: a late result of the lost attempt before the retry was claimed (see decide_finish)
    S.QUEUED: frozenset({S.RUNNING, S.CANCELLED, S.PAUSED, S.SUCCEEDED}),
    # running -> queued: an agent handed the job back unstarted (drain); -> scheduled: claimed while the
    # circuit breaker of its host was open, held back unsent (core/breaker.py)
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.DEAD, S.CANCELLED, S.QUEUED, S.SCHEDULED}),
    # failed / dead -> succeeded: a late result. The attempt was recorded lost (its agent went
    # quiet) but its run had finished; no newer attempt has started (see decide_finish).
    S.FAILED: frozenset({S.QUEUED, S.CANCELLED, S.PAUSED, S.SUCCEEDED}),
    S.PAUSED: frozenset({S.QUEUED, S.SCHEDULED, S.FAILED, S.BLOCKED, S.CANCELLED}),
    S.SUCCEEDED: frozenset({S.QUEUED}),  # retry: run it again
    S.DEAD: frozenset({S.QUEUED, S.SUCCEEDED}),  # replay from the dead-letter set; a late result
    # retry; -> blocked: a parent it was cancelled for is retried ("clear downstream", core/workflow.py)
    S.CANCELLED: frozenset({S.QUEUED, S.BLOCKED}),
    S.SKIPPED: frozenset({S.QUEUED, S.BLOCKED}),
}

WAITING_STATES = frozenset({S.BLOCKED, S.SCHEDULED, S.QUEUED, S.FAILED, S.PAUSED})
FINAL_STATES = frozenset({S.SUCCEEDED, S.DEAD, S.CANCELLED, S.SKIPPED})
ALL_STATES = tuple(JobState)

PRIORITY_MIN, PRIORITY_MAX = -1000, 1000


def check_transition(job: Job, target: JobState, action: str) -> None:
    """Raise Conflict, naming the current state, unless `job` may move to `target`."""
    current = JobState(job.state)
    if target not in TRANSITIONS[current]:
        raise Conflict(
            f"cannot {action} job {job.id}: it is {current.value}",
            state=current.value,
            job_id=job.id,
        )


@dataclass(slots=True)
class Job:
    """A job as stored. Times are Unix seconds (UTC)."""

    id: int
    name: str
    queue: str
    state: str
    priority: int
    sort_key: float
    run_at: float
    created_at: float
    updated_at: float
    attempt: int
    max_attempts: int
    backoff_base: float
    backoff_cap: float
    timeout: float | None
    task: dict[str, Any]
    tags: list[str] = field(default_factory=list)
    idempotency_key: str | None = None
    schedule_id: int | None = None
    fire_time: float | None = None
    agent: str | None = None
    lease_expires_at: float | None = None
    cancel_requested: bool = False
    paused_from: str | None = None
    last_error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    result: Any = None
    spec_max_attempts: int = 3
    labels: dict[str, str] = field(default_factory=dict)  # an agent must have all of them
    traceparent: str | None = None  # W3C context of its submit: every step's span is its child (core/obs/tracing.py)
    concurrency_key: str | None = None  # the queue's key_concurrency caps running jobs per key (core/flow.py)
    fairness_key: str | None = None  # claims rotate between the keys of a priority (core/flow.py)
    # dependencies (core/workflow.py): the workflow and ref it belongs to, what a failed parent does
    # to it, how many parents have not ended yet, and the first parent that ended dead or cancelled
    workflow_id: int | None = None
    ref: str | None = None
    on_parent_failure: str = "cancel"
    deps_left: int = 0
    dep_failed: int | None = None
    # unique jobs: the key, when a window-scoped key lets go (None: when the job ends), and whether
    # the key is still held (the store's unique index covers held keys only)
    unique_key: str | None = None
    unique_until: float | None = None
    unique_held: bool = False
    # the parent whose failure cancelled or skipped this job (None: it was not a dependency that ended it,
    # e.g. a person cancelled it): only such a job waits again when that parent is retried
    ended_by_parent: int | None = None


def labels_text(labels: dict[str, str]) -> str:
    """Labels as one sorted string, `k=v,k2=v2` ('' for none): how stores keep them."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def labels_from_text(text: str) -> dict[str, str]:
    """The inverse of labels_text."""
    return dict(pair.split("=", 1) for pair in text.split(",")) if text else {}


def labels_satisfied(required: dict[str, str], offered: dict[str, str]) -> bool:
    """True if an agent with `offered` labels may run a job that requires `required`."""
    return all(offered.get(k) == v for k, v in required.items())


@dataclass(slots=True)
class Change:
    """What a decision does to one job: fields to set, the event to write, an attempt row to write."""

    fields: dict[str, Any]
    event: str
    data: dict[str, Any] = field(default_factory=dict)
    attempt: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    """Numbers the decisions need, from the settings."""

    aging_seconds_per_priority: float = 60.0
    lease_seconds: float = 30.0


def sort_key(enqueued_at: float, priority: int, policy: Policy) -> float:
    """Claim order, ascending: higher priority first, FIFO within one; waiting ages a job upwards.

    Ordering by `enqueued_at - priority * A` equals ordering by the effective priority
    `priority + waited / A`, so a job waiting A seconds counts as one priority higher.
    """
    return enqueued_at - priority * policy.aging_seconds_per_priority


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds before retry number `attempt` (1-based): exponential, capped, with equal jitter."""
    ceiling = min(cap, base * (2.0 ** min(max(0, attempt - 1), 64)))  # 2**64 outgrows any cap
    r: float = (rng or random).random()
    return float(ceiling / 2 + r * ceiling / 2)


def utcnow() -> float:
    """Now, in Unix seconds to the microsecond: the precision of our ISO times, so a time read
    back from the API compares equal to the stored one."""
    return round(time.time(), 6)


def iso(ts: float | None) -> str | None:
    """Unix seconds to an ISO 8601 UTC string."""
    return None if ts is None else _iso(ts)


@functools.lru_cache(maxsize=256)
def _iso(ts: float) -> str:
    # the jobs of a batch or workflow share their times: 10,000 job events format one run_at
    return datetime.fromtimestamp(ts, UTC).isoformat()


def job_summary(job: Job) -> dict[str, Any]:
    """The compact view carried by every job event, enough for a screen to update its row."""
    return {
        "id": job.id,
        "name": job.name,
        "queue": job.queue,
        "state": job.state,
        "priority": job.priority,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "run_at": iso(job.run_at),
        "agent": job.agent,
        "cancel_requested": job.cancel_requested,
        "tags": job.tags,  # so a screen filtered by tag can follow the feed without asking again
    }


def job_to_dict(job: Job) -> dict[str, Any]:
    """The full public view of a job (the API's JSON)."""
    return {
        "id": job.id,
        "name": job.name,
        "queue": job.queue,
        "state": job.state,
        "priority": job.priority,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "run_at": iso(job.run_at),
        "created_at": iso(job.created_at),
        "updated_at": iso(job.updated_at),
        "started_at": iso(job.started_at),
        "finished_at": iso(job.finished_at),
        "timeout": job.timeout,
        "backoff": {"base": job.backoff_base, "cap": job.backoff_cap},
        "task": job.task,
        "tags": job.tags,
        "idempotency_key": job.idempotency_key,
        "schedule_id": job.schedule_id,
        "fire_time": iso(job.fire_time),
        "agent": job.agent,
        "lease_expires_at": iso(job.lease_expires_at),
        "cancel_requested": job.cancel_requested,
        "labels": job.labels,
        "concurrency_key": job.concurrency_key,
        "fairness_key": job.fairness_key,
        "paused_from": job.paused_from,
        "last_error": job.last_error,
        "result": job.result,
        "trace_id": job.traceparent.split("-")[1] if job.traceparent else None,
        "workflow_id": job.workflow_id,
        "ref": job.ref,
        "on_parent_failure": job.on_parent_failure,
        "ended_by_parent": job.ended_by_parent,
        "unique": None
        if job.unique_key is None
        else {
            "key": job.unique_key,
            "scope": "active" if job.unique_until is None else "window",
            "until": iso(job.unique_until),
            "held": job.unique_held,
        },
    }


# ---------------------------------------------------------------- decisions


def _move(job: Job, target: JobState, action: str, now: float, **fields: Any) -> Change:
    check_transition(job, target, action)
    fields["state"] = target.value
    fields["updated_at"] = now
    return Change(fields, f"job.{target.value}", {"from": job.state})


def _enqueue_fields(job: Job, enqueued_at: float, policy: Policy) -> dict[str, Any]:
    return {"sort_key": sort_key(enqueued_at, job.priority, policy)}


def decide_pause(job: Job, now: float, policy: Policy) -> Change:
    """Pause a waiting job; resume puts it back where it was."""
    if job.state == S.RUNNING:
        raise Conflict(f"cannot pause job {job.id}: it is running (cancel it instead)", state=job.state, job_id=job.id)
    return _move(job, S.PAUSED, "pause", now, paused_from=job.state)


def decide_resume(job: Job, now: float, policy: Policy) -> Change:
    """Put a paused job back: due jobs are queued at once, future ones wait for run_at."""
    if job.state != S.PAUSED:
        raise Conflict(f"cannot resume job {job.id}: it is {job.state}, not paused", state=job.state, job_id=job.id)
    before = JobState(job.paused_from or S.QUEUED)
    if before in (S.SCHEDULED, S.FAILED) and job.run_at > now:
        return _move(job, before, "resume", now, paused_from=None)
    if before == S.BLOCKED:
        return _move(job, S.BLOCKED, "resume", now, paused_from=None)
    return _move(job, S.QUEUED, "resume", now, paused_from=None, **_enqueue_fields(job, max(job.run_at, now), policy))


def decide_cancel(job: Job, now: float, policy: Policy) -> Change:
    """Cancel a waiting job at once; ask the agent to stop a running one.

    A running job stays `running` with `cancel_requested` until its agent reports the run
    stopped (or its lease expires): so a retry can never overlap the dying run.
    """
    if job.state == S.RUNNING:
        if job.cancel_requested:
            return Change({}, "job.cancel_requested", {"from": job.state})
        return Change({"cancel_requested": True, "updated_at": now}, "job.cancel_requested", {"from": job.state})
    return _move(job, S.CANCELLED, "cancel", now, finished_at=now, paused_from=None)


def decide_retry(job: Job, now: float, policy: Policy) -> Change:
    """Run a finished (or failed, waiting) job again now, with a fresh set of attempts."""
    if job.state not in (S.SUCCEEDED, S.DEAD, S.CANCELLED, S.FAILED, S.SKIPPED):
        raise Conflict(
            f"cannot retry job {job.id}: it is {job.state} (only succeeded, failed, dead, cancelled or skipped jobs "
            "can be retried)",
            state=job.state,
            job_id=job.id,
        )
    return _move(
        job,
        S.QUEUED,
        "retry",
        now,
        run_at=now,
        max_attempts=job.attempt + job.spec_max_attempts,
        cancel_requested=False,
        finished_at=None,
        ended_by_parent=None,
        **_enqueue_fields(job, now, policy),
    )


def decide_priority(job: Job, priority: int, now: float, policy: Policy) -> Change:
    """Change the priority of a job that has not started; it keeps its place in time."""
    if job.state not in WAITING_STATES:
        raise Conflict(
            f"cannot change the priority of job {job.id}: it is {job.state} (only waiting jobs can be re-prioritised)",
            state=job.state,
            job_id=job.id,
        )
    enqueued_at = job.sort_key + job.priority * policy.aging_seconds_per_priority
    return Change(
        {
            "priority": priority,
            "sort_key": enqueued_at - priority * policy.aging_seconds_per_priority,
            "updated_at": now,
        },
        "job.priority",
        {"from": job.priority},
    )


def decide_promote(job: Job, now: float, policy: Policy) -> Change:
    """A scheduled or failed job whose time has come becomes queued, ordered by its due time."""
    if job.state not in (S.SCHEDULED, S.FAILED) or job.run_at > now:
        raise Conflict(f"job {job.id} is not due", state=job.state, job_id=job.id)
    return _move(job, S.QUEUED, "promote", now, **_enqueue_fields(job, job.run_at, policy))


def decide_run_now(job: Job, now: float, policy: Policy) -> Change:
    """A job waiting for its time (a delay, a fire time's jitter, a retry's backoff) is queued now,
    keeping its priority. A schedule's run written ahead (queued, its fire time to come) is claimable now."""
    if job.state == S.QUEUED and job.run_at > now:
        return Change({"run_at": now, "updated_at": now, **_enqueue_fields(job, now, policy)}, "job.queued",
                      {"from": job.state})  # fmt: skip
    if job.state not in (S.SCHEDULED, S.FAILED):
        hint = {S.PAUSED: " (resume it first)", S.BLOCKED: " (it waits for an earlier run of its schedule)",
                S.QUEUED: " (it is queued already)"}.get(JobState(job.state), "")  # fmt: skip
        raise Conflict(
            f"cannot run job {job.id} now: it is {job.state}; only scheduled or failed (retry pending) jobs "
            f"wait for a time{hint}",
            state=job.state,
            job_id=job.id,
        )
    return _move(job, S.QUEUED, "run now", now, run_at=now, **_enqueue_fields(job, now, policy))


def decide_start_buffered(job: Job, now: float, policy: Policy) -> Change:
    """A run its schedule buffered (blocked until the runs before it ended) may start now."""
    if job.state != S.BLOCKED:
        raise Conflict(f"job {job.id} is not waiting for an earlier run", state=job.state, job_id=job.id)
    return _move(job, S.QUEUED, "release", now, run_at=max(job.run_at, now), **_enqueue_fields(job, now, policy))


def decide_claim(job: Job, agent: str, now: float, policy: Policy) -> Change:
    """An agent takes the job: a new attempt, a lease, and the attempt number as fencing token."""
    attempt = job.attempt + 1
    change = _move(
        job,
        S.RUNNING,
        "claim",
        now,
        attempt=attempt,
        agent=agent,
        lease_expires_at=now + policy.lease_seconds,
        started_at=None,
        finished_at=None,
    )
    change.data["agent"] = agent
    change.attempt = {"attempt": attempt, "agent": agent, "claimed_at": now, "outcome": "running"}
    return change


@dataclass(slots=True)
class RunResult:
    """What an agent reports about one attempt."""

    job_id: int
    attempt: int
    outcome: str  # succeeded | failed | cancelled | timeout | lost
    error: str | None = None
    output: str = ""
    exit_code: int | None = None
    result: Any = None
    started_at: float | None = None
    finished_at: float | None = None
    retryable: bool = True  # False when another attempt cannot help (the agent has no such task)


def late_result(job: Job, res: RunResult) -> bool:
    """A success reported for an attempt the core already recorded lost, when no newer attempt has
    started (the job waits for its retry, failed or queued, or is dead): the run finished, its
    result was only late (its node died, its agent was cut off). A lost attempt is one the core
    closed without any report of the agent: started_at, which only an agent's report sets, is empty."""
    return (
        res.outcome == "succeeded"
        and job.state in (S.FAILED, S.QUEUED, S.DEAD)
        and job.attempt == res.attempt
        and job.started_at is None
    )


def stale_result_reason(job: Job, res: RunResult) -> str:
    """Why a result of `res.attempt` cannot be recorded for `job` (the attempt number is the fence)."""
    head = f"result of job {job.id} attempt {res.attempt} not recorded"
    if job.attempt > res.attempt:
        return f"{head}: attempt {job.attempt} has started since"
    if job.attempt < res.attempt:
        return f"{head}: the job is at attempt {job.attempt}"
    if job.started_at is not None:
        return f"{head}: the attempt's result is recorded already (the job is {job.state})"
    return f"{head}: the attempt was recorded lost ({job.last_error}) and the job is {job.state}"


def stale_run_reason(job: Job, attempt: int, agent: str) -> str:
    """Why `agent` may not go on with attempt `attempt` of `job`, which it reports running (at a
    reconnect, or in a heartbeat): the attempt number is the fence, as for results."""
    head = f"job {job.id} attempt {attempt} is no longer agent {agent}'s to run"
    if job.attempt > attempt:
        return f"{head}: attempt {job.attempt} has started since"
    if job.attempt < attempt:
        return f"{head}: the job is at attempt {job.attempt}"
    if job.state != S.RUNNING:
        if job.started_at is not None:
            return f"{head}: the attempt's result is recorded already (the job is {job.state})"
        return f"{head}: the attempt was recorded lost ({job.last_error}) and the job is {job.state}"
    return f"{head}: its lease is agent {job.agent}'s"


def decide_finish(job: Job, res: RunResult, now: float, policy: Policy, rng: random.Random | None = None) -> Change:
    """Record the end of an attempt: success, a retry with backoff, the dead-letter set, or cancelled.
    Only the job's current attempt may finish: while it runs, or (a late success) once recorded lost."""
    late = late_result(job, res)
    if not late and (job.state != S.RUNNING or job.attempt != res.attempt):
        raise Conflict(stale_result_reason(job, res), state=job.state, job_id=job.id)
    attempt_row = {
        "attempt": res.attempt,
        "outcome": res.outcome,
        "error": res.error,
        "output": res.output,
        "exit_code": res.exit_code,
        "result": res.result,
        "started_at": res.started_at,
        "finished_at": res.finished_at or now,
    }
    common: dict[str, Any] = {
        "lease_expires_at": None,
        "cancel_requested": False,
        "started_at": res.started_at,
        "finished_at": res.finished_at or now,
        "result": res.result,
    }
    if res.outcome == "succeeded":
        change = _move(job, S.SUCCEEDED, "finish", now, last_error=None, **common)
    elif res.outcome == "cancelled" or job.cancel_requested:
        change = _move(job, S.CANCELLED, "finish", now, last_error=res.error or "cancelled", **common)
    elif res.outcome == "interrupted":
        # The agent was stopped (a restart, a deploy) in the middle: run it again at once, and
        # do not let the interruption use up one of the job's attempts.
        common.update(finished_at=None, agent=None)
        change = _move(job, S.QUEUED, "finish", now, last_error=res.error, run_at=now,
                       max_attempts=job.max_attempts + 1, sort_key=sort_key(now, job.priority, policy), **common)  # fmt: skip
    elif job.attempt < job.max_attempts and res.retryable:
        delay = backoff_delay(job.attempt, job.backoff_base, job.backoff_cap, rng)
        common["finished_at"] = None
        change = _move(job, S.FAILED, "finish", now, last_error=res.error, run_at=now + delay, **common)
        change.data["retry_in"] = round(delay, 3)
    else:
        change = _move(job, S.DEAD, "finish", now, last_error=res.error, **common)
    change.data.update(attempt=res.attempt, outcome=res.outcome)
    if late:
        change.data["late"] = True  # the attempt had been recorded lost
    if res.error:
        change.data["error"] = res.error[:500]
    change.attempt = attempt_row
    return change


def decide_lease_expired(job: Job, now: float, policy: Policy, rng: random.Random | None = None) -> Change:
    """The agent stopped heartbeating: the attempt is lost and counts as a failure."""
    if job.lease_expires_at is None or job.lease_expires_at > now:
        raise Conflict(f"lease of job {job.id} has not expired", state=job.state, job_id=job.id)
    return decide_lost(job, f"lease expired: agent {job.agent} stopped responding", now, policy, rng)


def decide_lost(
    job: Job, reason: str, now: float, policy: Policy, rng: random.Random | None = None, attempt: int | None = None
) -> Change:
    """The run is gone with its agent: the attempt is recorded as lost and counts as a failure.
    With `attempt`, only that attempt (a newer one, or a job no longer running, is refused)."""
    return decide_finish(job, RunResult(job.id, job.attempt if attempt is None else attempt, "lost", error=reason),
                         now, policy, rng)  # fmt: skip


def decide_hand_back(job: Job, attempt: int, now: float, policy: Policy) -> Change:
    """An agent returns a job it never started (drain, shutdown): queued again, attempt not counted."""
    if job.state != S.RUNNING or job.attempt != attempt:
        raise Conflict(f"stale hand-back for job {job.id}", state=job.state, job_id=job.id)
    if job.cancel_requested:  # the user cancelled it while it waited in the agent: it ends here
        change = _move(job, S.CANCELLED, "hand back", now, agent=None, lease_expires_at=None, finished_at=now)
        change.attempt = {"attempt": attempt, "outcome": "cancelled", "finished_at": now}
        return change
    change = _move(job, S.QUEUED, "hand back", now, attempt=job.attempt - 1, agent=None, lease_expires_at=None)
    change.attempt = {"attempt": attempt, "outcome": "handed_back", "finished_at": now}
    return change


def decide_breaker_hold(job: Job, attempt: int, until: float, reason: str, now: float, policy: Policy) -> Change:
    """A claimed job whose host's circuit breaker is open (wait mode) is not sent: it waits until
    `until` (or the breaker's closing) without using an attempt, keeping its place in the queue."""
    if job.state != S.RUNNING or job.attempt != attempt:
        raise Conflict(f"stale breaker hold for job {job.id}", state=job.state, job_id=job.id)
    change = _move(job, S.SCHEDULED, "hold", now, attempt=job.attempt - 1, agent=None, lease_expires_at=None,
                   run_at=until)  # fmt: skip
    change.data["waiting_for"] = reason
    change.attempt = {"attempt": attempt, "outcome": "held", "error": reason, "finished_at": now}
    return change


def decide_breaker_release(job: Job, now: float, policy: Policy) -> Change:
    """The breaker that held the job closed: queued again now, where it stood in the queue."""
    if job.state != S.SCHEDULED:
        raise Conflict(f"job {job.id} is not held", state=job.state, job_id=job.id)
    return _move(job, S.QUEUED, "release", now, run_at=now)


def build_job(spec: dict[str, Any], now: float, policy: Policy) -> Job:
    """A new job (id 0 until stored) from a validated spec (see `core.api.schemas.JobCreate`).

    `run_at` (Unix seconds) or `delay` (seconds) makes it scheduled; otherwise it is queued now.
    """
    run_at = spec.get("run_at")
    if run_at is None:
        run_at = now + float(spec.get("delay") or 0.0)
    state = S.SCHEDULED if run_at > now else S.QUEUED
    priority = int(spec.get("priority", 0))
    backoff = spec.get("backoff") or {}
    max_attempts = int(spec.get("max_attempts", 3))
    return Job(
        id=0,
        name=spec.get("name") or spec.get("ref") or default_name(spec["task"]),  # a workflow job: its ref
        queue=spec.get("queue") or "default",
        state=state.value,
        priority=priority,
        sort_key=sort_key(max(run_at, now), priority, policy),
        run_at=run_at,
        created_at=now,
        updated_at=now,
        attempt=0,
        max_attempts=max_attempts,
        spec_max_attempts=max_attempts,
        backoff_base=float(backoff.get("base", 1.0)),
        backoff_cap=float(backoff.get("cap", 3600.0)),
        timeout=spec.get("timeout"),
        task=spec["task"],
        tags=list(spec.get("tags") or []),
        idempotency_key=spec.get("idempotency_key"),
        schedule_id=spec.get("schedule_id"),
        fire_time=spec.get("fire_time"),
        labels=dict(spec.get("labels") or {}),
        traceparent=spec.get("traceparent"),
        concurrency_key=spec.get("concurrency_key"),
        fairness_key=spec.get("fairness_key"),
        ref=spec.get("ref"),
        on_parent_failure=spec.get("on_parent_failure") or "cancel",
        **_unique_fields(spec.get("unique"), now),
    )


def _unique_fields(unique: dict[str, Any] | None, now: float) -> dict[str, Any]:
    if not unique:
        return {}
    seconds = unique.get("seconds")
    until = now + float(seconds) if unique.get("scope") == "window" and seconds else None
    return {"unique_key": unique["key"], "unique_until": until, "unique_held": True}


def default_name(task: dict[str, Any]) -> str:
    """A readable name for a job submitted without one."""
    kind = task.get("kind")
    if kind == "shell":
        first = (task.get("argv") or (task.get("command") or "").split() or ["shell"])[0]
        return str(first).rsplit("/", 1)[-1].rstrip(";&|")[:60] or "shell"
    if kind == "http":
        return f"{task.get('method', 'GET')} {task.get('url', '')}"[:80]
    if kind == "python":
        return str(task.get("function", "python"))[:80]
    return str(kind)
