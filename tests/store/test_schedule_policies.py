"""Overlap and catch-up policies as the stores apply them: one suite on SQLite and PostgreSQL.

The decisions are pure (core/schedule/, tests/core/test_schedule_policies.py); here the firing
transaction reads the schedule's runs that have not ended, makes, buffers, skips and cancels, and a
run that ends releases the next buffered one in its own transaction.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import orjson

from core.model import RunResult, decide_cancel, decide_finish, utcnow
from core.schedule import BUFFER_ALL_MAX, FirePlan, Schedule, SchedulePolicy
from core.store.base import ClaimRequest, JobFilter
from core.store.schedule_runs import Firing
from tests.store.conftest import POLICY, StoreKit
from tests.store.test_conformance import a_schedule, new_job, two_nodes


def plan(*fire_times: float, missed: int = 0, expected: float | None = None) -> FirePlan:
    last = max(fire_times) if fire_times else (expected or 0.0)
    return FirePlan(expected_next=expected if expected is not None else min(fire_times), fire_times=list(fire_times),
                    missed_count=missed, next_fire_at=last + 60)  # fmt: skip


def make_job(fire_time: float | None) -> Any:
    return new_job(now=utcnow(), queue="cron", run_at=None if fire_time is None else min(fire_time, utcnow()))


async def schedule(kit: StoreKit, overlap: str, first: float) -> Schedule:
    return await kit.store.create_schedule(a_schedule(policy=SchedulePolicy(overlap=overlap), next_fire_at=first))


async def fire(kit: StoreKit, s: Schedule, *times: float, store: Any = None) -> Any:
    """Fire `times` as the loop would: from the schedule as stored now."""
    fresh = await kit.store.get_schedule(s.id)
    return await (store or kit.store).fire_schedule(fresh, plan(*times, expected=fresh.next_fire_at), make_job)


async def states(kit: StoreKit, s: Schedule) -> list[tuple[float | None, str]]:
    jobs = await kit.store.list_jobs(JobFilter(schedule_id=s.id), None, 1000)
    return sorted((j.fire_time, j.state) for j in jobs)


async def run_and_finish(kit: StoreKit, outcome: str = "succeeded", store: Any = None) -> list[int]:
    """An agent takes every queued job of queue 'cron' and reports `outcome` for each."""
    st = store or kit.store
    taken = await st.claim_jobs(ClaimRequest("a1", 100, frozenset({"cron"})), utcnow())
    await finish(kit, [j.id for j in taken], outcome, st)
    return [j.id for j in taken]


async def finish(kit: StoreKit, ids: list[int], outcome: str = "succeeded", store: Any = None) -> None:
    def decide(job: Any) -> Any:
        if outcome == "dead":  # its last attempt failed
            job.max_attempts = job.attempt
            return decide_finish(job, RunResult(job.id, job.attempt, "failed", error="exit code 1"), utcnow(), POLICY)
        return decide_finish(job, RunResult(job.id, job.attempt, outcome, error=None), utcnow(), POLICY)

    if ids:
        await (store or kit.store).change_jobs(dict.fromkeys(ids, decide))


def events(kit: StoreKit, type_: str) -> list[dict[str, Any]]:
    return [orjson.loads(e.body)["data"] for e in kit.committed if e.type == type_]


async def test_skip_records_the_skipped_fire_time_and_runs_again_once_the_run_ended(kit: StoreKit) -> None:
    t = utcnow() - 300
    s = await schedule(kit, "skip", t)
    first = await fire(kit, s, t)
    assert [j.fire_time for j in first.jobs] == [t]
    second = await fire(kit, s, t + 60)
    assert second.jobs == [] and second.decision.skip == [t + 60]
    stored = await kit.store.get_schedule(s.id)
    assert (stored.skipped, stored.last_skipped_at, stored.fired, stored.next_fire_at) == (1, t + 60, 1, t + 120)
    [skipped] = events(kit, "schedule.skipped")
    assert skipped["count"] == 1 and skipped["overlap"] == "skip" and "still queued" in skipped["reason"], skipped
    await run_and_finish(kit)
    third = await fire(kit, s, t + 120)
    assert [j.fire_time for j in third.jobs] == [t + 120], "the run ended: the next fire time runs"


async def test_buffer_one_holds_one_run_and_starts_it_when_the_current_one_ends(kit: StoreKit) -> None:
    t = utcnow() - 300
    s = await schedule(kit, "buffer_one", t)
    await fire(kit, s, t)
    buffered = await fire(kit, s, t + 60)
    assert [j.state for j in buffered.jobs] == ["blocked"]
    skipped = await fire(kit, s, t + 120)
    assert skipped.decision.skip == [t + 120] and "1 run(s) are buffered already" in skipped.decision.skip_reason
    assert await states(kit, s) == [(t, "queued"), (t + 60, "blocked")]
    kit.committed.clear()
    await run_and_finish(kit)
    assert await states(kit, s) == [(t, "succeeded"), (t + 60, "queued")], "released in the same transaction"
    types = [e.type for e in kit.committed]
    assert types == ["job.running", "job.succeeded", "job.queued"], types


async def test_buffer_all_is_bounded_and_releases_in_fire_time_order(kit: StoreKit) -> None:
    t = utcnow() - 10_000
    s = await schedule(kit, "buffer_all", t)
    times = [t + 60 * i for i in range(BUFFER_ALL_MAX + 3)]
    fired = await fire(kit, s, *times)
    assert len(fired.jobs) == BUFFER_ALL_MAX + 1 and fired.decision.skip == times[-2:]
    assert f"{BUFFER_ALL_MAX} run(s) are buffered already" in fired.decision.skip_reason
    for expected in times[:4]:
        [job_id] = await run_and_finish(kit)
        assert (await kit.store.get_job(job_id)).fire_time == expected, "oldest buffered first"
    stored = await kit.store.get_schedule(s.id)
    assert (stored.fired, stored.skipped) == (BUFFER_ALL_MAX + 1, 2)


async def test_cancel_previous_waits_for_the_running_run_to_stop(kit: StoreKit) -> None:
    t = utcnow() - 300
    s = await schedule(kit, "cancel_previous", t)
    await fire(kit, s, t)
    [running] = await kit.store.claim_jobs(ClaimRequest("a1", 1, frozenset({"cron"})), utcnow())
    second = await fire(kit, s, t + 60)
    assert second.decision.cancel == [running.id] and [j.state for j in second.jobs] == ["blocked"]
    assert (await kit.store.get_job(running.id)).cancel_requested
    assert [e["job"]["id"] for e in events(kit, "job.cancel_requested")] == [running.id]
    await finish(kit, [running.id], "cancelled")  # the agent stopped it
    assert await states(kit, s) == [(t, "cancelled"), (t + 60, "queued")]
    # a previous run that has not started is cancelled at once, and the new one is not held back
    third = await fire(kit, s, t + 120)
    assert [j.state for j in third.jobs] == ["queued"]
    assert await states(kit, s) == [(t, "cancelled"), (t + 60, "cancelled"), (t + 120, "queued")]


async def test_allow_runs_side_by_side(kit: StoreKit) -> None:
    t = utcnow() - 300
    s = await schedule(kit, "allow", t)
    await fire(kit, s, t)
    await fire(kit, s, t + 60, t + 120)
    assert await states(kit, s) == [(t, "queued"), (t + 60, "queued"), (t + 120, "queued")]


async def test_missed_fire_times_are_counted_and_a_known_fire_time_is_not_made_twice(kit: StoreKit) -> None:
    t = utcnow() - 3600
    s = await schedule(kit, "allow", t)
    await kit.store.fire_schedule(s, None, make_job)  # a manual run: outside the policies
    p = FirePlan(expected_next=t, fire_times=[t + 60, t + 120], missed=[t], missed_count=1, next_fire_at=t + 180,
                 policy="all")  # fmt: skip
    fired = await kit.store.fire_schedule(await kit.store.get_schedule(s.id), p, make_job)
    assert [j.fire_time for j in fired.jobs] == [t + 60, t + 120]
    stored = await kit.store.get_schedule(s.id)
    assert (stored.missed, stored.fired, stored.last_fire_at, stored.next_fire_at) == (1, 3, t + 120, t + 180)
    [missed] = events(kit, "schedule.missed")
    assert (missed["count"], missed["catch_up"], len(missed["fire_times"])) == (1, "all", 1), missed
    again = FirePlan(expected_next=t + 180, fire_times=[t + 120, t + 180], next_fire_at=t + 240)
    refired = await kit.store.fire_schedule(stored, again, make_job)
    assert [j.fire_time for j in refired.jobs] == [t + 180], "t + 120 has its job already"


async def test_one_pass_fires_many_schedules_together_and_leaves_out_one_edited_since_its_plan(kit: StoreKit) -> None:
    t = utcnow() - 300
    busy, free, edited = [await schedule(kit, p, t) for p in ("skip", "allow", "allow")]
    await fire(kit, busy, t)  # its run is still queued: the next fire time is skipped
    planned = [await kit.store.get_schedule(x.id) for x in (busy, free, edited)]
    change = await kit.store.get_schedule(edited.id)
    change.job, change.updated_at = {**change.job, "queue": "elsewhere"}, change.updated_at + 1
    await kit.store.update_schedule(change, "schedule.updated")
    kit.committed.clear()
    out = await kit.store.fire_schedules([Firing(x, plan(t + 60, expected=x.next_fire_at), make_job) for x in planned])
    assert out[0] is not None and out[0].jobs == [] and out[0].decision.skip == [t + 60]
    assert out[1] is not None and [j.fire_time for j in out[1].jobs] == [t + 60]
    assert out[2] is None, "edited after the plan was made: not fired from the old template"
    got = {x.id: await kit.store.get_schedule(x.id) for x in (busy, free, edited)}
    assert (got[busy.id].fired, got[busy.id].skipped, got[busy.id].next_fire_at) == (1, 1, t + 120)
    assert (got[free.id].fired, got[free.id].next_fire_at) == (1, t + 120)
    assert (got[edited.id].fired, got[edited.id].next_fire_at) == (0, t), "left for the next pass to plan again"
    types = sorted(e.type for e in kit.committed)
    assert types == ["job.created", "schedule.fired", "schedule.skipped"], types


async def test_a_firing_adds_to_the_counters_as_they_are_now_not_as_the_plan_read_them(kit: StoreKit) -> None:
    t = utcnow() - 300
    s = await schedule(kit, "allow", t)
    planned = await kit.store.get_schedule(s.id)
    await kit.store.fire_schedule(planned, None, make_job)  # a manual run after the plan was read
    await kit.store.fire_schedule(planned, plan(t, missed=2), make_job)
    stored = await kit.store.get_schedule(s.id)
    assert (stored.fired, stored.missed) == (2, 2), f"fired {stored.fired} (expected 2), missed {stored.missed}"


async def test_deleting_a_schedule_cancels_its_buffered_runs_with_the_reason_and_keeps_the_rest(kit: StoreKit) -> None:
    t = utcnow() - 600
    s = await schedule(kit, "buffer_all", t)
    fired = await fire(kit, s, t, t + 60, t + 120)
    held = [j.id for j in fired.jobs[1:]]
    kit.committed.clear()
    await kit.store.delete_schedule(s.id)
    assert await states(kit, s) == [(t, "queued"), (t + 60, "cancelled"), (t + 120, "cancelled")]
    cancelled = [e for e in events(kit, "job.cancelled")]
    assert [e["job"]["id"] for e in cancelled] == held, cancelled
    assert all(f"schedule {s.id} was deleted" in e["reason"] for e in cancelled), cancelled
    [deleted] = events(kit, "schedule.deleted")
    assert deleted == {"schedule_id": s.id, "cancelled": held}
    assert await run_and_finish(kit) == [fired.jobs[0].id], "the run that was going still runs"


async def _raw(kit: StoreKit, statement: str, *args: Any) -> None:
    """A statement outside the store (data an older version left behind)."""
    if kit.kind == "sqlite":
        import sqlite3

        conn = sqlite3.connect(kit.url)
        conn.execute(statement.replace("$1", "?"), args)
        conn.commit()
        conn.close()
    else:
        import asyncpg

        pg = await asyncpg.connect(kit.url)
        try:
            await pg.execute(statement, *args)
        finally:
            await pg.close()


async def test_the_sweep_cancels_buffered_runs_whose_schedule_is_gone(kit: StoreKit) -> None:
    t = utcnow() - 600
    s = await schedule(kit, "buffer_one", t)
    await fire(kit, s, t)
    held = (await fire(kit, s, t + 60)).jobs[0]
    await _raw(kit, "DELETE FROM schedules WHERE id = $1", s.id)  # deleted by a version that left them blocked
    assert await kit.store.sweep_buffered_runs() == 1
    job = await kit.store.get_job(held.id)
    assert job.state == "cancelled", job.state
    assert await kit.store.sweep_buffered_runs() == 0


@two_nodes
async def test_the_sweep_starts_a_buffered_run_whose_release_was_skipped(kit: StoreKit) -> None:
    """The run before it ended while another transaction held the buffered run's row: SKIP LOCKED
    left it blocked with nothing going. The sweep starts it."""
    import asyncpg

    t = utcnow() - 600
    s = await schedule(kit, "buffer_one", t)
    await fire(kit, s, t)
    held = (await fire(kit, s, t + 60)).jobs[0]
    pg = await asyncpg.connect(kit.url)
    try:
        async with pg.transaction():
            await pg.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", held.id)
            await run_and_finish(kit)
    finally:
        await pg.close()
    assert await states(kit, s) == [(t, "succeeded"), (t + 60, "blocked")], "the release was skipped"
    assert await kit.store.sweep_buffered_runs() == 1
    assert await states(kit, s) == [(t, "succeeded"), (t + 60, "queued")]
    assert await kit.store.sweep_buffered_runs() == 0, "nothing left to move"


async def test_a_cancelled_buffered_run_is_not_started_and_the_next_one_is(kit: StoreKit) -> None:
    t = utcnow() - 600
    s = await schedule(kit, "buffer_all", t)
    fired = await fire(kit, s, t, t + 60, t + 120)
    held = fired.jobs[1]
    now = utcnow()
    await kit.store.change_jobs({held.id: functools.partial(decide_cancel, now=now, policy=POLICY)})
    await run_and_finish(kit)
    assert await states(kit, s) == [(t, "succeeded"), (t + 60, "cancelled"), (t + 120, "queued")]


@two_nodes
async def test_skip_holds_across_two_nodes_firing_and_finishing_at_once(kit: StoreKit) -> None:
    """Two nodes fire every fire time together while runs end on either node: never two runs going."""
    other = await kit.another()
    t = utcnow() - 10_000
    s = await schedule(kit, "skip", t)
    for i in range(30):
        fresh = await kit.store.get_schedule(s.id)
        p = plan(t + 60 * i, expected=fresh.next_fire_at)
        taken = await kit.store.claim_jobs(ClaimRequest("a1", 5, frozenset({"cron"})), utcnow())
        await asyncio.gather(
            kit.store.fire_schedule(fresh, p, make_job),
            other.fire_schedule(fresh, p, make_job),
            finish(kit, [j.id for j in taken], "succeeded", other if i % 2 else kit.store),
        )
        going = [st for _, st in await states(kit, s) if st not in ("succeeded", "dead", "cancelled")]
        assert len(going) <= 1, f"round {i}: {len(going)} runs going at once: {going}"
    stored = await kit.store.get_schedule(s.id)
    assert stored.fired + stored.skipped == 30 and stored.fired >= 10, (stored.fired, stored.skipped)


async def test_claimed_job_cancel_in_fire_is_one_transaction(kit: StoreKit) -> None:
    """cancel_previous: the cancel request and the buffered run commit together (one batch of events)."""
    t = utcnow() - 300
    s = await schedule(kit, "cancel_previous", t)
    await fire(kit, s, t)
    await kit.store.claim_jobs(ClaimRequest("a1", 1, frozenset({"cron"})), utcnow())
    kit.committed.clear()
    await fire(kit, s, t + 60)
    types = [e.type for e in kit.committed]
    assert types == ["job.created", "job.cancel_requested", "schedule.fired", "schedule.cancelled_previous"], types


async def test_consecutive_dead_runs_pause_the_schedule_with_its_reason_in_the_same_transaction(kit: StoreKit) -> None:
    t = utcnow() - 600
    policy = SchedulePolicy(overlap="allow", pause_after_failures=2)
    s = await kit.store.create_schedule(a_schedule(policy=policy, next_fire_at=t))
    await fire(kit, s, t, t + 60)
    [a, b] = await kit.store.claim_jobs(ClaimRequest("a1", 2, frozenset({"cron"})), utcnow())
    await finish(kit, [a.id], "dead")
    assert (await kit.store.get_schedule(s.id)).failures == 1
    await finish(kit, [b.id], "succeeded")
    assert (await kit.store.get_schedule(s.id)).failures == 0, "a success starts the count again"
    await fire(kit, s, t + 120, t + 180)
    taken = await kit.store.claim_jobs(ClaimRequest("a1", 2, frozenset({"cron"})), utcnow())
    kit.committed.clear()
    await finish(kit, [j.id for j in taken], "dead")
    stored = await kit.store.get_schedule(s.id)
    assert stored.paused and stored.next_fire_at is None and stored.failures == 2
    assert stored.paused_reason is not None and "2 consecutive failed runs" in stored.paused_reason
    types = [e.type for e in kit.committed]
    assert types == ["job.dead", "job.dead", "schedule.paused"], types
    [paused] = events(kit, "schedule.paused")
    assert paused["reason"] == stored.paused_reason and paused["schedule"]["paused"] is True
    assert await kit.store.due_schedules(utcnow() + 3600) == [], "a paused schedule is not due"


async def test_backfill_makes_each_fire_time_once_however_often_its_range_is_backfilled(kit: StoreKit) -> None:
    t = utcnow() - 7200
    s = await schedule(kit, "skip", t)
    await fire(kit, s, t)  # a run that happened (still queued)
    times = [t + 60 * i for i in range(10)]
    dry = await kit.store.backfill_schedule(s, times, make_job, "buffer_all", dry_run=True)
    assert (dry.fire_times, dry.existing, dry.made) == (10, 1, [])
    assert len(await states(kit, s)) == 1, "a dry run writes nothing"
    kit.committed.clear()
    first = await kit.store.backfill_schedule(s, times, make_job, "buffer_all")
    assert [j.fire_time for j in first.made] == times[1:]
    assert all(j.state == "blocked" for j in first.made), "one after another: the first run still goes"
    [event] = events(kit, "schedule.backfilled")
    assert (event["fire_times"], event["existing"], event["made"]) == (10, 1, 9), event
    again = await kit.store.backfill_schedule(s, [t - 60, *times, t + 600], make_job, "buffer_all")
    assert [j.fire_time for j in again.made] == [t - 60, t + 600] and again.existing == 10
    # a range shorter than the runs still waiting is buffered whole too (it was skipped: hypothesis found it)
    one = await kit.store.backfill_schedule(s, [t - 120], make_job, "buffer_all")
    assert [(j.fire_time, j.state) for j in one.made] == [(t - 120, "blocked")], one
    got = await states(kit, s)
    assert [ft for ft, _ in got] == sorted({t - 120, t - 60, *times, t + 600}), "every fire time exactly once"
    for expected in [t, t - 120, t - 60, *times[1:3]]:  # oldest buffered first, once the run before ends
        [job_id] = await run_and_finish(kit)
        assert (await kit.store.get_job(job_id)).fire_time == expected


async def test_backfill_side_by_side_queues_every_run(kit: StoreKit) -> None:
    t = utcnow() - 7200
    s = await schedule(kit, "skip", t)
    out = await kit.store.backfill_schedule(s, [t, t + 60, t + 120], make_job, "allow")
    assert [j.state for j in out.made] == ["queued"] * 3
    assert (await kit.store.get_schedule(s.id)).fired == 3
    assert await kit.store.runs_at(s.id, [t, t + 60, t + 1]) == {t: (out.made[0].id, "queued"),
                                                                 t + 60: (out.made[1].id, "queued")}  # fmt: skip
