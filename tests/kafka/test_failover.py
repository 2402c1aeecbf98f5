"""Two `jobdeck server` nodes on one PostgreSQL relay to Kafka: exactly one holds the relay's lease;
when that node is SIGKILLed mid-stream the other takes over within seconds and the topic has every
seq, each job's events in order (after dropping the repeats at-least-once allows)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.client import JobDeckClient
from tests.conftest import ServerProcess, spawn_jobdeck, until
from tests.kafka.broker import Collector, TansuBroker
from tests.kafka.test_relay import keep_first_per_key
from tests.services import REDIS_URL, redis_problem

LEASE = 2.0


@pytest.fixture
def two_relaying_nodes(
    pg_url: str, tmp_path: Path, broker: TansuBroker
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    problem = redis_problem()
    if problem:
        pytest.skip(problem)
    env = {"JOBDECK_DATABASE_URL": pg_url, "JOBDECK_REDIS_URL": REDIS_URL, "JOBDECK_KAFKA_BOOTSTRAP": broker.bootstrap,
           "JOBDECK_RELAY_LEASE_SECONDS": str(LEASE)}  # fmt: skip
    nodes = [spawn_jobdeck(tmp_path / f"node{i}", "server", env=env) for i in (1, 2)]
    try:
        yield nodes[0], nodes[1]
    finally:
        for n in nodes:
            if n.proc.poll() is None:
                n.proc.terminate()
                try:
                    n.proc.wait(15)
                except subprocess.TimeoutExpired:
                    n.kill()


def holder_pid(stats: dict[str, object]) -> int | None:
    lag = stats["relays"].get("kafka") if isinstance(stats.get("relays"), dict) else None  # type: ignore[union-attr]
    holder = lag and lag.get("holder")
    return int(holder.split(":")[1]) if holder else None


async def test_the_relaying_node_is_killed_and_the_other_takes_over_with_no_gap(
    two_relaying_nodes: tuple[ServerProcess, ServerProcess], broker: TansuBroker
) -> None:
    a, b = two_relaying_nodes
    noop = {"task": {"kind": "python", "function": "agents.builtin:noop"}}

    async def load(client: JobDeckClient) -> None:
        while True:  # jobs with several events each: created, then paused and resumed
            ids = (await client.submit_batch([noop] * 10))["ids"]
            for action in ("pause", "resume"):
                await client.bulk(action, ids=ids)
            await asyncio.sleep(0.02)

    async with (
        JobDeckClient(a.url) as ca,
        JobDeckClient(b.url) as cb,
        Collector(broker.bootstrap, "jobdeck.events") as got,
    ):
        pid = await until(lambda: _holder(ca), 15, "one node to hold the relay's lease")
        holder, survivor, survivor_client = (a, b, cb) if pid == a.proc.pid else (b, a, ca)
        assert pid == holder.proc.pid
        loaders = [asyncio.create_task(load(c)) for c in (ca, cb)]
        await until(lambda: len(got.messages) > 400, 20, "the stream to flow from both nodes")
        loaders[0 if holder is a else 1].cancel()
        holder.kill()  # SIGKILL: no chance to give the lease up
        killed = time.monotonic()
        new = await until(lambda: _holder(survivor_client, not_pid=pid), 15, "the other node to take the lease")
        took = time.monotonic() - killed
        assert new == survivor.proc.pid and took < LEASE + 4, f"took over after {took:.1f} s"
        await asyncio.sleep(1.0)  # the survivor relays its own new events too
        for t in loaders:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        final = (await survivor_client.health())["last_seq"]
        kept = await until(lambda: _complete(got.messages, final), 30, f"every seq through {final} on the topic")
        assert len(kept) == len(set(kept)), "after dropping repeats, each seq once"
        by_job: dict[int, list[str]] = {}
        for m in got.messages:
            v = json.loads(m.value)
            by_job.setdefault(v["job_id"], []).append(v["type"])
        assert all(types[0] == "job.created" for types in by_job.values() if types), "a job's first event first"


async def _holder(client: JobDeckClient, not_pid: int | None = None) -> int | None:
    pid = holder_pid(await client.stats())
    return pid if pid is not None and pid != not_pid else None


def _complete(messages: list[object], final: int) -> list[int] | None:
    kept = keep_first_per_key(list(messages))
    return kept if set(kept) >= set(range(1, final + 1)) else None
