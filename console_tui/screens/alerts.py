"""The Alerts view: notifications sent by alert rules and tests, newest first, with where each
delivery stands (admins; docs/notifications.md); replay one, or send a test to its channel."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text

from console_tui.actions import bindings_for
from console_tui.format import epoch
from console_tui.screens.base import Json
from console_tui.screens.tables import TableView
from core.errors import JobDeckError

STATUS_STYLES = {"delivered": "green", "pending": "yellow", "failed": "bold red"}
PAGE_SIZE = 100  # deliveries a page; older pages with ] (and back with [)
KIND_STYLES = {"alert": "bold red", "summary": "yellow", "resolved": "green", "channel_disabled": "bold red",
               "test": "dim"}  # fmt: skip


class AlertsView(TableView):
    view_name: ClassVar[str] = "alerts"
    title: ClassVar[str] = "Alerts"
    BINDINGS = bindings_for("alerts")
    COLUMNS = (("id", "ID", 6), ("created", "WHEN", 13), ("channel", "CHANNEL", 14), ("kind", "KIND", 16),
               ("status", "STATUS", 10), ("tries", "TRIES", 5), ("title", "TITLE", 42), ("last", "LAST ANSWER", 24))  # fmt: skip
    POLL_SECONDS = 3.0

    def __init__(self) -> None:
        super().__init__()
        self.channel_names: dict[int, str] = {}
        self.refused: str | None = None
        self.cursors: list[int | None] = [None]  # each page's cursor: the newest page's, then older ones
        self.next_cursor: int | None = None

    def key(self, item: Json) -> str:
        return str(item["id"])

    async def fetch(self) -> list[Json]:
        if "notifications.manage" not in self.console.identity.allowed:
            self.refused = f"the delivery log is for admins (you are {self.console.identity.role})"
            return []
        try:
            channels = await self.console.client.channels()
            self.channel_names = {c["id"]: c["name"] for c in channels}
            while True:  # a page key pressed while a reload reads: read the page now shown
                cursor = self.cursors[-1]
                page = await self.console.client.notifications_page(cursor=cursor, limit=PAGE_SIZE)
                if self.cursors[-1] == cursor:
                    break
            self.next_cursor = page.get("next_cursor")
            return list(page["notifications"])
        except JobDeckError as exc:
            self.refused = exc.message
            return []

    def bar(self) -> str:
        if self.refused:
            return self.refused
        failed = sum(1 for n in self.items.values() if n["status"] == "failed")
        waiting = sum(1 for n in self.items.values() if n["status"] == "pending")
        n, c = len(self.items), len(self.channel_names)
        paging = [f"page {len(self.cursors)}"] if len(self.cursors) > 1 or self.next_cursor else []
        if self.next_cursor:
            paging.append("] older")
        if len(self.cursors) > 1:
            paging.append("[ newer")
        return " · ".join([f"{n} notification{'s' * (n != 1)}, {waiting} waiting, {failed} failed",
                           f"{c} channel{'s' * (c != 1)}", *paging, "r replay · t send a test"])  # fmt: skip

    async def action_next_page(self) -> None:
        if not self.next_cursor:
            self.console.notify("these are the oldest notifications", timeout=2)
            return
        self.cursors.append(self.next_cursor)
        await self.reload()
        self.table.move_cursor(row=0)

    async def action_prev_page(self) -> None:
        if len(self.cursors) == 1:
            return
        self.cursors.pop()
        await self.reload()
        self.table.move_cursor(row=0)

    def cells(self, n: Json) -> list[Any]:
        d = self.console.fmt
        data = (n.get("payload") or {}).get("data") or {}
        last = n.get("last_error") or (f"{n['last_status']}" if n.get("last_status") is not None else "-")
        return [
            Text(str(n["id"]), justify="right"),
            d.clock_time(epoch(n.get("created_at"))),
            self.channel_names.get(n["channel_id"], str(n["channel_id"])),
            Text(n["kind"], style=KIND_STYLES.get(n["kind"], "")),
            Text(n["status"], style=STATUS_STYLES.get(n["status"], "")),
            Text(f"{n['attempts']}/{n['max_attempts']}", justify="right"),
            str(data.get("title") or "-"),
            last,
        ]

    def wants(self, event: Json) -> bool:
        return str(event.get("type", "")).startswith("notify.")

    async def action_replay(self) -> None:
        n = self.current()
        if n is not None:
            await self.call(self.console.client.replay_notification(n["id"]), f"notification {n['id']} is sent again")
            await self.reload()

    async def action_send_test(self) -> None:
        n = self.current()
        if n is not None:
            name = self.channel_names.get(n["channel_id"], str(n["channel_id"]))
            await self.call(self.console.client.send_notification(n["channel_id"]), f"a test goes to {name}")
            await self.reload()
