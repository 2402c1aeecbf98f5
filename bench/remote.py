"""Benchmarks 5 and 6: one remote agent process (`jobdeck agent`) on a core node that has no
agent of its own (`jobdeck server`), the two talking over the agent WebSocket (/v1/agents).

  no-op     the e2e resumed run (see bench.throughput) through one agent process, then the same
            run on `jobdeck up` with the embedded local agent as the same-run baseline: what the
            WebSocket hop and a second process cost (or save)
  sleepers  10,000 `agents.builtin:sleep` jobs stored in a paused queue and resumed into one agent
            process with 10,000 slots: the time until all are running at once, the peak running
            count, and the agent's resident memory idle (right after it registered) and at its
            peak (VmHWM, which no sampling interval can miss)

"Running" is counted twice: by the server (GET /v1/stats `by_state.running`: claimed and sent to
the agent), and by the agent's own clock (the overlap of the jobs' `started_at`..`finished_at`,
which the agent reports): the first says the core handed them all out, the second that they ran
at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench.context import RunContext
from bench.report import AGENT_NOOP_FLOOR, AGENT_RSS_FLOOR, Figure, Floor
from bench.server import BenchError, CpuMeter, CpuUsage, Memory, Process
from bench.throughput import run_resumed
from bench.workload import (
    BenchClient,
    all_jobs,
    epoch,
    last_event_time,
    open_paused_queue,
    sleep_job,
    submit_in_batches,
    wait_for_state,
)

QUEUE = "sleepers"
NOOP = "agent no-op"
SLEEPERS = "agent sleepers"
RAMP_POLL = 0.1  # seconds between GET /v1/stats while the jobs start: the resolution of "all running"


async def noop_remote(ctx: RunContext) -> list[Figure]:
    """No-op throughput through one remote agent process, then through the local agent (baseline)."""
    slots = ctx.scale.e2e_slots
    async with ctx.remote("agent-noop-remote", slots) as (srv, agent, client):
        remote, note, _ = await run_resumed(ctx, [srv], [client], agent)
    async with ctx.server("agent-noop-local", slots) as (srv, client):
        local, local_note, _ = await run_resumed(ctx, [srv], [client])
    return [
        Figure(NOOP, "1 agent process, resume -> all succeeded", remote, "jobs/s", AGENT_NOOP_FLOOR, note),
        Figure(NOOP, "local agent of `jobdeck up` (baseline)", local, "jobs/s", None, local_note),
        Figure(NOOP, "remote / local", remote / local, "ratio", None, "same jobs, slots and client; same run"),
    ]


@dataclass
class Ramp:
    """What the polls of GET /v1/stats saw after the resume at `t0` (Unix seconds)."""

    t0: float
    meter: CpuMeter
    all_running_after: float | None = None  # seconds after t0
    peak_running: int = 0
    rss_all_running: float | None = None  # the agent's VmRSS when all were first seen running, MB
    cpu: CpuUsage | None = None  # from t0 until all were seen running


async def _watch(client: BenchClient, agent: Process, n: int, ramp: Ramp, poll: float) -> None:
    """Poll the running count until cancelled; note when all `n` are first seen running."""
    while True:
        running = int((await client.stats())["by_state"].get("running", 0))
        ramp.peak_running = max(ramp.peak_running, running)
        if ramp.all_running_after is None and running >= n:
            ramp.all_running_after = time.time() - ramp.t0
            ramp.cpu = ramp.meter.stop()
            ramp.rss_all_running = agent.memory().rss
        await asyncio.sleep(RAMP_POLL if ramp.all_running_after is None else poll)


def max_overlap(intervals: Sequence[tuple[float, float]]) -> int:
    """The most intervals open at one instant (one that ends as another starts does not overlap it)."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


async def sleepers(ctx: RunContext) -> list[Figure]:
    """`sleepers` sleeping jobs at once in one agent process: how long to start them all, and its RSS."""
    s = ctx.scale
    n = s.sleepers
    async with ctx.remote("agent-sleepers", n) as (srv, agent, client):
        idle = agent.memory()
        await open_paused_queue(client, QUEUE)
        await submit_in_batches(client, [sleep_job(QUEUE, s.sleep_seconds)] * n, s.batch_size)
        await wait_for_state(client, QUEUE, "queued", n, poll=s.poll_seconds, stall=s.stall_seconds)
        whole = CpuMeter(srv, agent)
        ramp = Ramp(time.time(), CpuMeter(srv, agent))
        async with asyncio.TaskGroup() as tg:
            watch = tg.create_task(_watch(client, agent, n, ramp, s.poll_seconds))
            await client.queue_action(QUEUE, "resume")
            # Nothing moves while they sleep: that is no stall.
            stall = s.stall_seconds + s.sleep_seconds
            await wait_for_state(client, QUEUE, "succeeded", n, poll=s.poll_seconds, stall=stall)
            watch.cancel()
        cpu = whole.stop()
        peak = agent.memory()
        end = await last_event_time(client, QUEUE, "job.succeeded")
        jobs = await all_jobs(client, QUEUE)
    runs = [(epoch(j["started_at"]), epoch(j["finished_at"])) for j in jobs if j["started_at"] and j["finished_at"]]
    if len(runs) != n:
        raise BenchError(f"{n} sleeping jobs succeeded but {len(runs)} have a started_at and a finished_at")
    at_once = max_overlap(runs)
    last_start = max(start for start, _ in runs) - ramp.t0
    ctx.progress(
        f"{n:,} sleepers: all running after {ramp.all_running_after or float('nan'):.2f} s, "
        f"{at_once:,} at once in the agent, agent RSS {idle.rss:.0f} MB idle, {peak.peak:.0f} MB peak"
    )
    return _sleeper_figures(ctx, ramp, idle, peak, cpu, at_once, last_start, None if end is None else end - ramp.t0)


def _sleeper_figures(
    ctx: RunContext,
    ramp: Ramp,
    idle: Memory,
    peak: Memory,
    cpu: CpuUsage,
    at_once: int,
    last_start: float,
    all_done: float | None,
) -> list[Figure]:
    s = ctx.scale
    n = s.sleepers
    all_running = Floor(">=", n)
    ramp_note = (
        f"polled every {RAMP_POLL * 1000:.0f} ms; the agent started the last at +{last_start:.2f} s (its started_at)"
        + (f"; {ramp.cpu.note()}" if ramp.cpu is not None else "")
    )
    rss_now = "never all running" if ramp.rss_all_running is None else f"{ramp.rss_all_running:.0f} MB with all running"
    done = "?" if all_done is None else f"{all_done:.1f}"
    rss_note = (
        f"VmHWM; VmRSS {rss_now}; {(peak.peak - idle.rss) * 1000 / n:.1f} kB per job above idle; "
        f"all succeeded {done} s after the resume (sleep {s.sleep_seconds:g} s); whole run {cpu.note()}"
    )
    return [
        Figure(SLEEPERS, f"resume -> all {n:,} running (GET /v1/stats)", ramp.all_running_after, "s", None, ramp_note),
        Figure(SLEEPERS, "peak running (GET /v1/stats)", ramp.peak_running, "jobs", all_running,
               f"{n:,} jobs of agents.builtin:sleep [{s.sleep_seconds:g}] in 1 agent process, {n:,} slots"),
        Figure(SLEEPERS, "peak at once in the agent (started..finished)", at_once, "jobs", all_running,
               "the overlap of the started_at..finished_at the agent reported"),
        Figure(SLEEPERS, "agent RSS, idle after registering", idle.rss, "MB", None, "VmRSS before any job"),
        Figure(SLEEPERS, "agent peak RSS", peak.peak, "MB", AGENT_RSS_FLOOR, rss_note),
    ]  # fmt: skip
