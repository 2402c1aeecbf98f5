"""What both stores do when a schedule fires and when one of its runs ends, apart from the SQL.

Firing: the overlap decision (core/schedule/overlap.py) over the runs that have not ended, the
jobs it makes (buffered ones `blocked`), the counters and the events (`schedule.fired` per job,
`schedule.skipped`, `schedule.missed`), all in the firing transaction. A run ending: the oldest
buffered run starts if nothing else of its schedule is going.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from core.model import FINAL_STATES, Change, Job, iso
from core.schedule import (
    ACTIVE_STATES,
    FireDecision,
    FirePlan,
    Run,
    Schedule,
    after_run_ended,
    decide_overlap,
    pause_reason,
    schedule_to_dict,
)
from core.schedule.policy import BUFFER_ALL_MAX, LISTED_MAX
from core.store.base import Outbox

#: Makes the job of one fire time (None: a manual run) from the schedule's template.
MakeJob = Callable[[float | None], Job]

ACTIVE_SQL = ", ".join(f"'{s}'" for s in ACTIVE_STATES)
#: A run's state for the overlap policy: a workflow run's end job waiting on its workflow's jobs is
#: going (the workflow runs), not a buffered run (blocked with nothing left to wait for).
RUN_STATE_SQL = "CASE WHEN state = 'blocked' AND deps_left > 0 THEN 'running' ELSE state END"


@dataclass(slots=True)
class FireResult:
    """What one firing did."""

    jobs: list[Job] = field(default_factory=list)  # made: runs and buffered runs
    decision: FireDecision = field(default_factory=FireDecision)
    plan: FirePlan | None = None


def jobs_to_make(s: Schedule, fire_times: list[float], active: list[Run], known: set[float], make_job: MakeJob,
                 overlap: str | None = None, buffer_max: int = BUFFER_ALL_MAX) -> tuple[FireDecision, list[Job]]:  # fmt: skip
    """The overlap decision (the schedule's, or `overlap`) and the jobs it makes, oldest fire time
    first; a fire time that has a job already (`known`: a backfill made it) is not made twice."""
    todo = [t for t in fire_times if t not in known]
    decision = decide_overlap(overlap or s.policy.overlap, todo, active, buffer_max)
    jobs: list[Job] = []
    for t in sorted([*decision.run, *decision.buffer]):
        job = make_job(t)
        job.schedule_id, job.fire_time = s.id, t
        if t in decision.buffer:
            job.state = "blocked"
        jobs.append(job)
    return decision, jobs


@dataclass(slots=True)
class Firing:
    """One due schedule as the loop planned it: the schedule read then, its plan, its job maker."""

    schedule: Schedule
    plan: FirePlan
    make_job: MakeJob
    ahead: bool = False  # written before its fire time (see written_ahead): claimable at its run_at, no write then


def still_due(f: Firing, row: tuple[Any, ...] | None) -> bool:
    """True if the schedule's row (next_fire_at, paused, updated_at) is as the plan was made from:
    no other pass or node fired it since, nobody paused, edited or deleted it."""
    if row is None:
        return False
    next_fire_at, paused, updated_at = row
    return next_fire_at == f.plan.expected_next and not paused and updated_at == f.schedule.updated_at


def needs_active_runs(f: Firing) -> bool:
    """Whether the overlap decision reads the schedule's unfinished runs (allow never does)."""
    return f.schedule.policy.overlap != "allow"


def decide_firing(f: Firing, active: list[Run], known: set[float]) -> FireResult:
    """The overlap decision of one due schedule and the jobs it makes (not yet stored). A firing
    written ahead makes its runs `queued` with their fire time (+ jitter) as run_at: every claim
    takes only jobs whose run_at has come, so the run becomes claimable then without a write."""
    decision, jobs = jobs_to_make(f.schedule, f.plan.fire_times, active, known, f.make_job)
    if f.ahead:
        for j in jobs:
            if j.state == "scheduled":
                j.state = "queued"
    return FireResult(jobs, decision, f.plan)


def may_write_ahead(f: Firing, active: list[Run]) -> bool:
    """Whether a fire time still to come may be decided now. Overlap policies decide at the fire
    time, so only when the outcome cannot change by then: `allow` always, the others when no run of
    the schedule waits or runs (then none starts before the fire time but this one: a run by hand
    meanwhile withdraws it, see withdrawn_reason). Otherwise the loop fires it when due, as ever."""
    return not f.ahead or not needs_active_runs(f) or not active


#: The runs a schedule wrote ahead that no claim can have taken yet (queued, run_at still to come).
WRITTEN_AHEAD_SQL = ("SELECT id, fire_time FROM jobs WHERE schedule_id = ? AND state = 'queued' AND run_at > ? "
                     "AND fire_time IS NOT NULL ORDER BY id")  # fmt: skip


def withdrawn_reason(schedule_id: int, why: str, fire_time: float | None) -> str:
    """Why a run written ahead was cancelled before its fire time (the job.cancelled event says it)."""
    at = iso(fire_time) if fire_time is not None else "?"
    return f"schedule {schedule_id} was {why} before the fire time {at}: the run written ahead for it is withdrawn"


def fire_update(f: Firing, r: FireResult) -> tuple[Any, ...]:
    """The schedule's row change after a firing, as values for the store's FIRED_UPDATE:
    (next_fire_at, last_fire_at, fired +, skipped +, missed +, last_skipped_at or None, id).
    Counters are added to, never written from the row read earlier, so a run ending on another
    transaction (failures, pause on failure) or a concurrent edit loses nothing."""
    plan, decision = f.plan, r.decision
    considered = [*plan.fire_times, *plan.missed]
    last = max(considered) if considered else plan.expected_next
    skipped_at = max(decision.skip) if decision.skip else None
    return (plan.next_fire_at, last, len(r.jobs), len(decision.skip), plan.missed_count, skipped_at, f.schedule.id)


def emit_fire_events(tx: Outbox, s: Schedule, plan: FirePlan, decision: FireDecision, made: list[Job]) -> None:
    """The events of one firing, in its transaction."""
    queue = s.job.get("queue") or "default"
    for j in made:
        tx.emit("schedule.fired", j.id, j.queue,
                {"schedule_id": s.id, "fire_time": j.fire_time, "buffered": j.state == "blocked",
                 "ahead": j.state == "queued" and j.run_at > j.created_at})  # fmt: skip
    if decision.skip:
        tx.emit("schedule.skipped", None, queue, {
            "schedule_id": s.id, "overlap": s.policy.overlap, "count": len(decision.skip),
            "fire_times": [iso(t) for t in decision.skip[:LISTED_MAX]], "reason": decision.skip_reason,
        })  # fmt: skip
    if decision.cancel:
        tx.emit("schedule.cancelled_previous", None, queue, {"schedule_id": s.id, "job_ids": decision.cancel})
    if plan.missed_count:
        tx.emit("schedule.missed", None, queue, {
            "schedule_id": s.id, "count": plan.missed_count, "exact": plan.missed_exact,
            "catch_up": plan.policy, "catch_up_window": s.policy.catch_up_window,
            "fire_times": [iso(t) for t in plan.missed], "ran": [iso(t) for t in plan.fire_times],
        })  # fmt: skip


def ended_runs(results: Iterable[Any]) -> dict[int, list[Job]]:
    """The runs that ended in this change, by schedule, schedule ids ascending (the order nodes lock
    them in), each schedule's runs by job id."""
    out: dict[int, list[Job]] = {}
    for j in results:
        if isinstance(j, Job) and j.schedule_id is not None and j.state in FINAL_STATES:
            out.setdefault(j.schedule_id, []).append(j)
    return {sid: sorted(out[sid], key=lambda j: j.id) for sid in sorted(out)}


def after_runs_ended(tx: Outbox, s: Schedule, ended: list[Job], now: float) -> dict[str, Any]:
    """Count the ended runs' failures; pause the schedule (with its reason and a `schedule.paused`
    event) after `pause_after_failures` in a row. Returns the columns to write (none: nothing changed)."""
    failures, reason = s.failures, None
    for j in ended:
        failures = after_run_ended(s.policy, failures, j.state)
        if reason is None and not s.paused:
            reason = pause_reason(s.policy, failures, j.id, j.last_error)
    cols: dict[str, Any] = {}
    if failures != s.failures:
        cols["failures"] = failures
    if reason is not None:
        cols.update(paused=True, paused_reason=reason, next_fire_at=None, updated_at=now)
    for k, v in cols.items():
        setattr(s, k, v)
    if reason is not None:
        tx.emit("schedule.paused", None, s.job.get("queue") or "default",
                {"schedule": schedule_to_dict(s), "reason": reason, "failures": failures})  # fmt: skip
    return cols


def with_reason(change: Change, reason: str) -> Change:
    """A cancel decision that says why (the job.cancelled event carries it)."""
    change.data["reason"] = reason
    return change


def deleted_reason(schedule_id: int) -> str:
    """Why a buffered run of a deleted schedule was cancelled."""
    return f"schedule {schedule_id} was deleted: its buffered run will not start"


def backfill_bound(fire_times: list[float], active: list[Run]) -> int:
    """How many runs a backfill under buffer_all may hold waiting: all of its own range besides the
    runs already waiting (an earlier backfill's still buffered), so it never skips any of its fire times."""
    return len(fire_times) + len(active)


@dataclass(slots=True)
class BackfillResult:
    """What a backfill did (or, dry, would do)."""

    fire_times: int  # in the range
    existing: int  # already had their job
    made: list[Job] = field(default_factory=list)


def emit_backfill_event(tx: Outbox, s: Schedule, times: list[float], existing: int, made: list[Job],
                        overlap: str) -> None:  # fmt: skip
    """One event for a backfill (its jobs have their own job.created events)."""
    tx.emit("schedule.backfilled", None, s.job.get("queue") or "default", {
        "schedule_id": s.id, "from": iso(times[0]) if times else None, "to": iso(times[-1]) if times else None,
        "fire_times": len(times), "existing": existing, "made": len(made), "overlap": overlap,
    })  # fmt: skip
