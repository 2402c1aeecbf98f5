"""Where a fire time's lateness goes, in this process: one SQLite store and the engine's firing pass
with a fake clock (no HTTP, no other loop), N `* * * * *` schedules (overlap allow) due at T.

As shipped, the runs are written ahead (core/engine.py _write_ahead): the pass starts
`schedule_lead_seconds` before T on a clock that moves with the wall clock, and a run becomes
claimable at max(its commit, its run_at = T); then one agent claims every run from T on (512 a
claim), and the first and the last run's pick-up are timed from T. The same pick-up is timed for
the runs written at T (lead 0), beside.

The pass is traced per transaction: each batch of `schedule_fire_batch` schedules starts when the
one before it committed, so the k-th batch's runs are made k transactions after T. Its runs become
visible (claimable) when it commits; the HTTP bench (bench/schedules.py) reads the job's created_at,
the start of its transaction. Beside them, in the same run:
- the baseline: 100 schedules the same way;
- the Python share: deciding and building the N runs with no database (what planning ahead could
  still take out of the pass);
- the floor of any write at T: the N runs already written as `scheduled` rows, queued by one UPDATE
  with one event each (the cheapest a fire time can become claimable by writing at T).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from bench.context import RunContext
from bench.report import Figure, Floor, load_average, percentile
from core.bus import LocalBus
from core.config import Settings
from core.engine import Engine
from core.model import Policy
from core.schedule import Schedule, SchedulePolicy
from core.store.base import ClaimRequest
from core.store.schedule_runs import decide_firing
from core.store.sqlite import SQLiteStore

NAME = "schedule-firing"
BASELINE = 100
FLOOR = Floor("<=", 50.0)  # ms, p99 lateness at 10,000 schedules a minute on one node (issue 12)


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class _WallClock:
    """Reads `at` when started, then moves with the wall clock."""

    def __init__(self, at: float) -> None:
        self.at, self.w0 = at, time.perf_counter()

    def __call__(self) -> float:
        return self.at + time.perf_counter() - self.w0


async def _claim_all(store: SQLiteStore, clock: Callable[[], float], n: int, t: float) -> tuple[float, float]:
    """One agent claims until n runs are taken, from T on: the first and the last run's pick-up (ms after T)."""
    taken, first = 0, None
    while taken < n:
        got = await store.claim_jobs(ClaimRequest("bench-agent", 512), clock())
        if got and first is None:
            first = 1000 * (clock() - t)
        taken += len(got)
        if not got:
            await asyncio.sleep(0.001)
    return first or 0.0, 1000 * (clock() - t)


async def _ahead_pass(root: Path, n: int) -> tuple[list[float], float, float, float]:
    """n schedules due at T, their runs written ahead from T - lead: each run's lateness (ms) by
    the time it became claimable (max of its commit and T), the write-ahead pass's length (ms), and
    the first and last run's pick-up after T (ms)."""
    t = (time.time() // 60 + 2) * 60
    lead = Settings().schedule_lead_seconds
    store = SQLiteStore(root / "jobdeck.db", Policy(), on_commit=lambda events: None)
    await store.open()
    try:
        for i in range(0, n, 500):
            await asyncio.gather(*(store.create_schedule(_every_minute(k, t)) for k in range(i, min(i + 500, n))))
        clock = _WallClock(t - lead)
        engine = Engine(store, LocalBus(), Settings(data_dir=root), clock=clock)
        claimable: list[float] = []
        fire = store.fire_schedules

        async def traced(batch):  # type: ignore[no-untyped-def]
            out = await fire(batch)
            committed = clock()
            claimable.extend(1000 * max(0.0, committed - j.run_at) for r in out if r is not None for j in r.jobs)
            return out

        store.fire_schedules = traced  # type: ignore[method-assign]
        p0 = clock()
        await engine._write_ahead()
        pass_ms = 1000 * (clock() - p0)
        await engine._fire_due_schedules()  # nothing is left due
        assert len(claimable) == n, (len(claimable), n)
        await asyncio.sleep(max(0.0, t - clock()))
        first, last = await _claim_all(store, clock, n, t)
    finally:
        await store.close()
    return sorted(claimable), pass_ms, first, last


def _every_minute(i: int, t: float) -> Schedule:
    return Schedule(id=0, name=f"s{i}", kind="cron", cron="* * * * *", interval=None, at=None, timezone="UTC",
                    anchor=t - 600, job={"task": {"kind": "python", "function": "agents.builtin:noop"}, "queue": "q"},
                    paused=False, next_fire_at=t, last_fire_at=None, created_at=t - 600, updated_at=t - 600,
                    policy=SchedulePolicy(overlap="allow"))  # fmt: skip


async def _pass(root: Path, n: int) -> tuple[list[float], list[float], float, float, float]:
    """One firing pass over n schedules due at T, written at T (lead 0), planned ahead as the loop does:
    each run's lateness (ms) by its transaction's start and by its commit, the Python share (ms) of
    deciding and building the runs, (n runs as `scheduled` rows) one set-based queueing of them at T
    (ms), and the last run's pick-up (ms after T) by one agent claiming from when the pass began."""
    t = (time.time() // 60 + 2) * 60
    store = SQLiteStore(root / "jobdeck.db", Policy(), on_commit=lambda events: None)
    await store.open()
    try:
        clock = _Clock(t - 2)
        engine = Engine(store, LocalBus(), Settings(data_dir=root, schedule_lead_seconds=0), clock=clock)
        for i in range(0, n, 500):
            await asyncio.gather(*(store.create_schedule(_every_minute(k, t)) for k in range(i, min(i + 500, n))))
        await engine._prepare_firings(t)  # as the loop does up to 3 s ahead
        firings = [engine._firing(f.schedule, t) for f in list(engine._prepared.values())]  # pops each plan
        c0 = time.perf_counter()
        for f in firings:
            decide_firing(f, [], set())
        python_ms = 1000 * (time.perf_counter() - c0)
        await engine._prepare_firings(t)
        by_start: list[float] = []
        by_commit: list[float] = []
        fire = store.fire_schedules
        w0 = time.perf_counter()  # the pass begins at T: wall time since then is lateness

        async def traced(batch):  # type: ignore[no-untyped-def]
            started = 1000 * (time.perf_counter() - w0)
            out = await fire(batch)
            committed = 1000 * (time.perf_counter() - w0)
            made = sum(len(r.jobs) for r in out if r is not None)
            by_start.extend([started] * made)
            by_commit.extend([committed] * made)
            return out

        store.fire_schedules = traced  # type: ignore[method-assign]
        clock.now = t
        claims = asyncio.ensure_future(_claim_all(store, lambda: t + time.perf_counter() - w0, n, t))
        await engine._fire_due_schedules()
        _, picked_last = await claims
        # the cheapest write at T: the same runs waiting as scheduled rows, queued by one statement
        later = t + 60

        def requeue(tx):  # type: ignore[no-untyped-def]
            tx.conn.execute("UPDATE jobs SET state = 'scheduled', run_at = ?", (later,))

        await store._write(requeue)

        def queue_all(tx):  # type: ignore[no-untyped-def]
            sql = "UPDATE jobs SET state = 'queued', updated_at = ? WHERE state = 'scheduled' AND run_at <= ? "
            rows = tx.conn.execute(sql + "RETURNING id, queue, name", (later, later)).fetchall()
            tx.conn.executemany(
                "INSERT INTO events (ts, type, job_id, queue, body) VALUES (?, 'job.queued', ?, ?, ?)",
                [(later, i, q, orjson.dumps({"job": {"id": i, "name": nm, "queue": q, "state": "queued"}}))
                 for i, q, nm in rows],
            )  # fmt: skip
            return len(rows)

        s0 = time.perf_counter()
        queued = await store._write(queue_all)
        set_ms = 1000 * (time.perf_counter() - s0)
        assert queued == len(by_start) == n, (queued, len(by_start), n)
    finally:
        await store.close()
    return sorted(by_start), sorted(by_commit), python_ms, set_ms, picked_last


async def firing_split(ctx: RunContext) -> list[Figure]:
    """Lateness p50/p99 of one pass by transaction start and by commit, for the baseline and N written
    at T; the Python share; the set-based floor of a write at T; their ratios; then N written ahead:
    lateness by claimability (the floor), the pass's length, the first and last pick-up beside at T's."""
    n = ctx.scale.schedules
    out: list[Figure] = []
    results = {}
    for label, count in (("baseline", min(BASELINE, n)), ("at T", n)):
        with tempfile.TemporaryDirectory(dir=ctx.servers.tmp_root) as d:
            results[label] = await _pass(Path(d), count)
        ctx.progress(f"{label}: {count:,} schedules fired in-process")
    with tempfile.TemporaryDirectory(dir=ctx.servers.tmp_root) as d:
        ahead, pass_ms, first, last = await _ahead_pass(Path(d), n)
    ctx.progress(f"shipped: {n:,} schedules written ahead in-process")
    where = f"in-process, one SQLite store, batches of {Settings().schedule_fire_batch}; load {load_average()}"
    lead = Settings().schedule_lead_seconds
    for p in (50, 99):
        out.append(Figure(NAME, f"shipped ({n:,}, written {lead:g} s ahead): lateness p{p} by claimability",
                          percentile(ahead, p), "ms", FLOOR if p == 99 else None,
                          f"max(commit, run_at) - fire time; {where}"))  # fmt: skip
    out.append(Figure(NAME, f"shipped ({n:,}): the write-ahead pass", pass_ms, "ms", Floor("<", 1000 * lead),
                      "must end before the fire time it writes for (the lead)"))  # fmt: skip
    out.append(Figure(NAME, f"shipped ({n:,}): pick-up of the first run after T", first, "ms", None,
                      "one agent claiming 512 a claim"))  # fmt: skip
    out.append(Figure(NAME, f"shipped ({n:,}): pick-up of the last run after T", last, "ms", None,
                      "one agent claiming 512 a claim"))  # fmt: skip
    out.append(Figure(NAME, f"at T ({n:,}): pick-up of the last run after T", results["at T"][4], "ms", None,
                      "the same agent claiming while the runs are written at T (lead 0)"))  # fmt: skip
    for label, count in (("baseline", min(BASELINE, n)), ("at T", n)):
        start, commit, python_ms, set_ms, _ = results[label]
        for what, values in (("by transaction start", start), ("by commit (claimable)", commit)):
            for p in (50, 99):
                out.append(Figure(NAME, f"{label} ({count:,}): lateness p{p} {what}", percentile(values, p), "ms",
                                  None, where))  # fmt: skip
        out.append(Figure(NAME, f"{label} ({count:,}): Python share (decide and build the runs)", python_ms, "ms",
                          None, "no database: what planning ahead could still move out of the pass"))  # fmt: skip
        out.append(Figure(NAME, f"{label} ({count:,}): one UPDATE queueing them all, with events", set_ms, "ms",
                          None, "the runs written before T as scheduled rows: the cheapest write at T"))  # fmt: skip
    s_commit, b_commit = results["at T"][1], results["baseline"][1]
    out.append(Figure(NAME, "at T / baseline p99 by commit", percentile(s_commit, 99) / percentile(b_commit, 99),
                      "x", None, f"{n:,} vs {min(BASELINE, n)} schedules, same run"))  # fmt: skip
    out.append(Figure(NAME, "shipped last pick-up / at T last pick-up", last / max(results["at T"][4], 0.001), "x",
                      None, "same run, same count: what writing ahead gains an agent"))  # fmt: skip
    return out
