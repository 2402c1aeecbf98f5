"""Benchmark: drain a backlog of jobs that each do a little real I/O (one Redis PING,
bench/io_job.py), the job shape under which claims used to collapse to a few jobs each.

Each run stores `io_jobs` jobs in a paused queue of fresh node(s) with the default 32 local agent
slots, resumes it and stops the clock at the last success (bench.throughput). Besides jobs/s it
prints what does not depend on the machine's load: the mean claim batch (jobs per claim
transaction, from GET /v1/stats `dispatch`), the mean result batch, claim transactions per job,
and the server's CPU per job. Same-run floor (SQLite): the plain-SQL drain of bench/claim_floor.py
at the same batch as the slots. Several runs: the median, and the slowest as a share of it.
"""

from __future__ import annotations

import dataclasses
import statistics

from bench.claim_floor import sqlite_drain_floor
from bench.context import RunContext
from bench.report import Figure, Floor
from bench.throughput import run_resumed

QUEUE = "io"
NAME = "drain, Redis-PING jobs"
IO_FLOORS = {"sqlite": Floor(">=", 8_000), "postgres": Floor(">=", 4_000)}
SPREAD_FLOOR = Floor(">=", 0.8)  # the slowest run / the median
CLAIM_BATCH_FLOOR = Floor(">=", 16)  # half the 32 default slots: claims stay full


def ping_job(redis_url: str) -> dict[str, object]:
    """The spec of one job that PINGs the Redis at `redis_url` once."""
    return {"task": {"kind": "python", "function": "bench.io_job:redis_ping", "args": [redis_url]}, "queue": QUEUE}


async def io_drain(ctx: RunContext) -> list[Figure]:
    """`io_runs` drains of `io_jobs` Redis-PING jobs with `io_slots` slots per node."""
    s = ctx.scale
    run_ctx = dataclasses.replace(ctx, scale=dataclasses.replace(s, e2e_jobs=s.io_jobs, e2e_slots=s.io_slots))
    rates: list[float] = []
    claims = claimed = batches = results = 0
    cpu_seconds = 0.0
    notes: list[str] = []
    for i in range(s.io_runs):
        async with run_ctx.nodes(f"io-drain-{i + 1}", s.io_slots) as nodes:
            rate, note, cpu = await run_resumed(
                run_ctx, nodes.servers, nodes.clients, job=ping_job(ctx.backend.redis_url), queue=QUEUE
            )
            for c in nodes.clients:
                d = (await c.stats())["dispatch"]
                claims, claimed = claims + d["claims"], claimed + d["jobs_claimed"]
                batches, results = batches + d["result_batches"], results + d["results"]
        rates.append(rate)
        cpu_seconds += cpu.server_main + cpu.server_threads
        notes.append(note)
        ctx.progress(f"run {i + 1}: {rate:,.0f} jobs/s, mean claim batch so far {claimed / max(claims, 1):.1f}")
    jobs = s.io_jobs * s.io_runs
    median = statistics.median(rates)
    runs = ", ".join(f"{r:,.0f}" for r in rates)
    figures = [
        Figure(
            NAME,
            f"jobs/s, median of {s.io_runs} runs",
            median,
            "jobs/s",
            IO_FLOORS[ctx.backend.kind],
            f"runs: {runs}; {s.io_jobs:,} jobs each, {s.io_slots} slots; last run: {notes[-1]}",
        ),
        Figure(NAME, "slowest run / median", min(rates) / median, "ratio", SPREAD_FLOOR, runs),
        Figure(
            NAME,
            "mean claim batch",
            claimed / max(claims, 1),
            "jobs",
            CLAIM_BATCH_FLOOR,
            f"{claimed:,} jobs in {claims:,} claim transactions",
        ),
        Figure(
            NAME,
            "mean result batch",
            results / max(batches, 1),
            "jobs",
            note=f"{results:,} results in {batches:,} result transactions",
        ),
        Figure(NAME, "claim transactions per job", claims / max(claimed, 1), "ratio"),
        Figure(NAME, "server CPU per job", 1000 * cpu_seconds / jobs, "ms", note="event loop + threads, drain only"),
    ]
    if ctx.backend.kind == "sqlite":
        floor = sqlite_drain_floor(ctx.servers.tmp_root, s.io_jobs, s.io_slots)
        figures += [
            Figure(
                NAME,
                f"plain-SQL drain floor, {s.io_slots} a transaction",
                floor,
                "jobs/s",
                note="bench/claim_floor.py: claim + complete, WAL + synchronous=FULL, same disk, same run",
            ),
            Figure(NAME, "median / plain-SQL floor", median / floor, "ratio"),
        ]
    return figures
