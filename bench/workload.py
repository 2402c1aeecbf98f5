"""The client side every benchmark shares: job specs, batched submits, waiting on counts and events."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Self

from bench.server import BenchError
from core.client import JobDeckClient, Json

NOOP_TASK: Json = {"kind": "python", "function": "agents.builtin:noop"}
SLEEP_FUNCTION = "agents.builtin:sleep"
# States a no-op job must never reach in a benchmark: seeing one means the server is broken.
BAD_STATES = ("failed", "dead")


def noop_job(queue: str, **fields: Any) -> Json:
    """A job spec that runs `agents.builtin:noop` (measures the scheduler, not the work)."""
    return {"task": NOOP_TASK, "queue": queue, **fields}


def sleep_job(queue: str, seconds: float) -> Json:
    """A job spec that runs `agents.builtin:sleep` (an asyncio sleep: a job that holds a slot, not a thread)."""
    return {"task": {"kind": "python", "function": SLEEP_FUNCTION, "args": [seconds]}, "queue": queue}


def epoch(iso: str) -> float:
    """An ISO 8601 time from the API to Unix seconds."""
    return datetime.fromisoformat(iso).timestamp()


def iso(ts: float) -> str:
    """Unix seconds to the ISO 8601 the API accepts."""
    return datetime.fromtimestamp(ts, UTC).isoformat()


class BenchClient(JobDeckClient):
    """The project's client, plus the two reads the benchmarks need that it has no method for."""

    def __init__(self, server: str) -> None:
        # Under load a 10,000-job batch can wait behind others: be patient rather than fail.
        super().__init__(server, timeout=120.0)

    async def __aenter__(self) -> Self:
        return self

    async def queue_counts(self, queue: str) -> dict[str, int]:
        """Jobs of `queue` by state. GET /v1/queues is cheaper for the server than /v1/stats,
        which also counts the last minute's events: a poll must not slow what it measures."""
        for q in await self.queues():
            if q["name"] == queue:
                return dict(q.get("counts") or {})
        return {}

    async def metrics_text(self) -> str:
        """This node's Prometheus series (GET /metrics)."""
        return (await self._http.get("/metrics")).text

    async def events_page(self, since: int, *, types: str, queues: str, limit: int = 1000) -> list[Json]:
        """Stored events after `since` (GET /v1/events)."""
        params = {"since": since, "types": types, "queues": queues, "limit": limit}
        return (await self._call("GET", "/v1/events", params=params))["events"]  # type: ignore[no-any-return]


async def submit_in_batches(client: JobDeckClient, jobs: list[Json], batch_size: int) -> list[float]:
    """POST /v1/jobs/batch for `jobs`, `batch_size` a call, one call after another; seconds per call."""
    durations = []
    for start in range(0, len(jobs), batch_size):
        t = time.perf_counter()
        out = await client.submit_batch(jobs[start : start + batch_size])
        durations.append(time.perf_counter() - t)
        expected = min(batch_size, len(jobs) - start)
        if out["created"] != expected:
            raise BenchError(f"a batch of {expected} jobs created {out['created']}")
    return durations


async def submit_spread(
    clients: Sequence[JobDeckClient], jobs: list[Json], batch_size: int
) -> tuple[float, list[float]]:
    """`submit_in_batches` split across nodes: the batches dealt to `clients` in turn, each client
    sending its share one call after another, the clients at once; (wall seconds, seconds per call)."""
    batches = [jobs[i : i + batch_size] for i in range(0, len(jobs), batch_size)]
    shares = [[job for batch in batches[k :: len(clients)] for job in batch] for k in range(len(clients))]
    t = time.perf_counter()
    calls = await asyncio.gather(
        *(submit_in_batches(c, share, batch_size) for c, share in zip(clients, shares, strict=True))
    )
    return time.perf_counter() - t, [d for durations in calls for d in durations]


async def open_paused_queue(client: JobDeckClient, queue: str) -> None:
    """Create `queue` paused (a pause creates a queue no job named yet), with no job of it."""
    await client.queue_action(queue, "pause")


async def wait_for_state(
    client: BenchClient, queue: str, state: str, n: int, *, poll: float, stall: float
) -> dict[str, int]:
    """Poll until `n` jobs of `queue` are in `state`; raise BenchError if the counts stop moving."""
    last: dict[str, int] = {}
    moved = time.monotonic()
    while True:
        counts = await client.queue_counts(queue)
        if counts.get(state, 0) >= n:
            return counts
        if any(counts.get(s) for s in BAD_STATES):
            raise BenchError(
                f"no-op jobs of queue {queue!r} failed: {counts}; see GET /v1/jobs?queue={queue}&state=failed,dead"
            )
        if counts != last:
            last, moved = counts, time.monotonic()
        elif time.monotonic() - moved > stall:
            raise BenchError(f"jobs of queue {queue!r} made no progress for {stall:.0f} s: {counts} (want {n} {state})")
        await asyncio.sleep(poll)


async def last_event_time(client: BenchClient, queue: str, type_: str) -> float | None:
    """When the newest `type_` event of `queue` committed (server clock, Unix seconds).

    Polling says only that the jobs finished within the last poll interval; the event says when.
    """
    newest = (await client.health())["last_seq"]
    page = await client.events_page(max(0, newest - 1000), types=type_, queues=queue)
    return epoch(page[-1]["ts"]) if page else None


async def all_jobs(client: JobDeckClient, queue: str) -> list[Json]:
    """Every job of `queue`, page by page (newest first)."""
    jobs: list[Json] = []
    cursor = None
    while True:
        page = await client.list_jobs(queue=queue, limit=1000, cursor=cursor)
        jobs += page["jobs"]
        cursor = page["next_cursor"]
        if cursor is None:
            return jobs
