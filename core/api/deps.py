"""Small shared pieces of the routers."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute

from core.api.fields import check_time_range
from core.engine import Engine
from core.errors import InvalidInput


class _Request(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = orjson.loads(await self.body())  # its errors are json.JSONDecodeError too
        return self._json


class Route(APIRoute):
    """Every route of the API: request bodies are parsed with orjson (several times faster than
    the standard library on 10,000-job batches)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(_Request(request.scope, request.receive))

        return route


async def get_engine(request: Request) -> Engine:
    """The node's engine (set by create_app). Async, so FastAPI does not hop to a thread for it."""
    engine: Engine = request.app.state.engine
    return engine


def parse_time(value: str | None, field: str) -> float | None:
    """An ISO 8601 time (UTC if no offset) to Unix seconds, or a 422 naming the field."""
    if value is None or value == "":
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            f"{field}: {value!r} is not an ISO 8601 time such as 2026-01-31T09:00:00Z", field=field
        ) from None
    return check_time_range(dt, field)
