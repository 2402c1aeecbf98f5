"""Schedules: the list (policies, fired / skipped / missed counts, why one paused itself) with
pause / resume / run now / delete, a create-and-edit form (a cron field, every N seconds, or once at
a time) that shows the next five fire times, in the chosen zone, as you type, and a schedule's details (web_ui/pages/schedule_detail.py)."""

from __future__ import annotations

from typing import Any

import reflex as rx

from web_ui.layout import layout
from web_ui.pages.schedule_detail import field_error, labelled_select, schedule_detail
from web_ui.pages.schedules_state import CATCH_UPS, OVERLAPS, TIMINGS, ZONES, SchedulesState
from web_ui.state import AppState

__all__ = ["SchedulesState", "schedules_page"]


def _error(name: str) -> rx.Component:
    return field_error(SchedulesState.errors, name, "s-error-")


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
                        labelled_select(
                            "Runs",
                            "s-timing",
                            TIMINGS,
                            SchedulesState.s_timing,
                            lambda v: SchedulesState.set_previewed("s_timing", v),
                            rx.fragment(),
                        ),
                        rx.match(
                            SchedulesState.s_timing,
                            (
                                "interval",
                                _input(
                                    "Every (seconds)",
                                    "interval",
                                    SchedulesState.s_interval,
                                    lambda v: SchedulesState.set_previewed("s_interval", v),
                                    debounce_timeout=150,
                                ),
                            ),
                            (
                                "once",
                                _input(
                                    "At (in the time zone)",
                                    "at",
                                    SchedulesState.s_at,
                                    lambda v: SchedulesState.set_previewed("s_at", v),
                                    type="datetime-local",
                                ),
                            ),
                            _input(
                                "Cron (min hour day month weekday)",
                                "cron",
                                SchedulesState.s_cron,
                                lambda v: SchedulesState.set_previewed("s_cron", v),
                                debounce_timeout=150,
                            ),
                        ),
                        labelled_select(
                            "Time zone",
                            "s-timezone",
                            ZONES,
                            SchedulesState.s_timezone,
                            lambda v: SchedulesState.set_previewed("s_timezone", v),
                            _error("timezone"),
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
                                    rx.text("  ", t["utc"], size="1", color_scheme="gray", as_="span"),
                                    rx.text("  ", t["marks"], size="1", color_scheme="orange", as_="span"),
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
                        placeholder=SchedulesState.s_command_hint,
                    ),
                    _input("Queue", "queue", SchedulesState.s_queue, lambda v: SchedulesState.set_field("s_queue", v)),
                    _policies(),
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


def _text(label: str, name: str, var: str, placeholder: str) -> rx.Component:
    return _input(label, name, getattr(SchedulesState, var),
                  lambda v: SchedulesState.set_field(var, v), placeholder=placeholder)  # fmt: skip


def _policies() -> rx.Component:
    """What happens around a fire time (docs/schedules.md); blank numbers: the defaults."""
    return rx.vstack(
        rx.text("Policies", size="2", weight="medium"),
        rx.hstack(
            labelled_select(
                "When the last run still runs",
                "s-overlap",
                OVERLAPS,
                SchedulesState.s_overlap,
                SchedulesState.set_overlap,
                _error("overlap"),
            ),
            labelled_select(
                "Missed fire times",
                "s-catch-up",
                CATCH_UPS,
                SchedulesState.s_catch_up,
                SchedulesState.set_catch_up,
                _error("catch_up"),
            ),
            width="100%",
        ),
        rx.hstack(
            _text("Catch-up window (s)", "catch_up_window", "s_window", "3600"),
            _text("Jitter (s)", "jitter", "s_jitter", "0"),
            _text("Pause after failures", "pause_after_failures", "s_pause_after", "0: never"),
            width="100%",
        ),
        rx.hstack(
            _input(
                "Skip these dates",
                "exclude_dates",
                SchedulesState.s_exclude_dates,
                lambda v: SchedulesState.set_previewed("s_exclude_dates", v),
                placeholder="2026-12-25, 2027-01-01",
                debounce_timeout=300,
            ),
            _input(
                "Skip fire times matching cron",
                "exclude_cron",
                SchedulesState.s_exclude_cron,
                lambda v: SchedulesState.set_previewed("s_exclude_cron", v),
                placeholder="* * * * 6,0",
                debounce_timeout=300,
            ),
            width="100%",
        ),
        spacing="2",
        width="100%",
        id="s-policies",
    )


def _row(s: Any) -> rx.Component:
    def act(label: str, action: str) -> rx.Component:
        return rx.button(label, size="1", variant="soft", on_click=SchedulesState.act(s["id"], action),
                         disabled=~AppState.can_write_schedules)  # fmt: skip

    return rx.table.row(
        rx.table.cell(s["id"]),
        rx.table.row_header_cell(s["name"]),
        rx.table.cell(rx.code(s["timing"], white_space="nowrap")),
        rx.table.cell(s["timezone"]),
        rx.table.cell(s["task"]),
        rx.table.cell(s["queue"]),
        rx.table.cell(rx.text(s["overlap"], " · catch-up ", s["catch_up"], size="1"), class_name="schedule-policy"),
        rx.table.cell(
            rx.cond(
                s["paused"] != "",
                rx.vstack(
                    rx.badge("paused", color_scheme="purple"),
                    rx.text(s["paused_reason"], size="1", color_scheme="red", class_name="schedule-paused-reason"),
                    spacing="1",
                ),
                rx.text(s["next"], " (", s["next_in"], ")", title=s["next_both"], class_name="schedule-next"),
            )
        ),
        rx.table.cell(
            rx.text(
                s["fired"],
                " / ",
                s["skipped"],
                " / ",
                s["missed"],
                class_name="schedule-counts",
                title="fired / skipped by the overlap policy / missed (downtime or a pause)",
            )
        ),
        rx.table.cell(
            rx.hstack(
                rx.button("Details", size="1", variant="soft", on_click=SchedulesState.open_detail(s["id"])),
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
                wrap="wrap",
            )
        ),
        id="schedule-row-" + s["id"],
    )


def schedules_page() -> rx.Component:
    """The Schedules page."""
    heads = ("ID", "Name", "Timing", "Zone", "Task", "Queue", "Policy", "Next fire", "Fired / skipped / missed",
             "Actions")  # fmt: skip
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
        schedule_detail(),
    )
