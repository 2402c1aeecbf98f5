"""What metrics cost: drain throughput and pick-up p99 on a node with metrics on vs one with them off
(JOBDECK_METRICS), in alternating turns of one run, so the machine's load hits both alike.

Drain: jobs stored in a paused queue, then resumed; the clock runs to the last success (the e2e
bench's resumed run). Pick-up: no-op jobs submitted at a steady rate, started_at - run_at per job.
Every turn is a fresh `jobdeck up` on a fresh store. The ratio on/off is the figure: 1.00 is free.
"""

from __future__ import annotations

from bench.context import RunContext
from bench.latency import paced
from bench.report import Figure, percentile
from bench.throughput import run_resumed
from bench.workload import BenchClient, all_jobs, epoch, noop_job, wait_for_state

MODES = {"off": "false", "on": "true"}
ROUNDS = 2
QUEUE = "obs-pickup"


async def _pickup_ms(ctx: RunContext, client: BenchClient) -> list[float]:
    s = ctx.scale
    for job in [await client.submit(noop_job("warm-up")) for _ in range(4)]:
        await client.wait_for(job["id"], timeout=s.stall_seconds)
    pacing = await paced(s.pickup_rate, s.pickup_seconds / 2, lambda: client.submit(noop_job(QUEUE, delay=0)))
    await wait_for_state(client, QUEUE, "succeeded", len(pacing.lateness), poll=s.poll_seconds, stall=s.stall_seconds)
    return [(epoch(j["started_at"]) - epoch(j["run_at"])) * 1000 for j in await all_jobs(client, QUEUE)]


async def metrics_cost(ctx: RunContext) -> list[Figure]:
    """Turns of off, on, off, on: each mode's drain rate and pick-up p99 over its turns."""
    drain: dict[str, list[float]] = {m: [] for m in MODES}
    pickup: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(ROUNDS):
        for mode, flag in MODES.items():
            env = {"JOBDECK_METRICS": flag}
            async with ctx.server(f"metrics-{mode}-drain-{r}", ctx.scale.e2e_slots, env) as (srv, client):
                rate, _ = await run_resumed(ctx, [srv], [client])
                drain[mode].append(rate)
            async with ctx.server(f"metrics-{mode}-pickup-{r}", ctx.scale.pickup_slots, env) as (_, client):
                pickup[mode].extend(await _pickup_ms(ctx, client))
            ctx.progress(f"metrics {mode}, round {r + 1}: drain {drain[mode][-1]:,.0f} jobs/s")
    figures = []
    rates = {m: sum(v) / len(v) for m, v in drain.items()}
    p99 = {m: percentile(sorted(v), 99) for m, v in pickup.items()}
    for mode in MODES:
        turns = ", ".join(f"{x:,.0f}" for x in drain[mode])
        figures.append(Figure("metrics cost", f"drain, metrics {mode}", rates[mode], "jobs/s", None,
                              f"{ctx.scale.e2e_jobs:,} jobs a turn; turns {turns}"))  # fmt: skip
        figures.append(Figure("metrics cost", f"pick-up p99, metrics {mode}", p99[mode], "ms", None,
                              f"{len(pickup[mode]):,} jobs at {ctx.scale.pickup_rate:.0f}/s; "
                              f"p50 {percentile(sorted(pickup[mode]), 50):.1f} ms"))  # fmt: skip
    figures.append(Figure("metrics cost", "drain: on / off", rates["on"] / rates["off"], "ratio", None,
                          "1.00 = free; the issue's floor: >= 0.95"))  # fmt: skip
    figures.append(Figure("metrics cost", "pick-up p99: on / off", p99["on"] / p99["off"], "ratio", None,
                          "1.00 = free; lower is better"))  # fmt: skip
    return figures
