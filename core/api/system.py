"""Routes about the node: health, agents, stats."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from core.api.deps import Route, get_engine
from core.engine import Engine

router = APIRouter(tags=["system"], route_class=Route)
EngineDep = Annotated[Engine, Depends(get_engine)]


@router.get("/healthz", summary="Liveness and a few facts")
async def healthz(engine: EngineDep) -> dict[str, Any]:
    return {
        "status": "ok",
        "schema_version": getattr(engine.store, "schema_version", None),
        "last_seq": await engine.store.last_seq(),
        "agents": len(engine.hub.sessions),
    }


@router.get("/v1/agents", summary="Connected agents with their slots and current jobs")
async def list_agents(engine: EngineDep) -> dict[str, Any]:
    return {"agents": engine.hub.describe()}


@router.post("/v1/agents/{name}/drain", summary="Give an agent no new work; it finishes what it runs")
async def drain_agent(name: str, engine: EngineDep) -> dict[str, Any]:
    return await engine.hub.drain(name)


@router.get("/v1/stats", summary="Counts by state and queue; finished jobs per second over the last minute")
async def stats(engine: EngineDep) -> dict[str, Any]:
    return await engine.store.stats(engine.clock())
