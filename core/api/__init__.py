"""The HTTP API: REST routes under /v1, the /v1/events feed, and the in-process agent link."""

from core.api.app import create_app

__all__ = ["create_app"]
