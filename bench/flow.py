"""What flow control costs the claim: the same pre-submitted no-op backlog drained (queue resumed ->
last success) from a queue with no limit and from queues with each limit set too high to hold
anything back, on the same node(s), so machine load hits every variant alike.

The drains are interleaved: an unlimited drain between every two limited ones (no limits, rate,
no limits, concurrency, no limits, ...), each turn taking the variants in another order, and a limited
drain's ratio is its rate over that of the two unlimited drains beside it (their mean time; the same for
jobs per second of the node's CPU: the cost itself, which other processes on a busy machine disturb
far less than the wall clock). Both neighbours, one before and one after, cancel a load that rises or
falls through the run, and a burst of another process that hits one unlimited drain moves the ratios
beside it by half as much as a single neighbour would; each unlimited drain serves two ratios, so a
run gets more ratios for its drains than separate pairs did. Each figure is the median of the ratios,
with the lowest and the load beside it; "no limits again (A/A)", an unlimited drain in a limited one's
place, is the run's resolution. The issue's floor: a limit costs at most 20 % of the drain (ratio >= 0.8).

A limit engages the queue's counted claim path (its lock, its counts, its bucket written back):
that path, not a refusal, is what is measured here.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

from bench.context import Nodes, RunContext
from bench.report import Figure, Floor, load_average, percentile
from bench.workload import BenchClient, last_event_time, noop_job, open_paused_queue, submit_spread, wait_for_state

NAME = "flow drain"
LIMIT_COST_FLOOR = Floor(">=", 0.8)  # a limit must not cost more than 20 % of the drain (issue 14)
KEYS = 100  # keyed variants spread their jobs over this many keys
AA = "no limits again (A/A)"
#: variant -> (the queue settings of its turns, a job field cycled over KEYS values); None: the baseline.
#: AA, no limit beside no limit, is the bench's own spread: what a pair's ratio swings with no cost at all.
VARIANTS: dict[str, tuple[dict[str, Any] | None, str | None]] = {
    "no limits": (None, None),
    AA: ({}, None),
    "rate limit (1,000,000/s, burst 100,000)": ({"rate_limit": 1_000_000.0, "rate_burst": 100_000}, None),
    "concurrency limit (1,000,000)": ({"concurrency": 1_000_000}, None),
    f"per-key limit (1,000,000; {KEYS} keys)": ({"key_concurrency": 1_000_000}, "concurrency_key"),
    f"fair share ({KEYS} fairness keys)": (None, "fairness_key"),
}


async def _drain(ctx: RunContext, nodes: Nodes, queue: str, limits: dict[str, Any] | None, keyed: str | None,
                 jobs: int) -> tuple[float, float]:  # fmt: skip
    """(seconds from the resume of `queue`, holding `jobs` no-ops, to its last success; the nodes' CPU
    seconds meanwhile)."""
    s, client = ctx.scale, nodes.clients[0]
    await open_paused_queue(client, queue)
    if limits:
        await client.update_queue(queue, **limits)
    specs = [noop_job(queue, **{keyed: f"k{i % KEYS}"}) for i in range(jobs)] if keyed else [noop_job(queue)] * jobs
    await submit_spread(nodes.clients, specs, s.batch_size)
    await wait_for_state(client, queue, "queued", jobs, poll=s.poll_seconds, stall=s.stall_seconds)
    before = await _dispatch(nodes)
    cpu0 = _cpu(nodes)
    t0 = time.time()
    await client.queue_action(queue, "resume")
    await wait_for_state(client, queue, "succeeded", jobs, poll=s.poll_seconds, stall=s.stall_seconds)
    cpu = _cpu(nodes) - cpu0
    end = await last_event_time(client, queue, "job.succeeded") or time.time()
    after = await _dispatch(nodes)
    claims = after[0] - before[0]
    ctx.progress(f"  {queue}: {claims:,} claims, {(after[1] - before[1]) / max(1, claims):.1f} jobs a claim")
    return end - t0, cpu


async def _dispatch(nodes: Nodes) -> tuple[int, int]:
    """The nodes' claims and the jobs they took so far (GET /v1/stats `dispatch`), summed."""
    got = [(await c.stats()).get("dispatch", {}) for c in nodes.clients]
    return sum(int(d.get("claims", 0)) for d in got), sum(int(d.get("jobs_claimed", 0)) for d in got)


def _cpu(nodes: Nodes) -> float:
    return sum(sum(srv.cpu()) for srv in nodes.servers)


async def drain_with_limits(ctx: RunContext) -> list[Figure]:
    """Drain rate per variant, and each limited drain's ratio to the unlimited drains on either side of it."""
    # 10,000 jobs a drain on every store: PostgreSQL's 4,000 (e2e_jobs // 5) drained in 0.3-0.8 s, where a pair's
    # ratio swung 0.51-1.32 for a limit that costs nothing (the concurrency limit's counted claim, 2 nodes)
    jobs = max(1_000, min(10_000, ctx.scale.e2e_jobs // 2))
    limited = list(VARIANTS.items())[1:]
    wall: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    ratios: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}  # by wall, by CPU, in drain order
    loads: list[float] = []
    n = 0

    async def drain(limits: dict[str, Any] | None, keyed: str | None) -> tuple[float, float]:
        nonlocal n
        loads.append(os.getloadavg()[0])
        n += 1
        return await _drain(ctx, nodes, f"flow-{n}", limits, keyed, jobs)

    async with ctx.nodes("flow", ctx.scale.e2e_slots) as nodes:
        await _drain(ctx, nodes, "flow-warm-up", None, None, jobs)  # a fresh node's first drain is its slowest
        before = await drain(None, None)
        wall["no limits"].append(before[0])
        cpu["no limits"].append(before[1])
        for turn in range(ctx.scale.flow_turns):
            shift = turn % len(limited)  # each turn starts one variant later: none always follows the same one
            for variant, (limits, keyed) in limited[shift:] + limited[:shift]:
                own_wall, own_cpu = await drain(limits, keyed)
                after = await drain(None, None)
                base_wall, base_cpu = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
                wall["no limits"].append(after[0])
                cpu["no limits"].append(after[1])
                wall[variant].append(own_wall)
                cpu[variant].append(own_cpu)
                ratios[variant].append((base_wall / own_wall, base_cpu / own_cpu))
                ctx.progress(f"turn {turn + 1}: {variant}: {jobs / own_wall:,.0f} jobs/s, {1e3 * own_cpu / jobs:.2f} "
                             f"ms CPU a job; no limits before / after it: {jobs / before[0]:,.0f} / "
                             f"{jobs / after[0]:,.0f} jobs/s, {1e3 * base_cpu / jobs:.2f} ms; ratio "
                             f"{base_wall / own_wall:.2f}")  # fmt: skip
                before = after
    load = f"load {min(loads):.1f}-{max(loads):.1f} during the run, now {load_average()}"
    figures = [Figure(NAME, "no limits", jobs / statistics.median(wall["no limits"]), "jobs/s", None,
                      f"{jobs:,} jobs a drain, {1e3 * statistics.median(cpu['no limits']) / jobs:.2f} ms of the "
                      f"node's CPU a job; {load}")]  # fmt: skip
    for variant, got in ratios.items():
        if not got:
            continue
        by_wall = [w for w, _ in got]  # its rate / the mean rate of the unlimited drains beside it, in drain order
        by_cpu = [c for _, c in got]  # its jobs per CPU second / theirs
        floor = None if variant == AA else LIMIT_COST_FLOOR
        figures.append(Figure(NAME, f"{variant} / no limits", statistics.median(by_wall), "x", floor,
                              f"drain rate, median of {len(by_wall)} interleaved drains, each against the unlimited "
                              f"drains before and after it: {', '.join(f'{r:.2f}' for r in by_wall)} "
                              f"(min {min(by_wall):.2f}); {load}"))  # fmt: skip
        figures.append(Figure(NAME, f"{variant} / no limits, lowest", min(by_wall), "x", None,
                              "drain rate: the worst drain of the run (a single drain also carries the load's swings)"))  # fmt: skip
        figures.append(Figure(NAME, f"{variant} / no limits, jobs per CPU second", statistics.median(by_cpu), "x",
                              floor, f"the node's CPU a job; each drain {', '.join(f'{r:.2f}' for r in by_cpu)} "
                              f"(min {min(by_cpu):.2f})"))  # fmt: skip
    return figures


FLOOD = 50_000  # tenant A's jobs, queued before tenant B arrives
SMALL = 100  # tenant B's jobs


async def _b_waits(ctx: RunContext, clients: Sequence[BenchClient], queue: str, fair: bool) -> list[float]:
    """Tenant A floods `queue` (running), then tenant B submits SMALL jobs: seconds from B's submit to
    each of B's jobs starting (its run's start on the agent), sorted."""
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
    # started_at (the agent began the run), not claimed_at: that is the engine's clock when it asked for the
    # claim, which can be before B's submit committed (the claim waited behind it in the writer): PG 1 node
    # read -0.03 s for B's wait that way (session 11)
    starts = sorted([(await client.attempts(i))[-1]["started_at"] - t0 for i in ids])
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
