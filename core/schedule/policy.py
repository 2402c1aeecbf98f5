"""A schedule's policies: what happens around a fire time (overlap, catch-up, jitter, pause on failure).

The settings live here as one value; the decisions that read them are pure functions beside it
(catch_up.py, overlap.py), so a fake clock tests them without a database.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

#: What a fire time does while an earlier run of the same schedule still waits or runs.
OVERLAP_POLICIES = ("skip", "buffer_one", "buffer_all", "cancel_previous", "allow")
#: What fire times that passed during downtime (or a pause) do when the schedule can fire again.
CATCH_UP_POLICIES = ("latest", "none", "all")

BUFFER_ALL_MAX = 100  # buffered runs of one schedule under buffer_all; past it a fire time is skipped
CATCH_UP_MAX = 1000  # runs one catch-up may start under `all` (the most recent ones in the window)
CATCH_UP_WINDOW_DEFAULT = 3600.0
CATCH_UP_WINDOW_MAX = 31 * 86400.0
#: A fire time at most this late is on time (a loaded node, a GC pause); later than that it was missed.
ON_TIME_SECONDS = 15.0
LISTED_MAX = 100  # fire times an event lists (its count says how many there were)


@dataclass(frozen=True, slots=True)
class SchedulePolicy:
    """The policies of one schedule (the API's flat fields of the same names)."""

    overlap: str = "skip"
    catch_up: str = "latest"
    catch_up_window: float = CATCH_UP_WINDOW_DEFAULT  # seconds; `all` runs missed fire times this recent
    jitter: float = 0.0  # seconds: each run starts up to this much after its fire time (the same on every node)
    pause_after_failures: int = 0  # pause the schedule after this many consecutive dead runs (0: never)
    exclude_dates: tuple[str, ...] = ()  # local dates (YYYY-MM-DD) without runs: holidays
    exclude_cron: str | None = None  # fire times this cron expression matches (in the schedule's zone) do not run

    def __post_init__(self) -> None:
        object.__setattr__(self, "exclude_dates", tuple(self.exclude_dates))  # a list from JSON

    def to_dict(self) -> dict[str, Any]:
        """As stored and shown."""
        data = asdict(self)
        data["exclude_dates"] = list(self.exclude_dates)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> SchedulePolicy:
        """From a stored dict; keys it does not know (a newer version's) are ignored, missing ones default."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})

    def replace(self, **changes: Any) -> SchedulePolicy:
        """A copy with `changes` (None values are left out: a PATCH that does not name a field keeps it)."""
        data = self.to_dict()
        data.update({k: v for k, v in changes.items() if v is not None})
        if data.get("exclude_cron") == "":
            data["exclude_cron"] = None  # PATCH "exclude_cron": "" removes it
        return SchedulePolicy(**data)


POLICY_FIELDS = tuple(f.name for f in fields(SchedulePolicy))
JITTER_MAX = 86400.0
PAUSE_AFTER_FAILURES_MAX = 1000


def after_run_ended(policy: SchedulePolicy, failures: int, state: str) -> int:
    """The count of consecutive failed runs once a run ended in `state`: a dead run adds one, a
    success starts again from 0, a cancelled run changes nothing (nobody's failure)."""
    if state == "dead":
        return failures + 1
    return 0 if state == "succeeded" else failures


def pause_reason(policy: SchedulePolicy, failures: int, job_id: int, error: str | None) -> str | None:
    """Why the schedule pauses itself now, or None if it does not."""
    n = policy.pause_after_failures
    if n <= 0 or failures < n:
        return None
    last = f": {error[:200]}" if error else ""
    return f"paused after {failures} consecutive failed runs (the last: job {job_id}{last}); resume to run again"
