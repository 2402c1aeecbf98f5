"""A circuit breaker per HTTP target host, in each agent: after too many failures in a short window
the breaker opens and the agent's http tasks for that host fail fast (saying why, without a request)
until it resets; then one trial request decides whether it closes again. So a host that is down is
not hammered by every retry of every job. Defaults (the seed's): open at 50 % failures within 10 s
(5 requests at least), reset after 30 s.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

WINDOW_SECONDS = 10.0
FAILURE_RATIO = 0.5
MIN_REQUESTS = 5  # fewer requests than this in the window never open the breaker
RESET_SECONDS = 30.0


@dataclass
class Breaker:
    """One host's breaker: its recent outcomes, and since when it is open (None: closed)."""

    window: float = WINDOW_SECONDS
    ratio: float = FAILURE_RATIO
    min_requests: int = MIN_REQUESTS
    reset: float = RESET_SECONDS
    outcomes: deque[tuple[float, bool]] = field(default_factory=deque)
    opened_at: float | None = None
    trial: bool = False  # half open: one request is finding out

    def allow(self, host: str, now: float) -> str | None:
        """None if a request may go now; otherwise why not (the breaker is open)."""
        if self.opened_at is None:
            return None
        if now - self.opened_at >= self.reset and not self.trial:
            self.trial = True
            return None
        left = max(0.0, self.reset - (now - self.opened_at))
        return (f"circuit open for host {host}: too many failures (over {self.ratio:.0%} of the requests in "
                f"{self.window:g} s); not sent, the breaker lets a trial through in {left:.0f} s")  # fmt: skip

    def record(self, now: float, ok: bool) -> None:
        """The outcome of a request that was sent."""
        if self.trial:
            self.trial = False
            self.opened_at = None if ok else now
            self.outcomes.clear()
            return
        self.outcomes.append((now, ok))
        while self.outcomes and self.outcomes[0][0] < now - self.window:
            self.outcomes.popleft()
        failed = sum(1 for _, good in self.outcomes if not good)
        if len(self.outcomes) >= self.min_requests and failed >= self.ratio * len(self.outcomes):
            self.opened_at = now


@dataclass
class Breakers:
    """The breakers of one agent process, by host."""

    clock: Callable[[], float] = time.monotonic
    by_host: dict[str, Breaker] = field(default_factory=dict)

    def allow(self, host: str) -> str | None:
        return self.by_host.setdefault(host, Breaker()).allow(host, self.clock())

    def record(self, host: str, ok: bool) -> None:
        self.by_host.setdefault(host, Breaker()).record(self.clock(), ok)


BREAKERS = Breakers()


def counts_as_failure(status: int | None) -> bool:
    """A transport error (None), a 5xx or a 429 says the host is unwell; other 4xx are the request's fault."""
    return status is None or status >= 500 or status == 429
