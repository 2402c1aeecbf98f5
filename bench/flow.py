"""What flow control costs the claim: the same pre-submitted no-op backlog drained (queue resumed ->
last success) from a queue with no limit and from queues with each limit set too high to hold
anything back, in alternating turns on the same node(s), so machine load hits every variant alike.
Each limited drain is reported as a ratio to the mean of the unlimited drains of the same run.

A limit engages the queue's counted claim path (its lock, its counts, its bucket written back):
that path, not a refusal, is what is measured here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from bench.context import RunContext
from bench.report import Figure, load_average
from bench.workload import BenchClient, last_event_time, noop_job, open_paused_queue, submit_spread, wait_for_state

NAME = "flow drain"
TURNS = 2  # each variant drains this many times, in the order none, rate, concurrency, none, ...
#: variant -> the queue settings of its turns (None: the unlimited baseline)
VARIANTS: dict[str, dict[str, Any] | None] = {
    "no limits": None,
    "rate limit (1,000,000/s, burst 100,000)": {"rate_limit": 1_000_000.0, "rate_burst": 100_000},
    "concurrency limit (1,000,000)": {"concurrency": 1_000_000},
}


async def _drain(ctx: RunContext, clients: Sequence[BenchClient], queue: str, limits: dict[str, Any] | None,
                 jobs: int) -> float:  # fmt: skip
    """Seconds from the resume of `queue` (holding `jobs` no-ops) to its last success."""
    s, client = ctx.scale, clients[0]
    await open_paused_queue(client, queue)
    if limits:
        await client.update_queue(queue, **limits)
    await submit_spread(clients, [noop_job(queue)] * jobs, s.batch_size)
    await wait_for_state(client, queue, "queued", jobs, poll=s.poll_seconds, stall=s.stall_seconds)
    t0 = time.time()
    await client.queue_action(queue, "resume")
    await wait_for_state(client, queue, "succeeded", jobs, poll=s.poll_seconds, stall=s.stall_seconds)
    end = await last_event_time(client, queue, "job.succeeded") or time.time()
    return end - t0


async def drain_with_limits(ctx: RunContext) -> list[Figure]:
    """Drain rate per variant, and each limited variant's ratio to the unlimited baseline."""
    jobs = max(1_000, ctx.scale.e2e_jobs // 5)
    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    async with ctx.nodes("flow", ctx.scale.e2e_slots) as nodes:
        for turn in range(TURNS):
            for i, (variant, limits) in enumerate(VARIANTS.items()):
                took = await _drain(ctx, nodes.clients, f"flow-{turn}-{i}", limits, jobs)
                seconds[variant].append(took)
                ctx.progress(f"{variant}: {jobs:,} jobs in {took:.2f} s ({jobs / took:,.0f} jobs/s)")
    base = jobs / (sum(seconds["no limits"]) / TURNS)
    figures = []
    for variant, took in seconds.items():
        rate = jobs / (sum(took) / TURNS)
        turns = ", ".join(f"{jobs / t:,.0f}" for t in took)
        if variant == "no limits":
            figures.append(Figure(NAME, variant, rate, "jobs/s", None, f"{jobs:,} jobs a turn; turns {turns}; "
                                  f"load {load_average()}"))  # fmt: skip
        else:
            figures.append(Figure(NAME, f"{variant} / no limits", rate / base, "x", None,
                                  f"{rate:,.0f} jobs/s; turns {turns}"))  # fmt: skip
    return figures
