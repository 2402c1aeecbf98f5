"""What flow control costs the claim: the same pre-submitted no-op backlog drained (queue resumed ->
last success) from a queue with no limit and from queues with each limit set too high to hold
anything back, in alternating turns on the same node(s), so machine load hits every variant alike.
Each limited drain is reported as a ratio to the unlimited drain of the same turn (the drains of one
turn run back to back, so they share the machine's load), the figure being the median over the turns;
the issue's floor is that a limit costs at most 20 % of the drain (ratio >= 0.8).

A limit engages the queue's counted claim path (its lock, its counts, its bucket written back):
that path, not a refusal, is what is measured here.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from typing import Any

from bench.context import RunContext
from bench.report import Figure, Floor, load_average, percentile
from bench.workload import BenchClient, last_event_time, noop_job, open_paused_queue, submit_spread, wait_for_state

NAME = "flow drain"
TURNS = 3  # each variant drains this many times, in the order none, rate, concurrency, ..., none, ...
LIMIT_COST_FLOOR = Floor(">=", 0.8)  # a limit must not cost more than 20 % of the drain (issue 14)
KEYS = 100  # keyed variants spread their jobs over this many keys
#: variant -> (the queue settings of its turns, a job field cycled over KEYS values); None: the baseline
VARIANTS: dict[str, tuple[dict[str, Any] | None, str | None]] = {
    "no limits": (None, None),
    "rate limit (1,000,000/s, burst 100,000)": ({"rate_limit": 1_000_000.0, "rate_burst": 100_000}, None),
    "concurrency limit (1,000,000)": ({"concurrency": 1_000_000}, None),
    f"per-key limit (1,000,000; {KEYS} keys)": ({"key_concurrency": 1_000_000}, "concurrency_key"),
    f"fair share ({KEYS} fairness keys)": (None, "fairness_key"),
}


async def _drain(ctx: RunContext, clients: Sequence[BenchClient], queue: str, limits: dict[str, Any] | None,
                 keyed: str | None, jobs: int) -> float:  # fmt: skip
    """Seconds from the resume of `queue` (holding `jobs` no-ops) to its last success."""
    s, client = ctx.scale, clients[0]
    await open_paused_queue(client, queue)
    if limits:
        await client.update_queue(queue, **limits)
    specs = [noop_job(queue, **{keyed: f"k{i % KEYS}"}) for i in range(jobs)] if keyed else [noop_job(queue)] * jobs
    await submit_spread(clients, specs, s.batch_size)
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
            for i, (variant, (limits, keyed)) in enumerate(VARIANTS.items()):
                took = await _drain(ctx, nodes.clients, f"flow-{turn}-{i}", limits, keyed, jobs)
                seconds[variant].append(took)
                ctx.progress(f"{variant}: {jobs:,} jobs in {took:.2f} s ({jobs / took:,.0f} jobs/s)")
    base = seconds["no limits"]
    figures = []
    for variant, took in seconds.items():
        turns = ", ".join(f"{jobs / t:,.0f}" for t in took)
        if variant == "no limits":
            figures.append(Figure(NAME, variant, jobs / statistics.median(took), "jobs/s", None,
                                  f"{jobs:,} jobs a turn; turns {turns}; load {load_average()}"))  # fmt: skip
            continue
        ratios = sorted(b / t for b, t in zip(base, took, strict=True))  # rate / the same turn's unlimited rate
        figures.append(Figure(NAME, f"{variant} / no limits", statistics.median(ratios), "x", LIMIT_COST_FLOOR,
                              f"median of the turns' ratios {', '.join(f'{r:.2f}' for r in ratios)}; "
                              f"jobs/s {turns}"))  # fmt: skip
    return figures


FLOOD = 50_000  # tenant A's jobs, queued before tenant B arrives
SMALL = 100  # tenant B's jobs


async def _b_waits(ctx: RunContext, clients: Sequence[BenchClient], queue: str, fair: bool) -> list[float]:
    """Tenant A floods `queue` (running), then tenant B submits SMALL jobs: seconds from B's submit to
    each of B's jobs starting (claimed), sorted."""
    s, client = ctx.scale, clients[0]
    flood, small = min(FLOOD, ctx.scale.e2e_jobs), SMALL
    key = {"fairness_key": "tenant-a"} if fair else {}
    await open_paused_queue(client, queue)
    await submit_spread(clients, [noop_job(queue, **key)] * flood, s.batch_size)
    await wait_for_state(client, queue, "queued", flood, poll=s.poll_seconds, stall=s.stall_seconds)
    await client.queue_action(queue, "resume")
    await wait_for_state(client, queue, "succeeded", 1000, poll=0.05, stall=s.stall_seconds)  # A is running
    key = {"fairness_key": "tenant-b"} if fair else {}
    t0 = time.time()
    made = await client.submit_batch([noop_job(queue, **key)] * small)
    ids = list(made["ids"])
    while True:
        done = [await client.get_job(i) for i in ids]
        if all(j["state"] == "succeeded" for j in done):
            break
        await asyncio.sleep(s.poll_seconds)
    starts = sorted([(await client.attempts(i))[-1]["claimed_at"] - t0 for i in ids])
    await client.queue_action(queue, "pause")  # what is left of A need not run
    return starts


async def fair_share(ctx: RunContext) -> list[Figure]:
    """Tenant B's wait behind tenant A's flood: plain FIFO (no fairness keys) vs fair share."""
    figures = []
    async with ctx.nodes("fair-share", ctx.scale.e2e_slots) as nodes:
        for fair in (False, True):
            waits = await _b_waits(ctx, nodes.clients, f"tenants-{int(fair)}", fair)
            label = "fair share on" if fair else "fair share off (FIFO)"
            ctx.progress(f"{label}: B's wait p50 {percentile(waits, 50):.2f} s, p99 {percentile(waits, 99):.2f} s")
            for p in (50, 99):
                figures.append(Figure("fair share", f"tenant B's wait p{p}, {label}", percentile(waits, p), "s", None,
                                      f"A: {min(FLOOD, ctx.scale.e2e_jobs):,} no-ops queued first, then B: {SMALL}; load {load_average()}"))  # fmt: skip
    return figures
