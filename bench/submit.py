"""Benchmarks 1 and 2: how fast jobs go in over HTTP, in batches and one at a time.

Both run a server with no local agent (`--slots 0`), so nothing is dispatched or run and the
figures are the submit path alone.
"""

from __future__ import annotations

import orjson

from bench.baseline import sqlite_insert_rate, sqlite_single_commit_rate
from bench.context import RunContext
from bench.rawhttp import build_request, request_rate
from bench.report import Figure, percentile
from bench.server import BenchError, CpuMeter
from bench.workload import BenchClient, noop_job, submit_spread

QUEUE = "bench"


async def batch_submit(ctx: RunContext) -> list[Figure]:
    """POST /v1/jobs/batch, full batches one after another (split across the nodes, if several);
    then, on SQLite, SQLite alone on the same rows."""
    s = ctx.scale
    batch = [noop_job(QUEUE)] * s.batch_size
    async with ctx.nodes("batch-submit", slots=0) as nodes:
        # One untimed call per node first: imports, pydantic's schema, the store's caches.
        await submit_spread(nodes.clients, batch * len(nodes.clients), s.batch_size)
        meter = nodes.meter()
        wall, calls = await submit_spread(nodes.clients, batch * s.batches, s.batch_size)
        cpu = meter.stop()
    total = s.batch_size * s.batches
    http_rate = total / wall
    per_call = f"{s.batches} calls of {s.batch_size:,}: {min(calls) * 1000:.0f}..{max(calls) * 1000:.0f} ms each"
    if len(nodes.clients) > 1:
        per_call += f", {len(nodes.clients)} nodes at once"
    name = "batch submit"
    http = Figure(name, "POST /v1/jobs/batch", http_rate, "jobs/s", ctx.backend.floors.batch_submit,
                  f"{per_call}; {cpu.note()}")  # fmt: skip
    if ctx.backend.kind != "sqlite":
        ctx.progress(f"{total:,} jobs over HTTP at {http_rate:,.0f} jobs/s")
        return [http]
    ctx.progress(f"{total:,} jobs over HTTP at {http_rate:,.0f} jobs/s; now SQLite alone on {total:,} rows")
    plain = sqlite_insert_rate(ctx.servers.tmp_root, total, s.batch_size, jobdeck_schema=False)
    schema = sqlite_insert_rate(ctx.servers.tmp_root, total, s.batch_size, jobdeck_schema=True)
    return [
        http,
        Figure(name, "sqlite executemany, plain table", plain, "rows/s", None,
               "baseline: same rows, WAL, synchronous=FULL, no index"),
        Figure(name, "sqlite executemany, JobDeck schema", schema, "rows/s", None,
               "+ every index of migrations/sqlite + 1 outbox event row per job"),
        Figure(name, "HTTP / plain sqlite", http_rate / plain, "ratio", None,
               f"HTTP / JobDeck-schema sqlite = {http_rate / schema:.2f}"),
    ]  # fmt: skip


async def store_commits(client: BenchClient) -> int:
    """Store transactions the server committed so far (GET /metrics jobdeck_store_commit_seconds_count)."""
    for line in (await client.metrics_text()).splitlines():
        if line.startswith("jobdeck_store_commit_seconds_count"):
            return int(float(line.split()[-1]))
    raise BenchError("GET /metrics has no jobdeck_store_commit_seconds_count")


async def single_submit(ctx: RunContext) -> list[Figure]:
    """POST /v1/jobs one job per request, sequentially and from concurrent clients; GET /healthz as baseline.

    The loops use `bench.rawhttp` rather than httpx: see there why.
    """
    s = ctx.scale
    requests = [
        ("POST /v1/jobs", build_request("POST", "/v1/jobs", orjson.dumps(noop_job(QUEUE)))),
        ("GET /healthz (baseline)", build_request("GET", "/healthz")),
        # /healthz reads the store (last_seq, a hop to a reader thread); /livez calls nothing: HTTP + app alone
        ("GET /livez (HTTP and app only)", build_request("GET", "/livez")),
    ]
    figures = []
    async with ctx.server("single-submit", slots=0) as (srv, client):
        await request_rate(srv.url, requests[0][1], 1, 0.5)  # warm-up, untimed
        for concurrency in (1, s.concurrency):
            clients = "1 client" if concurrency == 1 else f"{concurrency} concurrent clients"
            for label, request in requests:
                commits = await store_commits(client)
                meter = CpuMeter(srv)
                rate = await request_rate(srv.url, request, concurrency, s.single_seconds)
                cpu = meter.stop()
                commits = await store_commits(client) - commits
                lat = sorted(rate.latencies)
                per_request = 1000 * (cpu.server_main + cpu.server_threads) / max(rate.count, 1)
                note = (f"{rate.count:,} in {rate.seconds:.1f} s; latency p50 {percentile(lat, 50) * 1000:.1f} ms, "
                        f"p99 {percentile(lat, 99) * 1000:.1f} ms, max {lat[-1] * 1000:.1f} ms; "
                        f"{commits / max(rate.count, 1):.2f} store commits/request; "
                        f"server CPU {per_request:.2f} ms/request; {cpu.note()}")  # fmt: skip
                floor = None
                if label.startswith("POST"):
                    floors = ctx.backend.floors
                    floor = floors.single_submit if concurrency == 1 else None
                    floor = floors.concurrent_submit if concurrency == 16 else floor
                figures.append(Figure("single submit", f"{label}, {clients}", rate.per_second, "req/s", floor, note))
            post, healthz, livez = figures[-3:]
            figures.append(Figure("single submit", f"POST / healthz, {clients}",
                                  (post.value or 0.0) / max(healthz.value or 0.0, 1e-9), "ratio", None,
                                  "the same server's GET /healthz, measured just after, is the baseline"))  # fmt: skip
            if concurrency == 1 and ctx.backend.kind == "sqlite":
                # The other ceiling of a sequential durable submit: the disk's commit (fsync) right now.
                commit_rate, p50 = sqlite_single_commit_rate(ctx.servers.tmp_root, min(s.single_seconds, 2.0))
                # A sequential durable submit costs at least a bare request's round trip plus a commit.
                ceiling = 1.0 / (1.0 / max(livez.value or 0.0, 1e-9) + 1.0 / commit_rate)
                figures += [
                    Figure("single submit", "plain SQLite durable commits, 1 after another", commit_rate, "commits/s",
                           None, f"p50 {p50:.2f} ms; one job + its event a commit, WAL + synchronous=FULL, same disk; "
                                 f"a /livez round trip + a commit, one after the other: {ceiling:,.0f} req/s"),
                    Figure("single submit", "POST 1 client / plain commits", (post.value or 0.0) / commit_rate,
                           "ratio", None, "1.0: each submit costs no more than its commit"),
                ]  # fmt: skip
    return figures
