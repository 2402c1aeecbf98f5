"""Benchmark 3: end-to-end throughput of no-op jobs through the local agent.

Two runs, each on a fresh server:
  streamed      the clock starts at the first submit; jobs run while later batches arrive
  resumed       every job is stored first in a paused queue; the clock starts at resume:
                pure execution (claim, assign, run, record), no submits competing
Both stop the clock at the commit of the last `job.succeeded` event (read back from the
server), not at the poll that noticed it, so the poll interval does not blur the figure.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from bench.context import RunContext
from bench.report import Figure
from bench.server import CpuMeter, Process, Server
from bench.workload import (
    BenchClient,
    last_event_time,
    noop_job,
    open_paused_queue,
    submit_spread,
    wait_for_state,
)

QUEUE = "e2e"
NAME = "e2e no-op"


async def streamed(ctx: RunContext) -> list[Figure]:
    """Submit in batches (through every node, if several) while the jobs run; the clock runs from
    the first submit."""
    s = ctx.scale
    jobs = [noop_job(QUEUE)] * s.e2e_jobs
    async with ctx.nodes("e2e-streamed", s.e2e_slots) as nodes:
        submitted: list[float] = []

        async def submit() -> None:
            submitted.append((await submit_spread(nodes.clients, jobs, s.batch_size))[0])

        rate, note = await _run_until_succeeded(ctx, nodes.servers, nodes.client, submit)
    note = f"{s.e2e_jobs:,} jobs, all submitted after {sum(submitted):.1f} s; {note}"
    return [Figure(NAME, "submit -> all succeeded", rate, "jobs/s", ctx.backend.floors.e2e, note)]


async def resumed(ctx: RunContext) -> list[Figure]:
    """Store every job in a paused queue, then resume it; the clock runs from the resume."""
    async with ctx.nodes("e2e-resumed", ctx.scale.e2e_slots) as nodes:
        rate, note = await run_resumed(ctx, nodes.servers, nodes.clients)
    return [Figure(NAME, "pre-submitted, resume -> all succeeded", rate, "jobs/s", ctx.backend.floors.e2e, note)]


async def run_resumed(
    ctx: RunContext, servers: Sequence[Server], clients: Sequence[BenchClient], agent: Process | None = None
) -> tuple[float, str]:
    """The resumed run on nodes that are up (the jobs submitted through each of `clients` in
    turn): (jobs/s, a note). `agent`: the remote agent process that runs the jobs, if not the
    nodes' local agents (its CPU goes in the note)."""
    s = ctx.scale
    client = clients[0]
    await open_paused_queue(client, QUEUE)
    await submit_spread(clients, [noop_job(QUEUE)] * s.e2e_jobs, s.batch_size)
    await wait_for_state(client, QUEUE, "queued", s.e2e_jobs, poll=s.poll_seconds, stall=s.stall_seconds)
    rate, note = await _run_until_succeeded(ctx, servers, client, lambda: client.queue_action(QUEUE, "resume"), agent)
    return rate, f"{s.e2e_jobs:,} jobs, {note}"


async def _run_until_succeeded(
    ctx: RunContext,
    servers: Sequence[Server],
    client: BenchClient,
    start: Callable[[], Coroutine[Any, Any, Any]],
    agent: Process | None = None,
) -> tuple[float, str]:
    """Start the clock, run `start` while polling, stop at the last success; (jobs/s, a note)."""
    s = ctx.scale
    meter = CpuMeter(servers, agent)
    t0 = time.time()
    async with asyncio.TaskGroup() as tg:  # if either fails, the other is cancelled
        tg.create_task(start())
        tg.create_task(wait_for_state(client, QUEUE, "succeeded", s.e2e_jobs, poll=s.poll_seconds,
                                      stall=s.stall_seconds))  # fmt: skip
    seen = time.time()
    usage = meter.stop()
    end = await last_event_time(client, QUEUE, "job.succeeded") or seen
    seconds = end - t0
    cpu = dataclasses.replace(usage, wall=seconds)  # the CPU after the last success is the poll's, ~0
    ctx.progress(f"{s.e2e_jobs:,} jobs succeeded in {seconds:.1f} s ({s.e2e_jobs / seconds:,.0f} jobs/s)")
    return s.e2e_jobs / seconds, f"{seconds:.1f} s, {s.e2e_slots} slots per node; {cpu.note()}"
