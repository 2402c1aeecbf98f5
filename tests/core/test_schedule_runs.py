"""Schedule policies on a real node with a real agent: runs that would overlap, catch-up on resume,
bad policy values refused with the field named."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest

from core.errors import Conflict, InvalidInput
from core.schedule import jitter_offset
from tests.conftest import RunningNode, until

NOOP = {"kind": "python", "function": "agents.builtin:noop"}
FINAL = ("succeeded", "dead", "cancelled")


def sleeper(seconds: float) -> dict[str, Any]:
    return {"kind": "python", "function": "agents.builtin:sleep", "args": [seconds]}


def ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


async def runs(c: Any, sid: int) -> list[dict[str, Any]]:
    return (await c.list_jobs(schedule_id=sid, limit=500))["jobs"]  # type: ignore[no-any-return]


def assert_never_two_at_once(jobs: list[dict[str, Any]]) -> None:
    spans = sorted((ts(j["started_at"]), ts(j["finished_at"]), j["id"]) for j in jobs if j["started_at"])
    for (s1, e1, a), (s2, _e2, b) in itertools.pairwise(spans):
        assert s2 >= e1, f"job {a} ran {s1:.3f}..{e1:.3f} and job {b} started at {s2:.3f}, before it ended"


async def test_skip_never_runs_two_at_once_and_counts_what_it_skipped(running: RunningNode) -> None:
    c = running.client
    s = await c.create_schedule({"name": "slow", "interval": 1, "job": {"task": sleeper(2.2), "queue": "slow"}})
    assert (s["overlap"], s["catch_up"], s["catch_up_window"]) == ("skip", "latest", 3600.0), "the defaults"

    async def enough() -> list[dict[str, Any]] | None:
        done = [j for j in await runs(c, s["id"]) if j["state"] == "succeeded"]
        return done if len(done) >= 3 else None

    done = await until(enough, 60, "three runs of a 2.2 s job on a 1 s schedule")
    await c.schedule_action(s["id"], "pause")
    assert_never_two_at_once(done)
    stored = await c.get_schedule(s["id"])
    assert stored["skipped"] >= 3 and stored["last_skipped_at"] is not None, stored


async def test_buffer_one_starts_the_held_run_as_the_previous_one_ends(running: RunningNode) -> None:
    c = running.client
    s = await c.create_schedule({"name": "buffered", "interval": 1, "overlap": "buffer_one",
                                 "job": {"task": sleeper(1.5), "queue": "buf"}})  # fmt: skip

    async def enough() -> list[dict[str, Any]] | None:
        done = [j for j in await runs(c, s["id"]) if j["state"] == "succeeded"]
        return done if len(done) >= 3 else None

    done = await until(enough, 60, "three runs")
    await c.schedule_action(s["id"], "pause")
    assert_never_two_at_once(done)
    spans = sorted((ts(j["started_at"]), ts(j["finished_at"])) for j in done)
    gaps = [s2 - e1 for (_, e1), (s2, _) in itertools.pairwise(spans)]
    assert max(gaps) < 1.0, f"a buffered run starts as the one before it ends; gaps were {gaps}"


async def test_cancel_previous_stops_the_running_run_before_the_next_starts(running: RunningNode) -> None:
    c = running.client
    s = await c.create_schedule({"name": "latest-only", "interval": 2, "overlap": "cancel_previous",
                                 "job": {"task": sleeper(60), "queue": "cp"}})  # fmt: skip

    async def two() -> list[dict[str, Any]] | None:
        jobs = await runs(c, s["id"])
        cancelled = [j for j in jobs if j["state"] == "cancelled" and j["started_at"]]
        later = [j for j in jobs if j["state"] == "running"]
        return [cancelled[0], later[0]] if cancelled and later else None

    first, second = await until(two, 30, "a run cancelled by the next fire time, and the next running")
    await c.schedule_action(s["id"], "pause")
    claimed = (await c.attempts(second["id"]))[-1]["claimed_at"]
    assert claimed >= ts(first["finished_at"]), f"the next run was claimed at {claimed}: before {first}"


async def test_a_resumed_schedule_catches_up_every_missed_fire_time_in_the_window(running: RunningNode) -> None:
    c = running.client
    s = await c.create_schedule({"name": "every-second", "interval": 1, "overlap": "allow", "catch_up": "all",
                                 "job": {"task": NOOP, "queue": "cu"}})  # fmt: skip
    await until(lambda: runs(c, s["id"]), 10, "a first run")
    await c.schedule_action(s["id"], "pause")
    before = len(await runs(c, s["id"]))
    paused_at = (await c.get_schedule(s["id"]))["last_fire_at"]
    await until(lambda: running.engine.clock() > ts(paused_at) + 4.5, 10, "4.5 s of pause")
    await c.schedule_action(s["id"], "resume")

    async def caught_up() -> list[dict[str, Any]] | None:
        jobs = await runs(c, s["id"])
        return jobs if len(jobs) >= before + 4 else None

    jobs = await caught_up() or await until(caught_up, 10, "the missed fire times to run")
    times = sorted(ts(j["fire_time"]) for j in jobs if j["fire_time"])
    assert len(times) == len(set(times)), "each fire time once"
    steps = [b - a for a, b in itertools.pairwise(times)]
    assert all(abs(x - 1.0) < 1e-6 for x in steps), f"no fire time left out: steps {steps}"


async def test_latest_and_none_record_what_was_missed(running: RunningNode) -> None:
    """(Which of the missed ones run is in tests/core/test_schedule_policies.py, with a fake clock.)"""
    c = running.client
    for policy in ("latest", "none"):
        s = await c.create_schedule({"name": policy, "interval": 1, "catch_up": policy, "paused": True,
                                     "job": {"task": NOOP, "queue": "cu"}})  # fmt: skip
        await until(lambda s=s: running.engine.clock() > ts(s["created_at"]) + 6, 30, "6 s after creation")
        await c.schedule_action(s["id"], "resume")
        stored = await until(lambda s=s: _missed(c, s["id"]), 10, f"{policy}: missed fire times recorded")
        await c.schedule_action(s["id"], "pause")
        assert stored["missed"] >= 4, stored
        assert len({j["fire_time"] for j in await runs(c, s["id"])}) < 4, "the missed fire times did not run"


async def _missed(c: Any, sid: int) -> dict[str, Any] | None:
    s = await c.get_schedule(sid)
    return s if s["missed"] else None


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("overlap", "sometimes", "skip"),
        ("catch_up", "every", "latest"),
        ("catch_up_window", -1, "greater than or equal to 0"),
        ("overlap", 5, "skip"),
    ],
)
async def test_a_bad_policy_is_a_422_naming_the_field(running: RunningNode, field: str, value: Any, says: str) -> None:
    c = running.client
    with pytest.raises(InvalidInput) as err:
        await c.create_schedule({"name": "bad", "interval": 60, field: value, "job": {"task": NOOP}})
    assert field in str(err.value) and says in str(err.value), str(err.value)
    s = await c.create_schedule({"name": "good", "interval": 60, "job": {"task": NOOP}})
    with pytest.raises(InvalidInput):
        await c.update_schedule(s["id"], {field: value})
    assert (await c.get_schedule(s["id"]))["overlap"] == "skip", "nothing half-written"
    assert [x["name"] for x in await c.schedules()] == ["good"]


async def test_a_policy_change_keeps_the_rest(running: RunningNode) -> None:
    c = running.client
    s = await c.create_schedule({"name": "p", "interval": 60, "job": {"task": NOOP}})
    changed = await c.update_schedule(s["id"], {"overlap": "buffer_all", "catch_up_window": 60})
    assert (changed["overlap"], changed["catch_up"], changed["catch_up_window"]) == ("buffer_all", "latest", 60.0)
    assert changed["next_fire_at"] == s["next_fire_at"], "the timing is untouched"


async def test_run_now_queues_a_delayed_job_at_once_keeping_its_priority(running: RunningNode) -> None:
    c = running.client
    job = await c.submit({"task": NOOP, "delay": 3600, "priority": 7})
    assert job["state"] == "scheduled"
    moved = await c.job_action(job["id"], "run-now")
    assert moved["priority"] == 7 and ts(moved["run_at"]) < ts(job["run_at"]) - 3000
    assert (await c.wait_for(job["id"]))["state"] == "succeeded"
    paused = await c.submit({"task": NOOP, "delay": 3600})
    await c.job_action(paused["id"], "pause")
    with pytest.raises(Conflict) as err:
        await c.job_action(paused["id"], "run-now")
    assert "paused" in err.value.message and "resume it first" in err.value.message
    with pytest.raises(Conflict) as err:
        await c.job_action(job["id"], "run-now")
    assert "succeeded" in err.value.message


async def test_jitter_delays_each_run_by_the_offset_every_node_computes(running: RunningNode) -> None:
    c = running.client
    s = await c.create_schedule({"name": "jittery", "interval": 2, "jitter": 1.5, "overlap": "allow",
                                 "job": {"task": NOOP, "queue": "jit"}})  # fmt: skip
    assert s["jitter"] == 1.5
    jobs = await until(lambda: _at_least(c, s["id"], 2), 20, "two jittered runs")
    await c.schedule_action(s["id"], "pause")
    for j in jobs:
        fire = ts(j["fire_time"])
        assert ts(j["run_at"]) - fire == pytest.approx(jitter_offset(s["id"], fire, 1.5), abs=1e-5), j
    with pytest.raises(InvalidInput) as err:
        await c.update_schedule(s["id"], {"jitter": 2})
    assert "jitter" in str(err.value) and "2 s between two fire times" in str(err.value)


async def test_pause_after_failures_pauses_with_the_reason_and_resume_clears_it(running: RunningNode) -> None:
    c = running.client
    failing = {"kind": "shell", "argv": ["sh", "-c", "exit 3"]}
    s = await c.create_schedule({"name": "flaky", "interval": 1, "pause_after_failures": 2,
                                 "job": {"task": failing, "queue": "flaky", "max_attempts": 1}})  # fmt: skip

    async def paused() -> dict[str, Any] | None:
        got = await c.get_schedule(s["id"])
        return got if got["paused"] else None

    got = await until(paused, 30, "the schedule to pause itself")
    assert got["paused_reason"] and "2 consecutive failed runs" in got["paused_reason"], got
    assert got["failures"] == 2 and got["next_fire_at"] is None
    resumed = await c.schedule_action(s["id"], "resume")
    assert resumed["paused_reason"] is None and resumed["failures"] == 0 and not resumed["paused"]
    await c.schedule_action(s["id"], "pause")


async def _at_least(c: Any, sid: int, n: int) -> list[dict[str, Any]] | None:
    jobs = [j for j in await runs(c, sid) if j["state"] == "succeeded"]
    return jobs if len(jobs) >= n else None


def at(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


async def test_backfill_through_the_api_bounded_dry_run_and_once(running: RunningNode) -> None:
    c = running.client
    s = await c.create_schedule({"name": "hourly", "cron": "0 * * * *", "job": {"task": NOOP, "queue": "bf"}})
    now = running.engine.clock()
    start, end = at(now - 10 * 3600), at(now - 1)
    dry = await c.backfill(s["id"], start, end, dry_run=True)
    assert dry["fire_times"] == 10 and dry["made"] == 0 and dry["would_make"] == 10, dry
    made = await c.backfill(s["id"], start, end, overlap="allow")
    assert made["made"] == 10 and len(made["job_ids"]) == 10
    again = await c.backfill(s["id"], at(now - 12 * 3600), end, overlap="allow")
    assert (again["fire_times"], again["existing"], again["made"]) == (12, 10, 2), "each fire time once"
    for body, field, says in (
        ({"from": end, "to": start}, "from", "after to"),
        ({"from": start, "to": at(now + 3600)}, "to", "in the future"),
        ({"from": at(now - 2 * 366 * 86400), "to": end}, "to", "more than 10,000"),
    ):
        with pytest.raises(InvalidInput) as err:
            await c.backfill(s["id"], body["from"], body["to"])
        assert err.value.field == field and says in err.value.message, err.value.message
    with pytest.raises(InvalidInput) as err:
        await c.backfill(s["id"], start, end, overlap="skip")
    assert "overlap" in str(err.value)
    assert len(await runs(c, s["id"])) == 12, "nothing half-written"


async def test_preview_from_a_past_instant_names_the_jobs_and_the_fire_times_without_one(running: RunningNode) -> None:
    c = running.client
    s = await c.create_schedule({"name": "hourly", "cron": "0 * * * *", "job": {"task": NOOP, "queue": "pv"}})
    now = running.engine.clock()
    hour = now - now % 3600
    await c.backfill(s["id"], at(hour - 2 * 3600), at(hour - 2 * 3600), overlap="allow")
    # the backfilled run ends first: while it still waits or runs, the next fire time is marked may_skip
    for job in await runs(c, s["id"]):
        await c.wait_for(job["id"], timeout=30)
    got = (await c.preview(s["id"], 5, from_=at(hour - 3 * 3600 - 1)))["fire_times"]
    assert [ts(f["utc"]) for f in got] == [hour - 3 * 3600 + 3600 * i for i in range(5)]
    assert [("no_run" in f["marks"], f["job_id"] is not None) for f in got[:3]] == [
        (True, False), (False, True), (True, False)
    ]  # fmt: skip
    assert got[4]["marks"] == [] and got[4]["job_id"] is None, "the future has no marks here"


async def test_exclusions_in_the_api_and_in_the_as_you_type_preview(running: RunningNode) -> None:
    c = running.client
    body = {"cron": "0 9 * * *", "timezone": "Europe/Paris", "exclude_cron": "* * * * 6,0",
            "exclude_dates": ["2027-01-18"], "from": "2027-01-15T00:00:00Z"}  # fmt: skip
    got = await c._call("POST", "/v1/schedules/preview", json={**body, "n": 3})
    days = [(f["local"][:10], f["marks"]) for f in got["fire_times"]]
    assert days == [("2027-01-15", []), ("2027-01-16", ["excluded"]), ("2027-01-17", ["excluded"]),
                    ("2027-01-18", ["excluded"]), ("2027-01-19", []), ("2027-01-20", [])], days  # fmt: skip
    s = await c.create_schedule({"name": "weekdays", "cron": "0 9 * * *", "exclude_cron": "* * * * 6,0",
                                 "job": {"task": NOOP}})  # fmt: skip
    assert s["exclude_cron"] == "* * * * 6,0" and s["exclude_dates"] == []
    assert (await c.update_schedule(s["id"], {"exclude_cron": ""}))["exclude_cron"] is None
    for bad, field in (({"exclude_cron": "* * * * *"}, "exclude_cron"), ({"exclude_cron": "61 * * * *"}, "exclude_cron"),
                       ({"exclude_dates": ["2027-02-30"]}, "exclude_dates")):  # fmt: skip
        with pytest.raises(InvalidInput) as err:
            await c.update_schedule(s["id"], bad)
        assert field in str(err.value), str(err.value)
