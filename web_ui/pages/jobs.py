"""Jobs: a server-side filtered and paged table that follows the feed, row and bulk actions,
and a form to submit a job."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import reflex as rx

from core.errors import JobDeckError
from web_ui.format import STATES, job_row
from web_ui.hub import Change, touched
from web_ui.layout import layout
from web_ui.pages.job_submit import submit_dialog
from web_ui.state import AppState, page_state, set_editable

PAGE_SIZE = 50
BULK_ACTIONS = ("pause", "resume", "cancel", "retry")
SORTABLE = {"ID": "id", "Queue": "queue", "State": "state", "Priority": "priority", "Created": "created",
            "Duration": "duration"}  # fmt: skip
URL_KEYS = ("state", "queue", "name", "tag", "q", "sort", "order")  # what ?... of /jobs holds


@page_state(
    "/jobs",
    editable=("prio_value", "bulk_priority"),
)
class JobsState(AppState):
    """The Jobs page."""

    def set_field(self, name: str, value: str) -> None:
        set_editable(self, name, value)

    f_state: str = "all"
    f_queue: str = ""
    f_name: str = ""
    f_tag: str = ""
    f_q: str = ""  # search: id, name, task text (args), tags
    sort: str = "id"
    order: str = "desc"
    rows: list[dict[str, str]] = []
    loaded: bool = False  # the first page has arrived (until then: "Loading", not "No jobs match")
    total: int = 0
    total_exact: bool = True
    cursors: list[str] = []  # the cursor of each page before this one (for "previous")
    cursor: str = ""
    next_cursor: str = ""
    selected: list[str] = []
    bulk_priority: str = ""
    confirm_action: str = ""  # a bulk action on the whole filter waiting for a yes
    confirm_matched: int = 0  # how many jobs it would touch (a dry run's count)
    # the priority dialog
    prio_job: str = ""
    prio_value: str = ""

    def _filter(self) -> dict[str, Any]:
        flt: dict[str, Any] = {}
        if self.f_state and self.f_state != "all":
            flt["state"] = self.f_state
        if self.f_queue.strip():
            flt["queue"] = self.f_queue.strip()
        if self.f_name.strip():
            flt["name_prefix"] = self.f_name.strip()
        if self.f_tag.strip():
            flt["tag"] = self.f_tag.strip()
        if self.f_q.strip():
            flt["q"] = self.f_q.strip()
        return flt

    async def fetch(self) -> None:
        """Read the page shown from the core (sorted and counted there)."""
        page = await self.client().list_jobs(**self._filter(), cursor=self.cursor or None, limit=PAGE_SIZE,
                                             sort=self.sort, order=self.order, count="true")  # fmt: skip
        self.rows = [job_row(j, self.may("jobs.write", j.get("queue")), self.zone_name()) for j in page["jobs"]]
        self.next_cursor = str(page.get("next_cursor") or "")
        self.total, self.total_exact = int(page.get("total") or 0), bool(page.get("total_exact", True))
        self.loaded = True
        shown = {r["id"] for r in self.rows}
        self.selected = [i for i in self.selected if i in shown]

    @rx.var
    def total_text(self) -> str:
        """ "50 of 37,412" (about, when the core estimated the count)."""
        return f"{len(self.rows):,} of {'' if self.total_exact else 'about '}{self.total:,}"

    @rx.var
    def share_query(self) -> str:
        """The filters and sort as the URL's query (a filtered view can be shared)."""
        values = {"state": self.f_state if self.f_state != "all" else "", "queue": self.f_queue.strip(),
                  "name": self.f_name.strip(), "tag": self.f_tag.strip(), "q": self.f_q.strip(),
                  "sort": self.sort if self.sort != "id" else "", "order": self.order if self.order != "desc" else ""}  # fmt: skip
        query = urlencode({k: v for k, v in values.items() if v})
        return f"?{query}" if query else ""

    def _read_url(self) -> None:
        """Filters and sort from the URL (`/jobs?state=dead&q=cust-42&sort=priority`)."""
        params = self.router.url.query_parameters
        self.f_state = str(params.get("state") or "all")
        self.f_queue, self.f_name, self.f_tag, self.f_q = (
            str(params.get(k) or "") for k in ("queue", "name", "tag", "q")
        )
        sort, order = str(params.get("sort") or "id"), str(params.get("order") or "desc")
        self.sort = sort if sort in SORTABLE.values() else "id"
        self.order = order if order in ("asc", "desc") else "desc"

    def _write_url(self) -> Any:
        return rx.call_script(f"window.history.replaceState(null, '', '/jobs' + {json.dumps(self.share_query)})")

    async def live_refresh(self, changes: list[Change] | None) -> None:
        if touched(changes, "job."):
            await self.fetch()

    async def load(self) -> Any:
        self._read_url()
        self.cursor, self.cursors = "", []
        return await self._fetch_or_fail()

    # -- filters, sort and paging

    async def set_filter(self, key: str, value: str) -> Any:
        setattr(self, f"f_{key}", value)
        self.cursor, self.cursors = "", []
        return _events(await self._fetch_or_fail(), self._write_url())

    async def sort_by(self, column: str) -> Any:
        """Sort by `column` on the server (again: the other way round), from the first page."""
        if column == self.sort:
            self.order = "asc" if self.order == "desc" else "desc"
        else:
            self.sort, self.order = column, "desc"
        self.cursor, self.cursors = "", []
        return _events(await self._fetch_or_fail(), self._write_url())

    @rx.var
    def sort_arrow(self) -> str:
        return "↓" if self.order == "desc" else "↑"

    async def next_page(self) -> Any:
        if self.next_cursor:
            self.cursors = [*self.cursors, self.cursor]
            self.cursor = self.next_cursor
        return await self._fetch_or_fail()

    async def prev_page(self) -> Any:
        if self.cursors:
            self.cursor = self.cursors[-1]
            self.cursors = self.cursors[:-1]
        return await self._fetch_or_fail()

    # -- selection

    def toggle(self, job_id: str, on: bool) -> None:
        if on and job_id not in self.selected:
            self.selected = [*self.selected, job_id]
        elif not on:
            self.selected = [i for i in self.selected if i != job_id]

    def toggle_all(self, on: bool) -> None:
        self.selected = [r["id"] for r in self.rows] if on else []

    # -- actions

    async def act(self, job_id: str, action: str) -> Any:
        try:
            await self.client().job_action(int(job_id), action)
        except JobDeckError as exc:
            return self.failed(exc)
        await self._fetch_or_fail()
        return rx.toast.success(f"job {job_id}: {action} done", duration=2000)

    def open_priority(self, job_id: str, current: str) -> None:
        self.prio_job, self.prio_value = job_id, current

    def close_priority(self) -> None:
        self.prio_job = ""

    async def save_priority(self) -> Any:
        job_id = self.prio_job
        try:
            await self.client().set_priority(int(job_id), int(self.prio_value))
        except ValueError:
            return rx.toast.error("the priority must be a whole number")
        except JobDeckError as exc:
            return self.failed(exc)
        self.prio_job = ""
        await self._fetch_or_fail()
        return rx.toast.success(f"job {job_id}: priority {self.prio_value}", duration=2000)

    async def ask_bulk(self, action: str, scope: str) -> Any:
        """A bulk action on the selection runs at once; on everything matching the filter it counts
        the jobs with a dry run (nothing changes), then asks."""
        if scope == "selected":
            return JobsState.bulk(action, scope)
        kwargs: dict[str, Any] = {}
        if action == "priority":  # the server wants the priority even to count
            try:
                kwargs["priority"] = int(self.bulk_priority)
            except ValueError:
                return rx.toast.error("set a whole-number priority first")
        try:
            got = await self.client().bulk(action, filter=self._filter(), dry_run=True, **kwargs)
        except JobDeckError as exc:
            return self.failed(exc)
        self.confirm_matched = int(got.get("matched") or 0)
        if not self.confirm_matched:
            return rx.toast.info(f"{action}: no job matches the filter", duration=3000)
        self.confirm_action = action
        return None

    @rx.var
    def confirm_count(self) -> str:
        """The dry run's count in words: "3,412 jobs"."""
        n = self.confirm_matched
        return f"{n:,} job{'' if n == 1 else 's'}"

    def cancel_bulk(self) -> None:
        self.confirm_action = ""

    @rx.var
    def filter_text(self) -> str:
        """The filter in words, for the confirmation."""
        parts = [f"state {self.f_state}" if self.f_state != "all" else ""]
        parts += [f"{label} {value.strip()!r}" for label, value in (("queue", self.f_queue),
                  ("name starting with", self.f_name), ("tag", self.f_tag)) if value.strip()]  # fmt: skip
        text = ", ".join(p for p in parts if p)
        return f"every job with {text}" if text else "every job in the store (no filter is set)"

    async def bulk(self, action: str, scope: str) -> Any:
        """`action` on the selected jobs (scope "selected") or on every job matching the filter ("filter")."""
        self.confirm_action = ""
        kwargs: dict[str, Any] = {}
        if action == "priority":
            try:
                kwargs["priority"] = int(self.bulk_priority)
            except ValueError:
                return rx.toast.error("set a whole-number priority first")
        if scope == "selected":
            kwargs["ids"] = [int(i) for i in self.selected]
        else:
            kwargs["filter"] = self._filter()
        try:
            got = await self.client().bulk(action, **kwargs)
        except JobDeckError as exc:
            return self.failed(exc)
        self.selected = []
        await self._fetch_or_fail()
        errors = got.get("errors") or []
        note = f"{action}: {got.get('changed', 0)} of {got.get('matched', 0)} jobs changed"
        if errors:
            return rx.toast.warning(f"{note}; {len(errors)} refused: {errors[0].get('message', '')}", duration=6000)
        return rx.toast.success(note, duration=3000)


def _events(*events: Any) -> list[Any]:
    """The events a handler returns, without the Nones (Reflex wants events only)."""
    return [e for e in events if e is not None]


# -- components


def priority_dialog() -> rx.Component:
    """The dialog that sets one job's priority."""
    return rx.dialog.root(
        rx.dialog.content(
            rx.dialog.title("Priority of job ", JobsState.prio_job),
            rx.form(
                rx.vstack(
                    rx.el.label("New priority (higher runs first)", html_for="prio-value"),
                    rx.input(
                        value=JobsState.prio_value,
                        on_change=lambda v: JobsState.set_field("prio_value", v),
                        id="prio-value",
                        type="number",
                        auto_focus=True,
                    ),
                    rx.hstack(
                        rx.button(
                            "Cancel",
                            variant="soft",
                            color_scheme="gray",
                            type="button",
                            on_click=JobsState.close_priority,
                        ),
                        rx.button("Set priority", type="submit", id="prio-save"),
                        justify="end",
                        width="100%",
                    ),
                    spacing="3",
                ),
                on_submit=lambda _: JobsState.save_priority(),
            ),
        ),
        open=JobsState.prio_job != "",
        on_open_change=lambda _: JobsState.close_priority(),
    )


def _action(label: str, icon: str, row: Any, flag: str, action: str) -> rx.Component:
    return rx.icon_button(
        rx.icon(icon, size=14),
        size="1",
        variant="soft",
        disabled=row[flag] == "",
        on_click=JobsState.act(row["id"], action),
        aria_label=f"{label} job " + row["id"],
        title=rx.cond(row["refuse"] != "", row["refuse"], label),
        class_name=f"act-{action}",
    )


def _row(row: Any) -> rx.Component:
    return rx.table.row(
        rx.table.cell(
            rx.checkbox(
                checked=JobsState.selected.contains(row["id"]),
                on_change=lambda on: JobsState.toggle(row["id"], on),
                aria_label="select job " + row["id"],
            )
        ),
        rx.table.cell(rx.link(row["id"], href="/jobs/" + row["id"])),
        rx.table.cell(row["name"]),
        rx.table.cell(row["queue"]),
        rx.table.cell(rx.badge(row["state"], color_scheme=row["color"], class_name="job-state")),
        rx.table.cell(row["priority"], class_name="job-priority"),
        rx.table.cell(row["attempts"]),
        rx.table.cell(rx.text(row["created"], title=row["created_title"], size="2", class_name="job-created")),
        rx.table.cell(row["duration"]),
        rx.table.cell(rx.text(row["note"], size="1", color_scheme="gray", trim="both", title=row["note_title"])),
        rx.table.cell(
            rx.hstack(
                rx.cond(
                    row["state"] == "paused",
                    _action("Resume", "play", row, "resumable", "resume"),
                    _action("Pause", "pause", row, "pausable", "pause"),
                ),
                rx.icon_button(
                    rx.icon("arrow-up-down", size=14),
                    size="1",
                    variant="soft",
                    disabled=row["prioritisable"] == "",
                    on_click=JobsState.open_priority(row["id"], row["priority"]),
                    aria_label="Change priority of job " + row["id"],
                    title=rx.cond(row["refuse"] != "", row["refuse"], "Change priority"),
                    class_name="act-priority",
                ),
                _action("Cancel", "x", row, "cancellable", "cancel"),
                _action("Retry", "rotate-ccw", row, "retryable", "retry"),
                _action("Run now", "fast-forward", row, "runnable", "run-now"),
                spacing="1",
            )
        ),
        id="job-row-" + row["id"],
        data_state=row["state"],
    )


def _header(title: str) -> rx.Component | str:
    """A column header; the sortable ones sort on the server when clicked (again: the other way)."""
    column = SORTABLE.get(title)
    if column is None:
        return title
    return rx.button(
        title,
        rx.cond(JobsState.sort == column, JobsState.sort_arrow, ""),
        variant="ghost",
        size="1",
        on_click=JobsState.sort_by(column),
        class_name=f"sort-{column}",
        aria_label=f"sort by {title.lower()}",
    )


def _filters() -> rx.Component:
    return rx.hstack(
        rx.vstack(
            rx.el.label("State", html_for="f-state", style={"font_size": "0.8rem"}),
            rx.select(
                ["all", *STATES],
                value=JobsState.f_state,
                on_change=lambda v: JobsState.set_filter("state", v),
                id="f-state",
            ),
            spacing="1",
        ),
        *(
            rx.vstack(
                rx.el.label(label, html_for=f"f-{key}", style={"font_size": "0.8rem"}),
                rx.input(
                    value=getattr(JobsState, f"f_{key}"),
                    id=f"f-{key}",
                    placeholder=hint,
                    on_change=lambda v, k=key: JobsState.set_filter(k, v),
                    debounce_timeout=300,
                ),
                spacing="1",
            )
            for key, label, hint in (
                ("q", "Search", "id, name, args, tag"),
                ("queue", "Queue", "any"),
                ("name", "Name starts with", "any"),
                ("tag", "Tag", "any"),
            )
        ),
        align="end",
        spacing="3",
        wrap="wrap",
    )


def _bulk_bar() -> rx.Component:
    def buttons(scope: str) -> list[rx.Component]:
        return [
            rx.button(
                a.capitalize(),
                size="1",
                variant="soft",
                on_click=JobsState.ask_bulk(a, scope),
                disabled=~AppState.can_write_jobs,
                id=f"bulk-{scope}-{a}",
            )
            for a in BULK_ACTIONS
        ] + [
            rx.button(
                "Set priority",
                size="1",
                variant="soft",
                on_click=JobsState.ask_bulk("priority", scope),
                disabled=~AppState.can_write_jobs,
                id=f"bulk-{scope}-priority",
            )
        ]

    return rx.vstack(
        rx.hstack(
            rx.el.label("Priority for bulk", html_for="bulk-priority", style={"font_size": "0.8rem"}),
            rx.input(
                value=JobsState.bulk_priority,
                on_change=lambda v: JobsState.set_field("bulk_priority", v),
                id="bulk-priority",
                width="6rem",
                type="number",
            ),
            rx.spacer(),
            rx.text("All matching the filter:", size="2", weight="medium"),
            *buttons("filter"),
            align="center",
            spacing="2",
            wrap="wrap",
            width="100%",
        ),
        rx.cond(
            JobsState.selected.length() > 0,
            rx.hstack(
                rx.text(JobsState.selected.length(), " selected:", size="2", weight="medium", id="selected-count"),
                *buttons("selected"),
                align="center",
                spacing="2",
                wrap="wrap",
            ),
            rx.fragment(),
        ),
        width="100%",
        spacing="2",
    )


def jobs_page() -> rx.Component:
    """The Jobs page."""
    return layout(
        "Jobs",
        rx.hstack(_filters(), rx.spacer(), submit_dialog(), align="end", width="100%"),
        _bulk_bar(),
        rx.table.root(
            rx.table.header(
                rx.table.row(
                    rx.table.column_header_cell(
                        rx.checkbox(on_change=JobsState.toggle_all, aria_label="select all jobs on this page")
                    ),
                    *(
                        rx.table.column_header_cell(_header(h))
                        for h in (
                            "ID",
                            "Name",
                            "Queue",
                            "State",
                            "Priority",
                            "Attempts",
                            "Created",
                            "Duration",
                            "Note",
                            "Actions",
                        )
                    ),
                )
            ),
            rx.table.body(rx.foreach(JobsState.rows, _row)),
            width="100%",
            size="1",
            id="jobs-table",
        ),
        rx.cond(
            JobsState.loaded,
            rx.cond(JobsState.rows.length() == 0, rx.text("No jobs match.", color_scheme="gray"), rx.fragment()),
            rx.hstack(rx.spinner(size="2"), rx.text("Loading jobs…", color_scheme="gray"), id="jobs-loading"),
        ),
        rx.hstack(
            rx.text(JobsState.total_text, " jobs", size="2", color_scheme="gray", id="jobs-total"),
            rx.button(
                "Previous",
                on_click=JobsState.prev_page,
                disabled=JobsState.cursors.length() == 0,
                variant="soft",
                size="1",
            ),
            rx.button(
                "Next", on_click=JobsState.next_page, disabled=JobsState.next_cursor == "", variant="soft", size="1"
            ),
            spacing="2",
        ),
        priority_dialog(),
        confirm_dialog(),
    )


def confirm_dialog() -> rx.Component:
    """Asks before a bulk action on everything matching the filter."""
    return rx.alert_dialog.root(
        rx.alert_dialog.content(
            rx.alert_dialog.title("Apply ", JobsState.confirm_action, " to ", JobsState.confirm_count, "?"),
            rx.alert_dialog.description(
                rx.text(
                    "This applies ",
                    rx.text.strong(JobsState.confirm_action),
                    " to ",
                    rx.text.strong(JobsState.confirm_count, id="bulk-count"),
                    " matching the filter: ",
                    JobsState.filter_text,
                    ". Jobs whose state does not allow it are left as they are.",
                ),
            ),
            rx.hstack(
                rx.alert_dialog.cancel(
                    rx.button("Cancel", variant="soft", color_scheme="gray", on_click=JobsState.cancel_bulk)
                ),
                rx.alert_dialog.action(
                    rx.button(
                        "Apply",
                        color_scheme="orange",
                        id="bulk-confirm",
                        on_click=JobsState.bulk(JobsState.confirm_action, "filter"),
                    )
                ),
                justify="end",
                spacing="3",
                margin_top="1rem",
            ),
        ),
        open=JobsState.confirm_action != "",
    )
