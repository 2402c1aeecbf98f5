"""What the shared rate limit costs: the same signed-in requests to a node whose token buckets are in
its memory and to one whose buckets are in Redis (shared by every node: one Lua script, one round
trip per request), measured in turns in the same run, so load on the machine hits both alike.

The limit is set too high to refuse anything: this measures the bucket's cost, not its refusals.
Both nodes are `jobdeck server` on SQLite; the Redis one also runs the Redis event bus, idle here
(reads write no events). The bucket alone is timed in this process too (no HTTP around it).
"""

from __future__ import annotations

import time

import orjson

from bench.context import RunContext
from bench.rawhttp import Rate, build_request, request_rate
from bench.report import Figure, percentile
from bench.server import BenchError, jobdeck_server
from bench.workload import noop_job
from core.api.ratelimit import RateLimiter
from core.auth.tokens import new_token, token_hash

QUEUE = "bench"
ROUNDS = 3  # turns of memory, Redis, memory, Redis ... ; each turn a third of --seconds
TAKES = 5_000  # bucket-only timing: sequential takes per kind


async def _bucket_micros(redis_url: str) -> dict[str, float]:
    """Median microseconds of one take: the in-memory bucket and the Redis script, in this process."""
    out: dict[str, float] = {}
    for kind, url in (("memory", ""), ("redis", redis_url)):
        limiter = RateLimiter(1e9, 10**9, url, namespace=f"bench-{time.time_ns()}")
        try:
            await limiter.take("warm-up")
            if url and not limiter.shared:
                raise BenchError(f"Redis at {url} does not answer: the shared bucket cannot be measured")
            times = []
            for i in range(TAKES):
                t = time.perf_counter()
                await limiter.take(f"principal:{i % 50}")
                times.append(time.perf_counter() - t)
            out[kind] = percentile(sorted(times), 50) * 1e6
        finally:
            await limiter.close()
    return out


async def rate_limit_cost(ctx: RunContext) -> list[Figure]:
    """GET /v1/jobs/1 with a static token, one connection: in-memory bucket vs Redis bucket."""
    token = new_token()
    tokens = [{"name": "bench", "sha256": token_hash(token), "role": "operator", "teams": ["bench"]}]
    base = {"JOBDECK_AUTH": "token", "JOBDECK_TOKENS": orjson.dumps(tokens).decode(),
            "JOBDECK_TEAM_QUEUES": orjson.dumps({"bench": [QUEUE]}).decode(),
            "JOBDECK_RATE_LIMIT_PER_SECOND": "1000000000", "JOBDECK_RATE_LIMIT_BURST": "1000000000"}  # fmt: skip
    redis_url = ctx.backend.redis_url
    modes = {"memory": base, "redis": {**base, "JOBDECK_REDIS_URL": redis_url}}
    submit = build_request("POST", "/v1/jobs", orjson.dumps(noop_job(QUEUE)), token)
    read = build_request("GET", "/v1/jobs/1", None, token)
    rates: dict[str, list[Rate]] = {m: [] for m in modes}
    async with (
        jobdeck_server("ratelimit-memory", 0, ctx.servers, "server", env=modes["memory"]) as memory,
        jobdeck_server("ratelimit-redis", 0, ctx.servers, "server", env=modes["redis"]) as redis,
    ):
        urls = {"memory": memory.url, "redis": redis.url}
        for url in urls.values():
            await request_rate(url, submit, 1, 0.3)  # warm-up; also makes job 1
        turn = ctx.scale.single_seconds / ROUNDS
        for _ in range(ROUNDS):
            for mode, url in urls.items():
                rates[mode].append(await request_rate(url, read, 1, turn))
    figures = []
    p50: dict[str, float] = {}
    per_second: dict[str, float] = {}
    for mode, runs in rates.items():
        lat = sorted(x for r in runs for x in r.latencies)
        count, seconds = sum(r.count for r in runs), sum(r.seconds for r in runs)
        p50[mode], per_second[mode] = percentile(lat, 50) * 1000, count / seconds
        note = f"{count:,} in {seconds:.1f} s; p50 {p50[mode]:.3f} ms, p99 {percentile(lat, 99) * 1000:.3f} ms"
        figures.append(Figure("rate limit", f"GET /v1/jobs/1, {mode} bucket", per_second[mode], "req/s", None, note))
    added = (p50["redis"] - p50["memory"]) * 1000
    figures.append(Figure("rate limit", "p50 latency: Redis bucket / memory bucket", p50["redis"] / p50["memory"],
                          "ratio", None, f"1.00 = free; {added:+.0f} µs per request at p50"))  # fmt: skip
    figures.append(Figure("rate limit", "req/s: Redis bucket / memory bucket", per_second["redis"] / per_second["memory"],
                          "ratio", None, "one client, sequential requests"))  # fmt: skip
    micros = await _bucket_micros(redis_url)
    for kind, us in micros.items():
        figures.append(Figure("rate limit", f"one take of the {kind} bucket (no HTTP)", us, "µs", None, "median"))
    return figures
