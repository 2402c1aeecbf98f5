"""The console's live feed: the /v1/events WebSocket, resumed from the last sequence number after
a drop, with its connection state for the header. Events are buffered here and taken in
batches by the screen timer, so 1,000 events a second cost a few redraws, not a thousand."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.client import JobDeckClient
from core.errors import JobDeckError, Unauthorized

Json = dict[str, Any]
FIRST_DELAY, MAX_DELAY = 0.2, 5.0


@dataclass
class Connection:
    """What the header shows about the feed."""

    state: str = "connecting"  # connecting | live | reconnecting | signed-out
    detail: str = ""
    last_seq: int = 0
    attempt: int = 0
    since: float = 0.0  # when the state began (monotonic)


class LiveFeed:
    """Follows the feed until cancelled; `take()` hands over what arrived since the last call."""

    def __init__(self, client: JobDeckClient, since: int, on_change: Callable[[Connection], None]) -> None:
        self.client = client
        self.connection = Connection(last_seq=since, since=time.monotonic())
        self._on_change = on_change
        self._buffer: list[Json] = []
        self.gap = False  # the server pruned events we had not seen: screens must reload
        self.received = 0

    def take(self) -> list[Json]:
        """The events buffered since the last call, oldest first."""
        out, self._buffer = self._buffer, []
        return out

    def _set(self, state: str, detail: str = "") -> None:
        c = self.connection
        if c.state != state or c.detail != detail:
            c.state, c.detail, c.since = state, detail, time.monotonic()
            self._on_change(c)

    async def run(self) -> None:
        """Follow the feed; on a drop reconnect with backoff and resume after the last seq."""
        delay = FIRST_DELAY
        while True:
            try:
                async for event in self.client.events(since=self.connection.last_seq, reconnect=False, control=True):
                    seq = event.get("seq")
                    if seq is not None:
                        self.connection.last_seq = seq
                        self._buffer.append(event)
                        self.received += 1
                        continue
                    kind = event.get("type", "")
                    if kind == "stream.caught_up":
                        self.connection.last_seq = max(self.connection.last_seq, int(event.get("last_seq") or 0))
                        self.connection.attempt = 0
                        delay = FIRST_DELAY
                        self._set("live")
                    elif kind == "stream.gap":
                        self.gap = True
                    elif not kind.startswith("stream."):
                        self._buffer.append(event)  # an ephemeral event (no seq)
            except Unauthorized as exc:
                self._set("signed-out", f"{exc.message} (run `jobdeck login --server {self.client.server}`)")
                delay = MAX_DELAY
            except JobDeckError as exc:
                self.connection.attempt += 1
                self._set("reconnecting", f"attempt {self.connection.attempt}: {exc.message}")
            except (OSError, ValueError) as exc:
                self.connection.attempt += 1
                self._set("reconnecting", f"attempt {self.connection.attempt}: {exc}")
            else:  # the server closed the stream cleanly (shutting down)
                self.connection.attempt += 1
                self._set("reconnecting", f"attempt {self.connection.attempt}: the server closed the feed")
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_DELAY)
