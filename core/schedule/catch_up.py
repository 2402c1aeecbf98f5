"""Which due fire times of a schedule run now: the catch-up policy, a pure function of (schedule, now).

A schedule is due when its `next_fire_at` has come. Usually one fire time is due and it is on time.
After downtime (no node ran the schedule loop) or a pause, many are: `latest` runs the most recent
once, `none` runs none of the late ones, `all` runs every one inside the catch-up window (at most
CATCH_UP_MAX, the most recent), oldest first. The others are missed, and the plan says how many.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.schedule.fire_times import Schedule, next_fire_times
from core.schedule.policy import CATCH_UP_MAX, LISTED_MAX, ON_TIME_SECONDS

_SCAN = CATCH_UP_MAX + 1  # fire times read forward from the first due one before looking from the end


@dataclass(slots=True)
class FirePlan:
    """What one pass of the schedule loop does with a due schedule."""

    expected_next: float  # the next_fire_at it was planned from: the store fires only if it is unchanged
    fire_times: list[float]  # to run (oldest first), subject to the overlap policy
    missed: list[float] = field(default_factory=list)  # the missed fire times (up to LISTED_MAX, oldest first)
    missed_count: int = 0  # how many were missed
    missed_exact: bool = True  # False: at least missed_count (a cron schedule down for a very long time)
    next_fire_at: float | None = None  # the first fire time after now
    policy: str = "latest"  # the catch-up policy that applied


def _between(s: Schedule, first: float, end: float, cap: int) -> tuple[list[float], float | None]:
    """Fire times t with first <= t <= end, from `first`, at most `cap` of them; and the first fire
    time after `end` if it was read on the way (None: not read, or there is none)."""
    out = [] if first > end else [first]
    chunk = 1  # usually the next one is past `end` already: read one, then more and more
    while len(out) < cap:
        nxt = next_fire_times(s, out[-1] if out else first, min(chunk, cap - len(out)))
        chunk = min(chunk * 4, 256)
        for t in nxt:
            if t > end:
                return out, t
            out.append(t)
        if not nxt:
            return out, None
    return out, None


def _most_recent(s: Schedule, first: float, now: float, limit: int) -> list[float]:
    """Up to `limit` of the most recent fire times in [first, now], oldest first (found by widening a
    window back from now, so a schedule down for a year is not walked from its first missed time)."""
    width = 60.0
    while True:
        start = max(first, now - width)
        times = next_fire_times(s, start - 1e-6, 1)
        found = _between(s, times[0], now, 4 * limit + 64)[0] if times and times[0] <= now else []
        if len(found) >= limit or start == first:
            return found[-limit:]
        width *= 4


def _count(s: Schedule, first: float, now: float, seen: int) -> tuple[int, bool]:
    """How many fire times lie in [first, now]: exact for intervals, at least `seen` otherwise."""
    if s.kind == "interval" and s.interval:
        return int((now - first) // s.interval) + 1, True
    return seen, False


def plan_fires(s: Schedule, now: float) -> FirePlan:
    """The catch-up decision for a due schedule (`s.next_fire_at <= now`)."""
    first = s.next_fire_at
    assert first is not None and first <= now, "plan_fires is for due schedules"
    policy = s.policy.catch_up
    due, after = _between(s, first, now, _SCAN)
    if after is None:  # not read on the way (or there is none: then this finds none either)
        following = next_fire_times(s, now, 1)
        after = following[0] if following else None
    plan = FirePlan(first, [], next_fire_at=after, policy=policy)
    complete = len(due) < _SCAN
    if complete:
        count, exact = len(due), True
    else:  # very many: the most recent ones are the ones a policy may run
        count, exact = _count(s, first, now, len(due))
        due = _most_recent(s, first, now, CATCH_UP_MAX)
    window = max(s.policy.catch_up_window, ON_TIME_SECONDS)
    if policy == "all":
        run = [t for t in due if now - t <= window][-CATCH_UP_MAX:]
    elif policy == "none":
        run = [due[-1]] if now - due[-1] <= ON_TIME_SECONDS else []
    else:  # latest
        run = [due[-1]]
    plan.fire_times = run
    ran = set(run)
    missed = [t for t in due if t not in ran]
    plan.missed_count = count - len(run)
    plan.missed_exact = exact
    plan.missed = missed[:LISTED_MAX] if complete else missed[-LISTED_MAX:]
    return plan
