"""Finished jobs per second per queue over the last seconds, counted from the live feed."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

SPARK_SECONDS = 20  # the Queues view's sparkline: one character a second
FINISHED = frozenset({"job.succeeded", "job.failed", "job.dead", "job.cancelled"})


class Throughput:
    """One counter per queue and second; `series` gives the last `width` seconds."""

    def __init__(self, width: int = SPARK_SECONDS, clock: Callable[[], float] = time.time) -> None:
        self.width = width
        self.clock = clock
        self.counts: dict[str, dict[int, int]] = defaultdict(dict)

    def add(self, event_type: str, queue: str | None, ts: float | None = None) -> None:
        if event_type not in FINISHED or queue is None:
            return
        second = int(ts if ts is not None else self.clock())
        per = self.counts[queue]
        per[second] = per.get(second, 0) + 1
        if len(per) > self.width * 3:
            cutoff = second - self.width * 2
            for s in [s for s in per if s < cutoff]:
                del per[s]

    def series(self, queue: str) -> list[float]:
        """Finished jobs in each of the last `width` whole seconds, oldest first."""
        now = int(self.clock()) - 1  # the current second is not over
        per = self.counts.get(queue, {})
        return [float(per.get(s, 0)) for s in range(now - self.width + 1, now + 1)]
