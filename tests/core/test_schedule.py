"""Fire times: cron in IANA zones (DST included), intervals, one-time schedules, previews, validation."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import InvalidSchedule
from core.schedule import Schedule, next_fire_times, preview, validate_cron, zone


def ts(text: str) -> float:
    """An ISO 8601 time with an offset to Unix seconds."""
    return datetime.fromisoformat(text).timestamp()


def utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def local(t: float, tz: str) -> str:
    return datetime.fromtimestamp(t, ZoneInfo(tz)).isoformat()


def cron(expr: str, tz: str = "UTC") -> Schedule:
    return Schedule(1, "s", "cron", expr, None, None, tz, 0.0, {}, False, None, None, 0.0, 0.0)


def interval(seconds: float, anchor: float, tz: str = "UTC") -> Schedule:
    return Schedule(1, "s", "interval", None, seconds, None, tz, anchor, {}, False, None, None, 0.0, 0.0)


def once(at: float) -> Schedule:
    return Schedule(1, "s", "once", None, None, at, "UTC", 0.0, {}, False, None, None, 0.0, 0.0)


# ---------------------------------------------------------------- cron in a zone


@pytest.mark.parametrize(
    ("tz", "after", "expected_utc"),
    [
        # Paris springs forward on 2024-03-31: 09:00 CET is 08:00Z, 09:00 CEST is 07:00Z.
        ("Europe/Paris", "2024-03-29T12:00:00Z", ["2024-03-30T08:00:00Z", "2024-03-31T07:00:00Z", "2024-04-01T07:00:00Z"]),
        # ... and falls back on 2024-10-27.
        ("Europe/Paris", "2024-10-25T12:00:00Z", ["2024-10-26T07:00:00Z", "2024-10-27T08:00:00Z", "2024-10-28T08:00:00Z"]),
        # New York springs forward on 2024-03-10 (EST -05:00 -> EDT -04:00).
        ("America/New_York", "2024-03-08T20:00:00Z", ["2024-03-09T14:00:00Z", "2024-03-10T13:00:00Z", "2024-03-11T13:00:00Z"]),
        ("America/New_York", "2024-11-01T20:00:00Z", ["2024-11-02T13:00:00Z", "2024-11-03T14:00:00Z", "2024-11-04T14:00:00Z"]),
        # Kolkata: +05:30 all year, no DST.
        ("Asia/Kolkata", "2024-03-08T20:00:00Z", ["2024-03-09T03:30:00Z", "2024-03-10T03:30:00Z", "2024-03-11T03:30:00Z"]),
    ],
)  # fmt: skip
def test_nine_oclock_local_is_the_right_utc_instant_across_dst(tz: str, after: str, expected_utc: list[str]) -> None:
    got = next_fire_times(cron("0 9 * * *", tz), ts(after.replace("Z", "+00:00")), 3)
    assert [utc(t) for t in got] == expected_utc
    assert all(datetime.fromtimestamp(t, ZoneInfo(tz)).strftime("%H:%M") == "09:00" for t in got), [
        local(t, tz) for t in got
    ]


def test_weekday_cron_in_new_york_skips_the_weekend() -> None:
    # 2024-03-08 is a Friday; the next weekdays are Mon 11 (after the DST change) and Tue 12.
    got = next_fire_times(cron("30 7 * * mon-fri", "America/New_York"), ts("2024-03-08T13:00:00+00:00"), 2)
    assert [local(t, "America/New_York") for t in got] == ["2024-03-11T07:30:00-04:00", "2024-03-12T07:30:00-04:00"]


def test_a_daily_time_inside_the_spring_forward_gap_still_fires_once_that_day() -> None:
    # 02:30 does not exist in Paris on 2024-03-31 (02:00 -> 03:00): the job runs once, when the gap ends.
    got = next_fire_times(cron("30 2 * * *", "Europe/Paris"), ts("2024-03-29T12:00:00+00:00"), 4)
    days = [datetime.fromtimestamp(t, ZoneInfo("Europe/Paris")).date().isoformat() for t in got]
    assert days == ["2024-03-30", "2024-03-31", "2024-04-01", "2024-04-02"], [local(t, "Europe/Paris") for t in got]
    assert utc(got[1]) == "2024-03-31T01:00:00Z", local(got[1], "Europe/Paris")


def test_a_daily_time_inside_the_fall_back_overlap_fires_once_that_day() -> None:
    # 02:30 happens twice in Paris on 2024-10-27 (03:00 CEST -> 02:00 CET); a daily job must run once.
    got = next_fire_times(cron("30 2 * * *", "Europe/Paris"), ts("2024-10-25T12:00:00+00:00"), 3)
    shown = [local(t, "Europe/Paris") for t in got]
    days = [s[:10] for s in shown]
    assert days == ["2024-10-26", "2024-10-27", "2024-10-28"], f"expected one fire per day, got {shown}"


def test_an_hourly_cron_fires_every_real_hour_through_the_fall_back_overlap() -> None:
    # The local day 2024-10-27 in Paris is 25 hours long: an hourly job runs 25 times, an hour apart.
    start = ts("2024-10-27T00:00:00+02:00") - 1
    got = [
        t for t in next_fire_times(cron("0 * * * *", "Europe/Paris"), start, 30) if t < ts("2024-10-28T00:00:00+01:00")
    ]
    assert len(got) == 25, [local(t, "Europe/Paris") for t in got]
    assert {b - a for a, b in pairwise(got)} == {3600.0}


def test_a_six_field_cron_has_seconds_last() -> None:
    got = next_fire_times(cron("0 9 * * * 30", "Asia/Kolkata"), ts("2024-03-08T20:00:00+00:00"), 1)
    assert [local(t, "Asia/Kolkata") for t in got] == ["2024-03-09T09:00:30+05:30"]


def test_cron_fire_times_are_strictly_after_after() -> None:
    at_nine = ts("2024-06-03T09:00:00+02:00")
    got = next_fire_times(cron("0 9 * * *", "Europe/Paris"), at_nine, 1)
    assert [local(t, "Europe/Paris") for t in got] == ["2024-06-04T09:00:00+02:00"]
    just_before = next_fire_times(cron("0 9 * * *", "Europe/Paris"), at_nine - 0.001, 1)
    assert just_before == [at_nine]


# ---------------------------------------------------------------- interval and once


def test_interval_fires_at_anchor_plus_multiples() -> None:
    s = interval(60, anchor=1000.0)
    assert next_fire_times(s, 1000.0, 3) == [1060.0, 1120.0, 1180.0]
    assert next_fire_times(s, 999.5, 2) == [1000.0, 1060.0]
    assert next_fire_times(s, 1059.5, 1) == [1060.0]
    assert next_fire_times(s, 1060.0, 1) == [1120.0], "a fire time equal to `after` is not 'after' it"
    assert next_fire_times(s, 1_000_000.0, 1) == [1000.0 + 60 * 16651]


def test_an_interval_schedule_does_not_fire_before_its_anchor() -> None:
    assert next_fire_times(interval(3600, anchor=50_000.0), 0.0, 2) == [50_000.0, 53_600.0]


def test_a_one_time_schedule_fires_once_and_only_in_the_future() -> None:
    assert next_fire_times(once(500.0), 100.0, 5) == [500.0]
    assert next_fire_times(once(500.0), 500.0, 5) == []
    assert next_fire_times(once(500.0), 900.0, 5) == []


def test_asking_for_no_fire_times_gives_none() -> None:
    assert next_fire_times(cron("* * * * *"), 0.0, 0) == []


# ---------------------------------------------------------------- preview


def test_preview_gives_each_time_in_the_schedules_zone_and_in_utc() -> None:
    got = preview(cron("0 9 * * *", "Asia/Kolkata"), ts("2024-03-08T20:00:00+00:00"), 2)
    assert got == [
        {"local": "2024-03-09T09:00:00+05:30", "utc": "2024-03-09T03:30:00+00:00", "marks": []},
        {"local": "2024-03-10T09:00:00+05:30", "utc": "2024-03-10T03:30:00+00:00", "marks": []},
    ]


def test_preview_across_a_dst_change_shows_the_offset_changing() -> None:
    got = preview(cron("0 9 * * *", "America/New_York"), ts("2024-03-08T20:00:00+00:00"), 2)
    assert [p["local"] for p in got] == ["2024-03-09T09:00:00-05:00", "2024-03-10T09:00:00-04:00"]
    assert [p["utc"] for p in got] == ["2024-03-09T14:00:00+00:00", "2024-03-10T13:00:00+00:00"]


def test_preview_of_an_interval_schedule_is_in_its_zone() -> None:
    got = preview(
        interval(3600, anchor=ts("2024-01-15T12:00:00+00:00"), tz="Europe/Paris"), ts("2024-01-15T12:00:00+00:00"), 1
    )
    assert got == [{"local": "2024-01-15T14:00:00+01:00", "utc": "2024-01-15T13:00:00+00:00", "marks": []}]


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "expr", ["0 9 * * *", "*/15 * * * *", "0 9 * * mon-fri", "0 0 1 1 *", "0 9 * * * 30", "@daily", "@hourly"]
)
def test_valid_cron_expressions_pass(expr: str) -> None:
    validate_cron(expr)


@pytest.mark.parametrize(("expr", "count"), [("* * * *", 4), ("1 2 3 4 5 6 7", 7), ("", 0)])
def test_a_wrong_field_count_is_refused_quoting_the_expression(expr: str, count: int) -> None:
    with pytest.raises(InvalidSchedule) as info:
        validate_cron(expr)
    msg = info.value.message
    assert repr(expr) in msg and f"{count} fields" in msg, f"expected {expr!r} and '{count} fields' in {msg!r}"
    assert info.value.field == "cron"
    assert info.value.status == 422


def test_an_unknown_shortcut_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(InvalidSchedule) as info:
        validate_cron("@hourly-ish")
    assert "'@hourly-ish'" in info.value.message and "@daily" in info.value.message, info.value.message


@pytest.mark.parametrize("expr", ["61 * * * *", "* 24 * * *", "* * 32 * *", "* * * 13 *", "* * * * 8"])
def test_an_out_of_range_field_is_refused_quoting_the_expression(expr: str) -> None:
    with pytest.raises(InvalidSchedule) as info:
        validate_cron(expr)
    msg = info.value.message
    assert repr(expr) in msg and "out of range" in msg, f"expected {expr!r} and 'out of range' in {msg!r}"
    assert info.value.field == "cron"


@pytest.mark.parametrize("expr", ["abc * * * *", "*/0 * * * *"])
def test_nonsense_in_a_field_is_refused_quoting_the_expression(expr: str) -> None:
    with pytest.raises(InvalidSchedule) as info:
        validate_cron(expr)
    assert repr(expr) in info.value.message, info.value.message


def test_a_cron_that_can_never_fire_is_refused() -> None:
    # `0 9 31 2 *` passes validation, then next_fire_times raises croniter's CroniterBadDateError.
    with pytest.raises(InvalidSchedule) as info:
        validate_cron("0 9 31 2 *")
        next_fire_times(cron("0 9 31 2 *"), ts("2024-01-01T00:00:00+00:00"), 1)
    assert "'0 9 31 2 *'" in info.value.message, info.value.message


@pytest.mark.parametrize("name", ["Mars/Olympus", "Europe/paris", "utc", "", "../etc/passwd"])
def test_an_unknown_time_zone_is_refused(name: str) -> None:
    with pytest.raises(InvalidSchedule) as info:
        zone(name)
    assert repr(name) in info.value.message and info.value.field == "timezone", info.value.to_dict()


def test_fire_times_of_a_schedule_with_an_unknown_zone_raise_invalid_schedule() -> None:
    with pytest.raises(InvalidSchedule):
        next_fire_times(cron("0 9 * * *", "Nowhere/Special"), 0.0, 1)
    with pytest.raises(InvalidSchedule):
        preview(cron("0 9 * * *", "Nowhere/Special"), 0.0, 1)


# ---------------------------------------------------------------- properties

ZONES = ["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "America/Sao_Paulo",
         "Pacific/Chatham", "Europe/London", "America/St_Johns"]  # fmt: skip
CRONS = st.builds(
    lambda *f: " ".join(f),
    st.sampled_from(["*", "0", "30", "*/5", "0,30", "15-45/15", "59"]),
    st.sampled_from(["*", "0", "2", "9", "*/6", "1-3", "23"]),
    st.sampled_from(["*", "1", "15", "1-7", "*/10", "29"]),
    st.sampled_from(["*", "3", "10,11", "*/2"]),
    st.sampled_from(["*", "1-5", "0", "6"]),
)
AFTER = st.floats(ts("2000-01-01T00:00:00+00:00"), ts("2040-01-01T00:00:00+00:00"))


@settings(max_examples=200, deadline=None)
@given(expr=CRONS, tz=st.sampled_from(ZONES), after=AFTER, n=st.integers(1, 12))
def test_cron_fire_times_increase_and_are_after_after(expr: str, tz: str, after: float, n: int) -> None:
    got = next_fire_times(cron(expr, tz), after, n)
    assert len(got) == n
    assert got[0] > after, f"{expr!r} in {tz}: first fire {local(got[0], tz)} is not after {local(after, tz)}"
    for a, b in pairwise(got):
        assert b > a, f"{expr!r} in {tz}: {local(a, tz)} then {local(b, tz)}"


@settings(max_examples=200, deadline=None)
@given(
    every=st.integers(1, 366 * 86_400),
    anchor=AFTER,
    after=AFTER,
    n=st.integers(1, 12),
)
def test_interval_fire_times_increase_are_after_after_and_on_the_grid(
    every: int, anchor: float, after: float, n: int
) -> None:
    got = next_fire_times(interval(every, anchor), after, n)
    assert len(got) == n
    assert got[0] > after
    assert got[0] - every <= max(after, anchor - every) + 1e-6, "the first fire time skipped one"
    for a, b in pairwise(got):
        assert b - a == pytest.approx(every), (a, b)
    for t in got:
        k = (t - anchor) / every
        assert k == pytest.approx(round(k), abs=1e-6) and round(k) >= 0, f"{t} is not anchor + k * {every}"
