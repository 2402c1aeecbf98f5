"""Routes for queues: list with depth and running counts, pause, resume, concurrency, rate limits, and
the circuit breakers of their http tasks."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from core.api.access import principal_of
from core.api.app import JSON
from core.api.deps import Route, get_engine
from core.api.fields import HostPath, QueuePath
from core.api.responses import BreakerList, BreakerView, KeyUsage, QueueList, QueueSettings
from core.api.schemas import ConcurrencyChange, QueueChange
from core.engine import Engine
from core.errors import NotFound

router = APIRouter(prefix="/v1", tags=["queues"], route_class=Route)
EngineDep = Annotated[Engine, Depends(get_engine)]


@router.get("/queues", summary="Queues with depth and running counts", response_model=QueueList)
async def list_queues(engine: EngineDep, request: Request) -> JSON:
    p = principal_of(request)
    return JSON({"queues": [q for q in await engine.store.list_queues() if p.sees(q["name"])]})


@router.post("/queues/{name}/pause", summary="Stop starting jobs from a queue", response_model=QueueSettings)
async def pause_queue(name: QueuePath, engine: EngineDep) -> JSON:
    return JSON(await engine.update_queue(name, paused=True))


@router.post("/queues/{name}/resume", summary="Start jobs from a queue again", response_model=QueueSettings)
async def resume_queue(name: QueuePath, engine: EngineDep) -> JSON:
    return JSON(await engine.update_queue(name, paused=False))


@router.put("/queues/{name}/concurrency", summary="Limit how many jobs of a queue run at once",
            response_model=QueueSettings)  # fmt: skip
async def set_concurrency(name: QueuePath, body: ConcurrencyChange, engine: EngineDep) -> JSON:
    return JSON(await engine.update_queue(name, concurrency=body.concurrency))


@router.patch("/queues/{name}", summary="Change a queue's settings: pause, concurrency, rate limit",
              description="A queue no job named yet is created with these settings (limits come before jobs).",
              response_model=QueueSettings)  # fmt: skip
async def change_queue(name: QueuePath, body: QueueChange, engine: EngineDep) -> JSON:
    return JSON(await engine.update_queue(name, **body.changes()))


@router.get(
    "/queues/{name}/keys",
    summary="Per-key usage: running jobs per concurrency key, waiting jobs per fairness key",
    response_model=KeyUsage,
)
async def queue_keys(name: QueuePath, engine: EngineDep) -> JSON:
    if name not in await engine.store.queue_settings():  # type: ignore[attr-defined]
        raise NotFound(f"no queue named {name!r}", field="queue")
    usage = await engine.store.key_usage(name)  # type: ignore[attr-defined]
    limits = engine.queue_settings.get(name)
    usage["key_concurrency"] = limits.key_concurrency if limits else None
    usage["fairness_weights"] = limits.fairness_weights if limits else None
    return JSON(usage)


@router.get(
    "/breakers", summary="Circuit breakers of http tasks, per queue and target host", response_model=BreakerList
)
async def list_breakers(engine: EngineDep, request: Request) -> JSON:
    p = principal_of(request)
    now = engine.clock()
    found = await engine.store.list_breakers()  # type: ignore[attr-defined]
    views = [b.view(now, engine.breakers.settings(b.queue)) for b in found if p.sees(b.queue)]
    return JSON({"breakers": views})


@router.post(
    "/queues/{name}/breakers/{host}/reset",
    summary="Close a queue's circuit breaker for one host now (its held jobs are released)",
    response_model=BreakerView,
)
async def reset_breaker(name: QueuePath, host: HostPath, engine: EngineDep) -> JSON:
    b = await engine.breakers.reset(name, host)
    return JSON(b.view(engine.clock(), engine.breakers.settings(name)))
