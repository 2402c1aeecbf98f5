"""The dashboard's one link to the core's live feed, shared by every browser session of this
backend: it follows /v1/events, keeps the chart series and the latest counters, and wakes the
sessions' live loops when something changed (coalesced: a browser is not redrawn per event)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.client import JobDeckClient, first_sight
from core.errors import Forbidden, JobDeckError, NotFound, Unauthorized
from web_ui.settings import ca_file, core_server, service_token

log = logging.getLogger("jobdeck.web.hub")

HISTORY_MINUTES = 30  # of queue depths
BACKFILL_EVENTS = 20_000  # events replayed at start so the charts have a history at once
SAMPLE_SECONDS = 2.0  # how often queue depths and counters are sampled
CHANGES_KEPT = 5_000
ALERT_SHOWN_FOR = 900.0  # seconds the banner shows the latest alert (a newer one or a resolve replaces it)
ALERTS_KEPT = 64


@dataclass(slots=True)
class Change:
    """What one event touched, for the sessions' live loops."""

    version: int
    type: str
    job_id: int | None
    queue: str | None


def _ts(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return time.time()


class Hub:
    """The shared live state; one per backend process (see `HUB`)."""

    def __init__(self) -> None:
        self.version = 0
        self.last_seq = 0
        self.last_event_ts = 0.0
        self.connected = False
        self.error = ""
        self.stats: dict[str, Any] = {}
        self.queues: list[dict[str, Any]] = []
        self.depths: deque[tuple[float, dict[str, int]]] = deque(maxlen=HISTORY_MINUTES * 60 // int(SAMPLE_SECONDS))
        self.changes: deque[Change] = deque(maxlen=CHANGES_KEPT)
        self._cond = asyncio.Condition()
        self._stats_dirty = True
        self.app: Any = None  # the rx.App, to know which browser sessions are still connected
        # the latest notify.alerts, newest last: (time, title, kind, queue); each session shows the newest
        # one whose queue its user may see (the hub follows the feed with the service token, which sees all)
        self.alerts: deque[tuple[float, str, str, str | None]] = deque(maxlen=ALERTS_KEPT)
        self._alerts_seen: deque[str] = deque(maxlen=256)  # alert ids shown: a repeated one is not shown again

    # -- what the sessions' live loops use

    async def wait_newer(self, version: int, timeout: float) -> int:
        """Wait until the hub is past `version` (or the timeout); return the current version."""
        if self.version > version:
            return self.version
        async with self._cond:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._cond.wait_for(lambda: self.version > version), timeout)
        return self.version

    def changes_since(self, version: int) -> list[Change] | None:
        """The changes after `version`, oldest first; None if they are no longer all kept."""
        if self.changes and self.changes[0].version > version + 1:
            return None
        return [c for c in self.changes if c.version > version]

    def alert_now(self, sees: Callable[[str | None], bool] = lambda queue: True) -> tuple[str, str, float]:
        """The banner: the latest recent alert whose queue `sees` admits (a queue-less one is everyone's),
        as its title, kind and when it came ("", "", 0 when there is none). Each browser session
        dismisses it for itself (by that time)."""
        oldest = time.time() - ALERT_SHOWN_FOR
        for at, title, kind, queue in reversed(self.alerts):
            if at < oldest:
                break
            if queue is None or sees(queue):
                return title, kind, at
        return "", "", 0.0

    def session_connected(self, token: str) -> bool:
        """Whether a browser tab (Reflex client token) still has its socket."""
        namespace = getattr(self.app, "event_namespace", None)
        return namespace is None or token in namespace.token_to_sid

    async def _bump(self) -> None:
        async with self._cond:
            self.version += 1
            self._cond.notify_all()

    # -- the feed

    def _note(self, event: dict[str, Any], *, live: bool) -> None:
        etype = str(event.get("type", ""))
        ts = _ts(event.get("ts"))
        if event.get("seq") is not None:
            self.last_seq = int(event["seq"])
            self.last_event_ts = ts
        if etype == "notify.alert" and live:
            data = event.get("data") or {}
            if first_sight(self._alerts_seen, data.get("id")):
                queue = event.get("queue")
                self.alerts.append((time.time(), str(data.get("title") or ""), str(data.get("kind") or "alert"),
                                    None if queue is None else str(queue)))  # fmt: skip
        if live:
            self.changes.append(Change(self.version + 1, etype, event.get("job_id"), event.get("queue")))
            if etype.startswith(("job.", "queue.")):
                self._stats_dirty = True

    async def follow(self, client: JobDeckClient) -> None:
        """Follow the feed for ever: backfill the charts, then note each live event."""
        while True:
            try:
                await self._check_access(client)
                if self.last_seq == 0:  # first start: replay recent events so the charts have a past
                    health = await client.health()
                    since = max(0, int(health.get("last_seq") or 0) - BACKFILL_EVENTS)
                    async for event in client.events(since=since, until_caught_up=True, reconnect=False):
                        self._note(event, live=False)
                self.connected, self.error = True, ""
                self._stats_dirty = True
                await self._bump()
                async for event in client.events(since=self.last_seq, control=True, reconnect=False):
                    if event.get("type") == "stream.caught_up":
                        continue
                    if str(event.get("type", "")).startswith("stream."):
                        continue
                    if not self.connected:
                        self.connected, self.error = True, ""
                    self._note(event, live=True)
                    await self._bump()
            except JobDeckError as exc:
                self.error = exc.message
            except Exception as exc:  # the hub must outlive any surprise; the page shows it
                log.exception("live feed failed")
                self.error = f"{type(exc).__name__}: {exc}"
            if self.connected:
                self.connected = False
                await self._bump()
            await asyncio.sleep(1.0)

    async def _check_access(self, client: JobDeckClient) -> None:
        """Say plainly when the core wants a token the dashboard's backend was not given."""
        try:
            await client.me()
        except NotFound:  # a core without sign-in routes
            return
        except (Unauthorized, Forbidden) as exc:
            raise JobDeckError(
                f"the dashboard's backend may not follow the core's live feed ({exc.message}); "
                "start `jobdeck web` with JOBDECK_TOKEN set to a service token"
            ) from None

    async def sample(self, client: JobDeckClient) -> None:
        """Sample counters and queue depths (for the counters and the queue depth chart)."""
        last = 0.0
        while True:
            now = time.monotonic()
            if self.connected and (self._stats_dirty or now - last >= SAMPLE_SECONDS):
                self._stats_dirty = False
                try:
                    self.stats, self.queues = await asyncio.gather(client.stats(), client.queues())
                except JobDeckError as exc:
                    self.error = exc.message
                else:
                    if now - last >= SAMPLE_SECONDS:
                        last = now
                        self.depths.append((time.time(), {q["name"]: int(q.get("depth") or 0) for q in self.queues}))
                    await self._bump()
            await asyncio.sleep(0.5)

    # -- chart series

    def depth_series(
        self, shown: Callable[[str], bool] = lambda _: True, top: int = 5
    ) -> tuple[list[float], dict[str, list[int]]]:
        names: dict[str, int] = {}
        for _, depths in self.depths:
            for name, n in depths.items():
                if shown(name):
                    names[name] = max(names.get(name, 0), n)
        chosen = sorted(names, key=lambda n: -names[n])[:top]
        times = [t for t, _ in self.depths]
        return times, {n: [d.get(n, 0) for _, d in self.depths] for n in chosen}


def touched(changes: Iterable[Change] | None, *prefixes: str) -> bool:
    """Whether any change's type starts with one of `prefixes` (None: everything may have changed)."""
    if changes is None:
        return True
    return any(c.type.startswith(prefixes) for c in changes)


HUB = Hub()


async def run_hub() -> None:
    """The backend's lifespan task: follow the core for as long as the app runs."""
    client = JobDeckClient(core_server(), token=await service_token(), ca_file=ca_file())
    try:
        await asyncio.gather(HUB.follow(client), HUB.sample(client))
    finally:
        await client.close()
