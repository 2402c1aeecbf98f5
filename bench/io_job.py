"""A job that does a little real I/O: one Redis PING (about 0.1 ms on loopback), the shape of a
task that reads a cache or a key before it returns. Runs in the agent's event loop; the client
and its connection pool are made once per agent process, as a real task would keep them."""

from __future__ import annotations

from typing import Any

_clients: dict[str, Any] = {}


async def redis_ping(url: str = "redis://127.0.0.1:6379/0") -> bool:
    """One PING to the Redis at `url`; True when it answered PONG."""
    client = _clients.get(url)
    if client is None:
        import redis.asyncio  # the agent's import, not the benchmark's

        client = _clients[url] = redis.asyncio.Redis.from_url(url)
    return bool(await client.ping())
