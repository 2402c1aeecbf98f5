"""Where the dashboard's core is and how its backend signs in to it: read once from the
environment that `jobdeck web` sets (JOBDECK_WEB_SERVER), else JOBDECK_SERVER."""

from __future__ import annotations

import os

from core.auth import credentials
from core.client import DEFAULT_SERVER, JobDeckClient


def core_server() -> str:
    """The core node's URL this dashboard talks to."""
    return os.environ.get("JOBDECK_WEB_SERVER") or os.environ.get("JOBDECK_SERVER") or DEFAULT_SERVER


def public_core_url() -> str:
    """The core's URL as browsers reach it (for the sign-in redirect); JOBDECK_WEB_PUBLIC_CORE overrides."""
    return os.environ.get("JOBDECK_WEB_PUBLIC_CORE") or core_server()


def ca_file() -> str | None:
    """A CA file (PEM) to trust for an https:// core besides the system's: JOBDECK_CA_FILE."""
    return os.environ.get("JOBDECK_CA_FILE") or None


async def service_token() -> str | None:
    """The backend's own token for the live feed: JOBDECK_TOKEN, else the cached `jobdeck login`."""
    return await credentials.token_for(core_server())


_clients: dict[str, JobDeckClient] = {}


def client_for(token: str | None) -> JobDeckClient:
    """One pooled client per token (a browser session's, or none when sign-in is off)."""
    key = token or ""
    client = _clients.get(key)
    if client is None:
        if len(_clients) > 256:  # forget old sessions' clients; their connections close with them
            _clients.clear()
        client = _clients[key] = JobDeckClient(core_server(), token=token, timeout=10.0, ca_file=ca_file())
    return client
