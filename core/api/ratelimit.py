"""Rate limits: a token bucket per client, in this node's memory or shared by every node through Redis.

A client is a signed-in principal, or, for callers without sign-in (public routes, failed
sign-ins, a node without sign-in reached through a trusted proxy), its IP address. With
`redis_url` set, all nodes of a cluster take from the same buckets: one atomic Lua script,
one round trip per request, on Redis's clock. When Redis cannot be reached the node limits
on its own (logged once per outage) and tries Redis again a little later: a limiter that is
down never turns a request into an error.
"""

from __future__ import annotations

import logging
import math
import time

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

log = logging.getLogger("jobdeck.ratelimit")

RETRY_REDIS_AFTER = 2.0  # seconds on the node's own buckets before Redis is tried again
REDIS_TIMEOUT = 0.5  # a Redis that does not answer within this is treated as down

# KEYS[1]: the bucket; ARGV: rate (tokens a second), burst. Returns the seconds to wait ("0": go ahead).
# Lua numbers become integers on the way back to Redis, so the state and the answer travel as text.
TAKE_SCRIPT = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local wait = 0
if tokens < 1 then
  wait = (1 - tokens) / rate
else
  tokens = tokens - 1
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'at', string.format('%.6f', now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return string.format('%.6f', wait)
"""


class TokenBuckets:
    """Buckets in this node's memory: `rate` requests a second on average, bursts up to `burst`."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = float(max(burst, 1))
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def take(self, key: str, now: float | None = None) -> float:
        """0 if the request may go ahead, else the seconds until it could."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        tokens, at = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate
        self._buckets[key] = (tokens - 1.0, now)
        if len(self._buckets) > 100_000:  # forget idle clients (their buckets are full again anyway)
            self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < self.burst / self.rate}
        return 0.0


class RateLimiter:
    """The node's limiter: shared buckets in Redis when `redis_url` is set, else (and while Redis
    is down) the node's own."""

    def __init__(self, rate: float, burst: int, redis_url: str = "", namespace: str = "jobdeck") -> None:
        self.local = TokenBuckets(rate, burst)
        self.rate = self.local.rate
        self.burst = self.local.burst
        self.prefix = f"jobdeck:ratelimit:{namespace}:"
        self.redis_url = redis_url
        self._redis: Redis | None = None
        if redis_url and rate > 0:
            self._redis = Redis.from_url(
                redis_url,
                retry=Retry(NoBackoff(), 0),
                socket_timeout=REDIS_TIMEOUT,
                socket_connect_timeout=REDIS_TIMEOUT,
            )
            self._script = self._redis.register_script(TAKE_SCRIPT)
        self._down_until = 0.0  # while Redis is down: when to try it again
        self._down = False

    @property
    def shared(self) -> bool:
        """Whether the buckets are the cluster's (Redis answers), not only this node's."""
        return self._redis is not None and not self._down

    async def take(self, key: str) -> float:
        """0 if a request of `key` may go ahead, else the seconds until it could."""
        if self.rate <= 0:
            return 0.0
        if self._redis is None or (self._down and time.monotonic() < self._down_until):
            return self.local.take(key)
        try:
            wait = float(await self._script(keys=[self.prefix + key], args=[repr(self.rate), repr(self.burst)]))
        except (RedisError, OSError) as exc:
            if not self._down:
                log.warning("rate limits: Redis is unreachable (%s); each node limits on its own until it is back", exc)
            self._down = True
            self._down_until = time.monotonic() + RETRY_REDIS_AFTER
            return self.local.take(key)
        if self._down:
            log.info("rate limits: Redis is back; the buckets are shared by every node again")
            self._down = False
        return wait if math.isfinite(wait) else 0.0

    async def close(self) -> None:
        """Close the Redis connections (if any)."""
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None
