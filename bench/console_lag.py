"""Benchmark: the console's lag, from an event's commit on the server to the console's Jobs table
showing it on screen, at 1,000 events a second with 100,000 jobs in the store.

A fresh server (no agent) gets 100,000 jobs; the console runs headless in this process (Textual's
run_test); a separate process submits jobs at the rate, one `job.created` event each. For each
new job, the lag is the time of the first screen refresh after its row went into the table
minus the event's `ts` (stamped by the server at commit; one machine, one clock).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

from bench.context import RunContext
from bench.report import Figure, Floor, percentile
from bench.workload import epoch, noop_job, submit_in_batches

NAME = "console lag"
QUEUE = "lag"
CONSOLE_LAG_P99_FLOOR = Floor("<=", 250.0)  # ms, the console issue's promise


async def console_lag(ctx: RunContext) -> list[Figure]:
    from console_tui.app import ConsoleApp
    from console_tui.screens.jobs import JobsView

    s = ctx.scale
    rate, seconds = s.console_rate, s.console_seconds
    async with ctx.server("console-lag", slots=0) as (srv, client):
        ctx.progress(f"seeding {s.console_store_jobs:,} jobs")
        await submit_in_batches(client, [noop_job("seed", delay=86_400)] * s.console_store_jobs, 10_000)
        app = ConsoleApp(srv.url)
        committed: dict[int, float] = {}
        lags: list[float] = []
        feed_lags: list[float] = []
        batches: list[int] = []

        def on_batch(events: list[dict[str, Any]]) -> None:
            fresh = {
                e["job_id"]: epoch(e["ts"])
                for e in events
                if e.get("type") == "job.created" and e.get("queue") == QUEUE
            }
            if not fresh:
                return
            batches.append(len(events))
            committed.update(fresh)
            applied = time.time()
            feed_lags.extend((applied - t) * 1000 for t in fresh.values())

            def shown() -> None:
                now = time.time()
                view = app.main_screen.query_one("#jobs", JobsView)  # type: ignore[union-attr]
                lags.extend((now - fresh[i]) * 1000 for i in fresh if i in view.shown_at)

            app.call_after_refresh(shown)

        async with app.run_test(size=(160, 50)) as pilot:
            await asyncio.wait_for(app.ready.wait(), 30)
            app.on_batch = on_batch
            ctx.progress(f"console up; {rate:,.0f} events/s for {seconds:.0f} s")
            load = subprocess.Popen(
                [sys.executable, "-m", "bench.console_load", srv.url, str(rate), str(seconds), QUEUE]
            )
            t0 = time.monotonic()
            while load.poll() is None:
                await pilot.pause(0.1)
            took = time.monotonic() - t0
            await pilot.pause(1.0)  # the last batch reaches the screen
            app.exit()
        received = len(committed)
    lags.sort()
    feed_lags.sort()
    if not lags:
        return [
            Figure(NAME, "commit -> table p99", None, "ms", CONSOLE_LAG_P99_FLOOR, note="no event reached the table")
        ]
    note = (f"{received:,} job.created events in {took:.1f} s ({received / took:,.0f}/s) over "
            f"{s.console_store_jobs:,} stored jobs; {len(batches)} screen batches, median "
            f"{sorted(batches)[len(batches) // 2]} events each; rows shown {len(lags):,}")  # fmt: skip
    return [
        Figure(NAME, "commit -> table p50", percentile(lags, 50), "ms", None),
        Figure(NAME, "commit -> table p99", percentile(lags, 99), "ms", CONSOLE_LAG_P99_FLOOR, note),
        Figure(NAME, "commit -> table max", lags[-1], "ms", None),
        Figure(
            NAME,
            "commit -> applied p99",
            percentile(feed_lags, 99),
            "ms",
            None,
            "the event through the server's feed and the console's 50 ms batching, before the redraw",
        ),
    ]
