"""Notifications (admins): channels (webhook or email) with "send test", alert rules with any
condition, and the delivery log with replay."""

from __future__ import annotations

from typing import Any

import reflex as rx

from core.errors import JobDeckError
from web_ui.format import clock
from web_ui.hub import Change, touched
from web_ui.layout import layout
from web_ui.pages.notify_specs import (
    CHANNEL_KINDS,
    CONDITION_FIELDS,
    CONDITIONS,
    IMPLIED,
    SECURITY,
    channel_spec,
    rule_spec,
)
from web_ui.state import AppState, page_state, set_editable

LOG_PAGE = 50  # deliveries per page of the log
_CHANNEL_FORM = ("name", "url", "host", "port", "security", "username", "password", "sender", "to")
_RULE_FORM = ("name", "events", "condition", "queue", "channels", "window", *CONDITION_FIELDS)


@page_state(
    "/notifications",
    editable=("new_kind", *(f"new_{f}" for f in _CHANNEL_FORM), *(f"rule_{f}" for f in _RULE_FORM)),
)
class NotificationsState(AppState):
    """The Notifications page."""

    def set_field(self, name: str, value: str) -> None:
        set_editable(self, name, value)

    channels: list[dict[str, str]] = []
    rules: list[dict[str, str]] = []
    deliveries: list[dict[str, str]] = []
    note: str = ""
    log_channel: str = "all"  # the delivery log shows this channel's deliveries (by name), or all
    log_cursors: list[int] = []  # the cursor of each page of the log before this one (for "Newer")
    log_cursor: int = 0  # this page's (0: the newest)
    log_next: int = 0  # the next, older page's (0: this is the oldest)
    channel_names: list[str] = ["all"]
    new_kind: str = "webhook"
    new_name: str = ""
    new_url: str = ""
    new_host: str = ""
    new_port: str = "587"
    new_security: str = "starttls"
    new_username: str = ""
    new_password: str = ""
    new_sender: str = ""
    new_to: str = ""
    new_secret: str = ""
    rule_name: str = ""
    rule_events: str = "job.dead"
    rule_condition: str = "every"
    rule_times: str = "3"
    rule_above: str = "100"
    rule_minutes: str = "5"
    rule_for_seconds: str = "60"
    rule_below: str = "0.9"
    rule_min_jobs: str = "10"
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
        self.channel_names = ["all", *names.values()]
        shown = next((i for i, n in names.items() if n == self.log_channel), None)
        if shown is None and self.log_channel != "all":
            self.log_channel, self.log_cursor, self.log_cursors = "all", 0, []
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
        log = await c.notifications_page(channel_id=shown, cursor=self.log_cursor or None, limit=LOG_PAGE)
        self.deliveries = [
            {
                "id": str(n["id"]), "when": clock(n["created_at"], self.zone_name()),
                "channel": names.get(n["channel_id"], str(n["channel_id"])), "kind": n["kind"], "status": n["status"],
                "tries": f"{n['attempts']}/{n['max_attempts']}",
                "title": str(((n.get("payload") or {}).get("data") or {}).get("title") or ""),
                "last": str(n.get("last_error") or n.get("last_status") or ""),
            }
            for n in log["notifications"]
        ]  # fmt: skip
        self.log_next = int(log.get("next_cursor") or 0)

    async def show_log(self, channel: str) -> None:
        """The delivery log of one channel (by name), or of all (from its newest page)."""
        self.log_channel, self.log_cursor, self.log_cursors = channel, 0, []
        await self.fetch()

    async def older_log(self) -> Any:
        """The log's next page (older deliveries)."""
        if self.log_next:
            self.log_cursors, self.log_cursor = [*self.log_cursors, self.log_cursor], self.log_next
            return await self._fetch_or_fail()
        return None

    async def newer_log(self) -> Any:
        """The log's page before this one (newer deliveries)."""
        if self.log_cursors:
            self.log_cursor, self.log_cursors = self.log_cursors[-1], self.log_cursors[:-1]
            return await self._fetch_or_fail()
        return None

    async def live_refresh(self, changes: list[Change] | None) -> None:
        # A delivery's attempts write no event (there may be thousands a second): while one is
        # pending, the page reads again at the hub's sampling pace (every 2 s).
        if touched(changes, "notify.") or any(d["status"] == "pending" for d in self.deliveries):
            await self.fetch()

    async def load(self) -> Any:
        return await self._fetch_or_fail()

    async def add_channel(self) -> Any:
        """A webhook or an email channel from the form; the core checks it and names a wrong field."""
        try:
            spec = channel_spec(self.new_kind, {f: getattr(self, f"new_{f}") for f in _CHANNEL_FORM})
            made = await self.client().create_channel(spec)
        except JobDeckError as exc:
            return self.failed(exc)
        for f in ("name", "url", "username", "password", "to"):
            setattr(self, f"new_{f}", "")
        self.new_secret = str(made.get("secret") or "")
        await self.fetch()
        if made["kind"] == "webhook":
            return rx.toast.success(f"channel {made['name']} added: copy its signing secret now", duration=4000)
        return rx.toast.success(f"channel {made['name']} added: send it a test", duration=4000)

    async def add_rule(self) -> Any:
        """A rule from the form (events and filters, any condition, its window); the core checks it."""
        names = {c["name"]: int(c["id"]) for c in self.channels}
        try:
            spec = rule_spec({f: getattr(self, f"rule_{f}") for f in _RULE_FORM}, names)
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


def _labelled(label: str, html_id: str, control: rx.Component) -> rx.Component:
    """A form control with its name above it (a filled field keeps saying what it is)."""
    return rx.vstack(rx.el.label(label, html_for=html_id, style={"font_size": "0.75rem", "color": "var(--gray-11)"}),
                     control, spacing="1")  # fmt: skip


def _input(key: str, placeholder: str, width: str, html_id: str, kind: str = "text", label: str = "") -> rx.Component:
    label = label or placeholder.split(" (")[0].split(":")[0]
    return _labelled(label, html_id, rx.input(
        placeholder=placeholder, value=getattr(NotificationsState, key), id=html_id, type=kind, aria_label=label,
        on_change=lambda v: NotificationsState.set_field(key, v), width=width))  # fmt: skip


def _choice(key: str, items: list[str], html_id: str, label: str) -> rx.Component:
    return _labelled(label, html_id, rx.select(items, value=getattr(NotificationsState, key), id=html_id,
                                               aria_label=label,
                                               on_change=lambda v: NotificationsState.set_field(key, v)))  # fmt: skip


def _add_channel() -> rx.Component:
    email = rx.fragment(
        _input("new_host", "SMTP host", "12rem", "new-channel-host"),
        _input("new_port", "port", "5rem", "new-channel-port"),
        _choice("new_security", list(SECURITY), "new-channel-security", "SMTP security"),
        _input("new_username", "user (optional)", "9rem", "new-channel-username"),
        _input("new_password", "password (optional)", "10rem", "new-channel-password", "password"),
        _input("new_sender", "from: jobdeck@example.com", "14rem", "new-channel-sender"),
        _input("new_to", "to: a@example.com, b@example.com", "18rem", "new-channel-to"),
    )
    return rx.form(
        rx.hstack(
            _choice("new_kind", list(CHANNEL_KINDS), "new-channel-kind", "channel kind"),
            _input("new_name", "name", "10rem", "new-channel-name"),
            rx.cond(NotificationsState.new_kind == "email", email,
                    _input("new_url", "https://hooks.example.com/jobdeck", "28rem", "new-channel-url", label="URL")),
            rx.button(rx.cond(NotificationsState.new_kind == "email", "Add email channel", "Add webhook"),
                      type="submit", id="add-channel"),
            spacing="2",
            wrap="wrap",
            align="end",
        ),
        on_submit=lambda _: NotificationsState.add_channel(),
    )  # fmt: skip


def _field(key: str, placeholder: str, width: str) -> rx.Component:
    return _input(key, placeholder, width, "rule-" + key[5:].replace("_", "-"))


def _condition_numbers() -> rx.Component:
    """The numbers of the chosen condition only (each kind's fields in notify_specs.CONDITIONS)."""
    shown = {f: [k for k, (_, fields) in CONDITIONS.items() if any(x == f for x, _l, _w in fields)]
             for f in CONDITION_FIELDS}  # fmt: skip
    labels = {f: label for _, fields in CONDITIONS.values() for f, label, _w in fields}
    parts = []
    for f in CONDITION_FIELDS:
        when = NotificationsState.rule_condition == shown[f][0]
        for k in shown[f][1:]:
            when = when | (NotificationsState.rule_condition == k)
        parts.append(rx.cond(when, _field(f"rule_{f}", labels[f], "7rem"), rx.fragment()))
    return rx.fragment(*parts)


def _add_rule() -> rx.Component:
    implied = NotificationsState.rule_condition == sorted(IMPLIED)[0]
    for k in sorted(IMPLIED)[1:]:
        implied = implied | (NotificationsState.rule_condition == k)
    return rx.form(
        rx.hstack(
            _field("rule_name", "rule name", "10rem"),
            _labelled(
                "condition",
                "rule-condition",
                rx.select.root(
                    rx.select.trigger(id="rule-condition", aria_label="condition"),
                    rx.select.content(*(rx.select.item(label, value=k) for k, (label, _) in CONDITIONS.items())),
                    value=NotificationsState.rule_condition,
                    on_change=lambda v: NotificationsState.set_field("rule_condition", v),
                ),
            ),
            _condition_numbers(),
            rx.cond(implied, rx.fragment(), _field("rule_events", "events (job.dead, job.failed ...)", "16rem")),
            _field("rule_queue", "queue (optional)", "9rem"),
            _field("rule_channels", "channels (names)", "12rem"),
            _field("rule_window", "window (s)", "6rem"),
            rx.button("Add rule", type="submit", id="add-rule"),
            spacing="2",
            wrap="wrap",
            align="end",
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
        _add_channel(),
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
        rx.hstack(
            rx.heading("Delivery log", size="4", as_="h2"),
            _labelled(
                "channel",
                "log-channel",
                rx.select(
                    NotificationsState.channel_names,
                    id="log-channel",
                    value=NotificationsState.log_channel,
                    aria_label="channel",
                    on_change=NotificationsState.show_log,
                ),
            ),
            align="end",
            spacing="4",
        ),
        _table(
            ("#", "When", "Channel", "Kind", "Status", "Tries", "Title", "Last answer", ""),
            NotificationsState.deliveries,
            _delivery_row,
            "deliveries-table",
        ),
        rx.hstack(
            rx.button(
                "Newer",
                id="log-newer",
                on_click=NotificationsState.newer_log,
                disabled=NotificationsState.log_cursors.length() == 0,
                variant="soft",
                size="1",
            ),
            rx.button(
                "Older",
                id="log-older",
                on_click=NotificationsState.older_log,
                disabled=NotificationsState.log_next == 0,
                variant="soft",
                size="1",
            ),
            spacing="2",
        ),
    )
