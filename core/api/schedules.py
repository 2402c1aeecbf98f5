"""Routes for schedules: create, read, list, update, delete, pause, resume, preview, run now."""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from core.api.access import principal_of, require
from core.api.app import JSON
from core.api.deps import Route, get_engine, parse_time
from core.api.fields import QueryTime, ScheduleIdPath, check_time_range
from core.api.openapi import errors
from core.api.responses import (
    BackfillView,
    JobView,
    ScheduleList,
    SchedulePreview,
    ScheduleView,
    TimingPreviewResult,
)
from core.api.schemas import (
    Backfill,
    ScheduleCreate,
    ScheduleFields,
    ScheduleUpdate,
    TimingPreview,
    _epoch,
)
from core.engine import Engine
from core.errors import Conflict, InvalidSchedule
from core.model import iso, job_to_dict
from core.schedule import (
    ACTIVE_STATES,
    ONCE_SLACK_SECONDS,
    Schedule,
    check_jitter,
    next_fire_times,
    preview,
    schedule_to_dict,
)
from core.store.base import JobFilter

router = APIRouter(prefix="/v1", tags=["schedules"], route_class=Route)
EngineDep = Annotated[Engine, Depends(get_engine)]


def _apply_timing(s: Schedule, body: ScheduleFields, now: float, *, saving: bool = True) -> None:
    given = [k for k in ("cron", "interval", "at", "delay") if getattr(body, k) is not None]
    if len(given) > 1:
        raise InvalidSchedule(
            f"give one of 'cron', 'interval', 'at' or 'delay', not {' and '.join(given)}", field=given[1]
        )
    if body.timezone is not None:
        s.timezone = body.timezone
    if not given:
        return
    s.cron = s.interval = s.at = None
    if body.cron is not None:
        s.kind, s.cron = "cron", body.cron
    elif body.interval is not None:
        s.kind, s.interval, s.anchor = "interval", body.interval, now
    else:
        s.kind = "once"
        s.at = at = _epoch(body.at, "at") if body.at is not None else now + (body.delay or 0.0)
        if saving and at is not None and at < now - ONCE_SLACK_SECONDS:  # it would never fire, and say nothing
            raise InvalidSchedule(
                f"at: {iso(s.at)} is in the past (now is {iso(now)}): a one-time schedule fires once, at that "
                "time; give a time to come, or 'delay': 0 to run it now",
                field="at",
            )


def _check_policies(s: Schedule, now: float) -> None:
    """A jitter shorter than the gap between fire times; exclusions that leave some fire time."""
    check_jitter(s, now)
    if s.kind != "once" and not next_fire_times(s, now, 1):
        field = "exclude_cron" if s.policy.exclude_cron else "exclude_dates"
        raise InvalidSchedule(f"{field}: the exclusions leave no fire time: this schedule would never run", field=field)


def _check_will_fire(s: Schedule, now: float) -> None:
    """Refuse to unpause a one-time schedule whose time passed while it was paused: it would never fire."""
    fired = s.last_fire_at is not None and s.at is not None and s.last_fire_at >= s.at
    if s.kind == "once" and not fired and s.at is not None and s.at < now - ONCE_SLACK_SECONDS:
        raise Conflict(
            f"schedule {s.id} is one-time at {iso(s.at)}, which passed while it was paused: it would never "
            "fire; PATCH a new 'at' (or 'delay': 0 to run it now) with 'paused': false",
            state="paused",
        )


@router.post("/schedules", status_code=201, summary="Create a schedule", response_model=ScheduleView)
async def create_schedule(body: ScheduleCreate, engine: EngineDep, request: Request) -> JSON:
    await require(request, "schedules.write", body.queues())
    now = engine.clock()
    s = Schedule(0, body.name, "once", None, None, None, body.timezone or "UTC", now, body.template(),
                 body.paused, None, None, now, now)  # fmt: skip
    _apply_timing(s, body, now)
    s.policy = s.policy.replace(**body.policy_changes())
    _check_policies(s, now)
    return JSON(schedule_to_dict(await engine.create_schedule(s)), status_code=201)


@router.get("/schedules", summary="List schedules", response_model=ScheduleList)
async def list_schedules(engine: EngineDep, request: Request) -> JSON:
    p = principal_of(request)
    schedules = await engine.store.list_schedules()
    return JSON({"schedules": [schedule_to_dict(s) for s in schedules if p.sees(str(s.job.get("queue") or "default"))]})


@router.post("/schedules/preview", summary="The next N fire times of a timing not yet saved",
             response_model=TimingPreviewResult)  # fmt: skip
async def preview_timing(body: TimingPreview, engine: EngineDep) -> JSON:
    """For forms: check a cron expression (or interval, at, delay), zone and exclusions as the user
    types; `from` previews from another instant. A one-time `at` in the past previews no fire time."""
    now = engine.clock()
    s = Schedule(0, "preview", "once", None, None, None, body.timezone or "UTC", now, {}, False, None, None, now, now)
    _apply_timing(s, body, now, saving=False)
    s.policy = s.policy.replace(exclude_dates=body.exclude_dates, exclude_cron=body.exclude_cron)
    start = now if body.from_ is None else check_time_range(body.from_, "from")
    fire_times = preview(s, start - 1e-6 if s.kind == "once" else start, body.n)
    return JSON({"timezone": s.timezone, "fire_times": fire_times})


@router.get("/schedules/{schedule_id:id}", summary="Get a schedule", response_model=ScheduleView)
async def get_schedule(schedule_id: ScheduleIdPath, engine: EngineDep) -> JSON:
    return JSON(schedule_to_dict(await engine.store.get_schedule(schedule_id)))


@router.patch("/schedules/{schedule_id:id}", summary="Change a schedule", response_model=ScheduleView,
              responses=errors(409))  # fmt: skip
async def update_schedule(schedule_id: ScheduleIdPath, body: ScheduleUpdate, engine: EngineDep,
                          request: Request) -> JSON:  # fmt: skip
    if body.job is not None:  # moving it to another queue needs that queue too
        await require(request, "schedules.write", [body.job.queue])
    if body.workflow is not None:
        await require(request, "schedules.write", body.workflow.queues())
    s = await engine.store.get_schedule(schedule_id)
    before = copy.deepcopy(s)
    was_paused = s.paused
    _apply_timing(s, body, engine.clock())
    if body.name is not None:
        s.name = body.name
    if body.job is not None:
        s.job = body.job.to_spec()
    if body.workflow is not None:
        s.job = body.workflow.template()
    s.policy = s.policy.replace(**body.policy_changes())
    _check_policies(s, engine.clock())
    if body.paused is not None:
        s.paused = body.paused
    if was_paused and not s.paused:
        _check_will_fire(s, engine.clock())
    return JSON(schedule_to_dict(await engine.update_schedule(s, resumed=was_paused and not s.paused, before=before)))


@router.delete("/schedules/{schedule_id:id}", status_code=204, summary="Delete a schedule (its jobs stay)")
async def delete_schedule(schedule_id: ScheduleIdPath, engine: EngineDep) -> Response:
    await engine.store.delete_schedule(schedule_id)
    return Response(status_code=204)


@router.post("/schedules/{schedule_id:id}/pause", summary="Pause a schedule", response_model=ScheduleView,
             responses=errors(409))  # fmt: skip
async def pause_schedule(schedule_id: ScheduleIdPath, engine: EngineDep) -> JSON:
    return JSON(schedule_to_dict(await engine.set_schedule_paused(schedule_id, True)))


@router.post("/schedules/{schedule_id:id}/resume", summary="Resume a schedule", response_model=ScheduleView,
             responses=errors(409))  # fmt: skip
async def resume_schedule(schedule_id: ScheduleIdPath, engine: EngineDep) -> JSON:
    """A one-time schedule whose time passed while it was paused is refused (409): give it a new `at`."""
    s = await engine.store.get_schedule(schedule_id)
    if s.paused:
        _check_will_fire(s, engine.clock())
    return JSON(schedule_to_dict(await engine.set_schedule_paused(schedule_id, False)))


@router.post("/schedules/{schedule_id:id}/run", status_code=201, summary="Make one job from the schedule now",
             response_model=JobView)  # fmt: skip
async def run_schedule(schedule_id: ScheduleIdPath, engine: EngineDep) -> JSON:
    job = await engine.run_schedule_now(schedule_id)
    return JSON(dict(job_to_dict(job), waiting_for=(await engine.waiting_for([job]))[job.id]), status_code=201)


@router.get("/schedules/{schedule_id:id}/preview", summary="N fire times from an instant, local and UTC, marked",
            response_model=SchedulePreview)  # fmt: skip
async def preview_schedule(schedule_id: ScheduleIdPath, engine: EngineDep,
                           n: Annotated[int, Query(ge=1, le=1000)] = 10,
                           from_: Annotated[QueryTime, Query(alias="from")] = None) -> JSON:  # fmt: skip
    """From now, or from any instant (`from`): past fire times say which job they made (`job_id`),
    or `no_run`; the next one is `may_skip` while a run goes under overlap skip."""
    s = await engine.store.get_schedule(schedule_id)
    now = engine.clock()
    start = parse_time(from_, "from")
    start = now if start is None else start
    fire_times = preview(s, start, n)
    past = [datetime.fromisoformat(f["utc"]).timestamp() for f in fire_times if f["utc"] <= iso(now)]
    made = await engine.store.runs_at(s.id, past) if past else {}
    going = s.policy.overlap == "skip" and bool(
        await engine.store.list_jobs(JobFilter(states=ACTIVE_STATES, schedule_id=s.id), None, 1)
    )
    flagged = False
    for f in fire_times:
        t = datetime.fromisoformat(f["utc"]).timestamp()
        f["job_id"] = None
        if "excluded" in f["marks"]:
            continue
        if t <= now:
            job = made.get(t)
            f["job_id"] = job[0] if job else None
            if job is None:
                f["marks"].append("no_run")
        elif going and not flagged:
            f["marks"].append("may_skip")
            flagged = True
    return JSON({"schedule_id": s.id, "timezone": s.timezone, "fire_times": fire_times})


@router.post("/schedules/{schedule_id:id}/backfill", summary="Make the runs of a past range's fire times",
             response_model=BackfillView, responses=errors(409))  # fmt: skip
async def backfill_schedule(schedule_id: ScheduleIdPath, body: Backfill, engine: EngineDep) -> JSON:
    """Every fire time in [from, to] (at most 10,000; `to` not in the future) that has no job yet gets
    one: a fire time is made at most once, however often its range is backfilled. `dry_run` only counts."""
    start, end = check_time_range(body.from_, "from"), check_time_range(body.to, "to")
    times, out = await engine.backfill_schedule(schedule_id, start, end, body.overlap, body.dry_run)
    return JSON({
        "schedule_id": schedule_id, "dry_run": body.dry_run, "overlap": body.overlap, "fire_times": len(times),
        "existing": out.existing, "made": len(out.made), "would_make": len(times) - out.existing,
        "first_fire_time": iso(times[0]) if times else None, "last_fire_time": iso(times[-1]) if times else None,
        "job_ids": [j.id for j in out.made[:100]],
    })  # fmt: skip
