"""One relay: take the lease, read events after the cursor, deliver, move the cursor (see __init__)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from core.bus import Bus
from core.bus.local import LocalBus, Subscription
from core.idle import IdlePoll
from core.model import utcnow
from core.store.base import Event
from core.store.relay_cursors import RelayLease, RelayPosition

log = logging.getLogger("jobdeck.relay")

IDLE_POLL = 1.0  # seconds between reads when no commit woke the relay, doubling while idle (core/idle.py)
# Seconds between writes of the acknowledged position. Each write is a durable commit: written after
# every round, a relay that follows single submits doubled their commits (1.94 per submit, `./dev
# bench --only single`). After a crash the sink sees again at most this long's events, plus a round.
POSITION_EVERY = 0.25
BACKOFF_FIRST, BACKOFF_MAX = 0.2, 5.0
REMIND_EVERY = 300.0  # seconds between "still cannot reach" lines during a long outage
LAG_LOG_EVERY = 30.0  # seconds between lag lines while the relay is behind
LAG_WORTH_SAYING = 5.0  # seconds behind before the log mentions it


class SinkUnavailable(Exception):
    """The sink's destination cannot be reached now (the relay retries; the message says why)."""


class Sink(Protocol):
    """Where a relay delivers events (the contract is in core/relay/__init__.py)."""

    name: str

    async def open(self) -> None: ...
    async def deliver(self, events: Sequence[Event]) -> int: ...
    async def close(self) -> None: ...


class RelayStore(Protocol):
    """What a relay needs of the store (both stores have it: core/store/relay_cursors.py)."""

    async def events_since(self, seq: int, limit: int) -> list[Event]: ...
    async def last_seq(self) -> int: ...
    async def claim_relay(self, name: str, holder: str, ttl: float) -> RelayLease | None: ...
    async def advance_relay(self, lease: RelayLease, acked_seq: int, ttl: float) -> RelayLease | None: ...
    async def release_relay(self, lease: RelayLease) -> None: ...
    async def relay_positions(self) -> list[RelayPosition]: ...


class Reader(Protocol):
    """What a relay reads, in order after its cursor: the events table by default, or another
    append-only table by id (the audit log: core/relay/kafka.py AuditReader). `live` says whether
    the bus carries the same rows (events do; then a relay that keeps up reads nothing from the
    store); otherwise the bus only wakes the relay and every round reads the store."""

    live: bool

    async def since(self, position: int, limit: int) -> list[Event]: ...


class EventsReader:
    """The events table: what every relay reads unless told otherwise."""

    live = True

    def __init__(self, store: RelayStore) -> None:
        self.store = store

    async def since(self, position: int, limit: int) -> list[Event]:
        return await self.store.events_since(position, limit)


_NO_WAKE = Subscription(LocalBus(), 0)  # before the first pump: a bus that never brings anything


class LeaseLost(Exception):
    """Another node holds the relay's lease now (or ours lapsed while the store was away)."""


def node_identity() -> str:
    """A holder name unique to this process: host, pid and a random tag (a restarted node is new)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


async def relay_lag(store: Any, now: float) -> dict[str, Any]:
    """Every relay's position and lag as /v1/stats shows it ({} when no relay ever ran)."""
    positions = getattr(store, "relay_positions", None)
    if positions is None:
        return {}
    found: list[RelayPosition] = await positions()
    if not found:
        return {}
    last = await store.last_seq()
    out = {p.name: p.view(last, now) for p in found if p.name not in AUDIT_RELAYS}
    for p in found:
        if p.name in AUDIT_RELAYS:  # its position is an audit entry's id, not an event's seq
            out[p.name] = await _audit_view(store, p, now)
    return out


AUDIT_RELAYS = frozenset({"kafka-audit"})  # relays that read the audit log (core/relay/kafka.py)


async def _audit_view(store: Any, p: RelayPosition, now: float) -> dict[str, Any]:
    from core.store.audit import AuditFilter

    newest = await store.list_audit(AuditFilter(), None, 1)
    last = int(newest[0]["id"]) if newest else p.acked_seq
    nxt = await store.audit_after(p.acked_seq, 1) if last > p.acked_seq else []
    next_ts = datetime.fromisoformat(nxt[0]["at"].replace("Z", "+00:00")).timestamp() if nxt else None
    return dataclasses.replace(p, next_ts=next_ts).view(last, now)


class Relay:
    """Delivers the events table to one sink, while this node holds the sink's lease."""

    def __init__(
        self,
        store: RelayStore,
        bus: Bus,
        sink: Sink,
        *,
        lease_seconds: float = 5.0,
        batch: int = 5000,
        holder: str | None = None,
        clock: Callable[[], float] = utcnow,
        reader: Reader | None = None,
    ) -> None:
        self.store = store
        self.reader: Reader = reader or EventsReader(store)
        self.bus = bus
        self.sink = sink
        self.lease_seconds = lease_seconds
        self.batch = batch
        self.holder = holder or node_identity()
        self.clock = clock
        self.lease: RelayLease | None = None
        self.acked = 0  # the last seq the sink acknowledged (written to the store after each round)
        self._task: asyncio.Task[None] | None = None
        self._buffer: list[Event] = []  # read, not yet acknowledged: seqs acked+1, acked+2, ...
        self._ahead: asyncio.Task[list[Event]] | None = None  # the next read, while a round is delivered
        self._written = 0  # the last position written to the store
        self._written_at = 0.0  # when (time.monotonic())
        self._wake: Subscription = _NO_WAKE  # the bus, while pumping
        self._live = False  # caught up: the bus brings every event after the buffer
        self._polled_at = 0.0  # the last read of the store (time.monotonic())
        self._poll = IdlePoll(IDLE_POLL)  # reads of the store nothing announced: what a missed wake-up costs
        self._down_since: float | None = None  # when the sink stopped answering (None: it answers)
        self._reminded = 0.0

    # -- life

    def start(self) -> None:
        """Run the relay in the background until `stop`."""
        self._task = asyncio.create_task(self.run(), name=f"jobdeck-relay-{self.sink.name}")

    async def stop(self) -> None:
        """Stop relaying and give the lease up, so another node takes over at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run(self) -> None:
        """Wait for the lease, relay while holding it; again when it is lost. Never returns."""
        wait = self.lease_seconds / 3
        while True:
            try:
                lease = await self.store.claim_relay(self.sink.name, self.holder, self.lease_seconds)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the store is away: try again, the lease will wait
                log.warning("%s relay: cannot read its lease: %s", self.sink.name, exc)
                lease = None
            if lease is None:
                await asyncio.sleep(wait)
                continue
            self.lease, self.acked = lease, lease.acked_seq
            self._written = lease.acked_seq
            log.info("%s relay: this node relays now, from seq %d (lease epoch %d)", self.sink.name, self.acked,
                     lease.epoch)  # fmt: skip
            try:
                await self._hold()
            except LeaseLost:
                log.warning("%s relay: lost its lease (another node took it, or it lapsed); trying again",
                            self.sink.name)  # fmt: skip
            except Exception:  # a bug must not stop relaying for good: log it, start over from the store
                log.exception("%s relay: failed; starting again from its position in 1 s", self.sink.name)
                await asyncio.sleep(1.0)
            finally:
                await self._let_go()

    async def _let_go(self) -> None:
        lease = self.lease
        if lease is not None and self.acked > self._written:  # a clean stop repeats nothing
            with contextlib.suppress(Exception):
                await asyncio.shield(self._advance())
        self.lease = None
        with contextlib.suppress(Exception):
            await self.sink.close()
        if lease is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.store.release_relay(lease))

    async def _hold(self) -> None:
        """Relay and keep the lease fresh; whichever stops first (lease lost) stops the other."""
        pump = asyncio.create_task(self._pump(), name=f"jobdeck-relay-{self.sink.name}-pump")
        renew = asyncio.create_task(self._renew(), name=f"jobdeck-relay-{self.sink.name}-lease")
        try:
            done, _ = await asyncio.wait({pump, renew}, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()  # re-raise LeaseLost (or a bug)
        finally:
            for t in (pump, renew):
                t.cancel()
            for t in (pump, renew):
                with contextlib.suppress(asyncio.CancelledError, LeaseLost):
                    await t

    # -- the lease

    async def _advance(self) -> None:
        assert self.lease is not None
        acked, self._written_at = self.acked, time.monotonic()
        lease = await self.store.advance_relay(self.lease, acked, self.lease_seconds)
        if lease is None:
            log.debug("%s relay: another node holds the lease now", self.sink.name)
            raise LeaseLost
        self.lease = lease
        self._written = max(self._written, acked)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await self._advance()
            except LeaseLost:
                raise
            except Exception as exc:  # the store is away: keep the lease only as long as it lasts
                assert self.lease is not None
                if self.clock() >= self.lease.until:
                    raise LeaseLost from exc
                log.warning("%s relay: cannot renew its lease yet: %s", self.sink.name, exc)

    def _lease_fresh(self) -> bool:
        # Deliver only well inside the lease: past it another node may be delivering already.
        return self.lease is not None and self.clock() < self.lease.until - self.lease_seconds / 6

    # -- delivery

    async def _pump(self) -> None:
        self._backoff = BACKOFF_FIRST
        self._opened = False
        self._writing: asyncio.Task[None] | None = None
        self._lag_checked = time.monotonic()
        try:
            with self.bus.subscribe(maxsize=1000) as wake:
                self._wake, self._live = wake, False
                while True:
                    if not self._lease_fresh():
                        log.debug("%s relay: its lease is about to lapse", self.sink.name)
                        raise LeaseLost
                    read = await self._round()
                    self._poll.after(read != 0)
                    if read == 0:
                        await self._idle(wake)
        finally:
            for t in (self._writing, self._ahead):
                if t is not None and not t.done():
                    t.cancel()
                with contextlib.suppress(BaseException):
                    await t  # type: ignore[misc]
            self._buffer, self._ahead, self._wake = [], None, _NO_WAKE

    async def _round(self) -> int:
        """Open the sink if needed, deliver what follows the cursor; how many events were read."""
        if not self._opened:
            try:
                await self.sink.open()
                self._opened = True
            except (SinkUnavailable, OSError, TimeoutError) as exc:
                await self._retry_later(exc, "cannot reach")
                return -1
        events = await self._read()
        if not events:
            return 0
        try:
            upto = await self.sink.deliver(events)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._opened = False
            with contextlib.suppress(Exception):
                await self.sink.close()
            await self._retry_later(exc, "cannot deliver to")
            return -1
        self._backoff = BACKOFF_FIRST
        self._recovered(events[0])
        self.acked = max(self.acked, upto)
        self._buffer = [e for e in self._buffer if e.seq is not None and e.seq > upto]
        await self._write_position(due_only=True)
        if time.monotonic() - self._lag_checked >= LAG_LOG_EVERY:
            self._lag_checked = time.monotonic()
            self._say_lag(events[-1], upto)
        return len(events)

    async def _write_position(self, *, due_only: bool) -> None:
        """Write the acknowledged position beside the next round (one write at a time, so the next
        read does not wait for a commit); with `due_only`, only once POSITION_EVERY has passed."""
        if self.acked <= self._written or (self._writing is not None and not self._writing.done()):
            return
        if due_only and time.monotonic() - self._written_at < POSITION_EVERY:
            return
        if self._writing is not None:
            await self._writing  # done: re-raise LeaseLost
        self._writing = asyncio.create_task(self._advance())

    def _take_live(self, events: Sequence[Event]) -> None:
        """Append the bus's events that follow the buffer without a gap (they are committed), so a
        relay that keeps up reads nothing from the store. A gap (an overflow, another node's event
        not here yet) sends the next round to the store."""
        if not self.reader.live:
            return  # the bus carries events, not what this relay reads: it only woke the relay
        tail = (self._buffer[-1].seq or 0) if self._buffer else self.acked
        for e in events:
            if e.seq is None or e.seq <= tail:
                continue  # live output (never stored), or already read
            if e.seq != tail + 1:
                self._live = False
                return
            self._buffer.append(e)
            tail = e.seq

    async def _read(self) -> list[Event]:
        """The events after the cursor (up to `batch`): from the bus while it follows on, else from
        the store (at least every IDLE_POLL, longer while idle), with the next read started in the background while
        behind, so the next round does not wait for the store."""
        behind = False
        if self._ahead is not None:
            more, self._ahead = await self._ahead, None
            tail = self._buffer[-1].seq if self._buffer else self.acked
            self._buffer += [e for e in more if e.seq is not None and e.seq > (tail or 0)]
            behind = len(more) >= self.batch
        if self._wake.overflowed:
            self._wake.reset()
            self._live = False
        elif not behind:
            self._take_live(self._wake.take())
        if not self._buffer and (not self._live or time.monotonic() - self._polled_at >= self._poll.timeout):
            self._buffer = await self.reader.since(self.acked, self.batch)
            self._polled_at = time.monotonic()
            first = self._buffer[0].seq if self._buffer else None
            if self.acked and first is not None and first > self.acked + 1:
                log.warning("%s relay: events %d..%d were pruned before they were relayed (it was more than "
                            "event_retention_hours behind)", self.sink.name, self.acked + 1, first - 1)  # fmt: skip
            behind = len(self._buffer) >= self.batch
            self._live = not behind and self.reader.live  # caught up: what commits next comes on the bus
        if behind and self._ahead is None and len(self._buffer) < 2 * self.batch:
            after = self._buffer[-1].seq or 0
            self._ahead = asyncio.create_task(self.reader.since(after, self.batch))
        return self._buffer[: self.batch]

    async def _retry_later(self, exc: BaseException, what: str) -> None:
        self._failed(exc, what)
        await asyncio.sleep(self._backoff)
        self._backoff = min(self._backoff * 2, BACKOFF_MAX)

    async def _idle(self, wake: Subscription) -> None:
        """Wait for the bus (at most the idle poll, or until the position is due to be written)."""
        timeout = self._poll.timeout
        if self.acked > self._written:
            timeout = min(timeout, max(0.0, self._written_at + POSITION_EVERY - time.monotonic()))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # no task per wait, as wait_for makes (Python 3.11)
                self._take_live(await wake.get())
        if wake.overflowed:
            wake.reset()
            self._live = False
        await self._write_position(due_only=True)

    def _say_lag(self, newest_read: Event, upto: int) -> None:
        behind = self.clock() - newest_read.ts
        if behind >= LAG_WORTH_SAYING:
            log.info("%s relay: %.1f s behind (acknowledged through seq %d)", self.sink.name, behind, upto)

    def _failed(self, exc: BaseException, what: str) -> None:
        now = time.monotonic()
        reason = str(exc) or type(exc).__name__
        if self._down_since is None:
            self._down_since = self._reminded = now
            log.warning("%s relay: %s the %s sink (%s); events wait in the store and go out from seq %d when it "
                        "is back", self.sink.name, what, self.sink.name, reason, self.acked + 1)  # fmt: skip
        elif now - self._reminded >= REMIND_EVERY:
            self._reminded = now
            log.warning("%s relay: still %s the sink after %.0f s (%s); waiting from seq %d", self.sink.name, what,
                        now - self._down_since, reason, self.acked + 1)  # fmt: skip
        else:
            log.debug("%s relay: %s the sink: %s", self.sink.name, what, reason)

    def _recovered(self, oldest: Event) -> None:
        if self._down_since is not None:
            log.info("%s relay: the sink answers again after %.1f s; it was %.1f s behind, delivering from seq %d",
                     self.sink.name, time.monotonic() - self._down_since, max(0.0, self.clock() - oldest.ts),
                     oldest.seq)  # fmt: skip
            self._down_since = None
