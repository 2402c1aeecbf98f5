"""The Queues view: depth, running, throughput sparkline, paused, concurrency; pause, resume, limit."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text

from console_tui.actions import bindings_for
from console_tui.screens.base import Json
from console_tui.screens.dialogs import PromptScreen
from console_tui.screens.tables import TableView
from core.client import relay_lag_text

FINISHED = ("job.succeeded", "job.failed", "job.dead", "job.cancelled")


class QueuesView(TableView):
    view_name: ClassVar[str] = "queues"
    title: ClassVar[str] = "Queues"
    BINDINGS = bindings_for("queues")
    COLUMNS = (("name", "QUEUE", 18), ("status", "STATUS", 8), ("depth", "DEPTH", 7), ("running", "RUNNING", 8),
               ("scheduled", "WAITING", 8), ("concurrency", "LIMIT", 7), ("spark", "FINISHED/S, LAST 30 S", 30),
               ("rate", "NOW/S", 7))  # fmt: skip
    POLL_SECONDS = 2.0

    async def fetch(self) -> list[Json]:
        return await self.console.client.queues()

    def __init__(self) -> None:
        super().__init__()
        self.relays: dict[str, Json] = {}

    async def enrich(self, items: list[Json]) -> None:
        # The outbox relays' lag (Kafka) rides on the bar; a node without them shows nothing.
        stats = await self.call(self.console.client.stats())
        self.relays = dict((stats or {}).get("relays") or {})

    def bar(self) -> str:
        return "  ·  ".join([super().bar(), *(relay_lag_text(n, lag) for n, lag in sorted(self.relays.items()))])

    def cells(self, q: Json) -> list[Any]:
        d = self.console.fmt
        series = self.console.throughput.series(q["name"])
        return [
            q["name"],
            Text("paused", style="bold magenta") if q.get("paused") else Text("active", style="green"),
            Text(str(q.get("depth", 0)), justify="right"),
            Text(str(q.get("running", 0)), justify="right"),
            Text(str(q.get("scheduled", 0)), justify="right"),
            Text("-" if q.get("concurrency") is None else str(q["concurrency"]), justify="right"),
            Text(d.spark(series), style="cyan"),
            Text(d.number(series[-1] if series else 0), justify="right"),
        ]

    def wants(self, event: Json) -> bool:
        return str(event.get("type", "")).startswith(("queue.", "job."))

    def target_queue(self) -> str | None:
        q = self.current()
        return q["name"] if q else None

    async def action_pause(self) -> None:
        if q := self.current():
            await self.call(self.console.client.queue_action(q["name"], "pause"), f"queue {q['name']} paused")
            await self.reload()

    async def action_resume(self) -> None:
        if q := self.current():
            await self.call(self.console.client.queue_action(q["name"], "resume"), f"queue {q['name']} resumed")
            await self.reload()

    async def action_concurrency(self) -> None:
        q = self.current()
        if q is None:
            return
        client = self.console.client

        async def submit(text: str) -> Json:
            text = text.strip()
            if text.lower() in ("", "none", "-"):
                return await client.set_concurrency(q["name"], None)
            try:
                value = int(text)
            except ValueError:
                raise ValueError(f"{text!r} is not a whole number (or 'none' for no limit)") from None
            return await client.set_concurrency(q["name"], value)

        current = "none" if q.get("concurrency") is None else str(q["concurrency"])
        self.console.push_screen(PromptScreen(f"Concurrency of queue {q['name']}",
                                              "jobs of this queue running at once ('none': no limit)", submit,
                                              value=current))  # fmt: skip
