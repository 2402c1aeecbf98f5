"""Fire times of schedules: cron (croniter) in an IANA time zone, fixed intervals, one-time."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from core.errors import InvalidSchedule
from core.model import iso
from core.schedule.policy import SchedulePolicy

KINDS = ("cron", "interval", "once")
ZERO = timedelta(0)
#: A one-time schedule still fires when its `at` is this late when saved (the API refuses later ones).
ONCE_SLACK_SECONDS = 1.0


@dataclass(slots=True)
class Schedule:
    """A recurring or one-time rule that materialises jobs from a template."""

    id: int
    name: str
    kind: str  # cron | interval | once
    cron: str | None
    interval: float | None
    at: float | None
    timezone: str
    anchor: float  # interval schedules fire at anchor + k * interval
    job: dict[str, Any]  # the job template (a JobCreate without run_at)
    paused: bool
    next_fire_at: float | None
    last_fire_at: float | None
    created_at: float
    updated_at: float
    fired: int = 0
    policy: SchedulePolicy = field(default_factory=SchedulePolicy)
    failures: int = 0  # consecutive runs that ended dead (pause_after_failures counts them)
    paused_reason: str | None = None  # why the schedule paused itself (None: a person paused it, or it runs)
    skipped: int = 0  # fire times the overlap policy skipped
    missed: int = 0  # fire times that passed while the schedule could not fire (downtime, a pause)
    last_skipped_at: float | None = None  # the latest skipped fire time
    meta: dict[str, Any] = field(default_factory=dict)


def changed_fields(before: Schedule, after: Schedule) -> set[str]:
    """The fields of `after` that differ from `before`, and updated_at: what an edit writes."""
    return {f.name for f in dataclass_fields(Schedule) if getattr(before, f.name) != getattr(after, f.name)} | {
        "updated_at"
    }


def zone(name: str) -> ZoneInfo:
    """The IANA zone `name`, or InvalidSchedule saying it is unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise InvalidSchedule(
            f"unknown time zone {name!r}: use an IANA name such as 'UTC' or 'Europe/Paris'", field="timezone"
        ) from None


SHORTCUTS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


def validate_cron(expr: str) -> None:
    """Raise InvalidSchedule quoting `expr` and saying what is wrong with it (including never firing)."""
    fields_ = expr.split()
    if expr.strip().startswith("@"):
        if expr.strip() not in SHORTCUTS:
            raise InvalidSchedule(
                f"cron expression {expr!r}: unknown shortcut; use one of {', '.join(SHORTCUTS)}", field="cron"
            )
    elif len(fields_) not in (5, 6):
        raise InvalidSchedule(
            f"cron expression {expr!r} has {len(fields_)} fields; expected 5 (minute hour day month weekday) "
            "or 6 (with seconds last)",
            field="cron",
        )
    try:
        it = croniter(expr, datetime(2000, 1, 1, tzinfo=UTC))
    except (CroniterBadCronError, CroniterBadDateError, ValueError, KeyError) as exc:
        raise InvalidSchedule(f"cron expression {expr!r} is invalid: {exc}", field="cron") from None
    try:
        it.get_next(float)
    except CroniterBadDateError:
        raise InvalidSchedule(f"cron expression {expr!r} never fires (no such date)", field="cron") from None


def _fixed_hour(expr: str) -> bool:
    """True for crons at set hours (they fire once in a DST overlap); false for hourly ones."""
    expr = expr.strip()
    if expr.startswith("@"):
        return expr != "@hourly"
    return "*" not in expr.split()[1]


@lru_cache(maxsize=4096)
def _parsed_cron(expr: str) -> croniter:
    return croniter(expr, datetime(2000, 1, 1, tzinfo=UTC))


def _cron_iter(expr: str, start: datetime) -> croniter:
    """croniter(expr, start) without parsing `expr` again: parsing is most of the cost of one next
    fire time, and the schedule loop asks for two per due schedule (10,000 a minute at scale)."""
    it = copy.copy(_parsed_cron(expr))
    it.set_current(start, force=True)
    return it


def candidate_times(s: Schedule, after: float) -> Iterator[float]:
    """The schedule's timing strictly after `after`, ascending, before exclusions."""
    if s.kind == "once":
        if s.at is not None and s.at > after:
            yield s.at
        return
    if s.kind == "interval":
        assert s.interval and s.interval > 0
        k = max(0, int((after - s.anchor) // s.interval) + 1)
        while True:
            t = s.anchor + k * s.interval
            if t > after:
                yield t
            k += 1
    assert s.cron is not None
    tz = zone(s.timezone)
    it = _cron_iter(s.cron, datetime.fromtimestamp(after, tz))
    once_in_overlap = _fixed_hour(s.cron)
    while True:
        try:
            t = it.get_next(datetime).timestamp()
        except CroniterBadDateError:
            raise InvalidSchedule(f"cron expression {s.cron!r} never fires (no such date)", field="cron") from None
        # When clocks fall back, a set local time (02:30) happens twice: run it the first time only.
        if once_in_overlap and datetime.fromtimestamp(t, tz).fold == 1:
            continue
        if t > after:
            yield t


#: Candidates looked at in a row, all excluded, before a schedule is taken to have no more fire times.
EXCLUDED_SCAN_MAX = 20_000


def excluded(s: Schedule, t: float) -> bool:
    """True if fire time `t` falls on an excluded local date or matches the exclude_cron expression."""
    p = s.policy
    if not p.exclude_dates and not p.exclude_cron:
        return False
    local = datetime.fromtimestamp(t, zone(s.timezone))
    if p.exclude_dates and local.date().isoformat() in p.exclude_dates:
        return True
    return bool(p.exclude_cron) and cron_matches(str(p.exclude_cron), local.replace(tzinfo=None))


@lru_cache(maxsize=256)
def _cron_sets(expr: str) -> tuple[frozenset[int] | None, ...] | None:
    """The values each of a 5-field expression's fields allows (None: any), or None when it uses what
    only croniter can judge (L, #, seconds)."""
    fields, nth = croniter.expand(expr)
    if nth or len(fields) != 5 or any(isinstance(v, str) and v != "*" for f in fields for v in f):
        return None
    return tuple(None if f == ["*"] else frozenset(int(v) for v in f) for f in fields)


def cron_matches(expr: str, local: datetime) -> bool:
    """croniter.match(expr, local), by set look-ups where it can: an exclusion is checked for every
    candidate fire time (up to EXCLUDED_SCAN_MAX in a row), and croniter.match costs ~150 us each."""
    sets = _cron_sets(expr)
    if sets is None:
        return bool(croniter.match(expr, local))
    minute, hour, day, month, dow = sets

    def ok(allowed: frozenset[int] | None, value: int) -> bool:
        return allowed is None or value in allowed

    if not (ok(minute, local.minute) and ok(hour, local.hour) and ok(month, local.month)):
        return False
    day_ok, dow_ok = ok(day, local.day), ok(dow, (local.weekday() + 1) % 7)
    if day is not None and dow is not None:  # both restricted: either one (cron's rule, croniter's day_or)
        return day_ok or dow_ok
    return day_ok and dow_ok


def excludes_every_fire_time(s: Schedule) -> bool:
    """True when exclude_cron allows every value the schedule's own cron does, field by field."""
    if s.kind != "cron" or not s.cron or not s.policy.exclude_cron:
        return False
    own, other = _cron_sets(s.cron), _cron_sets(s.policy.exclude_cron)
    if own is None or other is None:
        return False
    if (own[2] is not None and own[4] is not None) or (other[2] is not None and other[4] is not None):
        return False  # day-or-weekday unions: leave them to the scan
    return all(o is None or (a is not None and a <= o) for a, o in zip(own, other, strict=True))


def next_fire_times(s: Schedule, after: float, n: int, *, until: float = math.inf) -> list[float]:
    """The next `n` fire times strictly after `after` and not after `until` (Unix seconds), exclusions
    left out."""
    out: list[float] = []
    if n <= 0 or excludes_every_fire_time(s):
        return out
    run = 0  # excluded candidates in a row
    for t in candidate_times(s, after):
        if t > until:
            break
        if excluded(s, t):
            run += 1
            if run >= EXCLUDED_SCAN_MAX:
                break
            continue
        run = 0
        out.append(t)
        if len(out) >= n:
            break
    return out


def dst_marks(s: Schedule, t: float) -> list[str]:
    """`dst_gap` for a cron fire time just after clocks sprang forward (a local time in the skipped
    hour runs at the first time after it), `dst_overlap` for a local time that happens twice (it runs
    the first time)."""
    if s.kind != "cron":
        return []
    tz = zone(s.timezone)
    local = datetime.fromtimestamp(t, tz)
    marks = []
    before = datetime.fromtimestamp(t - 3600, tz)
    if (local.utcoffset() or ZERO) > (before.utcoffset() or ZERO):
        marks.append("dst_gap")
    if local.replace(fold=0).utcoffset() != local.replace(fold=1).utcoffset():
        marks.append("dst_overlap")
    return marks


def preview(s: Schedule, after: float, n: int) -> list[dict[str, Any]]:
    """The next `n` fire times after `after`, each in the schedule's zone and in UTC, with the marks a
    reader needs (`excluded` ones are listed too, and do not count towards `n`)."""
    tz = zone(s.timezone)
    out: list[dict[str, Any]] = []
    found, run = 0, 0
    scan_max = max(n, 31) + 1 if excludes_every_fire_time(s) else EXCLUDED_SCAN_MAX  # no need to look further
    for t in candidate_times(s, after):
        marks = dst_marks(s, t)
        if excluded(s, t):
            run += 1
            if run >= scan_max:
                break
            if run <= max(n, 31):  # a long excluded stretch is not listed whole
                out.append({"local": datetime.fromtimestamp(t, tz).isoformat(), "utc": iso(t),
                            "marks": ["excluded", *marks]})  # fmt: skip
            continue
        run = 0
        out.append({"local": datetime.fromtimestamp(t, tz).isoformat(), "utc": iso(t), "marks": marks})
        found += 1
        if found >= n:
            break
    return out


def schedule_to_dict(s: Schedule, now: float | None = None) -> dict[str, Any]:
    """The public view of a schedule (the API's JSON)."""
    return {
        "id": s.id,
        "name": s.name,
        "kind": s.kind,
        "cron": s.cron,
        "interval": s.interval,
        "at": iso(s.at),
        "timezone": s.timezone,
        "job": None if "workflow" in s.job else s.job,
        "workflow": s.job.get("workflow"),  # a schedule that fires a workflow: {name, jobs}
        "paused": s.paused,
        "paused_reason": s.paused_reason,
        **s.policy.to_dict(),
        "next_fire_at": iso(s.next_fire_at),
        "last_fire_at": iso(s.last_fire_at),
        "fired": s.fired,
        "skipped": s.skipped,
        "last_skipped_at": iso(s.last_skipped_at),
        "missed": s.missed,
        "failures": s.failures,
        "created_at": iso(s.created_at),
        "updated_at": iso(s.updated_at),
    }
