"""The pure policy decisions with a fake clock: catch-up (plan_fires) and overlap (decide_overlap,
run_to_release), with hypothesis properties over random run lengths and downtimes."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import InvalidSchedule
from core.schedule import (
    BUFFER_ALL_MAX,
    CATCH_UP_MAX,
    Run,
    Schedule,
    SchedulePolicy,
    after_run_ended,
    check_jitter,
    decide_overlap,
    jitter_offset,
    next_fire_times,
    pause_reason,
    plan_fires,
    preview,
    run_to_release,
)
from core.schedule.policy import ON_TIME_SECONDS

T0 = 1_800_000_000.0  # a whole minute (2027-01-15T08:00:00Z)


def every(seconds: float, first: float, **policy: object) -> Schedule:
    return Schedule(1, "s", "interval", None, seconds, None, "UTC", first, {}, False, first, None, 0.0, 0.0,
                    policy=SchedulePolicy(**policy))  # type: ignore[arg-type]  # fmt: skip


def cron(expr: str, first: float, **policy: object) -> Schedule:
    return Schedule(1, "s", "cron", expr, None, None, "UTC", 0.0, {}, False, first, None, 0.0, 0.0,
                    policy=SchedulePolicy(**policy))  # type: ignore[arg-type]  # fmt: skip


# ---------------------------------------------------------------- catch-up


def test_an_on_time_fire_runs_and_misses_nothing_under_every_policy() -> None:
    for policy in ("latest", "none", "all"):
        p = plan_fires(every(60, T0, catch_up=policy), T0 + 0.2)
        assert (p.fire_times, p.missed_count, p.next_fire_at) == ([T0], 0, T0 + 60), policy


def test_latest_runs_the_most_recent_missed_fire_time_once() -> None:
    p = plan_fires(every(60, T0), T0 + 10 * 60 + 5)
    assert p.fire_times == [T0 + 600]
    assert p.missed_count == 10 and p.missed == [T0 + 60 * i for i in range(10)] and p.missed_exact
    assert p.next_fire_at == T0 + 660 and p.policy == "latest"


def test_none_runs_nothing_late_but_an_on_time_fire_still_runs() -> None:
    late = plan_fires(every(60, T0, catch_up="none"), T0 + 600 + ON_TIME_SECONDS + 1)
    assert late.fire_times == [] and late.missed_count == 11
    just = plan_fires(every(60, T0, catch_up="none"), T0 + 600 + 1)
    assert just.fire_times == [T0 + 600] and just.missed_count == 10


def test_all_runs_every_missed_fire_time_inside_the_window_oldest_first() -> None:
    p = plan_fires(every(60, T0, catch_up="all", catch_up_window=300), T0 + 600)
    assert p.fire_times == [T0 + 60 * i for i in range(5, 11)]
    assert p.missed == [T0 + 60 * i for i in range(5)] and p.missed_count == 5


def test_all_is_bounded_by_catch_up_max_keeping_the_most_recent() -> None:
    p = plan_fires(every(1, T0, catch_up="all", catch_up_window=7200), T0 + 3600)
    assert len(p.fire_times) == CATCH_UP_MAX and p.fire_times[-1] == T0 + 3600
    assert p.missed_count == 3601 - CATCH_UP_MAX and p.missed_exact


def test_a_long_downtime_of_a_busy_cron_is_planned_quickly_from_the_end() -> None:
    s = cron("* * * * * *", T0, catch_up="latest")  # every second
    start = time.process_time()  # this process's CPU time: what other work on the machine takes does not count
    p = plan_fires(s, T0 + 30 * 86400)
    took = time.process_time() - start
    assert p.fire_times == [T0 + 30 * 86400] and not p.missed_exact and p.missed_count >= CATCH_UP_MAX
    assert took < 2.0, f"planning a month of per-second fire times took {took:.2f} s of CPU"


def test_a_daily_cron_down_for_three_days_runs_the_latest_under_latest() -> None:
    p = plan_fires(cron("0 9 * * *", T0 + 3600), T0 + 3 * 86400 + 7200)
    assert p.fire_times == [T0 + 3600 + 3 * 86400] and p.missed_count == 3


@settings(max_examples=200, deadline=None)
@given(
    interval=st.sampled_from([1.0, 7.0, 60.0, 300.0]),
    down=st.floats(0, 20_000),
    window=st.floats(0, 5000),
)
def test_all_runs_each_missed_fire_time_in_the_window_exactly_once(interval: float, down: float, window: float) -> None:
    s = every(interval, T0, catch_up="all", catch_up_window=window)
    now = T0 + down
    p = plan_fires(s, now)
    due = [T0, *[t for t in next_fire_times(s, T0, 30_000) if t <= now]]
    inside = [t for t in due if now - t <= max(window, ON_TIME_SECONDS)][-CATCH_UP_MAX:]
    assert p.fire_times == inside, "every fire time inside the window, once, oldest first"
    assert p.missed_count + len(p.fire_times) == len(due)
    assert p.next_fire_at is not None and p.next_fire_at > now


# ---------------------------------------------------------------- overlap


def test_skip_skips_while_a_run_goes_and_says_which() -> None:
    d = decide_overlap("skip", [T0], [Run(7, "running", T0 - 60)])
    assert d.run == [] and d.skip == [T0] and "job 7" in d.skip_reason and "running" in d.skip_reason


def test_buffer_one_and_cancel_previous_decisions() -> None:
    going = [Run(7, "running", T0 - 60)]
    assert decide_overlap("buffer_one", [T0], going).buffer == [T0]
    full = decide_overlap("buffer_one", [T0], [*going, Run(8, "blocked", T0 - 30)])
    assert full.skip == [T0]
    c = decide_overlap("cancel_previous", [T0, T0 + 60], [*going, Run(8, "blocked", T0 - 30)])
    assert (c.cancel, c.buffer, c.skip) == ([7, 8], [T0 + 60], [T0])
    queued = decide_overlap("cancel_previous", [T0], [Run(7, "queued", T0 - 60)])
    assert (queued.cancel, queued.run) == ([7], [T0]), "a run that has not started ends as it is cancelled"


def test_release_waits_for_every_run_that_goes() -> None:
    assert run_to_release([Run(1, "running", 1.0), Run(2, "blocked", 2.0)]) is None
    assert run_to_release([Run(3, "blocked", 3.0), Run(2, "blocked", 2.0)]) == 2
    assert run_to_release([]) is None


@dataclass
class SimRun:
    fire: float
    length: float
    state: str = "blocked"
    start: float | None = None
    end: float | None = None


def simulate(overlap: str, lengths: list[float], every_s: float = 60.0) -> list[SimRun]:
    """A store in a few lines: fire every `every_s`, a run takes its length (a cancelled one stops
    within 5 s), a run that ends releases the next buffered one; the decisions are the real ones."""
    runs: list[SimRun] = []
    fires = [T0 + every_s * i for i in range(len(lengths))]
    pending = list(zip(fires, lengths, strict=True))
    now = T0

    def active() -> list[Run]:
        return [Run(i, "running" if r.state == "running" else r.state, r.fire) for i, r in enumerate(runs)
                if r.state in ("blocked", "running")]  # fmt: skip

    def release() -> None:
        job = run_to_release(active())
        if job is not None:
            runs[job].state, runs[job].start = "running", now

    while pending or any(r.state == "running" for r in runs):
        ends = [(r.start + r.length, i) for i, r in enumerate(runs) if r.state == "running" and r.start is not None]
        next_end = min(ends) if ends else (float("inf"), -1)
        if pending and pending[0][0] <= next_end[0]:
            now, length = pending.pop(0)
            d = decide_overlap(overlap, [now], active())
            for i in d.cancel:
                if runs[i].state == "running":  # it stops within 5 s of being asked
                    runs[i].length = min(runs[i].length, now - (runs[i].start or now) + 5.0)
                else:
                    runs[i].state, runs[i].end = "cancelled", now
            for t in d.run:
                runs.append(SimRun(t, length, "running", now))
            for t in d.buffer:
                runs.append(SimRun(t, length))
        else:
            now, i = next_end
            runs[i].state, runs[i].end = "done", now
            release()
    return runs


@settings(max_examples=150, deadline=None)
@given(
    overlap=st.sampled_from(["skip", "buffer_one", "buffer_all", "cancel_previous"]),
    lengths=st.lists(st.floats(1, 400), min_size=1, max_size=40),
)
def test_runs_of_one_schedule_never_intersect_unless_allowed(overlap: str, lengths: list[float]) -> None:
    runs = [r for r in simulate(overlap, lengths) if r.start is not None]
    spans = sorted((r.start, r.end) for r in runs)
    for (s1, e1), (s2, e2) in itertools.pairwise(spans):
        assert e1 is not None and s2 >= e1, f"{overlap}: runs [{s1}, {e1}] and [{s2}, {e2}] overlap"
    if overlap == "buffer_all" and len(lengths) <= BUFFER_ALL_MAX:
        assert len(runs) == len(lengths), "buffer_all under its bound runs every fire time"


def test_allow_runs_side_by_side_in_the_simulation() -> None:
    runs = simulate("allow", [200.0, 200.0])
    assert runs[1].start is not None and runs[0].end is not None and runs[1].start < runs[0].end


@pytest.mark.parametrize("bad", ["sometimes", ""])
def test_an_unknown_policy_in_a_stored_dict_is_left_to_the_api(bad: str) -> None:
    """Stored values come from the API, which refuses unknown names; from_dict ignores unknown keys."""
    assert SchedulePolicy.from_dict({"overlap": "skip", "future_policy": bad}).overlap == "skip"


# ---------------------------------------------------------------- jitter, pause on failure


def test_jitter_is_the_same_for_a_fire_time_and_spread_over_fire_times() -> None:
    offsets = [jitter_offset(7, T0 + 60 * i, 30.0) for i in range(2000)]
    assert offsets == [jitter_offset(7, T0 + 60 * i, 30.0) for i in range(2000)], "the same on every call"
    assert all(0 <= o < 30.0 for o in offsets)
    assert min(offsets) < 1.0 and max(offsets) > 29.0, "spread over the whole range"
    assert jitter_offset(8, T0, 30.0) != jitter_offset(7, T0, 30.0), "schedules differ"
    assert jitter_offset(7, T0, 0.0) == 0.0


@pytest.mark.parametrize(
    ("s", "jitter", "ok"),
    [
        (every(60, T0), 59.9, True),
        (every(60, T0), 60.0, False),
        (cron("*/5 * * * *", T0), 299.0, True),
        (cron("*/5 * * * *", T0), 300.0, False),
        (cron("0 9,10 * * *", T0), 3601.0, False),  # 09:00 and 10:00 are an hour apart
    ],
)
def test_a_jitter_as_long_as_the_gap_between_fire_times_is_refused(s: Schedule, jitter: float, ok: bool) -> None:
    s.policy = SchedulePolicy(jitter=jitter)
    if ok:
        check_jitter(s, T0)
    else:
        with pytest.raises(InvalidSchedule) as err:
            check_jitter(s, T0)
        assert err.value.field == "jitter" and "shorter" in err.value.message


def test_consecutive_failures_pause_and_a_success_or_a_cancel_do_not() -> None:
    p = SchedulePolicy(pause_after_failures=3)
    n = 0
    for state in ("dead", "dead", "succeeded", "dead", "cancelled", "dead"):
        n = after_run_ended(p, n, state)
        assert pause_reason(p, n, 1, "boom") is None, (state, n)
    n = after_run_ended(p, n, "dead")
    reason = pause_reason(p, n, 41, "exit code 2")
    assert reason is not None and "3 consecutive failed runs" in reason and "job 41: exit code 2" in reason
    assert pause_reason(SchedulePolicy(), 1000, 1, None) is None, "0: never"


# ---------------------------------------------------------------- exclusions, preview marks


def test_excluded_dates_and_an_exclude_cron_remove_fire_times_in_the_schedules_zone() -> None:
    # 2027-01-15 is a Friday; 09:00 in Paris is 08:00 UTC in winter
    s = cron("0 9 * * *", T0, exclude_dates=["2027-01-18"], exclude_cron="* * * * 6,0")
    s.timezone = "Europe/Paris"
    got = [
        datetime.fromtimestamp(t, ZoneInfo("Europe/Paris")).date().isoformat() for t in next_fire_times(s, T0 - 3600, 4)
    ]
    assert got == ["2027-01-15", "2027-01-19", "2027-01-20", "2027-01-21"], "no weekend, no Monday the 18th"
    marks = preview(s, T0 - 3600, 2)
    assert [(p["local"][:10], p["marks"]) for p in marks] == [
        ("2027-01-15", []), ("2027-01-16", ["excluded"]), ("2027-01-17", ["excluded"]),
        ("2027-01-18", ["excluded"]), ("2027-01-19", []),
    ]  # fmt: skip


def test_a_schedule_that_excludes_every_fire_time_has_none() -> None:
    assert next_fire_times(every(60, T0, exclude_cron="* * * * *"), T0, 3) == []


def test_preview_marks_dst_gaps_and_overlaps() -> None:
    paris = ZoneInfo("Europe/Paris")
    spring = datetime(2027, 3, 27, 12, tzinfo=paris).timestamp()  # clocks go 02:00 -> 03:00 on the 28th
    s = cron("30 2 * * *", spring)
    s.timezone = "Europe/Paris"
    [gap] = preview(s, spring, 1)
    assert gap["marks"] == ["dst_gap"] and gap["local"] == "2027-03-28T03:00:00+02:00", gap
    autumn = datetime(2027, 10, 30, 12, tzinfo=paris).timestamp()  # 02:00-03:00 happens twice on the 31st
    [overlap] = preview(s, autumn, 1)
    assert (overlap["marks"] == ["dst_overlap"] and overlap["local"] == "2027-10-31T02:30:00+01:00") or overlap[
        "local"
    ] == "2027-10-31T02:30:00+02:00", overlap
    plain = preview(s, T0, 1)
    assert plain[0]["marks"] == []


def test_exclusion_matching_agrees_with_croniter_and_sees_a_total_exclusion() -> None:
    import random
    from datetime import datetime, timedelta

    from croniter import croniter

    from core.schedule.fire_times import cron_matches, excludes_every_fire_time

    rnd = random.Random(7)
    exprs = ["* * * * *", "0 0 * * 7", "*/15 * * * *", "0 0 1 * 1", "30 9-17 * * 1-5", "0 0 * jan mon",
             "* * 13 * 5", "0 12 * * sat,sun", "0 0 L * *", "0 0 * * 1#2", "*/7 */3 */2 */5 *"]  # fmt: skip
    for expr in exprs:
        for _ in range(500):
            when = datetime(2026, 1, 1) + timedelta(minutes=rnd.randrange(2 * 366 * 24 * 60))
            assert cron_matches(expr, when) == bool(croniter.match(expr, when)), (expr, when)
    now = 1_796_000_000.0

    def every_minute_without(exclude: str) -> Schedule:
        s = Schedule(0, "p", "cron", "* * * * *", None, None, "UTC", now, {}, False, None, None, now, now)
        s.policy = s.policy.replace(exclude_cron=exclude)
        return s

    assert excludes_every_fire_time(every_minute_without("* * * * 0-6"))
    assert not excludes_every_fire_time(every_minute_without("* * * * 1-6"))  # Sundays stay
    assert next_fire_times(every_minute_without("* * * * *"), now, 1) == []
