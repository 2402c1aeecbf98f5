"""What a fire time does while earlier runs of its schedule still wait or run: the overlap policy.

A schedule's runs are its jobs. A run is *active* from the moment it is made until it ends
(succeeded, dead or cancelled); a *buffered* run is an active job held `blocked` until the runs
before it end. The store reads the active runs in the firing transaction (under the schedule's
lock on PostgreSQL), asks `decide_overlap`, and writes the answer; when a run ends, it asks
`run_to_release` which buffered run (if any) may start. Both are pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.model import iso
from core.schedule.policy import BUFFER_ALL_MAX

#: Job states in which a run of a schedule counts as still going (blocked: buffered by the policy).
ACTIVE_STATES = ("blocked", "scheduled", "queued", "running", "failed", "paused")


@dataclass(frozen=True, slots=True)
class Run:
    """An active run of a schedule, as the store read it."""

    job_id: int
    state: str
    fire_time: float | None


@dataclass(slots=True)
class FireDecision:
    """What to do with each fire time of a plan."""

    run: list[float] = field(default_factory=list)  # start now (queued, or scheduled until its jitter)
    buffer: list[float] = field(default_factory=list)  # make blocked: starts when the runs before it end
    skip: list[float] = field(default_factory=list)
    skip_reason: str = ""
    cancel: list[int] = field(default_factory=list)  # job ids to cancel (cancel_previous)


def decide_overlap(overlap: str, fire_times: list[float], active: list[Run],
                   buffer_max: int = BUFFER_ALL_MAX) -> FireDecision:  # fmt: skip
    """Each of `fire_times` (oldest first) runs, waits in the buffer, or is skipped; cancel_previous
    also names the runs to cancel. `active` are the schedule's runs that have not ended;
    `buffer_max` bounds buffer_all (a backfill buffers all of its range)."""
    out = FireDecision()
    going = [r for r in active if r.state != "blocked"]
    buffered = sum(1 for r in active if r.state == "blocked")

    def skip(t: float, reason: str) -> None:
        out.skip.append(t)
        out.skip_reason = out.skip_reason or reason

    if overlap == "cancel_previous" and fire_times:
        *superseded, last = fire_times
        for t in superseded:
            skip(t, f"superseded by the later fire time {iso(last)} (cancel_previous)")
        out.cancel = [r.job_id for r in active]
        # a run that has not started ends as it is cancelled; a running one must stop first
        if any(r.state == "running" for r in going):
            out.buffer.append(last)
        else:
            out.run.append(last)
        return out
    room = {"buffer_one": 1, "buffer_all": buffer_max}.get(overlap, 0)
    for t in fire_times:
        waiting = buffered + len(out.buffer)
        if overlap == "allow" or not (going or out.run or waiting):
            out.run.append(t)
        elif overlap == "skip":
            skip(t, _still_going(going, out.run))
        elif waiting < room:
            out.buffer.append(t)
        else:
            skip(t, f"{waiting} run(s) are buffered already, the most {overlap} holds")
    return out


def _still_going(going: list[Run], made: list[float]) -> str:
    if going:
        r = going[0]
        of = f"the run of {iso(r.fire_time)}" if r.fire_time is not None else "a manual run"
        return f"{of} (job {r.job_id}) is still {r.state} (overlap: skip)"
    if made:
        return f"the run of {iso(made[0])}, made in the same pass, is still going (overlap: skip)"
    return "a buffered run is still waiting (overlap: skip)"


def run_to_release(active: list[Run]) -> int | None:
    """When a run ends: the job id of the oldest buffered run, if no other run is still going."""
    if any(r.state != "blocked" for r in active):
        return None
    buffered = sorted((r for r in active if r.state == "blocked"), key=lambda r: (r.fire_time or 0.0, r.job_id))
    return buffered[0].job_id if buffered else None
