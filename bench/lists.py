"""Job lists at a million stored jobs: the first page of GET /v1/jobs sorted by each column, a page
deep in a sorted list (after following its cursors), the total count with and without filters, and
a search. Each figure is the median of REPEATS requests, in ms, beside the plain newest-first page
of the same store measured in the same run (the baseline)."""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.context import RunContext
from bench.report import Figure
from bench.workload import BenchClient

NAME = "lists"
STORE_JOBS = 1_000_000
QUICK_STORE_JOBS = 100_000
REPEATS = 15
DEEP_PAGES = 20  # the page measured deep in a sorted list


def _spec(n: int) -> dict[str, Any]:
    # Varied on every sorted column: 8 priorities, 20 queues, two states (no agent runs them), tags.
    return {"task": {"kind": "shell", "argv": ["echo", f"order-{n}"]}, "name": f"job-{n % 5000}",
            "queue": f"q{n % 20}", "priority": n % 8 - 4, "tags": [f"t{n % 100}"],
            **({"delay": 86_400} if n % 3 else {})}  # fmt: skip


async def _median_ms(client: BenchClient, **params: Any) -> float:
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        await client.list_jobs(**params)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


async def job_lists(ctx: RunContext) -> list[Figure]:
    """Sorted pages, counts and a search over STORE_JOBS stored jobs."""
    total = QUICK_STORE_JOBS if ctx.scale.batches <= 2 else STORE_JOBS
    async with ctx.server(NAME, 0) as (_srv, client):
        ctx.progress(f"filling the store with {total:,} jobs")
        for start in range(0, total, 10_000):
            await client.submit_batch([_spec(n) for n in range(start, min(total, start + 10_000))])
        base = await _median_ms(client, limit=100)
        figures = [Figure(NAME, f"baseline: newest 100 of {total:,} (no count)", base, "ms")]

        def fig(measure: str, ms: float) -> Figure:
            return Figure(NAME, measure, ms, "ms", note=f"{ms / base:.1f}x the baseline")

        for sort in ("priority", "state", "queue", "duration", "created"):
            figures.append(fig(f"first 100 sorted by {sort}", await _median_ms(client, sort=sort, limit=100)))
        cursor = None
        for _ in range(DEEP_PAGES):
            page = await client.list_jobs(sort="priority", order="asc", limit=100, cursor=cursor)
            cursor = page["next_cursor"]
        figures.append(fig(f"page {DEEP_PAGES + 1} sorted by priority (cursor)",
                           await _median_ms(client, sort="priority", order="asc", limit=100, cursor=cursor)))  # fmt: skip
        counted = await client.list_jobs(limit=100, count="true")
        figures.append(fig(f"first 100 + total ({counted['total']:,}, exact: {counted['total_exact']})",
                           await _median_ms(client, limit=100, count="true")))  # fmt: skip
        figures.append(fig("first 100 of a state + its total",
                           await _median_ms(client, state="queued", limit=100, count="true")))  # fmt: skip
        figures.append(fig("first 100 of a queue by priority + total",
                           await _median_ms(client, queue="q7", sort="priority", limit=100, count="true")))  # fmt: skip
        figures.append(fig("search a value in the args (q=order-123457) + total (scans)",
                           await _median_ms(client, q="order-123457", limit=100, count="true")))  # fmt: skip
        return figures
