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
from pydantic import ValidationError

from core.api.access import authenticate, principal_of
from core.api.app import JSON
from core.api.deps import Route, get_engine
from core.api.fields import ID_MAX, QueryText, Seq
from core.api.responses import EventPage
from core.api.ws_messages import FeedFilterMessage
from core.engine import Engine
from core.errors import Forbidden, InvalidInput, JobDeckError
from core.store.base import EventFilter

router = APIRouter(tags=["events"], route_class=Route)
EngineDep = Annotated[Engine, Depends(get_engine)]
CATCH_UP_PAGE = 1000
FRAME_EVENTS = 1000  # events per message with `frames=lines`
FRAMES = ("one", "lines")


JOB_IDS_PATTERN = r"^[0-9,]*$"


def _seq(value: str, field: str) -> int:
    """A sequence number or id from a query string (digits, at most ID_MAX), or a 422 naming the field."""
    digits = value.lstrip("0") or "0"  # int() of thousands of digits raises: count them first
    if not value.isascii() or not value.isdigit() or len(digits) > 19 or int(digits) > ID_MAX:
        raise InvalidInput(f"{field}: {value[:40]!r} is not a whole number from 0 to {ID_MAX}", field=field)
    return int(digits)


def parse_filter(queues: str | None, job_ids: str | None, types: str | None) -> EventFilter:
    """Comma-separated lists to an EventFilter."""
    ids = frozenset(_seq(x, "job_ids") for x in (job_ids or "").split(",") if x)
    return EventFilter(
        queues=frozenset(q for q in (queues or "").split(",") if q),
        job_ids=ids,
        types=frozenset(t for t in (types or "").split(",") if t),
    )


@router.get("/v1/events", summary="Stored events after `since`, oldest first (also a WebSocket: see above)",
            response_model=EventPage)  # fmt: skip
async def list_events(
    engine: EngineDep,
    request: Request,
    since: Seq = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    queues: QueryText = None,
    job_ids: Annotated[
        str | None, Query(max_length=10_000, pattern=JOB_IDS_PATTERN, description="comma-separated job ids")
    ] = None,
    types: QueryText = None,
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
        for name in ("queues", "types"):
            if "\x00" in q.get(name, ""):
                raise InvalidInput(f"{name}: NUL characters are not allowed", field=name)
        flt = parse_filter(q.get("queues"), q.get("job_ids"), q.get("types"))
        since = _seq(q["since"], "since") if q.get("since") not in (None, "") else None
        frames = q.get("frames") or "one"
        if frames not in FRAMES:
            raise InvalidInput(f"frames: {frames[:40]!r} is not one of {', '.join(FRAMES)} (one event per message, "
                               "or up to 1,000 per message, one per line)", field="frames")  # fmt: skip
    except JobDeckError as err:
        await ws.send_text(_control("stream.error", error=err.code, status=err.status, message=err.message,
                                    field=err.field))  # fmt: skip
        await ws.close(code=1008, reason=err.message[:120])  # a close reason is at most 123 bytes
        return
    sees = None if p.sees_everything else p.sees  # a team's subscriber gets its queues' events (and queue-less ones)

    async def send(bodies: list[bytes]) -> None:
        if frames == "lines":
            for i in range(0, len(bodies), FRAME_EVENTS):
                await ws.send_text(b"\n".join(bodies[i : i + FRAME_EVENTS]).decode())
        else:
            for body in bodies:
                await ws.send_text(body.decode())

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
                await send([e.body for _, e in stored if sees is None or sees(e.queue)])
                if len(page) < CATCH_UP_PAGE or not stored:
                    break
                last = stored[-1][0]
            last = max(last, upto)
            await ws.send_text(_control("stream.caught_up", last_seq=last))

        async def read_filters() -> None:
            nonlocal flt
            while True:
                frame = await ws.receive()
                if frame["type"] == "websocket.disconnect":
                    return
                try:
                    f = FeedFilterMessage.model_validate_json(frame.get("text") or frame.get("bytes") or b"").filter
                except ValidationError as exc:
                    first = exc.errors()[0]
                    where = ".".join(str(p) for p in first["loc"]) or "message"
                    await ws.send_text(_control("stream.error", error="invalid", status=422, field=where,
                                                message=f"{where}: {first['msg']}; expected "
                                                '{"filter": {"queues": [...], "job_ids": [...], "types": [...]}}'))  # fmt: skip
                    continue
                flt = EventFilter(queues=frozenset(f.queues), job_ids=frozenset(f.job_ids), types=frozenset(f.types))

        reader = asyncio.create_task(read_filters())
        reader.add_done_callback(lambda _: sub.wake())  # a disconnect ends the wait below
        try:
            await catch_up()
            while not reader.done():
                # Awaited here, not in a task of its own: this handler then runs in the same turn of
                # the loop as the commit's publish, before the submitter's response is built (a
                # 10,000-job response took 0.5 s of the loop, and the feed waited for it).
                events = await sub.get()
                if reader.done():
                    break
                if sub.overflowed:
                    sub.reset()
                    await catch_up()
                    continue
                bodies = []
                for e in events:
                    if e.seq is not None:
                        if e.seq <= last:
                            continue
                        last = e.seq
                    if flt.matches(e.type, e.job_id, e.queue) and (sees is None or sees(e.queue)):
                        bodies.append(e.body)
                await send(bodies)
        except (WebSocketDisconnect, RuntimeError, ConnectionError):
            pass
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
