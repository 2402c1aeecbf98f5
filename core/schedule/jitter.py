"""Jitter: each run of a schedule starts a little after its fire time, so a thousand schedules on
the hour do not start in the same second. The offset is a function of the schedule and the fire
time only, so every node computes the same one (and a retried firing makes the same job)."""

from __future__ import annotations

import hashlib
from itertools import pairwise

from core.errors import InvalidSchedule
from core.schedule.fire_times import Schedule, next_fire_times

_SPAN = 2.0**64


def jitter_offset(schedule_id: int, fire_time: float, jitter: float) -> float:
    """Seconds in [0, jitter) to add to `fire_time`, the same on every node."""
    if jitter <= 0:
        return 0.0
    digest = hashlib.blake2b(f"{schedule_id}:{fire_time!r}".encode(), digest_size=8).digest()
    return round(jitter * int.from_bytes(digest, "big") / _SPAN, 6)


def shortest_gap(s: Schedule, after: float, n: int = 50) -> float | None:
    """The shortest time between two of the next `n` fire times (None for a one-time schedule)."""
    if s.kind == "interval":
        return s.interval
    if s.kind != "cron":
        return None
    times = next_fire_times(s, after, n)
    return min((b - a for a, b in pairwise(times)), default=None)


def check_jitter(s: Schedule, now: float) -> None:
    """A jitter must be shorter than the time between two fire times (the runs would change order)."""
    jitter = s.policy.jitter
    gap = shortest_gap(s, now) if jitter > 0 else None
    if gap is not None and jitter >= gap:
        raise InvalidSchedule(
            f"jitter: {jitter:g} s is not shorter than the {gap:g} s between two fire times of this schedule; "
            "give a jitter below it (or 0 for none)",
            field="jitter",
        )
