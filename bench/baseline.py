"""Same-run baseline for batch submit: how fast SQLite itself stores the rows, with no server around it.

Run in this process on the same file system as the servers' data dirs, right after the
HTTP figure, so a noisy neighbour or a slow disk moves both.
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from core.model import Policy, build_job
from core.store.sqlite import JOB_COLUMNS
from core.store.sqlite import _job_row as sqlite_job_row

NOOP_TASK = {"kind": "python", "function": "agents.builtin:noop", "args": [], "kwargs": {}}


def _job_row(job_id: int, now: float) -> tuple[Any, ...]:
    """The row the server stores for a no-op job, built by the server's own code (so it stays as
    wide as the jobs table, and fills each column a migration adds)."""
    job = build_job({"task": NOOP_TASK, "queue": "bench"}, now, Policy())
    job.id = job_id
    return sqlite_job_row(job)


def _event_row(seq: int, job_id: int, now: float) -> tuple[Any, ...]:
    """An outbox row like the `job.created` event the server writes with every job."""
    summary = dict(zip(JOB_COLUMNS[:12], _job_row(job_id, now)[:12], strict=True))
    event = {"seq": seq, "ts": "2026-01-01T00:00:00+00:00", "type": "job.created", "job_id": job_id, "queue": "bench"}
    body = orjson.dumps({**event, "data": {"job": summary}})
    return (seq, now, "job.created", job_id, "bench", body)


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")  # what the server uses: every commit is fsynced
    return conn


def sqlite_insert_rate(directory: Path, rows: int, per_commit: int, *, jobdeck_schema: bool) -> float:
    """Rows per second of `executemany` inserts, `per_commit` rows per transaction.

    Plain (`jobdeck_schema=False`): one table as wide as `jobs`, no index, nothing else: the
    ceiling of the disk and SQLite. With the JobDeck schema (its migrations, every index) and
    one outbox event per job: the least work any server on this schema must do per job.
    """
    with tempfile.TemporaryDirectory(prefix="sqlite-baseline-", dir=directory) as tmp:
        conn = _connect(Path(tmp) / "baseline.db")
        if jobdeck_schema:
            from core.store._sqlite_writer import migrate  # the server's own schema, indexes included

            migrate(conn)
        else:
            conn.execute(f"CREATE TABLE jobs ({', '.join(JOB_COLUMNS)})")
        insert_job = f"INSERT INTO jobs ({', '.join(JOB_COLUMNS)}) VALUES ({', '.join('?' * len(JOB_COLUMNS))})"
        insert_event = "INSERT INTO events (seq, ts, type, job_id, queue, body) VALUES (?, ?, ?, ?, ?, ?)"
        now = time.time()
        elapsed = 0.0
        for start in range(1, rows + 1, per_commit):
            ids = range(start, min(start + per_commit, rows + 1))
            # Rows are built outside the clock: this measures SQLite, not Python building tuples.
            jobs = [_job_row(i, now) for i in ids]
            events = [_event_row(i, i, now) for i in ids] if jobdeck_schema else []
            t = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(insert_job, jobs)
            if events:
                conn.executemany(insert_event, events)
            conn.execute("COMMIT")
            elapsed += time.perf_counter() - t
        conn.close()
    return rows / elapsed


def sqlite_single_commit_rate(directory: Path, seconds: float) -> tuple[float, float]:
    """Durable one-row commits per second on the data disk, one after another (WAL,
    synchronous=FULL, the JobDeck schema: one job and its event a commit), and their p50 in ms:
    the ceiling of sequential single submits on SQLite at this moment, whatever the server does."""
    from core.store._sqlite_writer import migrate

    with tempfile.TemporaryDirectory(prefix="sqlite-single-", dir=directory) as tmp:
        conn = _connect(Path(tmp) / "single.db")
        migrate(conn)
        insert_job = f"INSERT INTO jobs ({', '.join(JOB_COLUMNS)}) VALUES ({', '.join('?' * len(JOB_COLUMNS))})"
        insert_event = "INSERT INTO events (seq, ts, type, job_id, queue, body) VALUES (?, ?, ?, ?, ?, ?)"
        times: list[float] = []
        now = time.time()
        end = time.perf_counter() + seconds
        i = 0
        while time.perf_counter() < end:
            i += 1
            t = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(insert_job, _job_row(i, now))
            conn.execute(insert_event, _event_row(i, i, now))
            conn.execute("COMMIT")
            times.append(time.perf_counter() - t)
        conn.close()
    times.sort()
    return len(times) / sum(times), 1000 * times[len(times) // 2]
