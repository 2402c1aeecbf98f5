"""Benchmark: drain a backlog of jobs that each do a little real I/O (one Redis PING,
bench/io_job.py), the job shape under which claims used to collapse to a few jobs each.

Each run stores `io_jobs` jobs in a paused queue of fresh node(s) with the default 32 local agent
slots, resumes it and stops the clock at the last success (bench.throughput). Besides jobs/s it
prints what does not depend on the machine's load: the mean claim batch (jobs per claim
transaction, from GET /v1/stats `dispatch`), the mean result batch, claim transactions per job,
the store commits per job (GET /metrics) and the server's CPU per job. Same-run floor: the
plain-SQL drain of bench/claim_floor.py at the same batch as the slots, on the same store.
Several runs: the median, and the slowest as a share of it.

On PostgreSQL the issue's floor is for a node with a remote agent (`jobdeck server` + `jobdeck
agent` with the same slots over the agent WebSocket): those runs come first and carry the floor;
then the same runs on `jobdeck up` nodes with their local agents, shown beside them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
from collections.abc import AsyncIterator

from bench.claim_floor import pg_drain_floor, sqlite_drain_floor
from bench.context import Nodes, RunContext
from bench.report import Figure, Floor
from bench.server import Process
from bench.submit import store_commits
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
    """`io_runs` drains of `io_jobs` Redis-PING jobs with `io_slots` slots per node (on PostgreSQL:
    first through a remote agent, then through the nodes' local agents), beside the store's floor."""
    s = ctx.scale
    if ctx.backend.kind == "sqlite":
        figures = await _drains(ctx, NAME, IO_FLOORS["sqlite"], local=True)
        floor = sqlite_drain_floor(ctx.servers.tmp_root, s.io_jobs, s.io_slots)
        note = "bench/claim_floor.py: claim + complete, WAL + synchronous=FULL, same disk, same run"
    else:
        figures = await _drains(ctx, f"{NAME}, remote agent", IO_FLOORS["postgres"], local=False)
        figures += await _drains(ctx, f"{NAME}, local agents", None, local=True)
        floor = await pg_drain_floor(ctx.backend.database_url, s.io_jobs, s.io_slots)
        note = "bench/claim_floor.py: claim (SKIP LOCKED) + complete over one connection, fresh schema, same run"
    figures.append(Figure(NAME, f"plain-SQL drain floor, {s.io_slots} a transaction", floor, "jobs/s", note=note))
    medians = [f for f in figures if f.measure.startswith("jobs/s, median") and f.value is not None]
    return figures + [Figure(f.bench, "median / plain-SQL floor", (f.value or 0.0) / floor, "ratio") for f in medians]


@contextlib.asynccontextmanager
async def _case(ctx: RunContext, name: str, local: bool) -> AsyncIterator[tuple[Nodes, Process | None]]:
    """The nodes of one run: `jobdeck up` with local slots, or a server and one remote agent."""
    slots = ctx.scale.io_slots
    if local:
        async with ctx.nodes(name, slots) as nodes:
            yield nodes, None
    else:
        async with ctx.remote(name, slots) as (srv, agent, client):
            yield Nodes([srv], [client]), agent


async def _drains(ctx: RunContext, name: str, floor: Floor | None, *, local: bool) -> list[Figure]:
    s = ctx.scale
    run_ctx = dataclasses.replace(ctx, scale=dataclasses.replace(s, e2e_jobs=s.io_jobs, e2e_slots=s.io_slots))
    rates: list[float] = []
    claims = claimed = batches = results = commits = 0
    cpu_seconds = 0.0
    notes: list[str] = []
    for i in range(s.io_runs):
        case = f"io-drain-{i + 1}" if local else f"io-drain-remote-{i + 1}"
        async with _case(run_ctx, case, local) as (nodes, agent):
            before = [await store_commits(c) for c in nodes.clients]
            rate, note, cpu = await run_resumed(
                run_ctx, nodes.servers, nodes.clients, agent, job=ping_job(ctx.backend.redis_url), queue=QUEUE
            )
            for c, b in zip(nodes.clients, before, strict=True):
                d = (await c.stats())["dispatch"]
                claims, claimed = claims + d["claims"], claimed + d["jobs_claimed"]
                batches, results = batches + d["result_batches"], results + d["results"]
                commits += await store_commits(c) - b
        rates.append(rate)
        cpu_seconds += cpu.server_main + cpu.server_threads
        notes.append(note)
        ctx.progress(f"run {i + 1}: {rate:,.0f} jobs/s, mean claim batch so far {claimed / max(claims, 1):.1f}")
    jobs = s.io_jobs * s.io_runs
    median = statistics.median(rates)
    runs = ", ".join(f"{r:,.0f}" for r in rates)
    where = f"{s.io_slots} slots" + ("" if local else " in 1 remote agent process")
    return [
        Figure(name, f"jobs/s, median of {s.io_runs} runs", median, "jobs/s", floor,
               f"runs: {runs}; {s.io_jobs:,} jobs each, {where}; last run: {notes[-1]}"),
        Figure(name, "slowest run / median", min(rates) / median, "ratio", SPREAD_FLOOR, runs),
        Figure(name, "mean claim batch", claimed / max(claims, 1), "jobs", CLAIM_BATCH_FLOOR,
               f"{claimed:,} jobs in {claims:,} claim transactions"),
        Figure(name, "mean result batch", results / max(batches, 1), "jobs",
               note=f"{results:,} results in {batches:,} result batches (a batch shares the commit of the claim that fills its slots)"),
        Figure(name, "claim transactions per job", claims / max(claimed, 1), "ratio"),
        Figure(name, "store commits per job", commits / max(jobs, 1), "ratio",
               note="GET /metrics jobdeck_store_commit_seconds_count over submit + drain; the floor's is 2/slots"),
        Figure(name, "server CPU per job", 1000 * cpu_seconds / jobs, "ms",
               note="event loop + threads, drain only" + ("" if local else "; the agent's CPU is in the note above")),
    ]  # fmt: skip
