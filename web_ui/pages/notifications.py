"""Notifications (admins): channels with "send test", alert rules, and the delivery log with replay."""

from __future__ import annotations

from typing import Any

import reflex as rx

from core.errors import JobDeckError
from web_ui.format import clock
from web_ui.hub import Change, touched
from web_ui.layout import layout
from web_ui.state import AppState, page_state, set_editable


@page_state(
    "/notifications",
    editable=("new_name", "new_url", "rule_name", "rule_events", "rule_queue", "rule_channels", "rule_window"),
)
class NotificationsState(AppState):
    """The Notifications page."""

    def set_field(self, name: str, value: str) -> None:
        set_editable(self, name, value)

    channels: list[dict[str, str]] = []
    rules: list[dict[str, str]] = []
    deliveries: list[dict[str, str]] = []
    note: str = ""
    new_name: str = ""
    new_url: str = ""
    new_secret: str = ""
    rule_name: str = ""
    rule_events: str = "job.dead"
    rule_queue: str = ""
    rule_channels: str = ""
    rule_window: str = "300"

    async def fetch(self) -> None:
        if self.may("notifications.manage"):
            self.channels, self.rules, self.deliveries = [], [], []
            self.note = "notifications are for admins: " + self.may("notifications.manage")
            return
        self.note = ""
        c = self.client()
        channels = await c.channels()
        names = {ch["id"]: ch["name"] for ch in channels}
        self.channels = [
            {
                "id": str(ch["id"]), "name": ch["name"], "kind": ch["kind"],
                "target": ch["config"].get("url") or ", ".join(ch["config"].get("to") or []),
                "enabled": "1" if ch["enabled"] else "", "breaker": ch["breaker"], "failures": str(ch["failures"]),
                "reason": str(ch.get("disabled_reason") or ""),
            }
            for ch in channels
        ]  # fmt: skip
        self.rules = [
            {
                "id": str(r["id"]), "name": r["name"], "condition": _condition(r["condition"]),
                "events": ", ".join(r["events"]) or "-",
                "filters": ", ".join(f"{k}={v}" for k, v in r["filters"].items()) or "-",
                "channels": ", ".join(names.get(i, str(i)) for i in r["channels"]),
                "window": f"{r['window_seconds']:g} s", "firing": ", ".join(r["firing"]),
                "enabled": "1" if r["enabled"] else "",
            }
            for r in await c.alert_rules()
        ]  # fmt: skip
        self.deliveries = [
            {
                "id": str(n["id"]), "when": clock(n["created_at"], self.zone_name()),
                "channel": names.get(n["channel_id"], str(n["channel_id"])), "kind": n["kind"], "status": n["status"],
                "tries": f"{n['attempts']}/{n['max_attempts']}",
                "title": str(((n.get("payload") or {}).get("data") or {}).get("title") or ""),
                "last": str(n.get("last_error") or n.get("last_status") or ""),
            }
            for n in await c.notifications(limit=100)
        ]  # fmt: skip

    async def live_refresh(self, changes: list[Change] | None) -> None:
        # A delivery's attempts write no event (there may be thousands a second): while one is
        # pending, the page reads again at the hub's sampling pace (every 2 s).
        if touched(changes, "notify.") or any(d["status"] == "pending" for d in self.deliveries):
            await self.fetch()

    async def load(self) -> Any:
        return await self._fetch_or_fail()

    async def add_webhook(self) -> Any:
        try:
            made = await self.client().create_channel({"kind": "webhook", "name": self.new_name.strip(),
                                                       "url": self.new_url.strip()})  # fmt: skip
        except JobDeckError as exc:
            return self.failed(exc)
        self.new_name, self.new_url, self.new_secret = "", "", str(made.get("secret") or "")
        await self.fetch()
        return rx.toast.success(f"channel {made['name']} added: copy its signing secret now", duration=4000)

    async def add_rule(self) -> Any:
        """A rule on event types (every match, through its window) from the form; the core checks it."""
        names = {c["name"]: int(c["id"]) for c in self.channels}
        wanted = [n.strip() for n in self.rule_channels.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in names]
        if unknown or not wanted:
            return rx.toast.error(f"channels: name one or more of {', '.join(names) or '(no channels yet)'}")
        try:
            window = float(self.rule_window or 0)
        except ValueError:
            return rx.toast.error("window: a number of seconds")
        spec: dict[str, Any] = {"name": self.rule_name.strip(), "channels": [names[n] for n in wanted],
                                "events": [e.strip() for e in self.rule_events.split(",") if e.strip()],
                                "window_seconds": window}  # fmt: skip
        if self.rule_queue.strip():
            spec["filters"] = {"queue": self.rule_queue.strip()}
        try:
            made = await self.client().create_alert_rule(spec)
        except JobDeckError as exc:
            return self.failed(exc)
        self.rule_name = ""
        await self.fetch()
        return rx.toast.success(f"rule {made['name']} added", duration=3000)

    async def send_test(self, channel_id: str) -> Any:
        try:
            n = await self.client().send_notification(int(channel_id))
        except JobDeckError as exc:
            return self.failed(exc)
        await self.fetch()
        return rx.toast.success(f"test notification {n['id']} is on its way", duration=3000)

    async def toggle(self, channel_id: str, enabled: str) -> Any:
        try:
            await self.client().update_channel(int(channel_id), {"enabled": not enabled})
        except JobDeckError as exc:
            return self.failed(exc)
        await self.fetch()
        return None

    async def replay(self, notification_id: str) -> Any:
        try:
            await self.client().replay_notification(int(notification_id))
        except JobDeckError as exc:
            return self.failed(exc)
        await self.fetch()
        return rx.toast.success(f"notification {notification_id} is sent again", duration=3000)


def _condition(c: dict[str, Any]) -> str:
    numbers = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in c.items() if k != "kind")
    return f"{c['kind']} ({numbers})" if numbers else c["kind"]


def _table(heads: tuple[str, ...], rows: Any, row: Any, table_id: str) -> rx.Component:
    return rx.table.root(
        rx.table.header(rx.table.row(*(rx.table.column_header_cell(h) for h in heads))),
        rx.table.body(rx.foreach(rows, row)),
        width="100%",
        id=table_id,
    )


def _channel_row(c: Any) -> rx.Component:
    return rx.table.row(
        rx.table.row_header_cell(c["name"]),
        rx.table.cell(c["kind"]),
        rx.table.cell(rx.text(c["target"], size="1", style={"word_break": "break-all"})),
        rx.table.cell(
            rx.cond(c["enabled"] != "", rx.badge("on", color_scheme="green"), rx.badge("off", color_scheme="red")),
            rx.cond(c["breaker"] == "open", rx.badge("breaker open", color_scheme="orange"), rx.fragment()),
            rx.cond(c["reason"] != "", rx.text(c["reason"], size="1", color_scheme="red"), rx.fragment()),
        ),
        rx.table.cell(c["failures"]),
        rx.table.cell(
            rx.hstack(
                rx.button("Send test", size="1", variant="soft", on_click=NotificationsState.send_test(c["id"]),
                          class_name="send-test", aria_label="Send a test to " + c["name"]),
                rx.button(rx.cond(c["enabled"] != "", "Turn off", "Turn on"), size="1", variant="soft",
                          color_scheme="gray", on_click=NotificationsState.toggle(c["id"], c["enabled"])),
                spacing="1",
            )
        ),
        id="channel-row-" + c["name"],
    )  # fmt: skip


def _rule_row(r: Any) -> rx.Component:
    return rx.table.row(
        rx.table.row_header_cell(r["name"]),
        rx.table.cell(r["condition"]),
        rx.table.cell(r["events"]),
        rx.table.cell(r["filters"]),
        rx.table.cell(r["channels"]),
        rx.table.cell(r["window"]),
        rx.table.cell(rx.cond(r["firing"] != "", rx.badge("firing: " + r["firing"], color_scheme="red"), "-")),
        id="rule-row-" + r["name"],
    )


def _delivery_row(n: Any) -> rx.Component:
    return rx.table.row(
        rx.table.cell(n["id"]),
        rx.table.cell(rx.text(n["when"], size="1")),
        rx.table.cell(n["channel"]),
        rx.table.cell(n["kind"]),
        rx.table.cell(
            rx.badge(
                n["status"],
                color_scheme=rx.cond(
                    n["status"] == "delivered", "green", rx.cond(n["status"] == "failed", "red", "orange")
                ),
            )
        ),
        rx.table.cell(n["tries"]),
        rx.table.cell(n["title"]),
        rx.table.cell(rx.text(n["last"], size="1")),
        rx.table.cell(
            rx.button("Replay", size="1", variant="soft", on_click=NotificationsState.replay(n["id"]),
                      disabled=n["status"] == "pending", aria_label="Replay notification " + n["id"])
        ),
        id="delivery-row-" + n["id"],
    )  # fmt: skip


def _add_webhook() -> rx.Component:
    return rx.form(
        rx.hstack(
            rx.input(placeholder="name", value=NotificationsState.new_name, id="new-channel-name",
                     on_change=lambda v: NotificationsState.set_field("new_name", v), width="12rem"),
            rx.input(placeholder="https://hooks.example.com/jobdeck", value=NotificationsState.new_url,
                     id="new-channel-url", on_change=lambda v: NotificationsState.set_field("new_url", v),
                     width="28rem"),
            rx.button("Add webhook", type="submit", id="add-webhook"),
            spacing="2",
        ),
        on_submit=lambda _: NotificationsState.add_webhook(),
    )  # fmt: skip


def _field(key: str, placeholder: str, width: str) -> rx.Component:
    return rx.input(placeholder=placeholder, value=getattr(NotificationsState, key), id=f"rule-{key[5:]}",
                    aria_label=placeholder, on_change=lambda v: NotificationsState.set_field(key, v), width=width)  # fmt: skip


def _add_rule() -> rx.Component:
    return rx.form(
        rx.hstack(
            _field("rule_name", "rule name", "10rem"),
            _field("rule_events", "events (job.dead, job.failed ...)", "16rem"),
            _field("rule_queue", "queue (optional)", "9rem"),
            _field("rule_channels", "channels (names)", "12rem"),
            _field("rule_window", "window s", "6rem"),
            rx.button("Add rule", type="submit", id="add-rule"),
            spacing="2",
            wrap="wrap",
        ),
        on_submit=lambda _: NotificationsState.add_rule(),
    )


def notifications_page() -> rx.Component:
    """The Notifications page."""
    return layout(
        "Notifications",
        rx.cond(
            NotificationsState.note != "",
            rx.callout(NotificationsState.note, icon="lock", color_scheme="gray", id="notify-note"),
            rx.fragment(),
        ),
        rx.heading("Channels", size="4", as_="h2"),
        _add_webhook(),
        rx.cond(
            NotificationsState.new_secret != "",
            rx.callout(
                rx.text(
                    "Signing secret of the new channel (shown once): ",
                    rx.code(NotificationsState.new_secret, id="new-secret"),
                ),
                icon="key",
                width="100%",
            ),
            rx.fragment(),
        ),
        _table(
            ("Channel", "Kind", "Target", "State", "Failures", "Actions"),
            NotificationsState.channels,
            _channel_row,
            "channels-table",
        ),
        rx.heading("Alert rules", size="4", as_="h2"),
        _add_rule(),
        _table(
            ("Rule", "Condition", "Events", "Filters", "Channels", "Window", "Now"),
            NotificationsState.rules,
            _rule_row,
            "rules-table",
        ),
        rx.heading("Delivery log", size="4", as_="h2"),
        _table(
            ("#", "When", "Channel", "Kind", "Status", "Tries", "Title", "Last answer", ""),
            NotificationsState.deliveries,
            _delivery_row,
            "deliveries-table",
        ),
    )
