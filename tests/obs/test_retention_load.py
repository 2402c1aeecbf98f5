"""Retention at the issue's size: 100,000 finished jobs older than 30 days, archived and purged by a
node's Retention on its real SQLite store while a steady 200 jobs/s stream runs against the node;
the stream's pick-up p99 while the purge runs stays within 2x of its p99 with no purge (a quiet p99
under 20 ms counts as 20 ms).

The baseline comes from the same minutes: the purge runs in windows of PURGE_WINDOW seconds with
quiet windows of QUIET_WINDOW between them (the purge waits at its next batch), and the stream's jobs
go to queue `during` or `quiet` by window, so a machine that gets busier or quieter meanwhile moves
both figures alike. Jobs submitted in the SETTLE seconds after a purge window count for neither (a
stall's backlog drains then). The stream runs in a process of its own (tests/obs/retention_stream.py),
as a node's clients do. JOBDECK_TEST_RETENTION_RATE lowers its rate on a machine that cannot take 200
submits a second.

What it can tell: a stall comparable to the baseline. At 200 jobs/s on 2 shared cores (load 3-10)
the node itself is near saturation, the quiet p99 is 0.3-2.4 s and the purge stays well inside 2x.
At JOBDECK_TEST_RETENTION_RATE=50 (load 3-4) the quiet p99 is 16-24 ms: this purge passes (32 ms
during, limit 40), the purge of 629d6c4 (asdict records, one transaction per 500 jobs) fails
(78 ms during vs 24 ms quiet), and a writer held 0.3 s per batch fails (363 vs 25 ms)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sqlite3
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from core.client import JobDeckClient
from core.config import load_settings
from core.model import build_job
from core.retention import Archive, Retention
from core.store.archive import ArchiveLine, Cutoffs, record
from core.store.sqlite import SQLiteStore, recount_jobs
from tests.conftest import node_settings, start_node, stop_node
from tests.store.conftest import POLICY

OLD = 100_000
RATE = float(os.environ.get("JOBDECK_TEST_RETENTION_RATE", "200"))  # jobs per second of the steady stream
PURGE_WINDOW = 3.0  # seconds the purge runs, then
QUIET_WINDOW = 1.5  # seconds it waits (after SETTLE)
SETTLE = 0.5
BASE_FLOOR_MS = 20.0  # a quiet p99 below this counts as this: a 2x of 3 ms is noise, not a stall
DAY = 86400.0
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


async def _seed(path: Path, n: int, finished: float) -> None:
    """n finished jobs (one attempt each, with output), straight into the store file before the node
    opens it: job 1 through the store, then copies of it with ids 2..n by one INSERT ... SELECT (and
    job_counts recounted): about 3 s for 100,000, where restoring them all took 25-35 s."""
    store = SQLiteStore(path, POLICY, on_commit=lambda events: None)
    await store.open()
    base = build_job({"name": "old", "queue": "old", "max_attempts": 1, "task": {"kind": "shell", "command": "true"}},
                     finished - 10, POLICY)  # fmt: skip
    job = dataclasses.replace(base, id=1, state="succeeded", attempt=1, started_at=finished - 5, finished_at=finished,
                              updated_at=finished)  # fmt: skip
    attempt = {"attempt": 1, "agent": "a1", "claimed_at": finished - 6, "started_at": finished - 5,
               "finished_at": finished, "outcome": "succeeded", "error": None, "exit_code": 0, "output": "out 1",
               "result": None}  # fmt: skip
    try:
        assert await store.restore_jobs([record(job, [attempt])]) == 1
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    try:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(jobs)") if r[1] != "id"]
        copies = "WITH RECURSIVE k(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM k WHERE i < ?) "
        with conn:
            conn.execute(f"INSERT INTO jobs (id, {', '.join(columns)}) {copies}"
                         f"SELECT i, {', '.join(columns)} FROM k, jobs WHERE jobs.id = 1", (n,))  # fmt: skip
            conn.execute(f"INSERT INTO attempts {copies}SELECT i, attempt, agent, claimed_at, started_at, finished_at, "
                         "outcome, error, exit_code, 'out ' || i, result FROM k, attempts WHERE job_id = 1", (n,))  # fmt: skip
            recount_jobs(conn)
        assert conn.execute("SELECT count(*), max(id) FROM jobs WHERE queue = 'old'").fetchone() == (n, n)
    finally:
        conn.close()


class GatedStore:
    """The node's store, with Retention's read of each batch waiting for the purge window to open."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.open = asyncio.Event()  # set: the purge runs
        self.idle = asyncio.Event()  # set: the purge waits at its next batch (nothing of it in flight)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def archivable_lines(self, cutoffs: Cutoffs, limit: int) -> list[ArchiveLine]:
        self.idle.set()
        await self.open.wait()
        self.idle.clear()
        return await self._store.archivable_lines(cutoffs, limit)  # type: ignore[no-any-return]


async def _pickups_ms(c: JobDeckClient, n: int, sent: dict[str, float]) -> dict[str, list[float]]:
    """Each window's pick-ups (by queue) as the submitter sees them: from sending the submit to the
    job's start. From run_at (the submit's commit) a writer that makes the submits wait would not
    count: a purge holding the writer 0.5 s a batch left that p99 as it was."""
    deadline = time.monotonic() + 120
    while True:
        jobs: list[dict[str, Any]] = []
        cursor = None
        while True:  # a page at a time (at most 1,000); the old jobs are gone, so these are the stream's
            page = await c.list_jobs(state="succeeded", limit=1000, cursor=cursor)
            jobs += page["jobs"]
            if not (cursor := page.get("next_cursor")):
                break
        if len(jobs) >= n:
            break
        assert time.monotonic() < deadline, f"{len(jobs)} of the stream's {n} jobs succeeded within 120 s"
        await asyncio.sleep(0.5)
    at = datetime.fromisoformat
    out: dict[str, list[float]] = {}
    for j in jobs:
        out.setdefault(str(j["queue"]), []).append((at(str(j["started_at"])).timestamp() - sent[str(j["id"])]) * 1000)
    return out


def _p99(values: list[float]) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * 0.99))]


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


async def test_100000_old_jobs_are_archived_and_purged_while_a_steady_stream_keeps_its_pickup(tmp_path: Path) -> None:
    settings = node_settings(tmp_path, job_retention_days=0, local_slots=64)  # the test runs the retention itself
    await _seed(settings.sqlite_path, OLD, time.time() - 40 * DAY)
    node, url, task = await start_node(settings)
    stream = None
    try:
        kept = load_settings(environ={}, data_dir=tmp_path, job_retention_days=30)  # the defaults: batches of 500
        gated = GatedStore(node.store)
        retention = Retention(gated, kept, node.metrics, pickup_behind=node.engine.pickup_behind)  # as the node's
        stream = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.obs.retention_stream", url, str(RATE), str(tmp_path / "sent.json"),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=Path(__file__).parents[2],
        )  # fmt: skip
        assert stream.stdin is not None and stream.stdout is not None

        async def to(queue: str) -> None:
            assert stream is not None and stream.stdin is not None
            stream.stdin.write(f"{queue}\n".encode())
            await stream.stdin.drain()

        await to("warm-up")
        await asyncio.sleep(1.0)
        purge = asyncio.create_task(retention.run_once())
        windows, purging = 0, 0.0
        while not purge.done():  # quiet, purge, settle, quiet, purge, settle, ..., quiet
            await to(f"quiet-{windows}")
            await asyncio.sleep(QUIET_WINDOW)
            await to(f"during-{windows}")
            began = time.monotonic()
            gated.open.set()
            await asyncio.wait([purge], timeout=PURGE_WINDOW)
            gated.open.clear()
            idle = asyncio.ensure_future(gated.idle.wait())  # the batch under way finishes
            await asyncio.wait([purge, idle], return_when=asyncio.FIRST_COMPLETED)
            idle.cancel()
            purging += time.monotonic() - began
            windows += 1
            await to("settle")
            await asyncio.sleep(SETTLE)
        await to(f"quiet-{windows}")
        await asyncio.sleep(QUIET_WINDOW)
        await to("")
        streamed = int((await asyncio.wait_for(stream.stdout.readline(), 120)).split()[1])
        archived, purged = await purge
        sent = orjson.loads((tmp_path / "sent.json").read_bytes())
        async with JobDeckClient(url, timeout=120) as c:
            left = (await c.list_jobs(queue="old", limit=1, count=True))["total"]
            by_window = await _pickups_ms(c, streamed, sent)
        assert (archived, purged, left) == (OLD, OLD, 0), (archived, purged, left)
        files = Archive(tmp_path / "archive").files()
        recorded = await node.store.archive_files()
        assert sum(f["jobs"] for f in recorded) == OLD and {f["file"] for f in recorded} == {f["file"] for f in files}
        quiet = [v for q, vs in by_window.items() if q.startswith("quiet-") for v in vs]
        during = [v for q, vs in by_window.items() if q.startswith("during-") for v in vs]
        q99 = _median([_p99(vs) for q, vs in by_window.items() if q.startswith("quiet-")])
        d99 = _median([_p99(vs) for q, vs in by_window.items() if q.startswith("during-")])
        limit = 2 * max(q99, BASE_FLOOR_MS)
        figures = (f"purge {OLD / purging:,.0f} jobs/s ({purging:.1f} s in {windows} windows); pick-up p99 (median "
                   f"of the windows') {q99:.1f} ms quiet, {d99:.1f} ms during; of all jobs {_p99(quiet):.1f} ms quiet "
                   f"({len(quiet):,} jobs), {_p99(during):.1f} ms during ({len(during):,}); {streamed:,} submitted "
                   f"at {RATE:.0f}/s")  # fmt: skip
        print(figures)
        assert d99 <= limit, (
            f"the purge stalls pick-up: p99 {d99:.1f} ms during, over 2x quiet ({limit:.1f} ms): {figures}"
        )
    finally:
        if stream is not None and stream.returncode is None:
            stream.kill()
            await stream.wait()
        await stop_node(node, task)
