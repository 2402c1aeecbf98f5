"""A whole `jobdeck up` process under libfaketime (Debian `faketime`), its clock started just before
a New York DST night and run 30 times faster: real cron firing with the policies across the hour
that happens twice (fall-back, 2026-11-01, 02:00 EDT -> 01:00 EST: catch-up `all`) and across the
hour that never happens (spring-forward, 2027-03-14, 02:00 EST -> 03:00 EDT: a fire time in the gap,
overlap `skip` with runs longer than a minute, catch-up `all` and `latest` after a pause)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.client import JobDeckClient
from tests.conftest import ServerProcess, fire_times, spawn_jobdeck, until

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
START = "2026-11-01 05:48:00"  # UTC: 01:48 EDT, twelve minutes before the clocks go back
SPEED = 30
BACK = datetime(2026, 11, 1, 6, 0, tzinfo=UTC).timestamp()  # 02:00 EDT = 01:00 EST
SPRING_START = "2027-03-14 06:52:00"  # UTC: 01:52 EST, eight minutes before 02:00 EST becomes 03:00 EDT
FORWARD = datetime(2027, 3, 14, 7, 0, tzinfo=UTC).timestamp()  # 03:00 EDT, the first instant after the gap
pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not LIBFAKETIME.exists(), reason="libfaketime missing (apt-get install faketime)"),
]


def _faked_node(tmp_path: Path, start: str) -> Iterator[ServerProcess]:
    env = {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": f"@{start} x{SPEED}", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
           "JOBDECK_WEB": "0"}  # fmt: skip
    node = spawn_jobdeck(tmp_path / "data", "up", "--no-web", "--slots", "4", env=env)
    try:
        yield node
    finally:
        node.proc.terminate()
        try:
            node.proc.wait(15)
        except Exception:
            node.proc.kill()


@pytest.fixture
def night(tmp_path: Path) -> Iterator[ServerProcess]:
    yield from _faked_node(tmp_path, START)


@pytest.fixture
def spring_night(tmp_path: Path) -> Iterator[ServerProcess]:
    yield from _faked_node(tmp_path, SPRING_START)


async def test_a_set_hour_fires_once_and_every_minute_fires_straight_through_the_night(night: ServerProcess) -> None:
    job = {"task": {"kind": "python", "function": "agents.builtin:noop"}, "queue": "night"}
    async with JobDeckClient(night.url) as c:
        policy = {"timezone": "America/New_York", "overlap": "allow", "catch_up": "all", "catch_up_window": 3600}
        one_am = await c.create_schedule({"name": "one-am", "cron": "* 1 * * *", **policy, "job": job})
        minutely = await c.create_schedule({"name": "minutely", "cron": "* * * * *", **policy, "job": job})
        created = datetime.fromisoformat(one_am["created_at"]).timestamp()
        assert BACK - 900 < created < BACK - 60, f"the node's clock is not the faked one: {one_am['created_at']}"
        marks = (await c.preview(one_am["id"], n=3))["fire_times"]
        assert all("dst_overlap" in f["marks"] for f in marks[:2]), marks  # 01:5x EDT happens again as EST

        async def through_the_night() -> list[float] | None:
            got = await fire_times(c, minutely["id"])
            return got if got and max(got) >= BACK + 300 else None

        every = sorted(await until(through_the_night, 90, "the minutely schedule to fire 5 minutes past 06:00 UTC"))
        set_hour = sorted(await fire_times(c, one_am["id"]))
        stored = await c.get_schedule(one_am["id"])
    assert every == [every[0] + 60 * i for i in range(len(every))], f"minutes missing or twice: {every}"
    assert every[0] < BACK < every[-1], "the minutely schedule fired on both sides of the change"
    assert set_hour == [t for t in every if t < BACK], (
        f"'* 1 * * *' fires in the first 01:xx only (EDT), never in the repeated one (EST): {set_hour}"
    )
    next_fire = datetime.fromisoformat(stored["next_fire_at"])
    assert next_fire.isoformat() == "2026-11-02T06:00:00+00:00", f"next: 01:00 EST the next night, got {next_fire}"


def _utc(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


async def _skipped(c: JobDeckClient, schedule_id: int, kind: str = "schedule.skipped") -> list[float]:
    """The fire times of a schedule's `kind` events: skipped (overlap), or missed (later than
    ON_TIME_SECONDS: 15 s of the node's clock is half a real second here, one stall of a loaded
    machine; catch-up `latest` then runs the newest and reports the others missed)."""
    out: list[float] = []
    async for e in c.events(since=0, types=[kind], until_caught_up=True):
        if e.get("data", {}).get("schedule_id") == schedule_id:
            out += [_utc(t) for t in e["data"]["fire_times"]]
    return out


async def test_spring_forward_a_gap_time_fires_once_skip_holds_and_catch_up_runs_each_missed_time_once(
    spring_night: ServerProcess, tmp_path: Path
) -> None:
    noop = {"task": {"kind": "python", "function": "agents.builtin:noop"}, "queue": "spring"}
    # a run takes 2.4 s of real time: 72 s of the node's clock, so every other minute finds one going
    slow = {"task": {"kind": "python", "function": "tests.agents.tasks_for_tests:record_run",
                     "args": [str(tmp_path / "runs.log"), 0, 2.4]}, "queue": "spring-slow"}  # fmt: skip
    ny = {"timezone": "America/New_York"}
    async with JobDeckClient(spring_night.url) as c:
        gap = await c.create_schedule({"name": "half-two", "cron": "30 2 * * *", **ny, "job": noop})
        created = _utc(gap["created_at"])
        assert FORWARD - 600 < created < FORWARD - 60, f"the node's clock is not the faked one: {gap['created_at']}"
        marks = (await c.preview(gap["id"], n=1))["fire_times"][0]
        assert _utc(marks["utc"]) == FORWARD and "dst_gap" in marks["marks"], marks
        skip = await c.create_schedule({"name": "minutely-skip", "cron": "* * * * *", **ny, "overlap": "skip",
                                        "job": slow})  # fmt: skip
        # hours 2 and 3 every 5 minutes: all of 02:xx is the gap, so 03:00 EDT is one fire time, not thirteen
        held = {"cron": "*/5 2,3 * * *", **ny, "job": noop, "paused": True}
        # catch-up all runs one after another (buffer_all): under skip the oldest would run and the rest be skipped
        every = await c.create_schedule({"name": "catch-all", **held, "catch_up": "all", "catch_up_window": 3600,
                                         "overlap": "buffer_all"})  # fmt: skip
        latest = await c.create_schedule({"name": "catch-latest", **held, "catch_up": "latest"})

        async def past(t: float) -> list[float] | None:
            got = await fire_times(c, skip["id"]) + await _skipped(c, skip["id"])
            got += await _skipped(c, skip["id"], "schedule.missed")
            return got if got and max(got) >= t else None

        await until(lambda: past(FORWARD + 12 * 60), 90, "the node's clock to reach 03:12 EDT")
        resumed = [await c.schedule_action(s["id"], "resume") for s in (every, latest)]
        resumed_at = min(_utc(r["updated_at"]) for r in resumed)
        await until(lambda: past(FORWARD + 17 * 60), 60, "five more minutes after the resume")
        await c.schedule_action(skip["id"], "pause")
        made = {s["name"]: sorted(await fire_times(c, s["id"])) for s in (gap, skip, every, latest)}
        skipped = sorted(await _skipped(c, skip["id"]))
        missed = sorted(await _skipped(c, skip["id"], "schedule.missed"))
        runs = sorted(
            (_utc(j["started_at"]), _utc(j["finished_at"]))
            for j in (await c.list_jobs(schedule_id=skip["id"], limit=1000))["jobs"]
            if j["started_at"] and j["finished_at"]
        )
        gap_after = await c.get_schedule(gap["id"])
        latest_after = await c.get_schedule(latest["id"])
    assert made["half-two"] == [FORWARD], f"02:30 EST does not exist: it fires once, at 03:00 EDT: {made['half-two']}"
    assert gap_after["next_fire_at"] == "2027-03-15T06:30:00+00:00", gap_after["next_fire_at"]

    seen = sorted([*made["minutely-skip"], *skipped, *missed])
    assert len(seen) == len(set(seen)), f"a minute made, skipped or missed twice: {seen}"
    assert seen == [seen[0] + 60 * i for i in range(len(seen))], f"every minute made, skipped or missed once: {seen}"
    assert len(missed) < len(seen) // 2, f"most minutes fired on time (missed: {missed})"
    assert seen[0] < FORWARD < seen[-1] and skipped, "skip decided on both sides of the change"
    for (_, end), (start, _) in itertools.pairwise(runs):
        assert start >= end, f"two runs of a skip schedule at once: {runs}"

    due = [t for t in (FORWARD + 300 * i for i in range(12)) if t <= resumed_at]  # 03:00, 03:05, ... EDT
    after = [t for t in (FORWARD + 300 * i for i in range(12)) if resumed_at < t <= FORWARD + 17 * 60]
    assert made["catch-all"] == [*due, *after], (
        f"catch-up all runs each missed fire time once, 03:00 EDT once, then goes on: {made['catch-all']} (due {due})"
    )
    assert made["catch-latest"][:1] == due[-1:], f"catch-up latest runs the most recent only: {made['catch-latest']}"
    assert latest_after["missed"] == len(due) - 1, latest_after
