"""Same-run floor of a drain: how fast SQLite itself claims and completes jobs in batches, in
plain SQL on JobDeck's schema (every index), with no server, agent or event around it.

Each batch is two durable transactions (WAL, synchronous=FULL), as a drain needs at least: one
claim (the `batch` first queued jobs in claim order -> running, with a lease) and one that
records their results (running -> succeeded). A drain through JobDeck at the same claim batch
can at best approach this; its ratio to it is the figure that does not depend on the machine's load.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.baseline import _connect, _job_row
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
