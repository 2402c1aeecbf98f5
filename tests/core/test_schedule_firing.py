"""The engine's firing pass with a fake clock on a real SQLite store: schedules planned ahead of
their fire time, fired in batches, and what an edit made after the plan does."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from core.bus import LocalBus
from core.config import Settings
from core.engine import Engine
from core.model import RunResult, decide_finish
from core.schedule import Schedule, SchedulePolicy
from core.store.base import ClaimRequest, JobFilter
from core.store.sqlite import SQLiteStore
from tests.store.conftest import POLICY

NOOP = {"kind": "python", "function": "agents.builtin:noop"}
T = 1_900_000_020.0  # a whole minute


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "jobdeck.db", POLICY, on_commit=lambda events: None)
    await s.open()
    yield s
    await s.close()


def every_minute(i: int, queue: str = "cron") -> Schedule:
    return Schedule(id=0, name=f"s{i}", kind="cron", cron="* * * * *", interval=None, at=None, timezone="UTC",
                    anchor=T - 600, job={"task": NOOP, "queue": queue}, paused=False, next_fire_at=T,
                    last_fire_at=None, created_at=T - 600, updated_at=T - 600,
                    policy=SchedulePolicy(overlap="allow"))  # fmt: skip


async def test_schedules_planned_ahead_fire_once_each_in_batches_and_an_edit_since_the_plan_wins(
    store: SQLiteStore, tmp_path: Path
) -> None:
    clock = Clock(T - 2)
    engine = Engine(store, LocalBus(), Settings(data_dir=tmp_path, schedule_fire_batch=40), clock=clock)
    made = [await store.create_schedule(every_minute(i)) for i in range(100)]
    await engine._prepare_firings(T)
    assert len(engine._prepared) == 100, "every schedule due at T is planned 2 s ahead"
    edited = made[7]
    edited.job = {"task": NOOP, "queue": "edited"}
    edited.updated_at = T - 1
    await store.update_schedule(edited, "schedule.updated")
    clock.now = T + 0.01
    await engine._fire_due_schedules()
    jobs = await store.list_jobs(JobFilter(), None, 1000)
    at_t = sorted((j.schedule_id, j.queue) for j in jobs if j.fire_time == T)
    assert len(at_t) == 100 and len({sid for sid, _ in at_t}) == 100, f"{len(at_t)} runs of T, expected 100, once each"
    assert dict(at_t)[edited.id] == "edited", "the edit made after the plan is what fired"
    assert all(j.created_at == pytest.approx(T + 0.01) and j.state == "queued" for j in jobs)
    assert {(await store.get_schedule(s.id)).next_fire_at for s in made} == {T + 60}
    assert engine._prepared == {}
    clock.now = T + 0.5
    await engine._fire_due_schedules()
    assert len(await store.list_jobs(JobFilter(), None, 1000)) == 100, "nothing fires twice"


async def test_a_plan_made_ahead_is_not_used_when_the_fire_comes_late(store: SQLiteStore, tmp_path: Path) -> None:
    """Fired 90 s late (the node was stopped), the catch-up policy decides as of then, not as planned."""
    clock = Clock(T - 1)
    engine = Engine(store, LocalBus(), Settings(data_dir=tmp_path), clock=clock)
    s = every_minute(0)
    s.policy = SchedulePolicy(overlap="allow", catch_up="all", catch_up_window=3600)
    s = await store.create_schedule(s)
    await engine._prepare_firings(T)
    clock.now = T + 90
    await engine._fire_due_schedules()
    jobs = await store.list_jobs(JobFilter(schedule_id=s.id), None, 100)
    assert sorted(j.fire_time for j in jobs) == [T, T + 60], "both fire times that passed ran"
    assert (await store.get_schedule(s.id)).next_fire_at == T + 120


async def test_an_edit_writes_only_what_it_changed_so_counts_moved_meanwhile_are_kept(
    store: SQLiteStore, tmp_path: Path
) -> None:
    """PATCH reads the schedule, changes its name; meanwhile a manual run is made and a run ends
    dead (pause on failure counts it). The edit keeps both."""
    clock = Clock(T - 30)
    engine = Engine(store, LocalBus(), Settings(data_dir=tmp_path), clock=clock)
    s = every_minute(0)
    s.policy = SchedulePolicy(overlap="allow", pause_after_failures=3)
    s = await store.create_schedule(s)
    read = await store.get_schedule(s.id)
    before = copy.deepcopy(read)
    await engine.run_schedule_now(s.id)
    [job] = await store.claim_jobs(ClaimRequest("a1", 1, frozenset({"cron"})), clock())

    def dead(j: Any) -> Any:
        j.max_attempts = j.attempt  # its last attempt failed: it ends dead
        return decide_finish(j, RunResult(j.id, j.attempt, "failed", error="exit code 1"), clock(), POLICY)

    await store.change_jobs({job.id: dead})
    read.name = "renamed"
    out = await engine.update_schedule(read, before=before)
    stored = await store.get_schedule(s.id)
    assert (stored.name, stored.fired, stored.failures) == ("renamed", 1, 1), (
        stored.name,
        stored.fired,
        stored.failures,
    )
    assert (out.fired, out.failures) == (1, 1), "the answer is the schedule as stored"
