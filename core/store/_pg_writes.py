"""The PostgreSQL store's writes of jobs: inserting new ones, applying decided changes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.model import Job, job_summary
from core.store import _pg_sql as sql
from core.store._pg_writer import PgTx
from core.store.base import QUEUE_SETTING_COLUMNS, queue_settings_view
from core.store.base import JobChanges as BaseJobChanges


async def insert_jobs(tx: PgTx, jobs: Sequence[Job], id_sequence: str) -> list[Job]:
    """Insert with fresh ids, creating their queues; return the jobs that went in (a unique
    key may refuse some). One job: one statement. A big batch that no unique key can
    refuse (no idempotency or unique keys, no fire times) goes in by COPY."""
    if not jobs:
        return []
    c = tx.conn
    if len(jobs) == 1:
        job = jobs[0]
        job_id = await c.fetchval(sql.INSERT_ONE_JOB, *sql.job_row(job)[1:], tx.now)
        if job_id is None:
            return []
        job.id = int(job_id)
        made = [job]
    else:
        ids = await c.fetch(sql.NEXT_JOB_IDS, id_sequence, len(jobs))
        for job, row in zip(jobs, ids, strict=True):
            job.id = int(row[0])
        rows = [sql.job_row(j) for j in jobs]
        if len(jobs) >= sql.COPY_FROM and not any(
            j.idempotency_key or j.unique_held or j.fire_time is not None for j in jobs
        ):
            await c.execute(sql.INSERT_QUEUES, sorted({j.queue for j in jobs}), tx.now)
            await c.copy_records_to_table("jobs", records=rows, columns=sql.JOB_COLUMNS)
            tags = [(t, j.id) for j in jobs for t in j.tags]
            if tags:
                await c.execute(sql.INSERT_TAGS, [t for t, _ in tags], [i for _, i in tags])
            made = list(jobs)
        else:
            inserted = {r[0] for r in await c.fetch(sql.INSERT_JOBS, *sql.columns_of(rows, len(rows[0])), tx.now)}
            made = [j for j in jobs if j.id in inserted]
    for j in made:
        tx.emit("job.created", j.id, j.queue, {"job": job_summary(j)})
    fair = sorted({j.queue for j in made if j.fairness_key is not None})
    if fair:  # a job with a fairness key makes its queue rotate between keys (once: then it is fair)
        cols = ", ".join(QUEUE_SETTING_COLUMNS)
        for r in await c.fetch(f"UPDATE queues SET fair = true WHERE name = ANY($1::text[]) AND NOT fair "
                               f"RETURNING name, {cols}", fair):  # fmt: skip
            tx.emit("queue.updated", None, r[0], {"queue": queue_settings_view(r[0], tuple(r[1:]))})
    return made


class JobChanges(BaseJobChanges[PgTx]):
    """Job changes written by `flush` in one statement (arrays unnested, one CTE per part)."""

    def db_value(self, name: str, value: Any) -> Any:
        return sql.db_value(name, value)

    async def flush(self) -> None:
        """Write everything applied so far in one statement (each part a CTE: one round trip)."""
        parts: list[str] = []
        params: list[Any] = []
        for keys, rows in self.updates.items():
            parts.append(sql.update_many("jobs", ("id",), keys, sql.JOB_TYPES, len(params) + 1))
            params += sql.columns_of(rows, len(keys) + 1)
        if self.attempt_inserts:
            parts.append(sql.insert_attempts(len(params) + 1))
            params += sql.columns_of(self.attempt_inserts, 5)
        for keys, rows in self.attempt_updates.items():
            parts.append(sql.update_many("attempts", ("job_id", "attempt"), keys, sql.ATTEMPT_TYPES, len(params) + 1))
            params += sql.columns_of(rows, len(keys) + 2)
        self.clear()
        if len(parts) == 1:
            await self.tx.conn.execute(parts[0], *params)
        elif parts:
            ctes = ", ".join(f"w{i} AS ({p})" for i, p in enumerate(parts))
            await self.tx.conn.execute(f"WITH {ctes} SELECT 1", *params)
