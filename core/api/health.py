"""The probes a platform asks a node: /livez (the process answers) and /readyz (it can serve).

Readiness needs the store to answer and its schema to be the one this code ships. The Redis bus
is reported but does not make a node unready: without Redis a node goes on alone (its feed
subscribers catch up with `since` once Redis is back), and failing every node's readiness at once
would take the whole service away for a fault that only delays events between nodes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

from fastapi import APIRouter, Depends

from core.api.app import JSON
from core.api.deps import Route, get_engine
from core.api.responses import Alive, NotReady, Ready
from core.bus.redis import RedisBus
from core.engine import Engine
from core.store import schema
from core.store.postgres import PostgresStore

router = APIRouter(tags=["system"], route_class=Route)
EngineDep = Annotated[Engine, Depends(get_engine)]
STORE_TIMEOUT = 2.0  # seconds: a probe that waits longer than the platform's timeout tells it nothing
STARTED = time.monotonic()


@router.get("/livez", summary="The process is alive (for a liveness probe: no store or bus call)",
            response_model=Alive)  # fmt: skip
async def livez() -> JSON:
    return JSON({"status": "alive", "uptime_seconds": round(time.monotonic() - STARTED, 1)})


@router.get("/readyz", summary="The node can serve: its store answers and its schema is migrated (else 503)",
            response_model=Ready, responses={503: {"model": NotReady, "description": "not ready: the checks say why"}})  # fmt: skip
async def readyz(engine: EngineDep) -> JSON:
    checks: dict[str, str] = {}
    ready = True
    try:
        await asyncio.wait_for(engine.store.last_seq(), STORE_TIMEOUT)
        checks["store"] = "ok"
    except Exception as exc:  # any failure of the store is the answer, not a 500
        ready = False
        checks["store"] = f"unreachable: {str(exc).strip() or type(exc).__name__}"[:300]
    kind = "postgres" if isinstance(engine.store, PostgresStore) else "sqlite"
    known = schema.load(kind)[-1].version
    current = int(getattr(engine.store, "schema_version", 0) or 0)
    checks["schema"] = f"version {current} of {known}"
    if current != known:
        ready = False
    bus = engine.bus
    if isinstance(bus, RedisBus):
        checks["bus"] = (
            "redis connected" if bus.connected else "redis unreachable: events reach this node's subscribers only"
        )
    else:
        checks["bus"] = "in-process"
    if ready:
        return JSON({"status": "ready", "checks": checks})
    failed = "; ".join(f"{k}: {v}" for k, v in checks.items() if k != "bus")
    return JSON({"error": "unavailable", "message": f"not ready: {failed}", "field": None, "status": "not ready",
                 "checks": checks}, status_code=503)  # fmt: skip
