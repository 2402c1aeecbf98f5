"""A schedule's details on the Schedules page: its policies, next fire times (its zone and UTC, with
what a policy or the clocks do to them), run history, run now, and a backfill with a dry-run count."""

from __future__ import annotations

from typing import Any

import reflex as rx

from web_ui.pages.schedules_state import BACKFILL_OVERLAPS, SchedulesState
from web_ui.state import AppState


def field_error(errors: Any, name: str, id_prefix: str) -> rx.Component:
    """The server's (or the form's) reason under the field it names."""
    return rx.cond(
        errors.contains(name),
        rx.text(errors[name], color_scheme="red", size="1", id=f"{id_prefix}{name}", role="alert"),
        rx.fragment(),
    )


def labelled_select(label: str, id_: str, options: tuple[str, ...], value: Any, on_change: Any,
                    error: rx.Component) -> rx.Component:  # fmt: skip
    """A select with its label above and its error below."""
    return rx.vstack(
        rx.el.label(label, html_for=id_, style={"font_size": "0.85rem"}),
        rx.select(list(options), value=value, on_change=on_change, id=id_),
        error,
        spacing="1",
    )


def _bf_error(name: str) -> rx.Component:
    return field_error(SchedulesState.bf_errors, name, "bf-error-")


def _small_table(id_: str, heads: tuple[str, ...], rows: Any, row: Any) -> rx.Component:
    return rx.table.root(
        rx.table.header(rx.table.row(*(rx.table.column_header_cell(h) for h in heads))),
        rx.table.body(rx.foreach(rows, row)),
        size="1",
        width="100%",
        id=id_,
    )


def _backfill() -> rx.Component:
    def when_input(label: str, name: str, value: Any, on_change: Any) -> rx.Component:
        return rx.vstack(
            rx.el.label(label, html_for=f"bf-{name}", style={"font_size": "0.85rem"}),
            rx.input(type="datetime-local", value=value, on_change=on_change, id=f"bf-{name}"),
            _bf_error(name),
            spacing="1",
        )

    return rx.vstack(
        rx.heading("Backfill", size="3"),
        rx.text(
            "Makes the runs of every past fire time in the range that has none (each at most once; "
            "times in the schedule's zone, ",
            SchedulesState.bf_zone,
            ").",
            size="1",
            color_scheme="gray",
        ),
        rx.hstack(
            when_input("From", "from", SchedulesState.bf_from, SchedulesState.set_bf_from),
            when_input("To", "to", SchedulesState.bf_to, SchedulesState.set_bf_to),
            labelled_select(
                "Runs",
                "bf-overlap",
                BACKFILL_OVERLAPS,
                SchedulesState.bf_overlap,
                SchedulesState.set_bf_overlap,
                _bf_error("overlap"),
            ),
            align="end",
            wrap="wrap",
        ),
        rx.hstack(
            rx.button("Count (dry run)", variant="soft", on_click=SchedulesState.backfill(True), id="bf-count"),
            rx.button(
                "Backfill", on_click=SchedulesState.backfill(False), id="bf-run", disabled=~AppState.can_write_schedules
            ),
        ),
        rx.text(SchedulesState.bf_result, size="2", id="bf-result", aria_live="polite"),
        spacing="2",
        width="100%",
    )


def schedule_detail() -> rx.Component:
    """The details dialog (opened by a row's Details button)."""
    return rx.dialog.root(
        rx.dialog.content(
            rx.dialog.title("Schedule ", SchedulesState.detail_name),
            rx.vstack(
                rx.hstack(
                    rx.text(SchedulesState.detail_policy, size="2", id="sd-policy"),
                    rx.spacer(),
                    rx.button(
                        "Run now",
                        size="1",
                        on_click=SchedulesState.run_now_detail,
                        id="sd-run",
                        disabled=~AppState.can_write_schedules,
                    ),
                    width="100%",
                ),
                rx.heading("Next fire times", size="3"),
                _small_table(
                    "sd-upcoming",
                    ("Local", "UTC", "Marks"),
                    SchedulesState.upcoming,
                    lambda t: rx.table.row(
                        rx.table.cell(t["local"]), rx.table.cell(t["utc"]), rx.table.cell(t["marks"])
                    ),
                ),
                rx.heading("Run history", size="3"),
                rx.cond(
                    SchedulesState.history.length() == 0,
                    rx.text("no runs yet", size="2", color_scheme="gray", id="sd-no-history"),
                    _small_table(
                        "sd-history",
                        ("Fire time", "Job", "Outcome", "Duration"),
                        SchedulesState.history,
                        lambda j: rx.table.row(
                            rx.table.cell(j["fire_time"]),
                            rx.table.cell(rx.link("#", j["id"], href="/jobs/" + j["id"])),
                            rx.table.cell(rx.badge(j["state"], color_scheme=j["color"], class_name="sd-outcome")),
                            rx.table.cell(j["duration"]),
                            id="sd-run-" + j["id"],
                        ),
                    ),
                ),
                _backfill(),
                rx.hstack(
                    rx.dialog.close(rx.button("Close", variant="soft", color_scheme="gray")),
                    justify="end",
                    width="100%",
                ),
                spacing="3",
                width="100%",
            ),
            max_width="860px",
            id="schedule-detail",
        ),
        open=SchedulesState.detail_open,
        on_open_change=SchedulesState.set_detail_open,
    )
