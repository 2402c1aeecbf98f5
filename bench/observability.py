"""What observability costs: drain throughput, server CPU per job and pick-up p99 on a node with
Prometheus metrics on, and on one with OpenTelemetry tracing on at its default sampling (every job
traced; exporting over OTLP/HTTP to a collector stand-in in this process), each against a node with
both off, in alternating turns of one run, so the machine's load hits every mode alike. And what
retention costs: the purge rate of old jobs, and the pick-up p99 of a steady stream while the purge
runs vs without it.

Drain: Redis-PING jobs (bench/io_job.py) stored in a paused queue, then resumed; the clock runs to
the last success (the e2e bench's resumed run). Each round drains an off node, an on node and a
second off node in turn (the order rotates with the round): the second off node's figures against
the first's, printed beside every ratio, say how far apart two equal turns measure in that round.
Pick-up: no-op jobs submitted at a steady rate, started_at - run_at per job, to an off node, an on
node and a second off node up at the same time, the submits dealt to them in turn, so a burst of the
machine's load hits every stream alike (in turns, the p99 of one turn against the next swung
0.3-2.3x). Every node is a fresh `jobdeck up` on a fresh store. The ratios are the figures: 1.00 is free.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import math
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench import obs_hooks
from bench.context import RunContext
from bench.io_drain import QUEUE as IO_QUEUE
from bench.io_drain import ping_job
from bench.latency import paced
from bench.report import Figure, percentile
from bench.throughput import run_resumed
from bench.workload import BenchClient, all_jobs, epoch, noop_job, wait_for_state

SUBMIT_BATCH = 25  # jobs per submit call in the drains: 800 traces in a 20,000-job drain
DRAIN_JOBS = 20_000  # jobs of each drain turn, at least (--jobs if more)
QUEUE = "obs-pickup"


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector stand-in: takes every export, keeps a count of the bytes. It keeps the
    connection open between requests (HTTP/1.1), as a real collector does."""

    protocol_version = "HTTP/1.1"
    received = 0
    cpu = 0.0  # CPU seconds its connection threads used: in process (bench/obs_hooks.py) it is not the node's

    def setup(self) -> None:
        super().setup()
        self._counted = 0.0  # this connection thread's CPU already added to `cpu`

    def do_POST(self) -> None:
        size = int(self.headers.get("content-length") or 0)
        _Collector.received += len(self.rfile.read(size))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
        used = time.thread_time()  # a thread per connection: its CPU since the last request
        _Collector.cpu += used - self._counted
        self._counted = used

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


async def _paired_pickup_ms(ctx: RunContext, clients: list[BenchClient], seconds: float,
                            queue: str = QUEUE) -> list[list[float]]:  # fmt: skip
    """Each node's pick-ups (ms, in submit order) of one stream at pickup_rate a node for `seconds`, the
    submits dealt to the nodes in turn (one paced stream at the nodes' summed rate)."""
    s = ctx.scale
    for client in clients:
        for job in [await client.submit(noop_job("warm-up")) for _ in range(4)]:
            await client.wait_for(job["id"], timeout=s.stall_seconds)
    # at most MAX_IN_FLIGHT submits of a node await their answer, the next wait their turn here: a backlog
    # in httpx's pool costs it quadratic time (two streams in this process stalled it for minutes)
    turn = itertools.cycle([(c, asyncio.Semaphore(MAX_IN_FLIGHT)) for c in clients])

    async def submit() -> None:
        client, room = next(turn)
        async with room:
            await client.submit(noop_job(queue, delay=0))

    pacing = await paced(s.pickup_rate * len(clients), seconds, submit)
    each = len(pacing.lateness) // len(clients)
    out = []
    for client in clients:
        await wait_for_state(client, queue, "succeeded", each, poll=s.poll_seconds, stall=s.stall_seconds)
        jobs = sorted(await all_jobs(client, queue), key=lambda j: int(j["id"]))
        out.append([(epoch(j["started_at"]) - epoch(j["run_at"])) * 1000 for j in jobs])
    return out


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _furthest_from_one(ratios: list[float]) -> float:
    """The ratio furthest from 1.00 either way (0.80 before 1.10): the worst of an A/A comparison."""
    return max(ratios, key=lambda v: abs(math.log(v)) if v > 0 else math.inf)


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


async def observability_cost(ctx: RunContext) -> list[Figure]:
    """For metrics and for tracing, `obs_rounds` rounds. A round's drain: three turns, each a fresh
    node draining the I/O job (bench/io_job.py) at the io bench's slots: an off node, an on node and
    a second off node (the twin), in an order that rotates with the round. Its ratio is the on turn
    against the off turn; the twin against the off turn, the same comparison between two equal
    turns, is printed beside it (the A/A: how far apart two turns measure in that round), for the
    drain rate and the CPU per job alike. Then the round's pick-up: an off, an on and a second off
    node at once, one stream dealt to the three (2 x pickup_seconds at pickup_rate each), the p99 of
    each, with the twin's against the off node's as its A/A. The figures are the median and the
    worst of the rounds, each round's ratios, their A/A and the machine's load beside them. The
    in-process cost (bench/obs_hooks.py) is measured once a round and set beside that round's off
    node's CPU per job."""
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
        # Drains of at least DRAIN_JOBS: a --quick drain of 5,000 took 0.6-0.8 s at load 2, so a few tens
        # of ms of start-up or scheduling noise moved a turn by the 5 % the metrics floor is about.
        # The drain's job is the I/O job (bench/io_job.py: one Redis PING) at the io bench's slots: a
        # no-op drain at 512 slots measured the claim path alone, and its turns swung as much as the effect.
        jobs = max(ctx.scale.io_jobs, DRAIN_JOBS)
        drain_ctx = dataclasses.replace(ctx, scale=dataclasses.replace(ctx.scale, batch_size=SUBMIT_BATCH, e2e_jobs=jobs,
                                                                       e2e_slots=ctx.scale.io_slots))  # fmt: skip
        io_job = ping_job(ctx.backend.redis_url)

        async def turn(mode: str, tag: str) -> tuple[float, float]:
            env = modes["off" if mode == "twin" else mode]
            async with ctx.server(f"obs-{mode}-drain-{tag}", ctx.scale.io_slots, env) as (srv, client):
                rate, _, used = await run_resumed(drain_ctx, [srv], [client], job=io_job, queue=IO_QUEUE)
            cpu = (used.server_main + used.server_threads) * 1000 / jobs  # CPU s (not x wall)
            ctx.progress(f"{mode} {tag}: drain {rate:,.0f} jobs/s, CPU {cpu:.3f} ms/job (load {_load()})")
            return rate, cpu

        async def pickup(mode: str, r: int) -> tuple[list[float], list[float], list[float]]:
            """Pick-ups (ms) of an off node, an on node and a second off node (its twin), up at once."""
            slots = ctx.scale.pickup_slots
            async with (ctx.server(f"obs-off-pickup-{r}", slots, modes["off"]) as (_, off),
                        ctx.server(f"obs-{mode}-pickup-{r}", slots, modes[mode]) as (_, on),
                        ctx.server(f"obs-twin-pickup-{r}", slots, modes["off"]) as (_, twin)):  # fmt: skip
                k = r % 3  # who gets the first submit turns with the pair
                nodes = [off, on, twin][k:] + [off, on, twin][:k]
                got = dict(zip(map(id, nodes), await _paired_pickup_ms(ctx, nodes, 2 * ctx.scale.pickup_seconds),
                               strict=True))  # fmt: skip
            off_ms, on_ms, twin_ms = got[id(off)], got[id(on)], got[id(twin)]
            ctx.progress(f"pick-up {r}, {len(on_ms):,} jobs a node: p99 {mode} {percentile(sorted(on_ms), 99):.1f} "
                         f"ms, off {percentile(sorted(off_ms), 99):.1f} ms, twin off "
                         f"{percentile(sorted(twin_ms), 99):.1f} ms (load {_load()})")  # fmt: skip
            return off_ms, on_ms, twin_ms

        hook = {"metrics": lambda: obs_hooks.metrics_us_per_job(),
                "tracing": lambda: obs_hooks.tracing_us_per_job(endpoint, None)}  # fmt: skip
        pairs: dict[str, list[dict[str, float]]] = {m: [] for m in ("metrics", "tracing") if m in ctx.scale.obs_parts}
        for r in range(ctx.scale.obs_rounds):
            for mode in pairs:
                # One round: an off turn, an on turn and a second off turn (the twin), in an order that
                # rotates with the round, so each mode takes each place once in 3 rounds; the twin
                # against the off turn is the A/A of the same shape as on against off.
                order = ["off", mode, "twin"][r % 3 :] + ["off", mode, "twin"][: r % 3]
                loads = [_load()]
                got = {m: await turn(m, f"{r}{'abc'[k]}") for k, m in enumerate(order)}
                off_ms, on_ms, twin_ms = await pickup(mode, r)
                added = await asyncio.to_thread(hook[mode])
                loads.append(_load())
                (o_rate, o_cpu), (m_rate, m_cpu), (t_rate, t_cpu) = got["off"], got[mode], got["twin"]
                p99_off = percentile(sorted(off_ms), 99)
                pairs[mode].append({
                    "drain": m_rate / o_rate,
                    "drain_aa": t_rate / o_rate,
                    "cpu": o_cpu / m_cpu,
                    "cpu_aa": o_cpu / t_cpu,
                    "p99": percentile(sorted(on_ms), 99) / p99_off,
                    "p99_aa": percentile(sorted(twin_ms), 99) / p99_off,
                    "p99_off_ms": p99_off,
                    "p99_on_ms": percentile(sorted(on_ms), 99),
                    "pickups": len(on_ms),
                    "off_rate": o_rate,
                    "on_rate": m_rate,
                    "twin_rate": t_rate,
                    "off_cpu": o_cpu,
                    "on_cpu": m_cpu,
                    "twin_cpu": t_cpu,
                    "added_us": added,
                    "in_process": o_cpu * 1000 / (o_cpu * 1000 + added),
                    "load_from": float(loads[0]),
                    "load_to": float(loads[1]),
                })  # fmt: skip
        exported = _Collector.received
    figures = []
    floors = {"metrics": 0.95, "tracing": 0.85}
    for mode, ps in pairs.items():
        if not ps:  # --obs-rounds 0: the retention half only
            continue
        floor = floors[mode]
        loads = ", ".join(f"{p['load_from']:.1f}-{p['load_to']:.1f}" for p in ps)

        def by_pair(key: str, fmt: str = "{:.2f}", ps: list[dict[str, float]] = ps) -> str:
            return ", ".join(fmt.format(p[key]) for p in ps)

        for key, aa, what, worst, rule in (
            ("drain", "drain_aa", f"drain: {mode} on / off", min, f">= {floor} (the issue's floor)"),
            ("cpu", "cpu_aa", f"CPU per job: off / {mode} on", min, f">= {floor} (the same floor read as CPU)"),
            ("p99", "p99_aa", f"pick-up p99: {mode} on / off", max, f"<= {2 - floor:.2f} (the floor read as latency)"),
            ("in_process", "", f"{mode}: off / (off + added in process)", min, f">= {floor}"),
        ):
            values = [p[key] for p in ps]
            spread = ""  # the same comparison between two off turns (nodes): how far apart equals measure
            if aa:
                a_a = [p[aa] for p in ps]
                spread = (
                    f"; A/A (a second off {'node' if key == 'p99' else 'turn'} the same way): median "
                    f"{_median(a_a):.2f}, worst {_furthest_from_one(a_a):.2f}, by round {by_pair(aa)}"
                )
            note = f"1.00 = free; {rule}; by round {by_pair(key)}{spread}; load by round {loads}"
            figures.append(Figure("observability cost", f"{what}, median of {len(ps)} rounds", _median(values),
                                  "ratio", None, note))  # fmt: skip
            figures.append(Figure("observability cost", f"{what}, worst round", worst(values), "ratio", None,
                                  f"by round {by_pair(key)}{spread}"))  # fmt: skip
            if aa:
                figures.append(Figure("observability cost", f"{what}: its A/A, the twin off / off, median",
                                      _median(a_a), "ratio", None, f"by round {by_pair(aa)}"))  # fmt: skip
        figures.append(Figure("observability cost", f"drain, {mode} rounds: off / on / twin off",
                              _median([p["off_rate"] for p in ps]), "jobs/s", None,
                              f"off {by_pair('off_rate', '{:,.0f}')}; on {by_pair('on_rate', '{:,.0f}')}; "
                              f"twin {by_pair('twin_rate', '{:,.0f}')}; {jobs:,} Redis-PING jobs a turn, "
                              f"{ctx.scale.io_slots} slots"))  # fmt: skip
        figures.append(Figure("observability cost", f"CPU per job, {mode} rounds: off / on / twin off",
                              _median([p["off_cpu"] for p in ps]), "ms", None,
                              f"off {by_pair('off_cpu', '{:.3f}')}; on {by_pair('on_cpu', '{:.3f}')}; "
                              f"twin {by_pair('twin_cpu', '{:.3f}')} (server event loop + threads, drain only)"))  # fmt: skip
        figures.append(Figure("observability cost", f"pick-up p99, {mode} rounds: off / on", _median([p["p99_off_ms"] for p in ps]),
                              "ms", None, f"off {by_pair('p99_off_ms', '{:.1f}')}; on {by_pair('p99_on_ms', '{:.1f}')}; "
                              f"{by_pair('pickups', '{:,.0f}')} jobs a node"))  # fmt: skip
        figures.append(Figure("observability cost", f"{mode}: CPU added per job (in process)",
                              _median([p["added_us"] for p in ps]), "us", None,
                              f"{obs_hooks.JOBS:,} jobs, best of {obs_hooks.REPEATS}, once a pair: {by_pair('added_us', '{:.1f}')}; "
                              f"beside the pair's off node CPU per job {by_pair('off_cpu', '{:.3f}')} ms"))  # fmt: skip
    figures.append(Figure("observability cost", "OTLP bytes exported (tracing turns)", exported / 1e6, "MB"))
    return figures


async def _purged(client: BenchClient) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = (await client._http.get("/metrics")).text
    return sum(x.value for f in text_string_to_metric_families(text) if f.name == "jobdeck_retention_purged"
               for x in f.samples if x.name.endswith("_total"))  # fmt: skip


WAVES = 3  # old queues whose jobs pass their retention at different times: three purge windows
FIRST_RETAIN = 30.0  # seconds the first old queue's jobs are kept; each next one WAVE_GAP longer
WAVE_GAP = 15.0
SETTLE = 1.0  # seconds after a purge window whose jobs count for neither side (its backlog drains)
STREAM = "obs-stream"
MAX_IN_FLIGHT = 64  # submits of the stream awaiting their answer at once


async def _stream(client: BenchClient, rate: float, until: Callable[[], bool], limit: float) -> dict[int, float]:
    """No-op jobs at `rate` a second until `until()` (or `limit` s): each job's send time (epoch s)."""
    loop = asyncio.get_running_loop()
    sent: dict[int, float] = {}
    tasks: set[asyncio.Task[None]] = set()

    async def one() -> None:
        t = time.time()
        job = await client.submit(noop_job(STREAM, delay=0))
        sent[int(job["id"])] = t

    start, i = loop.time(), 0
    while not until() and loop.time() - start < limit:
        due = start + i / rate
        if (wait := due - loop.time()) > 0:
            await asyncio.sleep(wait)
        elif wait < -0.1 or len(tasks) >= MAX_IN_FLIGHT:  # behind: skip the ticks missed, never a burst
            i = int((loop.time() - start) * rate) + 1  # (a backlog of requests slows the client's pool
            await asyncio.sleep(1 / rate)  # quadratically: it stalled this process once)
            continue
        task = asyncio.create_task(one())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        i += 1
    await asyncio.gather(*tasks)
    return sent


def _windows(samples: list[tuple[float, float]], sent: dict[int, float], pickup: dict[int, float],
             ) -> tuple[list[list[float]], list[list[float]], list[tuple[float, float, float]]]:  # fmt: skip
    """The stream's pick-ups (`pickup`: ms by job id) cut into windows by what the purge did at the send:
    quiet windows and purge windows in turn, the SETTLE s after a purge in neither. A purge window
    runs from one batch before the purged counter's first rise (a batch is counted once purged) to
    its last rise; rises closer than 2 s are one window. Also (jobs, seconds, jobs/s) of each
    purge window, the rate from its first rise to its last (whole batches, none half counted)."""
    rises = [(t, n - p) for (_, p), (t, n) in itertools.pairwise(samples) if n > p]
    spans: list[list[tuple[float, float]]] = []
    for t, d in rises:
        if spans and t - spans[-1][-1][0] < 2.0:
            spans[-1].append((t, d))
        else:
            spans.append([(t, d)])
    purges, rates = [], []
    for sp in spans:
        first, last = sp[0][0], sp[-1][0]
        batch = (last - first) / (len(sp) - 1) if len(sp) > 1 else 1.0
        purges.append((first - batch, last))
        if len(sp) > 1:
            jobs = sum(d for _, d in sp[1:])
            rates.append((jobs, last - first, jobs / (last - first)))
    quiet: list[list[float]] = [[]]
    during: list[list[float]] = []
    at = 0  # the next purge window
    for job_id, t in sorted(sent.items(), key=lambda kv: kv[1]):
        if (ms := pickup.get(job_id)) is None:
            continue
        while at < len(purges) and t > purges[at][1] + SETTLE:  # past a window and its settling
            at += 1
            quiet.append([])
        if at < len(purges) and t >= purges[at][0]:
            if t <= purges[at][1]:
                if len(during) <= at:
                    during.extend([] for _ in range(at + 1 - len(during)))
                during[at].append(ms)
            continue  # settling
        quiet[-1].append(ms)
    return [q for q in quiet if len(q) >= 50], [d for d in during if len(d) >= 50], rates


async def retention_cost(ctx: RunContext) -> list[Figure]:
    """One node, WAVES old queues drained at the start, each kept WAVE_GAP s longer than the one
    before, so the purge comes in windows with quiet between them; a steady stream (pick-up rate)
    runs through them all in a queue that is kept. Pick-up: from the client's send to the job's
    start, as tests/obs/test_retention_load.py measures it. The figure: the median over purge windows
    of each window's p99 against the median over quiet windows of theirs (same minutes, so a machine
    that gets busier or quieter moves both), with every window's p99 and the load."""
    s = ctx.scale
    if "retention" not in s.obs_parts:
        return []
    old = [f"obs-old-{i}" for i in range(WAVES)]
    kept = {STREAM: 0, "warm-up": 0, **{q: (FIRST_RETAIN + i * WAVE_GAP) / 86400 for i, q in enumerate(old)}}
    env = {"JOBDECK_JOB_RETENTION_DAYS": "1", "JOBDECK_RETENTION_INTERVAL_SECONDS": "1",
           "JOBDECK_QUEUE_RETENTION_DAYS": json.dumps(kept)}  # fmt: skip
    total = s.e2e_jobs * WAVES
    loop = asyncio.get_running_loop()
    loads = [_load()]
    async with ctx.server("retention", s.pickup_slots, env) as (srv, client):
        for q in old:
            await run_resumed(ctx, [srv], [client], queue=q)
        for job in [await client.submit(noop_job("warm-up")) for _ in range(4)]:
            await client.wait_for(job["id"], timeout=s.stall_seconds)
        samples: list[tuple[float, float]] = []
        stop = asyncio.Event()

        async def watch() -> None:
            while not stop.is_set():
                samples.append((time.time(), await _purged(client)))
                await asyncio.sleep(0.25)

        watcher = asyncio.create_task(watch())
        done_at: list[float] = []

        def finished() -> bool:  # every old job purged, and a quiet window after the last purge
            if samples and samples[-1][1] >= total and not done_at:
                done_at.append(loop.time())
            return bool(done_at) and loop.time() - done_at[0] > SETTLE + 4.0

        limit = FIRST_RETAIN + WAVES * WAVE_GAP + 120
        ctx.progress(f"stream at {s.pickup_rate:.0f}/s while {total:,} old jobs pass their retention in {WAVES} waves")
        sent = await _stream(client, s.pickup_rate, finished, limit)
        stop.set()
        await watcher
        await wait_for_state(client, STREAM, "succeeded", len(sent), poll=s.poll_seconds, stall=s.stall_seconds)
        ran = await all_jobs(client, STREAM)
    loads.append(_load())
    # pick-up from the client's send (the test's: a writer that makes submits wait counts) and from
    # the job's run_at (the submit's commit: the claim side alone)
    from_send = {
        int(j["id"]): (epoch(j["started_at"]) - sent[int(j["id"])]) * 1000 for j in ran if int(j["id"]) in sent
    }
    from_commit = {int(j["id"]): (epoch(j["started_at"]) - epoch(j["run_at"])) * 1000 for j in ran}
    quiet, during, rates = _windows(samples, sent, from_send)
    q99 = [percentile(sorted(w), 99) for w in quiet]
    d99 = [percentile(sorted(w), 99) for w in during]
    cq, cd, _ = _windows(samples, sent, from_commit)
    cq99, cd99 = [percentile(sorted(w), 99) for w in cq], [percentile(sorted(w), 99) for w in cd]
    purged = samples[-1][1] if samples else 0.0
    rate = sum(j for j, _, _ in rates) / sum(t for _, t, _ in rates) if rates else float("nan")
    load = f"load {loads[0]}-{loads[1]}"

    def ratio(during: list[float], quiet: list[float]) -> float:
        return _median(during) / _median(quiet) if during and quiet else float("nan")

    def listed(xs: list[float]) -> str:
        return ", ".join(f"{x:.1f}" for x in xs)

    return [
        Figure("retention", "purge rate (archive + delete)", rate, "jobs/s", None,
               f"{purged:,.0f} of {total:,} jobs purged; by window "
               + ", ".join(f"{r:,.0f} ({t:.1f} s)" for _, t, r in rates) + f"; {load}"),
        Figure("retention", "pick-up p99 from send, quiet, median of windows", _median(q99), "ms", None,
               f"{len(q99)} quiet windows, {sum(map(len, quiet)):,} jobs at {s.pickup_rate:.0f}/s; by window {listed(q99)}"),
        Figure("retention", "pick-up p99 from send, purging, median of windows", _median(d99), "ms", None,
               f"{len(d99)} purge windows, {sum(map(len, during)):,} jobs; by window {listed(d99)}"),
        Figure("retention", "pick-up p99 from send: purging / quiet", ratio(d99, q99), "ratio", None,
               f"as tests/obs/test_retention_load.py measures; the issue's floor: <= 2; worst purge window / median "
               f"quiet {ratio([max(d99, default=float('nan'))], q99):.2f}; {load}"),
        Figure("retention", "pick-up p99 from run_at, quiet / purging, medians", _median(cq99), "ms", None,
               f"purging {_median(cd99):.1f} ms; quiet by window {listed(cq99)}; purging by window {listed(cd99)}"),
        Figure("retention", "pick-up p99 from run_at: purging / quiet", ratio(cd99, cq99), "ratio", None,
               f"the claim side alone (from the submit's commit); worst purge window / median quiet "
               f"{ratio([max(cd99, default=float('nan'))], cq99):.2f}"),
    ]  # fmt: skip
