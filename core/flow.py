"""Flow control: what a claim may take from a queue, as pure decisions over counts the store supplies.

A queue may be paused, cap how many of its jobs run at once (`concurrency`), and cap how many
start per second (`rate_limit`, a token bucket holding up to `rate_burst` starts). The stores
keep the settings and the bucket in the `queues` row and apply these decisions inside the claim's
transaction, under the queue's lock (PostgreSQL: an advisory lock; SQLite: the one writer), so a
limit holds across every node, exactly. Nothing in this module does I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: The queue settings an operator changes (the `queues` columns of the same names), with their defaults.
SETTINGS: dict[str, Any] = {"paused": False, "concurrency": None, "rate_limit": None, "rate_burst": None}
RATE_MAX = 1_000_000.0  # jobs/s: far past what one store can start
BURST_OF_A_TENTH = 0.1  # seconds of the rate a bucket holds when no burst is set


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """One queue's settings as the engine and the claim use them."""

    paused: bool = False
    concurrency: int | None = None
    rate_limit: float | None = None  # jobs started per second, across every node
    rate_burst: int | None = None  # starts the bucket holds; None: default_burst(rate_limit)

    @classmethod
    def of(cls, view: dict[str, Any]) -> QueueLimits:
        """From a queue view (or row dict) carrying the SETTINGS keys."""
        return cls(**{k: view.get(k, d) for k, d in SETTINGS.items()})

    @property
    def held(self) -> bool:
        """True if a claim must count before it takes from this queue (see the stores' per-queue claims)."""
        return self.paused or self.concurrency is not None or self.rate_limit is not None

    @property
    def burst(self) -> int:
        """How many starts the bucket holds when full."""
        return self.rate_burst if self.rate_burst is not None else default_burst(self.rate_limit or 0.0)


UNLIMITED = QueueLimits()


def default_burst(rate: float) -> int:
    """A tenth of a second's worth of starts, at least one: smooth, yet a dispatcher that is a few
    milliseconds late does not lose the tokens it would have had."""
    return max(1, math.ceil(rate * BURST_OF_A_TENTH))


@dataclass(frozen=True, slots=True)
class Bucket:
    """A token bucket as stored: `tokens` left at time `at` (None, None: full, never used)."""

    tokens: float | None
    at: float | None

    def level(self, limits: QueueLimits, now: float) -> float:
        """Tokens in the bucket at `now`: what was left, refilled at the rate, up to the burst."""
        burst = float(limits.burst)
        if self.tokens is None or self.at is None or limits.rate_limit is None:
            return burst
        return min(burst, self.tokens + max(0.0, now - self.at) * limits.rate_limit)

    def room(self, limits: QueueLimits, now: float) -> int:
        """How many jobs may start at `now` (any number if the queue has no rate limit)."""
        if limits.rate_limit is None:
            return 1 << 62
        return math.floor(self.level(limits, now) + 1e-9)

    def take(self, limits: QueueLimits, now: float, started: int) -> Bucket:
        """The bucket after `started` jobs started at `now` (a clock a moment behind another node's
        never refills it twice: time only moves forward)."""
        if limits.rate_limit is None:
            return self
        at = now if self.at is None else max(self.at, now)
        return Bucket(self.level(limits, now) - started, at)

    def next_token_at(self, limits: QueueLimits, now: float) -> float | None:
        """When the next whole token is in the bucket, if it is empty now; None if one is there."""
        if limits.rate_limit is None:
            return None
        level = self.level(limits, now)
        if level >= 1.0 - 1e-9:
            return None
        return now + (1.0 - level) / limits.rate_limit


def claim_room(limits: QueueLimits, running: int, bucket: Bucket, now: float, asked: int) -> int:
    """How many jobs a claim may take from the queue now: the least of what was asked, the free part
    of its concurrency limit and the tokens of its rate limit (0 if paused)."""
    if limits.paused:
        return 0
    room = asked
    if limits.concurrency is not None:
        room = min(room, limits.concurrency - running)
    room = min(room, bucket.room(limits, now))
    return max(0, room)


def rate_text(rate: float) -> str:
    """A rate as people say it: '10/s', '0.5/s' (one every 2 s)."""
    shown = f"{rate:g}/s"
    return shown if rate >= 1 else f"{shown} (one every {1 / rate:g} s)"


def waiting_reason(queue: str, limits: QueueLimits, running: int, bucket: Bucket, now: float) -> str | None:
    """Why a queued job of `queue` is held by the queue's own limits now (None: they let it start)."""
    if limits.paused:
        return f"queue {queue!r} is paused"
    if limits.concurrency == 0:
        return f"queue {queue!r} has concurrency 0: none of its jobs start until the limit is raised or removed"
    if limits.concurrency is not None and running >= limits.concurrency:
        return f"queue {queue!r} is at its concurrency limit: {running} of {limits.concurrency} running"
    if limits.rate_limit is not None and bucket.room(limits, now) < 1:
        return (f"queue {queue!r} is at its rate limit of {rate_text(limits.rate_limit)} "
                f"(burst {limits.burst})")  # fmt: skip
    return None
