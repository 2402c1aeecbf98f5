"""Benchmark `python`: what running sync python tasks in worker processes costs.

calls   the python handler in this process, no server: a sync task that does a little real
        I/O (writes 4 KiB to a file, reads it back, deletes it) run through the agent's worker
        pool, against the old path, a thread per call (asyncio.to_thread), measured in the same
        run: one call at a time and 8 at once; the same work as an async task (the event-loop
        path); and how long a worker process takes to start (spawn until ready) and its RSS;
        and the handler's own cost on an async no-op against what the old handler did
jobs    the same task as jobs through `jobdeck up`'s local agent (32 slots): a first run (its
        workers start), a second (warm), the old path (an async task that calls
        asyncio.to_thread, as the handler did) and the async twin, one after the other on one
        server, each pre-submitted in a paused queue, the clock from the resume to the last success
"""

from __future__ import annotations

import asyncio
import inspect
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agents.handlers import Outcome, RunContext
from agents.handlers.python import run_python
from agents.pool import WorkerPool
from agents.tasknames import resolve
from bench.context import RunContext as BenchContext
from bench.python_work import small_io
from bench.report import Figure
from bench.server import BenchError
from bench.workload import last_event_time, open_paused_queue, submit_in_batches, wait_for_state

CALLS = "python calls"
JOBS = "python jobs"
AT_ONCE = 8
STARTS = 10
ASYNC_CALLS = 20_000
JOB_SLOTS = 32


def _task(function: str, folder: str, n: int) -> dict[str, Any]:
    return {"kind": "python", "function": f"bench.python_work:{function}", "args": [folder, n]}


async def _per_call(n: int, at_once: int, one: Callable[[int], Awaitable[Any]]) -> float:
    """Microseconds per call for `n` calls of `one`, `at_once` of them running at a time."""

    async def lane(start: int) -> None:
        for i in range(start, n, at_once):
            await one(i)

    t0 = time.perf_counter()
    await asyncio.gather(*(lane(k) for k in range(at_once)))
    return (time.perf_counter() - t0) / n * 1e6


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


async def calls(ctx: BenchContext) -> list[Figure]:
    """Sync calls through the worker pool vs a thread per call, in this process."""
    n = ctx.scale.python_calls
    pool = WorkerPool(AT_ONCE)
    with tempfile.TemporaryDirectory() as folder:

        async def in_pool(i: int) -> None:
            await in_pool_of(pool, folder, i)

        async def on_thread(i: int) -> None:
            await asyncio.to_thread(small_io, folder, i)  # the old path: abandoned, not stopped, on cancel

        async def in_loop(i: int) -> None:
            await run_python(_task("small_io_async", folder, i), RunContext(i, 1, workers=pool))

        try:
            await _per_call(AT_ONCE * 4, AT_ONCE, in_pool)  # every worker started and warm
            rss = _rss_mb(pool.pids()[0])
            figures: dict[str, float] = {}
            for label, one, at_once in (("pool 1", in_pool, 1), ("thread 1", on_thread, 1),
                                        ("pool 8", in_pool, AT_ONCE), ("thread 8", on_thread, AT_ONCE),
                                        ("async 1", in_loop, 1)):  # fmt: skip
                figures[label] = await _per_call(n, at_once, one)
                ctx.progress(f"{label}: {figures[label]:.0f} us per call")
        finally:
            await pool.close()
        starts = []
        for _ in range(STARTS):  # a fresh pool each time: the first call starts its worker
            cold = WorkerPool(1)
            try:
                await in_pool_of(cold, folder, 0)
            finally:
                await cold.close()
            starts.extend(cold.start_seconds)
    starts_ms = sorted(s * 1000 for s in starts)
    note = f"{n:,} calls each; 4 KiB write + read + unlink per call"
    started = f"{len(starts_ms)} starts, max {starts_ms[-1]:.0f} ms"
    p1, t1, p8, t8 = figures["pool 1"], figures["thread 1"], figures["pool 8"], figures["thread 8"]
    return [
        Figure(CALLS, "sync, one at a time: worker pool", p1, "us/call", None, note),
        Figure(CALLS, "sync, one at a time: thread per call (old path, baseline)", t1, "us/call"),
        Figure(CALLS, "pool / thread, one at a time", p1 / t1, "ratio"),
        Figure(CALLS, f"sync, {AT_ONCE} at once: worker pool", p8, "us/call"),
        Figure(CALLS, f"sync, {AT_ONCE} at once: thread per call (baseline)", t8, "us/call"),
        Figure(CALLS, f"pool / thread, {AT_ONCE} at once", p8 / t8, "ratio"),
        Figure(CALLS, "async, one at a time: in the event loop", figures["async 1"], "us/call"),
        *await _async_overhead(),
        Figure(CALLS, "worker start (spawn -> ready), median", statistics.median(starts_ms), "ms", None, started),
        Figure(CALLS, "worker RSS, warm", rss, "MB", None, "one idle worker after its calls"),
    ]


async def _old_run_python(task: dict[str, Any], ctx: RunContext) -> Outcome:
    """The python handler's async path as it was before worker processes, secrets and current_job()."""
    try:
        fn = resolve(task["function"])
    except LookupError as exc:
        return Outcome(False, str(exc), retryable=False)
    args, kwargs = task.get("args") or [], task.get("kwargs") or {}
    try:
        if inspect.iscoroutinefunction(fn):
            value = await fn(*args, **kwargs)
        else:
            value = await asyncio.to_thread(fn, *args, **kwargs)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return Outcome(False, f"{type(exc).__name__}: {exc}")
    return Outcome(True, result=value)


async def _async_overhead() -> list[Figure]:
    """The python handler's own cost on an async no-op (the drain path), against the old handler's
    code for it, each given a RunContext as the runtime makes one: best of 5 rounds each."""
    task = {"kind": "python", "function": "agents.builtin:noop"}

    async def before(i: int) -> None:
        await _old_run_python(task, RunContext(i, 1))

    async def now(i: int) -> None:
        await run_python(task, RunContext(i, 1))

    best = {"before": float("inf"), "now": float("inf")}
    for _ in range(5):
        for label, one in (("before", before), ("now", now)):
            best[label] = min(best[label], await _per_call(ASYNC_CALLS, 1, one))
    note = f"{ASYNC_CALLS:,} calls a round, best of 5; both with a RunContext (7 fields more than it had)"
    return [
        Figure(CALLS, "async no-op: the handler now", best["now"], "us/call", None, note),
        Figure(CALLS, "async no-op: the old handler's code (baseline)", best["before"], "us/call"),
    ]


async def in_pool_of(pool: WorkerPool, folder: str, i: int) -> None:
    """One call of the sync task through `pool`, as the agent makes it."""
    out = await run_python(_task("small_io", folder, i), RunContext(i, 1, workers=pool))
    if not out.ok:
        raise BenchError(f"the sync task failed in the pool: {out.error}")


async def jobs(ctx: BenchContext) -> list[Figure]:
    """The sync task as jobs through the local agent of `jobdeck up`: its first run (the workers start),
    a second run (warm), the old thread path and the async twin, one after the other on one server."""
    s = ctx.scale
    n = s.python_jobs
    runs = (("cold", "small_io"), ("warm", "small_io"), ("thread", "small_io_thread"), ("async", "small_io_async"))
    rates: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        async with ctx.server("python-jobs", JOB_SLOTS) as (_, client):
            for label, function in runs:
                queue = f"py-{label}"
                await open_paused_queue(client, queue)
                specs = [{"task": _task(function, folder, i), "queue": queue} for i in range(n)]
                await submit_in_batches(client, specs, s.batch_size)
                await wait_for_state(client, queue, "queued", n, poll=s.poll_seconds, stall=s.stall_seconds)
                t0 = time.time()
                await client.queue_action(queue, "resume")
                await wait_for_state(client, queue, "succeeded", n, poll=0.05, stall=s.stall_seconds)
                end = await last_event_time(client, queue, "job.succeeded") or time.time()
                rates[label] = n / (end - t0)
                ctx.progress(f"{label} ({function}): {n:,} jobs at {rates[label]:,.0f} jobs/s")
    note = f"{n:,} jobs a run, {JOB_SLOTS} slots, resume -> all succeeded"
    return [
        Figure(JOBS, "sync task, workers warm", rates["warm"], "jobs/s", None, note),
        Figure(JOBS, "sync task, first run (its workers start)", rates["cold"], "jobs/s"),
        Figure(JOBS, "old path: a thread per call (baseline)", rates["thread"], "jobs/s"),
        Figure(JOBS, "warm workers / thread", rates["warm"] / rates["thread"], "ratio"),
        Figure(JOBS, "async twin (event loop)", rates["async"], "jobs/s"),
    ]
