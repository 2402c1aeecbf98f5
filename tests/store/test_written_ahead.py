"""Runs written ahead of their fire time (core/engine.py _write_ahead), on SQLite and PostgreSQL.

The engine runs on a clock of its own an hour ahead of the store's, so no wall-clock time decides
anything: a fire time T is "still to come" for the store and the engine alike, and each claim is made
at an instant the test names (just before T, at T).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson

from core.bus import LocalBus
from core.config import Settings
from core.engine import Engine
from core.model import Job, utcnow
from core.schedule import Schedule, SchedulePolicy
from core.store.base import ClaimRequest, JobFilter
from tests.store.conftest import StoreKit
from tests.store.test_conformance import a_schedule


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def fire_time() -> float:
    """A whole minute an hour from now: still to come for the store's own clock throughout a test."""
    return (utcnow() // 60 + 60) * 60


async def setup(
    kit: StoreKit, tmp_path: Path, overlap: str = "allow", **settings: Any
) -> tuple[Engine, Clock, Schedule, float]:
    t = fire_time()
    clock = Clock(t - 3)
    engine = Engine(kit.store, LocalBus(), Settings(data_dir=tmp_path, **settings), clock=clock)
    policy = SchedulePolicy(overlap=overlap)
    s = await kit.store.create_schedule(
        a_schedule(anchor=t, next_fire_at=t, created_at=t - 600, updated_at=t - 600, policy=policy)
    )
    return engine, clock, s, t


async def runs(kit: StoreKit, s: Schedule) -> list[Job]:
    return sorted(await kit.store.list_jobs(JobFilter(schedule_id=s.id), None, 100), key=lambda j: j.id)


async def claim(kit: StoreKit, at: float, store: Any = None) -> list[Job]:
    return list(await (store or kit.store).claim_jobs(ClaimRequest("a1", 100, frozenset({"cron"})), at))


def cancel_reasons(kit: StoreKit) -> list[str]:
    return [orjson.loads(e.body)["data"].get("reason", "") for e in kit.committed if e.type == "job.cancelled"]


async def test_a_run_written_ahead_is_claimed_at_its_fire_time_not_before_and_written_once(
    kit: StoreKit, tmp_path: Path
) -> None:
    engine, clock, s, t = await setup(kit, tmp_path)
    await engine._write_ahead()
    [run] = await runs(kit, s)
    assert (run.state, run.run_at, run.fire_time) == ("queued", t, t), (run.state, run.run_at, run.fire_time)
    stored = await kit.store.get_schedule(s.id)
    assert (stored.next_fire_at, stored.fired) == (t + 60, 1), "the bookkeeping moved in the same transaction"
    assert t in engine._due_runs, "the dispatcher claims at the fire time"
    why = (await engine.waiting_for([run]))[run.id] or ""
    assert why.startswith("written ahead of its fire time"), why
    other = kit.store if kit.kind == "sqlite" else await kit.another()
    again = Engine(other, LocalBus(), Settings(data_dir=tmp_path / "b"), clock=Clock(t - 2))
    await again._write_ahead()  # another node (or this one restarted) looks at the same fire time
    clock.now = t
    await engine._fire_due_schedules()
    assert [j.id for j in await runs(kit, s)] == [run.id], "one run of T, written once"
    assert await claim(kit, t - 0.001) == [], "not claimable before its fire time"
    assert [j.id for j in await claim(kit, t)] == [run.id], "claimable at its fire time, with no write at T"


async def test_skip_writes_ahead_only_while_no_run_of_the_schedule_is_going(kit: StoreKit, tmp_path: Path) -> None:
    engine, clock, s, t = await setup(kit, tmp_path, overlap="skip")
    manual = await engine.run_schedule_now(s.id)
    await engine._write_ahead()
    assert [j.id for j in await runs(kit, s)] == [manual.id], "a run is going: T is decided when it comes"
    assert (await kit.store.get_schedule(s.id)).next_fire_at == t
    clock.now = t
    await engine._fire_due_schedules()
    stored = await kit.store.get_schedule(s.id)
    assert (stored.skipped, stored.next_fire_at) == (1, t + 60), "skipped at T, as without writing ahead"


async def test_a_run_by_hand_withdraws_the_run_written_ahead_and_the_fire_time_is_decided_when_due(
    kit: StoreKit, tmp_path: Path
) -> None:
    engine, clock, s, t = await setup(kit, tmp_path, overlap="skip")
    await engine._write_ahead()
    [ahead] = await runs(kit, s)
    manual = await engine.run_schedule_now(s.id)
    got = {j.id: j for j in await runs(kit, s)}
    assert (got[ahead.id].state, got[ahead.id].fire_time) == ("cancelled", None), got[ahead.id]
    assert any("run by hand" in r for r in cancel_reasons(kit)), cancel_reasons(kit)
    assert (await kit.store.get_schedule(s.id)).next_fire_at == t
    clock.now = t
    await engine._fire_due_schedules()
    assert (await kit.store.get_schedule(s.id)).skipped == 1, "the run by hand still goes at T: skip"
    assert {j.id for j in await runs(kit, s) if j.state != "cancelled"} == {manual.id}


async def test_pausing_withdraws_the_run_written_ahead_and_resuming_fires_its_time_once(
    kit: StoreKit, tmp_path: Path
) -> None:
    engine, clock, s, t = await setup(kit, tmp_path)
    await engine._write_ahead()
    [ahead] = await runs(kit, s)
    await engine.set_schedule_paused(s.id, True)
    [cancelled] = await runs(kit, s)
    assert (cancelled.id, cancelled.state, cancelled.fire_time) == (ahead.id, "cancelled", None)
    assert any("paused before the fire time" in r for r in cancel_reasons(kit)), cancel_reasons(kit)
    stored = await kit.store.get_schedule(s.id)
    assert (stored.fired, stored.last_fire_at, stored.next_fire_at) == (0, None, None), "it did not fire"
    assert await claim(kit, t + 1) == [], "nothing to claim at T"
    await engine.set_schedule_paused(s.id, False)
    clock.now = t
    await engine._fire_due_schedules()
    live = [j for j in await runs(kit, s) if j.state != "cancelled"]
    assert [(j.fire_time, j.state) for j in live] == [(t, "queued")], "T fires once after the resume"


async def test_an_edit_rewrites_the_run_written_ahead_from_the_new_template(kit: StoreKit, tmp_path: Path) -> None:
    engine, clock, s, t = await setup(kit, tmp_path)
    await engine._write_ahead()
    read = await kit.store.get_schedule(s.id)
    before = copy.deepcopy(read)
    read.job = {**read.job, "queue": "edited"}
    await engine.update_schedule(read, before=before)
    [old] = await runs(kit, s)
    assert (old.state, old.queue) == ("cancelled", "cron"), (old.state, old.queue)
    assert (await kit.store.get_schedule(s.id)).next_fire_at == t, "T is the edited schedule's again"
    clock.now = t
    await engine._fire_due_schedules()
    live = [(j.fire_time, j.queue) for j in await runs(kit, s) if j.state != "cancelled"]
    assert live == [(t, "edited")], live


async def test_deleting_the_schedule_withdraws_its_run_written_ahead(kit: StoreKit, tmp_path: Path) -> None:
    engine, _, s, t = await setup(kit, tmp_path)
    await engine._write_ahead()
    [ahead] = await runs(kit, s)
    await kit.store.delete_schedule(s.id)
    assert (await kit.store.get_job(ahead.id)).state == "cancelled"
    assert any("deleted before the fire time" in r for r in cancel_reasons(kit)), cancel_reasons(kit)
    assert await claim(kit, t + 1) == []


async def test_run_now_makes_a_run_written_ahead_claimable_at_once(kit: StoreKit, tmp_path: Path) -> None:
    engine, clock, s, t = await setup(kit, tmp_path)
    await engine._write_ahead()
    [ahead] = await runs(kit, s)
    done = await engine.run_now(ahead.id)
    assert (done.state, done.run_at, done.fire_time) == ("queued", clock.now, t), "still the run of T"
    assert [j.id for j in await claim(kit, clock.now)] == [ahead.id]


async def test_no_lead_writes_nothing_ahead(kit: StoreKit, tmp_path: Path) -> None:
    engine, _, s, t = await setup(kit, tmp_path, schedule_lead_seconds=0.0)
    await engine._write_ahead()
    assert await runs(kit, s) == [] and (await kit.store.get_schedule(s.id)).next_fire_at == t
