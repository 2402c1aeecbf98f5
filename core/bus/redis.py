"""The Redis event bus: committed events reach the subscribers of every node, in seq order.

Each node publishes the events it commits to one Redis pub/sub channel and hands the
events other nodes published to its own subscribers. Redis is only the fast path: the
store is the record. Sequence numbers are global and gap-free (they come from the
store), so a node knows exactly which event comes next; one that is missing (still in
flight from another node, lost while Redis was down, or never published because that
node died right after its commit) is waited for briefly and then read from the store.
So subscribers see every event once, in order, whichever node committed it; with Redis
down they still do, a little later, and this node's own events are never held up by
Redis at all unless they follow a missing one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any, Protocol

import orjson
from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from core.bus.local import LocalBus, Subscription
from core.store.base import Event, EventFilter

log = logging.getLogger("jobdeck.bus")

CHANNEL = "jobdeck:events"
GAP_WAIT = 0.25  # seconds a missing seq may be in flight before it is read from the store
SAFETY_POLL = 1.0  # seconds between reads of the store for events nobody announced
FILL_PAGE = 1000
MAX_HELD = 50_000  # events held behind a gap before order is given up (clients resume with since)
BACKOFF_MAX = 5.0


class EventSource(Protocol):
    """Where missing events are read from: the store."""

    async def last_seq(self) -> int: ...
    async def events_since(self, seq: int, limit: int, flt: EventFilter | None = None) -> list[Event]: ...


def _encode(node: str, events: list[Event]) -> bytes:
    rows = [[e.seq, e.ts, e.type, e.job_id, e.queue, e.body.decode()] for e in events]
    return orjson.dumps({"node": node, "events": rows})


def _decode(raw: bytes) -> tuple[str, list[Event]]:
    msg = orjson.loads(raw)
    return str(msg["node"]), [Event(s, ts, t, j, q, b.encode()) for s, ts, t, j, q, b in msg["events"]]


class RedisBus:
    """A Bus (see core/bus/local.py) shared by several nodes through Redis pub/sub."""

    def __init__(self, url: str, channel: str = CHANNEL, *, gap_wait: float = GAP_WAIT) -> None:
        self.url = url
        self.channel = channel
        self.node_id = uuid.uuid4().hex
        self.gap_wait = gap_wait
        self.connected = False
        self._local = LocalBus()
        self._source: EventSource | None = None
        self._next: int | None = None  # the seq subscribers get next; None until started
        self._held: dict[int, Event] = {}
        self._gap_since: float | None = None
        self._fill_now = False
        self._wake_fill = asyncio.Event()
        self._outbox: list[Event] = []
        self._wake_publish = asyncio.Event()
        self._redis: Redis | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # -- life

    async def start(self, source: EventSource) -> None:
        """Start following the cluster's events from the store's newest one on."""
        self._source = source
        self._next = await source.last_seq() + 1
        self._redis = Redis.from_url(
            self.url, retry=Retry(NoBackoff(), 0), socket_connect_timeout=2.0, health_check_interval=5
        )
        self._tasks = [
            asyncio.create_task(self._listen(), name="jobdeck-redis-listen"),
            asyncio.create_task(self._publish_loop(), name="jobdeck-redis-publish"),
            asyncio.create_task(self._fill_loop(), name="jobdeck-redis-fill"),
        ]

    async def close(self) -> None:
        """Stop following; local subscribers keep their buffers."""
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []
        if self._redis is not None:
            with contextlib.suppress(Exception):
                await self._redis.aclose()
            self._redis = None
        self.connected = False

    # -- the Bus protocol

    def publish(self, events: list[Event]) -> None:
        """Deliver events of this node to local subscribers (in seq order) and to other nodes."""
        if not events:
            return
        live = [e for e in events if e.seq is None]
        if live:  # streamed only (live output): no order to keep, nothing to fill
            self._local.publish(live)
        stored = [e for e in events if e.seq is not None] if live else events
        if stored:
            self._accept(stored)
        if self.connected and self._tasks:
            self._outbox.extend(events)
            self._wake_publish.set()

    def subscribe(self, maxsize: int = 20_000) -> Subscription:
        """A buffer of this node's and every other node's events, in seq order."""
        return self._local.subscribe(maxsize)

    # -- order

    def _accept(self, events: list[Event]) -> None:
        if self._next is None:  # not started: nothing to order against
            self._local.publish(events)
            return
        for e in events:
            if e.seq is not None and e.seq >= self._next:
                self._held[e.seq] = e
        run: list[Event] = []
        while self._next in self._held:
            run.append(self._held.pop(self._next))
            self._next += 1
        if run:
            self._local.publish(run)
        if not self._held:
            self._gap_since = None
        elif self._gap_since is None or run:
            self._gap_since = time.monotonic()
            self._wake_fill.set()
        if len(self._held) > MAX_HELD:
            first = min(self._held)
            log.warning("events %d..%d could not be read; subscribers resume after them", self._next, first - 1)
            self._next = first
            self._accept([])

    async def _fill_loop(self) -> None:
        """Read from the store what no message brought: a gap that outlived GAP_WAIT, and,
        every SAFETY_POLL, anything committed elsewhere that was never announced."""
        while True:
            timeout = SAFETY_POLL
            if self._gap_since is not None:
                timeout = max(0.0, self._gap_since + self.gap_wait - time.monotonic())
            if not self._fill_now:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake_fill.wait(), timeout)
                    self._wake_fill.clear()
                    continue  # a new gap or a reconnection: look again at what to wait for
            self._fill_now = False
            try:
                await self._fill()
            except Exception as exc:
                log.warning("could not read missing events from the store: %s", exc)
                await asyncio.sleep(SAFETY_POLL)

    async def _fill(self) -> None:
        assert self._source is not None and self._next is not None
        while True:
            after = self._next - 1
            page = await self._source.events_since(after, FILL_PAGE)
            if page and page[0].seq is not None and page[0].seq > after + 1 and self._next == after + 1:
                # The store is complete up to what it has: anything below was pruned.
                log.warning("events %d..%d were pruned before this node saw them", after + 1, page[0].seq - 1)
                self._next = page[0].seq
            self._accept(page)
            if len(page) < FILL_PAGE:
                return

    # -- Redis

    async def _listen(self) -> None:
        delay = 0.1
        while True:
            assert self._redis is not None
            pubsub: PubSub = self._redis.pubsub()
            try:
                await pubsub.subscribe(self.channel)
                if not self.connected:
                    log.info("event bus connected to Redis at %s", _where(self.url))
                self.connected = True
                delay = 0.1
                self._fill_now = True  # whatever was missed while away is read from the store now
                self._wake_fill.set()
                while True:
                    msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if msg is not None and msg.get("type") == "message":
                        self._on_message(msg["data"])
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                if self.connected:
                    log.warning(
                        "event bus lost Redis at %s (%s); events of other nodes now come from the store",
                        _where(self.url),
                        exc,
                    )
                self.connected = False
                self._outbox.clear()
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)

    def _on_message(self, raw: Any) -> None:
        try:
            node, events = _decode(raw)
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed message on %s", self.channel)
            return
        if node == self.node_id:
            return
        live = [e for e in events if e.seq is None]
        if live:
            self._local.publish(live)
        self._accept([e for e in events if e.seq is not None])

    async def _publish_loop(self) -> None:
        while True:
            await self._wake_publish.wait()
            self._wake_publish.clear()
            events, self._outbox = self._outbox, []
            if not events or self._redis is None:
                continue
            try:
                await self._redis.publish(self.channel, _encode(self.node_id, events))
            except (RedisError, OSError) as exc:
                # Other nodes read these from the store; the listener notices the outage.
                log.debug("could not publish %d events: %s", len(events), exc)


def _where(url: str) -> str:
    return url.split("@")[-1]
