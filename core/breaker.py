"""Circuit breakers for http tasks, as pure decisions over a state the store keeps.

One breaker per (queue, target host), shared by every agent and node: the store holds its window
of outcomes and whether it is open, so a host that fails for one agent is held back for all. A
breaker opens when, over the last `window` seconds, at least `min_requests` requests were sent
and `failure_ratio` of them failed (a transport error, a 5xx or a 429); `reset` seconds later
one trial request (the half-open probe) may go, and its outcome closes the breaker or opens it
again. While it is open the queue's `breaker_mode` decides: `wait` holds the host's jobs back
(they are not started and use no attempt; they run once the breaker closes), `fail` fails their
attempt at once without sending anything (the job's backoff applies).

The window is two fixed buckets of `window` seconds, the older one weighted by how much of it is
still inside the window (a sliding-window counter): two numbers per bucket, whatever the traffic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from core.model import iso

MODES = ("wait", "fail")
FAILURE_RATIO = 0.5
WINDOW_SECONDS = 10.0
RESET_SECONDS = 30.0
MIN_REQUESTS = 5  # fewer requests than this in the window never open a breaker

Status = Literal["closed", "open", "half_open"]


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    """A queue's breaker numbers (the queues columns breaker_*; None there: these defaults)."""

    mode: str = "wait"
    failure_ratio: float = FAILURE_RATIO
    window: float = WINDOW_SECONDS
    reset: float = RESET_SECONDS
    min_requests: int = MIN_REQUESTS

    @classmethod
    def of(cls, queue: Any) -> BreakerSettings:
        """From a queue's settings (a view dict or core.flow.QueueLimits) carrying breaker_mode,
        breaker_failure_ratio, ... (None: the default)."""
        d = cls()

        def get(name: str, default: float) -> float:
            value = queue.get(name) if isinstance(queue, dict) else getattr(queue, name, None)
            return default if value is None else float(value)

        mode = queue.get("breaker_mode") if isinstance(queue, dict) else getattr(queue, "breaker_mode", None)
        return cls(mode or d.mode, get("breaker_failure_ratio", d.failure_ratio), get("breaker_window", d.window),
                   get("breaker_reset", d.reset), int(get("breaker_min_requests", d.min_requests)))  # fmt: skip


def breaker_key(task: dict[str, Any]) -> str | None:
    """The host an http task calls (its breaker's key); None for other tasks."""
    if task.get("kind") != "http":
        return None
    try:
        return urlsplit(str(task.get("url", ""))).netloc.lower() or None
    except ValueError:
        return None


def counts_as_failure(status: int | None) -> bool:
    """A transport error (None), a 5xx or a 429 says the host is unwell; other 4xx are the request's fault."""
    return status is None or status >= 500 or status == 429


@dataclass(slots=True)
class Breaker:
    """One (queue, host) breaker as stored: its two window buckets and, when open, since when,
    when the next trial may go, and the job sent as the trial."""

    queue: str
    key: str
    opened_at: float | None = None
    retry_at: float | None = None
    probe_job: int | None = None
    win_start: float = 0.0
    ok: int = 0
    failed: int = 0
    prev_ok: int = 0
    prev_failed: int = 0
    opened: int = 0  # times it opened (since it was first seen)

    def status(self, now: float) -> Status:
        """closed; open (nothing may go); half_open (its trial is out, or may go now)."""
        if self.opened_at is None:
            return "closed"
        if self.probe_job is not None or (self.retry_at is not None and now >= self.retry_at):
            return "half_open"
        return "open"

    def counts(self, now: float, window: float) -> tuple[float, float]:
        """(requests, failures) over the last `window` seconds, the older bucket weighted."""
        age = now - self.win_start
        if age >= 2 * window:
            return 0.0, 0.0
        if age >= window:  # the current bucket is now the older one
            w = max(0.0, 1.0 - (age - window) / window)
            return (self.ok + self.failed) * w, self.failed * w
        w = 1.0 - age / window
        return self.ok + self.failed + (self.prev_ok + self.prev_failed) * w, self.failed + self.prev_failed * w

    def _roll(self, now: float, window: float) -> None:
        age = now - self.win_start
        if age < window:
            return
        if age < 2 * window:
            self.prev_ok, self.prev_failed = self.ok, self.failed
        else:
            self.prev_ok = self.prev_failed = 0
        self.ok = self.failed = 0
        self.win_start = now - (age % window)

    def observe(self, job_id: int, ok: bool, now: float, s: BreakerSettings) -> str | None:
        """Record the outcome of a request job `job_id` sent; the event it causes, if any:
        'breaker.opened' (too many failures, or the trial failed) or 'breaker.closed' (the trial
        succeeded). An outcome of a request sent before the breaker opened changes nothing."""
        if self.opened_at is not None:
            if job_id != self.probe_job:
                return None
            self.probe_job = None
            if ok:
                self.close(now)
                return "breaker.closed"
            self._open(now, s)
            return "breaker.opened"
        self._roll(now, s.window)
        if ok:
            self.ok += 1
        else:
            self.failed += 1
        requests, failures = self.counts(now, s.window)
        if not ok and requests >= s.min_requests - 1e-9 and failures >= s.failure_ratio * requests - 1e-9:
            self._open(now, s)
            return "breaker.opened"
        return None

    def close(self, now: float) -> None:
        """Closed, with an empty window: after a trial that succeeded, or an operator's reset."""
        self.opened_at = self.retry_at = self.probe_job = None
        self.ok = self.failed = self.prev_ok = self.prev_failed = 0
        self.win_start = now

    def _open(self, now: float, s: BreakerSettings) -> None:
        self.opened_at = now
        self.retry_at = now + s.reset
        self.opened += 1

    def reason(self, now: float, s: BreakerSettings) -> str:
        """Why a job of this breaker's queue and host waits (or failed fast), as `waiting_for` says it."""
        head = f"circuit open for host {self.key} (queue {self.queue!r})"
        pct = f"{s.failure_ratio:.0%}"
        if self.probe_job is not None:
            return f"{head}: a trial request (job {self.probe_job}) is finding out whether the host is well again"
        left = max(0.0, (self.retry_at or now) - now)
        return (f"{head}: at least {pct} of its requests failed within {s.window:g} s; a trial request goes in "
                f"{left:.0f} s")  # fmt: skip

    def view(self, now: float, s: BreakerSettings) -> dict[str, Any]:
        """The breaker as the API shows it."""
        requests, failures = self.counts(now, s.window) if self.opened_at is None else (0.0, 0.0)
        status = self.status(now)
        return {
            "queue": self.queue,
            "host": self.key,
            "state": status,
            "mode": s.mode,
            "opened_at": iso(self.opened_at),
            "retry_at": iso(self.retry_at) if self.opened_at is not None else None,
            "probe_job": self.probe_job,
            "requests": round(requests, 1),
            "failures": round(failures, 1),
            "times_opened": self.opened,
            "reason": None if status == "closed" else self.reason(now, s),
            "settings": {
                "failure_ratio": s.failure_ratio,
                "window": s.window,
                "reset": s.reset,
                "min_requests": s.min_requests,
            },
        }


#: The stored columns of a breaker, in Breaker's field order.
BREAKER_COLUMNS = ("queue", "key", "opened_at", "retry_at", "probe_job", "win_start", "ok", "failed", "prev_ok",
                   "prev_failed", "opened")  # fmt: skip


def held_until(b: Breaker, now: float, s: BreakerSettings) -> float:
    """When a job held by an open breaker is looked at again (the breaker closing releases it sooner)."""
    if b.retry_at is not None and b.retry_at > now:
        return b.retry_at
    return now + s.reset
