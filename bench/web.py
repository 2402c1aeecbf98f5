"""Benchmark: the web dashboard in Debian's chromium.

1. Lag from an event's commit to the browser's DOM showing it, at a steady 1,000 events/s:
   jobs are submitted in small batches (each job's `job.created` is one event; they wait an
   hour, so no other events mix in). The benchmark follows the feed itself for each event's
   commit time (`ts`), and a MutationObserver in the page notes when the dashboard's live
   header (`#live-seq`, on the Jobs page, which also refetches its table as events arrive)
   shows a sequence number. An event's lag is the first DOM change showing its seq or a later
   one, minus its commit time (one machine, one clock).
2. With 100,000 jobs in the store: how long the Jobs page takes to load, to apply a filter,
   and to show a pause clicked in it; and the Overview page's load.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

from bench.context import RunContext
from bench.latency import paced
from bench.report import Figure, Floor, percentile
from bench.server import BenchError
from bench.workload import noop_job

NAME = "web dashboard"
QUEUE = "weblag"
RATE = 1_000.0  # events per second
BATCH = 25  # jobs per submit call: 40 calls a second
STORE_JOBS = 100_000
WEB_LAG_P99_FLOOR = Floor("<=", 500.0)  # ms, the floor
ACTION_FLOOR = Floor("<=", 500.0)  # ms: an action shows within 500 ms, with 100,000 jobs stored
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]  # fmt: skip
OBSERVER = """() => {
  window.__seen = [];
  const el = document.querySelector('#live-seq');
  const note = () => window.__seen.push([Date.now(), parseInt(el.textContent || '0', 10)]);
  new MutationObserver(note).observe(el, {childList: true, characterData: true, subtree: true});
  note();
}"""


@contextlib.asynccontextmanager
async def dashboard(core_url: str, ctx: RunContext) -> AsyncIterator[str]:
    """`jobdeck web` for `core_url` on a free port, for the life of the block."""
    from web_ui import launch
    from web_ui.frontend import SetupError

    sock_port = _free_port()
    log_dir = tempfile.mkdtemp(prefix="jobdeck-bench-web-")
    log = open(os.path.join(log_dir, "web.log"), "wb")  # noqa: SIM115 - closed below
    try:
        proc = launch.spawn(core_url, "127.0.0.1", sock_port, log=log.fileno())
    except SetupError as exc:
        log.close()
        raise BenchError(str(exc)) from None
    url = f"http://127.0.0.1:{sock_port}"
    try:
        if not await asyncio.to_thread(launch.wait_ready, proc, url, 300.0):
            raise BenchError(f"jobdeck web did not start; log: {log.name}")
        ctx.progress(f"dashboard up at {url} (pid {proc.pid})")
        yield url
    finally:
        await asyncio.to_thread(launch.stop, proc)
        log.close()
        if not ctx.servers.keep:
            shutil.rmtree(log_dir, ignore_errors=True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def web_lag(ctx: RunContext) -> list[Figure]:
    """Commit-to-DOM lag at 1,000 events/s, then page timings with 100,000 jobs stored."""
    if not os.path.exists(CHROMIUM):
        raise BenchError(f"{CHROMIUM} is missing (apt-get install chromium)")
    from playwright.async_api import async_playwright

    seconds = ctx.scale.pickup_seconds
    config_home = tempfile.mkdtemp(prefix="jobdeck-chromium-")  # chromium leaves nothing in $HOME
    env = {**os.environ, "XDG_CONFIG_HOME": config_home, "XDG_CACHE_HOME": config_home}
    async with ctx.server("web-lag", 4) as (srv, client), dashboard(srv.url, ctx) as web, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, env=env)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 900})
            await page.goto(web + "/jobs")
            await page.wait_for_selector("#live-seq", timeout=30_000)
            await page.evaluate(OBSERVER)

            commits: dict[int, float] = {}
            start_seq = int((await client.health())["last_seq"])

            async def follow() -> None:
                async for e in client.events(since=start_seq, queues=[QUEUE]):
                    commits[int(e["seq"])] = _epoch(e["ts"])

            follower = asyncio.create_task(follow())
            job = noop_job(QUEUE, delay=3600)
            ctx.progress(f"submitting {RATE:.0f} jobs/s for {seconds:.0f} s with the Jobs page open")
            await paced(RATE / BATCH, seconds, lambda: client.submit_batch([job] * BATCH))
            expected = int(RATE * seconds)
            deadline = time.monotonic() + 10
            while len(commits) < expected and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await page.wait_for_function(f"() => window.__seen.some(s => s[1] >= {max(commits, default=0)})",
                                         timeout=10_000)  # fmt: skip
            follower.cancel()
            seen: list[list[float]] = await page.evaluate("() => window.__seen")
            lags = _lags(commits, seen, warm_up=1.0)
            figures = [
                Figure(NAME, f"commit -> DOM lag p50 at {RATE:,.0f} events/s", percentile(lags, 50), "ms"),
                Figure(
                    NAME,
                    f"commit -> DOM lag p99 at {RATE:,.0f} events/s",
                    percentile(lags, 99),
                    "ms",
                    WEB_LAG_P99_FLOOR,
                    note=f"{len(lags):,} events, {len(seen):,} DOM updates, max {max(lags, default=0):.0f} ms",
                ),
            ]

            stored = int(sum((await client.stats())["by_state"].values()))
            ctx.progress(f"filling the store to {STORE_JOBS:,} jobs")
            for n in range(stored, STORE_JOBS, 10_000):
                await client.submit_batch([noop_job("bulk-fill", delay=3600, name=f"fill-{n // 10_000}")]
                                          * min(10_000, STORE_JOBS - n))  # fmt: skip
            await client.submit(noop_job(QUEUE, delay=3600, name="needle"))
            figures += await _page_timings(page, web)
        finally:
            await browser.close()
            shutil.rmtree(config_home, ignore_errors=True)
    return figures


async def _page_timings(page: Any, web: str) -> list[Figure]:
    out = []
    t = time.perf_counter()
    await page.goto(web + "/jobs")
    await page.wait_for_selector("#jobs-table tbody tr", timeout=30_000)
    out.append(Figure(NAME, f"Jobs page load, {STORE_JOBS:,} jobs stored", (time.perf_counter() - t) * 1000, "ms"))

    t = time.perf_counter()
    await page.fill("#f-name", "needle")
    await page.wait_for_function("() => document.querySelectorAll('#jobs-table tbody tr').length === 1",
                                 timeout=30_000)  # fmt: skip
    out.append(Figure(NAME, "filter by name (typing pause 300 ms included)", (time.perf_counter() - t) * 1000, "ms"))

    t = time.perf_counter()
    await page.click("#jobs-table tbody tr .act-pause")
    await page.wait_for_selector("#jobs-table tbody tr[data-state=paused]", timeout=30_000)
    out.append(Figure(NAME, "pause clicked -> row shows paused", (time.perf_counter() - t) * 1000, "ms", ACTION_FLOOR))

    t = time.perf_counter()
    await page.goto(web + "/")
    await page.wait_for_selector("#chart-outcomes svg.main-svg", timeout=30_000)
    out.append(Figure(NAME, "Overview load with its charts", (time.perf_counter() - t) * 1000, "ms"))
    return out


def _epoch(ts: Any) -> float:
    from datetime import datetime

    return float(ts) if isinstance(ts, int | float) else datetime.fromisoformat(str(ts)).timestamp()


def _lags(commits: dict[int, float], seen: list[list[float]], warm_up: float) -> list[float]:
    """For each committed event: the first DOM update showing its seq or a later one, minus its
    commit time (ms). The first `warm_up` seconds are left out (the page's first pushes)."""
    if not commits:
        raise BenchError("no events were seen on the feed")
    first = min(commits.values()) + warm_up
    updates = sorted((seq, wall / 1000.0) for wall, seq in seen)
    lags: list[float] = []
    j = 0
    for seq in sorted(commits):
        while j < len(updates) and updates[j][0] < seq:
            j += 1
        if j == len(updates):
            break
        if commits[seq] >= first:  # the shown seq only grows: the first update >= seq is the earliest
            lags.append((updates[j][1] - commits[seq]) * 1000.0)
    return lags
