"""The engine: submits and changes jobs, and runs the loops that move them.

Loops: promote due jobs, dispatch queued jobs to agents with free slots, reap expired
leases, materialise schedules, prune old events. No loop polls on the hot path: each
waits for a wake-up (a submit, a freed slot, a timer set to the next due time), with a
slow poll only as a safety net.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import heapq
import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import orjson

from core.agent_hub import AgentHub
from core.agent_session import AgentSession
from core.breaker_gate import BreakerGate
from core.bus import Bus
from core.config import Settings
from core.errors import Conflict, JobDeckError
from core.flow import UNLIMITED, QueueLimits, held_by_limits, key_reason, turn_order, turn_reason, waiting_reason
from core.idle import IDLE_POLL_MAX, IdlePoll
from core.model import (
    Job,
    Policy,
    build_job,
    decide_cancel,
    decide_lease_expired,
    decide_pause,
    decide_priority,
    decide_resume,
    decide_retry,
    decide_run_now,
    iso,
    utcnow,
)
from core.obs.metrics import NodeMetrics, NoMetrics
from core.obs.tracing import Tracing
from core.protocol import Channel, ChannelClosed
from core.schedule import (
    ONCE_SLACK_SECONDS,
    Schedule,
    changed_fields,
    jitter_offset,
    next_fire_times,
    plan_fires,
)
from core.schedule.backfill import backfill_times
from core.store.base import ClaimRequest, Decide, Event, EventFilter, Store
from core.store.pickup import KEEP_SECONDS as PICKUP_KEEP_SECONDS
from core.store.schedule_runs import BackfillResult, Firing
from core.workflow import Deps, Workflow, parent_results_input, run_end_spec, validate_workflow

log = logging.getLogger("jobdeck.engine")

PRUNE_EVERY = 600.0
PROMOTE_BATCH = 1000
FINISHED = frozenset({"job.succeeded", "job.dead", "job.cancelled"})
FIRE_PREPARE_MAX = 50_000  # schedules planned ahead at once
BUFFER_SWEEP_EVERY = 30.0  # seconds: the safety net for buffered runs whose release was missed
PREPARED_VALID = 1.0  # seconds: a plan made ahead is used if the fire is at most this late
CATCH_UP_LOOKBACK = 366 * 86400.0  # a resumed schedule's missed fire times are looked for this far back
CATCH_UP_FILTER = EventFilter(types=frozenset({"queue.*", "job.cancel_requested"}))
FOLLOW_SLICE = 500  # events the bus loop follows before it lets other tasks run (a big commit is one batch)


BULK_DECISIONS: dict[str, Callable[..., Any]] = {
    "cancel": decide_cancel,
    "pause": decide_pause,
    "resume": decide_resume,
    "retry": decide_retry,
    "priority": decide_priority,
}


class StallGrace:
    """When the node's own event loop stalls (a 10,000-job batch, a swapped-out process, SIGSTOP), the
    agents' heartbeats wait unread in their sockets and the leases they renew are not renewed. Judging
    agents and leases the moment the loop runs again would blame live agents for the node's own
    silence. So after a late wake-up the reaper waits two heartbeats (at most a lease) for the backlog
    to be read and fresh heartbeats to arrive. A node that stalls again and again still judges at
    least once a lease, so a dead agent's jobs are not held for ever."""

    def __init__(self, interval: float, heartbeat: float, lease: float) -> None:
        self.interval = interval
        self.tolerance = heartbeat / 2  # a shorter stall cannot hide a whole lease of heartbeats
        self.grace = min(2 * heartbeat, lease)
        self.lease = lease
        self.judge_after = 0.0
        self._since: float | None = None  # when the current run of stalls began

    def woke(self, slept_from: float, now: float) -> float:
        """The stall in seconds if the sleep that began at `slept_from` ended late, else 0."""
        late = now - slept_from - self.interval
        if late <= self.tolerance:
            if now >= self.judge_after:
                self._since = None
            return 0.0
        if self._since is None:
            self._since = now
        if now >= self._since + self.lease:  # stalling for a lease already: judge now, then start afresh
            self._since = None
            self.judge_after = now
        else:
            self.judge_after = min(now + self.grace, self._since + self.lease)
        return late

    def may_judge(self, now: float) -> bool:
        return now >= self.judge_after


class Engine:
    """One node's scheduler and dispatcher over a Store and a Bus."""

    def __init__(
        self,
        store: Store,
        bus: Bus,
        settings: Settings,
        clock: Callable[[], float] = utcnow,
        metrics: NodeMetrics | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.store = store
        self.metrics = metrics if metrics is not None else NoMetrics()
        self.tracing = tracing if tracing is not None else Tracing()
        self.bus = bus
        self.settings = settings
        self.clock = clock
        self.policy = Policy(settings.aging_seconds_per_priority, settings.lease_seconds)
        self.queue_settings: dict[str, QueueLimits] = {}
        self._next_room_at: float | None = None  # when a rate limit that held jobs back lets the next start
        self._wake_dispatch = asyncio.Event()
        self._writes_held: asyncio.TimerHandle | None = None  # see pair_with_claim
        self._wake_promote = asyncio.Event()
        self._wake_schedules = asyncio.Event()
        self._prepared: dict[int, Firing] = {}  # schedule id -> its next firing, planned ahead
        self._prepared_for: float | None = None  # the fire time last planned ahead
        self._ahead_until = 0.0  # fire times up to this were looked at for writing ahead (_write_ahead)
        self._due_runs: list[float] = []  # heap: run_at of queued runs written ahead, for the dispatcher's timer
        self.next_promote_at = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self.started_at = self.clock()
        self.hub = AgentHub(self)
        self.breakers = BreakerGate(self)
        self.metrics.watch_agents(self.hub)
        self.claims = 0  # claim transactions of this node that took jobs, and the jobs they took
        self._pickup = (0.0, 0.0)  # (monotonic time, seconds its longest-waiting job waited) of the last claim
        self.jobs_claimed = 0
        self.result_batches = 0  # result transactions of this node's agents, and the results in them
        self.results = 0

    # ------------------------------------------------------------ life

    async def start(self) -> None:
        """Load queue settings and start the loops."""
        self.queue_settings = await self.store.queue_settings()  # type: ignore[attr-defined]
        loops = (self._dispatch_loop, self._promote_loop, self._reap_loop, self._schedule_loop, self._prune_loop,
                 self._bus_loop)  # fmt: skip
        self._tasks = [asyncio.create_task(self._guard(loop), name=f"jobdeck-{loop.__name__}") for loop in loops]

    async def stop(self) -> None:
        """Stop the loops (running jobs keep their leases)."""
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks = []

    async def _guard(self, loop: Callable[[], Any]) -> None:
        # A loop that crashes is logged and restarted: one bad row must not stop scheduling.
        while True:
            try:
                await loop()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s crashed; restarting it in 1 s", loop.__name__)
                await asyncio.sleep(1.0)

    def pickup_behind(self, seconds: float) -> bool:
        """Whether this node's claims run behind: its last claim, within the last second, took a job
        that had waited past `seconds` since it was due (background work, retention, gives way)."""
        at, waited = self._pickup
        return waited > seconds and time.monotonic() - at < 1.0

    def wake(self) -> None:
        """Tell the dispatcher there may be work or room."""
        self._wake_dispatch.set()

    def pair_with_claim(self) -> bool:
        """Results just freed slots: hold the store's writes until the dispatcher has queued the
        claim that fills them, so results and claim share one commit instead of taking one each.
        True while writes are held (the caller writes its results now, into that commit, and
        wakes the dispatcher once they are queued: results first). The bound is twice
        claim_coalesce_ms: the claim may wait that long for freed slots to add up."""
        if self._writes_held is not None:
            return True
        window = self.settings.claim_coalesce_ms / 1000.0
        if window <= 0 or not self.store.hold_writes():
            return False
        self._writes_held = asyncio.get_running_loop().call_later(2 * window, self._let_writes_go)
        return True

    def _let_writes_go(self) -> None:
        if self._writes_held is not None:
            self._writes_held.cancel()
            self._writes_held = None
            self.store.release_writes()

    def wake_promoter(self) -> None:
        """Tell the promoter a job may be due sooner than it thought."""
        self._wake_promote.set()

    async def attach_agent(self, channel: Channel, may_serve: Callable[[list[str]], str | None] | None = None) -> None:
        """Serve one agent on `channel` until it disconnects (see AgentHub.attach)."""
        await self.hub.attach(channel, may_serve)

    # ------------------------------------------------------------ jobs

    async def submit(
        self, specs: Sequence[dict[str, Any]], check: Callable[[Job], None] | None = None, batch: bool = False
    ) -> list[tuple[Job, bool]]:
        """Store new jobs (all or none) and wake whatever must act on them. A spec's `depends_on`
        (job ids) makes it wait for those jobs; `check(parent)` may refuse one (access)."""
        now = self.clock()
        deps = [Deps(list(s["depends_on"]), where=f"jobs[{i}].depends_on" if batch else "depends_on")
                if s.get("depends_on") else None for i, s in enumerate(specs)]  # fmt: skip
        with self.tracing.submit(len(specs)) as traceparent:
            jobs = [build_job(s, now, self.policy) for s in specs]
            if traceparent is not None:
                for j in jobs:
                    j.traceparent = traceparent
            out = await self.store.submit_jobs(jobs, deps if any(deps) else None, check)
        self._after_submit(j for j, created in out if created)
        return out

    async def submit_workflow(self, name: str, specs: Sequence[dict[str, Any]]) -> tuple[Workflow, list[Job]]:
        """Store a workflow: its jobs (each spec with a `ref` and `depends_on` refs) and their
        dependencies, all or none; a cycle or a bad ref is an InvalidInput naming the job."""
        parents = validate_workflow(specs)
        now = self.clock()
        with self.tracing.submit(len(specs)) as traceparent:  # one trace for the workflow's jobs
            jobs = [build_job(s, now, self.policy) for s in specs]
            if traceparent is not None:
                for j in jobs:
                    j.traceparent = traceparent
            wf = await self.store.submit_workflow(name, jobs, [Deps(index=p) if p else None for p in parents])
        self._after_submit(jobs)
        return wf, jobs

    async def change_workflow(self, workflow_id: int, action: str) -> Workflow:
        """cancel, pause or resume every job of a workflow that the action takes."""
        decide = {"cancel": decide_cancel, "pause": decide_pause, "resume": decide_resume}[action]
        wf = await self.store.change_workflow(workflow_id, action, self._now_decision(decide))
        self._wake_dispatch.set()
        self._wake_promote.set()
        return wf

    def _after_submit(self, jobs: Any) -> None:
        now = self.clock()
        for j in jobs:
            if j.state == "queued" and j.run_at > now:  # written ahead: claimable at its run_at
                self._claim_at(j.run_at)
            elif j.state == "queued":
                self._wake_dispatch.set()
            elif j.state == "scheduled" and j.run_at < self.next_promote_at:
                self._wake_promote.set()
            if j.queue not in self.queue_settings:
                self.queue_settings[j.queue] = UNLIMITED

    async def _change_one(self, job_id: int, decide: Decide) -> Job:
        result = (await self.store.change_jobs({job_id: decide}))[job_id]
        if isinstance(result, JobDeckError):
            raise result
        return result

    async def change_many(self, job_ids: Sequence[int], decide: Decide) -> dict[int, Job | JobDeckError]:
        return await self.store.change_jobs(dict.fromkeys(job_ids, decide))

    BULK_CHUNK = 5000  # jobs per transaction: a bulk action on 100,000 jobs does not hold the writer for long

    async def bulk(
        self,
        action: str,
        job_ids: Sequence[int],
        priority: int | None = None,
        check: Callable[[Job], None] | None = None,
    ) -> dict[int, Job | JobDeckError]:
        """cancel, pause, resume, retry or priority on many jobs; each job succeeds or fails alone.
        `check(job)` may refuse a job (raise) before the action's own decision runs."""
        base = BULK_DECISIONS[action]
        decide = self._now_decision(base, priority) if action == "priority" else self._now_decision(base)
        if check is not None:
            inner, guard = decide, check

            def decide(job: Job) -> Any:
                guard(job)
                return inner(job)

        out: dict[int, Job | JobDeckError] = {}
        for i in range(0, len(job_ids), self.BULK_CHUNK):
            out.update(await self.change_many(job_ids[i : i + self.BULK_CHUNK], decide))
        if action in ("resume", "retry"):
            self._after_submit(j for j in out.values() if isinstance(j, Job))
        self._wake_dispatch.set()
        return out

    def _now_decision(self, fn: Callable[..., Any], *args: Any) -> Decide:
        return lambda job: fn(job, *args, self.clock(), self.policy)

    async def cancel(self, job_id: int) -> Job:
        """Cancel a waiting job, or ask the agent running it to stop."""
        # A running job's agent is told by the bus loop, on whichever node holds the agent.
        return await self._change_one(job_id, self._now_decision(decide_cancel))

    async def pause(self, job_id: int) -> Job:
        """Hold a waiting job until resumed."""
        return await self._change_one(job_id, self._now_decision(decide_pause))

    async def resume(self, job_id: int) -> Job:
        """Release a paused job."""
        job = await self._change_one(job_id, self._now_decision(decide_resume))
        self._after_submit([job])
        return job

    async def retry(self, job_id: int) -> Job:
        """Run a finished job again (replay a dead one)."""
        job = await self._change_one(job_id, self._now_decision(decide_retry))
        self._after_submit([job])
        return job

    async def run_now(self, job_id: int) -> Job:
        """Queue a scheduled (or failed, retry pending) job at once."""
        job = await self._change_one(job_id, self._now_decision(decide_run_now))
        self._wake_dispatch.set()
        return job

    async def set_priority(self, job_id: int, priority: int) -> Job:
        """Change the priority of a waiting job."""
        job = await self._change_one(job_id, self._now_decision(decide_priority, priority))
        self._wake_dispatch.set()
        return job

    def dispatch_counts(self) -> dict[str, int]:
        """Claims and result batches of this node since it started (GET /v1/stats `dispatch`)."""
        return {"claims": self.claims, "jobs_claimed": self.jobs_claimed,
                "result_batches": self.result_batches, "results": self.results}  # fmt: skip

    # ------------------------------------------------------------ queues

    async def update_queue(self, name: str, **changes: Any) -> dict[str, Any]:
        """Pause / resume a queue or change its limits (core.flow.SETTINGS)."""
        view = await self.store.update_queue(name, changes, self.clock())
        self.queue_settings[name] = QueueLimits.of(view)
        self._wake_dispatch.set()
        return view

    async def waiting_for(self, jobs: Sequence[Job]) -> dict[int, str | None]:
        """Why each queued job is not running (None: nothing holds it, a claim takes it soon): no agent can
        take it, its queue's limits (paused, concurrency, rate, its concurrency key's), or every slot that
        could run it is busy; in a fair queue held by its limits or the slots, where its fairness key is in
        the rotation too. One read per queue with limits (and per fair queue), whatever the number of jobs."""
        now = self.clock()
        await self.breakers.refresh()
        out = {j.id: self.breakers.reason(j, now) or self.hub.waiting_for(j) for j in jobs}
        for j in jobs:
            if j.state == "queued" and j.run_at > now:  # a schedule's run written ahead of its fire time
                out[j.id] = f"written ahead of its fire time: it may start at {iso(j.run_at)}"
        waiting = [j for j in jobs if out[j.id] is None and j.state == "queued"]
        limits = {j.queue: self.queue_settings.get(j.queue, UNLIMITED) for j in waiting}
        shared: set[int] = set()  # held by what every key of the queue shares: its limits, the slots
        for queue in {q for q, lim in limits.items() if lim.held}:
            got, running, bucket = await self.store.queue_flow(queue)  # type: ignore[attr-defined]
            if (why := waiting_reason(queue, got, running, bucket, now)) is not None:
                stopped = got.paused or got.concurrency == 0
                for j in waiting:
                    if j.queue == queue:
                        out[j.id] = why
                        if not stopped:
                            shared.add(j.id)
        keyed: dict[str, set[str]] = {}
        for j in waiting:
            if out[j.id] is None and j.concurrency_key is not None and limits[j.queue].key_concurrency is not None:
                keyed.setdefault(j.queue, set()).add(j.concurrency_key)
        for queue, keys in keyed.items():
            limit = limits[queue].key_concurrency
            running_of = await self.store.key_running(queue, sorted(keys))  # type: ignore[attr-defined]
            for j in waiting:
                if out[j.id] is None and j.queue == queue and j.concurrency_key in keys and limit is not None:
                    key = str(j.concurrency_key)
                    out[j.id] = key_reason(queue, key, limit, running_of.get(key, 0))
        for j in waiting:
            if out[j.id] is None and (why := self.hub.slots_reason(j)) is not None:
                out[j.id] = why
                shared.add(j.id)
        fair = {j.queue for j in waiting if j.id in shared and j.fairness_key is not None and limits[j.queue].fair}
        for queue in fair:
            rotation, heads, more = await self.store.fair_turns(queue, now)  # type: ignore[attr-defined]
            order = turn_order(heads, limits[queue], rotation, now, self.policy.aging_seconds_per_priority)
            for j in waiting:
                if j.queue == queue and j.id in shared and j.fairness_key is not None:
                    turn = turn_reason(queue, j.fairness_key, order, more)
                    out[j.id] = f"{out[j.id]}; {turn}" if turn else out[j.id]
        return out

    # ------------------------------------------------------------ schedules

    def _first_fire(self, s: Schedule, now: float) -> float | None:
        if s.kind == "once":  # once, at `at`, even a moment late ("delay": 0 was computed before this `now`)
            done = s.at is None or (s.last_fire_at is not None and s.last_fire_at >= s.at)
            return None if done or s.at < now - ONCE_SLACK_SECONDS else s.at  # type: ignore[operator]
        times = next_fire_times(s, now, 1)
        return times[0] if times else None

    async def create_schedule(self, s: Schedule) -> Schedule:
        """Store a schedule with its first fire time."""
        now = self.clock()
        s.created_at = s.updated_at = now
        s.next_fire_at = None if s.paused else self._first_fire(s, now)
        s = await self.store.create_schedule(s)
        self._wake_schedules.set()
        return s

    async def update_schedule(self, s: Schedule, event: str = "schedule.updated", resumed: bool = False,
                              before: Schedule | None = None) -> Schedule:  # fmt: skip
        """Write a changed schedule; its next fire time is computed again. Only what differs from
        `before` (the schedule as read before the change) is written, so a counter or a pause on
        failure that another transaction wrote meanwhile is kept. A `resumed` schedule's fire times
        that passed while it was paused are missed ones: its catch-up policy decides."""
        now = self.clock()
        s.updated_at = now
        s.next_fire_at = None if s.paused else self._first_fire(s, now)
        if resumed:
            s.paused_reason, s.failures = None, 0
            if s.kind != "once" and s.next_fire_at is not None:
                since = max(s.last_fire_at or s.created_at, now - CATCH_UP_LOOKBACK)
                first_missed = next_fire_times(s, since, 1)
                if first_missed and first_missed[0] <= now:
                    s.next_fire_at = first_missed[0]  # due at once: the schedule loop applies the catch-up policy
        columns = None if before is None else changed_fields(before, s)
        s = await self.store.update_schedule(s, event, columns)
        self._wake_schedules.set()
        return s

    async def set_schedule_paused(self, schedule_id: int, paused: bool) -> Schedule:
        """Pause or resume a schedule (resuming clears the reason it paused itself)."""
        s = await self.store.get_schedule(schedule_id)
        if s.paused == paused:
            raise Conflict(
                f"schedule {schedule_id} is {'paused' if paused else 'not paused'} already",
                state="paused" if paused else "active",
            )
        before = copy.deepcopy(s)
        s.paused = paused
        event = "schedule.paused" if paused else "schedule.resumed"
        return await self.update_schedule(s, event, resumed=not paused, before=before)

    async def run_schedule_now(self, schedule_id: int) -> Job:
        """Make one job from the schedule's template now, outside its timetable and its policies."""
        s = await self.store.get_schedule(schedule_id)
        with self.tracing.submit(1) as traceparent:  # the operator's request (and its caller's context)
            fired = await self.store.fire_schedule(s, None, self._job_maker(s, self.clock(), traceparent))
        assert fired is not None and fired.jobs
        self._after_submit(fired.jobs)
        return fired.jobs[0]

    async def backfill_schedule(self, schedule_id: int, start: float, end: float, overlap: str,
                                dry_run: bool) -> tuple[list[float], BackfillResult]:  # fmt: skip
        """Make the runs of every fire time in [start, end] (past) that has none (see core/schedule/backfill.py)."""
        s = await self.store.get_schedule(schedule_id)
        now = self.clock()
        times = backfill_times(s, start, end, now)
        with self.tracing.submit(len(times)) as traceparent:  # one trace for the backfill's jobs
            out = await self.store.backfill_schedule(s, times, self._job_maker(s, now, traceparent), overlap, dry_run)
        self._after_submit(out.made)
        return times, out

    def _job_maker(self, s: Schedule, now: float, traceparent: str | None = None) -> Callable[[float | None], Job]:
        """The one place a schedule's run is made from its template (every firing, manual run and
        backfill goes through here): what a fire time turns into. For a workflow schedule, its run's
        end job (the store makes the workflow around it in the firing transaction: core.workflow.workflow_run)."""
        jitter = s.policy.jitter

        def make(fire_time: float | None) -> Job:
            run_at = None if fire_time is None else fire_time + jitter_offset(s.id, fire_time, jitter)
            if "workflow" in s.job:
                job = build_job(run_end_spec(s.name, s.job, run_at), now, self.policy)
            else:
                job = build_job(dict(s.job, run_at=run_at, delay=None), now, self.policy)
            job.traceparent = traceparent
            return job

        return make

    def _firing(self, s: Schedule, now: float) -> Firing:
        """A due schedule's firing, with the plan made ahead for it (see _prepare_firings) if that
        still holds at `now`: same row, fired at most PREPARED_VALID late, its next fire time ahead."""
        ahead = self._prepared.pop(s.id, None)
        holds = (ahead is not None and ahead.schedule.updated_at == s.updated_at
                 and ahead.plan.expected_next == s.next_fire_at and now - ahead.plan.expected_next <= PREPARED_VALID
                 and (ahead.plan.next_fire_at is None or ahead.plan.next_fire_at > now))  # fmt: skip
        plan = ahead.plan if holds and ahead is not None else plan_fires(s, now)
        return Firing(s, plan, self._job_maker(s, now))

    async def _prepare_firings(self, at: float) -> None:
        """Plan the schedules due at `at` (soon) before it comes: the plan is pure CPU (catch-up,
        next fire time), and 10,000 of them cost seconds that would otherwise make the fire late."""
        for k, s in enumerate(await self.store.due_schedules(at, FIRE_PREPARE_MAX)):
            if s.id not in self._prepared and s.next_fire_at is not None:
                self._prepared[s.id] = Firing(s, plan_fires(s, s.next_fire_at), self._job_maker(s, s.next_fire_at))
            if k % 200 == 199:
                await asyncio.sleep(0)  # the API and the other loops go on meanwhile

    def _traced(self, f: Firing) -> Firing:
        """The firing with its jobs in a trace of their own (when the firing's trace is sampled)."""
        traceparent = self.tracing.fired(f.schedule.id, len(f.plan.fire_times))
        if traceparent is None:
            return f
        make = f.make_job

        def traced(fire_time: float | None) -> Job:
            job = make(fire_time)
            job.traceparent = traceparent
            return job

        return Firing(f.schedule, f.plan, traced, f.ahead)

    async def _fire_due_schedules(self) -> None:
        """Fire every due schedule: the prepared ones first, `schedule_fire_batch` of them per
        transaction, then what else is due (not prepared, or changed since)."""
        batch = max(1, self.settings.schedule_fire_batch)
        ready = sorted((f for f in self._prepared.values() if (f.schedule.next_fire_at or 0) <= self.clock()),
                       key=lambda f: (f.schedule.next_fire_at, f.schedule.id))  # fmt: skip
        for i in range(0, len(ready), batch):
            now = self.clock()
            await self._fire([self._firing(f.schedule, now) for f in ready[i : i + batch]], now)
        while True:
            now = self.clock()
            due = await self.store.due_schedules(now, batch)
            if due:
                await self._fire([self._firing(s, now) for s in due], now)
            if len(due) < batch:
                return

    async def _fire(self, firings: list[Firing], now: float) -> None:
        # catch-up (which due times run) was planned; overlap (what runs beside what) is the store's
        results = await self.store.fire_schedules([self._traced(f) for f in firings])
        committed = self.clock()
        for f, fired in zip(firings, results, strict=True):
            if fired is not None:
                self._after_submit(fired.jobs)
                # late by the time its run became claimable: committed, and its fire time come
                late = [max(committed, t) - t if f.ahead else now - t for t in f.plan.fire_times]
                self.metrics.schedule_fired(len(fired.jobs), late, f.plan.missed_count)

    async def _write_ahead(self) -> None:
        """Write the runs of the fire times in (now, now + schedule_lead_seconds] before they come, as
        queued jobs whose run_at is the fire time (+ its jitter): they become claimable then with no
        write at the fire time, however many there are. The store writes a schedule's run only if its
        overlap outcome is already decided (schedule_runs.may_write_ahead) and moves its next fire time in
        the same transaction (another node, or this one after a restart, does not write it again); the
        others, and once or workflow schedules, fire when due. Each fire time is looked at once here:
        a schedule made or edited closer to its fire time than the lead fires when due."""
        lead = self.settings.schedule_lead_seconds
        now = self.clock()
        low, horizon = max(self._ahead_until, now), now + lead
        if lead <= 0 or horizon <= low:
            return
        due = await self.store.due_schedules(horizon, FIRE_PREPARE_MAX, after=low)
        self._ahead_until = due[-1].next_fire_at or horizon if len(due) == FIRE_PREPARE_MAX else horizon
        batch = max(1, self.settings.schedule_fire_batch)
        ahead = [s for s in due if s.kind != "once" and "workflow" not in s.job and s.next_fire_at is not None]
        for i in range(0, len(ahead), batch):
            now = self.clock()
            firings = []
            for s in ahead[i : i + batch]:
                t = s.next_fire_at
                assert t is not None
                if t > now:  # not come yet meanwhile (else it fires when due, with the catch-up policy)
                    firings.append(Firing(s, plan_fires(s, t), self._job_maker(s, now), ahead=True))
            if firings:
                await self._fire(firings, now)

    def _claim_at(self, run_at: float) -> None:
        """Have the dispatcher claim at `run_at` (a run written ahead becomes claimable then)."""
        if not self._due_runs or run_at not in (self._due_runs[0], self._due_runs[-1]):
            heapq.heappush(self._due_runs, run_at)
            if self._due_runs[0] == run_at and run_at - self.clock() < IDLE_POLL_MAX:
                self._wake_dispatch.set()  # perhaps sooner than the dispatcher's timer: it sets a new one

    # ------------------------------------------------------------ agents

    # ------------------------------------------------------------ loops

    async def _wait(self, event: asyncio.Event, timeout: float) -> bool:
        """Wait for `event` at most `timeout` seconds; whether it was set (woken, not timed out)."""
        woken = False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                woken = await event.wait()
        event.clear()
        return woken

    async def _dispatch_loop(self) -> None:
        idle = IdlePoll()  # what wakes it: commits (the bus), freed slots, agents, and the timers below
        found = True
        while True:
            timeout = idle.after(found)
            if self._next_room_at is not None:  # a rate limit refills its bucket then: claim again
                timeout = min(timeout, max(0.0, self._next_room_at - self.clock()))
                self._next_room_at = None
            if self._due_runs:  # runs written ahead become claimable at their run_at
                timeout = min(timeout, max(0.0, self._due_runs[0] - self.clock()))
            found = await self._wait(self._wake_dispatch, timeout)
            now = self.clock()
            while self._due_runs and self._due_runs[0] <= now:
                heapq.heappop(self._due_runs)
            while True:
                await self._gather_free_slots()
                try:
                    if not await self._dispatch_round():
                        break
                    found = True
                finally:
                    self._let_writes_go()  # nothing (more) to claim: what was held goes now

    async def _gather_free_slots(self) -> None:
        """Let freed slots add up for a moment before claiming, but only while every agent with
        room is still busy and either has less than half a claim free or was given its runs
        within the window (short runs, which end together: one claim takes all their slots,
        not one for each half). Runs that end a few at a time then share one claim transaction
        instead of each taking its own (the claim batch stays full whatever the jobs do), while
        an idle agent's first job is claimed at once."""
        window = self.settings.claim_coalesce_ms / 1000.0
        if window <= 0:
            return
        deadline = time.monotonic() + window
        while True:
            now = time.monotonic()
            ready = [s for s in self.hub.sessions.values() if s.free > 0]
            if not ready or not all(self._soon_freer(s, now, window) for s in ready):
                return
            if deadline <= now:
                return
            await self._wait(self._wake_dispatch, deadline - now)

    def _soon_freer(self, s: AgentSession, now: float, window: float) -> bool:
        """Whether more of the agent's slots are likely to come free within the window."""
        return s.busy > 0 and (s.free < self._claim_target(s) or now - s.assigned_at < window)

    def _claim_target(self, s: AgentSession) -> int:
        return max(1, min(s.slots, self.settings.claim_batch) // 2)

    async def _dispatch_round(self) -> bool:
        """Offer queued jobs to every agent with free slots once; True if any job was assigned."""
        ready = [s for s in self.hub.sessions.values() if s.free > 0]
        if not ready:
            return False
        paused = frozenset(q for q, lim in self.queue_settings.items() if lim.paused)
        limited = {q: lim.concurrency for q, lim in self.queue_settings.items()
                   if lim.concurrency is not None and not lim.paused}  # fmt: skip
        running = await self.store.running_counts() if limited else {}
        caps = {q: max(0, c - running.get(q, 0)) for q, c in limited.items()}
        assigned = False
        for s, plan in ((agent, c) for agent in ready for c in agent.claims()):
            if s.free <= 0 or s.name not in self.hub.sessions:
                continue
            mine = (
                caps
                if plan.caps is None
                else {**plan.caps, **{q: min(n, plan.caps.get(q, n)) for q, n in caps.items()}}
            )
            limit = min(plan.limit, s.free, self.settings.claim_batch)
            req = ClaimRequest(s.name, limit, plan.queues, paused | plan.leave, mine, s.labels,
                               held=held_by_limits(caps, plan, limit) if caps else frozenset())  # fmt: skip
            now = self.clock()
            # The claim's op is queued when claim_jobs first runs; the held results go with it.
            asyncio.get_running_loop().call_soon(self._let_writes_go)
            jobs = await self.store.claim_jobs(req, now)
            if req.wake_at is not None and (self._next_room_at is None or req.wake_at < self._next_room_at):
                self._next_room_at = req.wake_at
            if not jobs:
                continue
            self.metrics.claimed(jobs, now)
            self._pickup = (time.monotonic(), now - min(j.run_at for j in jobs))
            self.tracing.claimed(jobs, now, s.name)
            assigned = True
            self.claims += 1
            self.jobs_claimed += len(jobs)
            for j in jobs:
                if j.queue in caps:
                    caps[j.queue] -= 1
            if not (jobs := await self.breakers.gate(jobs, now)):
                continue
            try:
                await s.assign(jobs, await self._inputs(jobs))
            except (ChannelClosed, ConnectionError):
                log.warning("agent %s went away during an assignment; its leases will expire", s.name)
        return assigned

    async def _inputs(self, jobs: Sequence[Job]) -> dict[int, dict[str, Any]]:
        """What assignments carry beside the job: its parents' results, for tasks that ask for them."""
        wanted = [j.id for j in jobs if j.task.get("parent_results")]
        if not wanted:
            return {}
        found = await self.store.parent_results(wanted)
        return {i: parent_results_input(i, found.get(i, {})) for i in wanted}

    async def _promote_loop(self) -> None:
        idle = IdlePoll()  # a job made scheduled wakes it (the bus); the next run_at sets its timer
        woken = True
        while True:
            promoted, nxt = await self.store.promote_due_jobs(self.clock(), PROMOTE_BATCH)
            if promoted:
                self._wake_dispatch.set()
                if promoted == PROMOTE_BATCH:
                    continue
            self.next_promote_at = nxt if nxt is not None else float("inf")
            timeout = idle.after(woken or promoted > 0)
            delay = timeout if nxt is None else min(timeout, max(0.0, nxt - self.clock()))
            woken = await self._wait(self._wake_promote, delay)

    async def _reap_loop(self) -> None:
        announced = 0.0
        interval = self.settings.reap_interval_seconds
        stalls = StallGrace(interval, self.settings.heartbeat_seconds, self.settings.lease_seconds)
        look_at = 0.0  # no lease runs out before this: the store is not asked sooner
        while True:
            slept_from = time.monotonic()
            await asyncio.sleep(interval)
            now = time.monotonic()
            if late := stalls.woke(slept_from, now):
                log.warning(
                    "this node's event loop stalled for %.1f s: agents and leases are judged again in %.1f s, "
                    "once the heartbeats that waited unread are in",
                    late,
                    stalls.judge_after - now,
                )
            if not stalls.may_judge(now):
                continue
            await self.hub.drop_silent_agents()
            if time.monotonic() - announced >= self.settings.heartbeat_seconds:
                self.hub.announce()
                announced = time.monotonic()
            now = self.clock()
            if now < look_at:
                continue
            soonest = await self.store.next_lease_expiry()
            if soonest is None or soonest >= now:
                # A lease granted from now on (by any node: claims lease for policy.lease_seconds) runs
                # out a lease later at the soonest, and heartbeats only move leases later.
                later = now + min(self.policy.lease_seconds, IDLE_POLL_MAX)
                look_at = later if soonest is None else min(soonest, later)
                continue
            ids = await self.store.expired_lease_ids(now, 1000)
            if not ids:
                continue
            out = await self.change_many(ids, lambda job: decide_lease_expired(job, self.clock(), self.policy))
            for job_id, res in out.items():
                if isinstance(res, Job):
                    self.metrics.lease_expired(res.queue)
                    log.warning(
                        "job %s: lease expired (agent %s), attempt %s recorded as lost", job_id, res.agent, res.attempt
                    )
                    for s in self.hub.sessions.values():
                        s.running.pop(job_id, None)
            self._wake_promote.set()
            self._wake_dispatch.set()

    async def _schedule_loop(self) -> None:
        swept = self.clock()
        idle = IdlePoll()  # a schedule's change wakes it (the bus); the next fire time sets its timer
        woken = True
        while True:
            await self._fire_due_schedules()
            if self.clock() - swept >= BUFFER_SWEEP_EVERY:
                swept = self.clock()
                moved = await self.store.sweep_buffered_runs()
                if moved:
                    log.warning("schedules: %d buffered run(s) moved by the sweep (a release was missed, or their "
                                "schedule is gone)", moved)  # fmt: skip
            await self._write_ahead()
            nxt = await self.store.next_schedule_at()
            wake = nxt
            if self.settings.schedule_lead_seconds > 0:  # the next fire time not looked at yet, a lead before it
                later = await self.store.next_schedule_at(after=self._ahead_until)
                if later is not None:
                    later -= self.settings.schedule_lead_seconds
                    wake = later if wake is None else min(wake, later)
            ahead = self.settings.schedule_prepare_seconds
            if nxt is not None and ahead > 0 and nxt - self.clock() <= ahead and nxt != self._prepared_for:
                self._prepared_for = nxt  # once per fire time: a schedule made later is planned when due
                await self._prepare_firings(nxt)
            timeout = idle.after(woken)
            delay = timeout if wake is None else min(timeout, max(0.0, wake - self.clock()))
            woken = await self._wait(self._wake_schedules, delay)

    async def _prune_loop(self) -> None:
        while True:
            cutoff = self.clock() - self.settings.event_retention_hours * 3600
            n = await self.store.prune_events(cutoff)
            if n:
                log.info("pruned %d events older than %.0f h", n, self.settings.event_retention_hours)
            await self.store.prune_pickup(self.clock() - PICKUP_KEEP_SECONDS)
            n = await self.store.release_expired_unique_keys(self.clock())
            if n:
                log.info("let go of %d unique keys whose window passed", n)
            days = self.settings.audit_retention_days
            n = await self.store.prune_audit(self.clock() - days * 86400)
            if n:
                log.info("pruned %d audit entries older than %g days", n, days)
            await asyncio.sleep(PRUNE_EVERY)

    async def _bus_loop(self) -> None:
        """Follow committed events from every node: queue settings, cancel requests, and work that
        another node made due (so this node's loops wake at once, not at their next safety poll)."""
        last = await self.store.last_seq()
        with self.bus.subscribe() as sub:
            while True:
                events = await sub.get()
                if sub.overflowed:  # fell behind: catch up from the store
                    sub.reset()
                    self.queue_settings = await self.store.queue_settings()  # type: ignore[attr-defined]
                    events = await self.store.events_since(last, 100_000, CATCH_UP_FILTER)
                    self._wake_dispatch.set()
                    self._wake_promote.set()
                for i, e in enumerate(events, 1):
                    if e.seq is not None:
                        last = max(last, e.seq)
                    await self._follow(e)
                    if i % FOLLOW_SLICE == 0:  # a 10,000-job commit: let its caller's answer go out between slices
                        await asyncio.sleep(0)

    async def _follow(self, e: Event) -> None:
        t = e.type
        if t.startswith("queue."):
            q = orjson.loads(e.body)["data"]["queue"]
            self.queue_settings[q["name"]] = QueueLimits.of(q)
            self._wake_dispatch.set()
        elif t == "job.cancel_requested":
            job = orjson.loads(e.body)["data"]["job"]
            await self.hub.send_cancel(job["agent"], job["id"], job["attempt"])
        elif t in ("job.created", "job.queued", "job.failed", "job.scheduled"):
            job = orjson.loads(e.body)["data"]["job"]
            if job["state"] == "blocked":  # waits for its parents, not for a time (a workflow's 9,999 children)
                return
            run_at = datetime.fromisoformat(job["run_at"]).timestamp()
            if job["state"] == "queued" and run_at > self.clock():  # written ahead (perhaps by another node)
                self._claim_at(run_at)
            elif job["state"] == "queued":
                self._wake_dispatch.set()
            elif run_at < self.next_promote_at:
                self._wake_promote.set()
        elif t in FINISHED and _limits_running(self.queue_settings.get(e.queue or "", UNLIMITED)):
            self._wake_dispatch.set()  # a slot of a limited queue or key came free (perhaps on another node)
        elif t.startswith("schedule."):
            self._wake_schedules.set()
        elif t.startswith("breaker."):
            self.breakers.heard(t)
        elif t == "agent.connected":
            await self.hub.heard_connected(orjson.loads(e.body)["data"])
        elif t == "agent.disconnected":
            self.hub.heard_disconnected(orjson.loads(e.body)["data"])
        elif t == "agent.status":
            self.hub.remember(orjson.loads(e.body)["data"])
        elif t == "agent.drain":
            name = orjson.loads(e.body)["data"]["agent"]
            if name in self.hub.sessions:
                await self.hub.drain(name)


def _limits_running(limits: QueueLimits) -> bool:
    """Whether a job of the queue ending may let a held one start: its concurrency or a key's."""
    return limits.concurrency is not None or limits.key_concurrency is not None
