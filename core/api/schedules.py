"""Routes for schedules: create, read, list, update, delete, pause, resume, preview, run now."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from core.api.access import principal_of, require
from core.api.deps import Route, get_engine
from core.api.schemas import ScheduleCreate, ScheduleFields, ScheduleUpdate, TimingPreview, _epoch
from core.engine import Engine
from core.errors import InvalidSchedule
from core.model import job_to_dict
from core.schedule import Schedule, preview, schedule_to_dict

router = APIRouter(prefix="/v1", tags=["schedules"], route_class=Route)
EngineDep = Annotated[Engine, Depends(get_engine)]


def _apply_timing(s: Schedule, body: ScheduleFields, now: float) -> None:
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
        s.at = _epoch(body.at) if body.at is not None else now + (body.delay or 0.0)


@router.post("/schedules", status_code=201, summary="Create a schedule")
async def create_schedule(body: ScheduleCreate, engine: EngineDep, request: Request) -> dict[str, Any]:
    await require(request, "schedules.write", [body.job.queue])
    now = engine.clock()
    s = Schedule(0, body.name, "once", None, None, None, body.timezone or "UTC", now, body.job.to_spec(),
                 body.paused, None, None, now, now)  # fmt: skip
    _apply_timing(s, body, now)
    return schedule_to_dict(await engine.create_schedule(s))


@router.get("/schedules", summary="List schedules")
async def list_schedules(engine: EngineDep, request: Request) -> dict[str, Any]:
    p = principal_of(request)
    schedules = await engine.store.list_schedules()
    return {"schedules": [schedule_to_dict(s) for s in schedules if p.sees(str(s.job.get("queue") or "default"))]}


@router.post("/schedules/preview", summary="The next N fire times of a timing not yet saved")
async def preview_timing(body: TimingPreview, engine: EngineDep) -> dict[str, Any]:
    """For forms: check a cron expression (or interval, at, delay) and zone as the user types."""
    now = engine.clock()
    s = Schedule(0, "preview", "once", None, None, None, body.timezone or "UTC", now, {}, False, None, None, now, now)
    _apply_timing(s, body, now)
    if s.kind == "once" and body.at is None and body.delay is None:
        raise InvalidSchedule("give one of 'cron', 'interval', 'at' or 'delay'", field="cron")
    return {"timezone": s.timezone, "fire_times": preview(s, now - 1e-6 if s.kind == "once" else now, body.n)}


@router.get("/schedules/{schedule_id}", summary="Get a schedule")
async def get_schedule(schedule_id: int, engine: EngineDep) -> dict[str, Any]:
    return schedule_to_dict(await engine.store.get_schedule(schedule_id))


@router.patch("/schedules/{schedule_id}", summary="Change a schedule")
async def update_schedule(
    schedule_id: int, body: ScheduleUpdate, engine: EngineDep, request: Request
) -> dict[str, Any]:
    if body.job is not None:  # moving it to another queue needs that queue too
        await require(request, "schedules.write", [body.job.queue])
    s = await engine.store.get_schedule(schedule_id)
    _apply_timing(s, body, engine.clock())
    if body.name is not None:
        s.name = body.name
    if body.job is not None:
        s.job = body.job.to_spec()
    if body.paused is not None:
        s.paused = body.paused
    return schedule_to_dict(await engine.update_schedule(s))


@router.delete("/schedules/{schedule_id}", status_code=204, summary="Delete a schedule (its jobs stay)")
async def delete_schedule(schedule_id: int, engine: EngineDep) -> Response:
    await engine.store.delete_schedule(schedule_id)
    return Response(status_code=204)


@router.post("/schedules/{schedule_id}/pause", summary="Pause a schedule")
async def pause_schedule(schedule_id: int, engine: EngineDep) -> dict[str, Any]:
    return schedule_to_dict(await engine.set_schedule_paused(schedule_id, True))


@router.post("/schedules/{schedule_id}/resume", summary="Resume a schedule")
async def resume_schedule(schedule_id: int, engine: EngineDep) -> dict[str, Any]:
    return schedule_to_dict(await engine.set_schedule_paused(schedule_id, False))


@router.post("/schedules/{schedule_id}/run", status_code=201, summary="Make one job from the schedule now")
async def run_schedule(schedule_id: int, engine: EngineDep) -> dict[str, Any]:
    return job_to_dict(await engine.run_schedule_now(schedule_id))


@router.get("/schedules/{schedule_id}/preview", summary="The next N fire times, local and UTC")
async def preview_schedule(
    schedule_id: int, engine: EngineDep, n: Annotated[int, Query(ge=1, le=1000)] = 10
) -> dict[str, Any]:
    s = await engine.store.get_schedule(schedule_id)
    return {"schedule_id": s.id, "timezone": s.timezone, "fire_times": preview(s, engine.clock(), n)}
