"""Schedules at scale: N schedules firing every minute on the same node(s), the lateness of each
fire time (when its run became claimable - the fire time; see below) and the CPU the nodes use in
the firing minute, beside the same nodes' CPU over an idle stretch of the same run (the baseline).

Each schedule is `* * * * *` with overlap allow (every minute makes a job: the heavier path) into a
paused queue, so the jobs wait and the figures are the schedule loop's, not the agents'.

Four cases in one run, each on a fresh node: the baseline (BASELINE_SCHEDULES schedules: what one
node's loop costs when the count does not matter), the same N schedules with their runs written at
their fire time (planned ahead, fired 500 per transaction: JOBDECK_SCHEDULE_LEAD_SECONDS=0), as
shipped (written ahead, claimable at the fire time with no write then), and as shipped under the
default overlap skip (written ahead too when no earlier run of the schedule waits or runs: each
schedule's first fire time here, as every fire time of a schedule whose runs end within its period).

A run's lateness is when it became claimable: the later of its run_at (the fire time: no jitter here)
and the moment a reader saw it committed. A poller reads the queue's counts every POLL_SECONDS from
before the lead to the end of the minute (its answer's arrival: an upper bound of the commit), so
the k-th run became visible at the first poll that counted k. The created_at of a run is the start
of its transaction, not its commit, and is not used.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from datetime import datetime

from bench.context import RunContext
from bench.report import Figure, Floor, load_average, percentile
from bench.workload import BenchClient, all_jobs, noop_job, open_paused_queue
from core.config import Settings

NAME = "schedules"
LATENESS_P99_FLOOR = Floor("<=", 50.0)  # ms, one node (issue 12)
IDLE_SECONDS = 20.0
BASELINE_SCHEDULES = 100
AT_T = {"JOBDECK_SCHEDULE_LEAD_SECONDS": "0"}
POLL_SECONDS = 0.01
LEAD = Settings().schedule_lead_seconds  # the poll starts before the runs are written ahead
_CREATED: dict[int, float] = {}  # seconds the last case took to create this many schedules


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


async def _one_minute(ctx: RunContext, label: str, n: int, env: Mapping[str, str] | None = None,
                      idle: bool = False, overlap: str = "allow") -> tuple[list[float], list[Figure]]:  # fmt: skip
    """A fresh node with `n` schedules: the lateness (ms, sorted) of the next whole minute's fire
    times, and (shipped case) the CPU figures of that minute against the node's idle stretch."""
    queue = "sched-bench"
    figures: list[Figure] = []
    async with ctx.nodes(f"schedules-{label}", 1, env) as nodes:
        c = nodes.client
        await open_paused_queue(c, queue)
        baseline = None
        if idle:
            meter = nodes.meter()
            await asyncio.sleep(IDLE_SECONDS)
            baseline = meter.stop()
        spec = {"cron": "* * * * *", "overlap": overlap, "job": noop_job(queue)}
        if overlap != "allow":  # the measured minute must be every schedule's first fire time (its queue is
            # paused: an earlier minute's run would still wait, and the fire time would be skipped, rightly)
            need = _CREATED.get(n, 30.0) * 1.5 + LEAD + 3
            if 60 - time.time() % 60 < need:
                await asyncio.sleep(60 - time.time() % 60 + 0.5)
        t0 = time.perf_counter()
        # fresh clients: the idle stretch outlived the server's keep-alive, so pooled connections are closed
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(BenchClient(srv.url)) for srv in nodes.servers]
            for i in range(0, n, 20):
                await asyncio.gather(*(clients[(i + k) % len(clients)].create_schedule({**spec, "name": f"s{i + k}"})
                                       for k in range(min(20, n - i))))  # fmt: skip
        _CREATED[n] = time.perf_counter() - t0
        ctx.progress(f"{label}: {n:,} schedules created in {_CREATED[n]:.1f} s")
        minute = (time.time() // 60 + 1) * 60  # the next fire time of every schedule
        if minute - time.time() < LEAD + 2:  # too close to see the runs written ahead arrive: the next one
            minute += 60
        await asyncio.sleep(max(0.0, minute - time.time() - LEAD - 1))
        seen: list[tuple[float, int]] = []  # (answer's arrival, runs of the minute counted)
        async with BenchClient(nodes.servers[0].url) as poller:
            meter = nodes.meter()  # a minute from before the runs are written ahead: one firing's CPU
            started = time.time()
            base = (await poller.queue_counts(queue)).get("queued", 0)  # earlier minutes' runs
            while time.time() < minute + 30 and (not seen or seen[-1][1] < n):
                count = (await poller.queue_counts(queue)).get("queued", 0) - base
                seen.append((time.time(), count))
                await asyncio.sleep(POLL_SECONDS)
            await asyncio.sleep(max(0.0, started + 60 - time.time()))
            firing = meter.stop()
            jobs = [j for j in await all_jobs(poller, queue) if j["fire_time"] and _epoch(j["fire_time"]) == minute]
        late: list[float] = []
        for at, count in seen:  # the k-th run: claimable at max(first poll that counted k, its run_at)
            late.extend([1000 * max(0.0, at - minute)] * (min(count, len(jobs)) - len(late)))
        if seen and len(late) < len(jobs):  # not all counted by the end of the poll: at least that late
            late.extend([1000 * max(0.0, seen[-1][0] - minute)] * (len(jobs) - len(late)))
    where = f"{len(nodes.servers)} node(s), {ctx.backend.label}; load {load_average()}"
    figures.append(Figure(NAME, f"{label}: fire times made in the minute ({n:,} schedules)", len(jobs), "jobs", None,
                          where))  # fmt: skip
    if seen and seen[-1][1] >= len(jobs) > 0:
        all_seen = next(at for at, count in seen if count >= len(jobs))
        figures.append(Figure(NAME, f"{label}: every run of the minute seen committed, vs its fire time",
                              1000 * (all_seen - minute), "ms", None,
                              "negative: that long before the fire time (written ahead)"))  # fmt: skip
    if baseline is not None:
        cpu = firing.server_main + firing.server_threads
        idle_cpu = baseline.server_main + baseline.server_threads
        figures.append(Figure(NAME, f"{label}: CPU in the firing minute", 100 * cpu / firing.wall, "% of a core",
                              None, firing.note()))  # fmt: skip
        figures.append(Figure(NAME, f"{label}: CPU idle (baseline, same node)", 100 * idle_cpu / baseline.wall,
                              "% of a core", None, baseline.note()))  # fmt: skip
        if idle_cpu > 0:
            figures.append(Figure(NAME, f"{label}: firing minute / idle CPU",
                                  cpu / firing.wall / (idle_cpu / baseline.wall), "x", None,
                                  "ratio to the same run's idle baseline"))  # fmt: skip
    return late, figures


def _lateness(label: str, late: list[float], n: int, floor: Floor | None) -> list[Figure]:
    if not late:
        return []
    out = [Figure(NAME, f"{label}: lateness p{p}", percentile(late, p), "ms", floor if p == 99 else None,
                  f"{n:,} schedules every minute; load {load_average()}") for p in (50, 99)]  # fmt: skip
    out.append(Figure(NAME, f"{label}: lateness max", late[-1], "ms", None, "the last fire time of the minute"))
    return out


async def schedules_at_scale(ctx: RunContext) -> list[Figure]:
    """Lateness p50/p99/max of one minute's fire times for a baseline count, N the old way and N as
    shipped, their ratios, and CPU in the shipped case's firing minute vs idle."""
    n = ctx.scale.schedules
    one_node = ctx.backend.nodes == 1
    base, base_figs = await _one_minute(ctx, "baseline", min(BASELINE_SCHEDULES, n))
    before, before_figs = await _one_minute(ctx, "written at T (lead 0)", n, AT_T)
    after, after_figs = await _one_minute(ctx, "shipped", n, idle=True)
    # the default policy: a run is written ahead when no earlier run of its schedule waits or runs (as
    # when each run ends within the minute; here, each schedule's first fire time)
    skip, skip_figs = await _one_minute(ctx, "shipped, overlap skip", n, overlap="skip")
    figures = [*base_figs, *_lateness("baseline", base, min(BASELINE_SCHEDULES, n), None)]
    figures += [*before_figs, *_lateness("written at T (lead 0)", before, n, None)]
    figures += [*after_figs, *_lateness("shipped", after, n, LATENESS_P99_FLOOR if one_node else None)]
    figures += [*skip_figs, *_lateness("shipped, overlap skip", skip, n, LATENESS_P99_FLOOR if one_node else None)]
    if after:
        p99 = percentile(after, 99)
        if base and percentile(base, 99) > 0:
            figures.append(Figure(NAME, "shipped p99 / baseline p99", p99 / percentile(base, 99), "x", None,
                                  f"{n:,} vs {min(BASELINE_SCHEDULES, n)} schedules, same run"))  # fmt: skip
        if before:
            figures.append(Figure(NAME, "written at T p99 - shipped p99", percentile(before, 99) - p99, "ms", None,
                                  "same run, same count: the gain of writing ahead (a ratio to 0 says nothing)"))  # fmt: skip
    return figures
