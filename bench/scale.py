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
After the drains autovacuum is switched back on and its VACUUM (ANALYZE) of the load runs at once, so
it does not run during the idle and list measures (both stores of a run alike).
`./dev bench --only scale` (1,000,000 jobs) or `--quick` (100,000).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.context import RunContext, Scale
from bench.remote import sleepers
from bench.report import Figure, Floor, load_average, percentile
from bench.scale_maintenance import FOLLOW_BATCH, Follow, Steady, follower_lag, maintenance_done, steady_load, wal_mb
from bench.server import CpuMeter, Server, jobdeck_server
from bench.workload import BenchClient, wait_for_state
from core.store._sqlite_writer import WAL_SIZE_LIMIT

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
STALL_FLOOR = Floor("<=", 500.0)  # ms: maintenance may slow a claim or a submit, never stall it
WAL_FLOOR = Floor("<=", WAL_SIZE_LIMIT / 1e6)  # MB: core/store/_sqlite_writer.py's journal_size_limit


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
       CASE WHEN i % 10 = 0 THEN {now} - 40 * 86400 + i * 0.001 - (i % 7) ELSE {now} - 86400 + i * 0.001 END,
       CASE WHEN i % 10 = 0 THEN {now} - 40 * 86400 + i * 0.001 ELSE {now} - 86400 + i * 0.001 + (i % 7) END, 3
FROM n"""
    tags = "tags::text" if json else "tags"
    queued = f"""
INSERT INTO jobs (id, name, queue, state, priority, sort_key, run_at, created_at, updated_at, attempt, max_attempts,
                  backoff_base, backoff_cap, task, tags, spec_max_attempts)
{series.format(n=backlog)}
SELECT {jobs} + i, 'noop', 'backlog', 'queued', 0, {now} + i * 0.0001, {now}, {now}, {now}, 0, 3, 1, 3600,
       '{NOOP}'{json}, '[]'{json}, 3 FROM n"""
    # Three events per stored job (created, running, succeeded), two days old: the prune's work.
    events = f"""
INSERT INTO events (seq, ts, type, job_id, queue, body)
{series.format(n=3 * jobs)}
SELECT i, {now} - 2 * 86400 + i * 0.00001,
       CASE i % 3 WHEN 1 THEN 'job.created' WHEN 2 THEN 'job.running' ELSE 'job.succeeded' END, (i + 2) / 3,
       'q' || ((i + 2) / 3 % 5),
       '{{"seq": ' || i || ', "type": "job.event", "job_id": ' || ((i + 2) / 3) || ', "data": {{"state": "x"}}}}'
FROM n"""
    return [
        stored,
        queued,
        events,
        f"INSERT INTO job_tags (tag, job_id) SELECT 'common', id FROM jobs WHERE {tags} = '[\"common\"]'",
        f"INSERT INTO job_tags (tag, job_id) SELECT 'rare', id FROM jobs WHERE {tags} = '[\"rare\"]'",
        "INSERT INTO queues (name, paused, created_at, updated_at) SELECT DISTINCT queue, "
        f"queue LIKE 'held-%' OR queue = 'backlog', {now}, {now} FROM jobs",
    ]


def fill_sqlite(path: Path, jobs: int, backlog: int, now: float) -> None:
    from core.store._sqlite_search import index_all
    from core.store._sqlite_writer import connect, migrate
    from core.store.sqlite import recount_jobs

    conn = connect(path)
    migrate(conn)
    conn.execute("BEGIN")
    series = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {n})"
    for statement in fill_sql(jobs, backlog, now, series):
        conn.execute(statement)
    conn.execute("INSERT OR REPLACE INTO sqlite_sequence (name, seq) VALUES ('jobs', ?)", (jobs + backlog,))
    recount_jobs(conn)  # the counters, as the store's inserts keep them
    conn.execute("COMMIT")
    index_all(conn)  # the search index, as a store that ran would hold it
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


async def fill_postgres(url: str, jobs: int, backlog: int, now: float) -> None:
    import asyncpg

    from core.store._pg_search import index_all
    from core.store._pg_writer import migrate

    conn = await asyncpg.connect(url)
    try:
        await migrate(conn)
        for table in ("jobs", "job_tags"):  # loaded after the last ANALYZE, as a bulk load is
            await conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        for statement in fill_sql(jobs, backlog, now, "WITH n(i) AS (SELECT generate_series(1, {n}))", "::json"):
            await conn.execute(statement)
        await conn.execute("SELECT setval(pg_get_serial_sequence('jobs', 'id'), $1)", jobs + backlog)
        await conn.execute("UPDATE event_seq SET last = $1", 3 * jobs)
        await index_all(conn)  # the search index, as a store that ran would hold it
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


async def vacuum_after_load(url: str) -> float:
    """After the stale-statistics drain: autovacuum back on for the filled tables and the VACUUM it would
    run after such a load, done now (it would otherwise run during the idle and list measures, and a
    never-vacuumed table makes every first read set hint bits); seconds it took."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        t = time.perf_counter()
        for table in ("jobs", "job_tags"):
            await conn.execute(f"ALTER TABLE {table} RESET (autovacuum_enabled)")
        await conn.execute("VACUUM (ANALYZE) jobs, job_tags, job_search, events")
        return time.perf_counter() - t
    finally:
        await conn.close()


# Node 1 keeps everything (the lists and drains see the whole store); node 2, on the same store,
# runs the default retention: its event prune and archive round start with it.
KEEP_ALL = {"JOBDECK_EVENT_RETENTION_HOURS": "100000", "JOBDECK_JOB_RETENTION_DAYS": "0"}
# The baseline store: the same mix, a thousandth of the size.
SMALL_JOBS, SMALL_BACKLOG = 1_000, 100
RSS_AFTER_FLOOR = Floor("<=", 1.5)
FOLLOW_P99_FLOOR = Floor("<=", 100.0)


@contextlib.asynccontextmanager
async def filled_store(ctx: RunContext, jobs: int, backlog: int) -> AsyncIterator[tuple[dict[str, str], Path | None]]:
    """A fresh store filled in SQL: the nodes' environment, and the SQLite file's path (None on PostgreSQL)."""
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
        ctx.progress(f"filled {jobs + backlog:,} jobs and {3 * jobs:,} old events in {time.perf_counter() - t:.0f} s")
        try:
            yield env, (path if ctx.backend.kind == "sqlite" else None)
        finally:
            for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                p.unlink(missing_ok=True)


@contextlib.asynccontextmanager
async def node(
    ctx: RunContext, env: dict[str, str], extra: dict[str, str]
) -> AsyncIterator[tuple[Server, BenchClient]]:
    """A `jobdeck up` node on a filled store."""
    async with (
        jobdeck_server(NAME, SLOTS, ctx.servers, env={**env, **extra}) as srv,
        BenchClient(srv.url) as client,
    ):
        if ctx.backend.kind == "sqlite":
            srv.database = ""  # no PostgreSQL CPU to meter
        ctx.progress(f"server up at {srv.url} (pid {srv.pid}, {ctx.backend.label})")
        yield srv, client


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


# What the console's and the dashboard's job pages ask (they always ask for the total too), and the
# dead-letter page's list; each is measured on the full store and on the small one (the baseline).
COUNTED = {"count": "true"}
UI_READS: list[tuple[str, dict[str, Any]]] = [
    ("newest 100 + total", COUNTED),
    ("state=succeeded + total", {"state": "succeeded", **COUNTED}),
    ("state=scheduled + total", {"state": "scheduled", **COUNTED}),
    ("state=queued,running + total (console)", {"state": "queued,running", **COUNTED}),
    ("state=dead (dead letters page)", {"state": "dead"}),
    ("queue=q3 + total", {"queue": "q3", **COUNTED}),
    ("name_prefix=report-1 (55 %) + total", {"name_prefix": "report-1", **COUNTED}),
    ("name_prefix=report-7. (5 %) + total", {"name_prefix": "report-7.", **COUNTED}),
    ("tag=common (70 %) + total", {"tag": "common", **COUNTED}),
    ("tag=rare (1 %) + total", {"tag": "rare", **COUNTED}),
    ("tag=common + state=succeeded + total", {"tag": "common", "state": "succeeded", **COUNTED}),
    ("sort=priority + total", {"sort": "priority", **COUNTED}),
    ("sort=state + total", {"sort": "state", "order": "asc", **COUNTED}),
    ("sort=queue + total", {"sort": "queue", "order": "asc", **COUNTED}),
    ("sort=duration + total", {"sort": "duration", **COUNTED}),
    ("sort=created + total (dashboard)", {"sort": "created", **COUNTED}),
    ("oldest first + total", {"order": "asc", **COUNTED}),
    ("queue=q3 sort=priority + total", {"queue": "q3", "sort": "priority", **COUNTED}),
    ("search q=report-7 + total (dashboard)", {"q": "report-7", **COUNTED}),
]


async def ui_reads(client: BenchClient) -> dict[str, float]:
    """p95 (ms) of every list the UIs ask, of /v1/stats and /v1/queues; a bulk dry run's time."""
    out = {}
    for _title, params in UI_READS:  # warm: a node's first request of a kind pays for imports and caches
        await client.list_jobs(limit=100, **params)
    for title, params in UI_READS:
        out[f"list p95: {title}"] = await p95_ms(lambda p=params: client.list_jobs(limit=100, **p))  # type: ignore[misc]
    out["GET /v1/stats p95"] = await p95_ms(client.stats)
    out["GET /v1/queues p95"] = await p95_ms(client.queues)
    t0 = time.perf_counter()
    matched = (await client.bulk("cancel", filter={"tag": "common"}, dry_run=True))["matched"]
    out[f"bulk dry run, tag=common ({matched:,} matched)"] = (time.perf_counter() - t0) * 1000
    return out


async def idle_cpu(srv: Server, seconds: float) -> tuple[float, str]:
    meter = CpuMeter(srv)
    await asyncio.sleep(seconds)
    usage = meter.stop()
    return 100 * (usage.server_main + usage.server_threads) / usage.wall, usage.note()


@dataclass
class Baseline:
    """The small store's figures, measured first in the same run."""

    reads: dict[str, float]
    idle_cpu: float
    follow: Follow


async def small_store(ctx: RunContext, idle: float) -> Baseline:
    async with filled_store(ctx, SMALL_JOBS, SMALL_BACKLOG) as (env, _), node(ctx, env, KEEP_ALL) as (srv, client):
        if ctx.backend.kind == "postgres":  # as the big store is before its measures
            await vacuum_after_load(srv.database)
        reads = await ui_reads(client)
        cpu, _note = await idle_cpu(srv, idle)
        follow = await follower_lag(client)
    ctx.progress(f"baseline on {SMALL_JOBS + SMALL_BACKLOG:,} jobs measured")
    return Baseline(reads, cpu, follow)


def store_size(s: Scale) -> tuple[int, int]:
    """(jobs stored besides the backlog, the backlog) of the big store: --scale-jobs, else the default."""
    if s.scale_jobs:
        return s.scale_jobs, s.scale_jobs * 5 // 9  # the full run's proportions
    return (QUICK_STORE_JOBS, QUICK_BACKLOG) if s.batches <= 2 else (STORE_JOBS - BACKLOG // 5, BACKLOG)


async def scale_run(ctx: RunContext) -> list[Figure]:
    """Every figure of the scale scenario on one store (those of --scale-parts)."""
    quick = ctx.scale.batches <= 2
    parts = set(ctx.scale.scale_parts)
    jobs, backlog = store_size(ctx.scale)
    drain = 2_000 if quick else DRAIN
    idle = IDLE_SECONDS if not quick else 5.0
    figures: list[Figure] = []

    def fig(measure: str, value: float, unit: str, floor: Floor | None = None, note: str = "") -> None:
        figures.append(Figure(NAME, measure, value, unit, floor, note))

    def beside(value: float, base: float, what: str = "the small store") -> str:
        return f"{value / base:.2f}x {what} ({base:.1f})" if base else ""

    base = await small_store(ctx, idle) if parts & {"reads", "follow"} else None
    async with filled_store(ctx, jobs, backlog) as (env, path):
        total = jobs + backlog
        async with node(ctx, env, KEEP_ALL) as (srv, client):
            rss_start = srv.memory().rss
            if "drain" in parts:
                await drains(ctx, client, srv, drain, backlog, fig)
            if ctx.backend.kind == "postgres":
                fig("VACUUM (ANALYZE) after the load, before the measures below", await vacuum_after_load(srv.database),
                    "s", note="autovacuum's work after a bulk load; it was off for the stale-statistics drain")  # fmt: skip

            if "reads" in parts and base is not None:
                cpu, note = await idle_cpu(srv, idle)
                fig(f"idle CPU with {total:,} stored", cpu, "% of a core", IDLE_CPU_FLOOR,
                    note=f"{note}; {base.idle_cpu:.2f} % with {SMALL_JOBS + SMALL_BACKLOG:,} stored")  # fmt: skip
                for title, ms in (await ui_reads(client)).items():
                    small_title = next((t for t in base.reads if t.split(" (")[0] == title.split(" (")[0]), title)
                    floor = DRY_RUN_FLOOR if title.startswith("bulk") else LIST_P95_FLOOR
                    fig(title, ms, "ms", floor, note=beside(ms, base.reads.get(small_title, 0.0)))

            if "follow" in parts and base is not None:
                f = await follower_lag(client)
                spread = [x - f.from_ts[0] for x in f.from_ts]
                title = f"follower lag p99, commit -> follower, one {FOLLOW_BATCH:,}-job batch"
                if ctx.backend.kind == "sqlite":  # one writer: its commit histogram times the batch's transaction
                    p99, base_p99 = percentile(f.from_commit, 99), percentile(base.follow.from_commit, 99)
                    fig(title, p99, "ms", FOLLOW_P99_FLOOR,
                        note=f"{len(f.from_commit):,} events; commit = ts + the transaction ({f.tx_ms:.0f} ms, "
                             f"{f.commits} commits in the node's histogram); p50 {percentile(f.from_commit, 50):.0f}, "
                             f"max {f.from_commit[-1]:.0f}; {beside(p99, base_p99)}")  # fmt: skip
                else:  # several writer connections: their transactions overlap, the histogram's sum is no commit time
                    figures.append(Figure(NAME, title, None, "ms", None,
                                          "not measured on PostgreSQL: no commit time seen from outside"))  # fmt: skip
                fig("follower: last event - first event of the batch, p99", percentile(spread, 99), "ms",
                    note=f"the feed's own part once the first is out; {percentile([x - base.follow.from_ts[0] for x in base.follow.from_ts], 99):.0f} ms on the small store")  # fmt: skip
                fig("follower lag p99, event ts -> follower", percentile(f.from_ts, 99), "ms",
                    note="ts = the transaction's start: the 10,000 inserts are in it")  # fmt: skip

            if "maintenance" in parts:
                quiet = await steady_load(client, min_seconds=5.0 if quick else 10.0, max_seconds=10.0, db=path)
                mem = srv.memory()
                quiet.rss_mb = mem.rss
                fig("node RSS (start -> end; peak)", mem.rss, "MB",
                    note=f"{rss_start:.0f} -> {mem.rss:.0f}; peak {mem.peak:.0f}")  # fmt: skip
                wal_before = wal_mb(path)
        if "maintenance" in parts:
            figures.extend(await maintenance(ctx, env, path, quiet, wal_before, quick, jobs))
    if figures:
        figures[0].note += f"; load {load_average()}"
    return figures


async def drains(
    ctx: RunContext, client: BenchClient, srv: Server, drain: int, backlog: int,
    fig: Callable[..., None],
) -> None:  # fmt: skip
    """The big backlog's drain beside a small queue's, in alternating turns; events stored per job."""
    stale = ""
    if ctx.backend.kind == "postgres":
        believed, queued = await planner_believes_queued(srv.database)
        stale = f"; planner expected {believed:,} queued of {queued:,} at the first drain"
    # The small drain's queue: `drain` no-ops a turn, submitted through the API, paused.
    seq_small = (await client.health())["last_seq"]
    await client.submit_batch([{"task": json.loads(NOOP), "queue": "small", "delay": 86_400}])
    await client.queue_action("small", "pause")
    # A turn finishes more than `drain`: the jobs claimed before its pause reaches the agent. That
    # was 2,096 more in one quick turn (4,400 jobs/s, ~0.5 s to pause), so a turn may take twice its share.
    small_jobs = (2 * drain + 2 * SLOTS) * TURNS
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


async def maintenance(
    ctx: RunContext, env: dict[str, str], path: Path | None, quiet: Steady, wal_before: float, quick: bool, jobs: int
) -> list[Figure]:
    """Node 2 on the same store, default retention: the steady load while it prunes and archives."""
    figures: list[Figure] = []
    async with node(ctx, env, {}) as (srv, client):
        rss_start = srv.memory().rss
        busy = await steady_load(client, min_seconds=5.0, max_seconds=120.0 if quick else 600.0,
                                 done=lambda: maintenance_done(srv), db=path, stall=ctx.scale.stall_seconds)  # fmt: skip
        finished = maintenance_done(srv)
        ctx.progress(f"maintenance {'done' if finished else 'NOT done'} after {busy.seconds:.0f} s")
        after = await steady_load(client, min_seconds=3.0, max_seconds=3.0, db=path)  # the WAL is reset by writes
        mem = srv.memory()
        log = srv.report.log_path.read_text(errors="replace")
        wal_after = wal_mb(path)
        db_mb = path.stat().st_size / 1e6 if path is not None else 0.0
    pruned = re.search(r"pruned (\d+) events", log)
    archived = re.search(r"archived (\d+) finished jobs", log)
    what = (f"pruning {int(pruned[1]) if pruned else 0:,} of {3 * jobs:,} old events, archiving "
            f"{int(archived[1]) if archived else 0:,} old jobs{'' if finished else ' (NOT finished)'}")  # fmt: skip

    def fig(measure: str, value: float, unit: str, floor: Floor | None = None, note: str = "") -> None:
        figures.append(Figure(NAME, measure, value, unit, floor, note))

    fig("longest claim gap, steady load (baseline)", quiet.longest_claim_gap_ms, "ms", note=quiet.note())
    fig("longest claim gap during maintenance", busy.longest_claim_gap_ms, "ms", STALL_FLOOR,
        note=f"{busy.longest_claim_gap_ms / quiet.longest_claim_gap_ms:.2f}x the baseline; {what}; {busy.note()}")  # fmt: skip
    fig("longest submit, steady load (baseline)", quiet.longest_submit_ms, "ms")
    fig("longest submit during maintenance", busy.longest_submit_ms, "ms", STALL_FLOOR,
        note=f"{busy.longest_submit_ms / quiet.longest_submit_ms:.2f}x the baseline")  # fmt: skip
    # Before = the first node on the same store after the same steady load without maintenance (its
    # SQLite page caches warm, as this node's are): what maintenance adds, not what a warm cache holds.
    fig("node RSS after maintenance / without", mem.rss / quiet.rss_mb, "x", RSS_AFTER_FLOOR,
        note=f"{mem.rss:.0f} MB after, {quiet.rss_mb:.0f} MB without (the first node after the steady "
             f"load); this node {rss_start:.0f} MB at its start, peak {mem.peak:.0f} MB")  # fmt: skip
    if path is not None:
        fig("WAL file: peak during maintenance", busy.wal_peak_mb, "MB",
            note=f"{wal_before:.0f} MB before; {quiet.wal_peak_mb:.0f} MB peak under the steady load alone")  # fmt: skip
        fig("WAL file after maintenance", wal_after, "MB", WAL_FLOOR,
            note=f"database {db_mb:,.0f} MB; {after.jobs:,} jobs submitted after")  # fmt: skip
    return figures


async def events_per_job(client: BenchClient, since: int, queue: str, jobs: int) -> float:
    """Stored events of `queue`'s jobs after `since`, per job."""
    n = 0
    while page := await client.events_page(since, types="job.*", queues=queue):
        n += len(page)
        since = page[-1]["seq"]
    return n / jobs


async def scale_sleepers(ctx: RunContext) -> list[Figure]:
    """10,000 async jobs at once in one agent (bench/remote.py), unless --scale-parts leaves it out."""
    return await sleepers(ctx) if "sleepers" in ctx.scale.scale_parts else []
