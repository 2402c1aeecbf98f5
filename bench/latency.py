"""Benchmark 4: pick-up latency (job's started_at - run_at) at a steady submit rate.

Two runs, each on a fresh server: jobs due now (`delay` 0), and jobs with `run_at` a little
in the future, so the timer path (scheduled -> promoted -> queued -> claimed) is measured too.
`run_at` and `started_at` come from the job JSON: the first set by the server (or the client,
on the same clock), the second by the agent when the handler starts.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from bench.context import RunContext
from bench.rawhttp import ConnectionPool, build_request
from bench.report import Figure, percentile
from bench.server import BenchError
from bench.workload import all_jobs, epoch, iso, noop_job, wait_for_state

QUEUE = "pickup"
NAME = "pick-up latency"
WARM_UP_JOBS = 4  # per node
STALL_MS = 50  # a pick-up or a submit slower than this is counted as a stall


@dataclass
class Pacing:
    """How well the client kept to its schedule, and how long each submit took (seconds)."""

    lateness: list[float]
    submit_latencies: list[float]


async def paced(rate: float, seconds: float, call: Callable[[], Awaitable[object]]) -> Pacing:
    """Start `call` every 1/rate s for `seconds`, each at its own time on the clock.

    The i-th call is due at start + i/rate, so a late wake-up does not push the later ones back
    (no drift from summing sleeps). Calls are not awaited in turn: a slow response does not
    delay the next submit, as with independent producers.
    """
    loop = asyncio.get_running_loop()
    interval = 1.0 / rate
    start = loop.time() + 0.01
    lateness: list[float] = []
    latencies: list[float] = []

    async def timed() -> None:
        t = time.perf_counter()
        await call()
        latencies.append(time.perf_counter() - t)

    tasks = []
    for i in range(round(rate * seconds)):
        due = start + i * interval
        if (wait := due - loop.time()) > 0:
            await asyncio.sleep(wait)
        lateness.append(loop.time() - due)
        tasks.append(asyncio.create_task(timed()))
    await asyncio.gather(*tasks)
    return Pacing(lateness, latencies)


async def due_now(ctx: RunContext) -> list[Figure]:
    """Jobs due at once: submit -> queued -> claimed -> started."""
    return await _run(ctx, "due now (delay 0)", "pickup-now", lambda: {"delay": 0})


async def due_later(ctx: RunContext) -> list[Figure]:
    """Jobs due a little later: the promote timer wakes for each run_at."""
    lead = ctx.scale.pickup_lead
    return await _run(ctx, f"run_at +{lead * 1000:.0f} ms", "pickup-later", lambda: {"run_at": iso(time.time() + lead)})


def _through(nodes: int) -> str:
    return "" if nodes == 1 else f" alternately through {nodes} nodes"


async def _run(ctx: RunContext, label: str, server_name: str, when: Callable[[], dict[str, Any]]) -> list[Figure]:
    s = ctx.scale
    async with ctx.nodes(server_name, s.pickup_slots) as nodes:
        client = nodes.client
        # A few jobs through each node first, on another queue: each agent imports the task's
        # module once (which agent claims a job is up to them: enough that each gets some).
        warm = [await c.submit(noop_job("warm-up")) for c in nodes.clients for _ in range(WARM_UP_JOBS)]
        for job in warm:
            await client.wait_for(job["id"], timeout=s.stall_seconds)
        meter = nodes.meter()
        # Submitted to the nodes in turn, on plain keep-alive sockets (bench.rawhttp): httpx's
        # client CPU per request would make the pacer, not the server, the figure on a loaded machine.
        pools = [ConnectionPool(srv.url) for srv in nodes.servers]
        turn = itertools.cycle(pools)

        async def submit() -> None:
            status, body = await next(turn).request(
                build_request("POST", "/v1/jobs", orjson.dumps(noop_job(QUEUE, **when())))
            )
            if status != 201:
                raise BenchError(f"POST /v1/jobs answered {status}: {body[:300].decode(errors='replace')}")

        try:
            pacing = await paced(s.pickup_rate, s.pickup_seconds, submit)
        finally:
            for pool in pools:
                await pool.close()
        n = len(pacing.lateness)
        await wait_for_state(client, QUEUE, "succeeded", n, poll=s.poll_seconds, stall=s.stall_seconds)
        cpu = meter.stop()
        jobs = await all_jobs(client, QUEUE)
    started = [j for j in jobs if j["started_at"]]
    if len(started) != n:
        raise BenchError(f"{label}: {n} jobs submitted, {len(started)} have a started_at")
    ms = sorted((epoch(j["started_at"]) - epoch(j["run_at"])) * 1000 for j in started)
    late = sorted(pacing.lateness)
    post = sorted(pacing.submit_latencies)
    ctx.progress(f"{label}: p50 {percentile(ms, 50):.1f} ms, p99 {percentile(ms, 99):.1f} ms over {n:,} jobs")
    context = (f"{n:,} jobs at {s.pickup_rate:.0f}/s{_through(len(nodes.clients))}; submit p99 {percentile(post, 99) * 1000:.1f} ms, "
               f"max {post[-1] * 1000:.1f} ms, pacer late p99 {percentile(late, 99) * 1000:.1f} ms; {cpu.note()}")  # fmt: skip
    measure = f"{label}, " + "{}"
    stalls = (
        f"{sum(1 for v in ms if v > STALL_MS)} of {n:,} jobs started over {STALL_MS} ms late; submits over "
        f"{STALL_MS} ms: {sum(1 for v in post if v * 1000 > STALL_MS)}"
    )
    return [
        Figure(NAME, measure.format("p50"), percentile(ms, 50), "ms", None, f"min {ms[0]:.1f} ms"),
        Figure(NAME, measure.format("p95"), percentile(ms, 95), "ms"),
        Figure(NAME, measure.format("p99"), percentile(ms, 99), "ms", ctx.backend.floors.pickup_p99, context),
        Figure(NAME, measure.format("max"), ms[-1], "ms", None, stalls),
    ]
