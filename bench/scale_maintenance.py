"""The scale scenario's hot path beside maintenance, and its live feed (issue 19), measured from
outside a real node:

- a steady load (a batch of 10 no-op jobs submitted every 50 ms, run by the node's slots): the
  longest submit and the longest gap between two claims (`job.running` events' commit times),
  once with nothing else going on (the baseline) and once while the node prunes millions of old
  events and archives tens of thousands of old finished jobs, which start with the node;
- a WebSocket follower's lag (received - committed) over the events of one 10,000-job batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.report import percentile
from bench.server import Server
from bench.workload import NOOP_TASK, BenchClient, epoch, wait_for_state

STEADY_QUEUE = "steady"
STEADY_BATCH = 10
STEADY_EVERY = 0.05  # seconds between two submits: 200 jobs/s
FOLLOW_QUEUE = "follow"
FOLLOW_BATCH = 10_000
PRUNED = re.compile(r"pruned \d+ events")
ARCHIVED = re.compile(r"archived \d+ finished jobs")


@dataclass
class Steady:
    """What a steady load saw: submits, claims, and the samples taken beside it."""

    seconds: float = 0.0
    jobs: int = 0
    submit_ms: list[float] = field(default_factory=list)
    submit_at: list[float] = field(default_factory=list)  # each submit's start, seconds into the load
    claim_gaps_ms: list[float] = field(default_factory=list)
    claim_gap_at: list[float] = field(default_factory=list)  # each gap's start, seconds into the load
    long_commits: dict[str, int] = field(default_factory=dict)  # store transactions past 0.1/0.25/0.5/1 s
    wal_peak_mb: float = 0.0
    rss_mb: float = 0.0  # the node's after the load (when measured)

    @property
    def longest_submit_ms(self) -> float:
        return max(self.submit_ms, default=float("nan"))

    @property
    def longest_claim_gap_ms(self) -> float:
        return max(self.claim_gaps_ms, default=float("nan"))

    def note(self) -> str:
        s = sorted(self.submit_ms)
        at = [f"{what} at {xs[ms.index(max(ms))]:.1f} s" for what, ms, xs in
              (("longest gap", self.claim_gaps_ms, self.claim_gap_at), ("submit", self.submit_ms, self.submit_at)) if ms]  # fmt: skip
        commits = ", ".join(f"{n} > {le} s" for le, n in self.long_commits.items())
        return (f"{self.jobs:,} jobs in {self.seconds:.1f} s; submit p50 {percentile(s, 50):.1f} ms, "
                f"p99 {percentile(s, 99):.1f} ms; {', '.join(at)}; store transactions {commits or 'none'}")  # fmt: skip


def wal_mb(path: Path | None) -> float:
    """The SQLite WAL file's size now (0 without one)."""
    if path is None:
        return 0.0
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size / 1e6 if wal.exists() else 0.0


def maintenance_done(srv: Server) -> bool:
    """The node's log says both the event prune and the archive round finished."""
    text = srv.report.log_path.read_text(errors="replace")
    return PRUNED.search(text) is not None and ARCHIVED.search(text) is not None


async def steady_load(
    client: BenchClient,
    *,
    min_seconds: float,
    max_seconds: float,
    done: Callable[[], bool] = lambda: True,
    db: Path | None = None,
    stall: float = 60.0,
) -> Steady:
    """Submit STEADY_BATCH no-ops every STEADY_EVERY s for at least `min_seconds`, until `done()`
    (at most `max_seconds`); wait until they all ran; read when each was claimed."""
    out = Steady()
    seq0 = (await client.health())["last_seq"]
    commits0 = _long_commits(await client.metrics_text())
    t_start = time.monotonic()
    wall_start = time.time()
    next_at = t_start
    while True:
        elapsed = time.monotonic() - t_start
        if elapsed >= max_seconds or (elapsed >= min_seconds and done()):
            break
        t0 = time.perf_counter()
        await client.submit_batch([{"task": NOOP_TASK, "queue": STEADY_QUEUE}] * STEADY_BATCH)
        out.submit_ms.append((time.perf_counter() - t0) * 1000)
        out.submit_at.append(elapsed)
        out.jobs += STEADY_BATCH
        out.wal_peak_mb = max(out.wal_peak_mb, wal_mb(db))
        next_at += STEADY_EVERY
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    out.seconds = time.monotonic() - t_start
    commits1 = _long_commits(await client.metrics_text())
    out.long_commits = {le: commits1.get(le, 0) - n for le, n in commits0.items()}
    done_before = 0
    with contextlib.suppress(Exception):
        done_before = (await client.queue_counts(STEADY_QUEUE)).get("succeeded", 0)
    await wait_for_state(client, STEADY_QUEUE, "succeeded", max(done_before, out.jobs), poll=0.2, stall=stall)
    claims: list[float] = []
    since = seq0
    while page := await client.events_page(since, types="job.running", queues=STEADY_QUEUE):
        claims.extend(epoch(e["ts"]) for e in page)
        since = page[-1]["seq"]
    claims.sort()
    out.claim_gaps_ms = [(b - a) * 1000 for a, b in itertools.pairwise(claims)]
    out.claim_gap_at = [a - wall_start for a in claims[:-1]]
    return out


LONG_COMMIT = ("0.1", "0.25", "0.5", "1.0")  # bounds of the node's commit histogram (core/obs/metrics.py)


def _long_commits(metrics: str) -> dict[str, int]:
    """Store transactions longer than each of LONG_COMMIT seconds, from the node's commit histogram."""
    below: dict[str, float] = {}
    count = 0.0
    for line in metrics.splitlines():
        if line.startswith("jobdeck_store_commit_seconds_bucket"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            below[le] = float(line.split()[-1])
        elif line.startswith("jobdeck_store_commit_seconds_count"):
            count = float(line.split()[-1])
    return {le: int(count - below.get(le, count)) for le in LONG_COMMIT}


@dataclass
class Follow:
    """One batch seen by a follower: lags (ms, sorted) from the event's time (its transaction's
    start: the 10,000 inserts are in it) and from the transaction's end (its commit)."""

    from_ts: list[float]
    from_commit: list[float]
    tx_ms: float  # the store transactions' time during the batch (the node's commit histogram)
    commits: int


def _commit_seconds(metrics: str) -> tuple[float, int]:
    """(sum, count) of the node's store commit histogram, from its /metrics text."""
    total, count = 0.0, 0
    for line in metrics.splitlines():
        if line.startswith("jobdeck_store_commit_seconds_sum"):
            total = float(line.split()[-1])
        elif line.startswith("jobdeck_store_commit_seconds_count"):
            count = int(float(line.split()[-1]))
    return total, count


async def follower_lag(client: BenchClient, n: int = FOLLOW_BATCH) -> Follow:
    """A WebSocket follower (core.client: `frames=lines`) of the `job.created` events of one `n`-job
    batch (scheduled for tomorrow: nothing runs them), caught up before the batch is sent. An
    event's `ts` is its transaction's start; the commit is `ts` + the transaction's time, read from
    the node's store-commit histogram (the batch's commit and whatever few others ran beside it)."""
    arrived: list[tuple[float, float]] = []
    ready = asyncio.Event()

    async def follow() -> None:
        start = (await client.health())["last_seq"]
        async for e in client.events(since=start, queues=[FOLLOW_QUEUE], types=["job.created"], control=True):
            if e.get("type") == "stream.caught_up":
                ready.set()
            elif e.get("type") == "job.created":
                arrived.append((time.time(), epoch(e["ts"])))
                if len(arrived) >= n:
                    return

    task = asyncio.create_task(follow())
    try:
        await asyncio.wait_for(ready.wait(), 30)
        sum0, count0 = _commit_seconds(await client.metrics_text())
        await client.submit_batch([{"task": NOOP_TASK, "queue": FOLLOW_QUEUE, "delay": 86_400}] * n)
        await asyncio.wait_for(task, 60)
        sum1, count1 = _commit_seconds(await client.metrics_text())
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    tx = sum1 - sum0
    return Follow(
        sorted((a - t) * 1000 for a, t in arrived),
        sorted((a - t - tx) * 1000 for a, t in arrived),
        tx * 1000,
        count1 - count0,
    )
