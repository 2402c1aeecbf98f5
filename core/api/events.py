"""The live feed: `/v1/events` over WebSocket (resumable with `since`), and a REST page of events.

A subscriber first receives every stored event after `since` that passes its filter, then
a `stream.caught_up` marker, then live events as they commit. Sequence numbers only grow;
a client that reconnects with `since=<last seq it saw>` misses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query, Request, WebSocket, WebSocketDisconnect

from core.api.access import authenticate, principal_of
from core.api.app import JSON
from core.api.deps import Route, get_engine
from core.engine import Engine
from core.errors import Forbidden, InvalidInput, JobDeckError
from core.store.base import EventFilter

router = APIRouter(tags=["events"], route_class=Route)
EngineDep = Annotated[Engine, Depends(get_engine)]
CATCH_UP_PAGE = 1000


def parse_filter(queues: str | None, job_ids: str | None, types: str | None) -> EventFilter:
    """Comma-separated lists to an EventFilter."""
    try:
        ids = frozenset(int(x) for x in (job_ids or "").split(",") if x)
    except ValueError:
        raise InvalidInput(f"job_ids: {job_ids!r} is not a comma-separated list of job ids", field="job_ids") from None
    return EventFilter(
        queues=frozenset(q for q in (queues or "").split(",") if q),
        job_ids=ids,
        types=frozenset(t for t in (types or "").split(",") if t),
    )


@router.get("/v1/events", summary="Stored events after `since`, oldest first")
async def list_events(
    engine: EngineDep,
    request: Request,
    since: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    queues: str | None = None,
    job_ids: str | None = None,
    types: str | None = None,
) -> JSON:
    events = await engine.store.events_since(since, limit, parse_filter(queues, job_ids, types))
    p = principal_of(request)
    if not p.sees_everything:
        events = [e for e in events if p.sees(e.queue)]
    return JSON(b'{"events":[' + b",".join(e.body for e in events) + b"]}")


def _control(type_: str, **data: Any) -> str:
    return orjson.dumps({"type": type_, "seq": None, **data}).decode()


@router.websocket("/v1/events")
async def events_ws(ws: WebSocket) -> None:
    """Query: since (resume after this seq; absent = from now), queues, job_ids, types (comma lists).

    The client may send `{"filter": {"queues": [...], "job_ids": [...], "types": [...]}}` later
    to change what it receives.
    """
    engine: Engine = ws.app.state.engine
    store = engine.store
    await ws.accept()
    q = ws.query_params
    try:
        p = await authenticate(ws)
        if not p.may("jobs.read"):
            raise Forbidden(p.refusal("jobs.read"))
        flt = parse_filter(q.get("queues"), q.get("job_ids"), q.get("types"))
        since = int(q["since"]) if q.get("since") not in (None, "") else None
    except (JobDeckError, ValueError) as exc:
        err = exc if isinstance(exc, JobDeckError) else InvalidInput(str(exc))
        await ws.send_text(_control("stream.error", error=err.code, status=err.status, message=err.message))
        await ws.close(code=1008)
        return
    sees = None if p.sees_everything else p.sees  # a team's subscriber gets its queues' events (and queue-less ones)
    with engine.bus.subscribe() as sub:
        last = await store.last_seq() if since is None else since

        async def catch_up() -> None:
            nonlocal last
            oldest = await store.oldest_seq()  # type: ignore[attr-defined]
            if since is not None and oldest and last + 1 < oldest:
                await ws.send_text(_control("stream.gap", since=last, oldest=oldest))
            upto = await store.last_seq()
            while last < upto:
                page = await store.events_since(last, CATCH_UP_PAGE, flt)
                stored = [(e.seq, e) for e in page if e.seq is not None and e.seq <= upto]
                for _, e in stored:
                    if sees is None or sees(e.queue):
                        await ws.send_text(e.body.decode())
                if len(page) < CATCH_UP_PAGE or not stored:
                    break
                last = stored[-1][0]
            last = max(last, upto)
            await ws.send_text(_control("stream.caught_up", last_seq=last))

        async def read_filters() -> None:
            nonlocal flt
            while True:
                msg = orjson.loads(await ws.receive_text())
                f = msg.get("filter") if isinstance(msg, dict) else None
                if isinstance(f, dict):
                    flt = EventFilter(
                        queues=frozenset(map(str, f.get("queues") or [])),
                        job_ids=frozenset(int(x) for x in f.get("job_ids") or []),
                        types=frozenset(map(str, f.get("types") or [])),
                    )

        reader = asyncio.create_task(read_filters())
        try:
            await catch_up()
            while not reader.done():
                get = asyncio.ensure_future(sub.get())
                done, _ = await asyncio.wait({get, reader}, return_when=asyncio.FIRST_COMPLETED)
                if get not in done:
                    get.cancel()
                    break
                events = get.result()
                if sub.overflowed:
                    sub.reset()
                    await catch_up()
                    continue
                for e in events:
                    if e.seq is not None:
                        if e.seq <= last:
                            continue
                        last = e.seq
                    if flt.matches(e.type, e.job_id, e.queue) and (sees is None or sees(e.queue)):
                        await ws.send_text(e.body.decode())
        except (WebSocketDisconnect, RuntimeError, ConnectionError):
            pass
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
