"""Small shared pieces of the routers."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import Request

from core.engine import Engine
from core.errors import InvalidInput


def get_engine(request: Request) -> Engine:
    """The node's engine (set by create_app)."""
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
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()
