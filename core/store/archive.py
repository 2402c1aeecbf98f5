"""Finished jobs out of the store and back: the reads, purges and restores of core/retention.py,
on both stores (mixed into SQLiteStore and PostgresStore).

A job leaves as one record, `{"job": {...every Job field...}, "attempts": [{...}, ...]}`, the same
on both engines, so an archive written by one restores into the other. A purge deletes only jobs
that are still finished and still past their cutoff: a job retried between the archive's read and
the purge stays (its archived copy is then an old version, which a restore skips: the id exists).

A purge never holds the writer for long: it goes in write operations of its own of about
PURGE_SLICE seconds of work each, so the claims, results and submits queued meanwhile commit in
between. In one transaction, 500 jobs with their attempts, tags and the jobs' 20 indexes held every
other write 30-130 ms at a load of 5. Each DELETE in an operation takes as many jobs as fit in what
is left of its slice at the cost per job the last one measured (Pace): that cost varies tenfold with
the load and the cache, and a fixed chunk of 100 jobs held the writer 40-310 ms at 300,000 stored
jobs (bench scale, a 20 ms op stops only after the chunk that passed it).
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from core.model import Job

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Awaitable, Callable

    from core.store._pg_writer import Conn, PgTx
    from core.store._sqlite_writer import Tx

FINISHED_STATES = ("succeeded", "dead", "cancelled")
ATTEMPT_COLUMNS = ("attempt", "agent", "claimed_at", "started_at", "finished_at", "outcome", "error", "exit_code",
                   "output", "result")  # fmt: skip


@dataclass(frozen=True)
class ArchivedFile:
    """An archive file a batch was appended to, as the store records it (table archive_files)."""

    node: str
    folder: str
    file: str
    day: str
    jobs: int  # records appended by this batch
    bytes: int  # the file's size after it
    first_job: int
    last_job: int

    def row(self, now: float) -> tuple[Any, ...]:
        return (self.node, self.folder, self.file, self.day, self.jobs, self.bytes, self.first_job, self.last_job, now)


PURGE_SLICE = 0.01  # seconds of the writer's time one purge operation takes
PURGE_CHUNK = 100  # jobs per DELETE inside it, at most


class Pace:
    """How many jobs the next DELETE of a purge operation takes: as many as fit in what is left of its
    PURGE_SLICE at the seconds per job the last DELETE took, at most twice the last one's and
    PURGE_CHUNK; one at least. An operation's first DELETE always runs (a purge always moves on)."""

    def __init__(self) -> None:
        self.per_job, self.last = PURGE_SLICE / 10, 10  # a first DELETE of 10 jobs, before anything was measured

    def next(self, began: float, done: int) -> int:
        """Jobs for the next DELETE of an operation that began at `began` (perf_counter) and went through
        `done` jobs; 0 when the slice has no room for one more job."""
        left = PURGE_SLICE - (time.perf_counter() - began)
        n = min(PURGE_CHUNK, 2 * self.last, round(left / self.per_job)) if left > 0 else 0
        return max(n, 1 if done == 0 else 0)

    def took(self, jobs: int, seconds: float) -> None:
        self.last, self.per_job = jobs, max(seconds, 1e-6) / jobs


JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))

FILE_COLUMNS = ("node", "folder", "file", "day", "jobs", "bytes", "first_job", "last_job", "updated_at")


def _file_view(row: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(FILE_COLUMNS, row, strict=True))


@dataclass(frozen=True)
class Cutoffs:
    """Finished jobs older than these times may go: one for every queue, and per-queue exceptions."""

    default: float
    queues: dict[str, float] = field(default_factory=dict)

    @property
    def latest(self) -> float:
        return max([self.default, *self.queues.values()])

    def sql(self, mark: Callable[[Any], str]) -> str:
        """`finished_at < <this job's cutoff>` with `mark(value)` adding a parameter."""
        if not self.queues:
            return f"finished_at < {mark(self.default)}"
        first = f"finished_at < {mark(self.latest)}"  # the index's range; marks in the order they appear
        cases = " ".join(f"WHEN {mark(q)} THEN {mark(t)}" for q, t in sorted(self.queues.items()))
        return f"{first} AND finished_at < CASE queue {cases} ELSE {mark(self.default)} END"


@dataclass(frozen=True, slots=True)
class ArchiveLine:
    """One job's archive record, already encoded (JSON, no newline), with the day it is filed by."""

    id: int
    day: str  # the UTC day of its finish (else of its last update): its archive file's day
    json: bytes


def _day(finished: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(finished))


def lines_of(records: Sequence[dict[str, Any]]) -> list[ArchiveLine]:
    """Archive records as lines (orjson): the store that reads records, not lines (PostgreSQL)."""
    return [ArchiveLine(int(r["job"]["id"]), _day(r["job"]["finished_at"] or r["job"]["updated_at"]),
                        orjson.dumps(r)) for r in records]  # fmt: skip


def record(job: Job, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """A job and its attempts as one archive record. The job's fields as they are, not
    dataclasses.asdict: its deep copy was two thirds of the archive read (24 ms of the GIL per 500
    jobs, taken from the event loop); the record is encoded at once and the job dropped."""
    return {"job": {f: getattr(job, f) for f in JOB_FIELDS}, "attempts": attempts}


def from_record(rec: dict[str, Any]) -> tuple[Job, list[dict[str, Any]]]:
    """An archive record back as a Job and its attempts (KeyError/TypeError if it is not one)."""
    job = Job(**rec["job"])
    job.unique_held = False  # a restored job is finished: it never takes its unique key back
    attempts = [{k: a.get(k) for k in ATTEMPT_COLUMNS} for a in rec.get("attempts") or []]
    return job, attempts


class _Marks:
    """Parameters of one statement: `?` for SQLite, `$n` for PostgreSQL."""

    def __init__(self, numbered: bool) -> None:
        self.numbered = numbered
        self.values: list[Any] = []

    def __call__(self, value: Any) -> str:
        self.values.append(value)
        if not self.numbered:
            return "?"
        cast = {float: "::float8", int: "::float8", str: "::text"}.get(type(value), "")
        return f"${len(self.values)}{cast}"


_FINISHED = "state IN ('succeeded', 'dead', 'cancelled')"


def _sql_json(column: str, kind: str) -> str:
    """SQLite: a column's value as the JSON the record (orjson of the Python value) has. A REAL is
    written with 17 digits: json_object's own 15 lose the microseconds of a Unix time."""
    if kind == "float":
        return f"iif({column} IS NULL, NULL, json(printf('%!.17g', {column})))"
    if kind == "bool":
        return f"json(iif({column}, 'true', 'false'))"
    if kind == "json":
        return f"json({column})"
    if kind == "labels":
        return f"json(iif({column} = '', '{{}}', jobdeck_labels_json({column})))"
    return column


def _kind(name: str, annotation: str) -> str:
    if name in ("task", "tags", "result"):
        return "json"
    if name == "labels":
        return "labels"
    return {"float": "float", "float | None": "float", "bool": "bool"}.get(annotation, "")


_ATTEMPT_KINDS = {"claimed_at": "float", "started_at": "float", "finished_at": "float", "result": "json"}
# One archive line per job, built by SQLite (in its C code, off the GIL) instead of a Job, a dict and
# orjson per job in Python: that was 8.7 ms of the GIL per batch of 500 for the read plus 3.1 ms for
# the encoding in the archive's thread, time the node's event loop waited for. The attempts in
# attempt order: the subquery's order (json_group_array keeps the order rows come in).
_SQLITE_LINE = (
    "json_object('job', json_object("
    + ", ".join(f"'{f.name}', {_sql_json(f.name, _kind(f.name, str(f.type)))}" for f in dataclasses.fields(Job))
    + "), 'attempts', json((SELECT json_group_array(json(a)) FROM (SELECT json_object("
    + ", ".join(f"'{c}', {_sql_json(c, _ATTEMPT_KINDS.get(c, ''))}" for c in ATTEMPT_COLUMNS)
    + ") AS a FROM attempts WHERE attempts.job_id = jobs.id ORDER BY attempt))))"
)


def _labels_json(text: str) -> str:
    from core.model import labels_from_text

    return orjson.dumps(labels_from_text(text)).decode()


async def _in_slices(write: Callable[[Sequence[int], Sequence[ArchivedFile]], Awaitable[tuple[int, int]]],
                     ids: Sequence[int], files: Sequence[ArchivedFile]) -> int:  # fmt: skip
    """Run a purge as write operations of one slice each, one after the other (each waits for the
    last one's commit, so what others queued meanwhile goes first): `write(ids, files)` deletes a
    prefix of `ids` and answers (ids it went through, jobs deleted). The files go with the first."""
    gone, at, appended = 0, 0, files
    while True:
        done, deleted = await write(ids[at:], appended)
        gone, at, appended = gone + deleted, at + done, ()
        if at >= len(ids):
            return gone


class SQLiteArchive:
    """Archive reads, purges and restores on the SQLite store."""

    _write: Callable[[Callable[[Tx], Any]], asyncio.Future[Any]]
    _read: Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]

    async def archivable_jobs(self, cutoffs: Cutoffs, limit: int) -> list[dict[str, Any]]:
        """Up to `limit` finished jobs past their cutoff, oldest first, as archive records."""
        from core.store.sqlite import _SELECT_JOB, _job, _loads

        marks = _Marks(False)
        where = f"{_FINISHED} AND {cutoffs.sql(marks)}"
        # Named: SQLite's planner took jobs_state and sorted every finished job for each batch of 500
        # (900,000 steps at 200,000 jobs); the partial index on finished_at reads them oldest first.
        sql = f"{_SELECT_JOB} INDEXED BY jobs_finished WHERE {where} ORDER BY finished_at LIMIT {int(limit)}"

        def q(c: sqlite3.Connection) -> list[dict[str, Any]]:
            jobs = [_job(r) for r in c.execute(sql, marks.values)]
            if not jobs:
                return []
            ids = [j.id for j in jobs]
            by_job: dict[int, list[dict[str, Any]]] = {i: [] for i in ids}
            rows = c.execute(f"SELECT job_id, {', '.join(ATTEMPT_COLUMNS)} FROM attempts WHERE job_id IN "
                             f"({', '.join('?' * len(ids))}) ORDER BY job_id, attempt", ids)  # fmt: skip
            for r in rows:
                by_job[r[0]].append(dict(zip(ATTEMPT_COLUMNS, (*r[1:-1], _loads(r[-1])), strict=True)))
            return [record(j, by_job[j.id]) for j in jobs]

        return await self._read(q)  # type: ignore[no-any-return]

    async def archivable_lines(self, cutoffs: Cutoffs, limit: int) -> list[ArchiveLine]:
        """archivable_jobs as archive lines, encoded by SQLite: the same records (a test compares
        them) for a fraction of the GIL."""
        marks = _Marks(False)
        sql = (f"SELECT id, strftime('%Y-%m-%d', coalesce(finished_at, updated_at), 'unixepoch'), {_SQLITE_LINE} "
               f"FROM jobs INDEXED BY jobs_finished WHERE {_FINISHED} AND {cutoffs.sql(marks)} "
               f"ORDER BY finished_at LIMIT {int(limit)}")  # fmt: skip

        def q(c: sqlite3.Connection) -> list[ArchiveLine]:
            c.create_function("jobdeck_labels_json", 1, _labels_json, deterministic=True)
            return [ArchiveLine(i, day, line.encode()) for i, day, line in c.execute(sql, marks.values)]

        return await self._read(q)  # type: ignore[no-any-return]

    async def purge_jobs(self, ids: Sequence[int], cutoffs: Cutoffs, files: Sequence[ArchivedFile] = ()) -> int:
        """Delete these jobs with their attempts and tags, if still finished and past their cutoff, in
        write operations of about PURGE_SLICE each; the archive files they were appended to are
        recorded in the first (before any of them is gone)."""
        if not ids and not files:
            return 0
        marks = _Marks(False)
        cond = cutoffs.sql(marks)
        pace = Pace()

        def op(tx: Tx, todo: Sequence[int], appended: Sequence[ArchivedFile]) -> tuple[int, int]:
            c = tx.conn
            c.executemany(
                f"INSERT INTO archive_files ({', '.join(FILE_COLUMNS)}) VALUES ({', '.join('?' * len(FILE_COLUMNS))}) "
                "ON CONFLICT (node, folder, file) DO UPDATE SET jobs = jobs + excluded.jobs, bytes = excluded.bytes, "
                "first_job = min(first_job, excluded.first_job), last_job = max(last_job, excluded.last_job), "
                "updated_at = excluded.updated_at",
                [f.row(tx.now) for f in appended],
            )
            began, done, gone = time.perf_counter(), 0, 0
            # after its first DELETE, the operation stops as soon as another write waits: a submit or a
            # claim queued behind it waits one DELETE, not the rest of the slice
            while done < len(todo) and not (done and tx.others_wait()) and (n := pace.next(began, done)):
                chunk = todo[done : done + n]
                t0 = time.perf_counter()
                id_list = ", ".join(str(int(i)) for i in chunk)
                rows = c.execute(f"DELETE FROM jobs WHERE id IN ({id_list}) AND {_FINISHED} AND {cond} "
                                 "RETURNING id, tags", marks.values).fetchall()  # fmt: skip
                if rows:
                    deleted = ", ".join(str(r[0]) for r in rows)
                    c.execute(f"DELETE FROM attempts WHERE job_id IN ({deleted})")
                    # By key (tag, job_id): job_tags has no index on job_id alone, and a DELETE by job_id
                    # read all of it inside the writer (1.4 s per batch at a million jobs: every write waited).
                    pairs = [(str(t), r[0]) for r in rows for t in orjson.loads(r[1] or "[]")]
                    c.executemany("DELETE FROM job_tags WHERE tag = ? AND job_id = ?", pairs)
                pace.took(len(chunk), time.perf_counter() - t0)
                done += len(chunk)
                gone += len(rows)
            return done, gone

        return await _in_slices(lambda todo, appended: self._write(lambda tx: op(tx, todo, appended)), ids, files)

    async def archive_files(self) -> list[dict[str, Any]]:
        """Every node's archive files as recorded, newest day first."""
        sql = f"SELECT {', '.join(FILE_COLUMNS)} FROM archive_files ORDER BY day DESC, node, folder"
        return await self._read(lambda c: [_file_view(r) for r in c.execute(sql)])  # type: ignore[no-any-return]

    async def restore_jobs(self, records: Sequence[dict[str, Any]]) -> int:
        """Put archived jobs back with their ids; a job whose id is in the store is skipped."""
        from core.store.sqlite import _db_value, insert_job_rows

        parsed = [from_record(r) for r in records]

        def op(tx: Tx) -> int:
            c = tx.conn
            taken: set[int] = set()
            todo: list[tuple[Job, list[dict[str, Any]]]] = []
            for job, attempts in parsed:
                if job.id in taken or c.execute("SELECT 1 FROM jobs WHERE id = ?", (job.id,)).fetchone() is not None:
                    continue
                taken.add(job.id)
                todo.append((job, attempts))
            insert_job_rows(c, [job for job, _ in todo])
            for job, attempts in todo:
                c.executemany("INSERT OR IGNORE INTO job_tags (tag, job_id) VALUES (?, ?)",
                              [(t, job.id) for t in job.tags])  # fmt: skip
                c.execute("INSERT OR IGNORE INTO queues (name, created_at, updated_at) VALUES (?, ?, ?)",
                          (job.queue, tx.now, tx.now))  # fmt: skip
                c.executemany(
                    f"INSERT OR IGNORE INTO attempts (job_id, {', '.join(ATTEMPT_COLUMNS)}) "
                    f"VALUES ({', '.join('?' * (len(ATTEMPT_COLUMNS) + 1))})",
                    [(job.id, *(_db_value(k, a[k]) if k == "result" else a[k] for k in ATTEMPT_COLUMNS))
                     for a in attempts],
                )  # fmt: skip
            if todo:
                tx.emit("archive.restored", None, None, {"jobs": len(todo)})
            return len(todo)

        return await self._write(op)  # type: ignore[no-any-return]


class PostgresArchive:
    """Archive reads, purges and restores on the PostgreSQL store."""

    _write: Callable[[Callable[[PgTx], Awaitable[Any]]], asyncio.Future[Any]]
    _read: Callable[[Callable[[Conn], Awaitable[Any]]], Awaitable[Any]]

    async def archivable_jobs(self, cutoffs: Cutoffs, limit: int) -> list[dict[str, Any]]:
        """Up to `limit` finished jobs past their cutoff, oldest first, as archive records."""
        from core.store import _pg_sql as sql

        marks = _Marks(True)
        query = f"{sql.SELECT_JOB} WHERE {_FINISHED} AND {cutoffs.sql(marks)} ORDER BY finished_at LIMIT {int(limit)}"

        async def q(c: Conn) -> list[dict[str, Any]]:
            jobs = sql.to_jobs(await c.fetch(query, *marks.values))
            if not jobs:
                return []
            by_job: dict[int, list[dict[str, Any]]] = {j.id: [] for j in jobs}
            rows = await c.fetch(f"SELECT job_id, {', '.join(ATTEMPT_COLUMNS)} FROM attempts "
                                 "WHERE job_id = ANY($1::bigint[]) ORDER BY job_id, attempt", list(by_job))  # fmt: skip
            for r in rows:
                by_job[r[0]].append(dict(zip(ATTEMPT_COLUMNS, (*list(r)[1:-1], sql.loads(r[-1])), strict=True)))
            return [record(j, by_job[j.id]) for j in jobs]

        return await self._read(q)  # type: ignore[no-any-return]

    async def archivable_lines(self, cutoffs: Cutoffs, limit: int) -> list[ArchiveLine]:
        """archivable_jobs as archive lines (encoded here: the read is asyncpg's, on the event loop)."""
        return lines_of(await self.archivable_jobs(cutoffs, limit))

    async def purge_jobs(self, ids: Sequence[int], cutoffs: Cutoffs, files: Sequence[ArchivedFile] = ()) -> int:
        """Delete these jobs with their attempts and tags, if still finished and past their cutoff, in
        write operations of about PURGE_SLICE each, skipping a job another transaction has locked (it
        stays for the next round); the archive files they were appended to are recorded in the first."""
        if not ids and not files:
            return 0
        marks = _Marks(True)
        id_mark = marks([0])  # $1: the chunk's ids, filled in per statement
        cond = cutoffs.sql(marks)
        pace = Pace()
        delete = (f"DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE id = ANY({id_mark}::bigint[]) AND "
                  f"{_FINISHED} AND {cond} FOR UPDATE SKIP LOCKED) RETURNING id, tags::text")  # fmt: skip

        async def op(tx: PgTx, todo: Sequence[int], appended: Sequence[ArchivedFile]) -> tuple[int, int]:
            c = tx.conn
            if appended:
                marks_ = ", ".join(f"${i}" for i in range(1, len(FILE_COLUMNS) + 1))
                await c.executemany(
                    f"INSERT INTO archive_files ({', '.join(FILE_COLUMNS)}) VALUES ({marks_}) ON CONFLICT "
                    "(node, folder, file) DO UPDATE SET jobs = archive_files.jobs + excluded.jobs, "
                    "bytes = excluded.bytes, first_job = LEAST(archive_files.first_job, excluded.first_job), "
                    "last_job = GREATEST(archive_files.last_job, excluded.last_job), updated_at = excluded.updated_at",
                    [f.row(tx.now) for f in appended],
                )
            began, done, gone = time.perf_counter(), 0, 0
            while done < len(todo) and (n := pace.next(began, done)):
                chunk = [int(i) for i in todo[done : done + n]]
                t0 = time.perf_counter()
                rows = await c.fetch(delete, chunk, *marks.values[1:])
                deleted = [r[0] for r in rows]
                if deleted:
                    await c.execute("DELETE FROM attempts WHERE job_id = ANY($1::bigint[])", deleted)
                    # By key (tag, job_id): job_tags has no index on job_id alone (a DELETE by it reads it all)
                    pairs = [(str(t), r[0]) for r in rows for t in orjson.loads(r[1] or "[]")]
                    await c.execute("DELETE FROM job_tags t USING unnest($1::text[], $2::bigint[]) AS d(tag, job_id) "
                                    "WHERE t.tag = d.tag AND t.job_id = d.job_id",
                                    [p[0] for p in pairs], [p[1] for p in pairs])  # fmt: skip
                pace.took(len(chunk), time.perf_counter() - t0)
                done += len(chunk)
                gone += len(deleted)
            return done, gone

        return await _in_slices(lambda todo, appended: self._write(lambda tx: op(tx, todo, appended)), ids, files)

    async def archive_files(self) -> list[dict[str, Any]]:
        """Every node's archive files as recorded, newest day first."""
        sql = f"SELECT {', '.join(FILE_COLUMNS)} FROM archive_files ORDER BY day DESC, node, folder"

        async def q(c: Conn) -> list[dict[str, Any]]:
            return [_file_view(tuple(r)) for r in await c.fetch(sql)]

        return await self._read(q)  # type: ignore[no-any-return]

    async def restore_jobs(self, records: Sequence[dict[str, Any]]) -> int:
        """Put archived jobs back with their ids; a job whose id is in the store is skipped."""
        import orjson

        from core.store import _pg_sql as sql

        parsed = [from_record(r) for r in records]
        cols = ", ".join(sql.JOB_COLUMNS)
        insert = (f"INSERT INTO jobs ({cols}) VALUES ({', '.join(f'${i}' for i in range(1, len(sql.JOB_COLUMNS) + 1))}) "
                  "ON CONFLICT DO NOTHING RETURNING id")  # fmt: skip
        attempt_sql = (f"INSERT INTO attempts (job_id, {', '.join(ATTEMPT_COLUMNS)}) VALUES "
                       f"({', '.join(f'${i}' for i in range(1, len(ATTEMPT_COLUMNS) + 2))}) ON CONFLICT DO NOTHING")  # fmt: skip

        async def op(tx: PgTx) -> int:
            c = tx.conn
            made = 0
            for job, attempts in parsed:
                if await c.fetchval(insert, *sql.job_row(job)) is None:
                    continue
                await c.execute(sql.INSERT_QUEUES, [job.queue], tx.now)
                if job.tags:
                    await c.execute(sql.INSERT_TAGS, list(job.tags), [job.id] * len(job.tags))
                for a in attempts:
                    result = None if a["result"] is None else orjson.dumps(a["result"]).decode()
                    await c.execute(attempt_sql, job.id, *(result if k == "result" else a[k] for k in ATTEMPT_COLUMNS))
                made += 1
            if made:
                tx.emit("archive.restored", None, None, {"jobs": made})
            return made

        return await self._write(op)  # type: ignore[no-any-return]
