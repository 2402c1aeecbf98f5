"""Backfill twice = backfill once (hypothesis, a real SQLite store per example): whatever past ranges
are backfilled, in whatever order and under either overlap, every fire time inside them has exactly
one job, none outside them has one, and backfilling the same ranges again makes nothing and changes
no job. A run the schedule made itself in the range is not made again either."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.bus import LocalBus
from core.config import Settings
from core.engine import Engine
from core.schedule import FirePlan, Schedule, SchedulePolicy
from core.store.base import JobFilter
from core.store.sqlite import SQLiteStore
from tests.store.conftest import POLICY

T = 1_900_000_020.0  # a whole minute: "now" for every example
NOOP = {"task": {"kind": "python", "function": "agents.builtin:noop"}, "queue": "backfill"}
Ranges = list[tuple[int, int]]  # (first minute back from T, minutes long)


def _minutely() -> Schedule:
    return Schedule(id=0, name="bf", kind="cron", cron="* * * * *", interval=None, at=None, timezone="UTC",
                    anchor=T - 86400, job=NOOP, paused=False, next_fire_at=T + 60, last_fire_at=None,
                    created_at=T - 86400, updated_at=T - 86400, policy=SchedulePolicy())  # fmt: skip


async def _backfill_all(engine: Engine, sid: int, ranges: Ranges, overlap: str) -> int:
    made = 0
    for back, length in ranges:
        start = T - 60 * back
        _, out = await engine.backfill_schedule(sid, start, min(T, start + 60 * length), overlap, dry_run=False)
        made += len(out.made)
    return made


async def _jobs(store: SQLiteStore, sid: int) -> list[tuple[float | None, int]]:
    jobs = await store.list_jobs(JobFilter(schedule_id=sid), None, 10_000)
    return sorted(((j.fire_time, j.id) for j in jobs), key=lambda p: (p[0] or 0.0, p[1]))


async def _case(ranges: Ranges, overlap: str, ran_itself: int | None) -> None:
    with tempfile.TemporaryDirectory() as d:
        store = SQLiteStore(Path(d) / "jobdeck.db", POLICY, on_commit=lambda events: None)
        await store.open()
        try:
            engine = Engine(store, LocalBus(), Settings(data_dir=Path(d)), clock=lambda: T)
            s = await store.create_schedule(_minutely())
            if ran_itself is not None:  # a fire time the schedule made on its own, before any backfill
                fresh = await store.get_schedule(s.id)
                fired = FirePlan(expected_next=T + 60, fire_times=[T - 60 * ran_itself], next_fire_at=T + 60)
                assert await store.fire_schedule(fresh, fired, engine._job_maker(fresh, T)) is not None
            once = await _backfill_all(engine, s.id, ranges, overlap)
            first = await _jobs(store, s.id)
            again = await _backfill_all(engine, s.id, list(reversed(ranges)), overlap)
            second = await _jobs(store, s.id)
        finally:
            await store.close()
    want = {T - 60 * back + 60 * k for back, length in ranges for k in range(length + 1) if T - 60 * back + 60 * k <= T}
    if ran_itself is not None:
        want.add(T - 60 * ran_itself)
    times = [t for t, _ in first if t is not None]
    assert sorted(times) == sorted(want), f"each fire time in the ranges once, none outside: {ranges} -> {times}"
    assert once == len(want) - (ran_itself is not None), (once, len(want))
    assert again == 0 and second == first, f"backfilling {ranges} again made {again} and changed the jobs"


@settings(max_examples=12, deadline=None)  # a store per example: ~3 s each at a load of 5
@given(
    ranges=st.lists(st.tuples(st.integers(0, 90), st.integers(0, 20)), min_size=1, max_size=4),
    overlap=st.sampled_from(["buffer_all", "allow"]),
    ran_itself=st.none() | st.integers(0, 90),
)
@example(ranges=[(61, 28), (20, 0)], overlap="buffer_all", ran_itself=None)  # found: the short range was skipped
def test_backfill_twice_is_backfill_once(ranges: Ranges, overlap: str, ran_itself: int | None) -> None:
    asyncio.run(_case(ranges, overlap, ran_itself))
