"""A million stored jobs (issue 19): the store is filled in SQL before the node starts (70 % finished,
10 % scheduled for tomorrow, 10 % queued in two paused queues, 5 % failed and retrying tomorrow,
5 queues, 20 names, tags on 80 %), plus a paused backlog of no-op jobs to drain. Then, measured from
outside through the API of a real `jobdeck up` node:

- drain with the big backlog vs a small queue of the same size to drain, in alternating turns (ratio);
- idle CPU of the node with all that stored (nothing due, nothing claimable);
- p95 of each job-list filter, of /v1/stats and /v1/queues; a bulk dry run over the 70 % tag;
- events written per drained job, the WAL file's size and the node's RSS.

On PostgreSQL the fill is not analysed (autovacuum off for it): the first drain runs with stale
statistics, as after a bulk load, and the plans must hold anyway (the node's keeper analyses later).
`./dev bench --only scale` (1,000,000 jobs) or `--quick` (100,000).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.context import RunContext
from bench.report import Figure, Floor, load_average, percentile
from bench.server import CpuMeter, Server, jobdeck_server
from bench.workload import BenchClient, wait_for_state

NAME = "scale"
STORE_JOBS = 1_000_000
QUICK_STORE_JOBS = 100_000
BACKLOG = 500_000  # no-op jobs queued in the paused queue the big drain takes from
QUICK_BACKLOG = 50_000
DRAIN = 10_000  # jobs each drain turn finishes (quick: 2,000)
TURNS = 2
REPEATS = 40  # requests per p95
IDLE_SECONDS = 10.0
SLOTS = 512
NOOP = '{"kind": "python", "function": "agents.builtin:noop"}'
DRAIN_FLOOR = Floor(">=", 0.8)
LIST_P95_FLOOR = Floor("<=", 50.0)
IDLE_CPU_FLOOR = Floor("<=", 1.0)
DRY_RUN_FLOOR = Floor("<=", 1000.0)


def fill_sql(jobs: int, backlog: int, now: float, series: str, json: str = "") -> list[str]:
    """Statements filling an empty (migrated) store: `series` is the engine's generator of i = 1..n
    (a recursive CTE on SQLite, generate_series on PostgreSQL) with {n} in it; `json` the cast of a
    JSON column's text (PostgreSQL: ::json)."""
    stored = f"""
INSERT INTO jobs (id, name, queue, state, priority, sort_key, run_at, created_at, updated_at, attempt, max_attempts,
                  backoff_base, backoff_cap, task, tags, started_at, finished_at, spec_max_attempts)
{series.format(n=jobs)}
SELECT i, 'report-' || (i % 20) || '.daily', CASE WHEN i % 10 = 8 THEN 'held-' || (i % 2) ELSE 'q' || (i % 5) END,
       CASE WHEN i % 10 = 8 THEN 'queued' WHEN i % 10 = 9 THEN 'scheduled' WHEN i % 20 = 7 THEN 'failed'
            WHEN i % 100 = 17 THEN 'dead' WHEN i % 100 = 27 THEN 'cancelled' ELSE 'succeeded' END,
       i % 3, {now} - 86400 + i * 0.001, {now} + 86400 + i % 3600, {now} - {jobs} * 0.01 + i * 0.01, {now},
       1, 3, 1, 3600, '{{"kind": "shell", "argv": ["true"]}}'{json},
       (CASE WHEN i % 10 < 7 THEN '["common"]' WHEN i % 100 = 97 THEN '["rare"]' ELSE '[]' END){json},
       {now} - 86400 + i * 0.001, {now} - 86400 + i * 0.001 + (i % 7), 3
FROM n"""
    tags = "tags::text" if json else "tags"
    queued = f"""
INSERT INTO jobs (id, name, queue, state, priority, sort_key, run_at, created_at, updated_at, attempt, max_attempts,
                  backoff_base, backoff_cap, task, tags, spec_max_attempts)
{series.format(n=backlog)}
SELECT {jobs} + i, 'noop', 'backlog', 'queued', 0, {now} + i * 0.0001, {now}, {now}, {now}, 0, 3, 1, 3600,
       '{NOOP}'{json}, '[]'{json}, 3 FROM n"""
    return [
        stored,
        queued,
        f"INSERT INTO job_tags (tag, job_id) SELECT 'common', id FROM jobs WHERE {tags} = '[\"common\"]'",
        f"INSERT INTO job_tags (tag, job_id) SELECT 'rare', id FROM jobs WHERE {tags} = '[\"rare\"]'",
        "INSERT INTO queues (name, paused, created_at, updated_at) SELECT DISTINCT queue, "
        f"queue LIKE 'held-%' OR queue = 'backlog', {now}, {now} FROM jobs",
    ]


def fill_sqlite(path: Path, jobs: int, backlog: int, now: float) -> None:
    from core.store._sqlite_writer import connect, migrate

    conn = connect(path)
    migrate(conn)
    conn.execute("BEGIN")
    series = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {n})"
    for statement in fill_sql(jobs, backlog, now, series):
        conn.execute(statement)
    conn.execute("INSERT OR REPLACE INTO sqlite_sequence (name, seq) VALUES ('jobs', ?)", (jobs + backlog,))
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


async def fill_postgres(url: str, jobs: int, backlog: int, now: float) -> None:
    import asyncpg

    from core.store._pg_writer import migrate

    conn = await asyncpg.connect(url)
    try:
        await migrate(conn)
        for table in ("jobs", "job_tags"):  # loaded after the last ANALYZE, as a bulk load is
            await conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        for statement in fill_sql(jobs, backlog, now, "WITH n(i) AS (SELECT generate_series(1, {n}))", "::json"):
            await conn.execute(statement)
        await conn.execute("SELECT setval(pg_get_serial_sequence('jobs', 'id'), $1)", jobs + backlog)
    finally:
        await conn.close()


async def planner_believes_queued(url: str) -> tuple[int, int]:
    """(rows the PostgreSQL planner expects queued, rows queued): stale statistics differ a lot."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        plan = await conn.fetchval("EXPLAIN (FORMAT JSON) SELECT 1 FROM jobs WHERE state = 'queued'")
        queued = await conn.fetchval("SELECT sum(n) FROM job_counts WHERE state = 'queued'")
        return int(json.loads(plan)[0]["Plan"]["Plan Rows"]), int(queued)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def filled_node(ctx: RunContext, jobs: int, backlog: int) -> AsyncIterator[tuple[Server, BenchClient, Path]]:
    """A `jobdeck up` node on a store filled before it started; the SQLite file's path (or a dummy)."""
    now = time.time()
    async with ctx.backend.fresh(NAME) as env:
        env = dict(env)
        path = ctx.servers.tmp_root / f"scale-{time.monotonic_ns()}.db"
        t = time.perf_counter()
        if ctx.backend.kind == "sqlite":
            fill_sqlite(path, jobs, backlog, now)
            env["JOBDECK_DATABASE_URL"] = f"sqlite:///{path}"
        else:
            await fill_postgres(env["JOBDECK_DATABASE_URL"], jobs, backlog, now)
        ctx.progress(f"filled {jobs + backlog:,} jobs in {time.perf_counter() - t:.0f} s")
        try:
            async with jobdeck_server(NAME, SLOTS, ctx.servers, env=env) as srv, BenchClient(srv.url) as client:
                if ctx.backend.kind == "sqlite":
                    srv.database = ""  # no PostgreSQL CPU to meter
                ctx.progress(f"server up at {srv.url} (pid {srv.pid}, {ctx.backend.label})")
                yield srv, client, path
        finally:
            for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                p.unlink(missing_ok=True)


async def p95_ms(call: Callable[[], Awaitable[Any]], repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        await call()
        times.append((time.perf_counter() - t0) * 1000)
    return percentile(sorted(times), 95)


async def drain_turn(client: BenchClient, queue: str, n: int, ctx: RunContext) -> float:
    """Resume `queue`, wait until `n` more of its jobs succeeded, pause it again; jobs/s."""
    done = (await client.queue_counts(queue)).get("succeeded", 0)
    t0 = time.perf_counter()
    await client.queue_action(queue, "resume")
    await wait_for_state(client, queue, "succeeded", done + n, poll=0.1, stall=ctx.scale.stall_seconds)
    took = time.perf_counter() - t0
    await client.queue_action(queue, "pause")
    deadline = time.monotonic() + ctx.scale.stall_seconds  # let the jobs already claimed finish
    while (await client.queue_counts(queue)).get("running", 0) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return n / took


async def scale_run(ctx: RunContext) -> list[Figure]:
    """Every figure of the scale scenario on one store."""
    quick = ctx.scale.batches <= 2
    jobs, backlog = (QUICK_STORE_JOBS, QUICK_BACKLOG) if quick else (STORE_JOBS - BACKLOG // 5, BACKLOG)
    drain = 2_000 if quick else DRAIN
    figures: list[Figure] = []

    def fig(measure: str, value: float, unit: str, floor: Floor | None = None, note: str = "") -> None:
        figures.append(Figure(NAME, measure, value, unit, floor, note))

    async with filled_node(ctx, jobs, backlog) as (srv, client, path):
        total = jobs + backlog
        rss_start = srv.memory().rss
        stale = ""
        if ctx.backend.kind == "postgres":
            believed, queued = await planner_believes_queued(srv.database)
            stale = f"; planner expected {believed:,} queued of {queued:,} at the first drain"
        # The small drain's queue: `drain` no-ops a turn, submitted through the API, paused.
        seq_small = (await client.health())["last_seq"]
        await client.submit_batch([{"task": json.loads(NOOP), "queue": "small", "delay": 86_400}])
        await client.queue_action("small", "pause")
        small_jobs = (drain + 2 * SLOTS) * TURNS  # a turn may finish up to a claim and its slots' more
        for start in range(0, small_jobs, 10_000):
            n = min(10_000, small_jobs - start)
            await client.submit_batch([{"task": json.loads(NOOP), "queue": "small"}] * n)
        seq0 = (await client.health())["last_seq"]
        rates: dict[str, list[float]] = {"small": [], "backlog": []}
        for _ in range(TURNS):
            for queue in ("backlog", "small"):
                rate = await drain_turn(client, queue, drain, ctx)
                rates[queue].append(rate)
                ctx.progress(f"drain {queue}: {rate:,.0f} jobs/s")
        small = statistics.mean(rates["small"])
        big = statistics.mean(rates["backlog"])
        turns = "; ".join(f"{q} {', '.join(f'{r:,.0f}' for r in rs)}" for q, rs in rates.items())
        fig(f"drain: {small_jobs:,} queued (baseline)", small, "jobs/s", note=f"{drain:,} a turn; turns {turns}")
        fig(f"drain with {backlog:,} queued / baseline", big / small, "x", DRAIN_FLOOR,
            note=f"{big:,.0f} jobs/s{stale}")  # fmt: skip
        await client.queue_action("small", "resume")
        await wait_for_state(client, "small", "succeeded", small_jobs, poll=0.2, stall=ctx.scale.stall_seconds)
        per_job = await events_per_job(client, seq_small, "small", small_jobs + 1)
        fig("events stored per job (submitted, run, succeeded)", per_job, "events",
            note=f"{(await client.health())['last_seq'] - seq0:,} events during the drains")  # fmt: skip

        idle = IDLE_SECONDS if not quick else 5.0
        meter = CpuMeter(srv)
        await asyncio.sleep(idle)
        usage = meter.stop()
        cpu = 100 * (usage.server_main + usage.server_threads) / usage.wall
        fig(f"idle CPU with {total:,} stored", cpu, "% of a core", IDLE_CPU_FLOOR, note=usage.note())

        filters: list[tuple[str, dict[str, Any]]] = [
            ("newest 100", {}),
            ("state=succeeded", {"state": "succeeded"}),
            ("state=scheduled", {"state": "scheduled"}),
            ("state=dead", {"state": "dead"}),
            ("queue=q3", {"queue": "q3"}),
            ("name_prefix=report-1 (55 %)", {"name_prefix": "report-1"}),
            ("name_prefix=report-7. (5 %)", {"name_prefix": "report-7."}),
            ("tag=common (70 %)", {"tag": "common"}),
            ("tag=rare (1 %)", {"tag": "rare"}),
            ("tag=common + state=succeeded", {"tag": "common", "state": "succeeded"}),
            ("sort=priority", {"sort": "priority"}),
        ]
        base = 0.0  # the newest page's p95: what a list costs on this machine now, whatever it stores
        for title, params in filters:
            ms = await p95_ms(lambda p=params: client.list_jobs(limit=100, **p))  # type: ignore[misc]
            base = base or ms
            fig(f"list p95: {title}", ms, "ms", LIST_P95_FLOOR, note=f"{ms / base:.2f}x the newest page")
        for title, call in (("GET /v1/stats p95", client.stats), ("GET /v1/queues p95", client.queues)):
            ms = await p95_ms(call)
            fig(title, ms, "ms", LIST_P95_FLOOR, note=f"{ms / base:.2f}x the newest page")
        t0 = time.perf_counter()
        out = await client.bulk("cancel", filter={"tag": "common"}, dry_run=True)
        dry = (time.perf_counter() - t0) * 1000
        fig(f"bulk dry run, tag=common ({out['matched']:,} matched)", dry, "ms", DRY_RUN_FLOOR)

        mem = srv.memory()
        fig(
            "node RSS (start -> end; peak)",
            mem.rss,
            "MB",
            note=f"{rss_start:.0f} -> {mem.rss:.0f}; peak {mem.peak:.0f}",
        )
        if ctx.backend.kind == "sqlite":
            wal = path.with_name(path.name + "-wal")
            size = wal.stat().st_size / 1e6 if wal.exists() else 0.0
            fig("WAL file at the end", size, "MB", note=f"database {path.stat().st_size / 1e6:,.0f} MB")
        figures[0].note += f"; load {load_average()}"
    return figures


async def events_per_job(client: BenchClient, since: int, queue: str, jobs: int) -> float:
    """Stored events of `queue`'s jobs after `since`, per job."""
    n = 0
    while page := await client.events_page(since, types="job.*", queues=queue):
        n += len(page)
        since = page[-1]["seq"]
    return n / jobs
