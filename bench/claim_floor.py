"""Same-run floor of a drain: how fast the store itself claims and completes jobs in batches, in
plain SQL on JobDeck's schema (every index and trigger), with no server, agent or event around it:
SQLite (a file beside the nodes' data dirs) and PostgreSQL (a fresh schema of the same database).

Each batch is two durable transactions (WAL, synchronous=FULL), as a drain needs at least: one
claim (the `batch` first queued jobs in claim order -> running, with a lease) and one that
records their results (running -> succeeded). A drain through JobDeck at the same claim batch
can at best approach this; its ratio to it is the figure that does not depend on the machine's load.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.baseline import NOOP_TASK, _connect, _job_row
from core.model import Policy, build_job
from core.store.sqlite import JOB_COLUMNS

CLAIM = (
    "UPDATE jobs SET state = 'running', agent = 'floor', attempt = attempt + 1, lease_expires_at = ?, "
    "started_at = ? WHERE id IN (SELECT id FROM jobs INDEXED BY jobs_claim_queue WHERE state = 'queued' "
    "AND queue = 'bench' ORDER BY sort_key, id LIMIT ?) RETURNING id"
)
COMPLETE = "UPDATE jobs SET state = 'succeeded', finished_at = ?, lease_expires_at = NULL WHERE id = ?"


def sqlite_drain_floor(directory: Path, jobs: int, batch: int) -> float:
    """Jobs per second claimed and completed, `batch` jobs a claim transaction and a result one."""
    from core.store._sqlite_writer import migrate  # the server's own schema, indexes included

    with tempfile.TemporaryDirectory(prefix="sqlite-drain-floor-", dir=directory) as tmp:
        conn = _connect(Path(tmp) / "floor.db")
        migrate(conn)
        now = time.time()
        insert = f"INSERT INTO jobs ({', '.join(JOB_COLUMNS)}) VALUES ({', '.join('?' * len(JOB_COLUMNS))})"
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(insert, [_job_row(i, now + i * 1e-6) for i in range(1, jobs + 1)])
        conn.execute("COMMIT")
        done = 0
        t = time.perf_counter()
        while done < jobs:
            conn.execute("BEGIN IMMEDIATE")
            ids = [r[0] for r in conn.execute(CLAIM, (time.time() + 30, time.time(), batch))]
            conn.execute("COMMIT")
            if not ids:
                raise RuntimeError(f"the floor's claim found no queued job after {done} of {jobs}")
            conn.execute("BEGIN IMMEDIATE")
            finished = time.time()
            conn.executemany(COMPLETE, [(finished, i) for i in ids])
            conn.execute("COMMIT")
            done += len(ids)
        elapsed = time.perf_counter() - t
        conn.close()
    return jobs / elapsed


PG_CLAIM = (
    "UPDATE jobs SET state = 'running', agent = 'floor', attempt = attempt + 1, lease_expires_at = $1, "
    "started_at = $2 WHERE id IN (SELECT id FROM jobs WHERE state = 'queued' AND queue = 'bench' "
    "ORDER BY queue, sort_key, id LIMIT $3 FOR UPDATE SKIP LOCKED) RETURNING id"
)
PG_COMPLETE = (
    "UPDATE jobs SET state = 'succeeded', finished_at = $1, lease_expires_at = NULL WHERE id = ANY($2::bigint[])"
)


async def pg_drain_floor(database_url: str, jobs: int, batch: int) -> float:
    """The same floor on PostgreSQL: a fresh schema with JobDeck's migrations, `jobs` no-op rows
    (COPY), then a claim transaction (FOR UPDATE SKIP LOCKED, as the server's) and a result one
    per `batch` jobs, over one connection from this process (one network hop a statement)."""
    import asyncpg

    from core.store import _pg_sql as sql
    from core.store._pg_writer import migrate

    schema = f"bench_pg_drain_floor_{os.getpid()}"
    admin = await asyncpg.connect(database_url)
    try:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE; CREATE SCHEMA "{schema}"')
        conn: Any = await asyncpg.connect(database_url, server_settings={"search_path": schema})
        try:
            await migrate(conn)
            now = time.time()
            rows = []
            for i in range(1, jobs + 1):
                job = build_job({"task": NOOP_TASK, "queue": "bench"}, now + i * 1e-6, Policy())
                job.id = i
                rows.append(sql.job_row(job))
            await conn.execute(sql.INSERT_QUEUES, ["bench"], now)
            await conn.copy_records_to_table("jobs", records=rows, columns=sql.JOB_COLUMNS)
            await conn.execute("ANALYZE jobs")
            done = 0
            t = time.perf_counter()
            while done < jobs:
                async with conn.transaction():
                    ids = [r[0] for r in await conn.fetch(PG_CLAIM, time.time() + 30, time.time(), batch)]
                if not ids:
                    raise RuntimeError(f"the floor's claim found no queued job after {done} of {jobs}")
                async with conn.transaction():
                    await conn.execute(PG_COMPLETE, time.time(), ids)
                done += len(ids)
            elapsed = time.perf_counter() - t
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.close()
    return jobs / elapsed
