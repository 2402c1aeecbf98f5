"""Routes about the node: health, agents, stats."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request

from core.api.access import principal_of
from core.api.app import JSON
from core.api.deps import Route, get_engine
from core.api.fields import AgentPath
from core.api.responses import AgentList, AgentView, Health, Stats, StatsHistory
from core.engine import Engine
from core.relay import relay_lag
from core.store.base import HISTORY_RANGES, history_view, states_total
from core.store.pickup import history_view as pickup_view
from core.version import version

router = APIRouter(tags=["system"], route_class=Route)
EngineDep = Annotated[Engine, Depends(get_engine)]


@router.get("/healthz", summary="Liveness and a few facts", response_model=Health)
async def healthz(engine: EngineDep) -> JSON:
    return JSON({
        "status": "ok",
        "version": version(),
        "schema_version": getattr(engine.store, "schema_version", None),
        "last_seq": await engine.store.last_seq(),
        "agents": len(engine.hub.sessions),
    })  # fmt: skip


@router.get("/v1/agents", summary="Connected agents with their slots and current jobs (also a WebSocket: see above)",
            response_model=AgentList)  # fmt: skip
async def list_agents(engine: EngineDep) -> JSON:
    return JSON({"agents": engine.hub.describe()})


@router.post("/v1/agents/{name}/drain", summary="Give an agent no new work; it finishes what it runs",
             response_model=AgentView)  # fmt: skip
async def drain_agent(name: AgentPath, engine: EngineDep) -> JSON:
    return JSON(await engine.hub.drain(name))


@router.get("/v1/stats/history", summary="Finished jobs by outcome and pick-up latency (held vs waiting for a slot) per interval over 15m, 1h or 24h (from the store)",
            response_model=StatsHistory)  # fmt: skip
async def stats_history(
    engine: EngineDep, range_: Annotated[Literal["15m", "1h", "24h"], Query(alias="range")] = "1h"
) -> JSON:
    """Read from the events the store keeps (JOBDECK_EVENT_RETENTION_HOURS) and the pick-up history the
    claims keep (core/store/pickup.py), so it covers the whole range whatever the node's uptime and
    on every node alike; every bucket is present, zeros included."""
    now = engine.clock()
    span, bucket = HISTORY_RANGES[range_]
    out = history_view(await engine.store.finished_history(now - span, bucket), now, range_)
    out["pickup"] = pickup_view(await engine.store.pickup_history(now - span, max(60.0, bucket)), now, span, bucket)
    return JSON(out)


@router.get("/v1/stats", summary="Counts by state and queue; finished jobs per second; the outbox relays' lag",
            response_model=Stats)  # fmt: skip
async def stats(engine: EngineDep, request: Request) -> JSON:
    out = await engine.store.stats(engine.clock())
    out["relays"] = await relay_lag(engine.store, engine.clock())  # {"kafka": {"behind_events", ...}}
    out["dispatch"] = engine.dispatch_counts()
    p = principal_of(request)
    if not p.sees_everything:  # counts of the caller's queues only (throughput stays the node's)
        out["by_queue"] = {q: n for q, n in out["by_queue"].items() if p.sees(q)}
        out["by_state"] = states_total(out["by_queue"])
    return JSON(out)
