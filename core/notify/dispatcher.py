"""The dispatcher: sends due deliveries, each channel on its own, and records every attempt.

Deliveries wait in the store (core/store/notifications.py). The dispatcher claims due ones under a
lease (so nodes sharing a store never send one twice at once), hands each to its channel's few
workers, and records what the receiver said. A failed attempt is tried again after
`retry_delay` (1 s doubling to 60 s, with jitter) until the channel's `max_attempts`.

Each channel has a circuit breaker: after `OPEN_AFTER` failures in a row it stops sending, then
lets one probe through after a cool-down (1 s doubling to 60 s); the probe's success closes it and
makes every waiting delivery of the channel due at once. While it is open no attempt is spent, so
a receiver down for minutes loses nothing. Only failures while closed and failed probes count
toward the channel's auto-disable limit. A slow receiver holds only its own workers, and each
channel has its own keep-alive connections (core/notify/http1.py: httpx's layers were most of the
sending node's CPU; a shared httpx pool also made every send scan all channels' connections).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from core.idle import IdlePoll
from core.notify.http1 import Http1Client, proxied
from core.notify.senders import Sent, send_email, send_webhook
from core.store.notifications import AttemptResult

log = logging.getLogger("jobdeck.notify")

BACKOFF_FIRST, BACKOFF_MAX = 1.0, 60.0
OPEN_AFTER = 5  # failures in a row that open a channel's breaker
COOL_FIRST, COOL_MAX = 1.0, 60.0
POLL = 0.5  # seconds between claims when nothing woke the dispatcher
CLAIM_TTL = 60.0  # a claimed delivery is this node's for so long (another node takes it after a crash)
CLAIM_BATCH = 128  # deliveries per claim (the relay's sink hands over the new ones; claims carry the rest)
WORKERS_PER_CHANNEL = 8
QUEUED_PER_CHANNEL = 64  # claimed and waiting for a worker; past this the channel is not claimed for
CHANNEL_CACHE = 1.0  # seconds a channel's settings are reused before reading them again
DEFAULT_MAX_ATTEMPTS = 8
DEFAULT_DISABLE_AFTER = 20


def retry_delay(attempt: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds before attempt `attempt` + 1: 1, 2, 4 ... capped at 60, each +-20 % jitter (capped at 60)."""
    base = min(BACKOFF_MAX, BACKOFF_FIRST * 2.0 ** max(0, attempt - 1))
    return min(BACKOFF_MAX, base * (0.8 + 0.4 * rand()))


@dataclass
class Breaker:
    """One channel's circuit breaker (this node's view)."""

    failures: int = 0
    open_until: float = 0.0  # 0: closed
    cool: float = COOL_FIRST
    probing: bool = False

    def allows(self, now: float) -> bool:
        """Whether a send may start now (an open breaker lets one probe through after its cool-down)."""
        if not self.open_until:
            return True
        if self.probing or now < self.open_until:
            return False
        self.probing = True
        return True

    def is_open(self, now: float) -> bool:
        return bool(self.open_until) and (self.probing or now < self.open_until)

    def failed(self, now: float) -> bool:
        """Note a failure; whether it counts toward auto-disable (closed, or the probe)."""
        counts = not self.open_until or self.probing
        self.failures += 1
        if self.probing:
            self.probing = False
            self.cool = min(COOL_MAX, self.cool * 2)
            self.open_until = now + self.cool
        elif not self.open_until and self.failures >= OPEN_AFTER:
            self.cool = COOL_FIRST
            self.open_until = now + self.cool
        return counts

    def succeeded(self) -> bool:
        """Note a success; whether it closed an open breaker."""
        was_open = bool(self.open_until)
        self.failures, self.open_until, self.cool, self.probing = 0, 0.0, COOL_FIRST, False
        return was_open


@dataclass
class _Channel:
    queue: deque[dict[str, Any]] = field(default_factory=deque)
    workers: int = 0
    breaker: Breaker = field(default_factory=Breaker)
    settings: dict[str, Any] | None = None
    read_at: float = 0.0
    http: Http1Client = field(default_factory=Http1Client)  # its own keep-alive connections
    proxied_http: httpx.AsyncClient | None = None  # for a URL an environment proxy applies to

    proxy_checked: tuple[str, bool] | None = None  # (url, proxied(url)): the environment is read once per URL

    def client(self, url: str) -> Http1Client | httpx.AsyncClient:
        if self.proxy_checked is None or self.proxy_checked[0] != url:
            self.proxy_checked = (url, proxied(url))  # getproxies() scans os.environ: a third of a send's CPU
        if not self.proxy_checked[1]:
            return self.http
        if self.proxied_http is None:
            limits = httpx.Limits(max_connections=WORKERS_PER_CHANNEL, max_keepalive_connections=WORKERS_PER_CHANNEL)
            self.proxied_http = httpx.AsyncClient(limits=limits, follow_redirects=False)
        return self.proxied_http

    async def aclose(self) -> None:
        await self.http.aclose()
        if self.proxied_http is not None:
            await self.proxied_http.aclose()


class Dispatcher:
    """Claims and sends deliveries on this node until stopped."""

    def __init__(self, store: Any, clock: Callable[[], float], *, poll: float = POLL,
                 rand: Callable[[], float] = random.random) -> None:  # fmt: skip
        self.store = store
        self.clock = clock
        self.poll = poll
        self.rand = rand
        self._channels: dict[int, _Channel] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._workers: set[asyncio.Task[None]] = set()
        self._results: list[AttemptResult] = []  # attempts made, not yet written
        self._recorder: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start claiming and sending in the background."""
        self._task = asyncio.create_task(self._run(), name="jobdeck-notify-dispatcher")

    async def stop(self) -> None:
        """Stop; give back claimed deliveries not yet sent, so the next node sends them at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for t in list(self._workers):
            t.cancel()
        for t in list(self._workers):
            with contextlib.suppress(BaseException):
                await t
        if self._recorder is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._recorder, 10)
        unsent = [d["id"] for ch in self._channels.values() for d in ch.queue]
        channels = list(self._channels.values())
        self._channels.clear()
        if unsent:
            with contextlib.suppress(Exception):
                await self.store.release_deliveries(unsent)
        for ch in channels:
            await ch.aclose()

    def wake(self) -> None:
        """New deliveries were written: claim now rather than at the next poll."""
        self._wake.set()

    def can_take(self, channel_id: int) -> bool:
        """Whether deliveries written now for the channel may be handed to this node directly (it
        sends, its breaker is closed and its queue has room); else they wait for a claim."""
        ch = self._channels.get(channel_id)
        if self._task is None:
            return False
        # closed only: handed to a channel that waits for (or runs) its probe, each delivery would
        # be given back at once, a store write per relay round for as long as the probe hangs
        return ch is None or (not ch.breaker.open_until and len(ch.queue) < QUEUED_PER_CHANNEL)

    def take(self, deliveries: list[dict[str, Any]]) -> None:
        """Send deliveries the caller wrote already claimed for this node (CLAIM_TTL): the relay's
        sink hands over what a round raised, one store write (and a wake-up) sooner than a claim."""
        for d in deliveries:
            ch = self._channel(d["channel_id"])
            ch.queue.append(d)
            self._spawn(d["channel_id"], ch)

    def breaker_of(self, channel_id: int) -> Breaker:
        """A channel's breaker as this node sees it."""
        return self._channel(channel_id).breaker

    def _channel(self, channel_id: int) -> _Channel:
        ch = self._channels.get(channel_id)
        if ch is None:
            ch = self._channels[channel_id] = _Channel()
        return ch

    async def _run(self) -> None:
        idle = IdlePoll(self.poll)  # new deliveries wake it; retries and cool-downs end at a known time
        timeout = self.poll
        while True:
            woken = False
            with contextlib.suppress(TimeoutError):
                woken = await asyncio.wait_for(self._wake.wait(), timeout)
            self._wake.clear()
            try:
                busy, soonest = await self._claim(peek=not woken)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the store is away: the deliveries wait there; try at the next poll
                log.warning("notifications: cannot claim deliveries: %s", exc)
                busy, soonest = True, None
            timeout = idle.after(woken or busy)
            if soonest is not None:
                timeout = min(timeout, max(0.0, soonest - self.clock()))

    async def _claim(self, *, peek: bool = False) -> tuple[bool, float | None]:
        """Claim due deliveries; with `peek` (a poll nothing woke), first read when the next is due:
        a claim is a store write even when it takes nothing. Returns whether this node has work in
        hand (claimed, sending, attempts not written yet: a retry's time is read once written; or a
        channel it skips: a full queue, an open breaker), and when the next delivery is due if it
        claimed nothing."""
        now = self.clock()
        skip = [cid for cid, ch in self._channels.items()
                if ch.breaker.is_open(now) or len(ch.queue) >= QUEUED_PER_CHANNEL]  # fmt: skip
        in_hand = bool(skip or self._workers or self._results or (self._recorder and not self._recorder.done()))
        if peek:
            soonest = await self.store.next_delivery_at(now, skip)
            if soonest is None or soonest > now:
                return in_hand, soonest
        got = await self.store.claim_deliveries(now, CLAIM_TTL, CLAIM_BATCH, skip)
        for d in got:
            ch = self._channel(d["channel_id"])
            ch.queue.append(d)
            self._spawn(d["channel_id"], ch)
        if len(got) == CLAIM_BATCH:
            self._wake.set()  # more are due
        return bool(got) or in_hand, None

    def _spawn(self, channel_id: int, ch: _Channel) -> None:
        while ch.workers < min(WORKERS_PER_CHANNEL, len(ch.queue)):
            ch.workers += 1
            t = asyncio.create_task(self._work(channel_id, ch))
            self._workers.add(t)
            t.add_done_callback(self._workers.discard)

    async def _settings(self, channel_id: int, ch: _Channel) -> dict[str, Any] | None:
        if ch.settings is None or time.monotonic() - ch.read_at > CHANNEL_CACHE:
            try:
                ch.settings = await self.store.get_channel(channel_id)
            except Exception:  # deleted (NotFound), or the store is away
                ch.settings = None
            ch.read_at = time.monotonic()
        return ch.settings

    async def _work(self, channel_id: int, ch: _Channel) -> None:
        try:
            while ch.queue:
                channel = await self._settings(channel_id, ch)
                if channel is None or not channel["enabled"] or not ch.breaker.allows(self.clock()):
                    await self._give_back(ch)
                    return
                if not ch.queue:  # another worker took the last one while this one read the settings
                    return
                d = ch.queue.popleft()
                await self._attempt(channel, ch, d)
        finally:
            ch.workers -= 1

    async def _give_back(self, ch: _Channel) -> None:
        unsent = [d["id"] for d in ch.queue]
        ch.queue.clear()
        if unsent:
            with contextlib.suppress(Exception):
                await self.store.release_deliveries(unsent)

    async def _attempt(self, channel: dict[str, Any], ch: _Channel, d: dict[str, Any]) -> None:
        try:
            if channel["kind"] == "webhook":
                sent = await send_webhook(ch.client(channel["config"]["url"]), channel, d, self.clock())
            else:
                sent = await send_email(channel, d)
        except Exception as exc:  # a bug in a sender: the attempt fails, the dispatcher goes on
            log.exception("notifications: sending %d to %s failed", d["id"], channel["name"])
            sent = Sent(False, None, 0.0, None, f"internal error: {type(exc).__name__}")
        now = self.clock()
        cfg = channel["config"]
        if sent.ok:
            counts = True
            if ch.breaker.succeeded():
                log.info("notifications: channel %s answers again; sending what waited", channel["name"])
                with contextlib.suppress(Exception):
                    await self.store.hurry_channel(channel["id"])
                self._wake.set()
        else:
            counts = ch.breaker.failed(now)
        attempt = d["attempts"] + 1
        retry_at = None
        if not sent.ok and attempt < d["max_attempts"]:
            retry_at = now + retry_delay(attempt, self.rand)
        result = AttemptResult(d["id"], channel["id"], sent.ok, sent.status, sent.latency_ms, sent.response,
                               sent.error, retry_at, counts, int(cfg.get("disable_after", DEFAULT_DISABLE_AFTER)))  # fmt: skip
        self._results.append(result)
        if self._recorder is None or self._recorder.done():
            self._recorder = asyncio.create_task(self._record())

    async def _record(self) -> None:
        """Write the attempts that finished meanwhile, many in one store call (a thousand a second
        would otherwise be a thousand writes); the worker goes on to its next delivery at once."""
        while self._results:
            await asyncio.sleep(0)  # let the sends finishing in this turn of the loop join the batch
            batch, self._results = self._results, []
            try:
                disabled = await self.store.record_attempts(batch)
            except Exception as exc:  # the claims lapse and the deliveries are sent again: at least once
                log.warning("notifications: cannot record %d attempts: %s", len(batch), exc)
                continue
            for c in disabled:
                log.warning("notifications: channel %s disabled: %s", c["name"], c["disabled_reason"])
                self._channel(int(c["id"])).settings = None
