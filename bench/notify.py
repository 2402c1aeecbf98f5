"""Benchmark: notifications (a `jobdeck server` with no agent, a webhook receiver in its own process).

delivery latency: one rule sends every job.created of one queue to 10 webhook channels; another
process submits 100 jobs a second; the receiver takes, per request, its arrival time minus the
event's commit time (`data.event.ts`; one machine, one clock): commit -> relay -> rules -> the
delivery row -> dispatcher -> signed POST. Baseline, same run, same receiver: this process POSTing
the same number of requests at the same rate itself (the receiver's and loopback HTTP's own cost).
Then again with an 11th channel whose receiver never answers (it times out after 2 s): the healthy
channels' p99 beside the first run's. The two kinds of run alternate (TURNS of each, a fresh server
each), and each p99 is over all turns of its kind, so a load swing on a shared machine falls on both.

hook submits: incoming hook calls (bearer token) from 16 concurrent clients for a few seconds,
beside POST /v1/jobs of the same job by the same clients (the same run, the same server).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson

from bench.context import RunContext
from bench.report import Figure, Floor, percentile
from bench.server import BenchError

NAME = "notify"
RATE, CHANNELS = 100.0, 10
P99_FLOOR = Floor("<=", 100.0)  # ms, commit -> receiver, healthy receivers
SLOW_FLOOR = Floor("<=", 1.10)  # the healthy channels' p99 with a timing-out receiver / without
QUEUE = "nlag"
TURNS = 2  # healthy / hanging runs, alternating
JOB = {"queue": "hooked", "task": {"kind": "shell", "command": "true"}}  # the server has no agent: they wait


class _Receiver:
    """Webhook receivers on one loopback port, in their own process (bench/webhook_receiver.py):
    /ok/{n} answers at once and notes the delivery's lag, /hang never answers."""

    def __init__(self) -> None:
        self.port = 0
        self._http: httpx.AsyncClient | None = None

    async def take(self) -> list[float]:
        """The lags (ms) noted since the last call."""
        assert self._http is not None
        r = await self._http.get(f"http://127.0.0.1:{self.port}/lags")
        return list(orjson.loads(r.content))

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[_Receiver]:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bench.webhook_receiver",
                                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
        assert proc.stdout is not None and proc.stdin is not None
        try:
            self.port = int(await asyncio.wait_for(proc.stdout.readline(), 30))
            async with httpx.AsyncClient(timeout=30) as self._http:
                yield self
        finally:
            proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def _latency_run(ctx: RunContext, rx: _Receiver, slow: bool, turn: int) -> tuple[list[float], int, float]:
    """The commit -> receiver lags (ms, sorted) of what arrived, how many were due, and the
    deliveries per second the receiver got from the load's start to the last arrival."""
    seconds = ctx.scale.console_seconds
    async with ctx.server(f"notify-slow{turn}" if slow else f"notify{turn}", slots=0) as (srv, _), httpx.AsyncClient(
        base_url=srv.url, timeout=30
    ) as http:  # fmt: skip
        ids = []
        for i in range(CHANNELS + (1 if slow else 0)):
            url = f"http://127.0.0.1:{rx.port}/ok/{i}" if i < CHANNELS else f"http://127.0.0.1:{rx.port}/hang"
            r = await http.post("/v1/notifications/channels", json={"kind": "webhook", "name": f"c{i}", "url": url,
                                                                     "timeout": 2.0, "disable_after": 0})  # fmt: skip
            if r.status_code != 201:
                raise BenchError(f"cannot create a channel: {r.text}")
            ids.append(r.json()["id"])
        rule = {"name": "every-created", "events": ["job.created"], "filters": {"queue": QUEUE}, "channels": ids,
                "window_seconds": 0}  # fmt: skip
        if (r := await http.post("/v1/notifications/rules", json=rule)).status_code != 201:
            raise BenchError(f"cannot create the rule: {r.text}")
        await rx.take()
        lags: list[float] = []
        ctx.progress(
            f"{RATE:.0f} events/s for {seconds:.0f} s to {CHANNELS} channels" + (" + 1 that hangs" if slow else "")
        )
        load = subprocess.Popen([sys.executable, "-m", "bench.console_load", srv.url, str(RATE), str(seconds), QUEUE])
        expected = int(RATE * seconds) * CHANNELS
        started = time.monotonic()
        deadline = started + seconds + 60
        last, last_at = -1, started
        while (load.poll() is None or len(lags) < expected) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            lags += await rx.take()
            if len(lags) != last:
                last, last_at = len(lags), time.monotonic()
        load.wait(10)
        return sorted(lags), expected, len(lags) / max(last_at - started, 1e-6)


async def _baseline(rx: _Receiver, seconds: float) -> list[float]:
    """This process POSTing the same number of requests at the same rate (10 in flight per tick at
    most, like the dispatcher's per-channel workers); stops after 60 s whatever it reached."""
    await rx.take()
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    sem = asyncio.Semaphore(64)

    async def one(http: httpx.AsyncClient, c: int) -> None:
        async with sem:
            body = orjson.dumps({"type": "jobdeck.alert", "data": {"sent": time.time()}})
            await http.post(f"http://127.0.0.1:{rx.port}/ok/{c}", content=body)

    async with httpx.AsyncClient(timeout=30, limits=limits) as http:
        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks = []
        for i in range(int(RATE * seconds)):
            if (wait := start + i / RATE - loop.time()) > 0:
                await asyncio.sleep(wait)
            tasks += [asyncio.create_task(one(http, c)) for c in range(CHANNELS)]
        _, pending = await asyncio.wait(tasks, timeout=60)
        for t in pending:
            t.cancel()
    return sorted(await rx.take())


async def delivery_latency(ctx: RunContext) -> list[Figure]:
    healthy, with_slow, rates, turn_p99s = [], [], [], []
    expected = expected_slow = 0
    async with _Receiver().serving() as rx:
        for turn in range(TURNS):
            lags, due, rate = await _latency_run(ctx, rx, slow=False, turn=turn)
            healthy += lags
            expected += due
            rates.append(rate)
            if turn == 0:
                ctx.progress("baseline: this process POSTing to the same receiver at the same rate")
                base = await _baseline(rx, ctx.scale.console_seconds)
            lags_slow, due, _ = await _latency_run(ctx, rx, slow=True, turn=turn)
            with_slow += lags_slow
            expected_slow += due
            turn_p99s.append(tuple(percentile(sorted(x), 99) if x else float("nan") for x in (lags, lags_slow)))
    healthy.sort()
    with_slow.sort()
    rate = sum(rates) / len(rates)
    turns = "; ".join(f"{a:,.0f} / {b:,.0f}" for a, b in turn_p99s)
    late = expected - len(healthy)
    # a delivery that did not arrive within 60 s of the load's end counts as later than any that did
    p99 = percentile(healthy, 99) if not late or late / expected < 0.01 else None
    p99_slow = percentile(with_slow, 99) if expected_slow - len(with_slow) < expected_slow / 100 else None
    note = (
        f"{len(healthy):,} of {expected:,} deliveries ({RATE:.0f} job.created/s x {CHANNELS} channels, signed, logged; "
        f"{TURNS} turns)"
    )
    return [
        Figure(NAME, "delivered / due", len(healthy) / expected, "ratio", None, note),
        Figure(NAME, "deliveries/s received", rate, "/s", None, f"due: {RATE * CHANNELS:,.0f}/s during the load"),
        Figure(NAME, "commit -> receiver p50", percentile(healthy, 50), "ms", None, "of those that arrived"),
        Figure(
            NAME,
            "commit -> receiver p99",
            p99,
            "ms",
            P99_FLOOR,
            "" if p99 is not None else "over 1 % did not arrive within 60 s: p99 is beyond it",
        ),
        Figure(NAME, "baseline: direct POST p50", percentile(base, 50), "ms", None, "this process -> receiver"),
        Figure(NAME, "baseline: direct POST p99", percentile(base, 99), "ms", None),
        Figure(NAME, "p99 with a receiver that hangs", p99_slow, "ms", None, "an 11th channel times out (2 s)"),
        Figure(
            NAME,
            "p99 with it / without",
            p99_slow / p99 if p99 and p99_slow else None,
            "ratio",
            SLOW_FLOOR,
            f"p99 per turn, without / with (ms): {turns}",
        ),
    ]


async def _hammer(http: httpx.AsyncClient, path: str, seconds: float, clients: int, **kw: Any) -> float:
    done = 0
    stop = time.monotonic() + seconds

    async def one() -> None:
        nonlocal done
        while time.monotonic() < stop:
            r = await http.post(path, **kw)
            if r.status_code not in (201, 202):
                raise BenchError(f"POST {path}: {r.status_code} {r.text[:200]}")
            done += 1

    t = time.monotonic()
    await asyncio.gather(*(one() for _ in range(clients)))
    return done / (time.monotonic() - t)


async def hook_submits(ctx: RunContext) -> list[Figure]:
    seconds, clients = ctx.scale.single_seconds, ctx.scale.concurrency
    async with ctx.server("notify-hooks", slots=0) as (srv, _), httpx.AsyncClient(base_url=srv.url, timeout=30) as http:
        r = await http.post("/v1/notifications/hooks", json={"name": "bench", "auth": "bearer", "job": JOB})
        if r.status_code != 201:
            raise BenchError(f"cannot create the hook: {r.text}")
        auth = {"authorization": f"Bearer {r.json()['token']}", "content-type": "application/json"}
        ctx.progress(f"hook calls and POST /v1/jobs, {clients} clients, {seconds:.0f} s each")
        jobs_rate = await _hammer(http, "/v1/jobs", seconds, clients, json=JOB)
        hook_rate = await _hammer(http, "/v1/hooks/bench", seconds, clients, content=b'{"ref": "main"}', headers=auth)
    return [
        Figure(NAME, "POST /v1/hooks/{name} (bearer)", hook_rate, "jobs/s", None, f"{clients} clients"),
        Figure(NAME, "baseline: POST /v1/jobs", jobs_rate, "jobs/s", None, "same job, same clients"),
        Figure(NAME, "hook / POST /v1/jobs", hook_rate / jobs_rate if jobs_rate else None, "ratio", None),
    ]
