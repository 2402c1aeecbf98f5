"""Backfill: the fire times of a past range, to make the runs a schedule would have made (a pure
function of the schedule, the range and now; the store makes each fire time's job at most once)."""

from __future__ import annotations

from core.errors import InvalidInput
from core.model import iso
from core.schedule.fire_times import Schedule, next_fire_times

BACKFILL_MAX = 10_000  # fire times one backfill may make
BACKFILL_OVERLAPS = ("buffer_all", "allow")  # one after another (oldest first), or side by side


def backfill_times(s: Schedule, start: float, end: float, now: float) -> list[float]:
    """Every fire time t with start <= t <= end (exclusions left out), or a 422 naming the field."""
    if start > end:
        raise InvalidInput(f"from: {iso(start)} is after to ({iso(end)}): give from <= to", field="from")
    if end > now:
        raise InvalidInput(
            f"to: {iso(end)} is in the future (now is {iso(now)}): a backfill makes runs for fire times that "
            "have passed; the schedule makes the ones to come",
            field="to",
        )
    times = next_fire_times(s, start - 1e-6, BACKFILL_MAX + 1, until=end)
    if len(times) > BACKFILL_MAX:
        raise InvalidInput(
            f"to: the range {iso(start)} .. {iso(end)} holds more than {BACKFILL_MAX:,} fire times; "
            "backfill it in smaller ranges",
            field="to",
        )
    return times
