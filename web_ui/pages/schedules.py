"""Schedules: the list with pause / resume / run / delete, and a create-and-edit form whose cron
field shows the next five fire times, in the chosen zone, as you type."""

from __future__ import annotations

import shlex
from typing import Any

import reflex as rx

from core.errors import InvalidInput, JobDeckError
from web_ui.format import ago, clock, clock_both, task_text
from web_ui.hub import Change, touched
from web_ui.layout import layout
from web_ui.state import AppState, page_state, set_editable

ZONES = ("UTC", "Europe/Paris", "Europe/London", "Europe/Berlin", "America/New_York", "America/Chicago",
         "America/Los_Angeles", "America/Sao_Paulo", "Asia/Tokyo", "Asia/Kolkata", "Asia/Singapore",
         "Australia/Sydney")  # fmt: skip
FORM_FIELDS = ("name", "cron", "timezone", "command", "queue")


@page_state("/schedules", editable=("s_name", "s_command", "s_queue"))
class SchedulesState(AppState):
    """The Schedules page."""

    def set_field(self, name: str, value: str) -> None:
        set_editable(self, name, value)

    schedules: list[dict[str, str]] = []
    editing: int = 0  # the schedule being edited; 0: a new one
    form_open: bool = False
    s_name: str = ""
    s_cron: str = "*/5 * * * *"
    s_timezone: str = "UTC"
    s_command: str = ""
    s_queue: str = "default"
    errors: dict[str, str] = {}
    fire_times: list[dict[str, str]] = []

    async def fetch(self) -> None:
        self.schedules = [
            {
                "id": str(s["id"]),
                "name": s["name"],
                "timing": s.get("cron") or (f"every {s['interval']:g}s" if s.get("interval") else f"at {s.get('at')}"),
                "timezone": str(s.get("timezone") or ""),
                "task": task_text((s.get("job") or {}).get("task") or {}),
                "queue": str((s.get("job") or {}).get("queue") or ""),
                "next": clock(s.get("next_fire_at"), str(s.get("timezone") or "UTC")),  # the schedule's zone
                "next_both": clock_both(s.get("next_fire_at"), str(s.get("timezone") or "UTC"), self.zone_name()),
                "next_in": ago(s.get("next_fire_at")),
                "fired": str(s.get("fired", 0)),
                "paused": "1" if s.get("paused") else "",
            }
            for s in await self.client().schedules()
        ]

    async def live_refresh(self, changes: list[Change] | None) -> None:
        if touched(changes, "schedule."):
            await self.fetch()

    async def load(self) -> Any:
        return await self._fetch_or_fail()

    # -- the form

    async def preview(self) -> None:
        """The next five fire times of the cron field in the chosen zone, or the server's reason why not."""
        self.errors = {k: v for k, v in self.errors.items() if k not in ("cron", "timezone")}
        if not self.s_cron.strip():
            self.fire_times = []
            return
        try:
            got = await self.client().preview_timing({"cron": self.s_cron, "timezone": self.s_timezone}, n=5)
        except InvalidInput as exc:
            field = exc.field if exc.field in ("cron", "timezone") else "cron"
            self.errors = {**self.errors, field: exc.message}
            self.fire_times = []
            return
        except JobDeckError as exc:
            if exc.status in (404, 405):
                self.errors = {**self.errors, "cron": "this core cannot preview a cron field yet"}
            else:
                self.errors = {**self.errors, "cron": exc.message}
            self.fire_times = []
            return
        self.fire_times = [{"local": str(t.get("local", "")), "utc": str(t.get("utc", ""))}
                           for t in got.get("fire_times", [])]  # fmt: skip

    async def set_cron(self, value: str) -> None:
        self.s_cron = value
        await self.preview()

    async def set_timezone(self, value: str) -> None:
        self.s_timezone = value
        await self.preview()

    async def open_new(self) -> None:
        self.editing, self.form_open, self.errors = 0, True, {}
        self.s_name, self.s_command, self.s_cron, self.s_timezone, self.s_queue = (
            "",
            "",
            "*/5 * * * *",
            "UTC",
            "default",
        )
        await self.preview()

    async def open_edit(self, schedule_id: str) -> Any:
        try:
            s = await self.client().get_schedule(int(schedule_id))
        except JobDeckError as exc:
            return self.failed(exc)
        job = s.get("job") or {}
        task = job.get("task") or {}
        self.editing, self.form_open, self.errors = int(schedule_id), True, {}
        self.s_name, self.s_cron, self.s_timezone = s["name"], s.get("cron") or "", s.get("timezone") or "UTC"
        self.s_command = shlex.join(task.get("argv") or []) or str(task.get("command") or "")
        self.s_queue = str(job.get("queue") or "default")
        await self.preview()
        return None

    def set_form_open(self, value: bool) -> None:
        self.form_open = value

    async def save(self) -> Any:
        errors: dict[str, str] = {}
        if not self.s_name.strip():
            errors["name"] = "a name is needed"
        try:
            argv = shlex.split(self.s_command)
        except ValueError as exc:
            argv, errors["command"] = [], f"cannot split the command: {exc}"
        if not argv and "command" not in errors:
            errors["command"] = "a command is needed"
        if errors:
            self.errors = errors
            return None
        body: dict[str, Any] = {"name": self.s_name.strip(), "cron": self.s_cron, "timezone": self.s_timezone,
                                "job": {"queue": self.s_queue.strip() or "default",
                                        "task": {"kind": "shell", "argv": argv}}}  # fmt: skip
        client = self.client()
        try:
            if self.editing:
                await client.update_schedule(self.editing, body)
            else:
                await client.create_schedule(body)
        except InvalidInput as exc:
            field = (exc.field or "").split(".")[-1]
            field = "command" if field in ("argv", "task", "job") else field
            self.errors = {field if field in FORM_FIELDS else "name": exc.message}
            return None
        except JobDeckError as exc:
            return self.failed(exc)
        self.form_open = False
        await self.fetch()
        return rx.toast.success(f"schedule {body['name']} saved", duration=2000)

    async def act(self, schedule_id: str, action: str) -> Any:
        client = self.client()
        try:
            if action == "delete":
                await client.delete_schedule(int(schedule_id))
            else:
                await client.schedule_action(int(schedule_id), action)
        except JobDeckError as exc:
            return self.failed(exc)
        await self.fetch()
        return rx.toast.success(f"schedule {schedule_id}: {action} done", duration=2000)


def _error(name: str) -> rx.Component:
    return rx.cond(
        SchedulesState.errors.contains(name),
        rx.text(SchedulesState.errors[name], color_scheme="red", size="1", id=f"s-error-{name}", role="alert"),
        rx.fragment(),
    )


def _input(label: str, name: str, value: Any, on_change: Any, **props: Any) -> rx.Component:
    return rx.vstack(
        rx.el.label(label, html_for=f"s-{name}", style={"font_size": "0.85rem", "font_weight": "500"}),
        rx.input(value=value, on_change=on_change, id=f"s-{name}", width="100%", **props),
        _error(name),
        spacing="1",
        width="100%",
    )


def _form() -> rx.Component:
    return rx.dialog.root(
        rx.dialog.content(
            rx.dialog.title(rx.cond(SchedulesState.editing == 0, "New schedule", "Edit schedule")),
            rx.form(
                rx.vstack(
                    _input("Name", "name", SchedulesState.s_name, lambda v: SchedulesState.set_field("s_name", v)),
                    rx.hstack(
                        _input(
                            "Cron (min hour day month weekday)",
                            "cron",
                            SchedulesState.s_cron,
                            SchedulesState.set_cron,
                            debounce_timeout=150,
                        ),
                        rx.vstack(
                            rx.el.label("Time zone", html_for="s-timezone", style={"font_size": "0.85rem"}),
                            rx.select(
                                list(ZONES),
                                value=SchedulesState.s_timezone,
                                on_change=SchedulesState.set_timezone,
                                id="s-timezone",
                            ),
                            _error("timezone"),
                            spacing="1",
                        ),
                        width="100%",
                    ),
                    rx.box(
                        rx.text("Next fire times (", SchedulesState.s_timezone, "):", size="2", weight="medium"),
                        rx.el.ol(
                            rx.foreach(
                                SchedulesState.fire_times,
                                lambda t: rx.el.li(
                                    rx.text(t["local"], size="2", as_="span"),
                                    rx.text("  UTC ", t["utc"], size="1", color_scheme="gray", as_="span"),
                                ),
                            ),
                            style={"margin": "0.25rem 0 0 1.25rem"},
                        ),
                        id="fire-times",
                        aria_live="polite",
                        width="100%",
                    ),
                    _input(
                        "Command",
                        "command",
                        SchedulesState.s_command,
                        lambda v: SchedulesState.set_field("s_command", v),
                        placeholder="./nightly.sh",
                    ),
                    _input("Queue", "queue", SchedulesState.s_queue, lambda v: SchedulesState.set_field("s_queue", v)),
                    rx.hstack(
                        rx.dialog.close(rx.button("Cancel", type="button", variant="soft", color_scheme="gray")),
                        rx.button("Save", type="submit", id="s-save"),
                        justify="end",
                        width="100%",
                    ),
                    spacing="3",
                ),
                on_submit=lambda _: SchedulesState.save(),
            ),
        ),
        open=SchedulesState.form_open,
        on_open_change=SchedulesState.set_form_open,
    )


def _row(s: Any) -> rx.Component:
    def act(label: str, action: str) -> rx.Component:
        return rx.button(label, size="1", variant="soft", on_click=SchedulesState.act(s["id"], action),
                         disabled=~AppState.can_write_schedules)  # fmt: skip

    return rx.table.row(
        rx.table.cell(s["id"]),
        rx.table.row_header_cell(s["name"]),
        rx.table.cell(rx.code(s["timing"])),
        rx.table.cell(s["timezone"]),
        rx.table.cell(s["task"]),
        rx.table.cell(s["queue"]),
        rx.table.cell(
            rx.cond(
                s["paused"] != "",
                rx.badge("paused", color_scheme="purple"),
                rx.text(s["next"], " (", s["next_in"], ")", title=s["next_both"], class_name="schedule-next"),
            )
        ),
        rx.table.cell(s["fired"]),
        rx.table.cell(
            rx.hstack(
                rx.button(
                    "Edit",
                    size="1",
                    variant="soft",
                    on_click=SchedulesState.open_edit(s["id"]),
                    disabled=~AppState.can_write_schedules,
                ),
                rx.cond(s["paused"] != "", act("Resume", "resume"), act("Pause", "pause")),
                act("Run now", "run"),
                act("Delete", "delete"),
                spacing="1",
            )
        ),
        id="schedule-row-" + s["id"],
    )


def schedules_page() -> rx.Component:
    """The Schedules page."""
    heads = ("ID", "Name", "Timing", "Zone", "Task", "Queue", "Next fire", "Fired", "Actions")
    return layout(
        "Schedules",
        rx.hstack(
            rx.spacer(),
            rx.button(
                rx.icon("plus", size=16),
                "New schedule",
                on_click=SchedulesState.open_new,
                disabled=~AppState.can_write_schedules,
                id="new-schedule",
            ),
            width="100%",
        ),
        rx.table.root(
            rx.table.header(rx.table.row(*(rx.table.column_header_cell(h) for h in heads))),
            rx.table.body(rx.foreach(SchedulesState.schedules, _row)),
            width="100%",
            id="schedules-table",
        ),
        _form(),
    )
