"""The Redis bus against a real Redis: every node's subscribers see every committed event once,
in seq order, whoever committed it, with Redis up, slow, down and back."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import orjson
import pytest

from core.bus.local import Subscription
from core.bus.redis import RedisBus
from core.store.base import Event, EventFilter, ephemeral_event
from tests.conftest import free_port


class MemoryStore:
    """The store's side of the bus: a gap-free list of committed events."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def commit(self, bus: RedisBus | None, *types: str) -> list[Event]:
        """Commit events as a node does, and hand them to that node's bus (None: the node died first)."""
        made = []
        for t in types:
            seq = len(self.events) + 1
            made.append(Event(seq, time.time(), t, None, None, orjson.dumps({"seq": seq, "type": t})))
            self.events.append(made[-1])
        if bus is not None:
            bus.publish(made)
        return made

    async def last_seq(self) -> int:
        return len(self.events)

    async def events_since(self, seq: int, limit: int, flt: EventFilter | None = None) -> list[Event]:
        return self.events[seq : seq + limit]


async def received(sub: Subscription, n: int, timeout: float = 5.0) -> list[Event]:
    """The next `n` events of a subscription (fails, saying what came, if they do not come in time)."""
    out: list[Event] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        left = deadline - time.monotonic()
        try:
            out += await asyncio.wait_for(sub.get(), max(0.0, left))
        except TimeoutError:
            raise AssertionError(f"expected {n} events within {timeout} s, got {[e.seq for e in out]}") from None
    return out


async def nothing_more(sub: Subscription, wait: float = 0.3) -> None:
    with pytest.raises(TimeoutError):
        extra = await asyncio.wait_for(sub.get(), wait)
        pytest.fail(f"expected no more events, got {[e.seq for e in extra]}")


async def until(predicate, timeout: float = 10.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.fixture
def channel() -> str:
    return f"jobdeck-test:{uuid.uuid4().hex}"


@pytest.fixture
async def nodes(redis_url: str, channel: str) -> AsyncIterator[tuple[MemoryStore, list[RedisBus]]]:
    """Three nodes' buses on one channel and one store."""
    store = MemoryStore()
    buses = [RedisBus(redis_url, channel) for _ in range(3)]
    for b in buses:
        await b.start(store)
    await until(lambda: all(b.connected for b in buses), what="the buses to connect")
    try:
        yield store, buses
    finally:
        for b in buses:
            await b.close()


def seqs(events: list[Event]) -> list[int | None]:
    return [e.seq for e in events]


async def test_events_of_one_node_reach_the_others_once_and_its_own_once(
    nodes: tuple[MemoryStore, list[RedisBus]],
) -> None:
    store, (a, b, c) = nodes
    subs = [bus.subscribe() for bus in (a, b, c)]
    store.commit(a, "job.created", "job.queued", "job.running")
    for sub in subs:
        assert seqs(await received(sub, 3)) == [1, 2, 3]
    for sub in subs:
        await nothing_more(sub)


async def test_interleaved_commits_of_several_nodes_arrive_in_seq_order_everywhere(
    nodes: tuple[MemoryStore, list[RedisBus]],
) -> None:
    store, (a, b, c) = nodes
    subs = [bus.subscribe() for bus in (a, b, c)]
    # Node a commits 1..3 but its bus hears of it only after b's 4..6 went out.
    first = store.commit(None, "x", "x", "x")
    store.commit(b, "y", "y", "y")
    await asyncio.sleep(0.05)
    a.publish(first)
    for i in range(20):
        store.commit((a, b, c)[i % 3], "z")
    for sub in subs:
        assert seqs(await received(sub, 26)) == list(range(1, 27))


async def test_an_event_nobody_announced_is_read_from_the_store(nodes: tuple[MemoryStore, list[RedisBus]]) -> None:
    store, (a, b, _) = nodes
    sub = b.subscribe()
    store.commit(None, "lost")  # its node died between commit and publish
    store.commit(a, "after")
    started = time.monotonic()
    assert seqs(await received(sub, 2)) == [1, 2]
    assert time.monotonic() - started < 2.0
    store.commit(None, "quiet")  # and nothing follows it: the safety poll finds it
    assert seqs(await received(sub, 1, timeout=3)) == [3]


async def test_live_output_crosses_nodes_unordered(nodes: tuple[MemoryStore, list[RedisBus]]) -> None:
    _, (a, b, _) = nodes
    sub_a, sub_b = a.subscribe(), b.subscribe()
    a.publish([ephemeral_event("job.output", 7, {"attempt": 1, "text": "hello\n"})])
    [got] = await received(sub_b, 1)
    assert (got.seq, got.type, got.job_id) == (None, "job.output", 7)
    assert orjson.loads(got.body)["data"]["text"] == "hello\n"
    [own] = await received(sub_a, 1)
    assert own.type == "job.output"
    await nothing_more(sub_a)


@pytest.fixture
def own_redis(redis_url: str) -> Iterator[tuple[str, int]]:
    """A Redis server of this test's own, to stop and start."""
    if not shutil.which("redis-server"):
        pytest.skip("redis-server is not installed")
    port = free_port()
    yield f"redis://127.0.0.1:{port}/0", port
    subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True, timeout=10)


def start_redis(port: int) -> None:
    cmd = ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
    subprocess.run([*cmd, "--appendonly", "no"], check=True, capture_output=True, timeout=10)


def stop_redis(port: int) -> None:
    subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True, timeout=10)


async def test_with_redis_down_local_delivery_goes_on_and_it_reconnects(own_redis: tuple[str, int]) -> None:
    url, port = own_redis
    store = MemoryStore()
    a, b = RedisBus(url, "jobdeck:events"), RedisBus(url, "jobdeck:events")
    await a.start(store)  # Redis is not running yet
    await b.start(store)
    try:
        sub_a, sub_b = a.subscribe(), b.subscribe()
        store.commit(a, "while-down")
        assert seqs(await received(sub_a, 1, timeout=1)) == [1], "a node's own events do not wait for Redis"
        assert seqs(await received(sub_b, 1, timeout=3)) == [1], "other nodes read it from the store"

        start_redis(port)
        await until(lambda: a.connected and b.connected, what="both buses to connect")
        store.commit(a, "up")
        t0 = time.monotonic()
        assert seqs(await received(sub_b, 1)) == [2]
        assert time.monotonic() - t0 < 0.5, "with Redis up, another node's event arrives at once"

        stop_redis(port)
        await until(lambda: not a.connected and not b.connected, what="both buses to notice Redis is gone")
        store.commit(b, "down-again", "down-again")
        assert seqs(await received(sub_b, 2, timeout=1)) == [3, 4]
        assert seqs(await received(sub_a, 3, timeout=3)) == [2, 3, 4]

        start_redis(port)
        await until(lambda: a.connected and b.connected, timeout=15, what="both buses to reconnect")
        store.commit(b, "back")
        assert seqs(await received(sub_a, 1)) == [5]
        assert seqs(await received(sub_b, 1)) == [5]
        await nothing_more(sub_a)
        await nothing_more(sub_b, 0.05)
    finally:
        await a.close()
        await b.close()


async def test_a_node_started_later_begins_at_the_newest_event(
    redis_url: str, channel: str, nodes: tuple[MemoryStore, list[RedisBus]]
) -> None:
    store, (a, *_) = nodes
    store.commit(a, "old", "old")
    late = RedisBus(redis_url, channel)
    await late.start(store)
    try:
        sub = late.subscribe()
        await until(lambda: late.connected, what="the late bus to connect")
        store.commit(a, "new")
        assert seqs(await received(sub, 1)) == [3]
        await nothing_more(sub)
    finally:
        await late.close()
