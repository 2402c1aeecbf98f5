"""The embedded store writes a claim's jobs in one UPDATE: the jobs of a claim share every value but
their id (one agent, one lease), and an executemany ran a statement per job (with the count
trigger's statement journal each), the largest part of a drain's single writer."""

from __future__ import annotations

import functools
import sqlite3
import time
from pathlib import Path
from typing import Any

from core.model import Change, Policy, build_job
from core.store.base import ClaimRequest
from core.store.sqlite import SQLiteStore, _Applier

POLICY = Policy(aging_seconds_per_priority=60.0, lease_seconds=30.0)
NOOP = {"kind": "python", "function": "agents.builtin:noop"}


async def _store(tmp_path: Path) -> SQLiteStore:
    store = SQLiteStore(tmp_path / "jobdeck.db", POLICY, on_commit=lambda events: None)
    await store.open()
    return store


async def test_a_claim_of_300_jobs_is_one_update_and_leaves_each_job_leased(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    try:
        now = time.time()
        keyed = [
            build_job({"task": NOOP, "queue": "fair", "fairness_key": f"k{i % 7}"}, now, POLICY) for i in range(150)
        ]
        plain = [build_job({"task": NOOP, "queue": "plain"}, now, POLICY) for _ in range(150)]
        await store.submit_jobs(keyed + plain)
        updates: list[str] = []

        def trace(tx: Any) -> None:
            tx.conn.set_trace_callback(lambda s: updates.append(s) if s.startswith("UPDATE jobs SET") else None)

        await store._write(trace)
        claimed = await store.claim_jobs(ClaimRequest(agent="a1", limit=300), now + 1)
        await store._write(lambda tx: tx.conn.set_trace_callback(None))
    finally:
        await store.close()
    assert len(claimed) == 300
    # (SQLite traces a statement again for each trigger program it runs: count the statements, not the traces)
    assert len(set(updates)) == 1, f"expected one UPDATE of the claimed jobs, got {len(set(updates))}: {updates[:2]}"
    conn = sqlite3.connect(tmp_path / "jobdeck.db")
    try:
        rows = conn.execute("SELECT state, attempt, agent, lease_expires_at, count(*) FROM jobs GROUP BY 1, 2, 3, 4")
        assert rows.fetchall() == [("running", 1, "a1", now + 1 + POLICY.lease_seconds, 300)]
        counts = dict(((q, s), n) for q, s, n in conn.execute("SELECT queue, state, n FROM job_counts WHERE n <> 0"))
        assert counts == {("fair", "running"): 150, ("plain", "running"): 150}, counts
        assert conn.execute("SELECT count(*) FROM attempts WHERE outcome = 'running'").fetchone()[0] == 300
    finally:
        conn.close()


async def test_changes_of_one_job_twice_in_a_flush_keep_the_last(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    try:
        now = time.time()
        jobs = [build_job({"task": NOOP, "priority": 1}, now, POLICY) for _ in range(3)]
        made = [j for j, _ in await store.submit_jobs(jobs)]
        ids = [j.id for j in made]

        def op(tx: Any) -> None:
            applier = _Applier(tx)
            jobs = {j.id: j for j in made}
            for i in ids:  # every job to 5, then the first back to 7: same columns, the first job twice
                applier.apply(jobs[i], Change({"priority": 5}, "job.priority_changed"))
            applier.apply(jobs[ids[0]], Change({"priority": 7}, "job.priority_changed"))
            applier.flush()

        await store._write(op)
        got = {i: (await store.get_job(i)).priority for i in ids}
    finally:
        await store.close()
    assert got == {ids[0]: 7, ids[1]: 5, ids[2]: 5}, got


async def test_300_results_are_a_few_statements_and_each_job_gets_its_own_values(tmp_path: Path) -> None:
    """Results give each job its own values (times, result): they were an executemany, one statement a
    job (and a release and a take of the GIL each, by the writer thread), and are now an UPDATE over a
    VALUES list per 256 rows, for the jobs, the attempts and the events alike."""
    from core.model import RunResult, decide_finish
    from core.store import _sqlite_writer

    store = await _store(tmp_path)
    try:
        now = time.time()
        await store.submit_jobs([build_job({"task": NOOP, "queue": "q"}, now, POLICY) for _ in range(300)])
        claimed = await store.claim_jobs(ClaimRequest(agent="a1", limit=300), now + 1)
        statements: list[str] = []

        def trace(tx: Any) -> None:
            tx.conn.set_trace_callback(statements.append)

        await store._write(trace)
        ran = {j.id: (now + 2 + j.id / 1000, now + 3 + j.id / 1000) for j in claimed}
        runs = {j.id: RunResult(j.id, 1, "succeeded", output=f"out {j.id}", result={"n": j.id},
                                started_at=ran[j.id][0], finished_at=ran[j.id][1]) for j in claimed}  # fmt: skip
        results = {
            i: functools.partial(lambda r, job: decide_finish(job, r, now + 4, POLICY), r) for i, r in runs.items()
        }
        out = await store.change_jobs(results)
        await store._write(lambda tx: tx.conn.set_trace_callback(None))
    finally:
        await store.close()
    assert all(not isinstance(j, Exception) and j.state == "succeeded" for j in out.values()), out
    # (SQLite traces a statement again for each trigger program it runs: count the statements, not the traces)
    for head in ("UPDATE jobs SET", "UPDATE attempts SET", "INSERT INTO events"):
        made = {s for s in statements if s.startswith(head)}
        assert 1 <= len(made) <= -(-300 // _sqlite_writer.ROWS_PER_STATEMENT), (
            f"{len(made)} statements {head}... for 300 results, want one per {_sqlite_writer.ROWS_PER_STATEMENT}"
        )
    conn = sqlite3.connect(tmp_path / "jobdeck.db")
    try:
        jobs = {i: (s, st, f, r) for i, s, st, f, r in conn.execute(
            "SELECT id, state, started_at, finished_at, result FROM jobs")}  # fmt: skip
        tries = {i: (o, out_, r) for i, o, out_, r in conn.execute(
            "SELECT job_id, outcome, output, result FROM attempts")}  # fmt: skip
        events = conn.execute("SELECT count(*), count(DISTINCT job_id) FROM events WHERE type = 'job.succeeded'")
        assert events.fetchone() == (300, 300)
    finally:
        conn.close()
    for i, (start, end) in ran.items():
        assert jobs[i] == ("succeeded", start, end, f'{{"n":{i}}}'), (i, jobs[i])
        assert tries[i] == ("succeeded", f"out {i}", f'{{"n":{i}}}'), (i, tries[i])
