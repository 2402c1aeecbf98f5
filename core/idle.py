"""How long a loop that is woken for its work waits before it looks anyway.

The node's loops (dispatch, promote, schedules, notification sends, the relay) act when a commit or
an agent wakes them; their timeout only bounds what a missed wake-up costs. On an idle node those
timeouts were most of its CPU (a store round trip each, every second, in every loop), so the
timeout doubles while the loop's looks find nothing and is back at its first value as soon as a
wake-up or a look finds work. How fast a loop reacts to work does not depend on it.
"""

from __future__ import annotations

SAFETY_POLL = 1.0  # seconds: the timeout after a look that found work, or a wake-up
IDLE_POLL_MAX = 8.0  # seconds: the longest an idle loop goes without looking


class IdlePoll:
    """One loop's timeout: `first` after a round that found work, doubling up to `most` while none do."""

    def __init__(self, first: float = SAFETY_POLL, most: float = IDLE_POLL_MAX) -> None:
        self.first, self.most = first, max(first, most)
        self.timeout = first

    def after(self, found: bool) -> float:
        """The timeout before the next look, after a round that found work (or was woken) or not."""
        self.timeout = self.first if found else min(self.most, self.timeout * 2)
        return self.timeout
