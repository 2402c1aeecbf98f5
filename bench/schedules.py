"""Schedules at scale: N schedules firing every minute on the same node(s), the lateness of each
fire time (the job's created_at - its fire_time, both server clock) and the CPU the nodes use in
the firing minute, beside the same nodes' CPU over an idle stretch of the same run (the baseline).

Each schedule is `* * * * *` with overlap allow (every minute makes a job: the heavier path) into a
paused queue, so the jobs wait and the figures are the schedule loop's, not the agents'.

A job's created_at is the clock reading at the start of the loop's pass (one pass fires up to
1,000 due schedules), so lateness here is a lower bound for the later fire times of a pass; the
count of fire times made within the minute is the figure that shows the loop's throughput.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import datetime

from bench.context import RunContext
from bench.report import Figure, Floor, load_average, percentile
from bench.workload import BenchClient, all_jobs, noop_job, open_paused_queue

NAME = "schedules"
LATENESS_P99_FLOOR = Floor("<=", 50.0)  # ms, one node (issue 12)
IDLE_SECONDS = 20.0


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


async def schedules_at_scale(ctx: RunContext) -> list[Figure]:
    """Lateness p50/p99/max of one minute's fire times, and CPU in that minute vs idle."""
    n = ctx.scale.schedules
    queue = "sched-bench"
    async with ctx.nodes("schedules", 1) as nodes:
        c = nodes.client
        await open_paused_queue(c, queue)
        idle = nodes.meter()
        await asyncio.sleep(IDLE_SECONDS)
        baseline = idle.stop()
        spec = {"cron": "* * * * *", "overlap": "allow", "job": noop_job(queue)}
        t0 = time.perf_counter()
        # fresh clients: the idle stretch outlived the server's keep-alive, so pooled connections are closed
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(BenchClient(srv.url)) for srv in nodes.servers]
            for i in range(0, n, 20):
                await asyncio.gather(*(clients[(i + k) % len(clients)].create_schedule({**spec, "name": f"s{i + k}"})
                                       for k in range(min(20, n - i))))  # fmt: skip
        ctx.progress(f"{n:,} schedules created in {time.perf_counter() - t0:.1f} s")
        now = time.time()
        minute = (now // 60 + 1) * 60  # the next fire time of every schedule
        await asyncio.sleep(max(0.0, minute - time.time() - 1))
        meter = nodes.meter()
        await asyncio.sleep(max(0.0, minute + 59 - time.time()))
        firing = meter.stop()
        async with BenchClient(nodes.servers[0].url) as reader:
            jobs = [j for j in await all_jobs(reader, queue) if j["fire_time"] and _epoch(j["fire_time"]) == minute]
        late = sorted(1000 * (_epoch(j["created_at"]) - _epoch(j["fire_time"])) for j in jobs)
    cpu = firing.server_main + firing.server_threads
    idle_cpu = baseline.server_main + baseline.server_threads
    where = f"{len(nodes.servers)} node(s), {ctx.backend.label}; load {load_average()}"
    figures = [Figure(NAME, f"fire times made in the minute ({n:,} schedules)", len(jobs), "jobs", None, where)]
    if late:
        floor = LATENESS_P99_FLOOR if len(nodes.servers) == 1 else None
        for p in (50, 99):
            figures.append(Figure(NAME, f"lateness p{p}", percentile(late, p), "ms", floor if p == 99 else None,
                                  f"{n:,} schedules every minute; {where}"))  # fmt: skip
        figures.append(Figure(NAME, "lateness max", late[-1], "ms", None, "the last fire time of the minute"))
    figures.append(Figure(NAME, "CPU in the firing minute", 100 * cpu / firing.wall, "% of a core", None,
                          firing.note()))  # fmt: skip
    figures.append(Figure(NAME, "CPU idle (baseline, same nodes)", 100 * idle_cpu / baseline.wall, "% of a core",
                          None, baseline.note()))  # fmt: skip
    if idle_cpu > 0:
        figures.append(Figure(NAME, "firing minute / idle CPU", cpu / firing.wall / (idle_cpu / baseline.wall), "x",
                              None, "ratio to the same run's idle baseline"))  # fmt: skip
    return figures
