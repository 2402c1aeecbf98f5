"""Queues (pause, resume, limits, per-key usage, circuit breakers) and Agents (slots, heartbeats, drain)."""

from __future__ import annotations

from typing import Any

import reflex as rx

from core.client import agent_queues_text, breaker_window_text, key_limit_text
from core.errors import JobDeckError
from web_ui.format import ago
from web_ui.hub import Change, touched
from web_ui.layout import layout
from web_ui.state import AppState, page_state, set_editable

#: the breaker dialog's fields -> the queue settings they set, and how their text is read
BREAKER_FIELDS = (("ratio_value", "breaker_failure_ratio", float), ("window_value", "breaker_window", float),
                  ("reset_value", "breaker_reset", float), ("min_value", "breaker_min_requests", int))  # fmt: skip


def _text(value: Any) -> str:
    return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def weights_text(weights: dict[str, float] | None) -> str:
    """A queue's fairness weights as the dialog shows them: 'free=1, gold=3' ('' for none)."""
    return ", ".join(f"{k}={v:g}" for k, v in sorted((weights or {}).items()))


def parse_weights(text: str) -> dict[str, float] | None:
    """The dialog's weights text as a setting (None: every key 1); ValueError names the part it cannot read."""
    out: dict[str, float] = {}
    for part in text.replace(",", " ").split():
        key, eq, n = part.partition("=")
        try:
            if not key or not eq:
                raise ValueError
            out[key] = float(n)
        except ValueError:
            raise ValueError(f"weights: {part!r} is not KEY=N (a fairness key and its weight)") from None
    return out or None


@page_state("/queues", editable=("limit_value", "rate_value", "burst_value", "key_value", "weights_value",
                                 *(f for f, _, _ in
                                 BREAKER_FIELDS), "mode_value"))  # fmt: skip
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
    fair_value: bool = False  # the dialog's fair-share switch, and its weights as KEY=N text
    weights_value: str = ""
    fair_was: bool = False  # as the dialog opened: only what the operator changed is sent
    weights_was: str = ""
    breakers: list[dict[str, str]] = []
    breaker_queue: str = ""  # the queue whose breaker numbers the dialog edits
    ratio_value: str = ""
    window_value: str = ""
    reset_value: str = ""
    min_value: str = ""
    mode_value: str = "default"
    keys_queue: str = ""  # the queue whose per-key usage is shown
    key_running: list[dict[str, str]] = []
    key_waiting: list[dict[str, str]] = []
    keys_note: str = ""

    async def fetch(self) -> None:
        client = self.client()
        self.breakers = [
            {"queue": b["queue"], "host": b["host"], "state": b["state"], "mode": b["mode"],
             "window": breaker_window_text(b),
             "opened": str(b["times_opened"]), "reason": b["reason"] or "",
             "refuse_reset": self.may("breakers.reset", b["queue"])}
            for b in await client.breakers()
        ]  # fmt: skip
        if self.keys_queue:
            await self._fetch_keys()
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
                "weights": weights_text(q.get("fairness_weights")),
                "depth": str(q.get("depth", 0)), "running": str(q.get("running", 0)),
                "scheduled": str(q.get("scheduled", 0)), "dead": str(counts.get("dead", 0)),
                "succeeded": str(counts.get("succeeded", 0)),
                "refuse_pause": self.may("queues.pause", q["name"]),
                "refuse_configure": self.may("queues.configure", q["name"]),
                **{field: _text(q.get(setting)) for field, setting, _ in BREAKER_FIELDS},
                "mode_value": q.get("breaker_mode") or "default",
            })  # fmt: skip
        self.queues = rows

    async def _fetch_keys(self) -> None:
        u = await self.client().queue_keys(self.keys_queue)
        limit = u["key_concurrency"]
        self.key_running = [{"key": r["key"], "running": str(r["running"]) + ("" if limit is None else f" of {limit}")}
                            for r in u["running_by_concurrency_key"]]  # fmt: skip
        self.key_waiting = [{"key": w["key"], "waiting": f"{w['waiting']:,}", "served": f"{w['served']:g}"}
                            for w in u["waiting_by_fairness_key"]]  # fmt: skip
        notes = [key_limit_text(limit)]
        if u["more_running_keys"] or u["more_waiting_keys"]:
            notes.append("the busiest 100 keys are listed")
        if u["waiting_capped"]:
            notes.append(f"the first {u['waiting_counted']:,} waiting jobs were counted")
        self.keys_note = "; ".join(notes)

    async def show_keys(self, name: str) -> Any:
        self.keys_queue = name
        try:
            await self._fetch_keys()
        except JobDeckError as exc:
            self.keys_queue = ""
            return self.failed(exc)
        return None

    def hide_keys(self) -> None:
        self.keys_queue = ""

    async def live_refresh(self, changes: list[Change] | None) -> None:
        if touched(changes, "queue.", "job.", "breaker."):
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

    def edit_limit(self, row: dict[str, str]) -> None:
        self.limit_queue, self.limit_value = row["name"], row["concurrency"]
        self.rate_value, self.burst_value, self.key_value = row["rate_limit"], row["rate_burst"], row["key_concurrency"]
        self.fair_value = self.fair_was = row["fair"] != ""
        self.weights_value = self.weights_was = row["weights"]

    def set_fair(self, on: bool) -> None:
        self.fair_value = on

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
        if self.fair_value != self.fair_was:
            changes["fair"] = self.fair_value
        if self.weights_value.strip() != self.weights_was:
            try:
                changes["fairness_weights"] = parse_weights(self.weights_value)
            except ValueError as exc:
                return rx.toast.error(str(exc))
        try:
            await self.client().update_queue(self.limit_queue, **changes)
        except JobDeckError as exc:
            return self.failed(exc)
        name, self.limit_queue = self.limit_queue, ""
        await self.fetch()
        return rx.toast.success(f"queue {name}: limits saved")

    def edit_breakers(self, row: dict[str, str]) -> None:
        self.breaker_queue = row["name"]
        for field, _, _ in BREAKER_FIELDS:
            setattr(self, field, row[field])
        self.mode_value = row["mode_value"]

    def close_breakers(self) -> None:
        self.breaker_queue = ""

    def set_mode(self, value: str) -> None:
        self.mode_value = value

    async def save_breakers(self) -> Any:
        changes: dict[str, Any] = {"breaker_mode": None if self.mode_value == "default" else self.mode_value}
        for field, setting, kind in BREAKER_FIELDS:
            text = str(getattr(self, field)).strip()
            try:
                changes[setting] = kind(text) if text else None
            except ValueError:
                return rx.toast.error(f"{setting}: {text!r} is not a {'whole ' if kind is int else ''}number "
                                      "(empty: the default)", duration=6000)  # fmt: skip
        try:
            await self.client().update_queue(self.breaker_queue, **changes)
        except JobDeckError as exc:
            if exc.field and exc.field not in exc.message:
                exc.message = f"{exc.field}: {exc.message}"
            return self.failed(exc)
        name, self.breaker_queue = self.breaker_queue, ""
        await self.fetch()
        return rx.toast.success(f"queue {name}: breaker settings saved")

    async def reset_breaker(self, queue: str, host: str) -> Any:
        try:
            await self.client().reset_breaker(queue, host)
        except JobDeckError as exc:
            return self.failed(exc)
        await self.fetch()
        return rx.toast.success(f"breaker of {host} in queue {queue} closed: its held jobs go now")


@page_state("/agents")
class AgentsState(AppState):
    """The Agents page."""

    agents: list[dict[str, str]] = []

    async def fetch(self) -> None:
        self.agents = [
            {
                "name": a["name"],
                "host": f"{a.get('host', '')}:{a.get('pid', '')}",
                "queues": agent_queues_text(a).replace(",", ", "),
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
                "no limit",
            ),
            class_name="queue-rate",
        ),
        rx.table.cell(
            rx.cond(q["key_concurrency"] != "", q["key_concurrency"], "no limit"),
            rx.cond(q["fair"] != "", rx.badge("fair", color_scheme="blue", margin_left="4px"), ""),
            rx.cond(q["weights"] != "", rx.text(" ", q["weights"], as_="span", class_name="queue-weights"), ""),
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
                    on_click=QueuesState.edit_limit(q),  # type: ignore[arg-type]
                    disabled=q["refuse_configure"] != "",
                    title=q["refuse_configure"],
                ),
                rx.button(
                    "Breakers",
                    size="1",
                    variant="soft",
                    on_click=QueuesState.edit_breakers(q),  # type: ignore[arg-type]
                    disabled=q["refuse_configure"] != "",
                    title=rx.cond(q["refuse_configure"] != "", q["refuse_configure"], "its circuit breakers' numbers"),
                    class_name="queue-breakers-button",
                ),
                rx.button(
                    "Keys",
                    size="1",
                    variant="soft",
                    color_scheme="gray",
                    on_click=QueuesState.show_keys(q["name"]),
                    title="running jobs per concurrency key, queued jobs per fairness key",
                    class_name="queue-keys-button",
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


def _queue_dialog(title: str, queue: Any, fields: list[rx.Component], close: Any, save: Any) -> rx.Component:
    """A queue's settings dialog: its fields, Cancel and Save (open while `queue` is not "")."""
    return rx.dialog.root(
        rx.dialog.content(
            rx.dialog.title(title, queue),
            rx.form(
                rx.vstack(
                    *fields,
                    rx.hstack(
                        rx.button("Cancel", type="button", variant="soft", color_scheme="gray", on_click=close),
                        rx.button("Save", type="submit"),
                        justify="end",
                        width="100%",
                    ),
                ),
                on_submit=lambda _: save(),
            ),
        ),
        open=queue != "",
        on_open_change=lambda _: close(),
    )


def _limit_dialog() -> rx.Component:
    fields = [
        rx.el.label("Running jobs at most (empty: no limit)", html_for="limit-value"),
        rx.input(value=QueuesState.limit_value, id="limit-value", type="number", auto_focus=True,
                 on_change=lambda v: QueuesState.set_field("limit_value", v)),
        *_limit_input("Jobs started per second, over every node (empty: no rate limit)", "rate-value",
                      QueuesState.rate_value, "rate_value"),
        *_limit_input("Burst: starts allowed at once (empty: a tenth of a second's worth)", "burst-value",
                      QueuesState.burst_value, "burst_value"),
        *_limit_input("Jobs of one concurrency key at once (empty: no limit)", "key-value", QueuesState.key_value,
                      "key_value"),
        rx.el.label(rx.hstack(rx.switch(checked=QueuesState.fair_value, on_change=QueuesState.set_fair, id="fair-value"),
                              rx.text("Fair share: claims rotate between fairness keys"), spacing="2")),
        rx.el.label("Fairness keys' weights, KEY=N (empty: every key 1)", html_for="weights-value"),
        rx.input(value=QueuesState.weights_value, id="weights-value", placeholder="gold=3, free=1",
                 on_change=lambda v: QueuesState.set_field("weights_value", v)),
    ]  # fmt: skip
    return _queue_dialog("Limits of queue ", QueuesState.limit_queue, fields, QueuesState.close_limit,
                         QueuesState.save_limit)  # fmt: skip


def _breaker_dialog() -> rx.Component:
    inputs = (("Failure ratio that opens a breaker, 0-1 (empty: 0.5)", "ratio-value", QueuesState.ratio_value,
               "ratio_value"),
              ("Window: seconds of requests it judges (empty: 10)", "window-value", QueuesState.window_value,
               "window_value"),
              ("Reset: seconds open before one trial request (empty: 30)", "reset-value", QueuesState.reset_value,
               "reset_value"),
              ("Fewest requests in the window that can open it (empty: 5)", "min-value", QueuesState.min_value,
               "min_value"))  # fmt: skip
    fields = [
        *(c for args in inputs for c in _limit_input(*args)),
        rx.el.label("While a breaker is open, its http jobs", html_for="mode-value"),
        rx.el.select(
            rx.el.option("wait (the default)", value="default"),
            rx.el.option("wait: held, no attempt used", value="wait"),
            rx.el.option("fail at once (their backoff applies)", value="fail"),
            value=QueuesState.mode_value,
            id="mode-value",
            on_change=QueuesState.set_mode,
        ),
    ]
    return _queue_dialog("Circuit breakers of queue ", QueuesState.breaker_queue, fields, QueuesState.close_breakers,
                         QueuesState.save_breakers)  # fmt: skip


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
        _keys_panel(),
        rx.heading("Circuit breakers", size="4", margin_top="1.5em"),
        rx.text(
            "One per queue and host its http jobs call, shared by every agent and node: open, nothing is sent to "
            "the host (its jobs wait, or fail at once in fail mode) until a trial request succeeds.",
            size="2",
            color_scheme="gray",
        ),
        rx.cond(
            QueuesState.breakers.length() > 0,  # type: ignore[attr-defined]
            rx.table.root(
                rx.table.header(
                    rx.table.row(
                        *(
                            rx.table.column_header_cell(h)
                            for h in ("Queue", "Host", "State", "Mode", "Window", "Opened", "Why", "")
                        )
                    )
                ),
                rx.table.body(rx.foreach(QueuesState.breakers, _breaker_row)),
                width="100%",
                id="breakers-table",
            ),
            rx.text("No breakers yet.", size="2", id="no-breakers"),
        ),
        _limit_dialog(),
        _breaker_dialog(),
    )


def _breaker_row(b: Any) -> rx.Component:
    state = rx.match(
        b["state"],
        ("open", rx.badge("open", color_scheme="red")),
        ("half_open", rx.badge("half open", color_scheme="orange")),
        rx.badge("closed", color_scheme="green"),
    )
    return rx.table.row(
        rx.table.cell(b["queue"]),
        rx.table.row_header_cell(b["host"]),
        rx.table.cell(state),
        rx.table.cell(b["mode"]),
        rx.table.cell(b["window"]),
        rx.table.cell(b["opened"]),
        rx.table.cell(rx.text(b["reason"], size="1")),
        rx.table.cell(
            rx.button(
                "Reset",
                size="1",
                variant="soft",
                color_scheme="red",
                on_click=QueuesState.reset_breaker(b["queue"], b["host"]),
                disabled=b["refuse_reset"] != "",
                title=rx.cond(b["refuse_reset"] != "", b["refuse_reset"], "close it now: the jobs it held go"),
                class_name="breaker-reset",
            )
        ),
        id="breaker-row-" + b["queue"] + "-" + b["host"],
    )


def _key_table(title: str, heads: tuple[str, ...], rows: Any, cells: Any, id_: str) -> rx.Component:
    return rx.box(
        rx.heading(title, size="3"),
        rx.cond(
            rows.length() > 0,
            rx.table.root(
                rx.table.header(rx.table.row(*(rx.table.column_header_cell(h) for h in heads))),
                rx.table.body(rx.foreach(rows, lambda r: rx.table.row(*(rx.table.cell(r[c]) for c in cells)))),
                id=id_,
            ),
            rx.text("none", size="2"),
        ),
        flex="1",
    )


def _keys_panel() -> rx.Component:
    return rx.cond(
        QueuesState.keys_queue != "",
        rx.card(
            rx.hstack(
                rx.heading("Per-key usage of queue ", QueuesState.keys_queue, size="4"),
                rx.button("Close", size="1", variant="soft", color_scheme="gray", on_click=QueuesState.hide_keys),
                justify="between",
                width="100%",
            ),
            rx.text(QueuesState.keys_note, size="2", color_scheme="gray"),
            rx.hstack(
                _key_table(
                    "Running, per concurrency key",
                    ("Key", "Running"),
                    QueuesState.key_running,
                    ("key", "running"),
                    "keys-running",
                ),
                _key_table(
                    "Queued, per fairness key",
                    ("Key", "Queued", "Served (starts / weight)"),
                    QueuesState.key_waiting,
                    ("key", "waiting", "served"),
                    "keys-waiting",
                ),
                spacing="6",
                width="100%",
                align="start",
            ),
            margin_top="1em",
            id="keys-panel",
        ),
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
