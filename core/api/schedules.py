"""Routes for schedules: create, read, list, update, delete, pause, resume, preview, run now."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from core.api.access import principal_of, require
from core.api.app import JSON
from core.api.deps import Route, get_engine
from core.api.fields import ScheduleIdPath
from core.api.openapi import errors
from core.api.responses import JobView, ScheduleList, SchedulePreview, ScheduleView, TimingPreviewResult
from core.api.schemas import ScheduleCreate, ScheduleFields, ScheduleUpdate, TimingPreview, _epoch
from core.engine import Engine
from core.errors import Conflict, InvalidSchedule
from core.model import iso, job_to_dict
from core.schedule import ONCE_SLACK_SECONDS, Schedule, check_jitter, preview, schedule_to_dict

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
    await require(request, "schedules.write", [body.job.queue])
    now = engine.clock()
    s = Schedule(0, body.name, "once", None, None, None, body.timezone or "UTC", now, body.job.to_spec(),
                 body.paused, None, None, now, now)  # fmt: skip
    _apply_timing(s, body, now)
    s.policy = s.policy.replace(**body.policy_changes())
    check_jitter(s, now)
    return JSON(schedule_to_dict(await engine.create_schedule(s)), status_code=201)


@router.get("/schedules", summary="List schedules", response_model=ScheduleList)
async def list_schedules(engine: EngineDep, request: Request) -> JSON:
    p = principal_of(request)
    schedules = await engine.store.list_schedules()
    return JSON({"schedules": [schedule_to_dict(s) for s in schedules if p.sees(str(s.job.get("queue") or "default"))]})


@router.post("/schedules/preview", summary="The next N fire times of a timing not yet saved",
             response_model=TimingPreviewResult)  # fmt: skip
async def preview_timing(body: TimingPreview, engine: EngineDep) -> JSON:
    """For forms: check a cron expression (or interval, at, delay) and zone as the user types.
    A one-time `at` in the past previews no fire time."""
    now = engine.clock()
    s = Schedule(0, "preview", "once", None, None, None, body.timezone or "UTC", now, {}, False, None, None, now, now)
    _apply_timing(s, body, now, saving=False)
    fire_times = preview(s, now - 1e-6 if s.kind == "once" else now, body.n)
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
    s = await engine.store.get_schedule(schedule_id)
    was_paused = s.paused
    _apply_timing(s, body, engine.clock())
    if body.name is not None:
        s.name = body.name
    if body.job is not None:
        s.job = body.job.to_spec()
    s.policy = s.policy.replace(**body.policy_changes())
    check_jitter(s, engine.clock())
    if body.paused is not None:
        s.paused = body.paused
    if was_paused and not s.paused:
        _check_will_fire(s, engine.clock())
    return JSON(schedule_to_dict(await engine.update_schedule(s, resumed=was_paused and not s.paused)))


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


@router.get("/schedules/{schedule_id:id}/preview", summary="The next N fire times, local and UTC",
            response_model=SchedulePreview)  # fmt: skip
async def preview_schedule(schedule_id: ScheduleIdPath, engine: EngineDep,
                           n: Annotated[int, Query(ge=1, le=1000)] = 10) -> JSON:  # fmt: skip
    s = await engine.store.get_schedule(schedule_id)
    return JSON({"schedule_id": s.id, "timezone": s.timezone, "fire_times": preview(s, engine.clock(), n)})
