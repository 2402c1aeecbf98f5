"""Schedules: their fire times (fire_times.py), their policies (policy.py) and the pure decisions
that apply them: catch-up after downtime (catch_up.py), overlapping runs (overlap.py)."""

from core.schedule.catch_up import FirePlan, plan_fires
from core.schedule.fire_times import (
    KINDS,
    ONCE_SLACK_SECONDS,
    SHORTCUTS,
    Schedule,
    changed_fields,
    next_fire_times,
    preview,
    schedule_to_dict,
    validate_cron,
    zone,
)
from core.schedule.jitter import check_jitter, jitter_offset
from core.schedule.overlap import ACTIVE_STATES, FireDecision, Run, decide_overlap, run_to_release
from core.schedule.policy import (
    BUFFER_ALL_MAX,
    CATCH_UP_MAX,
    CATCH_UP_POLICIES,
    OVERLAP_POLICIES,
    SchedulePolicy,
    after_run_ended,
    pause_reason,
)

__all__ = [
    "ACTIVE_STATES", "BUFFER_ALL_MAX", "CATCH_UP_MAX", "CATCH_UP_POLICIES", "KINDS", "ONCE_SLACK_SECONDS",
    "OVERLAP_POLICIES", "SHORTCUTS", "FireDecision", "FirePlan", "Run", "Schedule", "SchedulePolicy",
    "after_run_ended", "changed_fields", "check_jitter", "decide_overlap", "jitter_offset", "next_fire_times", "pause_reason",
    "plan_fires", "preview", "run_to_release", "schedule_to_dict", "validate_cron", "zone",
]  # fmt: skip
