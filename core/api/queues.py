"""Routes for queues: list with depth and running counts, pause, resume, concurrency."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from core.api.access import principal_of
from core.api.deps import Route, get_engine
from core.api.schemas import ConcurrencyChange
from core.engine import Engine

router = APIRouter(prefix="/v1", tags=["queues"], route_class=Route)
EngineDep = Annotated[Engine, Depends(get_engine)]


@router.get("/queues", summary="Queues with depth and running counts")
async def list_queues(engine: EngineDep, request: Request) -> dict[str, Any]:
    p = principal_of(request)
    return {"queues": [q for q in await engine.store.list_queues() if p.sees(q["name"])]}


@router.post("/queues/{name}/pause", summary="Stop starting jobs from a queue")
async def pause_queue(name: str, engine: EngineDep) -> dict[str, Any]:
    return await engine.update_queue(name, paused=True)


@router.post("/queues/{name}/resume", summary="Start jobs from a queue again")
async def resume_queue(name: str, engine: EngineDep) -> dict[str, Any]:
    return await engine.update_queue(name, paused=False)


@router.put("/queues/{name}/concurrency", summary="Limit how many jobs of a queue run at once")
async def set_concurrency(name: str, body: ConcurrencyChange, engine: EngineDep) -> dict[str, Any]:
    return await engine.update_queue(name, concurrency=body.concurrency)
