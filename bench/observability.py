"""What observability costs: drain throughput, server CPU per job and pick-up p99 on a node with
Prometheus metrics on, and on one with OpenTelemetry tracing on at its default sampling (every job
traced; exporting over OTLP/HTTP to a collector stand-in in this process), each against a node with both off, in alternating turns of one run, so the machine's load
hits every mode alike. And what retention costs: the purge rate of old jobs, and the pick-up p99
of a steady stream while the purge runs vs without it.

Drain: jobs stored in a paused queue, then resumed; the clock runs to the last success (the e2e
bench's resumed run). Pick-up: no-op jobs submitted at a steady rate, started_at - run_at per job.
Every turn is a fresh `jobdeck up` on a fresh store. The ratios are the figures: 1.00 is free.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench import obs_hooks
from bench.context import RunContext
from bench.latency import paced
from bench.report import Figure, percentile
from bench.throughput import run_resumed
from bench.workload import BenchClient, all_jobs, epoch, noop_job, wait_for_state

SUBMIT_BATCH = 25  # jobs per submit call in the drains: 200 traces in a 5,000-job drain
QUEUE = "obs-pickup"


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector stand-in: takes every export, keeps a count of the bytes."""

    received = 0
    cpu = 0.0  # CPU seconds its request threads used: in process (bench/obs_hooks.py) it is not the node's

    def do_POST(self) -> None:
        size = int(self.headers.get("content-length") or 0)
        _Collector.received += len(self.rfile.read(size))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
        _Collector.cpu += time.thread_time()  # a thread per request: all of this request's CPU

    def log_message(self, *args: object) -> None:
        return None


@contextlib.contextmanager
def collector() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


async def _pickup_ms(ctx: RunContext, client: BenchClient, seconds: float, queue: str = QUEUE) -> list[float]:
    s = ctx.scale
    for job in [await client.submit(noop_job("warm-up")) for _ in range(4)]:
        await client.wait_for(job["id"], timeout=s.stall_seconds)
    pacing = await paced(s.pickup_rate, seconds, lambda: client.submit(noop_job(queue, delay=0)))
    await wait_for_state(client, queue, "succeeded", len(pacing.lateness), poll=s.poll_seconds, stall=s.stall_seconds)
    return [(epoch(j["started_at"]) - epoch(j["run_at"])) * 1000 for j in await all_jobs(client, queue)]


async def observability_cost(ctx: RunContext) -> list[Figure]:
    """Turns of off, metrics, tracing (twice): each mode's drain rate and pick-up p99."""
    with collector() as endpoint:
        modes = {
            "off": {"JOBDECK_METRICS": "false", "JOBDECK_TRACING": "off"},
            "metrics": {"JOBDECK_METRICS": "true", "JOBDECK_TRACING": "off"},
            "tracing": {  # the default sampling: every job traced (DEFAULT_SAMPLE_RATIO = 1.0)
                "JOBDECK_METRICS": "false",
                "JOBDECK_TRACING": "otlp",
                "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                "OTEL_BSP_MAX_QUEUE_SIZE": "65536",
            },
        }
        # Submitted in batches of SUBMIT_BATCH: a batch is one trace (sampled or not as a whole), so a
        # drain holds enough traces for the default sampling's share to show, in every mode alike.
        small_batches = dataclasses.replace(ctx, scale=dataclasses.replace(ctx.scale, batch_size=SUBMIT_BATCH))
        drain: dict[str, list[float]] = {m: [] for m in modes}
        cpu: dict[str, list[float]] = {m: [] for m in modes}  # server CPU ms per job: steadier than rates
        pickup: dict[str, list[float]] = {m: [] for m in modes}
        names = list(modes)
        for r in range(ctx.scale.obs_rounds):
            for mode in names[r % len(names) :] + names[: r % len(names)]:  # each round starts one mode later
                env = modes[mode]
                async with ctx.server(f"obs-{mode.replace(' ', '-')}-drain-{r}", ctx.scale.e2e_slots, env) as (
                    srv,
                    client,
                ):
                    rate, _, used = await run_resumed(small_batches, [srv], [client])
                    drain[mode].append(rate)
                    cpu[mode].append((used.server_main + used.server_threads) * used.wall * 1000 / ctx.scale.e2e_jobs)
                async with ctx.server(f"obs-{mode.replace(' ', '-')}-pickup-{r}", ctx.scale.pickup_slots, env) as (
                    _,
                    client,
                ):
                    pickup[mode].extend(await _pickup_ms(ctx, client, ctx.scale.pickup_seconds / 2))
                ctx.progress(f"{mode}, round {r + 1}: drain {drain[mode][-1]:,.0f} jobs/s")
        hooks = {"metrics": await asyncio.to_thread(obs_hooks.metrics_us_per_job),
                 "tracing": await asyncio.to_thread(obs_hooks.tracing_us_per_job, endpoint, None)}  # fmt: skip
        exported = _Collector.received
    rates = {m: sum(v) / len(v) for m, v in drain.items()}
    per_job = {m: sum(v) / len(v) for m, v in cpu.items()}
    p99 = {m: percentile(sorted(v), 99) for m, v in pickup.items()}
    figures = []
    for mode in modes:
        turns = ", ".join(f"{x:,.0f}" for x in drain[mode])
        figures.append(Figure("observability cost", f"drain, {mode}", rates[mode], "jobs/s", None,
                              f"{ctx.scale.e2e_jobs:,} jobs a turn; turns {turns}"))  # fmt: skip
        figures.append(Figure("observability cost", f"server CPU per job, {mode}", per_job[mode], "ms", None,
                              "turns " + ", ".join(f"{x:.3f}" for x in cpu[mode])))  # fmt: skip
        figures.append(Figure("observability cost", f"pick-up p99, {mode}", p99[mode], "ms", None,
                              f"{len(pickup[mode]):,} jobs at {ctx.scale.pickup_rate:.0f}/s; "
                              f"p50 {percentile(sorted(pickup[mode]), 50):.1f} ms"))  # fmt: skip
    for mode, floor in (("metrics", 0.95), ("tracing", 0.85)):
        by_round = ", ".join(f"{m / o:.2f}" for o, m in zip(drain["off"], drain[mode], strict=True))
        figures.append(Figure("observability cost", f"drain: {mode} on / off", rates[mode] / rates["off"], "ratio",
                              None, f"1.00 = free; the issue's floor: >= {floor}; by round {by_round}"))  # fmt: skip
        by_round = ", ".join(f"{o / m:.2f}" for o, m in zip(cpu["off"], cpu[mode], strict=True))
        figures.append(Figure("observability cost", f"CPU per job: off / {mode} on", per_job["off"] / per_job[mode],
                              "ratio", None, f"1.00 = free; the same floor read as CPU (less noisy than a rate); "
                              f"by round {by_round}"))  # fmt: skip
        figures.append(Figure("observability cost", f"pick-up p99: {mode} on / off", p99[mode] / p99["off"], "ratio",
                              None, "1.00 = free; lower is better"))  # fmt: skip
    base_us = min(cpu["off"]) * 1000  # the off node's cheapest turn: the smallest base, the largest share
    for mode, us in hooks.items():  # in process: what the feature adds to a job's CPU, beside the off node's
        figures.append(Figure("observability cost", f"{mode}: CPU added per job (in process)", us, "us", None,
                              f"{obs_hooks.JOBS:,} jobs, best of {obs_hooks.REPEATS}"))  # fmt: skip
        figures.append(Figure("observability cost", f"{mode}: off / (off + added), per job", base_us / (base_us + us),
                              "ratio", None, f"beside this run's off node at its cheapest turn: "
                              f"{base_us / 1000:.3f} ms per job"))  # fmt: skip
    figures.append(Figure("observability cost", "OTLP bytes exported (tracing turns)", exported / 1e6, "MB"))
    return figures


async def _purged(client: BenchClient) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = (await client._http.get("/metrics")).text
    return sum(x.value for f in text_string_to_metric_families(text) if f.name == "jobdeck_retention_purged"
               for x in f.samples if x.name.endswith("_total"))  # fmt: skip


async def retention_cost(ctx: RunContext) -> list[Figure]:
    """One node whose retention is RETAIN s: drain the old jobs, time a stream's pick-up (nothing to
    purge yet), wait until the old jobs pass the retention, time another stream while they are purged."""
    s = ctx.scale
    retain = 60.0
    kept = {QUEUE: 0, f"{QUEUE}-purge": 0, "warm-up": 0}  # the streams' own jobs stay (0: keep)
    env = {"JOBDECK_JOB_RETENTION_DAYS": str(retain / 86400), "JOBDECK_RETENTION_INTERVAL_SECONDS": "1",
           "JOBDECK_QUEUE_RETENTION_DAYS": json.dumps(kept)}  # fmt: skip
    seconds = s.pickup_seconds / 2
    loop = asyncio.get_running_loop()
    async with ctx.server("retention", s.pickup_slots, env) as (srv, client):
        began = loop.time()
        await run_resumed(ctx, [srv], [client])
        quiet = await _pickup_ms(ctx, client, seconds)
        if (left := began + retain - loop.time()) > 0:
            ctx.progress(f"waiting {left:.0f} s for the {s.e2e_jobs:,} old jobs to pass the retention")
            await asyncio.sleep(left)
        samples: list[tuple[float, float]] = []
        stop = asyncio.Event()

        async def watch() -> None:
            while not stop.is_set():
                samples.append((loop.time(), await _purged(client)))
                await asyncio.sleep(0.25)

        watcher = asyncio.create_task(watch())
        deadline = loop.time() + 120
        while (not samples or samples[-1][1] <= 0) and loop.time() < deadline:  # the stream runs while it purges
            await asyncio.sleep(0.05)
        during = await _pickup_ms(ctx, client, seconds, f"{QUEUE}-purge")
        deadline = loop.time() + 120
        while (not samples or samples[-1][1] < s.e2e_jobs) and loop.time() < deadline:
            await asyncio.sleep(0.25)
        stop.set()
        await watcher
    start_t = next((t for t, n in samples if n > 0), samples[0][0])
    end_t = next((t for t, n in samples if n >= s.e2e_jobs), samples[-1][0])
    purged = samples[-1][1]
    overlap = sum(1 for t, n in samples if 0 < n < s.e2e_jobs) * 0.25
    q99, d99 = percentile(sorted(quiet), 99), percentile(sorted(during), 99)
    return [
        Figure(
            "retention",
            "purge rate (archive + delete)",
            purged / max(0.25, end_t - start_t),
            "jobs/s",
            None,
            f"{purged:,.0f} jobs in {end_t - start_t:.1f} s; batches of 500, 50 ms apart",
        ),
        Figure(
            "retention", "pick-up p99 without a purge", q99, "ms", None, f"{len(quiet):,} jobs at {s.pickup_rate:.0f}/s"
        ),
        Figure(
            "retention",
            "pick-up p99 during the purge",
            d99,
            "ms",
            None,
            f"{len(during):,} jobs; the purge ran during ~{overlap:.1f} s of the stream's {seconds:.1f} s",
        ),
        Figure("retention", "pick-up p99: during / without", d99 / q99, "ratio", None, "the issue's floor: <= 2"),
    ]
