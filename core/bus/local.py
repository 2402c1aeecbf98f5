"""The in-process event bus: committed events fan out to subscribers on this node."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

from core.store.base import Event


class Subscription:
    """A subscriber's buffer of live events. If it falls too far behind it is marked `overflowed`
    and must catch up from the store (events are durable there) before reading live again."""

    def __init__(self, bus: LocalBus, maxsize: int) -> None:
        self._bus = bus
        self._maxsize = maxsize
        self._buf: deque[Event] = deque()
        self._ready = asyncio.Event()
        self.overflowed = False

    def push(self, events: list[Event]) -> None:
        if self.overflowed:
            return
        if len(self._buf) + len(events) > self._maxsize:
            self._buf.clear()
            self.overflowed = True
        else:
            self._buf.extend(events)
        self._ready.set()

    async def get(self) -> list[Event]:
        """Wait for and take every buffered event (empty if overflowed)."""
        await self._ready.wait()
        self._ready.clear()
        out = list(self._buf)
        self._buf.clear()
        return out

    def take(self) -> list[Event]:
        """Take every buffered event without waiting (empty if none or overflowed)."""
        self._ready.clear()
        out = list(self._buf)
        self._buf.clear()
        return out

    def wake(self) -> None:
        """Make a pending get() return (with whatever is buffered, maybe nothing)."""
        self._ready.set()

    def reset(self) -> None:
        """Start reading live again after a catch-up from the store."""
        self._buf.clear()
        self.overflowed = False

    def close(self) -> None:
        self._bus.unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Bus(Protocol):
    """What the engine and the API need of a bus."""

    def publish(self, events: list[Event]) -> None: ...
    def subscribe(self, maxsize: int = 20_000) -> Subscription: ...


class LocalBus:
    """Fans out each committed batch of events to every subscriber, in order."""

    def __init__(self) -> None:
        self._subs: set[Subscription] = set()

    def publish(self, events: list[Event]) -> None:
        for sub in list(self._subs):
            sub.push(events)

    def subscribe(self, maxsize: int = 20_000) -> Subscription:
        sub = Subscription(self, maxsize)
        self._subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subs.discard(sub)
