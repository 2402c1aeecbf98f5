"""Queues (pause, resume, concurrency) and Agents (slots, heartbeats, drain)."""

from __future__ import annotations

from typing import Any

import reflex as rx

from core.errors import JobDeckError
from web_ui.format import ago
from web_ui.hub import Change, touched
from web_ui.layout import layout
from web_ui.state import AppState, page_state, set_editable


@page_state("/queues", editable=("limit_value", "rate_value", "burst_value", "key_value"))
class QueuesState(AppState):
    """The Queues page."""

    def set_field(self, name: str, value: str) -> None:
        set_editable(self, name, value)

    queues: list[dict[str, str]] = []
    limit_queue: str = ""
    limit_value: str = ""
    rate_value: str = ""
    burst_value: str = ""
    key_value: str = ""

    async def fetch(self) -> None:
        rows = []
        for q in await self.client().queues():
            counts = q.get("counts") or {}
            rows.append({
                "name": q["name"], "paused": "1" if q.get("paused") else "",
                "concurrency": "" if q.get("concurrency") is None else str(q["concurrency"]),
                "rate_limit": "" if q.get("rate_limit") is None else f"{q['rate_limit']:g}",
                "rate_burst": "" if q.get("rate_burst") is None else str(q["rate_burst"]),
                "key_concurrency": "" if q.get("key_concurrency") is None else str(q["key_concurrency"]),
                "fair": "1" if q.get("fair") else "",
                "depth": str(q.get("depth", 0)), "running": str(q.get("running", 0)),
                "scheduled": str(q.get("scheduled", 0)), "dead": str(counts.get("dead", 0)),
                "succeeded": str(counts.get("succeeded", 0)),
                "refuse_pause": self.may("queues.pause", q["name"]),
                "refuse_configure": self.may("queues.configure", q["name"]),
            })  # fmt: skip
        self.queues = rows

    async def live_refresh(self, changes: list[Change] | None) -> None:
        if touched(changes, "queue.", "job."):
            await self.fetch()

    async def load(self) -> Any:
        return await self._fetch_or_fail()

    async def toggle_pause(self, name: str, paused: str) -> Any:
        action = "resume" if paused else "pause"
        try:
            await self.client().queue_action(name, action)
        except JobDeckError as exc:
            return self.failed(exc)
        await self.fetch()
        return rx.toast.success(f"queue {name}: {action}d", duration=2000)

    def edit_limit(self, name: str, current: str, rate: str, burst: str, key: str) -> None:
        self.limit_queue, self.limit_value = name, current
        self.rate_value, self.burst_value, self.key_value = rate, burst, key

    def close_limit(self) -> None:
        self.limit_queue = ""

    async def save_limit(self) -> Any:
        fields = (("concurrency", self.limit_value, int), ("rate_limit", self.rate_value, float),
                  ("rate_burst", self.burst_value, int), ("key_concurrency", self.key_value, int))  # fmt: skip
        changes: dict[str, Any] = {}
        for name, text, kind in fields:
            try:
                changes[name] = kind(text.strip()) if text.strip() else None
            except ValueError:
                return rx.toast.error(f"{name}: a number, or empty for none")
        try:
            await self.client().update_queue(self.limit_queue, **changes)
        except JobDeckError as exc:
            return self.failed(exc)
        name, self.limit_queue = self.limit_queue, ""
        await self.fetch()
        return rx.toast.success(f"queue {name}: limits saved")


@page_state("/agents")
class AgentsState(AppState):
    """The Agents page."""

    agents: list[dict[str, str]] = []

    async def fetch(self) -> None:
        self.agents = [
            {
                "name": a["name"],
                "host": f"{a.get('host', '')}:{a.get('pid', '')}",
                "queues": ", ".join(a.get("queues") or []),
                "labels": ", ".join(f"{k}={v}" for k, v in (a.get("labels") or {}).items()),
                "slots": f"{a.get('slots_used', 0)}/{a.get('slots', 0)}",
                "heartbeat": f"{a.get('heartbeat_age', 0):.1f}s",
                "since": ago(a.get("connected_at")),
                "draining": "1" if a.get("draining") else "",
                "refuse": self.may("agents.drain"),
            }
            for a in await self.client().agents()
        ]

    async def live_refresh(self, changes: list[Change] | None) -> None:
        if touched(changes, "agent.", "job.running", "job.succeeded", "job.failed", "job.dead"):
            await self.fetch()

    async def load(self) -> Any:
        return await self._fetch_or_fail()

    async def drain(self, name: str) -> Any:
        try:
            await self.client().drain_agent(name)
        except JobDeckError as exc:
            return self.failed(exc)
        await self.fetch()
        return rx.toast.success(f"agent {name}: draining (it finishes what it runs)", duration=3000)


def _queue_row(q: Any) -> rx.Component:
    return rx.table.row(
        rx.table.row_header_cell(q["name"]),
        rx.table.cell(
            rx.cond(
                q["paused"] != "", rx.badge("paused", color_scheme="purple"), rx.badge("active", color_scheme="green")
            )
        ),
        rx.table.cell(q["depth"]),
        rx.table.cell(q["running"]),
        rx.table.cell(q["scheduled"]),
        rx.table.cell(q["succeeded"]),
        rx.table.cell(q["dead"]),
        rx.table.cell(rx.cond(q["concurrency"] != "", q["concurrency"], "no limit")),
        rx.table.cell(
            rx.cond(
                q["rate_limit"] != "",
                rx.text(
                    q["rate_limit"],
                    "/s",
                    rx.cond(q["rate_burst"] != "", rx.text(" (burst ", q["rate_burst"], ")", as_="span"), ""),
                    as_="span",
                ),
                "none",
            ),
            class_name="queue-rate",
        ),
        rx.table.cell(
            rx.cond(q["key_concurrency"] != "", q["key_concurrency"], "-"),
            rx.cond(q["fair"] != "", rx.badge("fair", color_scheme="blue", margin_left="4px"), ""),
            class_name="queue-keys",
        ),
        rx.table.cell(
            rx.hstack(
                rx.button(
                    rx.cond(q["paused"] != "", "Resume", "Pause"),
                    size="1",
                    variant="soft",
                    on_click=QueuesState.toggle_pause(q["name"], q["paused"]),
                    disabled=q["refuse_pause"] != "",
                    title=q["refuse_pause"],
                    class_name="queue-pause",
                ),
                rx.button(
                    "Limit",
                    size="1",
                    variant="soft",
                    on_click=QueuesState.edit_limit(
                        q["name"], q["concurrency"], q["rate_limit"], q["rate_burst"], q["key_concurrency"]
                    ),
                    disabled=q["refuse_configure"] != "",
                    title=q["refuse_configure"],
                ),
                spacing="1",
            )
        ),
        id="queue-row-" + q["name"],
    )


def _limit_input(label: str, id_: str, value: Any, field: str) -> tuple[rx.Component, rx.Component]:
    return (
        rx.el.label(label, html_for=id_),
        rx.input(value=value, id=id_, type="number", step="any",
                 on_change=lambda v: QueuesState.set_field(field, v)),
    )  # fmt: skip


def _limit_dialog() -> rx.Component:
    return rx.dialog.root(
        rx.dialog.content(
            rx.dialog.title("Limits of queue ", QueuesState.limit_queue),
            rx.form(
                rx.vstack(
                    rx.el.label("Running jobs at most (empty: no limit)", html_for="limit-value"),
                    rx.input(
                        value=QueuesState.limit_value,
                        id="limit-value",
                        type="number",
                        auto_focus=True,
                        on_change=lambda v: QueuesState.set_field("limit_value", v),
                    ),
                    *_limit_input(
                        "Jobs started per second, over every node (empty: no rate limit)",
                        "rate-value",
                        QueuesState.rate_value,
                        "rate_value",
                    ),
                    *_limit_input(
                        "Burst: starts allowed at once (empty: a tenth of a second's worth)",
                        "burst-value",
                        QueuesState.burst_value,
                        "burst_value",
                    ),
                    *_limit_input(
                        "Jobs of one concurrency key at once (empty: no limit)",
                        "key-value",
                        QueuesState.key_value,
                        "key_value",
                    ),
                    rx.hstack(
                        rx.button(
                            "Cancel",
                            type="button",
                            variant="soft",
                            color_scheme="gray",
                            on_click=QueuesState.close_limit,
                        ),
                        rx.button("Save", type="submit"),
                        justify="end",
                        width="100%",
                    ),
                ),
                on_submit=lambda _: QueuesState.save_limit(),
            ),
        ),
        open=QueuesState.limit_queue != "",
        on_open_change=lambda _: QueuesState.close_limit(),
    )


def queues_page() -> rx.Component:
    """The Queues page."""
    heads = ("Queue", "Status", "Queued", "Running", "Scheduled", "Succeeded", "Dead", "Concurrency", "Rate limit",
             "Per key", "Actions")  # fmt: skip
    return layout(
        "Queues",
        rx.table.root(
            rx.table.header(rx.table.row(*(rx.table.column_header_cell(h) for h in heads))),
            rx.table.body(rx.foreach(QueuesState.queues, _queue_row)),
            width="100%",
            id="queues-table",
        ),
        _limit_dialog(),
    )


def _agent_row(a: Any) -> rx.Component:
    return rx.table.row(
        rx.table.row_header_cell(a["name"]),
        rx.table.cell(a["host"]),
        rx.table.cell(a["queues"]),
        rx.table.cell(a["labels"]),
        rx.table.cell(a["slots"]),
        rx.table.cell(a["heartbeat"]),
        rx.table.cell(a["since"]),
        rx.table.cell(
            rx.cond(
                a["draining"] != "",
                rx.badge("draining", color_scheme="orange"),
                rx.badge("taking work", color_scheme="green"),
            )
        ),
        rx.table.cell(
            rx.button(
                "Drain",
                size="1",
                variant="soft",
                color_scheme="orange",
                on_click=AgentsState.drain(a["name"]),
                disabled=(a["refuse"] != "") | (a["draining"] != ""),
                title=a["refuse"],
                aria_label="Drain agent " + a["name"],
            )
        ),
        id="agent-row-" + a["name"],
    )


def agents_page() -> rx.Component:
    """The Agents page."""
    heads = ("Agent", "Host:pid", "Queues", "Labels", "Slots used", "Heartbeat", "Connected", "Status", "Actions")
    return layout(
        "Agents",
        rx.table.root(
            rx.table.header(rx.table.row(*(rx.table.column_header_cell(h) for h in heads))),
            rx.table.body(rx.foreach(AgentsState.agents, _agent_row)),
            width="100%",
            id="agents-table",
        ),
        rx.cond(AgentsState.agents.length() == 0, rx.text("No agents connected.", color_scheme="gray"), rx.fragment()),
    )
