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
from bench.server import CpuMeter, CpuUsage, Process, Server
from bench.workload import (
    BenchClient,
    last_event_time,
    noop_job,
    open_paused_queue,
    submit_spread,
    wait_for_state,
)
from core.client import Json

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

        rate, note, _ = await _run_until_succeeded(ctx, nodes.servers, nodes.client, submit)
    note = f"{s.e2e_jobs:,} jobs, all submitted after {sum(submitted):.1f} s; {note}"
    return [Figure(NAME, "submit -> all succeeded", rate, "jobs/s", ctx.backend.floors.e2e, note)]


async def resumed(ctx: RunContext) -> list[Figure]:
    """Store every job in a paused queue, then resume it; the clock runs from the resume."""
    async with ctx.nodes("e2e-resumed", ctx.scale.e2e_slots) as nodes:
        rate, note, _ = await run_resumed(ctx, nodes.servers, nodes.clients)
    return [Figure(NAME, "pre-submitted, resume -> all succeeded", rate, "jobs/s", ctx.backend.floors.e2e, note)]


async def run_resumed(
    ctx: RunContext,
    servers: Sequence[Server],
    clients: Sequence[BenchClient],
    agent: Process | None = None,
    job: Json | None = None,
    queue: str = QUEUE,
) -> tuple[float, str, CpuUsage]:
    """The resumed run on nodes that are up (the jobs submitted through each of `clients` in
    turn): (jobs/s, a note). `agent`: the remote agent process that runs the jobs, if not the
    nodes' local agents (its CPU goes in the note). `job`: the spec of each job (a no-op's
    by default) in `queue`. Also the CPU of the drain (the clock's interval)."""
    s = ctx.scale
    client = clients[0]
    await open_paused_queue(client, queue)
    await submit_spread(clients, [job or noop_job(queue)] * s.e2e_jobs, s.batch_size)
    await wait_for_state(client, queue, "queued", s.e2e_jobs, poll=s.poll_seconds, stall=s.stall_seconds)
    resume = lambda: client.queue_action(queue, "resume")  # noqa: E731
    rate, note, cpu = await _run_until_succeeded(ctx, servers, client, resume, agent, queue)
    return rate, f"{s.e2e_jobs:,} jobs, {note}", cpu


async def _run_until_succeeded(
    ctx: RunContext,
    servers: Sequence[Server],
    client: BenchClient,
    start: Callable[[], Coroutine[Any, Any, Any]],
    agent: Process | None = None,
    queue: str = QUEUE,
) -> tuple[float, str, CpuUsage]:
    """Start the clock, run `start` while polling, stop at the last success; (jobs/s, a note, the CPU)."""
    s = ctx.scale
    meter = CpuMeter(servers, agent)
    t0 = time.time()
    async with asyncio.TaskGroup() as tg:  # if either fails, the other is cancelled
        tg.create_task(start())
        tg.create_task(wait_for_state(client, queue, "succeeded", s.e2e_jobs, poll=s.poll_seconds,
                                      stall=s.stall_seconds))  # fmt: skip
    seen = time.time()
    usage = meter.stop()
    end = await last_event_time(client, queue, "job.succeeded") or seen
    seconds = end - t0
    cpu = dataclasses.replace(usage, wall=seconds)  # the CPU after the last success is the poll's, ~0
    ctx.progress(f"{s.e2e_jobs:,} jobs succeeded in {seconds:.1f} s ({s.e2e_jobs / seconds:,.0f} jobs/s)")
    return s.e2e_jobs / seconds, f"{seconds:.1f} s, {s.e2e_slots} slots per node; {cpu.note()}", cpu
